//! Strict reading of request documents on the std side: objects whose keys are
//! unique, with every value kept as its raw JSON text so the core's own rules
//! (integers vs floats, `-0`, huge literals) decide what it is.

use std::fmt;

use budgetgate_core::json::Number;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

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
                        return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
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

/// A whole JSON document as a [`serde_json::Value`], refusing a duplicate
/// key in any object at any depth (serde_json alone keeps the last value, so
/// `"input_tokens":1,"input_tokens":999999` would count either), with the
/// key named. Nesting is bounded by serde_json's recursion limit (128).
pub fn value_from_str(text: &str) -> Result<serde_json::Value, String> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = UniqueKeys::deserialize(&mut reader).map_err(|e| e.to_string())?;
    reader.end().map_err(|e| e.to_string())?;
    Ok(value.0)
}

/// A JSON value whose objects have unique keys.
struct UniqueKeys(serde_json::Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde_json::Value;
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_string<E>(self, v: String) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::Null))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
                let mut items = Vec::new();
                while let Some(UniqueKeys(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(UniqueKeys(Value::Array(items)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
                let mut object = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if object.contains_key(&key) {
                        return Err(de::Error::custom(format_args!(
                            "duplicate key {}",
                            Value::from(key.as_str())
                        )));
                    }
                    let UniqueKeys(value) = map.next_value()?;
                    object.insert(key, value);
                }
                Ok(UniqueKeys(Value::Object(object)))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod unique_key_tests {
    use super::value_from_str;

    #[test]
    fn a_duplicate_key_at_any_depth_is_refused_and_named() {
        let err =
            value_from_str(r#"{"usage":{"input_tokens":1,"input_tokens":999999}}"#).unwrap_err();
        assert!(err.contains("duplicate key \"input_tokens\""), "{err}");
        let err = value_from_str(r#"[{"a":1},{"b":1,"b":2}]"#).unwrap_err();
        assert!(err.contains("duplicate key \"b\""), "{err}");
        let ok = value_from_str(r#"{"a":{"a":1},"b":[1,2.5,"x",null,true]}"#).unwrap();
        assert_eq!(ok["b"][1], 2.5);
        assert!(value_from_str("{} x").is_err());
    }
}
