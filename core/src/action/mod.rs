//! Actions: what a policy proposes, validated into exactly two shapes (`SPEC A1`).

use core::fmt;

use heapless::{String, Vec};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::ident::{ArgumentKey, Identifier, IdentifierError};
use crate::json::JsonError;
use crate::limits::{MAX_ARGUMENTS, MAX_TEXT_BYTES, MAX_TEXT_CHARS};

mod scan;
pub(crate) use scan::Values;
mod view;

pub use scan::Members;
pub use view::{ActionRef, ArgumentsRef, Chars, JsonStr, ScalarRef, ToolCallRef};

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
    /// A string is valid by the contract but longer, in bytes, than the
    /// owned action's string capacity (only an [`Action`] with a capacity
    /// below [`MAX_TEXT_BYTES`] can see this).
    Capacity,
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
        }
    }
}

impl core::error::Error for ActionError {}

/// A proposal that is not a valid action, and where its document went
/// wrong: what [`ActionRef::validate`] hands back, so a caller can explain a
/// rejection without reading the document again (`SPEC A1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InvalidAction {
    /// The first rule the document breaks.
    pub error: ActionError,
    /// Byte offset in the document where it went wrong: for invalid UTF-8
    /// the first bad byte; for other JSON syntax where reading stopped; for
    /// a rule about one member (a key outside the shape, a repeated key, a
    /// field or an argument that breaks its rule, a ninth argument, a blank
    /// text) the opening quote of that member's key; for a missing key the
    /// object's closing brace; for a value that is not an object its first
    /// byte. Always at most the document's length.
    pub offset: usize,
}

impl fmt::Display for InvalidAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.error, self.offset)
    }
}

impl core::error::Error for InvalidAction {}

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

impl<const S: usize> Scalar<S> {
    /// The value as a borrowed scalar (a string borrowed as it is).
    pub fn as_ref(&self) -> ScalarRef<'_> {
        match self {
            Self::Null => ScalarRef::Null,
            Self::Bool(b) => ScalarRef::Bool(*b),
            Self::Int(v) => ScalarRef::Int(*v),
            Self::Float(v) => ScalarRef::Float(*v),
            Self::Str(text) => ScalarRef::Str(JsonStr::plain(text)),
        }
    }
}

impl<const S: usize> Serialize for Scalar<S> {
    fn serialize<Z: Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        self.as_ref().serialize(s)
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
            map.serialize_entry(k.as_str(), &v.as_ref())?;
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
            Self::Final { text } => view::serialize_final(s, text.as_str()),
            Self::Tool(call) => view::serialize_tool(s, &call.call_id, &call.name, &call.arguments),
        }
    }
}

impl<'a> ActionRef<'a> {
    /// Reads and validates one proposal from JSON text (`SPEC A1`), in one
    /// pass and without copying any string: the result borrows `json`.
    ///
    /// Stricter than the reference at the JSON level: duplicate keys, invalid
    /// UTF-8, lone surrogate escapes, `NaN`/`Infinity`, a byte-order mark and
    /// trailing text are refused. Errors are reported in document order: the
    /// first rule a document breaks, reading it from the start, is the one
    /// named (encoding errors before all others, shape rules that need the
    /// whole object after its end).
    ///
    /// ```
    /// use budgetgate_core::{ActionRef, ScalarRef};
    ///
    /// let json = br#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":"\u00e9"}}"#;
    /// let ActionRef::Tool(call) = ActionRef::parse(json).unwrap() else { unreachable!() };
    /// assert_eq!(call.arguments.get("a"), Some(ScalarRef::Int(7)));
    /// let Some(ScalarRef::Str(b)) = call.arguments.get("b") else { unreachable!() };
    /// assert!(b == "é");
    /// ```
    pub fn parse(json: &'a [u8]) -> Result<Self, ActionError> {
        Self::validate(json).map_err(|invalid| invalid.error)
    }

    /// [`ActionRef::parse`], keeping where the document went wrong: the
    /// error comes with its byte offset ([`InvalidAction::offset`]).
    ///
    /// ```
    /// use budgetgate_core::{ActionError, ActionRef};
    ///
    /// let json = br#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":[8]}}"#;
    /// let invalid = ActionRef::validate(json).unwrap_err();
    /// assert_eq!(invalid.error, ActionError::ArgumentNotScalar { index: 1 });
    /// assert!(json[invalid.offset..].starts_with(br#""b":[8]"#));
    /// ```
    pub fn validate(json: &'a [u8]) -> Result<Self, InvalidAction> {
        scan::action(json)
    }

    /// [`ActionRef::parse`], leaving in `values` the members of a tool
    /// call's arguments as they were read (each key and value, in order:
    /// what [`ArgumentsRef::iter`] reads again). The device gate checks
    /// them against the tool's signature from there, without a second
    /// reading of the document before its verdict.
    pub(crate) fn parse_into(json: &'a [u8], values: &mut Values<'a>) -> Result<Self, ActionError> {
        scan::action_into(json, values).map_err(|invalid| invalid.error)
    }

    /// An owned copy with string capacity `S` bytes; [`ActionError::Capacity`]
    /// if a string is longer (only possible with `S` below [`MAX_TEXT_BYTES`]).
    pub fn to_action<const S: usize>(&self) -> Result<Action<S>, ActionError> {
        fn owned<const S: usize>(text: &JsonStr<'_>) -> Result<String<S>, ActionError> {
            let mut out = String::new();
            text.decode_into(&mut out)
                .map_err(|_| ActionError::Capacity)?;
            Ok(out)
        }
        Ok(match self {
            Self::Final { text } => Action::Final { text: owned(text)? },
            Self::Tool(call) => {
                let mut arguments = Arguments::new();
                for (key, value) in call.arguments.iter() {
                    let value = match value {
                        ScalarRef::Null => Scalar::Null,
                        ScalarRef::Bool(b) => Scalar::Bool(b),
                        ScalarRef::Int(v) => Scalar::Int(v),
                        ScalarRef::Float(v) => Scalar::Float(v),
                        ScalarRef::Str(text) => Scalar::Str(owned(&text)?),
                    };
                    // Cannot fail: the scanner checked the key.
                    let key = ArgumentKey::from_chars(key.chars()).map_err(|reason| {
                        ActionError::InvalidArgumentKey {
                            index: u8::try_from(arguments.len()).unwrap_or(u8::MAX),
                            reason,
                        }
                    })?;
                    arguments
                        .entries
                        .push((key, value))
                        .map_err(|_| ActionError::TooManyArguments)?;
                }
                Action::Tool(ToolCall {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    arguments,
                })
            }
        })
    }
}

impl<const S: usize> Action<S> {
    /// Reads and validates one proposal from JSON text (`SPEC A1`) into an
    /// owned action: [`ActionRef::parse`], then the strings copied.
    ///
    /// With the default capacity the result is about 64 KiB (eight strings of
    /// 8000 bytes each, whatever the action holds); where the document stays
    /// around, [`ActionRef`] is the cheaper reader.
    pub fn parse(json: &[u8]) -> Result<Self, ActionError> {
        ActionRef::parse(json)?.to_action()
    }
}

/// What a run needs to know of a validated proposal (`SPEC A2`): whether it
/// is a final answer or a tool call, borrowed as the proposal holds them, so
/// that a run's verdict can hand back the call (or the text) it is about.
/// Implemented by [`Action`] (the call a [`ToolCall`], the text a
/// `heapless::String`) and [`ActionRef`] (a [`ToolCallRef`] and a
/// [`JsonStr`]).
pub trait Proposal {
    /// A tool call as the proposal holds it.
    type Call: ?Sized;
    /// A final answer's text as the proposal holds it.
    type Text: ?Sized;

    /// The proposal's shape, borrowed.
    fn shape(&self) -> Shape<'_, Self::Call, Self::Text>;
}

/// A proposal read through [`Proposal::shape`]: borrowed, nothing copied.
#[derive(Debug, PartialEq)]
pub enum Shape<'p, C: ?Sized, T: ?Sized> {
    /// `{"kind": "final", "text": ...}`.
    Final(&'p T),
    /// `{"kind": "tool", ...}`: the call, with its id and tool name.
    Tool {
        /// The call id.
        call_id: &'p Identifier,
        /// The tool name proposed.
        name: &'p Identifier,
        /// The whole call (arguments included).
        call: &'p C,
    },
}

impl<const S: usize> Proposal for Action<S> {
    type Call = ToolCall<S>;
    type Text = String<S>;

    fn shape(&self) -> Shape<'_, ToolCall<S>, String<S>> {
        match self {
            Self::Final { text } => Shape::Final(text),
            Self::Tool(call) => Shape::Tool {
                call_id: &call.call_id,
                name: &call.name,
                call,
            },
        }
    }
}

impl<'a> Proposal for ActionRef<'a> {
    type Call = ToolCallRef<'a>;
    type Text = JsonStr<'a>;

    fn shape(&self) -> Shape<'_, ToolCallRef<'a>, JsonStr<'a>> {
        match self {
            Self::Final { text } => Shape::Final(text),
            Self::Tool(call) => Shape::Tool {
                call_id: &call.call_id,
                name: &call.name,
                call,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type A = Action;

    fn parse(s: &str) -> Result<A, ActionError> {
        A::parse(s.as_bytes())
    }

    /// `SPEC A1`: a refusal says what is wrong in words that name the key
    /// (`Field::key`), the argument or the rule; no two say the same.
    #[test]
    fn every_refusal_says_what_is_wrong_naming_the_key() {
        let said = |json: &str| parse(json).unwrap_err().to_string();
        let cases = [
            ("[1]", "an action must be a JSON object"),
            (r#"{"kind":"final","text":"a","x":1}"#, "unexpected key"),
            (r#"{"kind":"final"}"#, "missing key `text`"),
            (
                r#"{"kind":"tool","name":"n","arguments":{}}"#,
                "missing key `call_id`",
            ),
            (
                r#"{"kind":"tool","call_id":"c","arguments":{}}"#,
                "missing key `name`",
            ),
            (
                r#"{"kind":"tool","call_id":"c","name":"n"}"#,
                "missing key `arguments`",
            ),
            (r#"{"text":"a"}"#, "missing key `kind`"),
            (r#"{"kind":"other"}"#, "`kind` must be"),
            (r#"{"kind":"final","text":1}"#, "`text` must be a string"),
            (
                r#"{"kind":"final","text":"  "}"#,
                "`text` must not be empty",
            ),
            (
                r#"{"kind":"tool","call_id":"1c","name":"n","arguments":{}}"#,
                "`call_id` starts with",
            ),
            (
                r#"{"kind":"tool","call_id":"c","name":"n m","arguments":{}}"#,
                "`name` holds a character",
            ),
            (
                r#"{"kind":"tool","call_id":"c","name":"n","arguments":[]}"#,
                "`arguments` must be a JSON object",
            ),
            (
                r#"{"kind":"tool","call_id":"c","name":"n","arguments":{"9":1}}"#,
                "argument 0: key starts with",
            ),
            (
                r#"{"kind":"tool","call_id":"c","name":"n","arguments":{"a":{}}}"#,
                "argument 0: must be a string",
            ),
            ("{", "not acceptable JSON"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (json, words) in cases {
            let text = said(json);
            assert!(text.contains(words), "{json}: {text}");
            assert!(seen.insert(text.clone()), "{json}: said twice: {text}");
        }
    }

    /// `SPEC A1`: an owned tool call's arguments say whether there are any.
    #[test]
    fn arguments_say_whether_they_are_empty() {
        let arguments = |json: &str| match parse(json) {
            Ok(Action::Tool(call)) => call.arguments,
            other => panic!("{other:?}"),
        };
        let none = arguments(r#"{"kind":"tool","call_id":"c","name":"n","arguments":{}}"#);
        assert!(none.is_empty());
        assert_eq!(none.len(), 0);
        let one = arguments(r#"{"kind":"tool","call_id":"c","name":"n","arguments":{"a":1}}"#);
        assert!(!one.is_empty());
        assert_eq!(one.len(), 1);
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
        // Eight 2000-character arguments written as surrogate-pair escapes
        // (96 KB of escapes): each is measured in decoded characters, and
        // the owned copy decodes all of them. (The name is from the earlier
        // reader, which kept every decoded string in one scratch buffer.)
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
    fn escaped_keys_and_short_escaped_strings_are_read() {
        let body: std::vec::Vec<_> = (0..8).map(|i| format!(r#""\u006b{i}":"\n""#)).collect();
        let doc = format!(
            r#"{{"\u006bind":"tool","\u0063all_id":"\u0063","\u006eame":"\u006e","\u0061rguments":{{{}}}}}"#,
            body.join(",")
        );
        assert!(parse(&doc).is_ok());
    }

    #[test]
    fn small_capacity_refuses_valid_but_long_strings() {
        let long = format!(r#"{{"kind":"final","text":"{}"}}"#, "x".repeat(100));
        assert_eq!(
            Action::<64>::parse(long.as_bytes()),
            Err(ActionError::Capacity)
        );
        let escaped = format!(r#"{{"kind":"final","text":"{}"}}"#, "\\u00e9".repeat(100));
        assert_eq!(
            Action::<64>::parse(escaped.as_bytes()),
            Err(ActionError::Capacity)
        );
        assert!(Action::<64>::parse(br#"{"kind":"final","text":"short"}"#).is_ok());
    }

    /// Numbers are read as they are scanned; every literal must come out as
    /// core's exact parser (Python's `float`/`int`) reads it.
    #[test]
    fn numbers_read_while_scanning_are_exact() {
        let mut seed: u64 = 0x0DDB_1A5E_5BAD_5EED;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut floats = 0;
        for _ in 0..100_000 {
            let digits = next() % 10_u64.pow(1 + (next() % 19) as u32);
            let mut text = format!("{digits}");
            let point = 1 + (next() % 21) as usize;
            if next() % 3 != 0 && point < text.len() {
                text.insert(text.len() - point, '.');
                if text.starts_with('.') {
                    text.insert(0, '0');
                }
            }
            if next() % 3 == 0 {
                let exp = (next() % 61) as i64 - 30;
                text = format!("{text}{}{exp}", if next() % 2 == 0 { "e" } else { "E" });
            }
            if next() % 2 == 0 {
                text.insert(0, '-');
            }
            let doc =
                format!(r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{"x":{text}}}}}"#);
            let got = match ActionRef::parse(doc.as_bytes()) {
                Ok(ActionRef::Tool(call)) => call.arguments.get("x"),
                Ok(_) => unreachable!(),
                Err(ActionError::ArgumentOutOfRange { .. }) => None,
                #[cfg(not(feature = "exact-floats"))]
                Err(ActionError::Json(JsonError::FloatPrecision)) => continue,
                Err(e) => panic!("{text}: {e}"),
            };
            let is_float = text.contains(['.', 'e', 'E']);
            let want = if is_float {
                let v: f64 = text.parse().unwrap();
                (v.abs() <= 1e6).then_some(ScalarRef::Float(v))
            } else {
                let v: i128 = text.parse().unwrap();
                (v.abs() <= 1_000_000).then_some(ScalarRef::Int(v as i64))
            };
            match (got, want) {
                (Some(ScalarRef::Float(a)), Some(ScalarRef::Float(b))) => {
                    assert_eq!(a.to_bits(), b.to_bits(), "{text}");
                    floats += 1;
                }
                (got, want) => assert_eq!(got, want, "{text}"),
            }
        }
        assert!(floats > 10_000, "only {floats} floats in range");
    }

    /// Issue 11 (a rejection keeps its `ActionError` with the byte offset
    /// where the document went wrong): each kind of rule points where the
    /// `InvalidAction::offset` docs say.
    #[test]
    fn a_rejection_says_where_the_document_went_wrong() {
        let at = |doc: &[u8]| {
            let invalid = ActionRef::validate(doc).unwrap_err();
            assert_eq!(ActionRef::parse(doc), Err(invalid.error));
            (invalid.error, invalid.offset)
        };
        let rest = |doc: &'static str| {
            let (error, offset) = at(doc.as_bytes());
            (error, &doc[offset..])
        };
        let tool = |args: &str| {
            std::format!(r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{args}}}}}"#)
        };
        // Encoding: the first bad byte; a mark or an empty document at 0.
        assert_eq!(
            at(b"{\"kind\":\"final\",\"text\":\"\xff\"}"),
            (ActionError::Json(JsonError::InvalidUtf8 { offset: 24 }), 24)
        );
        assert_eq!(
            at(b"\xEF\xBB\xBF{}"),
            (ActionError::Json(JsonError::ByteOrderMark), 0)
        );
        assert_eq!(at(b"  "), (ActionError::Json(JsonError::Empty), 0));
        // Syntax: where reading stopped.
        assert_eq!(
            rest(r#"{"kind":"final","text":"x" "y"}"#),
            (ActionError::Json(JsonError::Syntax), r#""y"}"#)
        );
        assert_eq!(
            rest(r#"{"kind":"final","text":"x"}  x"#),
            (ActionError::Json(JsonError::TrailingData), "x")
        );
        // Not an object: the value.
        assert_eq!(rest("  [1]"), (ActionError::NotAnObject, "[1]"));
        // A member: its key's opening quote.
        assert_eq!(
            rest(r#"{"kind":"final", "kind":"final","text":"x"}"#),
            (
                ActionError::Json(JsonError::DuplicateKey),
                r#""kind":"final","text":"x"}"#
            )
        );
        assert_eq!(
            rest(r#"{"kind":"final","x":1,"text":"y"}"#),
            (ActionError::UnexpectedKey, r#""x":1,"text":"y"}"#)
        );
        assert_eq!(
            rest(r#"{"text":"y","kind":7}"#),
            (ActionError::NotAString(Field::Kind), r#""kind":7}"#)
        );
        assert_eq!(
            rest(r#"{"kind":"tool","call_id":"c","name":"n","arguments":[]}"#),
            (ActionError::ArgumentsNotObject, r#""arguments":[]}"#)
        );
        for (args, error, from) in [
            (
                r#""a":1, "b":[2]"#,
                ActionError::ArgumentNotScalar { index: 1 },
                r#""b":[2]"#,
            ),
            (
                r#""a":1,"a":2"#,
                ActionError::Json(JsonError::DuplicateKey),
                r#""a":2"#,
            ),
            (
                r#""1a":1"#,
                ActionError::InvalidArgumentKey {
                    index: 0,
                    reason: crate::IdentifierError::BadFirst,
                },
                r#""1a":1"#,
            ),
            (
                r#""a":1,"b":2e7"#,
                ActionError::ArgumentOutOfRange { index: 1 },
                r#""b":2e7"#,
            ),
        ] {
            let doc = tool(args);
            let invalid = ActionRef::validate(doc.as_bytes()).unwrap_err();
            assert_eq!(invalid.error, error, "{doc}");
            assert!(
                doc[invalid.offset..].starts_with(from),
                "{doc}: {}",
                invalid.offset
            );
        }
        let nine: std::vec::Vec<_> = (0..9).map(|i| std::format!("\"k{i}\":{i}")).collect();
        let doc = tool(&nine.join(","));
        let invalid = ActionRef::validate(doc.as_bytes()).unwrap_err();
        assert_eq!(invalid.error, ActionError::TooManyArguments);
        assert!(doc[invalid.offset..].starts_with(r#""k8":8}"#));
        // Rules of the whole object: the member they are about, or the
        // closing brace where a missing key would have been.
        assert_eq!(
            rest(r#"{"kind":"final"} "#),
            (ActionError::MissingKey(Field::Text), "} ")
        );
        assert_eq!(
            rest(r#"{"kind":"final","text":" ","x":1}"#),
            (ActionError::UnexpectedKey, r#""x":1}"#)
        );
        assert_eq!(
            rest(r#"{"kind":"final","text":" "}"#),
            (ActionError::TextBlank, r#""text":" "}"#)
        );
        assert_eq!(
            rest(r#"{"kind":"final","text":"x","name":"n","call_id":"c"}"#),
            (ActionError::UnexpectedKey, r#""name":"n","call_id":"c"}"#)
        );
        assert_eq!(
            rest(r#"{"call_id":"c","kind":"final","text":"x","arguments":{}}"#),
            (
                ActionError::UnexpectedKey,
                r#""call_id":"c","kind":"final","text":"x","arguments":{}}"#
            )
        );
        assert_eq!(
            rest(r#"{"kind":"tool","text":"x","call_id":"c","name":"n","arguments":{}}"#),
            (
                ActionError::UnexpectedKey,
                r#""text":"x","call_id":"c","name":"n","arguments":{}}"#
            )
        );
        let invalid = ActionRef::validate(br#"{"kind":"final"}"#).unwrap_err();
        assert_eq!(std::format!("{invalid}"), "missing key `text` (at byte 15)");
    }

    /// Found by fuzzing the scanner: an identifier without its opening quote
    /// was read as if it had one.
    #[test]
    fn an_identifier_must_open_with_a_quote() {
        for doc in [
            r#"{"kind":"tool","call_id":"c1","name":&repeat","arguments":{}}"#,
            r#"{"kind":"tool","call_id":xc1","name":"n","arguments":{}}"#,
            r#"{"kind":"tool","call_id":"c1","name":"n","arguments":{x":1}}"#,
        ] {
            assert_eq!(
                parse(doc),
                Err(ActionError::Json(JsonError::Syntax)),
                "{doc}"
            );
        }
    }
}
