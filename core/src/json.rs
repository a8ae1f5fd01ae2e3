//! The strict JSON reader every untrusted document passes through.
//!
//! A thin layer over `picojson`'s pull parser (no recursion, no allocation, no
//! `unsafe`), adding the rules the contract asks for on top of RFC 8259:
//! a byte-order mark, invalid UTF-8 and trailing non-whitespace are refused with
//! their own reasons, and the typed readers built on it refuse duplicate keys.
//! Lone surrogate escapes, raw control characters, leading zeros and
//! `NaN`/`Infinity` literals are refused by the parser itself. `SPEC A1`.

use core::fmt;

use picojson::{Event, ParseError, PullParser, SliceParser};

/// Why a document is not acceptable JSON (before any schema rule is checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum JsonError {
    /// The bytes are not UTF-8; `offset` is the first bad byte.
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The document starts with a UTF-8 byte-order mark.
    ByteOrderMark,
    /// The document is empty or holds only whitespace.
    Empty,
    /// The text breaks JSON syntax (includes `NaN`, leading zeros, raw control
    /// characters in strings, trailing commas).
    Syntax,
    /// A string escape is invalid, or encodes a lone surrogate.
    InvalidEscape,
    /// Non-whitespace text follows the value.
    TrailingData,
    /// An object holds the same key twice.
    DuplicateKey,
    /// The decoded escaped strings of the document do not fit the buffer for
    /// them (the parser keeps every one until the end of the document).
    StringTooLong,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            Self::ByteOrderMark => f.write_str("a byte-order mark is not allowed"),
            Self::Empty => f.write_str("empty document"),
            Self::Syntax => f.write_str("invalid JSON syntax"),
            Self::InvalidEscape => f.write_str("invalid string escape or lone surrogate"),
            Self::TrailingData => f.write_str("text after the JSON value"),
            Self::DuplicateKey => f.write_str("duplicate object key"),
            Self::StringTooLong => f.write_str("escaped strings longer than the buffer for them"),
        }
    }
}

impl core::error::Error for JsonError {}

/// A JSON number as written, classified the way Python's `json` module reads it.
///
/// `-0` is the integer 0, as in Python; `1e400` is an infinite float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// Written without fraction or exponent, and fits an `i64`.
    Int(i64),
    /// Written without fraction or exponent, but beyond `i64` (Python keeps
    /// such integers exactly; every bound here is far below them).
    HugeInt,
    /// Written with a fraction or exponent; may be infinite (`1e400`).
    Float(f64),
}

impl Number {
    /// Classifies a JSON number literal `raw` (already known to be valid JSON).
    pub fn parse(raw: &str) -> Result<Self, JsonError> {
        if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            raw.parse().map(Self::Float).map_err(|_| JsonError::Syntax)
        } else {
            Ok(raw.parse().map_or(Self::HugeInt, Self::Int))
        }
    }

    /// The value if it is an integer in `0..=max` (never a float or a boolean).
    pub fn as_bounded_int(self, max: u32) -> Option<u32> {
        match self {
            Self::Int(v) => u32::try_from(v).ok().filter(|v| *v <= max),
            _ => None,
        }
    }
}

/// A pull reader over one complete document.
pub(crate) struct Reader<'a, 'b> {
    parser: SliceParser<'a, 'b>,
}

impl<'a, 'b> Reader<'a, 'b> {
    /// Checks the encoding and opens the document; `scratch` receives strings
    /// that contain escapes, so it bounds the longest such string.
    pub(crate) fn new(bytes: &'a [u8], scratch: &'b mut [u8]) -> Result<Self, JsonError> {
        if bytes.starts_with(b"\xEF\xBB\xBF") {
            return Err(JsonError::ByteOrderMark);
        }
        let text = core::str::from_utf8(bytes).map_err(|e| JsonError::InvalidUtf8 {
            offset: e.valid_up_to(),
        })?;
        if text
            .trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
            .is_empty()
        {
            return Err(JsonError::Empty);
        }
        Ok(Self {
            parser: SliceParser::with_buffer(text, scratch),
        })
    }

    /// The next event; the end of the document is a syntax error here, since
    /// every caller knows when its value ends.
    pub(crate) fn next(&mut self) -> Result<Event<'_, '_>, JsonError> {
        match self.parser.next_event() {
            Ok(Event::EndDocument) => Err(JsonError::Syntax),
            Ok(event) => Ok(event),
            Err(e) => Err(map_error(e)),
        }
    }

    /// Confirms that nothing but whitespace follows the value.
    pub(crate) fn finish(mut self) -> Result<(), JsonError> {
        match self.parser.next_event() {
            Ok(Event::EndDocument) => Ok(()),
            Ok(_) => Err(JsonError::TrailingData),
            // The value is complete here, so the tokenizer can only object to
            // content after it.
            Err(ParseError::TokenizerError(_)) => Err(JsonError::TrailingData),
            Err(e) => Err(map_error(e)),
        }
    }
}

fn map_error(e: ParseError) -> JsonError {
    match e {
        ParseError::ScratchBufferFull | ParseError::InputBufferFull => JsonError::StringTooLong,
        ParseError::InvalidUtf8(_) => JsonError::InvalidEscape,
        ParseError::InvalidUnicodeHex
        | ParseError::InvalidUnicodeCodepoint
        | ParseError::InvalidEscapeSequence => JsonError::InvalidEscape,
        _ => JsonError::Syntax,
    }
}
