//! Detecting a recording's format and reading it into a [`Session`]: the
//! detection and what the readers share here, one file per format beside it
//! (Claude Code logs, Anthropic exchanges, claude-trace logs, VCR cassettes,
//! SWE-agent trajectories), with the JSON Lines and YAML readers and the
//! other providers' reply shapes they use.

mod claude_code;
#[cfg(test)]
mod claude_line_tests;
mod claude_trace;
mod exchanges;
mod lines;
mod message;
mod openai;
mod providers;
mod swe_agent;
mod time;
mod vcr;
mod yaml;

use serde_json::{Map, Value};

use self::claude_code::read_claude_code;
use self::exchanges::{is_api_error, read_exchanges};
use self::lines::from_json_lines;
use self::swe_agent::read_traj;
use self::vcr::read_vcr;
use self::yaml::{check_yaml, yaml_to_json};
use super::session::{Format, Session};
use crate::strict::brief;
use crate::strict::value_from_str;
use crate::transcript::claude_line::{claude_code_line_from_value, ClaudeLine};

pub use lines::{read_large_claude_code, read_large_claude_code_spilled};

use budgetgate_core::engine::loops::Outcome;

/// The outcome of a tool result whose content is `content` (absent: none),
/// for loop detection: its digest ([`crate::gate::digest::digest_value`]) and `error`.
fn result_outcome(content: Option<&Value>, error: bool) -> Outcome {
    Outcome {
        digest: crate::gate::digest::digest_value(content.unwrap_or(&Value::Null)),
        error,
    }
}
pub use yaml::{MAX_YAML_ALIAS_WEIGHT, MAX_YAML_DEPTH};

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
            // Too deep for one document: JSON Lines may still read it (a
            // Claude Code log's reader keeps a call's deep input as text);
            // their reader refuses it otherwise, naming the line.
            Err(e) if is_too_deep(&e) && !trimmed.starts_with('{') => return Err(too_deep(&e)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
