//! Detecting a recording's format and reading it into a [`Session`].

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::claude_line::{
    claude_code_line_from_str, claude_code_line_from_value, ClaudeLine, ClaudeMessage,
};
use super::openai;
use super::providers;
use super::session::{
    billed_usage, Format, RecordedArguments, RecordedCall, RecordedTurn, Session, UsageGranularity,
};
use super::spill::{HashedResults, SpillWriter};
use super::time::{parse_http_date_ms, parse_rfc3339_ms};
use crate::strict::field;
use crate::strict::value_from_str;
use budgetgate_core::turn::TokenUsage;

/// Reads `text` (the whole file) in whatever supported format it is in.
pub fn read_session(text: &str) -> Result<Session, String> {
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err("the file is empty".into());
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match value_from_str(trimmed) {
            Ok(value) => return from_json_document(value),
            // A duplicate key is refused wherever it is (a JSON document, or
            // the first line of JSON Lines), never read as its last value.
            Err(e) if e.is_data() => return Err(e.to_string()),
            Err(e) if is_too_deep(&e) => return Err(too_deep(&e)),
            Err(_) => {}
        }
        if trimmed.starts_with('{') {
            return from_json_lines(trimmed);
        }
    }
    check_yaml(trimmed)?;
    let yaml = yaml_rust2::YamlLoader::load_from_str(trimmed).map_err(|e| {
        if e.info().contains("duplicated key") {
            // A YAML mapping with the same key twice: refused, naming both.
            let key = e.info().trim_end_matches(": duplicated key in mapping");
            return format!(
                "line {}: duplicate key in a YAML mapping: {key}",
                e.marker().line()
            );
        }
        format!("not a recognised recording (not JSON, JSON Lines or YAML: {e}); expected a Claude Code session log, Anthropic Messages API exchanges, a VCR cassette or a SWE-agent .traj")
    })?;
    let [document] = yaml.as_slice() else {
        return Err(format!(
            "a YAML recording must hold exactly one document, this one holds {}",
            yaml.len()
        ));
    };
    let value = yaml_to_json(document, &mut Vec::new())?;
    if value.get("interactions").is_some() {
        return read_vcr(&value);
    }
    Err(unrecognised())
}

fn unrecognised() -> String {
    "not a recognised recording: expected a Claude Code session log or stream-json output (JSON Lines), a claude-trace log, Anthropic Messages API exchanges ({request, response} JSON or JSON Lines), a VCR cassette (interactions[], of Anthropic or OpenAI calls) or a SWE-agent .traj (trajectory[])".into()
}

/// A document that is one Claude Code line, as the reader takes it.
fn one_line(value: Value) -> Result<(usize, Box<ClaudeLine>), String> {
    claude_code_line_from_value(value)
        .map(|line| (1, line))
        .map_err(|e| format!("line 1: {e}"))
}

fn from_json_document(value: Value) -> Result<Session, String> {
    match &value {
        Value::Object(o) if o.contains_key("trajectory") => read_traj(&value),
        Value::Object(o) if o.contains_key("interactions") => read_vcr(&value),
        Value::Object(o) if is_exchange(o) || is_message(o) || is_api_error(o) => {
            read_exchanges(vec![("the document".into(), value)])
        }
        Value::Object(o) if o.contains_key("type") && o.contains_key("session_id") => {
            read_claude_code([one_line(value)], Format::ClaudeCodeStreamJson, false)
        }
        Value::Object(o) if o.contains_key("type") && o.contains_key("uuid") => {
            read_claude_code([one_line(value)], Format::ClaudeCode, false)
        }
        Value::Array(items)
            if !items.is_empty()
                && items.iter().all(|v| {
                    v.as_object().is_some_and(|o| {
                        is_exchange(o) || is_message(o) || is_request(o) || is_api_error(o)
                    })
                }) =>
        {
            read_exchanges(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("item {i}"), v.clone()))
                    .collect(),
            )
        }
        _ => Err(unrecognised()),
    }
}

/// The top-level keys of one JSON Lines line that decide the format, read
/// without building the line (`None`: not a JSON object, or not JSON).
#[derive(Default, Clone, Copy)]
struct LineKeys {
    kind: bool,
    uuid: bool,
    session_id_camel: bool,
    session_id_snake: bool,
    request_and_response: bool,
    request: bool,
    response: bool,
}

/// What the lines' top-level keys say about the format, line by line.
#[derive(Default)]
struct FormatProbe {
    /// Whether the first line is an object (`None`: no line yet).
    first_is_object: Option<bool>,
    /// Some line is not a `request`/`response` pair (a claude-trace log).
    not_all_pairs: bool,
    /// Some line has `type` and `sessionId` or `uuid` (a Claude Code log).
    claude_code: bool,
    /// Some line has `type` and `session_id` (stream-json output).
    snake: bool,
    /// Some line has `sessionId` (never in stream-json output).
    camel: bool,
}

impl FormatProbe {
    /// Takes the keys of the next non-blank line.
    fn add(&mut self, keys: Option<LineKeys>) {
        self.first_is_object.get_or_insert(keys.is_some());
        self.not_all_pairs |= !keys.is_some_and(|k| k.request_and_response);
        if let Some(k) = keys {
            self.claude_code |= k.kind && (k.session_id_camel || k.uuid);
            self.snake |= k.kind && k.session_id_snake;
            self.camel |= k.session_id_camel;
        }
    }

    /// Whether no later line can change [`Self::claude_code_format`]: a
    /// Claude Code log is certain once a line has `sessionId` (so it is not
    /// stream-json output) and one is not a trace pair.
    fn settled(&self) -> bool {
        self.first_is_object.is_some() && self.not_all_pairs && self.claude_code && self.camel
    }

    /// A Claude Code log or stream-json output, read line by line; `None`:
    /// another format, read whole.
    fn claude_code_format(&self) -> Option<Format> {
        let stream_json = self.snake && !self.camel;
        (self.first_is_object == Some(true)
            && self.not_all_pairs
            && (self.claude_code || stream_json))
            .then_some(if stream_json {
                Format::ClaudeCodeStreamJson
            } else {
                Format::ClaudeCode
            })
    }
}

fn line_keys(line: &str) -> Option<LineKeys> {
    super::claude_line::top_level_keys(line, |key, keys: &mut LineKeys| match key {
        "type" => keys.kind = true,
        "uuid" => keys.uuid = true,
        "sessionId" => keys.session_id_camel = true,
        "session_id" => keys.session_id_snake = true,
        "request" => keys.request = true,
        "response" => keys.response = true,
        _ => {}
    })
    .map(|mut keys| {
        keys.request_and_response = keys.request && keys.response;
        keys
    })
}

/// The lines of a Claude Code log or stream-json output, each parsed (and
/// pruned) only when the reader takes it, so that the parsed lines are
/// never all held at once. Errors as [`from_json_lines`] words them; a
/// last line that merely stops early sets `truncated`.
fn stream_lines<'a>(
    lines: &'a [&'a str],
    truncated: &'a std::cell::Cell<bool>,
) -> impl Iterator<Item = Result<(usize, Box<ClaudeLine>), String>> + 'a {
    let mut yielded = 0usize;
    lines.iter().enumerate().filter_map(move |(index, line)| {
        if is_blank(line) {
            return None;
        }
        Some(match claude_code_line_from_str(line) {
            Ok(value) => {
                yielded += 1;
                Ok((index + 1, value))
            }
            Err(e) if e.is_data() => Err(format!("line {}: {}", index + 1, without_position(&e))),
            Err(e) if is_too_deep(&e) => Err(format!("line {}: {}", index + 1, too_deep(&e))),
            Err(e) if index + 1 == lines.len() && yielded > 0 && e.is_eof() => {
                truncated.set(true);
                return None;
            }
            Err(e) => Err(format!("line {}: not JSON: {e}", index + 1)),
        })
    })
}

/// Reads a Claude Code log or stream-json output from `path` line by line,
/// never holding the whole file (for large files: the memory is then the
/// responses kept, whatever the file's size). A
/// first pass over the lines tells the format from their top-level keys; if
/// it is not one of those two, or gzip, `Ok(None)` (the caller reads it
/// whole, within its limit). Lines must be UTF-8; errors name the line as
/// [`read_session`] does. The session's responses are all held
/// ([`Session::turns`]); `replay` itself reads with
/// [`read_large_claude_code_spilled`].
pub fn read_large_claude_code(path: &std::path::Path) -> Result<Option<Session>, String> {
    let Some(mut session) = read_large_claude_code_spilled(path)? else {
        return Ok(None);
    };
    session.hold_all().map_err(spill_error)?;
    Ok(Some(session))
}

/// [`read_large_claude_code`], the responses no later line can change
/// written to a temporary file as they are read ([`Session::spilled`]): what
/// is held per response is then a few words, whatever the log holds.
pub fn read_large_claude_code_spilled(path: &std::path::Path) -> Result<Option<Session>, String> {
    use std::io::BufRead;
    let open = || {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .map_err(|e| format!("cannot read: {e}"))
    };
    let line_of = |index: usize, bytes: Vec<u8>| {
        String::from_utf8(bytes)
            .map_err(|e| {
                format!(
                    "line {}: not UTF-8 text (an invalid byte at column {})",
                    index + 1,
                    e.utf8_error().valid_up_to() + 1
                )
            })
            .map(|mut l| {
                if l.ends_with('\n') {
                    l.pop();
                }
                if l.ends_with('\r') {
                    l.pop();
                }
                l
            })
    };
    // A gzip file is not read this way (it is refused as too large).
    let mut magic = [0u8; 2];
    if std::io::Read::read_exact(&mut open()?, &mut magic).is_ok() && magic == [0x1f, 0x8b] {
        return Ok(None);
    }
    let mut probe = FormatProbe::default();
    // Lines as `split(b'\n')` yields them (the reading below): a last line
    // without its newline is a line.
    let mut count = 0usize;
    let mut reader = open()?;
    let read_error = |e: std::io::Error| format!("cannot read: {e}");
    let mut bytes = Vec::new();
    while !probe.settled() {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes).map_err(read_error)? == 0 {
            break;
        }
        count += 1;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        let line = line_of(count - 1, std::mem::take(&mut bytes))?;
        if !is_blank(&line) {
            probe.add(line_keys(line.trim_start_matches('\u{feff}')));
        }
    }
    // The format is known: the rest is only counted (the last line may be
    // an interrupted write); the reading checks it is UTF-8.
    let mut ends_with_newline = true;
    loop {
        let chunk = reader.fill_buf().map_err(read_error)?;
        let Some(&last) = chunk.last() else { break };
        count += memchr::memchr_iter(b'\n', chunk).count();
        ends_with_newline = last == b'\n';
        let n = chunk.len();
        reader.consume(n);
    }
    if !ends_with_newline {
        count += 1;
    }
    let Some(format) = probe.claude_code_format() else {
        return Ok(None);
    };
    let mut yielded = 0usize;
    let mut truncated = false;
    let lines = open()?
        .split(b'\n')
        .enumerate()
        .filter_map(|(index, bytes)| {
            let line = match bytes.map_err(|e| format!("cannot read: {e}")) {
                Ok(bytes) => match line_of(index, bytes) {
                    Ok(line) => line,
                    Err(e) => return Some(Err(e)),
                },
                Err(e) => return Some(Err(e)),
            };
            let text = if index == 0 {
                line.trim_start_matches('\u{feff}')
            } else {
                line.as_str()
            };
            if is_blank(text) {
                return None;
            }
            Some(match claude_code_line_from_str(text) {
                Ok(value) => {
                    yielded += 1;
                    Ok((index + 1, value))
                }
                Err(e) if e.is_data() => {
                    Err(format!("line {}: {}", index + 1, without_position(&e)))
                }
                Err(e) if is_too_deep(&e) => Err(format!("line {}: {}", index + 1, too_deep(&e))),
                Err(e) if index + 1 == count && yielded > 0 && e.is_eof() => {
                    truncated = true;
                    return None;
                }
                Err(e) => Err(format!("line {}: not JSON: {e}", index + 1)),
            })
        });
    let mut session = read_claude_code(lines, format, true)?;
    if truncated {
        session.notes.push(format!(
            "line {count}, the last, is not complete JSON (an interrupted write): skipped"
        ));
    }
    session
        .notes
        .push("a large Claude Code log: read line by line, never held whole".into());
    Ok(Some(session))
}

/// The lines of `text` exactly as [`str::lines`] gives them (split at `\n`,
/// a `\r` before it dropped, no empty line after a final `\n`), found with
/// `memchr`: on short lines `str::lines` took 4 % of `replay`'s time
/// (issue 14, throughput).
fn lines_of(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', bytes) {
        // `\n` is one byte in UTF-8, so both ends are character boundaries.
        let line = text.get(start..end).unwrap_or_default();
        lines.push(line.strip_suffix('\r').unwrap_or(line));
        start = end + 1;
    }
    if let Some(last) = text.get(start..).filter(|l| !l.is_empty()) {
        lines.push(last);
    }
    lines
}

/// Whether a line holds only white space (`str::trim` empty), answered
/// without trimming for the usual line, which opens with `{`.
fn is_blank(line: &str) -> bool {
    !line.starts_with('{') && line.trim().is_empty()
}

fn from_json_lines(text: &str) -> Result<Session, String> {
    let lines = lines_of(text);
    // The format from the lines' top-level keys (a cheap pass that builds
    // nothing): a Claude Code log or stream-json output is then read line by
    // line; the other formats take their lines whole.
    let mut probe = FormatProbe::default();
    for line in lines.iter().filter(|l| !is_blank(l)) {
        probe.add(line_keys(line));
        if probe.settled() {
            break;
        }
    }
    if let Some(format) = probe.claude_code_format() {
        let truncated = std::cell::Cell::new(false);
        let mut session = read_claude_code(stream_lines(&lines, &truncated), format, false)?;
        if truncated.get() {
            session.notes.push(format!(
                "line {}, the last, is not complete JSON (an interrupted write): skipped",
                lines.len()
            ));
        }
        return Ok(session);
    }
    let mut values = Vec::new();
    let mut truncated_last = false;
    for (index, line) in lines.iter().enumerate() {
        if is_blank(line) {
            continue;
        }
        match value_from_str(line) {
            Ok(mut value) => {
                prune_claude_code_line(&mut value);
                values.push((index + 1, value));
            }
            Err(e) if e.is_data() => {
                return Err(format!("line {}: {}", index + 1, without_position(&e)))
            }
            Err(e) if is_too_deep(&e) => {
                return Err(format!("line {}: {}", index + 1, too_deep(&e)))
            }
            // A log whose writer was interrupted ends with a partial line:
            // only the last line, and only if the text merely stops early.
            Err(e) if index + 1 == lines.len() && !values.is_empty() && e.is_eof() => {
                truncated_last = true;
            }
            Err(e) => return Err(format!("line {}: not JSON: {e}", index + 1)),
        }
    }
    let Some((_, first)) = values.first() else {
        return Err("the file is empty".into());
    };
    let first = first.as_object().ok_or_else(unrecognised)?;
    // Claude Code logs may open with `summary` or `file-history-snapshot`
    // lines; their messages carry `sessionId` and `uuid`.
    let claude_code = values.iter().any(|(_, v)| {
        v.get("type").is_some() && (v.get("sessionId").is_some() || v.get("uuid").is_some())
    });
    // `claude -p --output-format stream-json --verbose` (the Agent SDK's
    // transport): snake_case `session_id`, never the log's `sessionId`.
    let stream_json = values
        .iter()
        .any(|(_, v)| v.get("type").is_some() && v.get("session_id").is_some())
        && !values.iter().any(|(_, v)| v.get("sessionId").is_some());
    let trace = values.iter().all(|(_, v)| is_trace_pair(v));
    let mut session = if trace {
        read_claude_trace(values)?
    } else if stream_json || claude_code {
        let format = if stream_json {
            Format::ClaudeCodeStreamJson
        } else {
            Format::ClaudeCode
        };
        let lines = values.into_iter().map(|(at, value)| {
            claude_code_line_from_value(value)
                .map(|line| (at, line))
                .map_err(|e| format!("line {at}: {e}"))
        });
        read_claude_code(lines, format, false)?
    } else if is_exchange(first) || is_message(first) || is_request(first) {
        read_exchanges(
            values
                .into_iter()
                .map(|(line, v)| (format!("line {line}"), v))
                .collect(),
        )?
    } else {
        return Err(unrecognised());
    };
    if truncated_last {
        session.notes.push(format!(
            "line {}, the last, is not complete JSON (an interrupted write): skipped",
            lines.len()
        ));
    }
    Ok(session)
}

/// The keys of a Claude Code line (session log or stream-json) kept when a
/// file is read whole ([`from_json_lines`]'s general path); the Claude Code
/// reader itself reads lines with `claude_code_line_from_str`, which keeps
/// only what it reads.
const CLAUDE_CODE_KEYS: [&str; 13] = [
    "type",
    "uuid",
    "sessionId",
    "session_id",
    "timestamp",
    "requestId",
    "request_id",
    "parent_tool_use_id",
    "message",
    "subtype",
    "num_turns",
    "total_cost_usd",
    "isSidechain",
];

/// Drops from a Claude Code line what no reader looks at — tool results'
/// contents (`toolUseResult`, `tool_result.content`: whole files), thinking
/// text, progress lines' nested messages — so a long log is held in a
/// fraction of the memory its parsed lines would take. What decides
/// anything (ids, names, inputs, usage, stop reasons, result ids and
/// `is_error`, times) is kept; a line that is not a Claude Code line is left
/// as it is.
fn prune_claude_code_line(value: &mut Value) {
    let Value::Object(line) = value else {
        return;
    };
    let claude_code = line.contains_key("type")
        && (line.contains_key("uuid")
            || line.contains_key("sessionId")
            || line.contains_key("session_id"));
    if !claude_code {
        return;
    }
    line.retain(|k, _| CLAUDE_CODE_KEYS.contains(&k.as_str()));
    let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
    if !matches!(kind, "assistant" | "user") {
        line.remove("message");
        return;
    }
    let Some(Value::Array(blocks)) = line.get_mut("message").and_then(|m| m.get_mut("content"))
    else {
        return;
    };
    for block in blocks {
        if let Value::Object(block) = block {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    block.remove("content");
                }
                Some("thinking" | "redacted_thinking") => {
                    block.remove("thinking");
                    block.remove("signature");
                    block.remove("data");
                }
                _ => {}
            }
        }
    }
}

fn is_exchange(o: &Map<String, Value>) -> bool {
    o.contains_key("request") && o.contains_key("response")
}

fn is_message(o: &Map<String, Value>) -> bool {
    o.get("type").and_then(Value::as_str) == Some("message")
        || (o.contains_key("content") && o.contains_key("stop_reason"))
}

fn is_request(o: &Map<String, Value>) -> bool {
    o.contains_key("messages") && !o.contains_key("stop_reason")
}

/// A response message's fields, as a [`Value`] or as a Claude Code line's
/// [`ClaudeMessage`] holds them.
trait MessageFields {
    fn get(&self, key: &str) -> Option<&Value>;
}

impl MessageFields for Value {
    fn get(&self, key: &str) -> Option<&Value> {
        Value::get(self, key)
    }
}

impl MessageFields for ClaudeMessage {
    fn get(&self, key: &str) -> Option<&Value> {
        ClaudeMessage::get(self, key)
    }
}

/// A message's `stop_reason`: `None` when absent or null; any other type
/// is an error (it is never taken for null).
fn stop_reason_of(message: &impl MessageFields) -> Result<Option<String>, String> {
    match message.get("stop_reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(reason)) => Ok(Some(reason.clone())),
        Some(other) => Err(format!(
            "stop_reason is {}, neither a string nor null",
            brief(other)
        )),
    }
}

/// Whether serde_json stopped at its nesting limit (128 levels).
fn is_too_deep(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("recursion limit exceeded")
}

/// The error for JSON nested past serde_json's limit, with its position.
fn too_deep(e: &serde_json::Error) -> String {
    format!(
        "the JSON nests deeper than 128 levels (at line {} column {}); refused",
        e.line(),
        e.column()
    )
}

/// A serde_json error without its ` at line L column C` (for a text that is
/// one line of the file, where the line is named by the caller), keeping the
/// column.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) => format!("{message} (column {})", e.column()),
        None => text,
    }
}

/// A text shown in an error, cut to 40 characters.
fn brief_text(text: &str) -> String {
    if text.chars().count() <= 40 {
        text.to_owned()
    } else {
        text.chars().take(39).chain(['…']).collect()
    }
}

/// A JSON value shown in an error, cut to 40 characters.
fn brief(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 40 {
        text
    } else {
        text.chars().take(39).chain(['…']).collect()
    }
}

/// The turn `message` records (times filled by the caller); its calls'
/// inputs are read by `read_input`.
fn turn_from_message(
    message: &impl MessageFields,
    read_input: ReadInput,
) -> Result<RecordedTurn, String> {
    let (usage, iterations) = match message.get("usage") {
        None | Some(Value::Null) => (TokenUsage::ZERO, Vec::new()),
        Some(u) => billed_usage(u)?,
    };
    let mut turn = RecordedTurn {
        message_id: message.get("id").and_then(Value::as_str).map(str::to_owned),
        stop_reason: stop_reason_of(message)?,
        usage: Some(usage),
        iterations,
        model: message
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ..RecordedTurn::default()
    };
    add_blocks(&mut turn, message.get("content"), read_input)?;
    Ok(turn)
}

/// How a reader keeps a call's `input`: its fingerprints, taken as the call
/// is read (the value is not kept).
type ReadInput = fn(&Value) -> RecordedArguments;

/// A Claude Code log's `input`: always read, whatever it holds.
fn recorded_input(input: &Value) -> RecordedArguments {
    RecordedArguments::of_value(input)
}

/// An exchange's `input`: a string with the [`UNREADABLE`] mark, which the
/// stream rebuilders write for arguments cut off mid-way, is unreadable.
fn exchange_input(input: &Value) -> RecordedArguments {
    match input {
        Value::String(s) if s.starts_with(UNREADABLE) => RecordedArguments::Unreadable,
        _ => RecordedArguments::of_value(input),
    }
}

/// Adds `content`'s text, calls and server tool uses to `turn`; the calls'
/// inputs are read by `read_input`.
fn add_blocks(
    turn: &mut RecordedTurn,
    content: Option<&Value>,
    read_input: ReadInput,
) -> Result<(), String> {
    match content {
        Some(Value::Array(blocks)) => {
            for (at, block) in blocks.iter().enumerate() {
                match field(block, "type").and_then(Value::as_str) {
                    Some("text") => {
                        turn.text_chars += field(block, "text")
                            .and_then(Value::as_str)
                            .map_or(0, |t| t.chars().count())
                    }
                    Some("tool_use") => {
                        let string = |key: &str| match field(block, key) {
                            Some(Value::String(text)) => Ok(text),
                            None => Err(format!("content block {at} (tool_use) has no `{key}`")),
                            Some(other) => Err(format!(
                                "content block {at} (tool_use): `{key}` is {}, not a string",
                                brief(other)
                            )),
                        };
                        let (id, name) = (string("id")?.to_owned(), string("name")?.to_owned());
                        turn.calls.push(RecordedCall {
                            id,
                            name,
                            arguments: read_input(field(block, "input").unwrap_or(&Value::Null)),
                            recorded_error: None,
                        });
                    }
                    // Run by the API (web search, code execution): not the
                    // agent's to decide, but counted on their own line.
                    Some("server_tool_use") => turn.server_calls.push(
                        field(block, "name")
                            .and_then(Value::as_str)
                            .unwrap_or("server_tool_use")
                            .to_owned(),
                    ),
                    _ => {}
                }
            }
        }
        Some(Value::String(text)) => turn.text_chars += text.chars().count(),
        None | Some(Value::Null) => {}
        // Never taken for "no blocks": a tool call could hide in it.
        Some(other) => {
            return Err(format!(
                "`content` is {}, neither a list of blocks nor a string",
                brief(other)
            ))
        }
    }
    Ok(())
}

/// Where a reader keeps the tool results it finds: `tool_use_id` →
/// is_error, the last one of an id winning.
trait ResultSink {
    fn record(&mut self, id: &str, error: bool);
}

impl ResultSink for HashMap<String, bool> {
    fn record(&mut self, id: &str, error: bool) {
        self.insert(id.to_owned(), error);
    }
}

/// Tool results found in user content: `tool_use_id` → is_error.
fn collect_results(content: Option<&Value>, into: &mut impl ResultSink) {
    if let Some(Value::Array(blocks)) = content {
        for block in blocks {
            if field(block, "type").and_then(Value::as_str) == Some("tool_result") {
                if let Some(id) = field(block, "tool_use_id").and_then(Value::as_str) {
                    let error = field(block, "is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    into.record(id, error);
                }
            }
        }
    }
}

fn apply_results(turns: &mut [RecordedTurn], results: &HashMap<String, bool>) {
    for call in turns.iter_mut().flat_map(|t| t.calls.iter_mut()) {
        call.recorded_error = results.get(&call.id).copied();
    }
}

// ---------------------------------------------------------------- Claude Code

/// The response later Claude Code lines may continue.
struct OpenResponse {
    /// Its index in the turns.
    turn: usize,
    /// Its `message.id`.
    message_id: String,
    /// The line's `requestId`, if it has one.
    request_id: Option<String>,
    /// A user line came after its last line.
    user_since: bool,
    /// A user line came that is not only results of its calls.
    broken: bool,
    /// Stream-json output: no `requestId`, so a user line of only this
    /// response's results between its lines does not end it.
    stream_json: bool,
}

impl OpenResponse {
    /// Whether an assistant line with these ids continues this response:
    /// same `message.id` and same `requestId`, and no user line between
    /// them other than results of this response's calls. Without a
    /// `requestId`, no user line at all may come between. When in doubt the
    /// line is another response (over-counting cost is safe, under-counting
    /// is not).
    fn continued_by(&self, message_id: &str, request_id: Option<&str>) -> bool {
        self.message_id == message_id
            && self.request_id.as_deref() == request_id
            && !self.broken
            && (request_id.is_some() || self.stream_json || !self.user_since)
    }
}

/// Whether a user message holds only `tool_result` blocks answering `calls`.
fn only_results_of(message: Option<&ClaudeMessage>, calls: &[RecordedCall]) -> bool {
    let Some(Value::Array(blocks)) = message.and_then(|m| m.get("content")) else {
        return false;
    };
    !blocks.is_empty()
        && blocks.iter().all(|block| {
            block.get("type").and_then(Value::as_str) == Some("tool_result")
                && block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| calls.iter().any(|c| c.id == id))
        })
}

/// The turns of each `message.id`, kept by the reader so that a long log is
/// not scanned once per line, without a second copy of the ids: the last
/// turn of each id's hash, and for each turn the one before it of the same
/// hash. A walk compares the turns' ids themselves, so two ids of one hash
/// never mix.
#[derive(Default)]
struct TurnsById<S = std::hash::RandomState> {
    hasher: S,
    /// The id's hash to its last turn.
    last: HashMap<u64, usize>,
    /// For each turn, in order, the one before it whose id has its hash.
    before: Vec<Option<usize>>,
}

impl<S: std::hash::BuildHasher> TurnsById<S> {
    /// The turns whose `message.id` is `id`, the latest first; `is_id` tells
    /// whether a turn's id is `id` (the turn may be in a temporary file).
    fn of(
        &self,
        id: &str,
        mut is_id: impl FnMut(usize) -> Result<bool, String>,
    ) -> Result<Vec<usize>, String> {
        let mut next = self.last.get(&self.hasher.hash_one(id)).copied();
        let mut found = Vec::new();
        while let Some(at) = next {
            next = self.before.get(at).copied().flatten();
            if is_id(at)? {
                found.push(at);
            }
        }
        Ok(found)
    }

    /// Adds the next turn, whose `message.id` is `id`.
    fn push(&mut self, id: &str) {
        let turn = self.before.len();
        self.before
            .push(self.last.insert(self.hasher.hash_one(id), turn));
    }
}

/// `calls` without the blocks that are an earlier line's block logged again:
/// the same call id, name and input in a response of the same `message.id`
/// (Claude Code writes one response over several lines and may repeat a
/// block). Such a repeat is one call, not a reuse of its id; a block that
/// reuses an id with another name or input is kept, and the gate refuses it.
/// Returns the calls kept and how many were dropped.
/// `same_id` gives the indices of the turns of that `message.id`.
fn drop_logged_again(
    turns: &ReadTurns,
    same_id: &[usize],
    calls: Vec<RecordedCall>,
) -> Result<(Vec<RecordedCall>, usize), String> {
    let earlier_turns = same_id
        .iter()
        .map(|&at| turns.calls_of(at))
        .collect::<Result<Vec<_>, _>>()?;
    let earlier: Vec<&RecordedCall> = earlier_turns.iter().flat_map(|c| c.iter()).collect();
    let mut kept: Vec<RecordedCall> = Vec::with_capacity(calls.len());
    let mut dropped = 0;
    for call in calls {
        let same = |c: &&RecordedCall| {
            c.id == call.id && c.name == call.name && c.arguments.same_value(&call.arguments)
        };
        if earlier.iter().any(same) || kept.iter().any(|c| same(&c)) {
            dropped += 1;
        } else {
            kept.push(call);
        }
    }
    Ok((kept, dropped))
}

/// The results of a Claude Code log's calls: by id, or, for a long log
/// whose responses go to a temporary file, by the ids' hashes.
enum ResultIds {
    Exact(HashMap<String, bool>),
    Hashed(HashedResults),
}

impl ResultSink for ResultIds {
    fn record(&mut self, id: &str, error: bool) {
        match self {
            Self::Exact(map) => map.record(id, error),
            Self::Hashed(hashed) => hashed.insert(id, error),
        }
    }
}

/// The turns a Claude Code reader has made: all in memory, or, for a long
/// log (`spill`), each written to a temporary file once no later line can
/// change it (it is no thread's open response), so that only the open ones
/// are held (issue 14, memory).
struct ReadTurns {
    spill: Option<SpillWriter>,
    /// The turns after the spilled ones.
    held: Vec<RecordedTurn>,
    /// The first time a turn was requested at (absolute).
    origin: Option<u64>,
    /// Of the spilled turns: how many are a sub-agent's, how many have no
    /// stop reason.
    spilled_agents: usize,
    spilled_inferred: usize,
}

impl ReadTurns {
    /// With `spill`, a temporary file for the closed turns; where none can
    /// be made (no writable temporary directory), every turn is held, as
    /// before there was one.
    fn new(spill: bool) -> Self {
        Self {
            spill: if spill { SpillWriter::new().ok() } else { None },
            held: Vec::new(),
            origin: None,
            spilled_agents: 0,
            spilled_inferred: 0,
        }
    }

    fn first_held(&self) -> usize {
        self.spill.as_ref().map_or(0, SpillWriter::len)
    }

    fn len(&self) -> usize {
        self.first_held() + self.held.len()
    }

    fn push(&mut self, turn: RecordedTurn) {
        if self.origin.is_none() {
            self.origin = turn.requested_at_ms;
        }
        self.held.push(turn);
    }

    /// A held turn (an open response is always held).
    fn held(&self, at: usize) -> &RecordedTurn {
        &self.held[at - self.first_held()]
    }

    fn held_mut(&mut self, at: usize) -> &mut RecordedTurn {
        let first = self.first_held();
        &mut self.held[at - first]
    }

    fn message_id_is(&self, at: usize, id: &str) -> Result<bool, String> {
        match at.checked_sub(self.first_held()) {
            Some(held) => Ok(self
                .held
                .get(held)
                .is_some_and(|t| t.message_id.as_deref() == Some(id))),
            None => self
                .read_back(at)
                .map(|t| t.message_id.as_deref() == Some(id)),
        }
    }

    fn calls_of(&self, at: usize) -> Result<std::borrow::Cow<'_, [RecordedCall]>, String> {
        match at.checked_sub(self.first_held()) {
            Some(held) => Ok(self
                .held
                .get(held)
                .map_or(&[][..], |t| t.calls.as_slice())
                .into()),
            None => self.read_back(at).map(|t| t.calls.into()),
        }
    }

    fn read_back(&self, at: usize) -> Result<RecordedTurn, String> {
        match &self.spill {
            Some(spill) => spill.get(at).map_err(spill_error),
            None => Err(format!("internal: turn {at} is neither held nor spilled")),
        }
    }

    /// Spills the held turns before `first_open`, the first turn later
    /// lines may still change (all of them when `None`); nothing when not
    /// spilling.
    fn spill_closed(&mut self, first_open: Option<usize>) -> Result<(), String> {
        let first = self.first_held();
        let Some(spill) = &mut self.spill else {
            return Ok(());
        };
        let until = first_open.unwrap_or(first + self.held.len());
        let closed = until.saturating_sub(first).min(self.held.len());
        for turn in self.held.drain(..closed) {
            self.spilled_agents += usize::from(turn.agent.is_some());
            self.spilled_inferred += usize::from(turn.stop_reason.is_none());
            spill.push(&turn).map_err(spill_error)?;
        }
        Ok(())
    }
}

fn spill_error(e: std::io::Error) -> String {
    format!("cannot keep the responses in a temporary file: {e}")
}

/// Reads a Claude Code log or stream-json output; with `spill`, the
/// responses no later line can change go to a temporary file as they are
/// read ([`Session::spilled`]).
fn read_claude_code(
    lines: impl IntoIterator<Item = Result<(usize, Box<ClaudeLine>), String>>,
    format: Format,
    spill: bool,
) -> Result<Session, String> {
    let stream_json = format == Format::ClaudeCodeStreamJson;
    let mut turns = ReadTurns::new(spill);
    let spill = turns.spill.is_some();
    // When spilling, the turns of `opens`, in order: the first is where the
    // spilled turns end (kept apart so that many threads cost no walk).
    let mut open_turns: BTreeSet<usize> = BTreeSet::new();
    // The response each thread may continue: the main agent (`None`) and,
    // in stream-json output, each sub-agent by its `parent_tool_use_id`
    // (parallel sub-agents' lines interleave).
    let mut opens: HashMap<Option<String>, OpenResponse> = HashMap::new();
    let mut result_notes = Vec::new();
    // The turns of each `message.id`; an id met again in a new turn is one
    // split in several.
    let mut by_message: TurnsById = TurnsById::default();
    // How many responses reuse an earlier one's id, and the first such id.
    let (mut split_count, mut split_first) = (0usize, None::<String>);
    let mut results = if spill {
        ResultIds::Hashed(HashedResults::default())
    } else {
        ResultIds::Exact(HashMap::new())
    };
    let mut start: Option<u64> = None;
    let mut last_time: Option<u64> = None;
    let mut synthetic = 0usize;
    let mut skipped = 0usize;
    let mut bad_times = 0usize;
    let mut repeated_blocks = 0usize;
    let mut lines_read = 0usize;
    for item in lines {
        let (line_no, line) = item?;
        let message = line.message.as_ref();
        let (line_no, line) = (&line_no, &line);
        lines_read += 1;
        let time = match line.get("timestamp") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let time = value.as_str().and_then(parse_rfc3339_ms);
                if time.is_none() {
                    bad_times += 1;
                }
                time
            }
        };
        if start.is_none() {
            start = time;
        }
        let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
        let thread: Option<String> = if stream_json {
            line.get("parent_tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        } else {
            None
        };
        match kind {
            "assistant" => {
                let Some(message) = message else {
                    skipped += 1;
                    continue;
                };
                if message.get("model").and_then(Value::as_str) == Some("<synthetic>") {
                    synthetic += 1;
                    continue;
                }
                let Some(id) = message.get("id").and_then(Value::as_str).map(str::to_owned) else {
                    return Err(format!(
                        "line {line_no}: an assistant message without `message.id`"
                    ));
                };
                let id = id.as_str();
                let request_key = if stream_json {
                    "request_id"
                } else {
                    "requestId"
                };
                let request_id = match line.get(request_key) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(r)) => Some(r.as_str()),
                    Some(other) => {
                        return Err(format!(
                            "line {line_no}: {request_key} is {}, not a string",
                            brief(other)
                        ))
                    }
                };
                let (usage, iterations) = match message.get("usage") {
                    None | Some(Value::Null) => (TokenUsage::ZERO, Vec::new()),
                    Some(u) => billed_usage(u).map_err(|e| format!("line {line_no}: {e}"))?,
                };
                let continued = opens
                    .get(&thread)
                    .filter(|o| o.continued_by(id, request_id))
                    .map(|o| o.turn);
                let response = continued.unwrap_or(turns.len());
                let context = |e: String| format!("line {line_no} (response {response}): {e}");
                match continued {
                    Some(index) => {
                        // A later line of the same response: same usage,
                        // repeated (output_tokens may grow): keep the largest.
                        let turn = turns.held_mut(index);
                        let old = turn.usage.unwrap_or(TokenUsage::ZERO);
                        turn.usage = Some(TokenUsage {
                            input_tokens: old.input_tokens.max(usage.input_tokens),
                            output_tokens: old.output_tokens.max(usage.output_tokens),
                            cache_read_input_tokens: old
                                .cache_read_input_tokens
                                .max(usage.cache_read_input_tokens),
                            cache_creation_input_tokens: old
                                .cache_creation_input_tokens
                                .max(usage.cache_creation_input_tokens),
                        });
                        if turn.iterations.len() < iterations.len() {
                            turn.iterations = iterations;
                        }
                        if let Some(reason) = stop_reason_of(message).map_err(context)? {
                            turn.stop_reason = Some(reason);
                        }
                        let before = turn.calls.len();
                        add_blocks(turn, message.get("content"), recorded_input)
                            .map_err(context)?;
                        let added = turn.calls.split_off(before);
                        let same_id = by_message.of(id, |at| turns.message_id_is(at, id))?;
                        let kept = drop_logged_again(&turns, &same_id, added)?;
                        repeated_blocks += kept.1;
                        // Held to the end: no room to spare (pushing a
                        // call left room for four).
                        let calls = &mut turns.held_mut(index).calls;
                        calls.extend(kept.0);
                        calls.shrink_to_fit();
                    }
                    None => {
                        let mut turn =
                            turn_from_message(message, recorded_input).map_err(context)?;
                        let calls = std::mem::take(&mut turn.calls);
                        let same_id = by_message.of(id, |at| turns.message_id_is(at, id))?;
                        let kept = drop_logged_again(&turns, &same_id, calls)?;
                        repeated_blocks += kept.1;
                        turn.calls = kept.0;
                        turn.usage = Some(usage);
                        turn.iterations = iterations;
                        // Absolute for now; counted from the first model
                        // call once every response is read.
                        turn.requested_at_ms = last_time;
                        if !same_id.is_empty() {
                            split_count += 1;
                            split_first.get_or_insert_with(|| id.to_owned());
                        }
                        by_message.push(id);
                        turn.agent = thread.as_ref().map(|t| format!("Task {t}"));
                        let closed = opens.insert(
                            thread.clone(),
                            OpenResponse {
                                turn: turns.len(),
                                message_id: id.to_owned(),
                                request_id: request_id.map(str::to_owned),
                                user_since: false,
                                broken: false,
                                stream_json,
                            },
                        );
                        if spill {
                            if let Some(closed) = closed {
                                open_turns.remove(&closed.turn);
                            }
                            open_turns.insert(turns.len());
                        }
                        turns.push(turn);
                        turns.spill_closed(open_turns.first().copied())?;
                    }
                }
            }
            "user" => {
                if let Some(message) = message {
                    collect_results(message.get("content"), &mut results);
                }
                if let Some(o) = opens.get_mut(&thread) {
                    o.user_since = true;
                    if !only_results_of(message, &turns.held(o.turn).calls) {
                        o.broken = true;
                    }
                }
            }
            "result" if stream_json => {
                // The run's own summary: shown, not counted (the responses
                // are counted one by one).
                let turns_said = line.get("num_turns").and_then(Value::as_u64);
                let cost = line.get("total_cost_usd").and_then(Value::as_f64);
                result_notes.push(format!(
                    "line {line_no}: result line ({}{}): a summary, not counted",
                    turns_said.map_or("num_turns not given".into(), |n| format!("num_turns {n}")),
                    cost.map_or(String::new(), |c| format!(", total_cost_usd {c}"))
                ));
            }
            _ => {}
        }
        if time.is_some() {
            last_time = time;
        }
    }
    if turns.len() == 0 {
        return Err("a Claude Code log with no assistant responses".into());
    }
    let count = turns.len();
    let ReadTurns {
        spill,
        held: mut turns,
        origin,
        spilled_agents,
        spilled_inferred,
    } = turns;
    // The clock starts at the first model call, not at the first
    // timestamped line (a startup hook, copied context, a summary).
    if let Some(origin) = origin {
        for turn in &mut turns {
            turn.requested_at_ms = turn.requested_at_ms.map(|t| t.saturating_sub(origin));
        }
    }
    let spilled = match results {
        ResultIds::Exact(results) => {
            apply_results(&mut turns, &results);
            None
        }
        ResultIds::Hashed(mut results) => {
            results.finish();
            for call in turns.iter_mut().flat_map(|t| t.calls.iter_mut()) {
                call.recorded_error = results.get(&call.id);
            }
            match spill {
                Some(spill) => Some(std::sync::Arc::new(
                    spill.finish(results, origin).map_err(spill_error)?,
                )),
                None => None,
            }
        }
    };
    let mut notes = vec![if stream_json {
        format!(
            "{lines_read} lines; {count} responses (lines of one response share message.id, with its tool results between them; counted once)"
        )
    } else {
        format!(
            "{lines_read} lines; {count} responses (lines of one response, sharing message.id and requestId, counted once)"
        )
    }];
    notes.extend(result_notes);
    let agents = spilled_agents + turns.iter().filter(|t| t.agent.is_some()).count();
    if agents > 0 {
        notes.push(format!(
            "{agents} responses are sub-agents' (parent_tool_use_id set): counted in the total"
        ));
    }
    if let Some(first) = split_first {
        notes.push(format!(
            "{split_count} response(s) reuse the message.id of an earlier response (another requestId, or a user message between them), e.g. {first}: each counted as its own model call"
        ));
    }
    let inferred = spilled_inferred + turns.iter().filter(|t| t.stop_reason.is_none()).count();
    if inferred > 0 {
        notes.push(format!(
            "stop_reason is null on {inferred} of {count} responses: inferred from the blocks (a tool_use block makes a tool_use turn, else end_turn)"
        ));
    }
    if synthetic > 0 {
        notes.push(format!(
            "{synthetic} synthetic assistant lines (no model call) skipped"
        ));
    }
    if repeated_blocks > 0 {
        notes.push(format!(
            "{repeated_blocks} tool_use block(s) logged again on a later line of the same message.id (same id, name and input): read once, not as a reused call id"
        ));
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} assistant lines without a message skipped"
        ));
    }
    if bad_times > 0 {
        notes.push(format!(
            "{bad_times} lines have a timestamp that cannot be read (RFC 3339 expected): their time is not used"
        ));
    }
    if start.is_none() {
        notes.push("no timestamps: the time limit is not checked".into());
    }
    Ok(Session {
        spilled,
        format,
        turns,
        usage: UsageGranularity::PerTurn,
        declared_tools: None,
        ends_complete: false,
        notes,
        time_origin_ms: origin,
    })
}

// ------------------------------------------------- Anthropic exchanges / VCR

/// One exchange: the request body (if any), the response body, the
/// response's time (if any).
struct Exchange {
    /// Where it is in the file, for messages (`line 3`, `interaction 2`).
    label: String,
    request: Option<Value>,
    response: Value,
    time_ms: Option<u64>,
    /// When the request was sent, where the recording says (claude-trace).
    request_ms: Option<u64>,
    /// Why the reply is cut off (a stream without `message_stop`).
    cut_off: Option<String>,
}

/// An API error object (`{"type": "error", "error": {…}}`): no model turn.
fn is_api_error(o: &Map<String, Value>) -> bool {
    o.get("type").and_then(Value::as_str) == Some("error")
}

/// The note for an API error response skipped.
fn api_error_note(label: &str, status: Option<u64>, body: &Value, streamed: bool) -> String {
    let kind = body
        .get("error")
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .map_or(String::new(), |k| format!(", {k}"));
    format!(
        "{label}: API error response (status {}{kind}{}), skipped: no model turn",
        status.map_or("unknown".into(), |c| c.to_string()),
        if streamed {
            ", an error event in the stream"
        } else {
            ""
        }
    )
}

/// Exchanges from JSON objects, each with a label for messages (`line 3`,
/// `item 2`).
fn read_exchanges(values: Vec<(String, Value)>) -> Result<Session, String> {
    let mut exchanges = Vec::new();
    let mut notes = Vec::new();
    let mut pending_request: Option<Value> = None;
    for (label, value) in values {
        let Some(object) = value.as_object() else {
            return Err(format!("{label}: not a JSON object"));
        };
        let (request, response) = if is_exchange(object) {
            (
                object.get("request").cloned(),
                object.get("response").cloned().unwrap_or(Value::Null),
            )
        } else if is_message(object) || is_api_error(object) {
            (pending_request.take(), value)
        } else if is_request(object) {
            pending_request = Some(value);
            continue;
        } else {
            return Err(format!(
                "{label}: neither a request, a response nor a {{request, response}} pair"
            ));
        };
        match response.as_object() {
            Some(r) if is_api_error(r) => {
                notes.push(api_error_note(&label, None, &response, false));
                continue;
            }
            Some(r) if is_message(r) => {}
            _ if is_token_count(&response) => {
                notes.push(format!(
                    "{label}: a token count (count_tokens), not a model call: skipped"
                ));
                continue;
            }
            _ => {
                return Err(format!(
                    "{label}: the response is not an Anthropic Messages API message (no type \"message\", nor content and stop_reason)"
                ))
            }
        }
        exchanges.push(Exchange {
            label,
            request,
            response,
            time_ms: None,
            request_ms: None,
            cut_off: None,
        });
    }
    build_from_exchanges(Format::AnthropicExchanges, exchanges, notes)
}

/// What a request's URI says the exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// A model call, by the API's own path.
    Model(ModelApi),
    /// Anything else: token counting (`/v1/messages/count_tokens`), the
    /// Files API, model lists, image downloads, other services.
    Other,
    /// No URI recorded: the bodies decide.
    Unknown,
}

/// The endpoint a VCR request names (`uri`, or `url`), with the URI shown
/// in notes.
fn endpoint_of(request: Option<&Value>) -> (Endpoint, String) {
    let Some(uri) = request
        .and_then(|r| r.get("uri").or_else(|| r.get("url")))
        .and_then(Value::as_str)
    else {
        return (Endpoint::Unknown, String::new());
    };
    let method = request
        .and_then(|r| r.get("method"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let path = uri
        .split(['?', '#'])
        .next()
        .unwrap_or(uri)
        .trim_end_matches('/');
    // The path without the host, which says what the call was.
    let local = path.split_once("://").map_or(path, |(_, rest)| {
        rest.find('/').map_or("/", |at| &rest[at..])
    });
    let local: String = if local.chars().count() > 60 {
        local.chars().take(59).chain(['…']).collect()
    } else {
        local.to_owned()
    };
    let shown = format!("{method} {local}").trim().to_owned();
    (
        ModelApi::of_path(path).map_or(Endpoint::Other, Endpoint::Model),
        shown,
    )
}

/// The model APIs a recorded URI can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelApi {
    /// Anthropic Messages (`…/v1/messages`).
    AnthropicMessages,
    /// OpenAI Chat Completions (`…/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`…/responses`).
    OpenAiResponses,
    /// Amazon Bedrock Converse (`…/model/ID/converse`, `converse-stream`).
    BedrockConverse,
    /// Amazon Bedrock InvokeModel (`…/model/ID/invoke`): the provider's own
    /// body (an Anthropic model answers with a Messages API message).
    BedrockInvoke,
    /// Google Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl ModelApi {
    fn of_path(path: &str) -> Option<Self> {
        let last = path.rsplit('/').next().unwrap_or(path);
        Some(if path.ends_with("/messages") {
            Self::AnthropicMessages
        } else if path.ends_with("/chat/completions") {
            Self::OpenAiChat
        } else if path.ends_with("/responses") {
            Self::OpenAiResponses
        } else if path.contains("/model/") && (last == "converse" || last == "converse-stream") {
            Self::BedrockConverse
        } else if path.contains("/model/")
            && (last == "invoke" || last == "invoke-with-response-stream")
        {
            Self::BedrockInvoke
        } else if last.ends_with(":generateContent") || last.ends_with(":streamGenerateContent") {
            Self::Gemini
        } else {
            return None;
        })
    }

    /// The API in words, for refusals.
    const fn description(self) -> &'static str {
        match self {
            Self::AnthropicMessages => "an Anthropic Messages API call",
            Self::OpenAiChat => "an OpenAI Chat Completions call",
            Self::OpenAiResponses => "an OpenAI Responses API call",
            Self::BedrockConverse => "an Amazon Bedrock Converse call",
            Self::BedrockInvoke => "an Amazon Bedrock InvokeModel call",
            Self::Gemini => "a Google Gemini generateContent call",
        }
    }
}

/// Whether a JSON Lines value is a claude-trace pair: `{request: {url, …},
/// response: {status_code, …} | null, logged_at}`.
fn is_trace_pair(value: &Value) -> bool {
    value
        .get("request")
        .is_some_and(|r| r.get("url").is_some() && r.get("body").is_some())
        && value
            .get("response")
            .is_some_and(|r| r.is_null() || r.get("status_code").is_some())
}

/// A claude-trace timestamp (Unix seconds, fractional) in milliseconds.
fn trace_ms(part: Option<&Value>) -> Option<u64> {
    let seconds = part?.get("timestamp")?.as_f64()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64)
}

/// claude-trace logs (`.claude-trace/log-*.jsonl`, the usual capture of
/// Claude Code's own API traffic): one request/response pair per line, the
/// response body as JSON (`body`) or as the raw event stream (`body_raw`).
/// Calls that are not model calls (token counting, `--include-all-requests`
/// extras) are skipped with a note; a request without a response (orphaned:
/// the log ended first) is noted and not counted.
fn read_claude_trace(lines: Vec<(usize, Value)>) -> Result<Session, String> {
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut notes = Vec::new();
    let mut not_model = Vec::new();
    for (line_no, pair) in lines {
        let label = format!("line {line_no}");
        if !is_trace_pair(&pair) {
            return Err(format!("{label}: not a claude-trace request/response pair"));
        }
        let request = &pair["request"];
        let (endpoint, uri) = endpoint_of(Some(request));
        let response = &pair["response"];
        if response.is_null() {
            notes.push(format!(
                "{label}: {uri}: no response recorded (orphaned request): not counted"
            ));
            continue;
        }
        let status = response.get("status_code").and_then(Value::as_u64);
        let (body, streamed, cut_off) = match (response.get("body"), response.get("body_raw")) {
            (Some(body), _) if body.is_object() => (body.clone(), false, None),
            (_, Some(Value::String(raw))) if raw.contains("data:") => match message_from_sse(raw) {
                Ok((body, cut_off)) => (body, true, cut_off),
                Err(e) if endpoint == Endpoint::Other => {
                    not_model.push(format!("{line_no} ({uri}, {e})"));
                    continue;
                }
                Err(e) => return Err(format!("{label}: streamed response: {e}")),
            },
            (_, Some(Value::String(raw))) => match value_from_str(raw) {
                Ok(body) => (body, false, None),
                Err(e) if e.is_data() => return Err(format!("{label}: {e}")),
                Err(_) if endpoint == Endpoint::Other => {
                    not_model.push(format!("{line_no} ({uri})"));
                    continue;
                }
                Err(_) => {
                    return Err(format!(
                        "{label}: the response body is neither JSON nor a Messages API event stream"
                    ))
                }
            },
            _ if endpoint == Endpoint::Other => {
                not_model.push(format!("{line_no} ({uri})"));
                continue;
            }
            _ => return Err(format!("{label}: the response has no body")),
        };
        if body.as_object().is_some_and(is_api_error) || status.is_some_and(|c| c >= 400) {
            notes.push(api_error_note(&label, status, &body, streamed));
            continue;
        }
        if !is_message_value(&body) {
            if matches!(endpoint, Endpoint::Model(_)) && !is_token_count(&body) {
                return Err(format!(
                    "{label}: {uri}: the response is not an Anthropic Messages API message"
                ));
            }
            not_model.push(format!("{line_no} ({uri})"));
            continue;
        }
        exchanges.push(Exchange {
            label,
            request: request.get("body").filter(|b| b.is_object()).cloned(),
            response: body,
            time_ms: trace_ms(Some(response)),
            request_ms: trace_ms(Some(request)),
            cut_off,
        });
    }
    if !not_model.is_empty() {
        notes.push(format!(
            "{} request(s) are not model calls (token counting, other endpoints), skipped: lines {}",
            not_model.len(),
            not_model.join(", ")
        ));
    }
    build_from_exchanges(Format::ClaudeTrace, exchanges, notes)
}

fn read_vcr(cassette: &Value) -> Result<Session, String> {
    let interactions = cassette
        .get("interactions")
        .and_then(Value::as_array)
        .ok_or("`interactions` is not a list")?;
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut notes = Vec::new();
    let mut not_model: Vec<String> = Vec::new();
    for (index, interaction) in interactions.iter().enumerate() {
        let label = format!("interaction {index}");
        let request = interaction.get("request");
        let response = interaction
            .get("response")
            .ok_or_else(|| format!("{label}: no `response`"))?;
        let (endpoint, uri) = endpoint_of(request);
        // Not a model call, by its URI or by what came back: skipped with a
        // note. A body that reads as a model reply is counted wherever it
        // came from (a proxy, another path): never counted less than billed.
        let mut skip = |why: &str| {
            not_model.push(format!(
                "{index} ({}{why})",
                if uri.is_empty() {
                    "no URI".to_owned()
                } else {
                    uri.clone()
                }
            ));
        };
        let status = response
            .get("status")
            .and_then(|s| s.get("code"))
            .and_then(Value::as_u64);
        let body = match vcr_body(response) {
            Ok(body) => body,
            Err(_) if endpoint == Endpoint::Other => {
                skip(", a body that is not text");
                continue;
            }
            Err(e) => {
                return Err(match endpoint {
                    Endpoint::Model(api) => {
                        format!("{label}: {} ({uri}): response body: {e}", api.description())
                    }
                    _ => format!("{label}: response body: {e}"),
                })
            }
        };
        let request_body = match request {
            Some(r) => match vcr_body(r) {
                Ok(body) => body,
                Err(_) if endpoint == Endpoint::Other => None,
                Err(e) => return Err(format!("{label}: request body: {e}")),
            },
            None => None,
        };
        let Some(body) = body else {
            match endpoint {
                // A model call whose reply was not recorded: refused, never
                // counted as nothing.
                Endpoint::Model(api) => {
                    return Err(format!(
                        "{label}: {} ({uri}) with no response body",
                        api.description()
                    ))
                }
                Endpoint::Other => skip(", no body"),
                Endpoint::Unknown => notes.push(format!("{label}: no response body, skipped")),
            }
            continue;
        };
        let (body, streamed, cut_off) = match body {
            Body::Json(v) => (v, false, None),
            Body::Text(text)
                if text.contains("event: message_start") || text.contains("data: {") =>
            {
                let rebuilt = if text.contains("chat.completion.chunk") {
                    openai::chat_from_sse(&text)
                } else if text.contains("\"response.created\"") || text.contains("event: response.")
                {
                    openai::responses_from_sse(&text)
                } else if endpoint == Endpoint::Model(ModelApi::Gemini)
                    || (!text.contains("message_start") && text.contains("\"candidates\""))
                {
                    providers::gemini_from_sse(&text).and_then(|(chunks, cut_off)| {
                        Ok((
                            providers::gemini_message(&chunks, &label.replace(' ', "-"))?,
                            cut_off,
                        ))
                    })
                } else {
                    message_from_sse(&text)
                };
                match rebuilt {
                    Ok((body, cut_off)) => (body, true, cut_off),
                    Err(_) if endpoint == Endpoint::Other => {
                        skip(", an event stream of another kind");
                        continue;
                    }
                    Err(e) => return Err(format!("{label}: streamed response: {e}")),
                }
            }
            Body::Text(_) if endpoint == Endpoint::Other => {
                skip(", a body that is not JSON");
                continue;
            }
            Body::Text(_) => {
                return Err(match endpoint {
                    Endpoint::Model(api) => format!(
                    "{label}: {} ({uri}): the response body is neither JSON nor an event stream",
                    api.description()
                ),
                    _ => format!(
                    "{label}: the response body is neither JSON nor a Messages API event stream"
                ),
                })
            }
        };
        let openai_error = (openai::is_chat_completion(&body) || openai::is_response(&body))
            && (body.get("status").and_then(Value::as_str) == Some("failed"))
            || (body.get("error").is_some_and(Value::is_object) && !is_message_value(&body));
        if body.as_object().is_some_and(is_api_error)
            || openai_error
            || status.is_some_and(|c| c >= 400)
        {
            notes.push(api_error_note(&label, status, &body, streamed));
            continue;
        }
        // A Responses API reply fetched again (background mode polls
        // `GET /v1/responses/ID`, a stream resumed with `starting_after`) is
        // the same model call: its latest state replaces the earlier one.
        let same_response = openai::is_response(&body)
            .then(|| body.get("id").and_then(Value::as_str).map(str::to_owned))
            .flatten();
        let mut cut_off = cut_off;
        if let Some(status @ ("queued" | "in_progress")) =
            body.get("status").and_then(Value::as_str)
        {
            if cut_off.is_none() && openai::is_response(&body) {
                cut_off = Some(format!("the response is still {status}, not finished"));
            }
        }
        let body = if openai::is_chat_completion(&body) {
            let message = openai::chat_message(&body, &label, &mut notes)
                .map_err(|e| format!("{label}: OpenAI chat completion: {e}"))?;
            if message["usage"].is_null() {
                notes.push(format!("{label}: the reply records no usage (a stream without stream_options.include_usage?): counted as 0 tokens"));
            }
            message
        } else if providers::is_converse(&body) {
            providers::converse_message(&body)
                .map_err(|e| format!("{label}: Bedrock Converse reply: {e}"))?
        } else if providers::is_gemini(&body) {
            let chunks = match &body {
                Value::Array(items) => items.clone(),
                one => vec![one.clone()],
            };
            providers::gemini_message(&chunks, &label.replace(' ', "-"))
                .map_err(|e| format!("{label}: Gemini reply: {e}"))?
        } else if openai::is_response(&body) {
            let message = openai::responses_message(&body)
                .map_err(|e| format!("{label}: OpenAI response: {e}"))?;
            if message["usage"].is_null() {
                notes.push(format!(
                    "{label}: the reply records no usage: counted as 0 tokens"
                ));
            }
            message
        } else {
            body
        };
        if !body.as_object().is_some_and(is_message) {
            match endpoint {
                _ if is_token_count(&body) => {}
                Endpoint::Model(api @ ModelApi::AnthropicMessages) => {
                    return Err(format!(
                        "{label}: {} whose response is not an Anthropic Messages API message",
                        api.description()
                    ))
                }
                // A model call this version cannot read: refused, never
                // skipped (skipping would count less than was billed).
                Endpoint::Model(api) => {
                    return Err(format!(
                        "{label}: {} ({uri}) whose reply is not in a shape this version reads; refused rather than counted as nothing",
                        api.description()
                    ))
                }
                Endpoint::Other | Endpoint::Unknown => {}
            }
            // Said, so that spend outside the model calls read (embeddings,
            // a provider this version does not read) is never hidden.
            match reported_tokens(&body) {
                Some(n) if !is_token_count(&body) => {
                    skip(&format!(", its reply reports {n} tokens, not counted"))
                }
                _ => skip(""),
            }
            continue;
        }
        let time_ms = header(response, "date")
            .map_err(|e| format!("{label}: response: {e}"))?
            .and_then(|d| parse_http_date_ms(&d));
        if let Some(id) = &same_response {
            if let Some(earlier) = exchanges
                .iter_mut()
                .find(|e| e.response.get("id").and_then(Value::as_str) == Some(id.as_str()))
            {
                notes.push(format!(
                    "{label}: response {id} again (fetched or resumed): one model call, its latest state kept (from {})",
                    earlier.label
                ));
                earlier.response = body;
                earlier.cut_off = cut_off;
                earlier.time_ms = time_ms.or(earlier.time_ms);
                continue;
            }
        }
        exchanges.push(Exchange {
            label,
            request: request_body.and_then(|b| match b {
                Body::Json(v) => Some(v),
                Body::Text(_) => None,
            }),
            response: body,
            time_ms,
            request_ms: None,
            cut_off,
        });
    }
    if !not_model.is_empty() {
        notes.push(format!(
            "{} interaction(s) are not model calls (token counting, files, downloads, other services), skipped: {}",
            not_model.len(),
            not_model.join(", ")
        ));
    }
    build_from_exchanges(Format::VcrCassette, exchanges, notes)
}

/// The tokens a reply that is not read says it used: the numeric fields of
/// its `usage` (or Gemini's `usageMetadata`) whose name holds `token`, totals
/// left out, or Ollama's `prompt_eval_count + eval_count`. `None` when it
/// says none.
fn reported_tokens(body: &Value) -> Option<u64> {
    let usage = body.get("usage").or_else(|| body.get("usageMetadata"));
    let from_usage = usage.and_then(Value::as_object).map(|u| {
        u.iter()
            .filter(|(k, _)| k.contains("oken") && !k.contains("total"))
            .filter_map(|(_, v)| v.as_u64())
            .fold(0, u64::saturating_add)
    });
    let ollama = body
        .get("prompt_eval_count")
        .and_then(Value::as_u64)
        .map(|p| p.saturating_add(body.get("eval_count").and_then(Value::as_u64).unwrap_or(0)));
    from_usage.or(ollama).filter(|&n| n > 0)
}

fn is_message_value(body: &Value) -> bool {
    body.as_object().is_some_and(is_message)
}

/// A token-counting reply (`/v1/messages/count_tokens`: `{"input_tokens":
/// N}` and nothing a message has): no model call, nothing generated.
fn is_token_count(body: &Value) -> bool {
    body.as_object().is_some_and(|o| {
        o.contains_key("input_tokens")
            && !o.contains_key("content")
            && !o.contains_key("usage")
            && !o.contains_key("choices")
    })
}

enum Body {
    Json(Value),
    Text(String),
}

/// A VCR request or response body: `parsed_body`, or `body` as a JSON
/// string, or `body.string`.
fn vcr_body(part: &Value) -> Result<Option<Body>, String> {
    if let Some(parsed) = part.get("parsed_body") {
        if !parsed.is_null() {
            return Ok(Some(Body::Json(parsed.clone())));
        }
    }
    let raw = match part.get("body") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => match o.get("string") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => return Ok(None),
            Some(_) => return Err("`body.string` is not text".into()),
        },
        Some(other) => return Ok(Some(Body::Json(other.clone()))),
    };
    if raw.trim().is_empty() {
        return Ok(None);
    }
    // vcrpy writes a body that is not UTF-8 text as `!!binary` (base64),
    // gzip-compressed when the server sent `Content-Encoding: gzip`; the
    // YAML reader keeps the base64 text. Decoded only when the text is not
    // already JSON or an event stream, so a readable body is never changed.
    let raw = match value_from_str(&raw) {
        Ok(v) => return Ok(Some(Body::Json(v))),
        Err(e) if e.is_data() => return Err(e.to_string()),
        Err(_) if raw.contains("data:") => raw,
        Err(_) => match decode_binary(&raw)? {
            Some(text) => text,
            None => raw,
        },
    };
    Ok(Some(match value_from_str(&raw) {
        Ok(v) => Body::Json(v),
        Err(e) if e.is_data() => return Err(e.to_string()),
        Err(_) => Body::Text(raw),
    }))
}

/// Most bytes a compressed body may decompress to.
const MAX_BODY_BYTES: u64 = 64 << 20;

/// A `!!binary` body's text: base64, then gunzipped if it is gzip. `None`
/// when `raw` is not base64 (plain text, kept as it is); an error when the
/// bytes are not UTF-8 text (an image, a zip) or decompress past 64 MiB.
fn decode_binary(raw: &str) -> Result<Option<String>, String> {
    use base64::Engine as _;
    let compact: String = raw.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let is_base64 = !compact.is_empty()
        && compact.len().is_multiple_of(4)
        && compact
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if !is_base64 {
        return Ok(None);
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&compact) else {
        return Ok(None);
    };
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        crate::input::read_bounded(
            flate2::read::MultiGzDecoder::new(bytes.as_slice()),
            MAX_BODY_BYTES,
        )
        .map_err(|e| match e {
            crate::input::ReadError::TooLarge { .. } => format!(
                "a gzip body decompresses past {} MiB; refused",
                MAX_BODY_BYTES >> 20
            ),
            crate::input::ReadError::Io(e) => format!("a gzip body cannot be decompressed: {e}"),
        })?
    } else {
        bytes
    };
    String::from_utf8(bytes).map(Some).map_err(|e| {
        format!(
            "a binary body of {} bytes that is not text (not JSON nor an event stream)",
            e.as_bytes().len()
        )
    })
}

/// A header's value. Header names are case-insensitive, so `Date` and `date`
/// are one header given twice, as is a list of several values: refused (the
/// time limit is decided on it), never read as one of them.
fn header(part: &Value, name: &str) -> Result<Option<String>, String> {
    let Some(headers) = part.get("headers").and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut found = headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name));
    let Some((key, value)) = found.next() else {
        return Ok(None);
    };
    if let Some((other, _)) = found.next() {
        return Err(format!("header {name} given twice (`{key}` and `{other}`)"));
    }
    Ok(match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.len() > 1 => {
            return Err(format!("header `{key}` has {} values", items.len()))
        }
        Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_owned),
        _ => None,
    })
}

/// Rebuilds a message from a Messages API server-sent event stream, with
/// why it is cut off if the stream never reached `message_stop` (a dropped
/// connection: whatever its last blocks say, the reply did not end).
fn message_from_sse(text: &str) -> Result<(Value, Option<String>), String> {
    let mut message: Option<Value> = None;
    let mut stopped = false;
    let mut delta = false;
    let mut partial_inputs: HashMap<usize, String> = HashMap::new();
    let mut blocks: Vec<Value> = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let event = match value_from_str(data.trim()) {
            Ok(event) => event,
            Err(e) if e.is_data() => {
                return Err(format!(
                    "event {}: {}",
                    brief_text(data.trim()),
                    without_position(&e)
                ))
            }
            // Not JSON (`[DONE]`, a comment): not an event of the Messages API.
            Err(_) => continue,
        };
        match event.get("type").and_then(Value::as_str) {
            // The stream failed (`overloaded_error`, …): an error response,
            // whatever came before it.
            Some("error") => return Ok((event, None)),
            Some("message_stop") => stopped = true,
            Some("message_start") => match event.get("message") {
                Some(m @ Value::Object(_)) => message = Some(m.clone()),
                _ => return Err("message_start without a message object".into()),
            },
            Some("content_block_start") => {
                let index = block_index(&event)?;
                let block = event.get("content_block").cloned().unwrap_or(Value::Null);
                if blocks.len() <= index {
                    blocks.resize(index + 1, Value::Null);
                }
                blocks[index] = block;
            }
            Some("content_block_delta") => {
                let index = block_index(&event)?;
                let delta = event.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if let Some(block) = blocks.get_mut(index) {
                            let text = block
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned()
                                + piece;
                            if let Some(o) = block.as_object_mut() {
                                o.insert("text".into(), Value::String(text));
                            }
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("partial_json"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        partial_inputs.entry(index).or_default().push_str(piece);
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                delta = true;
                let message = message
                    .as_mut()
                    .ok_or("message_delta before message_start")?;
                if let Some(reason) = event.get("delta").and_then(|d| d.get("stop_reason")) {
                    message["stop_reason"] = reason.clone();
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    if !message.get("usage").is_some_and(Value::is_object) {
                        message["usage"] = Value::Object(Map::new());
                    }
                    for (k, v) in usage {
                        if !v.is_null() {
                            message["usage"][k] = v.clone();
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let mut message = message.ok_or("no message_start event")?;
    for (index, block) in blocks.iter_mut().enumerate() {
        if block.get("type").and_then(Value::as_str) == Some("tool_use") {
            if let Some(json) = partial_inputs.get(&index) {
                // A stream cut off mid-way leaves unreadable arguments: kept
                // as a marker so the call is never taken as complete.
                block["input"] = match value_from_str(json) {
                    Ok(input) => input,
                    Err(e) if e.is_data() => {
                        return Err(format!(
                            "the streamed arguments of content block {index}: {}",
                            without_position(&e)
                        ))
                    }
                    Err(_) => Value::String(format!("{UNREADABLE}{json}")),
                };
            }
        }
    }
    message["content"] = Value::Array(blocks);
    let cut_off = (!stopped).then(|| {
        if delta {
            "the event stream ends without message_stop".to_owned()
        } else {
            "the event stream ends without message_delta or message_stop".to_owned()
        }
    });
    Ok((message, cut_off))
}

/// Most content blocks one streamed message may index.
const MAX_STREAM_BLOCKS: u64 = 4096;

/// A stream event's block `index` (0 when absent), at most
/// [`MAX_STREAM_BLOCKS`]: a huge index would otherwise allocate that many
/// blocks.
fn block_index(event: &Value) -> Result<usize, String> {
    let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
    if index >= MAX_STREAM_BLOCKS {
        return Err(format!(
            "content block index {index} in the stream; at most {MAX_STREAM_BLOCKS} blocks are read"
        ));
    }
    Ok(index as usize)
}

/// Prefix marking arguments that could not be read (streams cut off).
pub const UNREADABLE: &str = "\u{0}unreadable-arguments:";

fn build_from_exchanges(
    format: Format,
    exchanges: Vec<Exchange>,
    mut notes: Vec<String>,
) -> Result<Session, String> {
    let mut turns = Vec::new();
    let mut results = HashMap::new();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    let mut any_declared = false;
    let start = exchanges.iter().find_map(|e| e.time_ms);
    let request_start = exchanges.iter().find_map(|e| e.request_ms);
    let mut previous_time: Option<u64> = None;
    for (index, exchange) in exchanges.into_iter().enumerate() {
        let mut turn = turn_from_message(&exchange.response, exchange_input)
            .map_err(|e| format!("{} (response {index}): {e}", exchange.label))?;
        if let Some(request) = &exchange.request {
            if turn.model.is_none() {
                turn.model = request
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            let cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
                .into_iter()
                .find_map(|k| request.get(k).filter(|v| !v.is_null()))
                .or_else(|| {
                    request
                        .get("inferenceConfig")
                        .and_then(|c| c.get("maxTokens"))
                        .or_else(|| {
                            request
                                .get("generationConfig")
                                .and_then(|c| c.get("maxOutputTokens"))
                        })
                        .filter(|v| !v.is_null())
                });
            turn.max_tokens = match cap {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    format!(
                        "{} (request {index}): `max_tokens` is {}, not a non-negative integer",
                        exchange.label,
                        brief(v)
                    )
                })?),
            };
            if let Some(tools) = request.get("tools").and_then(Value::as_array) {
                any_declared = true;
                declared.extend(
                    tools
                        .iter()
                        .filter_map(|t| {
                            t.get("name")
                                .or_else(|| t.get("function").and_then(|f| f.get("name")))
                                .and_then(Value::as_str)
                        })
                        .map(str::to_owned),
                );
            }
            if let Some(messages) = request.get("messages").and_then(Value::as_array) {
                for m in messages {
                    collect_results(m.get("content"), &mut results);
                }
            }
            openai::request_results(request, &mut results);
            let mut names = Vec::new();
            if providers::request_facts(request, &mut names, &mut results) {
                any_declared = true;
            }
            declared.extend(names);
        }
        // The request left when the recording says (counted from the
        // first model call), else after the previous response arrived.
        turn.requested_at_ms = match (request_start, exchange.request_ms, start, previous_time) {
            (Some(first), Some(at), _, _) => Some(at.saturating_sub(first)),
            (_, _, Some(s), Some(p)) => Some(p.saturating_sub(s)),
            (_, _, Some(_), None) => Some(0),
            _ => None,
        };
        if exchange.time_ms.is_some() {
            previous_time = exchange.time_ms;
        }
        if let Some(why) = &exchange.cut_off {
            notes.push(format!(
                "{}: {why}: cut off, its calls are never executed (as for max_tokens)",
                exchange.label
            ));
            turn.cut_off = Some(why.clone());
        }
        turns.push(turn);
    }
    if turns.is_empty() {
        let mut err = "no model responses in the recording".to_owned();
        for note in &notes {
            err.push_str("; ");
            err.push_str(note);
        }
        return Err(err);
    }
    apply_results(&mut turns, &results);
    let unanswered = turns
        .iter()
        .take(turns.len().saturating_sub(1))
        .flat_map(|t| &t.calls)
        .filter(|c| c.recorded_error.is_none())
        .count();
    if unanswered > 0 {
        notes.push(format!(
            "{unanswered} tool calls have no tool_result in a later request"
        ));
    }
    if request_start.is_some() {
        notes.push("times from the requests' timestamps, counted from the first model call".into());
    } else if start.is_some() {
        notes.push("times from the responses' Date headers (1 s resolution): a request is taken to leave when the previous response arrived".into());
    } else {
        notes.push("no timestamps: the time limit is not checked".into());
    }
    Ok(Session {
        spilled: None,
        format,
        turns,
        usage: UsageGranularity::PerTurn,
        declared_tools: any_declared.then(|| declared.into_iter().collect()),
        ends_complete: false,
        notes,
        time_origin_ms: None,
    })
}

// ------------------------------------------------------------------ SWE-agent

fn read_traj(traj: &Value) -> Result<Session, String> {
    let steps = traj
        .get("trajectory")
        .and_then(Value::as_array)
        .ok_or("`trajectory` is not a list")?;
    let mut turns = Vec::new();
    let function_calls = history_function_calls(traj);
    let mut next_call = 0;
    let mut named = 0usize;
    for (index, step) in steps.iter().enumerate() {
        let action = step
            .get("action")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("step {index}: `action` is not a string"))?;
        // SWE-agent 1.x with function calling: the history's assistant
        // message of this step (the same action, in order) names the tool.
        let function = function_calls[next_call..]
            .iter()
            .position(|f| f.action == action)
            .map(|at| {
                let found = &function_calls[next_call + at];
                next_call += at + 1;
                found
            });
        let calls = if action.trim().is_empty() && function.is_none() {
            Vec::new()
        } else if let Some(f) = function {
            named += 1;
            vec![RecordedCall {
                // `step-N` as for any step: SWE-agent runs one action per
                // step and never matches results by id (its demonstrations
                // reuse ids), so the recorded id decides nothing.
                id: format!("step-{index}"),
                name: f.name.clone(),
                arguments: match &f.arguments {
                    Some(arguments) => RecordedArguments::of_value(arguments),
                    None => RecordedArguments::of_value(&serde_json::json!({ "command": action })),
                },
                recorded_error: Some(false),
            }]
        } else {
            vec![RecordedCall {
                id: format!("step-{index}"),
                name: command_name(action),
                arguments: RecordedArguments::of_value(&serde_json::json!({ "command": action })),
                recorded_error: Some(false),
            }]
        };
        turns.push(RecordedTurn {
            message_id: None,
            stop_reason: None,
            usage: None,
            text_chars: step
                .get("response")
                .and_then(Value::as_str)
                .map_or(0, |t| t.chars().count()),
            calls,
            ..RecordedTurn::default()
        });
    }
    if turns.is_empty() {
        return Err("a SWE-agent trajectory with no steps".into());
    }
    let info = match traj.get("info") {
        None | Some(Value::Null) => None,
        Some(Value::Object(info)) => Some(info),
        Some(other) => return Err(format!("`info` is {}, not an object", brief(other))),
    };
    let stats = match info.and_then(|i| i.get("model_stats")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(stats)) => Some(stats),
        Some(other) => {
            return Err(format!(
                "info.model_stats is {}, not an object",
                brief(other)
            ))
        }
    };
    let count = |key: &str| -> Result<Option<u64>, String> {
        match stats.and_then(|s| s.get(key)) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                format!(
                    "info.model_stats.{key} is {}, not a non-negative integer",
                    brief(v)
                )
            }),
        }
    };
    let (sent, received) = (count("tokens_sent")?, count("tokens_received")?);
    let api_calls = count("api_calls")?;
    let mut notes = vec![
        if sent.is_none() && received.is_none() {
            format!("{} steps", turns.len())
        } else {
            format!(
                "{} steps; usage is recorded only as run totals (tokens_sent → input_tokens, tokens_received → output_tokens)",
                turns.len()
            )
        },
        if named == 0 {
            "each step's action is one tool call named by its first word, with the whole action as {\"command\": …}; no stop reasons recorded (a step with an action is a tool turn)".into()
        } else {
            format!(
                "{named} of {} steps named by the function call the history records (history[].tool_calls[].function.name, with its arguments){}; no stop reasons recorded (a step with an action is a tool turn)",
                turns.len(),
                if named < turns.len() { ", the others by the action's first word" } else { "" }
            )
        },
        "no timestamps: the time limit is not checked".into(),
    ];
    let usage = match (sent, received) {
        (None, None) => {
            notes.push(format!(
                "usage unknown: {} holds no tokens_sent or tokens_received; the cost shows 0 and the token limit is not checked",
                if info.is_none() { "the trajectory has no `info`, so it" } else { "info.model_stats" }
            ));
            UsageGranularity::Unknown
        }
        (sent, received) => {
            for (key, value) in [("tokens_sent", sent), ("tokens_received", received)] {
                if value.is_none() {
                    notes.push(format!("info.model_stats.{key} is missing: counted as 0"));
                }
            }
            UsageGranularity::RunTotal(TokenUsage {
                input_tokens: sent.unwrap_or(0),
                output_tokens: received.unwrap_or(0),
                ..TokenUsage::ZERO
            })
        }
    };
    if let Some(calls) = api_calls {
        if calls != turns.len() as u64 {
            notes.push(format!(
                "model_stats.api_calls is {calls}, the trajectory has {} steps",
                turns.len()
            ));
        }
    }
    let exit_status = match info.and_then(|i| i.get("exit_status")) {
        None | Some(Value::Null) => None,
        Some(Value::String(status)) => Some(status.as_str()),
        Some(other) => {
            return Err(format!(
                "info.exit_status is {}, not a string",
                brief(other)
            ))
        }
    };
    if let Some(status) = exit_status {
        notes.push(format!("exit_status: {status}"));
    }
    Ok(Session {
        spilled: None,
        format: Format::SweAgentTraj,
        turns,
        usage,
        declared_tools: None,
        // Only a plain `submitted`: `submitted (exit_cost)` and the like
        // were submitted by SWE-agent when its own limit stopped the agent.
        ends_complete: exit_status == Some("submitted"),
        notes,
        time_origin_ms: None,
    })
}

/// A function call of a SWE-agent 1.x history message.
struct FunctionCall {
    /// The assistant message's `action`, which the trajectory step repeats.
    action: String,
    /// `tool_calls[0].function.name`.
    name: String,
    /// `tool_calls[0].function.arguments`, parsed (`None`: not JSON).
    arguments: Option<Value>,
}

/// The function calls of a trajectory's history, in order: each assistant
/// message with an `action` and a `tool_calls[0].function.name`.
fn history_function_calls(traj: &Value) -> Vec<FunctionCall> {
    let Some(history) = traj.get("history").and_then(Value::as_array) else {
        return Vec::new();
    };
    history
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| {
            let action = m.get("action").and_then(Value::as_str)?;
            let call = m.get("tool_calls")?.as_array()?.first()?;
            let function = call.get("function")?;
            let name = function.get("name").and_then(Value::as_str)?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => value_from_str(text).ok(),
                Some(object @ Value::Object(_)) => Some(object.clone()),
                _ => None,
            };
            Some(FunctionCall {
                action: action.to_owned(),
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

/// The first word of a command, restricted to `[A-Za-z0-9_-]`, or `command`.
/// A path, quotes or a leading backslash name the same program (`/bin/rm`,
/// `\rm`, `'rm'` are `rm`), so they are taken off first: otherwise
/// `needs_approval = ["rm"]` would miss them (`/bin/rm` used to read `binrm`).
fn command_name(action: &str) -> String {
    let first = action.split_whitespace().next().unwrap_or("");
    let unquoted = first.trim_matches(|c| c == '\'' || c == '"');
    let program = unquoted.rsplit('/').next().unwrap_or(unquoted);
    let word: String = program
        .trim_start_matches('\\')
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    if word.is_empty() {
        "command".into()
    } else {
        word
    }
}

// ----------------------------------------------------------------------- YAML

/// Most nesting of collections in a YAML recording (as serde_json's limit
/// for JSON).
pub const MAX_YAML_DEPTH: usize = 128;

/// What aliases may add to a YAML recording, in weight: 64 per node plus
/// the bytes of each scalar, about the memory the copies take. An alias
/// copies its anchor's whole tree, so a few hundred bytes of nested aliases
/// ("billion laughs") could otherwise expand to gigabytes.
pub const MAX_YAML_ALIAS_WEIGHT: u64 = 64 << 20;

const YAML_NODE_WEIGHT: u64 = 64;

/// Runs the YAML event parser over `text` before anything is built:
/// refuses nesting deeper than [`MAX_YAML_DEPTH`] and aliases that would
/// expand past [`MAX_YAML_ALIAS_WEIGHT`]. Costs one pass, no tree.
fn check_yaml(text: &str) -> Result<(), String> {
    use yaml_rust2::parser::Parser;
    use yaml_rust2::Event;
    let mut parser = Parser::new_from_str(text);
    // The weight of each complete anchored node, by anchor id.
    let mut anchored: HashMap<usize, u64> = HashMap::new();
    // Open collections: (anchor id, weight so far).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut aliased: u64 = 0;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            format!("not a recognised recording (not JSON, JSON Lines or YAML: {e}); expected a Claude Code session log, Anthropic Messages API exchanges, a VCR cassette or a SWE-agent .traj")
        })?;
        let line = mark.line();
        let complete = match event {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() >= MAX_YAML_DEPTH {
                    return Err(format!(
                        "line {line}: the YAML nests deeper than {MAX_YAML_DEPTH} levels"
                    ));
                }
                open.push((anchor, YAML_NODE_WEIGHT));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => open.pop(),
            Event::Scalar(value, _, anchor, _) => {
                Some((anchor, YAML_NODE_WEIGHT.saturating_add(value.len() as u64)))
            }
            Event::Alias(id) => {
                let weight = *anchored.get(&id).ok_or_else(|| {
                    format!("line {line}: a YAML alias refers to a node that is not complete")
                })?;
                aliased = aliased.saturating_add(weight);
                if aliased > MAX_YAML_ALIAS_WEIGHT {
                    return Err(format!(
                        "line {line}: YAML aliases expand the recording past {} MiB (an alias bomb?); refused",
                        MAX_YAML_ALIAS_WEIGHT >> 20
                    ));
                }
                Some((0, weight))
            }
            _ => None,
        };
        if let Some((anchor, weight)) = complete {
            if anchor > 0 {
                anchored.insert(anchor, weight);
            }
            if let Some(parent) = open.last_mut() {
                parent.1 = parent.1.saturating_add(weight);
            }
        }
    }
}

/// The YAML path of a node, for errors: `interactions[0].response.body`.
fn yaml_path(path: &[String]) -> String {
    if path.is_empty() {
        "the document".into()
    } else {
        path.concat().trim_start_matches('.').to_owned()
    }
}

fn yaml_to_json(yaml: &yaml_rust2::Yaml, path: &mut Vec<String>) -> Result<Value, String> {
    use yaml_rust2::Yaml;
    let at = |path: &[String], what: String| format!("{}: {what}", yaml_path(path));
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(text) => {
            let x: f64 = match text.as_str() {
                ".inf" | ".Inf" | ".INF" | "+.inf" => f64::INFINITY,
                "-.inf" | "-.Inf" | "-.INF" => f64::NEG_INFINITY,
                _ => text
                    .parse()
                    .map_err(|_| at(path, format!("YAML number `{text}` cannot be read")))?,
            };
            serde_json::Number::from_f64(x)
                .map(Value::Number)
                .ok_or_else(|| at(path, format!("YAML number `{text}` is not finite")))?
        }
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                path.push(format!("[{index}]"));
                out.push(yaml_to_json(item, path)?);
                path.pop();
            }
            Value::Array(out)
        }
        Yaml::Hash(map) => {
            let mut object = Map::new();
            for (k, v) in map {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    Yaml::Real(r) => r.clone(),
                    Yaml::Null => "null".into(),
                    _ => return Err(at(path, "a YAML mapping key is not a scalar".into())),
                };
                // `1:` and `"1":` are two YAML keys but one JSON key: refused,
                // never read as the last value.
                if object.contains_key(&key) {
                    return Err(at(path, format!("duplicate key `{key}` in a YAML mapping")));
                }
                path.push(format!(".{key}"));
                let value = yaml_to_json(v, path)?;
                path.pop();
                object.insert(key, value);
            }
            Value::Object(object)
        }
        Yaml::Alias(_) => return Err(at(path, "YAML aliases are not supported".into())),
        Yaml::BadValue => return Err(at(path, "a YAML value cannot be read".into())),
    })
}

#[cfg(test)]
mod tests {
    use super::super::claude_line::{LINE_KEYS, MESSAGE_KEYS};
    use super::*;

    /// The old two-step reading of a Claude Code line: parse it whole, then
    /// drop what no reader uses; and of that, what the Claude Code reader
    /// reads.
    fn parsed_then_pruned(line: &str) -> Result<Value, String> {
        let mut value = value_from_str(line).map_err(|e| e.to_string())?;
        if let Some(line) = value.as_object_mut() {
            // Pruned as a Claude Code line, whatever its keys.
            line.entry("uuid").or_insert(Value::Null);
        }
        prune_claude_code_line(&mut value);
        if let Some(line) = value.as_object_mut() {
            // A line without `type` was left whole; its message is read by
            // no reader (only assistant and user lines' are).
            if !line.contains_key("type") {
                line.remove("message");
            }
            line.retain(|k, _| LINE_KEYS.contains(&k.as_str()));
            if let Some(Value::Object(message)) = line.get_mut("message") {
                message.retain(|k, _| MESSAGE_KEYS.contains(&k.as_str()));
            }
        }
        Ok(value)
    }

    /// Issue 14 (throughput): the one-pass reader of Claude Code lines gives
    /// exactly what parsing the line whole and pruning it gave of the keys
    /// the Claude Code reader reads, whatever the
    /// order of the keys that decide what is dropped (`type` before or after
    /// `message`, a block's `type` before or after its `content`), for
    /// escaped keys, and for lines that are not objects.
    #[test]
    fn the_one_pass_line_reader_keeps_what_parsing_and_pruning_kept() {
        let sample = include_str!("../../../examples/replay/claude-code.jsonl");
        let handmade = [
            r#"{"uuid":"u","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Bash","input":{"c":"ls"}}],"usage":{"input_tokens":3}},"type":"assistant","cwd":"/x"}"#,
            r#"{"type":"user","uuid":"u","message":{"role":"user","content":[{"content":"file text","type":"tool_result","tool_use_id":"t","is_error":true},{"tool_use_id":"t2","type":"tool_result","content":[{"type":"text","text":"x"}]}]},"toolUseResult":{"stdout":"big"}}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","content":[{"thinking":"long","type":"thinking","signature":"sig"},{"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"hi"}],"stop_reason":"end_turn"}}"#,
            r#"{"message":{"content":[{"type":"tool_result","content":"x"}]},"uuid":"u","type":"summary","summary":"s"}"#,
            r#"{"type":"progress","uuid":"u","sessionId":"s","data":{"message":{"type":"assistant","message":{"id":"m2"}}}}"#,
            r#"{"type":"result","session_id":"s","subtype":"success","num_turns":3,"total_cost_usd":0.25,"is_error":false,"result":"done"}"#,
            r#"{"t\u0079pe":"assistant","uuid":"u","mess\u0061ge":{"id":"m","content":"text"},"\u0063wd":"/x"}"#,
            r#"{"type":"assistant","uuid":"u","message":"not an object"}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","content":{"type":"tool_result","content":"kept: not a list"}}}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","content":[1,"two",null,[{"type":"tool_result","content":"x"}]]}}"#,
            r#"{"type":7,"uuid":"u","message":{"id":"m"}}"#,
            r#"[1,{"type":"assistant"}]"#,
            r#""a string""#,
            "12.5",
            "null",
        ];
        let lines: Vec<&str> = sample.lines().chain(handmade).collect();
        for line in lines {
            let old = parsed_then_pruned(line);
            let new = claude_code_line_from_str(line)
                .map(|l| l.to_value())
                .map_err(|e| e.to_string());
            assert_eq!(new, old, "{line}");
            // A line parsed whole first (a one-line document) reads the same.
            if let Ok(whole) = value_from_str(line) {
                let from_value = claude_code_line_from_value(whole).map(|l| l.to_value());
                assert_eq!(from_value.map_err(|e| e.to_string()), old, "{line}");
            }
        }
    }

    /// JSON text of a line shaped like a Claude Code line: a top level, a
    /// `message` and its `content` blocks, each an object of the keys the
    /// reader treats specially (mostly present) and others, in any order,
    /// sometimes repeated, sometimes spelled with an escape, their values
    /// the words that decide what is kept, or any JSON value.
    fn claude_like_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        type Entry = (&'static str, String);
        fn quoted(words: &'static [&'static str]) -> BoxedStrategy<String> {
            proptest::sample::select(words)
                .prop_map(|w| format!("\"{w}\""))
                .boxed()
        }
        /// Each of `required` (each present nine times in ten) and 0 to 5
        /// of `entries`, shuffled, as a JSON object.
        fn object(
            required: Vec<BoxedStrategy<Entry>>,
            entries: BoxedStrategy<Entry>,
        ) -> BoxedStrategy<String> {
            let required: Vec<_> = required
                .into_iter()
                .map(|r| proptest::option::weighted(0.9, r))
                .collect();
            (required, prop::collection::vec(entries, 0..6))
                .prop_flat_map(|(required, mut entries)| {
                    entries.extend(required.into_iter().flatten());
                    let n = entries.len();
                    (
                        Just(entries).prop_shuffle(),
                        prop::collection::vec(proptest::bool::weighted(0.1), n),
                    )
                })
                .prop_map(|(entries, escaped): (Vec<Entry>, Vec<bool>)| {
                    let fields: Vec<String> = entries
                        .iter()
                        .zip(escaped)
                        .map(|((k, v), escaped)| {
                            let k = if escaped {
                                format!("\\u{:04x}{}", u32::from(k.as_bytes()[0]), &k[1..])
                            } else {
                                (*k).to_owned()
                            };
                            format!("\"{k}\":{v}")
                        })
                        .collect();
                    format!("{{{}}}", fields.join(","))
                })
                .boxed()
        }
        let leaf = prop_oneof![
            4 => Just("null".to_owned()),
            4 => Just("true".to_owned()),
            4 => Just("7".to_owned()),
            4 => Just("-2.5e3".to_owned()),
            8 => quoted(&["x", "a\\nb", "tool_result", "assistant"]),
            // Refused by the whole parse wherever it is: rare, or few
            // lines would be compared.
            1 => quoted(&["\\ud800"]),
        ];
        let any_key = proptest::sample::select(
            &[
                "type", "content", "data", "id", "message", "a", "b", "c", "d", "e", "f", "g",
            ][..],
        );
        let value = leaf
            .prop_recursive(3, 24, 4, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4)
                        .prop_map(|items| format!("[{}]", items.join(","))),
                    object(vec![], (any_key.clone(), inner).boxed()),
                ]
            })
            .boxed();
        // The keys a block may lose most often.
        let block_key = proptest::sample::select(
            &[
                "content",
                "content",
                "content",
                "thinking",
                "thinking",
                "signature",
                "data",
                "data",
                "text",
                "tool_use_id",
                "id",
                "name",
                "input",
                "is_error",
            ][..],
        );
        let block_kind = || {
            quoted(&[
                "tool_result",
                "thinking",
                "redacted_thinking",
                "tool_use",
                "text",
                "other",
            ])
            .prop_map(|w| ("type", w))
            .boxed()
        };
        let block = object(
            vec![block_kind()],
            prop_oneof![1 => block_kind(), 6 => (block_key, value.clone())].boxed(),
        );
        let blocks = prop_oneof![
            3 => prop::collection::vec(prop_oneof![3 => block, 1 => value.clone()], 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            1 => value.clone(),
        ]
        .boxed();
        let message_key =
            proptest::sample::select(&["id", "model", "usage", "stop_reason", "role", "type"][..]);
        let content = blocks.prop_map(|b| ("content", b)).boxed();
        let message = object(
            vec![content.clone()],
            prop_oneof![1 => content, 6 => (message_key, value.clone())].boxed(),
        );
        let line_kind = || {
            prop_oneof![
                4 => quoted(&["assistant", "user"]),
                1 => quoted(&["summary", "progress"]),
            ]
            .prop_map(|k| ("type", k))
            .boxed()
        };
        let line_message = prop_oneof![4 => message, 1 => value.clone()]
            .prop_map(|m| ("message", m))
            .boxed();
        let line_key = proptest::sample::select(
            &[
                "timestamp",
                "requestId",
                "uuid",
                "cwd",
                "toolUseResult",
                "num_turns",
                "data",
            ][..],
        );
        object(
            vec![line_kind(), line_message],
            prop_oneof![1 => line_kind(), 6 => (line_key, value)].boxed(),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Issue 14 (throughput), as a property: on lines shaped like
        /// Claude Code lines, the one-pass reader accepts every line that
        /// parsing whole accepts and gives exactly what parsing and pruning
        /// gave of the keys the reader reads; and every line it refuses,
        /// parsing whole refused too.
        #[test]
        fn the_one_pass_line_reader_agrees_with_parsing_whole(line in claude_like_line()) {
            let old = parsed_then_pruned(&line);
            let new = claude_code_line_from_str(&line).map(|l| l.to_value());
            match (&old, &new) {
                (Ok(old), Ok(new)) => proptest::prop_assert_eq!(new, old, "{}", line),
                (Ok(_), Err(e)) => proptest::prop_assert!(false, "{line}: refused: {e}"),
                (Err(_), _) => {}
            }
        }
    }

    /// Issue 14: a key repeated inside a part of a Claude Code line that no
    /// reader reads (a tool's result, a thinking block's text, metadata) no
    /// longer refuses the line; a key repeated where a reader reads is
    /// refused as before, with the same error at the same position.
    #[test]
    fn a_repeated_key_refuses_a_claude_code_line_only_where_a_reader_reads() {
        for line in [
            r#"{"type":"user","uuid":"u","toolUseResult":{"a":1,"a":2},"message":{"content":[]}}"#,
            r#"{"type":"user","uuid":"u","cwd":"/a","cwd":"/b","message":{"content":[]}}"#,
            r#"{"type":"user","uuid":"u","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":{"k":1,"k":2}}]}}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","content":[{"type":"thinking","thinking":"a","signature":{"s":1,"s":1}}]}}"#,
            r#"{"type":"summary","uuid":"u","message":{"id":"m","id":"n"}}"#,
            r#"{"type":"user","uuid":"u","cwd":"\ud800"}"#,
        ] {
            assert!(value_from_str(line).is_err(), "{line}");
            assert!(claude_code_line_from_str(line).is_ok(), "{line}");
        }
        for line in [
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","usage":{"input_tokens":1,"input_tokens":9}}}"#,
            r#"{"type":"assistant","type":"user","uuid":"u"}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"A","name":"B","input":{}}]}}"#,
            r#"{"type":"assistant","uuid":"u","message":{"id":"m"},"message":{"id":"n"}}"#,
            r#"{"type":"summary","uuid":"u","message":{},"message":{}}"#,
            r#"{"type":"user","uuid":"u","message":{"content":[{"type":"tool_result","tool_use_id":"a","tool_use_id":"b"}]}}"#,
            r#"{"type":"user","uuid":"u","message":{"content":[{"type":"tool_result","content":"a","content":"b"}]}}"#,
            r#"{"type":"user","uuid":"u","message":{"content":[{"content":"a","type":"tool_result","content":"b"}]}}"#,
        ] {
            let old = value_from_str(line).unwrap_err().to_string();
            let new = claude_code_line_from_str(line).unwrap_err().to_string();
            assert!(new.starts_with("duplicate key `"), "{line}: {new}");
            assert_eq!(new, old, "{line}");
        }
    }

    /// Issue 14: what is skipped is still JSON (bad syntax in a skipped
    /// part, or trailing text after the line, is refused as before), and
    /// nesting past serde_json's limit of 128 is refused where a reader
    /// reads; in a skipped part, which is skipped without recursion, it is
    /// not (nor a lone surrogate escape, which JSON's grammar allows).
    #[test]
    fn a_skipped_part_of_a_claude_code_line_must_still_be_json() {
        let nested = |at: &str| {
            format!(
                r#"{{"type":"assistant","uuid":"u",{}{}{}}}"#,
                at,
                "[".repeat(200),
                "]".repeat(200)
            )
        };
        for line in [
            r#"{"type":"user","uuid":"u","cwd":[1,}"#,
            r#"{"type":"user","uuid":"u","cwd":"x"} trailing"#,
            r#"{"type":"user","uuid":"u","cwd":tru}"#,
            r#"{"type":"user","uuid":"u","message":{"content":[{"type":"tool_result","content":[1,}]}}"#,
        ] {
            assert!(value_from_str(line).is_err(), "{line}");
            assert!(claude_code_line_from_str(line).is_err(), "{line}");
        }
        let deep_kept = format!(
            r#"{{"type":"assistant","uuid":"u","message":{{"id":"m","content":[{{"type":"tool_use","input":{}{}}}]}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = claude_code_line_from_str(&deep_kept).unwrap_err();
        assert!(is_too_deep(&err), "{err}");
        assert!(is_too_deep(&value_from_str(&deep_kept).unwrap_err()));
        let deep_skipped = nested(r#""toolUseResult":"#);
        assert!(is_too_deep(&value_from_str(&deep_skipped).unwrap_err()));
        assert!(claude_code_line_from_str(&deep_skipped).is_ok());
    }

    /// `lines_of` is `str::lines`: line ends `\n` and `\r\n`, a lone `\r`
    /// kept (inside a line and at the very end), no line after a final
    /// `\n`, empty lines kept, multi-byte characters on both sides.
    #[test]
    fn lines_are_split_as_str_lines_splits_them() {
        for text in [
            "",
            "\n",
            "\n\n",
            "a",
            "a\n",
            "a\r\n",
            "a\r",
            "\r",
            "\r\n\r\n",
            "a\nb",
            "a\r\nb\r\n",
            "a\rb\nc",
            "é\n\nü\r\n€",
            "{\"a\":1}\n{\"b\":2}\n\n{\"c\":3}",
            "a\r\r\n",
        ] {
            assert_eq!(lines_of(text), text.lines().collect::<Vec<_>>(), "{text:?}");
        }
    }

    proptest::proptest! {
        /// The same on any text of the bytes that matter.
        #[test]
        fn any_text_is_split_as_str_lines_splits_it(
            text in "[a\\r\\n é{}]{0,40}"
        ) {
            proptest::prop_assert_eq!(lines_of(&text), text.lines().collect::<Vec<_>>());
        }
    }

    #[test]
    fn command_names() {
        assert_eq!(command_name("python reproduce_bug.py\n"), "python");
        assert_eq!(command_name("edit 287:295\nfoo"), "edit");
        assert_eq!(command_name("   "), "command");
        assert_eq!(command_name("./run.sh"), "runsh");
        for rm in [
            "/bin/rm -rf /",
            "\\rm -rf /",
            "'rm' -rf",
            "\"/usr/bin/rm\" x",
        ] {
            assert_eq!(command_name(rm), "rm", "{rm}");
        }
    }

    /// Issue 14 (memory): the reader finds the turns of a `message.id` from
    /// their ids' hashes without a second copy of the ids, and two ids of
    /// one hash never mix: with a hasher under which every id collides, each
    /// id still gives exactly its own turns, the latest first.
    #[test]
    fn turns_by_id_never_mix_two_ids_of_one_hash() {
        #[derive(Default)]
        struct Colliding;
        impl std::hash::BuildHasher for Colliding {
            type Hasher = Constant;
            fn build_hasher(&self) -> Constant {
                Constant
            }
        }
        struct Constant;
        impl std::hash::Hasher for Constant {
            fn finish(&self) -> u64 {
                7
            }
            fn write(&mut self, _: &[u8]) {}
        }
        let ids = ["msg_a", "msg_b", "msg_a", "msg_c", "msg_b", "msg_a"];
        let mut by_id = TurnsById::<Colliding>::default();
        // Held, and spilled to a temporary file after each turn.
        for spill in [false, true] {
            let mut turns = ReadTurns::new(spill);
            for id in ids {
                assert_eq!(
                    !by_id
                        .of(id, |at| turns.message_id_is(at, id))
                        .unwrap()
                        .is_empty(),
                    ids[..turns.len()].contains(&id)
                );
                if !spill {
                    by_id.push(id);
                }
                turns.push(RecordedTurn {
                    message_id: Some(id.to_owned()),
                    ..RecordedTurn::default()
                });
                turns.spill_closed(None).unwrap();
            }
            assert_eq!(turns.first_held(), if spill { ids.len() } else { 0 });
            let of = |id: &str| by_id.of(id, |at| turns.message_id_is(at, id)).unwrap();
            assert_eq!(of("msg_a"), [5, 2, 0]);
            assert_eq!(of("msg_b"), [4, 1]);
            assert_eq!(of("msg_c"), [3]);
            assert_eq!(of("msg_d"), [] as [usize; 0]);
            // With the real hasher too.
            let mut real: TurnsById = TurnsById::default();
            for id in ids {
                real.push(id);
            }
            assert_eq!(
                real.of("msg_a", |at| turns.message_id_is(at, "msg_a"))
                    .unwrap(),
                [5, 2, 0]
            );
        }
    }

    #[test]
    fn sse_stream_is_rebuilt_and_cut_arguments_are_unreadable() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":5}}\n\n";
        let (message, cut_off) = message_from_sse(stream).unwrap();
        assert!(cut_off.is_some(), "no message_stop");
        assert_eq!(message["stop_reason"], "max_tokens");
        assert_eq!(message["usage"]["output_tokens"], 5);
        let input = message["content"][0]["input"].as_str().unwrap();
        assert!(input.starts_with(UNREADABLE));
    }

    #[test]
    fn claude_code_log_opening_with_a_summary_line_and_cut_at_the_end() {
        let text = concat!(
            r#"{"type":"summary","summary":"Refunds","leafUuid":"u2"}"#,
            "\n",
            r#"{"type":"user","uuid":"u1","sessionId":"s","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi"}}"#,
            "\n",
            r#"{"type":"assistant","uuid":"u2","sessionId":"s","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m1","model":"m","content":[{"type":"text","text":"hello"}],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":2}}}"#,
            "\n",
            r#"{"type":"user","uuid":"u3","sessi"#,
        );
        let session = read_session(text).unwrap();
        assert_eq!(session.format, Format::ClaudeCode);
        assert_eq!(session.turns.len(), 1);
        assert!(session.notes.iter().any(|n| n.contains("interrupted")));
        // A broken line anywhere else is an error.
        let broken = text.replacen("{\"type\":\"user\",\"uuid\":\"u1\"", "{oops", 1);
        assert!(read_session(&broken).unwrap_err().contains("line 2"));
    }

    #[test]
    fn unknown_documents_are_clear_errors() {
        for text in [
            "{\"a\":1}",
            "[1,2]",
            "just: yaml",
            "",
            "{\"a\":1}\n{\"b\":2}\n",
        ] {
            let err = read_session(text).unwrap_err();
            assert!(
                err.contains("not a recognised recording") || err.contains("empty"),
                "{text}: {err}"
            );
        }
    }
}
