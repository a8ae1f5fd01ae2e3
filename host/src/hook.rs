//! `budgetgate hook claude-code`: the budget gate as a Claude Code hook
//! (`SPEC C`, `SPEC E`; `docs/CLAUDE-CODE.md`).
//!
//! Claude Code starts the command once per hook event, with the event's
//! JSON on stdin. Every event first reads what is new in the session's
//! transcript (and its sub-agents' transcripts) since the last event and
//! counts the model calls, tokens and cost in it; then, for `PreToolUse`,
//! the call is decided against the session's ledger, in this order:
//!
//! 1. a tool name outside `[A-Za-z0-9_-]{1,64}` → deny (`invalid-name`);
//! 2. a `tool_use_id` seen earlier in the session → deny (`duplicate-call-id`);
//! 3. a limit checked before each model call already reached — model calls,
//!    tokens, time, cost (a tool's result must go back to the model in a
//!    call that would be refused), or a model without a price in cost mode
//!    → deny (`budget-exhausted`);
//! 4. the same tool with the same canonical arguments more than
//!    `max_repeats` times → deny (`repeat`);
//! 5. no tool attempts left → deny (`tool-budget`); the tool's own cap
//!    reached → deny (`tool-cap`);
//! 6. the attempt is counted; a tool in `needs_approval` → `ask`; otherwise
//!    **no decision**: Claude Code's own permission rules still apply. The
//!    gate never answers `allow`.
//!
//! A sub-agent's call (`agent_id`) is checked against the session's ledger
//! and its own (`[subagent]` limits), and counted in both.
//!
//! With `[loops]` in the budget, `PostToolUse` and `PostToolUseFailure`
//! report what each call returned (`tool_response`, or the failure's
//! `error`) to the session's loop window, and a `PreToolUse` that would
//! complete a pattern of calls whose results do not change is denied
//! `no-progress` (after `repeat`, before `tool-budget`).
//!
//! `UserPromptSubmit`, `Stop` and `SubagentStop` end the session
//! (`continue: false` with a `stopReason`) once a before-call limit is
//! reached. Every decision is one SQLite transaction (see
//! [`crate::store`]), so concurrent hook processes never exceed a budget
//! and a killed process leaves the ledger as before its decision.
//!
//! Fail closed: an unreadable budget, a corrupt ledger, a lock not had in
//! time, an internal error or the command's own deadline (default 2 s)
//! denies a `PreToolUse` (exit 2, the reason on stderr, which Claude Code
//! shows the model) and blocks a `UserPromptSubmit`; on the other events,
//! where exit 2 would make Claude keep working, it exits 1 (a non-blocking
//! error shown to the user).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use budgetgate_core::engine;
use budgetgate_core::TokenUsage;
use serde_json::{json, Value};

use crate::gate::{self, GateError, Ledgers};
use crate::store::{CountedUsage, LedgerTx, StoreError, TranscriptCursor};
use crate::transcript::{self, OpenResponse, MAX_OPEN_CALLS};

use crate::gate::budget_file::{price_of, ReplayBudget};

/// Longest transcript line read (a longer one is an error: the gate cannot
/// count what it cannot read).
pub const MAX_TRANSCRIPT_LINE: usize = 32 << 20;

/// Most transcript bytes one event reads (about 0.3 s): a longer backlog (a
/// hook installed into a long session) is read over several events, each
/// committing its progress, and tool calls are denied until it is caught up.
pub const MAX_READ_PER_EVENT: u64 = 2 * MAX_TRANSCRIPT_LINE as u64;

/// Largest hook event read from stdin.
pub const MAX_EVENT_BYTES: u64 = 16 << 20;

/// Default deadline of one hook call, in milliseconds: well under Claude
/// Code's hook timeout, since a hook that times out does not block the tool.
pub const DEFAULT_DEADLINE_MS: u64 = 2_000;

/// A hook event, parsed: the common fields and the event's own.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent {
    /// `session_id`.
    pub session_id: String,
    /// `transcript_path`.
    pub transcript_path: String,
    /// `hook_event_name`.
    pub name: String,
    /// `agent_id`, for a sub-agent's event.
    pub agent_id: Option<String>,
    /// `PreToolUse`: the call.
    pub call: Option<ToolUse>,
    /// `PostToolUse` / `PostToolUseFailure`: the call that ran and what it
    /// returned (loop detection's outcome, `[loops]`).
    pub result: Option<ToolResult>,
}

/// A call that ran, as `PostToolUse` (`tool_response`) or
/// `PostToolUseFailure` (`error`) tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// `tool_name`.
    pub name: String,
    /// `tool_input`.
    pub input: Value,
    /// What it returned, as loop detection compares it; `None` when the
    /// event carries no result (nothing is reported).
    pub outcome: Option<engine::Outcome>,
}

/// The tool call of a `PreToolUse` event.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// `tool_name`, as sent (checked against the grammar when decided).
    pub name: String,
    /// `tool_input`.
    pub input: Value,
    /// `tool_use_id`.
    pub id: String,
}

/// What the hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No decision: Claude Code's own rules decide.
    Pass,
    /// `permissionDecision: "deny"` with this reason (`PreToolUse`).
    Deny {
        /// The contract's reason word.
        reason: String,
        /// The text the model reads.
        text: String,
        /// Also `continue: false`: the budget is spent, so the agent loop
        /// stops here instead of calling the model again.
        stop: bool,
    },
    /// `permissionDecision: "ask"` with this reason (`PreToolUse`).
    Ask(String),
    /// `continue: false` with this `stopReason`.
    Stop(String),
}

impl Answer {
    /// The JSON printed on stdout, if any.
    pub fn to_json(&self, event: &str) -> Option<Value> {
        match self {
            Self::Pass => None,
            Self::Deny { text, stop, .. } => {
                let mut answer = json!({"hookSpecificOutput": {
                    "hookEventName": event, "permissionDecision": "deny",
                    "permissionDecisionReason": text}});
                if *stop {
                    answer["continue"] = Value::Bool(false);
                    answer["stopReason"] = Value::from(text.as_str());
                }
                Some(answer)
            }
            Self::Ask(text) => Some(json!({"hookSpecificOutput": {
                "hookEventName": event, "permissionDecision": "ask",
                "permissionDecisionReason": text}})),
            Self::Stop(text) => Some(json!({"continue": false, "stopReason": text})),
        }
    }
}

/// Why the hook could not decide; it refuses (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The event on stdin is not a hook event.
    #[error("hook event: {0}")]
    Event(String),
    /// The budget file.
    #[error("budget {0}")]
    Budget(String),
    /// The ledger.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The decision.
    #[error(transparent)]
    Gate(GateError),
    /// A transcript could not be read.
    #[error("transcript {path}: {detail}")]
    Transcript {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

impl From<GateError> for HookError {
    fn from(e: GateError) -> Self {
        match e {
            GateError::Store(e) => Self::Store(e),
            GateError::Budget(e) => Self::Budget(e),
            GateError::Input(e) => Self::Event(e),
        }
    }
}

fn field<'a>(
    object: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<&'a Value, HookError> {
    object
        .get(key)
        .ok_or_else(|| HookError::Event(format!("missing required field `{key}`")))
}

fn string_field(object: &serde_json::Map<String, Value>, key: &str) -> Result<String, HookError> {
    field(object, key)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HookError::Event(format!("`{key}` is not a string")))
}

/// Most characters of a session or agent id.
const MAX_ID_CHARS: usize = 256;

fn checked_id(key: &str, id: String) -> Result<String, HookError> {
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
        return Err(HookError::Event(format!(
            "`{key}` must be 1 to {MAX_ID_CHARS} characters without control characters"
        )));
    }
    Ok(id)
}

impl HookEvent {
    /// Reads one hook event. Unknown fields are ignored; a missing common
    /// field (`session_id`, `transcript_path`, `cwd`, `hook_event_name`) or,
    /// for `PreToolUse`, a missing `tool_name`, `tool_input` or
    /// `tool_use_id` is an error, as is a duplicate key.
    pub fn parse(text: &str) -> Result<Self, HookError> {
        let value: Value =
            crate::strict::value_from_str(text).map_err(|e| HookError::Event(e.to_string()))?;
        let Value::Object(object) = value else {
            return Err(HookError::Event("not a JSON object".into()));
        };
        let session_id = checked_id("session_id", string_field(&object, "session_id")?)?;
        let transcript_path = string_field(&object, "transcript_path")?;
        string_field(&object, "cwd")?;
        let name = string_field(&object, "hook_event_name")?;
        let agent_id = match object.get("agent_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(checked_id("agent_id", id.clone())?),
            Some(_) => return Err(HookError::Event("`agent_id` is not a string".into())),
        };
        let call = if name == "PreToolUse" {
            let input = field(&object, "tool_input")?.clone();
            if !input.is_object() {
                return Err(HookError::Event("`tool_input` is not an object".into()));
            }
            Some(ToolUse {
                name: string_field(&object, "tool_name")?,
                input,
                id: string_field(&object, "tool_use_id")?,
            })
        } else {
            None
        };
        // Claude Code sends `tool_response` after a call that succeeded,
        // `error` (a text) after one that failed. Neither is required: an
        // event without them reports nothing, and never fails the hook.
        let result = match name.as_str() {
            "PostToolUse" | "PostToolUseFailure" => {
                let failed = name == "PostToolUseFailure";
                let returned = object.get(if failed { "error" } else { "tool_response" });
                match (object.get("tool_name"), object.get("tool_input")) {
                    (Some(Value::String(tool)), Some(input)) => Some(ToolResult {
                        name: tool.clone(),
                        input: input.clone(),
                        outcome: returned.map(|r| crate::gate::loops::outcome_of(r, failed)),
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(Self {
            session_id,
            transcript_path,
            name,
            agent_id,
            call,
            result,
        })
    }
}

pub use crate::gate::clock::now_ms;

/// The transcripts of a session: its own file and, beside it, the
/// `<session>/subagents/agent-<id>.jsonl` files Claude Code writes for
/// sub-agents (`None`: the session's own).
fn transcripts(main: &Path) -> Vec<(PathBuf, Option<String>)> {
    let mut out = vec![(main.to_owned(), None)];
    let dir = main.with_extension("").join("subagents");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut found: Vec<(PathBuf, Option<String>)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let agent = name
                    .strip_prefix("agent-")?
                    .strip_suffix(".jsonl")?
                    .to_owned();
                Some((e.path(), Some(agent)))
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Opens `path` for reading without blocking on a FIFO (which a tool could
/// put where a transcript is expected): the caller then refuses anything
/// that is not a regular file.
fn open_regular(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK on Linux (every architecture Rust's std supports there
        // but alpha, mips and sparc, which we do not build for).
        options.custom_flags(0o4000);
    }
    options.open(path)
}

/// Reads the lines of `path` after what was already read and counts every
/// model response in them into the ledgers (new responses as model calls,
/// token growth of a response seen before as tokens, the cost of both).
/// Only complete lines are read, at most [`MAX_READ_PER_EVENT`] bytes in all;
/// the offsets are stored with the decision. Returns the bytes left unread.
fn absorb(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    budget: &ReplayBudget,
    ledgers: &mut Ledgers<'_>,
    now: u64,
) -> Result<u64, HookError> {
    let session = &event.session_id;
    // A session whose model calls go through `budgetgate proxy` is counted
    // there, exactly and before each call: its transcript is not read
    // (it would count every response twice).
    if gate::model::proxied(tx, session)? {
        return Ok(0);
    }
    let main = Path::new(&event.transcript_path);
    let mut allowance = MAX_READ_PER_EVENT;
    let mut left = 0u64;
    for (path, agent) in transcripts(main) {
        let shown = path.display().to_string();
        let fail = |detail: String| HookError::Transcript {
            path: shown.clone(),
            detail,
        };
        // A sub-agent's id from its file's name is checked as an event's
        // (an empty one would name the session's own ledger): a file that
        // names none refuses every call while it is there (fail closed).
        if let Some(agent) = &agent {
            checked_id("agent_id", agent.clone())
                .map_err(|e| fail(format!("its name gives no valid sub-agent id ({e})")))?;
        }
        let cursor = tx.transcript_cursor(session, &shown)?;
        let offset = cursor.offset;
        let mut open: Option<Open> = match &cursor.open {
            None => None,
            Some(record) => Some(serde_json::from_str(record).map_err(|e| {
                fail(format!(
                    "the stored record of its open response does not read back ({e})"
                ))
            })?),
        };
        let mut file = match open_regular(&path) {
            Ok(file) => file,
            // Not written yet (a session's first event): nothing to count.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && offset == 0 => continue,
            Err(e) => return Err(fail(e.to_string())),
        };
        let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() {
            return Err(fail("is not a regular file".into()));
        }
        let len = meta.len();
        if len < offset {
            return Err(fail(format!(
                "is {len} bytes, shorter than the {offset} already counted (replaced or truncated?)"
            )));
        }
        if len == offset {
            continue;
        }
        let chunk = (len - offset).min(allowance);
        allowance -= chunk;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| fail(e.to_string()))?;
        let mut reader = BufReader::with_capacity(1 << 16, file.take(chunk));
        let mut at = offset;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut reader)
                .take(MAX_TRANSCRIPT_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| fail(e.to_string()))?;
            if n == 0 || line.last() != Some(&b'\n') {
                if line.len() > MAX_TRANSCRIPT_LINE {
                    return Err(fail(format!(
                        "a line at byte {at} is longer than {} MiB",
                        MAX_TRANSCRIPT_LINE >> 20
                    )));
                }
                // A line still being written: read it next time.
                break;
            }
            let place = Place {
                agent: agent.as_deref(),
                path: &shown,
                at,
            };
            count_line(tx, event, budget, ledgers, &place, &mut open, &line, now)
                .map_err(|detail| fail(format!("line at byte {at}: {detail}")))?;
            at += n as u64;
        }
        let open = open
            .map(|o| serde_json::to_string(&o))
            .transpose()
            .map_err(|e| fail(e.to_string()))?;
        tx.set_transcript_cursor(session, &shown, &TranscriptCursor { offset: at, open })?;
        // What is left beyond this event's allowance (not a line still being
        // written at the end of the file).
        if chunk < len - offset {
            left += len - at;
        }
    }
    Ok(left)
}

/// The response a transcript's last lines left open (the shared rule,
/// [`OpenResponse`]), kept with the transcript's offset between events:
/// the key its usage is counted under, and its calls' ids (to tell its
/// results from a user message).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Open {
    response: OpenResponse,
    key: String,
    calls: Vec<String>,
}

impl Open {
    /// Adds the ids of calls the response's line holds, each new to it
    /// (one shown before under its `message.id` in its transcript is not
    /// passed: [`shown_under`]), at most [`MAX_OPEN_CALLS`] in all: past
    /// them a result reads as a user message, and the next line as a new
    /// response, the safe side.
    fn add_calls(&mut self, calls: Vec<String>) {
        let room = MAX_OPEN_CALLS.saturating_sub(self.calls.len());
        self.calls.extend(calls.into_iter().take(room));
    }
}

/// What the hook keeps of a call id ([`LedgerTx::transcript_call`]), under
/// two kinds of key. [`first_shown`]: the transcript and `message.id` of
/// the first response that showed it (as [`shown_in`] writes them), or
/// [`REUSED`] once a response of another `message.id`, or of another
/// transcript (a sub-agent's), showed it too.
fn first_shown(call: &str) -> String {
    format!("c:{call}")
}

/// The other kind of key: call `call` was shown under `message_id` in
/// transcript `path` (a block shown there again is the same block logged
/// again, as replay reads each log). Lengths first, so that no two
/// triples make one key.
fn shown_under(call: &str, path: &str, message_id: &str) -> String {
    format!("s:{}:{}:{call}{path}{message_id}", call.len(), path.len())
}

fn shown_in(path: &str, message_id: &str) -> String {
    format!("={}:{path}{message_id}", path.len())
}

/// What is stored for a call id shown in responses of two `message.id`s.
const REUSED: &str = "!";

/// Where a transcript line is: the sub-agent whose transcript it is, the
/// transcript, and the line's first byte.
struct Place<'a> {
    agent: Option<&'a str>,
    path: &'a str,
    at: u64,
}

/// Counts one transcript line, if it is a model response, and follows the
/// response it may continue (`open`), as replay does ([`crate::transcript`]).
#[allow(clippy::too_many_arguments)]
fn count_line(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    budget: &ReplayBudget,
    ledgers: &mut Ledgers<'_>,
    place: &Place<'_>,
    open: &mut Option<Open>,
    line: &[u8],
    now: u64,
) -> Result<(), String> {
    // Most lines are tool results and progress: skip them unparsed, unless
    // a user line could still end the open response. A line with a `\u`
    // escape is read whole: its words may be spelled with escapes.
    let user_lines_matter = open
        .as_ref()
        .is_some_and(|o| o.response.watches_user_lines());
    if memchr_find(line, b"\"assistant\"").is_none()
        && !(user_lines_matter && memchr_find(line, b"\"user\"").is_some())
        && memchr_find(line, b"\\u").is_none()
    {
        return Ok(());
    }
    let fields = transcript::line::fields(line.trim_ascii_end())?;
    match fields.kind.as_deref() {
        Some("user") => {
            if let Some(o) = open {
                let blocks = fields
                    .results
                    .as_ref()
                    .map(|blocks| blocks.iter().map(Option::as_deref));
                let calls: std::collections::HashSet<&str> =
                    o.calls.iter().map(String::as_str).collect();
                let only_results = transcript::only_results_of(blocks, |id| calls.contains(id));
                o.response.user_line(only_results);
            }
            return Ok(());
        }
        Some("assistant") if fields.message => {}
        _ => return Ok(()),
    }
    let model = fields.model.as_deref().unwrap_or("");
    if model == "<synthetic>" {
        return Ok(());
    }
    let Some(id) = fields.message_id.as_deref() else {
        return Err("an assistant message without `message.id`".into());
    };
    if fields.request_id_invalid {
        return Err("`requestId` is not a string".into());
    }
    if fields.calls.len() > MAX_OPEN_CALLS {
        return Err(format!(
            "a response line with {} tool_use blocks (at most {MAX_OPEN_CALLS} are read)",
            fields.calls.len()
        ));
    }
    let request = fields.request_id.as_deref();
    let session = &event.session_id;
    let continued = open
        .as_ref()
        .filter(|o| o.response.continued_by(id, request))
        .map(|o| o.key.clone());
    let (key, old) = match continued {
        Some(key) => {
            let old = tx.response(session, &key).map_err(|e| e.to_string())?;
            (key, old)
        }
        None => {
            // A new response. Its key is its ids, unless an earlier
            // response had them (a user message between, or no
            // requestId): then also where its first line is.
            let ids = format!("{id}/{}", request.unwrap_or(""));
            let mut key = ids.clone();
            let mut n = 0u32;
            while tx
                .response(session, &key)
                .map_err(|e| e.to_string())?
                .is_some()
            {
                // Taken (also, in a crafted transcript, by a key built to
                // look like this one): another, never one counted before.
                n += 1;
                key = format!("{ids}@{}:{}#{n}", place.path, place.at);
            }
            *open = Some(Open {
                response: OpenResponse::new(id, request, false),
                key: key.clone(),
                calls: Vec::new(),
            });
            (key, None)
        }
    };
    // Each call id is kept with the `message.id` it was first shown in; one
    // shown in a response of another `message.id` is a reused id, refused
    // `duplicate-call-id` whatever it was answered before. One shown again
    // under the same `message.id` is that block logged again, as replay
    // reads it: the same call, and not one of this response's own calls
    // when an earlier response of that id showed it.
    let shown_here = shown_in(place.path, id);
    let mut own = Vec::with_capacity(fields.calls.len());
    for call in fields.calls {
        let fail = |e: StoreError| e.to_string();
        // Shown before under this `message.id` (in this response or an
        // earlier one): logged again.
        let here = shown_under(&call, place.path, id);
        if tx.transcript_call(session, &here).map_err(fail)?.is_some() {
            continue;
        }
        tx.put_transcript_call(session, &here, "").map_err(fail)?;
        let first_key = first_shown(&call);
        match tx
            .transcript_call(session, &first_key)
            .map_err(fail)?
            .as_deref()
        {
            None => tx
                .put_transcript_call(session, &first_key, &shown_here)
                .map_err(fail)?,
            Some(first) if first == shown_here || first == REUSED => {}
            Some(_) => tx
                .put_transcript_call(session, &first_key, REUSED)
                .map_err(fail)?,
        }
        own.push(call);
    }
    if let Some(o) = open {
        o.add_calls(own);
    }
    let usage = match fields.usage.as_deref() {
        None => TokenUsage::ZERO,
        Some(raw) => {
            let value = crate::strict::value_from_str(raw).map_err(|e| format!("usage: {e}"))?;
            if value.is_null() {
                TokenUsage::ZERO
            } else {
                gate::usage::billed_usage(&value)?.0
            }
        }
    };
    let new = {
        let o = old.unwrap_or_default();
        // Later lines of one response repeat its usage (output may grow):
        // keep the largest of each field.
        CountedUsage {
            input: o.input.max(usage.input_tokens),
            output: o.output.max(usage.output_tokens),
            cache_read: o.cache_read.max(usage.cache_read_input_tokens),
            cache_write: o.cache_write.max(usage.cache_creation_input_tokens),
        }
    };
    let o = old.unwrap_or_default();
    let delta = TokenUsage {
        input_tokens: new.input - o.input,
        output_tokens: new.output - o.output,
        cache_read_input_tokens: new.cache_read - o.cache_read,
        cache_creation_input_tokens: new.cache_write - o.cache_write,
    };
    let agent = place.agent;
    tx.put_response(session, &key, agent.unwrap_or(""), model, new)
        .map_err(|e| e.to_string())?;
    if let Some(agent) = agent {
        ledgers
            .agent(tx, session, agent, budget, now)
            .map_err(|e| e.to_string())?;
    }
    // The engine counts it: a model call the first time the response is
    // seen, the tokens not counted before, their cost (a model without a
    // price under a cost limit is remembered), in the session's ledger
    // and the sub-agent's.
    let response = engine::Response {
        model,
        tokens: delta.total(),
        cost_micros: price_of(&budget.prices, model).map(|price| price.cost_micros(&delta)),
        new_call: old.is_none(),
    };
    let who = gate::model::Whose { session, agent };
    gate::model::count_response(
        tx,
        &who,
        ledgers,
        engine::Admitted::AFTER_THE_FACT,
        &response,
    )
    .map_err(|e| e.to_string())
}

fn memchr_find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decides one event against the ledger in `tx` (see the module docs for
/// the order). Changes are committed with the transaction.
pub fn decide(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    budget: &ReplayBudget,
    now: u64,
) -> Result<Answer, HookError> {
    let session = &event.session_id;
    let tools = budget.tool_table().map_err(GateError::Budget)?;
    let mut ledgers = Ledgers::load(tx, session, budget, &tools, now)?;
    if let Some(agent) = &event.agent_id {
        ledgers.agent(tx, session, agent, budget, now)?;
    }
    let backlog = absorb(tx, event, budget, &mut ledgers, now)?;
    ledgers.session.observe_time(now);
    for (_, ledger) in &mut ledgers.agents {
        ledger.observe_time(now);
    }
    let answer = match (&event.call, event.name.as_str()) {
        // Not counted up to date: the gate cannot decide yet (fail closed),
        // but the progress made is kept, so a later call can be decided.
        (Some(_), _) if backlog > 0 => Answer::Deny {
            reason: "transcript-backlog".to_owned(),
            stop: false,
            text: format!(
                "budgetgate refused this call (transcript-backlog): the session's transcript still has {:.1} MB to count before a call can be decided; not executed. Retry the call.",
                backlog as f64 / 1e6
            ),
        },
        (Some(call), _) => decide_call(tx, event, call, budget, &mut ledgers, now)?,
        // Only the session's own budget ends the session: a sub-agent over
        // its own limit has its calls denied, and its stop is its own.
        (None, "UserPromptSubmit" | "Stop" | "SubagentStop") => {
            match gate::exhausted(tx, session, None, &mut ledgers)? {
                Some((detail, Some(_))) => Answer::Stop(format!(
                    "budgetgate: {detail}; the session's budget is spent (see `budgetgate ledger show {session}`)"
                )),
                // No limit is spent: a model's cost cannot be counted.
                Some((detail, None)) => Answer::Stop(format!("budgetgate: {detail}")),
                None => Answer::Pass,
            }
        }
        (None, "PostToolUse" | "PostToolUseFailure") => {
            if let (Some(ran), true) = (&event.result, budget.loops.is_on()) {
                let agent = event.agent_id.as_deref().unwrap_or("");
                if let (Some(call), Some(outcome)) =
                    (gate::loops::call_key(&ran.name, &ran.input), ran.outcome)
                {
                    gate::loops::report_tool_outcome(tx, session, agent, call, Some(outcome))?;
                }
            }
            Answer::Pass
        }
        (None, _) => Answer::Pass,
    };
    ledgers.store(tx, session, now)?;
    if let Answer::Deny { reason, .. } = &answer {
        let call = event.call.as_ref().map_or("", |c| c.id.as_str());
        tx.log(now, session, "deny", &format!("{call}: {reason}"))?;
    }
    Ok(answer)
}

fn decide_call(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    call: &ToolUse,
    budget: &ReplayBudget,
    ledgers: &mut Ledgers<'_>,
    now: u64,
) -> Result<Answer, HookError> {
    let shown_id = format!("the tool_use_id {}", Value::from(call.id.as_str()));
    let reused = tx
        .transcript_call(&event.session_id, &first_shown(&call.id))?
        .as_deref()
        == Some(REUSED);
    let call = gate::ToolCall {
        name: &call.name,
        input: &call.input,
        call_id: &call.id,
        shown_id: &shown_id,
        id_scope: "in this session",
        reused,
    };
    let cx = gate::Context {
        session: &event.session_id,
        agent: event.agent_id.as_deref(),
        budget,
        now,
    };
    Ok(
        match gate::decide_tool_call(tx, &cx, ledgers, &call, gate::Counting::Record)? {
            gate::Verdict::Refuse(refusal) => Answer::Deny {
                reason: refusal.reason.to_owned(),
                stop: refusal.ends_session,
                text: refusal.text,
            },
            gate::Verdict::Ask(text) => Answer::Ask(text),
            gate::Verdict::Run => Answer::Pass,
        },
    )
}
