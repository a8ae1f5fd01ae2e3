//! Actions: what a policy proposes, validated into exactly two shapes (`SPEC A1`).

use core::fmt;

use heapless::{String, Vec};
use picojson::Event;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::ident::{ArgumentKey, Identifier, IdentifierError};
use crate::json::{JsonError, Number, Reader};
use crate::limits::{
    MAX_ARGUMENTS, MAX_ARGUMENT_KEY_LEN, MAX_ARGUMENT_MAGNITUDE, MAX_IDENTIFIER_LEN,
    MAX_TEXT_BYTES, MAX_TEXT_CHARS,
};

/// Scratch bytes that hold every escaped string of any valid action, decoded:
/// the five top-level keys and `kind`, two identifiers, the text, and eight
/// argument keys and string values.
pub const ACTION_SCRATCH: usize = 64
    + 2 * MAX_IDENTIFIER_LEN
    + MAX_TEXT_BYTES
    + MAX_ARGUMENTS * (MAX_ARGUMENT_KEY_LEN + MAX_TEXT_BYTES);

/// Scratch bytes [`Action::parse`] uses for documents up to this length.
const SMALL_SCRATCH: usize = 1024;

/// A field of an action document, named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Field {
    /// `kind`
    Kind,
    /// `text`
    Text,
    /// `call_id`
    CallId,
    /// `name`
    Name,
    /// `arguments`
    Arguments,
}

impl Field {
    /// The field's key as written in JSON.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Kind => "kind",
            Self::Text => "text",
            Self::CallId => "call_id",
            Self::Name => "name",
            Self::Arguments => "arguments",
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// Why a proposal is not a valid action (`SPEC A1`; the reference's `ValueError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ActionError {
    /// The document is not acceptable JSON (includes duplicate keys).
    Json(JsonError),
    /// The value is not a JSON object.
    NotAnObject,
    /// The object holds a key outside the shape of its kind.
    UnexpectedKey,
    /// The object lacks a key its kind requires.
    MissingKey(Field),
    /// `kind` is neither `"final"` nor `"tool"`.
    UnknownKind,
    /// The field must be a string.
    NotAString(Field),
    /// The final text is empty or only whitespace.
    TextBlank,
    /// The final text has more than 2000 characters.
    TextTooLong,
    /// `call_id` or `name` does not match `[A-Za-z][A-Za-z0-9_-]{0,39}`.
    InvalidIdentifier(Field, IdentifierError),
    /// `arguments` is not an object.
    ArgumentsNotObject,
    /// `arguments` has more than 8 entries.
    TooManyArguments,
    /// The key of argument `index` (0-based, in document order) does not match
    /// `[A-Za-z][A-Za-z0-9_]{0,31}`.
    InvalidArgumentKey {
        /// Position of the argument.
        index: u8,
        /// The rule it breaks.
        reason: IdentifierError,
    },
    /// Argument `index` is an object or an array, not a scalar.
    ArgumentNotScalar {
        /// Position of the argument.
        index: u8,
    },
    /// Argument `index` is a string of more than 2000 characters.
    ArgumentTooLong {
        /// Position of the argument.
        index: u8,
    },
    /// Argument `index` is a number with magnitude above 1e6 (or not finite).
    ArgumentOutOfRange {
        /// Position of the argument.
        index: u8,
    },
    /// A string is valid by the contract but longer, in bytes, than this
    /// build's string capacity (only builds with a capacity below
    /// [`MAX_TEXT_BYTES`] can see this), or the caller's scratch buffer
    /// (see [`Action::parse_in`]) is too small for the document's escaped strings.
    Capacity,
    /// The document's escaped strings, decoded, are longer than any valid
    /// action can hold (some string must be over 2000 characters).
    StringsTooLong,
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not acceptable JSON: {e}"),
            Self::NotAnObject => f.write_str("an action must be a JSON object"),
            Self::UnexpectedKey => f.write_str(
                "unexpected key: a final action has exactly kind and text, a tool action exactly kind, call_id, name and arguments",
            ),
            Self::MissingKey(field) => write!(f, "missing key `{}`", field.key()),
            Self::UnknownKind => f.write_str("`kind` must be \"final\" or \"tool\""),
            Self::NotAString(field) => write!(f, "`{}` must be a string", field.key()),
            Self::TextBlank => f.write_str("`text` must not be empty or only whitespace"),
            Self::TextTooLong => write!(f, "`text` has more than {MAX_TEXT_CHARS} characters"),
            Self::InvalidIdentifier(field, reason) => write!(
                f,
                "`{}` {reason}; it must match {}",
                field.key(),
                Identifier::PATTERN
            ),
            Self::ArgumentsNotObject => f.write_str("`arguments` must be a JSON object"),
            Self::TooManyArguments => write!(f, "`arguments` has more than {MAX_ARGUMENTS} entries"),
            Self::InvalidArgumentKey { index, reason } => write!(
                f,
                "argument {index}: key {reason}; it must match {}",
                ArgumentKey::PATTERN
            ),
            Self::ArgumentNotScalar { index } => write!(
                f,
                "argument {index}: must be a string, number, boolean or null, not an object or array"
            ),
            Self::ArgumentTooLong { index } => {
                write!(f, "argument {index}: string has more than {MAX_TEXT_CHARS} characters")
            }
            Self::ArgumentOutOfRange { index } => {
                write!(f, "argument {index}: number must be finite with magnitude at most 1e6")
            }
            Self::Capacity => f.write_str("a string is longer than this build's buffer for it"),
            Self::StringsTooLong => write!(f, "a string has more than {MAX_TEXT_CHARS} characters"),
        }
    }
}

impl core::error::Error for ActionError {}

impl From<JsonError> for ActionError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// One argument value: a JSON scalar (`SPEC A1`). Integers and floats stay
/// distinct; booleans are never numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<const S: usize = MAX_TEXT_BYTES> {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// An integer written without fraction or exponent, `|x| <= 1e6`.
    Int(i64),
    /// A number written with a fraction or exponent, finite, `|x| <= 1e6`.
    Float(f64),
    /// A string of at most 2000 characters.
    Str(String<S>),
}

impl<const S: usize> Serialize for Scalar<S> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Int(i) => s.serialize_i64(*i),
            Self::Float(x) => s.serialize_f64(*x),
            Self::Str(t) => s.serialize_str(t),
        }
    }
}

/// The arguments of a tool call: at most 8 scalars under distinct keys, in
/// the order the proposal gave them.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments<const S: usize = MAX_TEXT_BYTES> {
    entries: Vec<(ArgumentKey, Scalar<S>), MAX_ARGUMENTS>,
}

impl<const S: usize> Default for Arguments<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize> Arguments<S> {
    /// No arguments.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Number of arguments (0..=8).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Scalar<S>> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// The arguments in proposal order.
    pub fn iter(&self) -> impl Iterator<Item = (&ArgumentKey, &Scalar<S>)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl<const S: usize> Serialize for Arguments<S> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k.as_str(), v)?;
        }
        map.end()
    }
}

/// A validated tool action (`SPEC A1`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall<const S: usize = MAX_TEXT_BYTES> {
    /// The call id, unique within a run.
    pub call_id: Identifier,
    /// The tool's name.
    pub name: Identifier,
    /// The arguments.
    pub arguments: Arguments<S>,
}

/// A validated action: exactly one of the contract's two shapes (`SPEC A1`).
///
/// `S` is the byte capacity of each string (final text, string arguments);
/// the default holds any 2000-character text.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<const S: usize = MAX_TEXT_BYTES> {
    /// `{"kind": "final", "text": ...}`: stop with this answer.
    Final {
        /// The answer, non-blank, at most 2000 characters.
        text: String<S>,
    },
    /// `{"kind": "tool", "call_id", "name", "arguments"}`: call a tool.
    Tool(ToolCall<S>),
}

impl<const S: usize> Serialize for Action<S> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            Self::Final { text } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("kind", "final")?;
                map.serialize_entry("text", text.as_str())?;
                map.end()
            }
            Self::Tool(call) => {
                let mut map = s.serialize_map(Some(4))?;
                map.serialize_entry("kind", "tool")?;
                map.serialize_entry("call_id", &call.call_id)?;
                map.serialize_entry("name", &call.name)?;
                map.serialize_entry("arguments", &call.arguments)?;
                map.end()
            }
        }
    }
}

/// Whitespace as Python's `str.strip()` sees it: Unicode `White_Space` plus
/// the four information separators U+001C..U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

enum TextIssue {
    TooLong,
    Capacity,
}

fn copy_text<const S: usize>(text: &str, target: &mut String<S>) -> Result<(), TextIssue> {
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(TextIssue::TooLong);
    }
    target.push_str(text).map_err(|_| TextIssue::Capacity)
}

fn string_event<'e>(event: &'e Event<'_, '_>) -> Option<&'e str> {
    match event {
        Event::String(s) => Some(s.as_str()),
        _ => None,
    }
}

fn opens(event: &Event<'_, '_>) -> bool {
    matches!(event, Event::StartObject | Event::StartArray)
}

impl<const S: usize> Action<S> {
    /// Reads and validates one proposal from JSON text (`SPEC A1`).
    ///
    /// Stricter than the reference at the JSON level: duplicate keys, invalid
    /// UTF-8, lone surrogate escapes, `NaN`/`Infinity`, a byte-order mark and
    /// trailing text are refused.
    ///
    /// Decodes escaped strings in a stack buffer of [`ACTION_SCRATCH`] bytes
    /// (about 70 KiB) for documents longer than 1 KiB, 1 KiB otherwise; a
    /// device with a small stack should call [`Action::parse_in`] instead.
    pub fn parse(json: &[u8]) -> Result<Self, ActionError> {
        if json.len() <= SMALL_SCRATCH {
            Self::parse_small(json)
        } else {
            Self::parse_large(json)
        }
    }

    #[inline(never)]
    fn parse_small(json: &[u8]) -> Result<Self, ActionError> {
        Self::parse_in(json, &mut [0u8; SMALL_SCRATCH])
    }

    #[inline(never)]
    fn parse_large(json: &[u8]) -> Result<Self, ActionError> {
        Self::parse_in(json, &mut [0u8; ACTION_SCRATCH])
    }

    /// [`Action::parse`] with a caller's scratch buffer for escaped strings.
    ///
    /// Every escaped string of the document is decoded into `scratch` and
    /// kept there until the end, so it needs as many bytes as all of them
    /// decoded: never more than `json.len()`, and never more than
    /// [`ACTION_SCRATCH`] for a valid action. With less, a valid action may be
    /// refused with [`ActionError::Capacity`].
    pub fn parse_in(json: &[u8], scratch: &mut [u8]) -> Result<Self, ActionError> {
        let roomy = scratch.len() >= ACTION_SCRATCH;
        let mut reader = Reader::new(json, scratch)?;
        let fail = |e: JsonError| match e {
            JsonError::StringTooLong if roomy => ActionError::StringsTooLong,
            JsonError::StringTooLong => ActionError::Capacity,
            other => ActionError::Json(other),
        };
        match reader.next()? {
            Event::StartObject => {}
            _ => return Err(ActionError::NotAnObject),
        }
        let mut seen = 0u8;
        // Some(true) = final, Some(false) = tool.
        let mut kind: Option<bool> = None;
        // Strings and arguments are filled in place: with the default
        // capacity they are tens of kilobytes, and every move is a copy.
        let mut text: String<S> = String::new();
        let mut call_id: Option<Identifier> = None;
        let mut name: Option<Identifier> = None;
        let mut arguments = Arguments::<S>::new();
        loop {
            let field = match reader.next().map_err(fail)? {
                Event::EndObject => break,
                Event::Key(key) => match key.as_str() {
                    "kind" => Field::Kind,
                    "text" => Field::Text,
                    "call_id" => Field::CallId,
                    "name" => Field::Name,
                    "arguments" => Field::Arguments,
                    _ => return Err(ActionError::UnexpectedKey),
                },
                _ => return Err(ActionError::Json(JsonError::Syntax)),
            };
            if seen & field.bit() != 0 {
                return Err(ActionError::Json(JsonError::DuplicateKey));
            }
            seen |= field.bit();
            match field {
                Field::Arguments => read_arguments(&mut reader, &mut arguments, fail)?,
                Field::Text => {
                    let event = reader.next().map_err(fail)?;
                    let value = string_event(&event).ok_or(ActionError::NotAString(field))?;
                    copy_text(value, &mut text).map_err(|issue| match issue {
                        TextIssue::TooLong => ActionError::TextTooLong,
                        TextIssue::Capacity => ActionError::Capacity,
                    })?;
                }
                Field::Kind | Field::CallId | Field::Name => {
                    let event = reader.next().map_err(fail)?;
                    let value = string_event(&event).ok_or(ActionError::NotAString(field))?;
                    match field {
                        Field::Kind => {
                            kind = Some(match value {
                                "final" => true,
                                "tool" => false,
                                _ => return Err(ActionError::UnknownKind),
                            })
                        }
                        _ => {
                            let id = Identifier::new(value)
                                .map_err(|reason| ActionError::InvalidIdentifier(field, reason))?;
                            if field == Field::CallId {
                                call_id = Some(id);
                            } else {
                                name = Some(id);
                            }
                        }
                    }
                }
            }
        }
        reader.finish().map_err(fail)?;
        match kind {
            None => Err(ActionError::MissingKey(Field::Kind)),
            Some(true) => {
                if seen & (Field::CallId.bit() | Field::Name.bit() | Field::Arguments.bit()) != 0 {
                    return Err(ActionError::UnexpectedKey);
                }
                if seen & Field::Text.bit() == 0 {
                    return Err(ActionError::MissingKey(Field::Text));
                }
                if text.trim_matches(is_python_space).is_empty() {
                    return Err(ActionError::TextBlank);
                }
                Ok(Self::Final { text })
            }
            Some(false) => {
                if seen & Field::Text.bit() != 0 {
                    return Err(ActionError::UnexpectedKey);
                }
                Ok(Self::Tool(ToolCall {
                    call_id: call_id.ok_or(ActionError::MissingKey(Field::CallId))?,
                    name: name.ok_or(ActionError::MissingKey(Field::Name))?,
                    arguments: if seen & Field::Arguments.bit() != 0 {
                        arguments
                    } else {
                        return Err(ActionError::MissingKey(Field::Arguments));
                    },
                }))
            }
        }
    }
}

fn read_arguments<const S: usize>(
    reader: &mut Reader<'_, '_>,
    arguments: &mut Arguments<S>,
    fail: impl Fn(JsonError) -> ActionError,
) -> Result<(), ActionError> {
    match reader.next().map_err(&fail)? {
        Event::StartObject => {}
        _ => return Err(ActionError::ArgumentsNotObject),
    }
    loop {
        let index = u8::try_from(arguments.entries.len()).unwrap_or(u8::MAX);
        let key = match reader.next().map_err(&fail)? {
            Event::EndObject => return Ok(()),
            Event::Key(key) => {
                if arguments.entries.is_full() {
                    return Err(ActionError::TooManyArguments);
                }
                ArgumentKey::new(key.as_str())
                    .map_err(|reason| ActionError::InvalidArgumentKey { index, reason })?
            }
            _ => return Err(ActionError::Json(JsonError::Syntax)),
        };
        if arguments.get(&key).is_some() {
            return Err(ActionError::Json(JsonError::DuplicateKey));
        }
        let event = reader.next().map_err(&fail)?;
        let value = match &event {
            Event::Null => Scalar::Null,
            Event::Bool(b) => Scalar::Bool(*b),
            Event::String(s) => {
                // Pushed first and filled in place; on error the whole
                // action is dropped, so the half-filled entry never escapes.
                arguments
                    .entries
                    .push((key, Scalar::Str(String::new())))
                    .map_err(|_| ActionError::TooManyArguments)?;
                if let Some((_, Scalar::Str(target))) = arguments.entries.last_mut() {
                    copy_text(s.as_str(), target).map_err(|issue| match issue {
                        TextIssue::TooLong => ActionError::ArgumentTooLong { index },
                        TextIssue::Capacity => ActionError::Capacity,
                    })?;
                }
                continue;
            }
            Event::Number(n) => {
                // Magnitude first: a huge literal is out of range, never a crash.
                match Number::parse(n.as_str())? {
                    Number::Int(v) if v.unsigned_abs() <= MAX_ARGUMENT_MAGNITUDE as u64 => {
                        Scalar::Int(v)
                    }
                    Number::Float(v) if v.abs() <= MAX_ARGUMENT_MAGNITUDE && v.is_finite() => {
                        Scalar::Float(v)
                    }
                    _ => return Err(ActionError::ArgumentOutOfRange { index }),
                }
            }
            e if opens(e) => return Err(ActionError::ArgumentNotScalar { index }),
            _ => return Err(ActionError::Json(JsonError::Syntax)),
        };
        // Cannot fail: fullness was checked when the key arrived.
        arguments
            .entries
            .push((key, value))
            .map_err(|_| ActionError::TooManyArguments)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type A = Action;

    fn parse(s: &str) -> Result<A, ActionError> {
        A::parse(s.as_bytes())
    }

    #[test]
    fn seed_example_tool_action_is_an_independent_copy() {
        let mut proposal = std::string::String::from(
            r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
        );
        let action = parse(&proposal).unwrap();
        proposal.replace_range(.., "{}");
        let Action::Tool(call) = action else {
            panic!("not a tool")
        };
        assert_eq!(call.arguments.get("a"), Some(&Scalar::Int(7)));
        assert_eq!(call.call_id.as_str(), "c1");
    }

    #[test]
    fn integers_floats_and_booleans_stay_distinct() {
        let call = |v: &str| match parse(&format!(
            r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{"x":{v}}}}}"#
        )) {
            Ok(Action::Tool(c)) => Ok(c.arguments.get("x").cloned().unwrap()),
            Ok(_) => unreachable!(),
            Err(e) => Err(e),
        };
        assert_eq!(call("7"), Ok(Scalar::Int(7)));
        assert_eq!(call("7.0"), Ok(Scalar::Float(7.0)));
        assert_eq!(call("1e2"), Ok(Scalar::Float(100.0)));
        assert_eq!(call("-0"), Ok(Scalar::Int(0)));
        assert_eq!(call("true"), Ok(Scalar::Bool(true)));
        assert_eq!(call("null"), Ok(Scalar::Null));
        assert_eq!(call("1000000"), Ok(Scalar::Int(1_000_000)));
        assert_eq!(call("-1e6"), Ok(Scalar::Float(-1e6)));
        let out = Err(ActionError::ArgumentOutOfRange { index: 0 });
        assert_eq!(call("1000001"), out);
        assert_eq!(call("1000000.5"), out);
        assert_eq!(call("99999999999999999999"), out);
        assert_eq!(call("1e400"), out);
        assert_eq!(call("-1e400"), out);
        assert_eq!(
            call("[1]"),
            Err(ActionError::ArgumentNotScalar { index: 0 })
        );
        assert_eq!(call("{}"), Err(ActionError::ArgumentNotScalar { index: 0 }));
    }

    #[test]
    fn final_text_boundaries_count_characters() {
        let final_ = |t: &str| parse(&format!(r#"{{"kind":"final","text":"{t}"}}"#));
        assert!(final_(&"é".repeat(2000)).is_ok());
        assert_eq!(final_(&"é".repeat(2001)), Err(ActionError::TextTooLong));
        assert!(final_(&"😀".repeat(2000)).is_ok());
        assert!(final_(&"\\u00e9".repeat(2000)).is_ok());
        assert_eq!(
            final_(&"\\u00e9".repeat(2001)),
            Err(ActionError::TextTooLong)
        );
        assert_eq!(final_(" \\t\\n\u{a0}\u{3000}"), Err(ActionError::TextBlank));
        assert_eq!(final_("\\u001c"), Err(ActionError::TextBlank));
        assert_eq!(final_(""), Err(ActionError::TextBlank));
        assert!(
            final_("\\u200b").is_ok(),
            "zero-width space is not whitespace in Python"
        );
    }

    #[test]
    fn shapes_are_exact() {
        assert_eq!(
            parse(r#"{"kind":"final"}"#),
            Err(ActionError::MissingKey(Field::Text))
        );
        assert_eq!(
            parse(r#"{"text":"x"}"#),
            Err(ActionError::MissingKey(Field::Kind))
        );
        assert_eq!(
            parse(r#"{"kind":"final","text":"x","name":"a"}"#),
            Err(ActionError::UnexpectedKey)
        );
        assert_eq!(
            parse(r#"{"kind":"final","text":"x","y":1}"#),
            Err(ActionError::UnexpectedKey)
        );
        assert_eq!(
            parse(r#"{"kind":"tool","call_id":"c","name":"n"}"#),
            Err(ActionError::MissingKey(Field::Arguments))
        );
        assert_eq!(
            parse(r#"{"kind":"other","text":"x"}"#),
            Err(ActionError::UnknownKind)
        );
        assert_eq!(
            parse(r#"{"kind":1,"text":"x"}"#),
            Err(ActionError::NotAString(Field::Kind))
        );
        assert_eq!(parse("[]"), Err(ActionError::NotAnObject));
        assert_eq!(parse("\"final\""), Err(ActionError::NotAnObject));
        assert!(parse(r#"{"text":"x","kind":"final"}"#).is_ok());
    }

    #[test]
    fn argument_count_boundary() {
        let args = |n: usize| {
            let body: std::vec::Vec<_> = (0..n).map(|i| format!("\"k{i}\":{i}")).collect();
            parse(&format!(
                r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{}}}}}"#,
                body.join(",")
            ))
        };
        assert!(args(8).is_ok());
        assert_eq!(args(9), Err(ActionError::TooManyArguments));
        assert!(args(0).is_ok());
    }

    #[test]
    fn json_level_strictness() {
        let j = |s: &[u8]| A::parse(s);
        assert_eq!(
            j(br#"{"kind":"final","kind":"final","text":"x"}"#),
            Err(ActionError::Json(JsonError::DuplicateKey))
        );
        assert_eq!(
            j(br#"{"kind":"tool","call_id":"c","name":"n","arguments":{"a":1,"a":2}}"#),
            Err(ActionError::Json(JsonError::DuplicateKey))
        );
        assert_eq!(
            j(b"\xEF\xBB\xBF{\"kind\":\"final\",\"text\":\"x\"}"),
            Err(ActionError::Json(JsonError::ByteOrderMark))
        );
        assert_eq!(
            j(b"{\"kind\":\"final\",\"text\":\"\xff\"}"),
            Err(ActionError::Json(JsonError::InvalidUtf8 { offset: 24 }))
        );
        assert_eq!(
            j(br#"{"kind":"final","text":"\ud800"}"#),
            Err(ActionError::Json(JsonError::InvalidEscape))
        );
        assert_eq!(
            j(br#"{"kind":"final","text":"x"} x"#),
            Err(ActionError::Json(JsonError::TrailingData))
        );
        assert!(j(b" {\"kind\":\"final\",\"text\":\"x\"} \n").is_ok());
        assert_eq!(
            j(br#"{"kind":"tool","call_id":"c","name":"n","arguments":{"a":NaN}}"#),
            Err(ActionError::Json(JsonError::Syntax))
        );
        assert_eq!(
            j(br#"{"kind":"tool","call_id":"c","name":"n","arguments":{"a":01}}"#),
            Err(ActionError::Json(JsonError::Syntax))
        );
        assert_eq!(j(b""), Err(ActionError::Json(JsonError::Empty)));
        let Ok(Action::Final { text }) = j(br#"{"kind":"final","text":"\ud83d\ude00"}"#) else {
            panic!("surrogate pair")
        };
        assert_eq!(text.as_str(), "😀");
    }

    #[test]
    fn escaped_strings_of_the_largest_valid_action_all_fit() {
        // The parser keeps every decoded escaped string until the end of the
        // document: eight 2000-character arguments written as surrogate-pair
        // escapes are the most a valid action can ask of the scratch buffer.
        let value = "\\ud83d\\ude00".repeat(2000);
        let body: std::vec::Vec<_> = (0..8)
            .map(|i| format!(r#""\u006b{i}":"{value}""#))
            .collect();
        let doc = format!(
            r#"{{"\u006bind":"tool","call_id":"c","name":"n","arguments":{{{}}}}}"#,
            body.join(",")
        );
        let Ok(Action::Tool(call)) = parse(&doc) else {
            panic!("largest valid action refused")
        };
        assert_eq!(call.arguments.len(), 8);
        let over = doc.replacen(&value, &format!("{value}x"), 1);
        assert_eq!(parse(&over), Err(ActionError::ArgumentTooLong { index: 0 }));
    }

    #[test]
    fn many_short_escaped_strings_do_not_exhaust_a_roomy_scratch() {
        let body: std::vec::Vec<_> = (0..8).map(|i| format!(r#""\u006b{i}":"\n""#)).collect();
        let doc = format!(
            r#"{{"\u006bind":"tool","\u0063all_id":"\u0063","\u006eame":"\u006e","\u0061rguments":{{{}}}}}"#,
            body.join(",")
        );
        assert!(parse(&doc).is_ok());
        // A caller's scratch smaller than the escaped content is a capacity error.
        assert_eq!(
            Action::<64>::parse_in(doc.as_bytes(), &mut [0u8; 8]),
            Err(ActionError::Capacity)
        );
        assert!(Action::<64>::parse_in(doc.as_bytes(), &mut std::vec![0u8; doc.len()]).is_ok());
    }

    #[test]
    fn small_capacity_refuses_valid_but_long_strings() {
        let long = format!(r#"{{"kind":"final","text":"{}"}}"#, "x".repeat(100));
        assert_eq!(
            Action::<64>::parse(long.as_bytes()),
            Err(ActionError::Capacity)
        );
        let escaped = format!(r#"{{"kind":"final","text":"{}"}}"#, "\\n".repeat(100));
        assert_eq!(
            Action::<64>::parse(escaped.as_bytes()),
            Err(ActionError::Capacity)
        );
        assert!(Action::<64>::parse(br#"{"kind":"final","text":"short"}"#).is_ok());
    }
}
