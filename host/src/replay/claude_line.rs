//! One line of a Claude Code log (or stream-json output) read as the reader
//! uses it, in one pass: what no reader looks at is skipped while parsing,
//! never built (issue 14, throughput). The result is the part of the
//! [`Value`] that [`value_from_str`](crate::strict::value_from_str) gives
//! that the Claude Code reader reads, for every line that both accept:
//!
//! * top level: only [`LINE_KEYS`] are kept;
//! * `message` is kept on `assistant` and `user` lines only, and of it only
//!   [`MESSAGE_KEYS`];
//! * in `message.content`, a `tool_result` block loses its `content` (whole
//!   files) and a `thinking` / `redacted_thinking` block its `thinking`,
//!   `signature` and `data`.
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

use crate::strict::{duplicate_key, refuse_repeated, UniqueKeys, UniqueKeysVisitor};

/// The top-level keys of a Claude Code line (session log or stream-json)
/// that its reader reads; the others are skipped as each line is read.
pub(super) const LINE_KEYS: [&str; 8] = [
    "type",
    "timestamp",
    "requestId",
    "request_id",
    "parent_tool_use_id",
    "message",
    "num_turns",
    "total_cost_usd",
];

/// The keys of a line's `message` that its reader reads.
pub(super) const MESSAGE_KEYS: [&str; 5] = ["id", "model", "usage", "stop_reason", "content"];

/// The visits of a pruning visitor that build the value whole, as
/// [`UniqueKeysVisitor`] does: every JSON value but objects and arrays.
macro_rules! scalars_as_values {
    () => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
            UniqueKeysVisitor.visit_bool(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
            UniqueKeysVisitor.visit_i64(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
            UniqueKeysVisitor.visit_u64(v)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            UniqueKeysVisitor.visit_f64(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
            UniqueKeysVisitor.visit_str(v)
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            UniqueKeysVisitor.visit_string(v)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            UniqueKeysVisitor.visit_unit()
        }
    };
}

/// Reads one Claude Code line, keeping what the readers use (module docs).
pub(super) fn claude_code_line_from_str(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = de.deserialize_any(LineVisitor)?;
    de.end()?;
    Ok(value)
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

impl<'de> Visitor<'de> for LineVisitor {
    type Value = Value;
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if !LINE_KEYS.contains(&&*key) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            refuse_repeated(&out, &key)?;
            let value = if key == "message" {
                // A line whose type is already known not to keep it.
                if out.contains_key("type") && !keeps_message(out.get("type")) {
                    map.next_value::<IgnoredAny>()?;
                    // Held as a marker, so a second `message` is refused.
                    Value::Null
                } else {
                    map.next_value_seed(MessageSeed)?
                }
            } else {
                map.next_value::<UniqueKeys>()?.0
            };
            out.insert(key.into_owned(), value);
        }
        if !keeps_message(out.get("type")) {
            out.remove("message");
        }
        Ok(Value::Object(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        UniqueKeysVisitor.visit_seq(seq)
    }
    scalars_as_values!();
}

/// `message`: kept whole but for its `content` blocks.
struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Value;
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if !MESSAGE_KEYS.contains(&&*key) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            refuse_repeated(&out, &key)?;
            let value = if key == "content" {
                map.next_value_seed(ContentSeed)?
            } else {
                map.next_value::<UniqueKeys>()?.0
            };
            out.insert(key.into_owned(), value);
        }
        Ok(Value::Object(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        UniqueKeysVisitor.visit_seq(seq)
    }
    scalars_as_values!();
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
    scalars_as_values!();
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
        while let Some(key) = map.next_key::<String>()? {
            refuse_repeated(&out, &key)?;
            if let Some(&k) = dropped_keys(out.get("type")).iter().find(|&&k| k == key) {
                if skipped.contains(&k) {
                    return Err(duplicate_key(k));
                }
                skipped.push(k);
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let UniqueKeys(value) = map.next_value()?;
            out.insert(key, value);
        }
        for k in dropped_keys(out.get("type")) {
            out.remove(*k);
        }
        Ok(Value::Object(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        UniqueKeysVisitor.visit_seq(seq)
    }
    scalars_as_values!();
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
