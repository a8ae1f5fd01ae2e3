//! JSON Lines recordings: the format told from the lines' top-level keys,
//! a Claude Code log or stream-json output read line by line (a large one
//! from its file, never held whole), the other formats' lines read whole.

use serde_json::Value;

use super::claude_code::{read_claude_code, spill_error};
use super::claude_trace::{is_trace_pair, read_claude_trace};
use super::exchanges::read_exchanges;
use super::{
    is_exchange, is_message, is_request, is_too_deep, too_deep, unrecognised, without_position,
};
use crate::replay::session::{Format, Session};
use crate::strict::value_from_str;
use crate::transcript::claude_line::{
    claude_code_line_from_str, claude_code_line_from_value, ClaudeLine,
};

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
    crate::transcript::claude_line::top_level_keys(line, |key, keys: &mut LineKeys| match key {
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
/// [`read_session`](super::read_session) does. The session's responses are all held
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

pub(super) fn from_json_lines(text: &str) -> Result<Session, String> {
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

/// Drops from a Claude Code line what no reader looks at — `toolUseResult`,
/// thinking text, progress lines' nested messages — and replaces each tool
/// result's content (whole files) by its digest (loop detection), so a long
/// log is held in a fraction of the memory its parsed lines would take.
/// What decides anything (ids, names, inputs, usage, stop reasons, result
/// ids, `is_error` and digests, times) is kept; a line that is not a Claude
/// Code line is left as it is.
pub(super) fn prune_claude_code_line(value: &mut Value) {
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
                    // Its digest, as the one-pass reader keeps it.
                    let content = block.remove("content").unwrap_or(Value::Null);
                    block.insert(
                        "content".into(),
                        Value::from(crate::gate::digest::digest_value(&content)),
                    );
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
