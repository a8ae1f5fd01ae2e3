//! The Claude Code transcript line walker (`host/src/transcript/line.rs`,
//! `SPEC C`) on arbitrary bytes.
//!
//! Checks:
//! * no panic, whatever the nesting, escapes or bytes;
//! * agreement with an independent strict JSON reader
//!   (`budgetgate::strict::value_from_str`, serde_json refusing duplicate
//!   keys): whenever it reads the line as an object, the walker reads it too
//!   and gives the same `type`, `requestId`, `message.id`, `message.model`
//!   (each only when a string) and the same `message.usage` value (its raw
//!   text parses to the oracle's value), whether the line has a `message`,
//!   the ids of `message.content`'s `tool_use` blocks and, per block, the
//!   `tool_use_id` of a `tool_result` one (which tell the lines of one
//!   response apart);
//! * a field the walker returns is one the line holds: `type` and the rest
//!   appear in the line's bytes as JSON strings, `usage` is a slice of the
//!   line;
//! * the walker is a function of the line: the same line with trailing
//!   whitespace gives the same verdict and fields.
#![no_main]

use budgetgate::transcript::line::fields;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
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

    if let Ok(f) = &got {
        if let Some(usage) = &f.usage {
            let bytes = usage.as_bytes();
            assert!(
                line.windows(bytes.len().max(1)).any(|w| w == bytes),
                "usage {usage:?} is not in the line"
            );
        }
        for s in [&f.kind, &f.request_id, &f.message_id, &f.model]
            .into_iter()
            .flatten()
        {
            // The decoded string re-encodes to JSON the reader accepts.
            let encoded = serde_json::to_string(s).expect("a string encodes");
            assert_eq!(
                serde_json::from_str::<String>(&encoded).ok().as_ref(),
                Some(s)
            );
        }
    }

    let Ok(text_line) = std::str::from_utf8(line) else {
        return;
    };
    let Ok(Value::Object(top)) = budgetgate::strict::value_from_str(text_line) else {
        return;
    };
    let f = got.unwrap_or_else(|e| panic!("a strict JSON object was refused: {e}"));
    assert_eq!(f.kind, text(top.get("type")));
    assert_eq!(f.request_id, text(top.get("requestId")));
    let message = top.get("message").and_then(Value::as_object);
    assert_eq!(f.message_id, text(message.and_then(|m| m.get("id"))));
    assert_eq!(f.model, text(message.and_then(|m| m.get("model"))));
    let usage = message.and_then(|m| m.get("usage"));
    match (&f.usage, usage) {
        (None, None) => {}
        (Some(raw), Some(value)) => {
            let read = budgetgate::strict::value_from_str(raw).expect("usage re-reads");
            assert_eq!(&read, value, "usage {raw:?}");
        }
        (walker, oracle) => panic!("usage: walker {walker:?}, oracle {oracle:?}"),
    }
    assert_eq!(
        f.message,
        top.contains_key("message"),
        "message"
    );
    let blocks = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    let is = |b: &Value, kind: &str| b.get("type").and_then(Value::as_str) == Some(kind);
    let calls: Vec<String> = blocks
        .into_iter()
        .flatten()
        .filter(|b| is(b, "tool_use"))
        .filter_map(|b| text(b.get("id")))
        .collect();
    assert_eq!(f.calls, calls, "tool_use ids");
    let results: Option<Vec<Option<String>>> = blocks.map(|blocks| {
        blocks
            .iter()
            .map(|b| {
                is(b, "tool_result")
                    .then(|| text(b.get("tool_use_id")))
                    .flatten()
            })
            .collect()
    });
    assert_eq!(f.results, results, "tool_result ids");
});
