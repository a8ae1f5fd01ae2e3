//! The one line reader of Claude Code logs (`crate::transcript::claude_line`)
//! held to the two-step reading replay used before it (parse whole, then
//! prune), which stays here as the oracle.

use super::is_too_deep;
use super::lines::prune_claude_code_line;
use crate::strict::value_from_str;
use crate::transcript::claude_line::*;
use serde_json::Value;

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
    let sample = include_str!("../../../../examples/replay/claude-code.jsonl");
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
/// nesting past serde_json's limit of 128 is read: in a skipped part it
/// is skipped without recursion, and in a block's member (a call's input)
/// the part below `BLOCK_LEVELS` is kept as its text; a lone surrogate
/// escape, which JSON's grammar allows, is read as U+FFFD.
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
    assert!(claude_code_line_from_str(&deep_kept).is_ok());
    assert!(is_too_deep(&value_from_str(&deep_kept).unwrap_err()));
    let deep_skipped = nested(r#""toolUseResult":"#);
    assert!(is_too_deep(&value_from_str(&deep_skipped).unwrap_err()));
    assert!(claude_code_line_from_str(&deep_skipped).is_ok());
}
