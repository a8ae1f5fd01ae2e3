//! One line of a Claude Code log (or stream-json output) read as the reader
//! uses it, in one pass: what no reader looks at is skipped while parsing,
//! never built (issue 14, throughput). The result is the part of the
//! [`Value`] that [`value_from_str`](crate::strict::value_from_str) gives
//! that the Claude Code reader reads, for every line that both accept:
//!
//! * top level: only [`LINE_KEYS`] are kept;
//! * `message` is kept on `assistant` and `user` lines only, and of it only
//!   [`MESSAGE_KEYS`];
//! * in `message.content`, a `tool_result` block's `content` (whole files)
//!   is replaced by its digest, a number ([`crate::gate::digest`], for loop
//!   detection), read without being built, and a `thinking` /
//!   `redacted_thinking` block loses its `thinking`, `signature` and `data`.
//!
//! What is kept is read as strictly as `value_from_str` reads it (a key twice
//! in one object is refused, at the same position); what is skipped is still
//! checked to be JSON syntax, but a key repeated inside a skipped part, a
//! lone surrogate escape in a skipped string (which JSON's grammar allows)
//! and nesting deeper than serde_json's 128 levels in a skipped part (which
//! is skipped without recursion, so the stack stays bounded) are not
//! refused: nothing reads them. A line that is not an object is read whole.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::gate::digest::{digest_value, DigestSeed};
use crate::strict::{duplicate_key, refuse_repeated, UniqueKeys, UniqueKeysVisitor};

/// The top-level keys of a Claude Code line (session log or stream-json)
/// that its reader reads; the others are skipped as each line is read.
/// (`message` first: the others are [`ClaudeLine`]'s fields, in order.)
pub(super) const LINE_KEYS: [&str; 8] = [
    "message",
    "type",
    "timestamp",
    "requestId",
    "request_id",
    "parent_tool_use_id",
    "num_turns",
    "total_cost_usd",
];

/// The keys of a line's `message` that its reader reads.
pub(super) const MESSAGE_KEYS: [&str; 5] = ["id", "model", "usage", "stop_reason", "content"];

/// The visits of a pruning visitor for every JSON value but an object: the
/// value built whole, as [`UniqueKeysVisitor`] builds it, and handed to
/// `$wrap` ([`whole`] for a visitor of [`Value`]s; a line or a message that
/// is not an object is held whole by its own).
macro_rules! non_objects_as_values {
    ($out:ty, $wrap:expr) => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_bool(v)?)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_i64(v)?)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_u64(v)?)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_f64(v)?)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_str(v)?)
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_string(v)?)
        }
        fn visit_unit<E: de::Error>(self) -> Result<$out, E> {
            $wrap(UniqueKeysVisitor.visit_unit()?)
        }
    };
}

/// A value kept as it was built.
fn whole<E>(value: Value) -> Result<Value, E> {
    Ok(value)
}

/// One Claude Code line: of the top-level keys, those in [`LINE_KEYS`]
/// (`message` apart), each as it was written.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct ClaudeLine {
    /// The values of [`LINE_KEYS`] but `message`, in that order.
    fields: [Option<Value>; LINE_KEYS.len() - 1],
    /// `message`, on `assistant` and `user` lines.
    pub(super) message: Option<ClaudeMessage>,
    /// The whole line when it is not an object (no reader reads it).
    other: Option<Value>,
}

impl ClaudeLine {
    /// The value of `key`, one of [`LINE_KEYS`] but `message`.
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        field_of(&self.fields, &LINE_KEYS[1..], key)
    }

    /// The line as a [`Value`] (the keys kept, in [`LINE_KEYS`] order).
    #[cfg(test)]
    pub(super) fn to_value(&self) -> Value {
        if let Some(other) = &self.other {
            return other.clone();
        }
        let mut out = Map::new();
        for (key, value) in LINE_KEYS[1..].iter().zip(&self.fields) {
            if let Some(value) = value {
                out.insert((*key).to_owned(), value.clone());
            }
        }
        if let Some(message) = &self.message {
            out.insert("message".into(), message.to_value());
        }
        Value::Object(out)
    }
}

/// A line's `message`: of its keys, those in [`MESSAGE_KEYS`].
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct ClaudeMessage {
    /// The values of [`MESSAGE_KEYS`], in that order.
    fields: [Option<Value>; MESSAGE_KEYS.len()],
    /// The whole `message` when it is not an object (it has no keys).
    other: Option<Value>,
}

impl ClaudeMessage {
    /// The value of `key`, one of [`MESSAGE_KEYS`].
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        field_of(&self.fields, &MESSAGE_KEYS, key)
    }

    #[cfg(test)]
    fn to_value(&self) -> Value {
        if let Some(other) = &self.other {
            return other.clone();
        }
        let mut out = Map::new();
        for (key, value) in MESSAGE_KEYS.iter().zip(&self.fields) {
            if let Some(value) = value {
                out.insert((*key).to_owned(), value.clone());
            }
        }
        Value::Object(out)
    }
}

fn field_of<'a>(fields: &'a [Option<Value>], keys: &[&str], key: &str) -> Option<&'a Value> {
    let at = keys.iter().position(|k| *k == key)?;
    fields.get(at)?.as_ref()
}

/// Reads one Claude Code line, keeping what the reader reads (module docs).
/// The line is built in a box: it is about 1 KB (a dozen [`Value`]s), and
/// moving it by value through the reader's iterators cost more than the
/// allocation (issue 14, throughput).
pub(super) fn claude_code_line_from_str(text: &str) -> Result<Box<ClaudeLine>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let line = de.deserialize_any(LineVisitor)?;
    de.end()?;
    Ok(line)
}

/// A line already parsed whole, read as [`claude_code_line_from_str`] reads
/// its text.
pub(super) fn claude_code_line_from_value(
    value: Value,
) -> Result<Box<ClaudeLine>, serde_json::Error> {
    value.deserialize_any(LineVisitor)
}

/// A map key, borrowed from the text when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Whether a line of `type` keeps its `message`.
fn keeps_message(kind: Option<&Value>) -> bool {
    matches!(kind.and_then(Value::as_str), Some("assistant" | "user"))
}

/// The top level of a line.
struct LineVisitor;

/// A line that is not an object: held whole.
fn other_line<E>(value: Value) -> Result<Box<ClaudeLine>, E> {
    Ok(Box::new(ClaudeLine {
        other: Some(value),
        ..ClaudeLine::default()
    }))
}

impl<'de> Visitor<'de> for LineVisitor {
    type Value = Box<ClaudeLine>;
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Box<ClaudeLine>, A::Error> {
        let mut line = Box::<ClaudeLine>::default();
        let mut message_seen = false;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if key == "message" {
                if message_seen {
                    return Err(duplicate_key(&key));
                }
                message_seen = true;
                // A line whose type is already known not to keep it.
                if line.get("type").is_some() && !keeps_message(line.get("type")) {
                    map.next_value::<IgnoredAny>()?;
                } else {
                    line.message = Some(map.next_value_seed(MessageSeed)?);
                }
                continue;
            }
            let Some(at) = LINE_KEYS[1..].iter().position(|k| **k == *key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if line.fields[at].is_some() {
                return Err(duplicate_key(&key));
            }
            line.fields[at] = Some(map.next_value::<UniqueKeys>()?.0);
        }
        if !keeps_message(line.get("type")) {
            line.message = None;
        }
        Ok(line)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Box<ClaudeLine>, A::Error> {
        other_line(UniqueKeysVisitor.visit_seq(seq)?)
    }
    non_objects_as_values!(Box<ClaudeLine>, other_line);
}

/// `message`: of its keys, [`MESSAGE_KEYS`], its `content` blocks pruned.
struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = ClaudeMessage;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ClaudeMessage, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

/// A `message` that is not an object: held whole.
fn other_message<E>(value: Value) -> Result<ClaudeMessage, E> {
    Ok(ClaudeMessage {
        other: Some(value),
        ..ClaudeMessage::default()
    })
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = ClaudeMessage;
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ClaudeMessage, A::Error> {
        let mut message = ClaudeMessage::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let Some(at) = MESSAGE_KEYS.iter().position(|k| **k == *key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if message.fields[at].is_some() {
                return Err(duplicate_key(&key));
            }
            message.fields[at] = Some(if key == "content" {
                map.next_value_seed(ContentSeed)?
            } else {
                map.next_value::<UniqueKeys>()?.0
            });
        }
        Ok(message)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ClaudeMessage, A::Error> {
        other_message(UniqueKeysVisitor.visit_seq(seq)?)
    }
    non_objects_as_values!(ClaudeMessage, other_message);
}

/// `message.content`: an array of blocks, each pruned; anything else whole.
struct ContentSeed;

impl<'de> DeserializeSeed<'de> for ContentSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Value;
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(block) = seq.next_element_seed(BlockSeed)? {
            items.push(block);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        UniqueKeysVisitor.visit_map(map)
    }
    non_objects_as_values!(Value, whole);
}

/// The keys a block of `type` loses.
fn dropped_keys(kind: Option<&Value>) -> &'static [&'static str] {
    match kind.and_then(Value::as_str) {
        Some("tool_result") => &["content"],
        Some("thinking" | "redacted_thinking") => &["thinking", "signature", "data"],
        _ => &[],
    }
}

/// One block of `message.content`.
struct BlockSeed;

impl<'de> DeserializeSeed<'de> for BlockSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(BlockVisitor)
    }
}

struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = Value;
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        // Keys skipped because the block's type, already read, drops them:
        // held so that a second one is refused as before.
        let mut skipped: Vec<&'static str> = Vec::new();
        // The keys the block's type drops, once its type is read.
        let mut dropped: &[&str] = &[];
        // A tool result's content, digested (loop detection).
        let mut digest = None;
        while let Some(key) = map.next_key::<String>()? {
            refuse_repeated(&out, &key)?;
            if let Some(&k) = dropped.iter().find(|&&k| k == key) {
                if skipped.contains(&k) {
                    return Err(duplicate_key(k));
                }
                skipped.push(k);
                if k == "content" {
                    digest = Some(map.next_value_seed(DigestSeed)?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
                continue;
            }
            let UniqueKeys(value) = map.next_value()?;
            if key == "type" {
                dropped = dropped_keys(Some(&value));
            }
            out.insert(key, value);
        }
        for k in dropped {
            if let (Some(v), true) = (out.remove(*k), *k == "content") {
                digest = Some(digest_value(&v));
            }
        }
        if dropped.contains(&"content") {
            out.insert(
                "content".into(),
                Value::from(digest.unwrap_or_else(|| digest_value(&Value::Null))),
            );
        }
        Ok(Value::Object(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        UniqueKeysVisitor.visit_seq(seq)
    }
    non_objects_as_values!(Value, whole);
}

/// Calls `seen` with each top-level key of the JSON object `text` (and the
/// state it fills, from its default), building none of the values; `None`
/// when `text` is not one JSON object. What a format probe needs from every
/// line of a file, at the cost of one pass that allocates nothing but
/// escaped keys.
pub(super) fn top_level_keys<S: Default>(text: &str, seen: impl FnMut(&str, &mut S)) -> Option<S> {
    struct KeysVisitor<F, S>(F, std::marker::PhantomData<S>);
    impl<'de, S: Default, F: FnMut(&str, &mut S)> Visitor<'de> for KeysVisitor<F, S> {
        type Value = S;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<S, A::Error> {
            let mut state = S::default();
            while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                (self.0)(&key, &mut state);
                map.next_value::<IgnoredAny>()?;
            }
            Ok(state)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let state = de
        .deserialize_map(KeysVisitor(seen, std::marker::PhantomData))
        .ok()?;
    de.end().ok()?;
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::super::is_too_deep;
    use super::super::lines::prune_claude_code_line;
    use super::*;
    use crate::strict::value_from_str;

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
    /// nesting past serde_json's limit of 128 is refused where a reader
    /// reads; in a skipped part, which is skipped without recursion, it is
    /// not (nor a lone surrogate escape, which JSON's grammar allows).
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
        let err = claude_code_line_from_str(&deep_kept).unwrap_err();
        assert!(is_too_deep(&err), "{err}");
        assert!(is_too_deep(&value_from_str(&deep_kept).unwrap_err()));
        let deep_skipped = nested(r#""toolUseResult":"#);
        assert!(is_too_deep(&value_from_str(&deep_skipped).unwrap_err()));
        assert!(claude_code_line_from_str(&deep_skipped).is_ok());
    }
}
