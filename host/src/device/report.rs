//! The readable report of a session: a proposal in a few words, a reply's
//! verdict, the actuators, and the texts made safe for a terminal
//! ([`json_terminal_safe`], [`error_line`]).

use serde_json::Value;

use super::link::{DeviceError, DeviceReply};
use crate::term::{terminal_safe, unsafe_on_terminal};
use crate::text::shorten;

/// A proposal in a few words: `tool c1 add {"a":7,"b":8}`, `final "15"`.
pub fn summary(proposal: &str) -> String {
    let value: Option<Value> = serde_json::from_str(proposal).ok();
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "?".into(),
    };
    match value {
        Some(Value::Object(map)) if map.get("kind") == Some(&Value::from("tool")) => format!(
            "tool {} {} {}",
            text(map.get("call_id")),
            text(map.get("name")),
            shorten(&text(map.get("arguments")), 60)
        ),
        Some(Value::Object(map)) if map.get("kind") == Some(&Value::from("final")) => {
            format!(
                "final {}",
                shorten(&text(map.get("text")).replace('\n', " "), 100)
            )
        }
        _ => format!("proposal {}", shorten(proposal, 60)),
    }
}

/// The readable verdict of one reply.
pub fn verdict(reply: &DeviceReply) -> String {
    match reply {
        DeviceReply::Observation {
            executed: true,
            ok: true,
            data,
            ..
        } => format!("ok: {data}"),
        DeviceReply::Observation {
            executed: true,
            data,
            ..
        } => format!("failed: {}", text_of(data)),
        DeviceReply::Observation {
            data,
            retry_after_ms: Some(ms),
            ..
        } => format!(
            "refused, not executed: {} (may go on again in {ms} ms)",
            text_of(data)
        ),
        DeviceReply::Observation { data, .. } => {
            format!("refused, not executed: {}", text_of(data))
        }
        DeviceReply::Stopped { status, .. } => format!("stopped: {status}"),
        DeviceReply::Error { error } => format!("error: {error} (no decision used)"),
        DeviceReply::Status {
            decisions,
            max_decisions,
            tool_attempts,
            max_tool_calls,
            state,
            ..
        } => format!(
            "{state}, {decisions}/{max_decisions} decisions, {tool_attempts}/{max_tool_calls} tool attempts"
        ),
        DeviceReply::Hello {
            protocol,
            frame_max,
        } => format!("protocol {protocol}, frame_max {frame_max}"),
    }
}

fn text_of(data: &Value) -> String {
    match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The reference firmware's actuator register, as `status` reports it
/// (bit 0 the lamp, bit 1 the valve): `3` → `lamp on, valve open (register
/// 3)`; 0 is every actuator in its safe state.
pub fn actuators(bits: u32) -> String {
    format!(
        "lamp {}, valve {} (register {bits}{})",
        if bits & 1 != 0 { "on" } else { "off" },
        if bits & 2 != 0 { "open" } else { "closed" },
        if bits == 0 { ": the safe state" } else { "" }
    )
}

/// `raw` (JSON text) with every character that must not reach a terminal
/// raw ([`unsafe_on_terminal`]) written as a JSON escape inside strings, and
/// as a space between tokens: the same JSON value, byte for byte the same
/// text when there is nothing to escape (what `--json` prints).
pub fn json_terminal_safe(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.chars().any(unsafe_on_terminal) {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if unsafe_on_terminal(c) {
            if in_string {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            } else {
                out.push(' ');
            }
            escaped = false;
            continue;
        }
        out.push(c);
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The one line `budgetgate device` prints on stderr for `e`, made safe for
/// a terminal: the message may quote the device or the script.
pub fn error_line(e: &DeviceError) -> String {
    format!("budgetgate device: {}", terminal_safe(&e.to_string()))
}
