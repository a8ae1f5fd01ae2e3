//! Strict reading of request documents on the std side: objects whose keys are
//! unique, with every value kept as its raw JSON text so the core's own rules
//! (integers vs floats, `-0`, huge literals) decide what it is; and
//! [`value_from_str`], a `serde_json::Value` whose objects have unique keys
//! at every depth (what `replay` reads recordings with).

use std::borrow::Cow;
use std::fmt;

use budgetgate_core::json::Number;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// `text` with each `\u` escape of a lone surrogate (half of a UTF-16 pair
/// without the other half) spelled `\ufffd`, the replacement character,
/// as a lossy UTF-16 decoder reads it. `JSON.stringify` writes such escapes
/// (a string cut in the middle of a pair, as a long tool output is), and
/// serde_json refuses them. Escapes have the same length, so positions in
/// errors hold; a text without any is borrowed as it is.
pub fn without_lone_surrogates(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    // The code unit of the `\uXXXX` escape at `at`, if one is there.
    let unit = |at: usize| -> Option<u16> {
        if bytes.get(at..at + 2)? != b"\\u" {
            return None;
        }
        let hex = std::str::from_utf8(bytes.get(at + 2..at + 6)?).ok()?;
        u16::from_str_radix(hex, 16)
            .ok()
            .filter(|_| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let high = |u: u16| (0xD800..0xDC00).contains(&u);
    let low = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    while let Some(found) = bytes.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        at += found;
        match unit(at) {
            Some(u) if high(u) && unit(at + 6).is_some_and(low) => at += 12,
            Some(u) if high(u) || low(u) => {
                let out = out.get_or_insert_with(|| bytes.to_vec());
                if let Some(digits) = out.get_mut(at + 2..at + 6) {
                    digits.copy_from_slice(b"fffd");
                }
                at += 6;
            }
            // Another escape (`\\` included): its two first bytes.
            _ => at += 2,
        }
    }
    match out {
        // Only ASCII hex digits were written over ASCII hex digits.
        Some(out) => Cow::Owned(String::from_utf8(out).unwrap_or_else(|_| text.to_owned())),
        None => Cow::Borrowed(text),
    }
}

/// A JSON value shown in an error, cut to 40 characters.
pub(crate) fn brief(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 40 {
        text
    } else {
        text.chars().take(39).chain(['…']).collect()
    }
}

/// A JSON value whose objects, at every depth, have unique keys.
pub(crate) struct UniqueKeys(pub(crate) Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

/// Builds a [`Value`] whose objects have unique keys; readers that keep
/// only part of a document hand it what they keep.
pub(crate) struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            refuse_repeated(&out, &key)?;
            let UniqueKeys(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// `value[key]` as [`Value::get`] finds it in an object (`None` for
/// anything else), searched in order in an object of up to
/// [`SCANNED_KEYS`] keys (the usual content block or usage object), where
/// that is cheaper than hashing the key (issue 14, throughput). A key is
/// found at most once either way: the objects read here have unique keys.
pub(crate) fn field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    lookup(value.as_object()?, key)
}

/// `object[key]`: searched in order up to [`SCANNED_KEYS`] keys, hashed
/// beyond (see [`field`]).
fn lookup<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if object.len() <= SCANNED_KEYS {
        object.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        object.get(key)
    }
}

/// The size up to which [`lookup`] (for [`refuse_repeated`] and
/// [`field`]) searches an object's keys in order instead of hashing.
const SCANNED_KEYS: usize = 16;

/// [`value_from_str`]'s error for a key that `out` already holds (checked
/// before the key's value is read, so the error's position is the key's).
/// An object of up to [`SCANNED_KEYS`] keys is searched in order (its
/// entries are contiguous), which is cheaper than hashing the key; a larger
/// one is looked up by hash, so a hostile object of many keys stays linear.
pub(crate) fn refuse_repeated<E: de::Error>(out: &Map<String, Value>, key: &str) -> Result<(), E> {
    if lookup(out, key).is_some() {
        return Err(duplicate_key(key));
    }
    Ok(())
}

/// [`value_from_str`]'s error for a key given twice in one object.
pub(crate) fn duplicate_key<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate key {}", shown_key(key)))
}

/// A key for an error message: in backquotes, cut to 64 characters.
fn shown_key(key: &str) -> String {
    if key.chars().count() <= 64 {
        format!("`{key}`")
    } else {
        format!("`{}…`", key.chars().take(63).collect::<String>())
    }
}

/// Reads one JSON document as serde_json would, except that an object
/// holding the same key twice, at any depth, is refused (serde_json keeps the
/// last value, which would let a recording say `"input_tokens": 1` and
/// `"input_tokens": 999999` at once). Such an error is a data error
/// ([`serde_json::Error::is_data`]) reading `duplicate key `KEY` at line L
/// column C`; serde_json's own limits (nesting deeper than 128, syntax) are
/// kept.
pub fn value_from_str(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<UniqueKeys>(text).map(|UniqueKeys(v)| v)
}

/// A JSON object with unique keys, values kept as raw text, in document order.
#[derive(Debug, Default)]
pub struct StrictObject(pub Vec<(String, Box<RawValue>)>);

impl StrictObject {
    /// The raw value under `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// The keys, in document order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl<'de> Deserialize<'de> for StrictObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrictObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictObject, A::Error> {
                let mut out: Vec<(String, Box<RawValue>)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format_args!(
                            "duplicate key {}",
                            shown_key(&key)
                        )));
                    }
                    out.push((key, map.next_value()?));
                }
                Ok(StrictObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// What a raw JSON value is, as far as the checks on this side need to know.
#[derive(Debug)]
pub enum Shape {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number, classified by the core's rules.
    Number(Number),
    /// A string.
    String(String),
    /// An array of raw values.
    Array(Vec<Box<RawValue>>),
    /// An object with unique keys.
    Object(StrictObject),
}

/// Classifies a raw value (its text is known to be valid JSON).
pub fn shape(raw: &RawValue) -> Result<Shape, String> {
    let text = raw.get().trim_start();
    let err = |e: serde_json::Error| e.to_string();
    Ok(match text.as_bytes().first() {
        Some(b'n') => Shape::Null,
        Some(b't') => Shape::Bool(true),
        Some(b'f') => Shape::Bool(false),
        Some(b'"') => Shape::String(serde_json::from_str(text).map_err(err)?),
        Some(b'[') => Shape::Array(serde_json::from_str(text).map_err(err)?),
        Some(b'{') => Shape::Object(serde_json::from_str(text).map_err(err)?),
        _ => Shape::Number(Number::parse(text.trim_end()).map_err(|e| e.to_string())?),
    })
}

/// The value as an integer (never a float or a boolean), if it is one in range
/// of `i64`.
pub fn as_int(raw: &RawValue) -> Option<i64> {
    match shape(raw) {
        Ok(Shape::Number(Number::Int(v))) => Some(v),
        _ => None,
    }
}
