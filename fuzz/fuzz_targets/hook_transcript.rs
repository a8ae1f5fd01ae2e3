//! One Claude Code transcript line as the hook reads it
//! (`host/src/transcript/line.rs`: the one line reader replay reads logs
//! with, and the rules every reader applies to what it gives; `SPEC C`),
//! on arbitrary bytes.
//!
//! Checks:
//! * no panic, whatever the nesting, escapes or bytes;
//! * the reading is a function of the line: the same line with trailing
//!   whitespace gives the same verdict and fields;
//! * agreement with an independent strict JSON reader
//!   (`budgetgate::strict::value_from_str`, serde_json refusing duplicate
//!   keys) and the rules written out here again: whenever that reader reads
//!   the line as an object, the hook reads it too, and
//!   - a `user` line gives, per block of an array `message.content`, the
//!     `tool_use_id` of a `tool_result` block;
//!   - an `assistant` line without `message` is nothing, one of model
//!     `<synthetic>` is not a model call, and any other is an error when
//!     `message.id` is not a string, `requestId` is neither a string nor
//!     null, or a `tool_use` block has no string `id` or `name`; else it
//!     gives the same `message.id`, `requestId`, `message.model`,
//!     `message.usage`, and `tool_use` ids with their blocks' keys (name
//!     and input);
//!   - any other line is nothing.
#![no_main]

use budgetgate::transcript::line::{block_key, fields, Call, Fields, ResponseLine, BLOCK_LEVELS};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// Levels of `value` (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// What the hook must read of a line the oracle reads as `top` (`None`:
/// not said here, a call's input deeper than the reader builds).
fn expected(top: &Map<String, Value>) -> Result<Option<Fields>, ()> {
    let message = top.get("message");
    let object = message.and_then(Value::as_object);
    let blocks = object
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    let is = |b: &Value, kind: &str| b.get("type").and_then(Value::as_str) == Some(kind);
    match top.get("type").and_then(Value::as_str) {
        Some("user") => Ok(Some(Fields::User(blocks.map(|blocks| {
            blocks
                .iter()
                .map(|b| {
                    is(b, "tool_result")
                        .then(|| text(b.get("tool_use_id")))
                        .flatten()
                })
                .collect()
        })))),
        Some("assistant") => {
            let Some(_) = message else {
                return Ok(Some(Fields::Other));
            };
            let model = text(object.and_then(|m| m.get("model")));
            if model.as_deref() == Some("<synthetic>") {
                return Ok(Some(Fields::Synthetic));
            }
            let message_id = text(object.and_then(|m| m.get("id"))).ok_or(())?;
            let request_id = match top.get("requestId") {
                None | Some(Value::Null) => None,
                Some(Value::String(r)) => Some(r.clone()),
                Some(_) => return Err(()),
            };
            let mut calls = Vec::new();
            for block in blocks.into_iter().flatten().filter(|b| is(b, "tool_use")) {
                let id = text(block.get("id")).ok_or(())?;
                let name = text(block.get("name")).ok_or(())?;
                let input = block.get("input").unwrap_or(&Value::Null);
                if depth(input) > BLOCK_LEVELS {
                    // Read below its levels as its text (not this value).
                    return Ok(None);
                }
                calls.push(Call {
                    id,
                    key: block_key(&name, input),
                });
            }
            Ok(Some(Fields::Response(ResponseLine {
                message_id,
                request_id,
                model,
                usage: object.and_then(|m| m.get("usage")).cloned(),
                calls,
            })))
        }
        _ => Ok(Some(Fields::Other)),
    }
}

fuzz_target!(|line: &[u8]| {
    let got = fields(line);
    let mut spaced = line.to_vec();
    spaced.extend_from_slice(b" \t\r\n");
    let again = fields(&spaced);
    assert_eq!(
        again.is_ok(),
        got.is_ok(),
        "trailing whitespace changed the verdict"
    );
    assert_eq!(
        again.ok(),
        got.clone().ok(),
        "trailing whitespace changed the fields"
    );

    let Ok(text_line) = std::str::from_utf8(line) else {
        return;
    };
    let Ok(Value::Object(top)) = budgetgate::strict::value_from_str(text_line) else {
        return;
    };
    match expected(&top) {
        Ok(None) => {}
        Ok(Some(want)) => {
            let f = got.unwrap_or_else(|e| panic!("a strict JSON object was refused: {e}"));
            assert_eq!(f, want);
        }
        Err(()) => assert!(got.is_err(), "read {got:?}, the rules refuse it"),
    }
});
