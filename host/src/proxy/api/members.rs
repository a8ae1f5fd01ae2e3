//! A lenient reader of the JSON members the proxy looks at in a request or
//! an answer, read one object at a time without building the rest: each
//! member kept as its raw text, a repeated key taking its last value (as a
//! provider's JSON reader does), anything else read past; and, for a
//! request rewritten in place, where each of some members' values lies
//! ([`member_spans`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// The members of an object this reader looks at, each as it came; a
/// member that is `null`, absent, or of an object that is not one reads as
/// absent.
#[derive(Default)]
pub struct Members<'a> {
    pub role: Option<&'a RawValue>,
    pub kind: Option<&'a RawValue>,
    pub content: Option<&'a RawValue>,
    pub id: Option<&'a RawValue>,
    pub name: Option<&'a RawValue>,
    pub input: Option<&'a RawValue>,
    pub tool_use_id: Option<&'a RawValue>,
    pub is_error: Option<&'a RawValue>,
    pub tool_calls: Option<&'a RawValue>,
    pub tool_call_id: Option<&'a RawValue>,
    pub function: Option<&'a RawValue>,
    pub arguments: Option<&'a RawValue>,
    pub call_id: Option<&'a RawValue>,
    pub output: Option<&'a RawValue>,
    pub messages: Option<&'a RawValue>,
    pub text: Option<&'a RawValue>,
    pub usage: Option<&'a RawValue>,
}

impl<'a> Members<'a> {
    fn slot(&mut self, key: &str) -> Option<&mut Option<&'a RawValue>> {
        Some(match key {
            "role" => &mut self.role,
            "type" => &mut self.kind,
            "content" => &mut self.content,
            "id" => &mut self.id,
            "name" => &mut self.name,
            "input" => &mut self.input,
            "tool_use_id" => &mut self.tool_use_id,
            "is_error" => &mut self.is_error,
            "tool_calls" => &mut self.tool_calls,
            "tool_call_id" => &mut self.tool_call_id,
            "function" => &mut self.function,
            "arguments" => &mut self.arguments,
            "call_id" => &mut self.call_id,
            "output" => &mut self.output,
            "messages" => &mut self.messages,
            "text" => &mut self.text,
            "usage" => &mut self.usage,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Members::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    if let Some(slot) = members.slot(&key) {
                        *slot = (value.get() != "null").then_some(value);
                    }
                }
                Ok(members)
            }
        }
        d.deserialize_map(Object)
    }
}

/// The members of `raw` (none when it is not an object).
pub fn members(raw: &RawValue) -> Members<'_> {
    serde_json::from_str(raw.get()).unwrap_or_default()
}

/// A member's text: `""` when it is absent or not a string.
pub fn text(raw: Option<&RawValue>) -> Cow<'_, str> {
    raw.and_then(|r| serde_json::from_str::<Cow<'_, str>>(r.get()).ok())
        .unwrap_or_default()
}

/// Calls `each` with every element of `raw` when it is an array, holding
/// one at a time (nothing when it is absent or not an array).
pub fn each<'a>(raw: Option<&'a RawValue>, each: impl FnMut(&'a RawValue)) {
    struct Each<F>(F);
    impl<'de, F: FnMut(&'de RawValue)> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                (self.0)(item);
            }
            Ok(())
        }
    }
    if let Some(raw) = raw {
        let _ = serde_json::Deserializer::from_str(raw.get()).deserialize_seq(Each(each));
    }
}

/// The text of a message's `content`: a string, or the `text` of its
/// text parts (`text`, `output_text`) joined.
pub fn text_of(content: Option<&RawValue>) -> String {
    let Some(raw) = content else {
        return String::new();
    };
    if let Ok(text) = serde_json::from_str::<Cow<'_, str>>(raw.get()) {
        return text.into_owned();
    }
    let mut out = String::new();
    each(Some(raw), |part| {
        let part = members(part);
        if matches!(text(part.kind).as_ref(), "text" | "output_text") {
            out.push_str(&text(part.text));
        }
    });
    out
}

/// The raw values of `object`'s own members named `keys` (a key written
/// with escapes read as the provider reads it), in order, each a slice of
/// `object`; `None` when `object` is not one JSON object. Nothing is
/// built: the values are read past (nesting of any depth).
pub fn member_spans<'a>(object: &'a str, keys: &'static [&'static str]) -> Option<Vec<&'a str>> {
    struct Spans(&'static [&'static str]);
    impl<'de> Visitor<'de> for Spans {
        type Value = Vec<&'de str>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut spans = Vec::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let value: &'de serde_json::value::RawValue = map.next_value()?;
                if self.0.contains(&key.as_ref()) {
                    spans.push(value.get());
                }
            }
            Ok(spans)
        }
    }
    let mut reader = serde_json::Deserializer::from_str(object);
    let spans = serde::Deserializer::deserialize_map(&mut reader, Spans(keys)).ok()?;
    reader.end().ok()?;
    Some(spans)
}
