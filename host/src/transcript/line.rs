//! What one Claude Code line says of the responses it belongs to, as every
//! reader takes it: one parser (`claude_line.rs`, the pruning reader
//! replay reads whole logs with) and one set of rules over what it gives
//! (`assistant`, `tool_use`, `result_ids`). `replay` applies them to
//! each line of a log; the hook applies them through [`fields`] to the
//! lines a live session's transcript has grown by.
//!
//! A line the parser refuses (not JSON, a key twice where a reader reads)
//! or the rules refuse (a response without `message.id`, a call without a
//! string `id` or `name`) is an error for both: replay refuses the log, and
//! the hook refuses every call of the session while the line is there
//! (fail closed: it cannot count what replay would not read). What the
//! model or a tool wrote never is: nesting of any depth and lone surrogate
//! escapes are read (`claude_line.rs`), and what no reader reads (a tool
//! result's text, `toolUseResult`, thinking) may hold anything JSON allows.

use serde_json::Value;

pub use super::claude_line::BLOCK_LEVELS;
use super::claude_line::{claude_code_line_from_str, ClaudeLine, ClaudeMessage};
use crate::strict::{brief, field};

/// What an `assistant` line is.
#[derive(Debug)]
pub(crate) enum Assistant<'a> {
    /// It has no `message`: not a response (skipped).
    NoMessage,
    /// Its model is `<synthetic>`: written by Claude Code itself, not a
    /// model call.
    Synthetic,
    /// A line of a model response.
    Response {
        /// Its `message`.
        message: &'a ClaudeMessage,
        /// `message.id`.
        id: &'a str,
        /// The line's request id (`requestId` in a log, `request_id` in
        /// stream-json output), when it has one.
        request_id: Option<&'a str>,
    },
}

/// Reads an `assistant` line; `request_key` names its request id
/// (`requestId`, or `request_id` in stream-json output). A message without
/// an `id`, or a request id that is neither a string nor `null`, is an
/// error.
pub(crate) fn assistant<'a>(
    line: &'a ClaudeLine,
    request_key: &str,
) -> Result<Assistant<'a>, String> {
    let Some(message) = line.message.as_ref() else {
        return Ok(Assistant::NoMessage);
    };
    if message.get("model").and_then(Value::as_str) == Some("<synthetic>") {
        return Ok(Assistant::Synthetic);
    }
    let Some(id) = message.get("id").and_then(Value::as_str) else {
        return Err("an assistant message without `message.id`".into());
    };
    let request_id = match line.get(request_key) {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.as_str()),
        Some(other) => return Err(format!("{request_key} is {}, not a string", brief(other))),
    };
    Ok(Assistant::Response {
        message,
        id,
        request_id,
    })
}

/// A `tool_use` block's `id` and `name` (`at`: the block's place in
/// `content`, for the error); either missing or not a string is an error.
pub(crate) fn tool_use(block: &Value, at: usize) -> Result<(&str, &str), String> {
    let string = |key: &str| match field(block, key) {
        Some(Value::String(text)) => Ok(text.as_str()),
        None => Err(format!("content block {at} (tool_use) has no `{key}`")),
        Some(other) => Err(format!(
            "content block {at} (tool_use): `{key}` is {}, not a string",
            brief(other)
        )),
    };
    Ok((string("id")?, string("name")?))
}

/// What tells a call block from another of the same id: its name and its
/// input's value (a float `-0.0` as `0.0`, as `serde_json` compares
/// values; two inputs too deep to fingerprint are alike). A block of an
/// id shown before under the same `message.id` with the same key is that
/// block logged again; with another key, a reused id (replay's
/// `drop_logged_again` compares calls by this rule).
pub fn block_key(name: &str, input: &Value) -> String {
    let value = crate::gate::fingerprint::fingerprint_walk(input, true).0;
    match value {
        Some(f) => format!("{}:{name}{:032x}", name.len(), f.as_u128()),
        None => format!("{}:{name}deep", name.len()),
    }
}

/// Whether a content block is a `tool_use` block.
pub(crate) fn is_tool_use(block: &Value) -> bool {
    field(block, "type").and_then(Value::as_str) == Some("tool_use")
}

/// Per block of a user message's `content`, the `tool_use_id` of a
/// `tool_result` block (`None` for any other block); `None` when the
/// content is not an array ([`super::only_results_of`] reads it).
pub(crate) fn result_ids(
    message: Option<&ClaudeMessage>,
) -> Option<impl Iterator<Item = Option<&str>>> {
    match message.and_then(|m| m.get("content")) {
        Some(Value::Array(blocks)) => Some(blocks.iter().map(|block| {
            (field(block, "type").and_then(Value::as_str) == Some("tool_result"))
                .then(|| field(block, "tool_use_id").and_then(Value::as_str))
                .flatten()
        })),
        _ => None,
    }
}

/// What the hook reads of one transcript line.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fields {
    /// Neither a response nor a user line (or an assistant line without a
    /// `message`): nothing to count.
    #[default]
    Other,
    /// A `<synthetic>` assistant line: not a model call.
    Synthetic,
    /// A user line: per block of its `content`, the `tool_use_id` of a
    /// `tool_result` block (`None` for another block); `None` when the
    /// content is not an array.
    User(Option<Vec<Option<String>>>),
    /// A line of a model response.
    Response(ResponseLine),
}

/// The counted fields of one line of a model response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResponseLine {
    /// `message.id`.
    pub message_id: String,
    /// `requestId`.
    pub request_id: Option<String>,
    /// `message.model`, when a string.
    pub model: Option<String>,
    /// `message.usage`, when given.
    pub usage: Option<Value>,
    /// `message.content`'s `tool_use` blocks, in order.
    pub calls: Vec<Call>,
}

/// A `tool_use` block of a response line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Call {
    /// Its `id`.
    pub id: String,
    /// Its [`block_key`].
    pub key: String,
}

/// Reads one transcript line (a JSON object, as Claude Code writes it) by
/// the rules above, or says why it cannot be read.
pub fn fields(line: &[u8]) -> Result<Fields, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    let line = claude_code_line_from_str(text).map_err(|e| e.to_string())?;
    match line.get("type").and_then(Value::as_str) {
        Some("user") => Ok(Fields::User(
            result_ids(line.message.as_ref())
                .map(|ids| ids.map(|id| id.map(str::to_owned)).collect()),
        )),
        Some("assistant") => match assistant(&line, "requestId")? {
            Assistant::NoMessage => Ok(Fields::Other),
            Assistant::Synthetic => Ok(Fields::Synthetic),
            Assistant::Response {
                message,
                id,
                request_id,
            } => {
                let mut calls = Vec::new();
                if let Some(Value::Array(blocks)) = message.get("content") {
                    for (at, block) in blocks.iter().enumerate() {
                        if is_tool_use(block) {
                            let (id, name) = tool_use(block, at)?;
                            let input = field(block, "input").unwrap_or(&Value::Null);
                            calls.push(Call {
                                id: id.to_owned(),
                                key: block_key(name, input),
                            });
                        }
                    }
                }
                Ok(Fields::Response(ResponseLine {
                    message_id: id.to_owned(),
                    request_id: request_id.map(str::to_owned),
                    model: message
                        .get("model")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    usage: message.get("usage").cloned(),
                    calls,
                }))
            }
        },
        _ => Ok(Fields::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(line: &str) -> ResponseLine {
        match fields(line.as_bytes()).unwrap() {
            Fields::Response(r) => r,
            other => panic!("not a response: {other:?}"),
        }
    }

    #[test]
    fn the_counted_fields_are_read_whatever_no_reader_reads() {
        // Nesting past serde_json's limit, and a lone surrogate, where no
        // reader reads (a tool result's content, a top-level field).
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let line = format!(
            r#"{{"type":"assistant","toolUseResult":{deep},"requestId":"r1","message":{{"id":"m1","model":"claude-x","content":[{{"type":"tool_use","id":"t1","name":"Read","input":{{"q":"a\"b}}"}}}}],"usage":{{"input_tokens":5,"output_tokens":2}}}},"x":"lone \ud83d here"}}"#
        );
        let r = response(&line);
        assert_eq!(r.message_id, "m1");
        assert_eq!(r.request_id.as_deref(), Some("r1"));
        assert_eq!(r.model.as_deref(), Some("claude-x"));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].id, "t1");
        assert_eq!(
            r.calls[0].key,
            block_key("Read", &serde_json::json!({"q": "a\"b}"}))
        );
        assert_eq!(
            r.usage,
            Some(serde_json::json!({"input_tokens": 5, "output_tokens": 2}))
        );
        let user = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":{deep}}},{{"type":"tool_result","tool_use_id":"t2","content":"lone \udc00"}}]}}}}"#
        );
        assert_eq!(
            fields(user.as_bytes()).unwrap(),
            Fields::User(Some(vec![Some("t1".into()), Some("t2".into())]))
        );
    }

    #[test]
    fn what_a_reader_reads_is_read_strictly_as_replay_reads_it() {
        // A call's input is read (its fingerprint), whatever its depth, and
        // with a lone surrogate read as the replacement character.
        let deep = "[".repeat(5_000) + &"]".repeat(5_000);
        for input in [deep.as_str(), r#""\ud83d""#] {
            let line = format!(
                r#"{{"type":"assistant","message":{{"id":"m","content":[{{"type":"tool_use","id":"t","name":"R","input":{input}}}]}}}}"#
            );
            assert_eq!(response(&line).calls[0].id, "t", "{line:.80}");
        }
        // A call without a string id or name, a message without an id, a
        // request id of another type.
        for line in [
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","name":"R"}]}}"#,
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":7,"name":"R"}]}}"#,
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t"}]}}"#,
            r#"{"type":"assistant","message":{"content":[]}}"#,
            r#"{"type":"assistant","message":null}"#,
            r#"{"type":"assistant","requestId":7,"message":{"id":"m"}}"#,
        ] {
            assert!(fields(line.as_bytes()).is_err(), "{line}");
        }
    }

    #[test]
    fn a_block_key_is_its_name_and_its_inputs_value() {
        use serde_json::json;
        let key = |name: &str, input: Value| block_key(name, &input);
        assert_eq!(
            key("R", json!({"a": 1, "b": [2]})),
            key("R", json!({"b": [2], "a": 1}))
        );
        assert_eq!(key("R", json!({"a": -0.0})), key("R", json!({"a": 0.0})));
        assert_ne!(key("R", json!({"a": 1})), key("S", json!({"a": 1})));
        assert_ne!(key("R", json!({"a": 1})), key("R", json!({"a": 2})));
        assert_ne!(key("R", json!({"a": 1})), key("R", json!({"a": "1"})));
        // Names that run into the value are told apart by their length.
        assert_ne!(key("R1", json!(null)), key("R", json!(null)));
    }

    #[test]
    fn lines_that_are_not_responses() {
        assert_eq!(fields(br#"{"type":"assistant"}"#).unwrap(), Fields::Other);
        assert_eq!(
            fields(br#"{"type":"assistant","message":{"model":"<synthetic>"}}"#).unwrap(),
            Fields::Synthetic
        );
        assert_eq!(
            fields(br#"{"type":7,"message":{"id":"m"}}"#).unwrap(),
            Fields::Other
        );
        assert_eq!(
            fields(br#"{"type":"user","message":{"content":"a prompt"}}"#).unwrap(),
            Fields::User(None)
        );
        assert_eq!(
            fields(br#"{"type":"user","message":{"content":[{"type":"text","tool_use_id":"t2"},{"type":"tool_result","tool_use_id":"t1"}]}}"#).unwrap(),
            Fields::User(Some(vec![None, Some("t1".into())]))
        );
        // Escaped keys and words are what they spell.
        let r = response(
            r#"{"\u0074ype":"\u0061ssistant","message":{"id":"m","\u0075sage":{"input_tokens":1}}}"#,
        );
        assert_eq!(r.usage, Some(serde_json::json!({"input_tokens": 1})));
    }

    #[test]
    fn a_read_field_given_twice_or_a_broken_line_is_an_error() {
        for line in [
            r#"{"type":"assistant","type":"user"}"#,
            r#"{"type":"assistant","message":{"id":"m","usage":{},"usage":{}}}"#,
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"a","id":"b","name":"R"}]}}"#,
            r#"{"message":{"id":"a"}"#,
            r#"{"a":1} x"#,
            r#"{"a":"unterminated}"#,
        ] {
            assert!(fields(line.as_bytes()).is_err(), "{line}");
        }
        // Fields no reader reads may repeat.
        assert!(fields(br#"{"x":1,"x":2,"type":"user"}"#).is_ok());
    }
}
