//! The hook's reading of a session's transcripts into the ledger (`SPEC E`):
//! what each transcript has grown by since the last event, read with the one
//! line reader and rules of [`crate::transcript`], each model response
//! counted once (its usage in the session's ledger and its sub-agent's), and
//! what tells a block logged again from a reused call id.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use budgetgate_core::engine;
use budgetgate_core::TokenUsage;
use memchr::memmem;

use super::{checked_id, HookError, HookEvent, MAX_READ_PER_EVENT, MAX_TRANSCRIPT_LINE};
use crate::gate::budget_file::{price_of, ReplayBudget};
use crate::gate::{self, Ledgers};
use crate::store::{CountedUsage, LedgerTx, StoreError, TranscriptCursor};
use crate::transcript::line::Fields;
use crate::transcript::{self, OpenResponse, MAX_OPEN_CALLS};

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
pub(super) fn absorb(
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
pub(super) fn first_shown(call: &str) -> String {
    format!("c:{call}")
}

/// The other kind of key: call `call` was shown under `message_id` in
/// transcript `path`; it holds the first such block's
/// [`transcript::line::block_key`] (the same block shown there again is
/// that block logged again, as replay reads each log). Lengths first, so
/// that no two triples make one key.
fn shown_under(call: &str, path: &str, message_id: &str) -> String {
    format!("s:{}:{}:{call}{path}{message_id}", call.len(), path.len())
}

/// A block of call `call` with key `block` other than the first shown
/// under `message_id` in transcript `path` ([`shown_under`]) was shown.
fn another_block(call: &str, path: &str, message_id: &str, block: &str) -> String {
    format!(
        "b:{}:{}:{}:{call}{path}{message_id}{block}",
        call.len(),
        path.len(),
        message_id.len()
    )
}

fn shown_in(path: &str, message_id: &str) -> String {
    format!("={}:{path}{message_id}", path.len())
}

/// What is stored for a call id shown in responses of two `message.id`s.
pub(super) const REUSED: &str = "!";

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
    if memmem::find(line, b"\"assistant\"").is_none()
        && !(user_lines_matter && memmem::find(line, b"\"user\"").is_some())
        && memmem::find(line, b"\\u").is_none()
    {
        return Ok(());
    }
    // As replay reads a log: a byte-order mark opening it is not the
    // line's, and what ends the line is JSON's whitespace only (a form feed
    // is not).
    let line = match place.at {
        0 => line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line),
        _ => line,
    };
    let fields = match transcript::line::fields(line)? {
        Fields::User(blocks) => {
            if let Some(o) = open {
                let blocks = blocks
                    .as_ref()
                    .map(|blocks| blocks.iter().map(Option::as_deref));
                let calls: std::collections::HashSet<&str> =
                    o.calls.iter().map(String::as_str).collect();
                let only_results = transcript::only_results_of(blocks, |id| calls.contains(id));
                o.response.user_line(only_results);
            }
            return Ok(());
        }
        Fields::Response(fields) => fields,
        Fields::Other | Fields::Synthetic => return Ok(()),
    };
    let model = fields.model.as_deref().unwrap_or("");
    let id = fields.message_id.as_str();
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
    // under the same `message.id` with the same name and input
    // ([`transcript::line::block_key`]) is that block logged again, as
    // replay reads it: the same call, and not one of this response's own
    // calls when an earlier response of that id showed it; with another
    // name or input it is a reused id too, as replay refuses it.
    let shown_here = shown_in(place.path, id);
    let mut own = Vec::with_capacity(fields.calls.len());
    for call in fields.calls {
        let fail = |e: StoreError| e.to_string();
        let first_key = first_shown(&call.id);
        // Shown before under this `message.id` (in this response or an
        // earlier one): the key of the first block shown, or "" in a ledger
        // written before blocks were told apart (taken as the same block).
        let here = shown_under(&call.id, place.path, id);
        match tx.transcript_call(session, &here).map_err(fail)? {
            Some(first) if first.is_empty() || first == call.key => continue,
            Some(_) => {
                // Another block of this id: logged again if one of its key
                // was shown; else a reused id.
                let again = another_block(&call.id, place.path, id, &call.key);
                if tx.transcript_call(session, &again).map_err(fail)?.is_some() {
                    continue;
                }
                tx.put_transcript_call(session, &again, "").map_err(fail)?;
                tx.put_transcript_call(session, &first_key, REUSED)
                    .map_err(fail)?;
            }
            None => {
                tx.put_transcript_call(session, &here, &call.key)
                    .map_err(fail)?;
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
            }
        }
        own.push(call.id);
    }
    if let Some(o) = open {
        o.add_calls(own);
    }
    let usage = match &fields.usage {
        None | Some(serde_json::Value::Null) => TokenUsage::ZERO,
        Some(value) => gate::usage::billed_usage(value)?.0,
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
