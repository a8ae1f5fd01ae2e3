//! What the readers share: a Messages API response (a JSON value, or a
//! Claude Code line's message) made a recorded turn, and the tool results
//! found in user content.

use budgetgate_core::engine::loops::Outcome;

use crate::gate::digest::digest_value;
use std::collections::HashMap;

use budgetgate_core::turn::TokenUsage;
use serde_json::Value;

use super::brief;
use super::exchanges::UNREADABLE;
use crate::replay::session::{billed_usage, RecordedArguments, RecordedCall, RecordedTurn};
use crate::strict::field;
use crate::transcript;
use crate::transcript::claude_line::ClaudeMessage;

/// A response message's fields, as a [`Value`] or as a Claude Code line's
/// [`ClaudeMessage`] holds them.
pub(super) trait MessageFields {
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
pub(super) fn stop_reason_of(message: &impl MessageFields) -> Result<Option<String>, String> {
    match message.get("stop_reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(reason)) => Ok(Some(reason.clone())),
        Some(other) => Err(format!(
            "stop_reason is {}, neither a string nor null",
            brief(other)
        )),
    }
}

/// The turn `message` records (times filled by the caller); its calls'
/// inputs are read by `read_input`.
pub(super) fn turn_from_message(
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
pub(super) type ReadInput = fn(&Value) -> RecordedArguments;

/// A Claude Code log's `input`: always read, whatever it holds.
pub(super) fn recorded_input(input: &Value) -> RecordedArguments {
    RecordedArguments::of_value(input)
}

/// An exchange's `input`: a string with the [`UNREADABLE`] mark, which the
/// stream rebuilders write for arguments cut off mid-way, is unreadable.
pub(super) fn exchange_input(input: &Value) -> RecordedArguments {
    match input {
        Value::String(s) if s.starts_with(UNREADABLE) => RecordedArguments::Unreadable,
        _ => RecordedArguments::of_value(input),
    }
}

/// Adds `content`'s text, calls and server tool uses to `turn`; the calls'
/// inputs are read by `read_input`.
pub(super) fn add_blocks(
    turn: &mut RecordedTurn,
    content: Option<&Value>,
    read_input: ReadInput,
) -> Result<(), String> {
    match content {
        Some(Value::Array(blocks)) => {
            for (at, block) in blocks.iter().enumerate() {
                match field(block, "type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = field(block, "text").and_then(Value::as_str).unwrap_or("");
                        turn.text_chars += text.chars().count();
                        turn.text_digest.feed(text);
                    }
                    Some("tool_use") => {
                        let (id, name) = transcript::line::tool_use(block, at)?;
                        turn.calls.push(RecordedCall {
                            id: id.to_owned(),
                            name: name.to_owned(),
                            arguments: read_input(field(block, "input").unwrap_or(&Value::Null)),
                            recorded: None,
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
        Some(Value::String(text)) => {
            turn.text_chars += text.chars().count();
            turn.text_digest.feed(text);
        }
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
pub(super) trait ResultSink {
    fn record(&mut self, id: &str, outcome: Outcome);
}

impl ResultSink for HashMap<String, Outcome> {
    fn record(&mut self, id: &str, outcome: Outcome) {
        self.insert(id.to_owned(), outcome);
    }
}

/// Tool results found in user content: `tool_use_id` → the result's
/// outcome (its content's digest, and `is_error`). A Claude Code reader
/// has replaced each content by its digest already
/// ([`crate::gate::digest::DigestSeed`]); other readers' contents are digested
/// here, the same way.
pub(super) fn collect_results(content: Option<&Value>, into: &mut impl ResultSink) {
    if let Some(Value::Array(blocks)) = content {
        for block in blocks {
            if field(block, "type").and_then(Value::as_str) == Some("tool_result") {
                if let Some(id) = field(block, "tool_use_id").and_then(Value::as_str) {
                    let error = field(block, "is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let digest = match field(block, "content") {
                        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
                        other => digest_value(other.unwrap_or(&Value::Null)),
                    };
                    into.record(id, Outcome { digest, error });
                }
            }
        }
    }
}

pub(super) fn apply_results(turns: &mut [RecordedTurn], results: &HashMap<String, Outcome>) {
    for call in turns.iter_mut().flat_map(|t| t.calls.iter_mut()) {
        call.recorded = results.get(&call.id).copied();
    }
}
