//! One line of a Claude Code log (or stream-json output) read as every
//! reader uses it, in one pass: the one line reader of Claude Code logs,
//! for `replay` and the hook alike ([`super::line`]). What no reader looks
//! at is skipped while parsing, never built (issue 14, throughput). The
//! result is the part of the [`Value`] that
//! [`value_from_str`](crate::strict::value_from_str) gives that the Claude
//! Code reader reads, for every line that both accept:
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
//! checked to be JSON syntax, but a key repeated inside a skipped part and
//! nesting deeper than serde_json's 128 levels in a skipped part (which is
//! skipped without recursion, so the stack stays bounded) are not refused:
//! nothing reads them. Two things `JSON.stringify` writes, and a strict
//! reader refuses, are read wherever they are (issue 30: a model's call or
//! a tool's output must not stop a session's count): a lone surrogate
//! escape is read as U+FFFD ([`crate::strict::without_lone_surrogates`]), and a content
//! block's member nested deeper than [`BLOCK_LEVELS`] keeps its deep part
//! as its text ([`deep_part`]). A line that is not an object is read whole.
//! At most [`MAX_LINE_VALUES`] values are built of one line: a line holding
//! more where a reader reads is refused, so its memory stays bounded.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gate::digest::{digest_value, DigestSeed};
use crate::strict::{duplicate_key, refuse_repeated, without_lone_surrogates, UniqueKeysVisitor};

/// The top-level keys of a Claude Code line (session log or stream-json)
/// that its reader reads; the others are skipped as each line is read.
/// (`message` first: the others are [`ClaudeLine`]'s fields, in order.)
pub(crate) const LINE_KEYS: [&str; 8] = [
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
pub(crate) const MESSAGE_KEYS: [&str; 5] = ["id", "model", "usage", "stop_reason", "content"];

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
pub(crate) struct ClaudeLine {
    /// The values of [`LINE_KEYS`] but `message`, in that order.
    fields: [Option<Value>; LINE_KEYS.len() - 1],
    /// `message`, on `assistant` and `user` lines.
    pub(crate) message: Option<ClaudeMessage>,
    /// The whole line when it is not an object (no reader reads it).
    other: Option<Value>,
}

impl ClaudeLine {
    /// The value of `key`, one of [`LINE_KEYS`] but `message`.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        field_of(&self.fields, &LINE_KEYS[1..], key)
    }

    /// The line as a [`Value`] (the keys kept, in [`LINE_KEYS`] order).
    #[cfg(test)]
    pub(crate) fn to_value(&self) -> Value {
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
pub(crate) struct ClaudeMessage {
    /// The values of [`MESSAGE_KEYS`], in that order.
    fields: [Option<Value>; MESSAGE_KEYS.len()],
    /// The whole `message` when it is not an object (it has no keys).
    other: Option<Value>,
}

impl ClaudeMessage {
    /// The value of `key`, one of [`MESSAGE_KEYS`].
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        field_of(&self.fields, &MESSAGE_KEYS, key)
    }

    #[cfg(test)]
    pub(crate) fn to_value(&self) -> Value {
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
pub(crate) fn claude_code_line_from_str(text: &str) -> Result<Box<ClaudeLine>, serde_json::Error> {
    let text = without_lone_surrogates(text);
    new_line();
    let mut de = serde_json::Deserializer::from_str(&text);
    let line = de.deserialize_any(LineVisitor)?;
    de.end()?;
    Ok(line)
}

/// A line already parsed whole, read as [`claude_code_line_from_str`] reads
/// its text.
pub(crate) fn claude_code_line_from_value(
    value: Value,
) -> Result<Box<ClaudeLine>, serde_json::Error> {
    new_line();
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
            line.fields[at] = Some(map.next_value_seed(Capped(BLOCK_LEVELS))?);
        }
        if !keeps_message(line.get("type")) {
            line.message = None;
        }
        Ok(line)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Box<ClaudeLine>, A::Error> {
        other_line(CappedVisitor(BLOCK_LEVELS).visit_seq(seq)?)
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
                map.next_value_seed(Capped(BLOCK_LEVELS))?
            });
        }
        Ok(message)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ClaudeMessage, A::Error> {
        other_message(CappedVisitor(BLOCK_LEVELS).visit_seq(seq)?)
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
        CappedVisitor(BLOCK_LEVELS).visit_map(map)
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
        take_value()?;
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
            let value = map.next_value_seed(Capped(BLOCK_LEVELS))?;
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
        CappedVisitor(BLOCK_LEVELS).visit_seq(seq)
    }
    non_objects_as_values!(Value, whole);
}

/// Levels of a content block's member (a call's `input`) built as a
/// value; a part deeper is kept as `deep_part` of its text, so that
/// nesting of any depth (which `JSON.stringify` writes) is read with a
/// bounded stack. A member starts 4 levels down the line (line, message,
/// content, block), so 120 stays within serde_json's 128: every input it
/// read before is read as before.
pub const BLOCK_LEVELS: usize = 120;

/// What stands for a part of a block nested deeper than [`BLOCK_LEVELS`]:
/// a string that no model writes by chance (it opens with U+0001) holding
/// the part's JSON text as written, so that two calls differing only down
/// there still differ.
pub(crate) fn deep_part(raw: &RawValue) -> Value {
    Value::String(format!(
        "\u{1}deeper than {BLOCK_LEVELS} levels: {}",
        raw.get()
    ))
}

/// Most values the reader builds of one line (each value it keeps, at any
/// depth, and each content block): a line holding more where a reader
/// reads is refused, so that the memory a line takes stays bounded
/// whatever it holds (a 32 MiB call input of `1,1,…` would build 16 M
/// values, about 1 GB). A model's call, a response or a result never comes
/// near it: what no reader reads (a result's content) is not counted.
pub const MAX_LINE_VALUES: usize = 1 << 20;

thread_local! {
    /// What is left of [`MAX_LINE_VALUES`] for the line being read.
    static VALUES_LEFT: Cell<usize> = const { Cell::new(MAX_LINE_VALUES) };
}

/// Counts one value built, or refuses the line past [`MAX_LINE_VALUES`].
fn take_value<E: de::Error>() -> Result<(), E> {
    VALUES_LEFT.with(|left| match left.get() {
        0 => Err(E::custom(format_args!(
            "more than {MAX_LINE_VALUES} values in the parts of one line that are read"
        ))),
        n => {
            left.set(n - 1);
            Ok(())
        }
    })
}

/// A new line: [`MAX_LINE_VALUES`] left.
fn new_line() {
    VALUES_LEFT.with(|left| left.set(MAX_LINE_VALUES));
}

/// A value built as [`UniqueKeysVisitor`] builds it, down to `.0` levels;
/// below, [`deep_part`].
struct Capped(usize);

impl<'de> DeserializeSeed<'de> for Capped {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        take_value()?;
        if self.0 == 0 {
            // Read without recursion, whatever its depth.
            let raw = <Box<RawValue>>::deserialize(d)?;
            return Ok(deep_part(&raw));
        }
        d.deserialize_any(CappedVisitor(self.0))
    }
}

struct CappedVisitor(usize);

impl<'de> Visitor<'de> for CappedVisitor {
    type Value = Value;
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Capped(self.0 - 1))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            refuse_repeated(&out, &key)?;
            let value = map.next_value_seed(Capped(self.0 - 1))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
    non_objects_as_values!(Value, whole);
}

/// Calls `seen` with each top-level key of the JSON object `text` (and the
/// state it fills, from its default), building none of the values; `None`
/// when `text` is not one JSON object. What a format probe needs from every
/// line of a file, at the cost of one pass that allocates nothing but
/// escaped keys.
pub(crate) fn top_level_keys<S: Default>(text: &str, seen: impl FnMut(&str, &mut S)) -> Option<S> {
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
    // Read as the line's reader reads it (a lone surrogate escape too).
    let text = without_lone_surrogates(text);
    let mut de = serde_json::Deserializer::from_str(&text);
    let state = de
        .deserialize_map(KeysVisitor(seen, std::marker::PhantomData))
        .ok()?;
    de.end().ok()?;
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogate_escapes_are_read_as_the_replacement_character() {
        let cases = [
            (r#""a\ud83d""#, r#""a\ufffd""#),
            (r#""\udc00x""#, r#""\ufffdx""#),
            (r#""\uDE00\uD83D""#, r#""\ufffd\ufffd""#),
            // A whole pair, and escapes that are not surrogates, stay.
            (r#""\ud83d\ude00 \u00e9 \n""#, r#""\ud83d\ude00 \u00e9 \n""#),
            // An escaped backslash before `ud83d` is not an escape of it.
            (r#""\\ud83d""#, r#""\\ud83d""#),
            (r#""\\\ud83d""#, r#""\\\ufffd""#),
            // A high half followed by a high half: both lone.
            (r#""\ud83d\ud83d\ude00""#, r#""\ufffd\ud83d\ude00""#),
            // Broken escapes are left to the parser.
            (r#""\ud8""#, r#""\ud8""#),
            (r#""\u+d83""#, r#""\u+d83""#),
        ];
        for (text, want) in cases {
            assert_eq!(without_lone_surrogates(text), want, "{text}");
            assert_eq!(without_lone_surrogates(text).len(), text.len());
        }
        assert!(matches!(without_lone_surrogates("plain"), Cow::Borrowed(_)));
        let line = claude_code_line_from_str(
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"R","input":{"s":"x\ud83d"}}]}}"#,
        )
        .unwrap();
        let content = line.message.as_ref().unwrap().get("content").unwrap();
        assert_eq!(content[0]["input"]["s"], "x\u{fffd}");
    }

    #[test]
    fn a_line_of_more_values_than_the_reader_builds_is_refused() {
        let line = |n: usize| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m","content":[{{"type":"tool_use","id":"t","name":"R","input":[{}]}}]}}}}"#,
                vec!["1"; n].join(",")
            )
        };
        // The line's own values (its type, the message's id, the block,
        // the block's type, id, name and input) and the input's items.
        let own = 7;
        assert!(claude_code_line_from_str(&line(MAX_LINE_VALUES - own)).is_ok());
        let err = claude_code_line_from_str(&line(MAX_LINE_VALUES - own + 1)).unwrap_err();
        assert!(
            err.to_string().contains("more than 1048576 values"),
            "{err}"
        );
        // Each line has its own count.
        assert!(claude_code_line_from_str(&line(MAX_LINE_VALUES - own)).is_ok());
        // Blocks count too; a result's content, which is not built, does not.
        let blocks = format!(
            r#"{{"type":"user","message":{{"content":[{}]}}}}"#,
            vec!["{}"; MAX_LINE_VALUES].join(",")
        );
        assert!(claude_code_line_from_str(&blocks).is_err());
        let result = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t","content":[{}]}}]}}}}"#,
            vec!["1"; 2 * MAX_LINE_VALUES].join(",")
        );
        assert!(claude_code_line_from_str(&result).is_ok());
        // A line parsed whole first (a one-line document) reads the same,
        // a member past the levels included.
        let deep = format!(
            r#"{{"type":"assistant","message":{{"id":"m","content":[{{"type":"tool_use","id":"t","name":"R","input":{}1{}}}]}}}}"#,
            "[".repeat(BLOCK_LEVELS + 2),
            "]".repeat(BLOCK_LEVELS + 2)
        );
        let value: Value = serde_json::from_str(&deep).unwrap();
        assert_eq!(
            claude_code_line_from_value(value).unwrap(),
            claude_code_line_from_str(&deep).unwrap()
        );
    }

    #[test]
    fn a_block_member_deeper_than_its_levels_is_kept_as_its_text() {
        let nested = |levels: usize, leaf: &str| "[".repeat(levels) + leaf + &"]".repeat(levels);
        let input = |body: &str| {
            let line = format!(
                r#"{{"type":"assistant","message":{{"id":"m","content":[{{"type":"tool_use","id":"t","name":"R","input":{body}}}]}}}}"#
            );
            let line = claude_code_line_from_str(&line).unwrap();
            line.message.as_ref().unwrap().get("content").unwrap()[0]["input"].clone()
        };
        // Within the levels: the value itself.
        let shallow = nested(BLOCK_LEVELS - 1, "7");
        assert_eq!(
            input(&shallow),
            serde_json::from_str::<Value>(&shallow).unwrap()
        );
        // Deeper: the part below is its text, and two such parts that
        // differ, however deep, still differ.
        let a = input(&nested(10_000, "1"));
        let b = input(&nested(10_000, "2"));
        assert_ne!(a, b);
        let mut at = &a;
        for _ in 0..BLOCK_LEVELS - 1 {
            at = &at[0];
        }
        let part = at[0].as_str().unwrap();
        assert!(
            part.starts_with("\u{1}deeper than 120 levels: [["),
            "{part:.60}"
        );
        assert!(part.contains("[1]") && part.ends_with("]]"));
        // Keys are still unique at every built level.
        assert!(claude_code_line_from_str(
            r#"{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"R","input":{"a":{"b":1,"b":2}}}]}}"#
        )
        .is_err());
    }
}
