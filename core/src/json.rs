//! The strict JSON rules every untrusted document is read by, and the general
//! reader for plans, limits, token usage and tool-call fingerprints.
//!
//! The reader is a thin layer over `picojson`'s pull parser (no recursion, no
//! allocation, no `unsafe`), adding the rules the contract asks for on top of
//! RFC 8259: a byte-order mark, invalid UTF-8 and trailing non-whitespace are
//! refused with their own reasons, and the typed readers built on it refuse
//! duplicate keys. Lone surrogate escapes, raw control characters, leading
//! zeros and `NaN`/`Infinity` literals are refused by the parser itself.
//! `SPEC A1`.
//!
//! Actions, the hot path, are read instead by a scanner specialised to their
//! two shapes (`action::scan`), which applies the same rules in one pass:
//! the document checks (`check_document`) and float reading (`parse_float`)
//! are shared by both.

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
    /// A float literal needs more precision than this build reads exactly
    /// (only without the `exact-floats` feature: more than 15 significant
    /// digits, or a decimal exponent beyond ±22).
    FloatPrecision,
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
            Self::FloatPrecision => f.write_str(
                "float literal too precise for this build (at most 15 significant digits)",
            ),
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
            parse_float(raw).map(Self::Float)
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

/// Reads a float literal (valid JSON) exactly, as Python's `float()` does:
/// by Clinger's fast path when it applies, otherwise by core's correctly
/// rounded parser, or, without the `exact-floats` feature, not at all
/// ([`JsonError::FloatPrecision`]).
pub(crate) fn parse_float(raw: &str) -> Result<f64, JsonError> {
    match fast_float(raw) {
        Err(JsonError::FloatPrecision) => exact_float(raw),
        other => other,
    }
}

#[cfg(feature = "exact-floats")]
fn exact_float(raw: &str) -> Result<f64, JsonError> {
    raw.parse().map_err(|_| JsonError::Syntax)
}

#[cfg(not(feature = "exact-floats"))]
fn exact_float(_raw: &str) -> Result<f64, JsonError> {
    Err(JsonError::FloatPrecision)
}

/// Reads a float literal exactly when Clinger's fast path applies: a decimal
/// mantissa of at most 2^53 and a power of ten within ±22 are both exact
/// doubles, so one IEEE multiplication or division rounds correctly. Literals
/// of magnitude at least 1e309 are infinite and those below 1e-324 are zero,
/// as in the exact parser. Anything else is refused
/// ([`JsonError::FloatPrecision`]), never read approximately.
fn fast_float(raw: &str) -> Result<f64, JsonError> {
    let (negative, body) = match raw.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let signed = |v: f64| if negative { -v } else { v };
    let (number, exponent) = match body.find(['e', 'E']) {
        Some(at) => (
            body.get(..at).unwrap_or(""),
            body.get(at + 1..).unwrap_or(""),
        ),
        None => (body, ""),
    };
    // The exponent, saturated far beyond any double's range.
    let mut exp: i64 = 0;
    let (exp_negative, exp_digits) = match exponent.as_bytes().first() {
        Some(b'-') => (true, exponent.get(1..).unwrap_or("")),
        Some(b'+') => (false, exponent.get(1..).unwrap_or("")),
        _ => (false, exponent),
    };
    for b in exp_digits.bytes() {
        exp = (exp * 10 + i64::from(b.wrapping_sub(b'0'))).min(1_000_000);
    }
    if exp_negative {
        exp = -exp;
    }
    // Digits without the point: the value is 0.DIGITS × 10^(point + exp).
    let mut mantissa: Option<u64> = Some(0);
    let mut point: i64 = 0;
    let mut leading_zeros: i64 = 0;
    let mut significant = false;
    let mut after_point = false;
    let mut fraction_digits: i64 = 0;
    for b in number.bytes() {
        if b == b'.' {
            after_point = true;
            continue;
        }
        let digit = u64::from(b.wrapping_sub(b'0'));
        if !after_point {
            point += 1;
        } else {
            fraction_digits += 1;
        }
        if digit == 0 && !significant {
            leading_zeros += 1;
            continue;
        }
        significant = true;
        mantissa = mantissa
            .and_then(|m| m.checked_mul(10))
            .and_then(|m| m.checked_add(digit));
    }
    if !significant {
        return Ok(signed(0.0));
    }
    // Decimal exponent of the first significant digit.
    let top = point - leading_zeros - 1 + exp;
    if top >= 309 {
        return Ok(signed(f64::INFINITY));
    }
    if top <= -325 {
        return Ok(signed(0.0));
    }
    let mantissa = mantissa.ok_or(JsonError::FloatPrecision)?;
    exact_product(mantissa, exp - fraction_digits)
        .map(signed)
        .ok_or(JsonError::FloatPrecision)
}

/// `mantissa × 10^scale`, when Clinger's fast path makes it exact: a
/// mantissa of at most 2^53 (after dropping trailing zeros against a
/// negative scale) and a power of ten within ±22 are both exact doubles, so
/// one IEEE multiplication or division rounds correctly. `None` otherwise.
pub(crate) fn exact_product(mantissa: u64, scale: i64) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (mut mantissa, mut scale) = (mantissa, scale);
    while mantissa.is_multiple_of(10) && mantissa != 0 && scale < 0 {
        mantissa /= 10;
        scale += 1;
    }
    if mantissa > 1 << 53 {
        return None;
    }
    let power = POW10.get(usize::try_from(scale.unsigned_abs()).ok()?)?;
    Some(if scale >= 0 {
        mantissa as f64 * power
    } else {
        mantissa as f64 / power
    })
}

/// The value of the four hex digits at `at` (a `\u` escape's code unit);
/// `None` unless there are four and all are hex digits.
pub(crate) fn hex4(bytes: &[u8], at: usize) -> Option<u16> {
    let digits = bytes.get(at..at.checked_add(4)?)?;
    digits.iter().try_fold(0u16, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some((acc << 4) | u16::from(v))
    })
}

/// Refuses a `\u` escape of a lone surrogate: a high one (D800..DBFF) not
/// followed at once by an escaped low one (DC00..DFFF), or a low one on its
/// own. picojson refuses most of these but accepts a high surrogate followed
/// by a short escape such as `\n`, so every document is checked here first.
///
/// A backslash can only stand inside a string in valid JSON (anywhere else
/// the parser refuses the document), so the bytes are scanned as they are.
fn check_surrogate_escapes(bytes: &[u8]) -> Result<(), JsonError> {
    let mut i = 0;
    while let Some(offset) = bytes
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\\'))
    {
        let at = i + offset;
        match bytes.get(at + 1) {
            Some(b'u') => {
                let unit = hex4(bytes, at + 2).ok_or(JsonError::InvalidEscape)?;
                i = at + 6;
                if (0xDC00..=0xDFFF).contains(&unit) {
                    return Err(JsonError::InvalidEscape);
                }
                if (0xD800..=0xDBFF).contains(&unit) {
                    let low = match (bytes.get(i), bytes.get(i + 1)) {
                        (Some(b'\\'), Some(b'u')) => hex4(bytes, i + 2),
                        _ => None,
                    };
                    if !low.is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) {
                        return Err(JsonError::InvalidEscape);
                    }
                    i += 6;
                }
            }
            // Any other escape is two bytes, so `\\` cannot start another.
            Some(_) => i = at + 2,
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The checks every document passes first, whatever reads it: no byte-order
/// mark, valid UTF-8 throughout, not empty. Returns the text.
pub(crate) fn check_document(bytes: &[u8]) -> Result<&str, JsonError> {
    if let [0xEF, 0xBB, 0xBF, ..] = bytes {
        return Err(JsonError::ByteOrderMark);
    }
    let text = core::str::from_utf8(bytes).map_err(|e| JsonError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    if bytes
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Err(JsonError::Empty);
    }
    Ok(text)
}

/// A pull reader over one complete document.
pub(crate) struct Reader<'a, 'b> {
    parser: SliceParser<'a, 'b>,
}

impl<'a, 'b> Reader<'a, 'b> {
    /// Checks the encoding and opens the document; `scratch` receives strings
    /// that contain escapes, so it bounds the longest such string.
    pub(crate) fn new(bytes: &'a [u8], scratch: &'b mut [u8]) -> Result<Self, JsonError> {
        let text = check_document(bytes)?;
        check_surrogate_escapes(bytes)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_classified_as_python_reads_them() {
        assert_eq!(Number::parse("-0"), Ok(Number::Int(0)));
        assert_eq!(Number::parse("7"), Ok(Number::Int(7)));
        assert_eq!(Number::parse("7.0"), Ok(Number::Float(7.0)));
        assert_eq!(Number::parse("1e2"), Ok(Number::Float(100.0)));
        assert_eq!(Number::parse("99999999999999999999"), Ok(Number::HugeInt));
        assert_eq!(
            Number::parse("-0.0").map(|n| matches!(n, Number::Float(x) if x.is_sign_negative())),
            Ok(true)
        );
    }

    #[test]
    fn lone_surrogate_escapes_are_refused_whatever_follows() {
        for bad in [
            r#""\ud800\n""#,
            r#""\ud83d\"""#,
            r#""\ud800x""#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud800\ud800""#,
            r#""a\udfff\ud800""#,
            r#""\ud800\u12""#,
        ] {
            assert_eq!(
                check_surrogate_escapes(bad.as_bytes()),
                Err(JsonError::InvalidEscape),
                "{bad}"
            );
        }
        for good in [
            r#""\ud83d\ude00""#,
            r#""\\ud800""#,
            r#""\\\ud83d\ude00x""#,
            r#""\n\u00e9""#,
            r#""plain""#,
            r#""ends with a backslash escape \\""#,
        ] {
            assert_eq!(check_surrogate_escapes(good.as_bytes()), Ok(()), "{good}");
        }
    }

    /// The fast path must agree bit for bit with the exact parser wherever
    /// it answers, and refuse the rest.
    #[test]
    fn small_float_parser_is_exact_where_it_answers() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut answered = 0;
        for _ in 0..200_000 {
            let digits = next() % 10_u64.pow(1 + (next() % 17) as u32);
            let point = (next() % 20) as usize;
            let exp = if next() % 8 == 0 {
                (next() % 801) as i32 - 400
            } else {
                (next() % 61) as i32 - 30
            };
            let zeros = "0".repeat((next() % 4) as usize);
            let mut text = std::format!("{zeros}{digits}");
            if point < text.len() {
                text.insert(text.len() - point, '.');
                if text.starts_with('.') {
                    text.insert(0, '0');
                }
            } else {
                text.push_str(".0");
            }
            if next() % 2 == 0 {
                text = std::format!("{text}e{exp}");
            }
            let exact: f64 = text.parse().unwrap();
            match fast_float(&text) {
                Ok(v) => {
                    assert_eq!(v.to_bits(), exact.to_bits(), "{text}");
                    answered += 1;
                }
                Err(e) => assert_eq!(e, JsonError::FloatPrecision, "{text}"),
            }
        }
        assert!(answered > 50_000, "only {answered} answered");
        assert_eq!(fast_float("1e400"), Ok(f64::INFINITY));
        assert_eq!(fast_float("-1e99999999999999999999"), Ok(f64::NEG_INFINITY));
        assert_eq!(fast_float("1e-400"), Ok(0.0));
        assert_eq!(fast_float("0.000e5"), Ok(0.0));
        assert_eq!(fast_float("1e300"), Err(JsonError::FloatPrecision));
        assert_eq!(
            fast_float("0.30000000000000004"),
            Err(JsonError::FloatPrecision)
        );
        assert_eq!(fast_float("1000000.0"), Ok(1e6));
        assert_eq!(fast_float("-2.5E-3"), Ok(-0.0025));
    }
}
