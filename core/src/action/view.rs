//! Validated actions borrowed from their document: no string is copied, and
//! escapes are decoded only when a string is read (`SPEC A1`).

use core::fmt;

use heapless::{CapacityError, String};
use serde::ser::{Serialize, SerializeMap, Serializer};

use super::scan::Members;
use crate::ident::{same_bytes, Identifier};
use crate::json;

/// A validated JSON string of a document, borrowed from it.
///
/// Either the text itself, or the text between the quotes with its escapes
/// still written out (every escape already checked: no lone surrogate, no
/// unknown escape). Reading it ([`JsonStr::chars`], [`fmt::Display`],
/// comparison with `&str`) decodes on the fly.
#[derive(Debug, Clone, Copy)]
pub struct JsonStr<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// A string that needs no decoding.
    pub const fn plain(text: &'a str) -> Self {
        Self {
            raw: text,
            escaped: false,
        }
    }

    /// Raw JSON string content whose escapes the scanner has checked.
    pub(crate) const fn escaped(raw: &'a str) -> Self {
        Self { raw, escaped: true }
    }

    /// The text, when it holds no escape (then it is the text as written).
    pub fn as_str(&self) -> Option<&'a str> {
        (!self.escaped).then_some(self.raw)
    }

    /// Length of the text as written, in bytes: at least the number of
    /// decoded characters.
    pub(crate) fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the text is written with at least one escape.
    pub fn is_escaped(&self) -> bool {
        self.escaped
    }

    /// The decoded characters.
    pub fn chars(&self) -> Chars<'a> {
        Chars {
            rest: self.raw,
            escaped: self.escaped,
        }
    }

    /// Number of decoded characters (what Python's `len` counts: a
    /// surrogate-pair escape is one character).
    pub fn char_count(&self) -> usize {
        if self.escaped {
            self.chars().count()
        } else {
            self.raw.chars().count()
        }
    }

    /// Whether nothing but whitespace, as Python's `str.strip()` sees it, is here.
    pub fn is_blank(&self) -> bool {
        self.chars().all(is_python_space)
    }

    /// Appends the decoded text to `out`; [`CapacityError`] (with `out`
    /// unchanged) if it does not fit.
    pub fn decode_into<const N: usize>(&self, out: &mut String<N>) -> Result<(), CapacityError> {
        match self.as_str() {
            Some(text) => out.push_str(text),
            None => {
                let len = out.len();
                for c in self.chars() {
                    if let Err(e) = out.push(c) {
                        out.truncate(len);
                        return Err(e);
                    }
                }
                Ok(())
            }
        }
    }
}

/// Whitespace as Python's `str.strip()` sees it: Unicode `White_Space` plus
/// the four information separators U+001C..U+001F.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

impl PartialEq<str> for JsonStr<'_> {
    #[inline]
    fn eq(&self, other: &str) -> bool {
        match self.as_str() {
            Some(text) => same_bytes(text.as_bytes(), other.as_bytes()),
            None => self.chars().eq(other.chars()),
        }
    }
}

impl PartialEq<&str> for JsonStr<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq for JsonStr<'_> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (self.as_str(), other.as_str()) {
            (Some(a), Some(b)) => same_bytes(a.as_bytes(), b.as_bytes()),
            _ => self.chars().eq(other.chars()),
        }
    }
}

impl fmt::Display for JsonStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(text) => f.write_str(text),
            None => self.chars().try_for_each(|c| fmt::Write::write_char(f, c)),
        }
    }
}

impl Serialize for JsonStr<'_> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        match self.as_str() {
            Some(text) => s.serialize_str(text),
            None => s.collect_str(self),
        }
    }
}

/// The decoded characters of a [`JsonStr`].
#[derive(Debug, Clone)]
pub struct Chars<'a> {
    rest: &'a str,
    escaped: bool,
}

impl Iterator for Chars<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let mut it = self.rest.chars();
        let c = it.next()?;
        if c != '\\' || !self.escaped {
            self.rest = it.as_str();
            return Some(c);
        }
        // The string was validated, so the escape is well formed; were it
        // not, it would read as one replacement character for its backslash.
        let (decoded, used) =
            json::escape_at(self.rest.as_bytes(), 0).unwrap_or((char::REPLACEMENT_CHARACTER, 1));
        self.rest = self.rest.get(used..).unwrap_or_default();
        Some(decoded)
    }
}

/// One argument value borrowed from its document: a JSON scalar (`SPEC A1`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarRef<'a> {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// An integer written without fraction or exponent, `|x| <= 1e6`.
    Int(i64),
    /// A number written with a fraction or exponent, finite, `|x| <= 1e6`.
    Float(f64),
    /// A string of at most 2000 characters.
    Str(JsonStr<'a>),
}

impl Serialize for ScalarRef<'_> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Int(i) => s.serialize_i64(*i),
            Self::Float(x) => s.serialize_f64(*x),
            Self::Str(t) => t.serialize(s),
        }
    }
}

/// The arguments of a tool call, borrowed: at most 8 scalars under distinct
/// keys (each matching `[A-Za-z][A-Za-z0-9_]{0,31}` once decoded), in the
/// order the proposal gave them.
///
/// Validated once, read on demand: it keeps the arguments object as written
/// (a few bytes whatever it holds), and [`ArgumentsRef::iter`] and
/// [`ArgumentsRef::get`] read it again, which cannot fail. A lookup costs a
/// pass over at most 8 members; read them all with one `iter` where that
/// matters.
#[derive(Debug, Clone, Copy)]
pub struct ArgumentsRef<'a> {
    /// The object from `{` to `}`, already validated.
    raw: &'a str,
    len: u8,
}

impl Default for ArgumentsRef<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> ArgumentsRef<'a> {
    /// No arguments.
    pub const fn new() -> Self {
        Self { raw: "{}", len: 0 }
    }

    /// Arguments the scanner validated: `raw` is the object, `len` members.
    pub(crate) const fn validated(raw: &'a str, len: u8) -> Self {
        Self { raw, len }
    }

    /// Number of arguments (0..=8).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<ScalarRef<'a>> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The arguments in proposal order.
    pub fn iter(&self) -> Members<'a> {
        Members::new(self.raw)
    }
}

/// Equal when they hold the same keys and values in the same order, however
/// they were written.
impl PartialEq for ArgumentsRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Serialize for ArgumentsRef<'_> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(&k, &v)?;
        }
        map.end()
    }
}

/// A validated tool action borrowed from its document (`SPEC A1`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRef<'a> {
    /// The call id, unique within a run.
    pub call_id: Identifier,
    /// The tool's name.
    pub name: Identifier,
    /// The arguments.
    pub arguments: ArgumentsRef<'a>,
}

/// A validated action borrowed from its document: exactly one of the
/// contract's two shapes (`SPEC A1`). Built by [`ActionRef::parse`]; 120
/// bytes on x86_64 whatever the document holds, since strings and arguments
/// stay in the document.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionRef<'a> {
    /// `{"kind": "final", "text": ...}`: stop with this answer.
    Final {
        /// The answer, non-blank, at most 2000 characters.
        text: JsonStr<'a>,
    },
    /// `{"kind": "tool", "call_id", "name", "arguments"}`: call a tool.
    Tool(ToolCallRef<'a>),
}

impl Serialize for ActionRef<'_> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            Self::Final { text } => serialize_final(s, text),
            Self::Tool(call) => serialize_tool(s, &call.call_id, &call.name, &call.arguments),
        }
    }
}

/// `{"kind": "final", "text": text}`, as both action types write it.
pub(crate) fn serialize_final<Z: Serializer, T: Serialize + ?Sized>(
    s: Z,
    text: &T,
) -> Result<Z::Ok, Z::Error> {
    let mut map = s.serialize_map(Some(2))?;
    map.serialize_entry("kind", "final")?;
    map.serialize_entry("text", text)?;
    map.end()
}

/// `{"kind": "tool", "call_id", "name", "arguments"}`, as both action types
/// write it.
pub(crate) fn serialize_tool<Z: Serializer, A: Serialize + ?Sized>(
    s: Z,
    call_id: &Identifier,
    name: &Identifier,
    arguments: &A,
) -> Result<Z::Ok, Z::Error> {
    let mut map = s.serialize_map(Some(4))?;
    map.serialize_entry("kind", "tool")?;
    map.serialize_entry("call_id", call_id)?;
    map.serialize_entry("name", name)?;
    map.serialize_entry("arguments", arguments)?;
    map.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ActionRef;
    use std::format;

    fn text(doc: &str) -> JsonStr<'_> {
        match ActionRef::parse(doc.as_bytes()) {
            Ok(ActionRef::Final { text }) => text,
            other => panic!("{doc}: {other:?}"),
        }
    }

    fn arguments(doc: &str) -> ArgumentsRef<'_> {
        match ActionRef::parse(doc.as_bytes()) {
            Ok(ActionRef::Tool(call)) => call.arguments,
            other => panic!("{doc}: {other:?}"),
        }
    }

    /// `SPEC A1`: a final answer's text borrowed from its document reads as
    /// written when it has no escape, and decoded when it has: its text,
    /// whether it is escaped, its display and its comparisons agree with
    /// the decoded characters.
    #[test]
    fn a_borrowed_text_reads_as_written_or_decoded() {
        let plain = text(r#"{"kind":"final","text":"ab c"}"#);
        let escaped = text(r#"{"kind":"final","text":"a\u0062 c"}"#);
        assert_eq!(plain.as_str(), Some("ab c"));
        assert_eq!(escaped.as_str(), None);
        assert!(!plain.is_escaped());
        assert!(escaped.is_escaped());
        assert_eq!(format!("{plain}"), "ab c");
        assert_eq!(format!("{escaped}"), "ab c");
        assert_eq!(plain, escaped);
        assert_eq!(escaped, plain);
        assert_eq!(plain, text(r#"{"kind":"final","text":"ab c"}"#));
        assert_ne!(plain, text(r#"{"kind":"final","text":"ab d"}"#));
        assert_ne!(escaped, text(r#"{"kind":"final","text":"a\u0062 d"}"#));
        assert!(plain == "ab c" && escaped == "ab c" && escaped != "ab d");
    }

    /// `SPEC A1`: borrowed arguments count their members and are equal
    /// when they hold the same keys and values in the same order, however
    /// they are written; a different value, order or count is not equal.
    #[test]
    fn borrowed_arguments_count_and_compare_by_their_values() {
        let tool = |args: &str| {
            format!(r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{args}}}"#)
        };
        let none = tool("{}");
        let two = tool(r#"{"a":1,"b":"x"}"#);
        let two_spelled = tool(r#"{ "\u0061" : 1 , "b" : "\u0078" }"#);
        let other_value = tool(r#"{"a":1,"b":"y"}"#);
        let other_order = tool(r#"{"b":"x","a":1}"#);
        let three = tool(r#"{"a":1,"b":"x","c":null}"#);
        let empty = arguments(&none);
        let args = arguments(&two);
        assert_eq!((empty.len(), empty.is_empty()), (0, true));
        assert_eq!((args.len(), args.is_empty()), (2, false));
        assert_eq!(arguments(&three).len(), 3);
        assert_eq!(args, arguments(&two_spelled));
        assert_ne!(args, arguments(&other_value));
        assert_ne!(args, arguments(&other_order));
        assert_ne!(args, arguments(&three));
        assert_ne!(arguments(&three), args);
        assert_ne!(args, empty);
        assert_eq!(empty, ArgumentsRef::new());
    }
}
