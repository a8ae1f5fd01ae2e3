//! The strict JSON rules every untrusted document is read by, and the general
//! reader for plans, limits, token usage and tool-call fingerprints.
//!
//! The reader is a pull parser of our own (no recursion, no allocation, no
//! `unsafe`) with the rules the contract asks for on top of RFC 8259: a
//! byte-order mark, invalid UTF-8, trailing non-whitespace, lone surrogate
//! escapes, raw control characters, leading zeros and `NaN`/`Infinity` are
//! refused, and the typed readers built on it refuse duplicate keys
//! (`SPEC A1`). It replaced picojson, which needed a pre-scan for lone
//! surrogates, kept every escaped string until the end of the document, and
//! cost about 150 instructions per byte of a plan; the differential test
//! against it is `reader_agrees_with_picojson` (picojson stays a
//! dev-dependency for that test only).
//!
//! Actions, the hot path, are read instead by a scanner specialised to their
//! two shapes (`action::scan`), which applies the same rules in one pass:
//! the document checks (`check_document`), the escape rule with its
//! surrogates (`escape_at`, also used to decode a validated action string)
//! and float reading (`parse_float`) are shared by both.

use core::fmt;

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

/// The escape whose backslash is at `at` in `bytes`: the character it
/// stands for and how many bytes it takes (2; 6 for `\uXXXX`; 12 for a
/// surrogate pair). The one place the escape rules live (`SPEC A1`), for
/// the reader, the action scanner and the decoding of validated strings:
/// an unknown escape, a `\u` without four hex digits, and a lone surrogate
/// (a high one not followed by `\u` and a low one, or a low one first) are
/// [`JsonError::InvalidEscape`].
pub(crate) fn escape_at(bytes: &[u8], at: usize) -> Result<(char, usize), JsonError> {
    let c = match bytes.get(at.saturating_add(1)) {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let unit = hex4(bytes, at.saturating_add(2)).ok_or(JsonError::InvalidEscape)?;
            let (code, used) = match unit {
                0xD800..=0xDBFF => {
                    let low = match (
                        bytes.get(at.saturating_add(6)),
                        bytes.get(at.saturating_add(7)),
                    ) {
                        (Some(b'\\'), Some(b'u')) => hex4(bytes, at.saturating_add(8)),
                        _ => None,
                    }
                    .filter(|low| (0xDC00..=0xDFFF).contains(low))
                    .ok_or(JsonError::InvalidEscape)?;
                    let pair =
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                    (pair, 12)
                }
                // A low surrogate first is no character: `from_u32` refuses it.
                _ => (u32::from(unit), 6),
            };
            let c = char::from_u32(code).ok_or(JsonError::InvalidEscape)?;
            return Ok((c, used));
        }
        _ => return Err(JsonError::InvalidEscape),
    };
    Ok((c, 2))
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

/// A plain JSON integer at the start of `rest`, as the fast-path readers
/// (the plan and limits reader here, the host's `eval` request reader) take
/// one: digits, no leading zero, ending at a delimiter (`,`, `}` or
/// whitespace), within `u32`; its value and its length. `None` for
/// anything else (`-0`, a float, `null`, a number past `u32`): declined,
/// never wrapped, and the reader's general path decides.
pub fn plain_uint(rest: &[u8]) -> Option<(u32, usize)> {
    let len = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    let digits = rest.get(..len)?;
    if len == 0 || (len > 1 && digits.first() == Some(&b'0')) {
        return None;
    }
    if !matches!(
        rest.get(len),
        Some(b',' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
    ) {
        return None;
    }
    let value = digits.iter().try_fold(0u32, |v, d| {
        v.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })?;
    Some((value, len))
}

/// Checks that `bytes` is one complete JSON document under the contract's
/// rules (those of the reader, `Reader`: RFC 8259 syntax, valid UTF-8, no byte-order
/// mark, no lone surrogate escape, at most 128 levels), without reading it
/// into anything. Duplicate keys are not looked for, and a string whose
/// escapes decode to more than 256 bytes is refused
/// ([`JsonError::StringTooLong`]): a caller that must not refuse such a
/// document reads it another way.
///
/// # Errors
/// The first rule the document breaks.
pub fn check(bytes: &[u8]) -> Result<(), JsonError> {
    let mut scratch = [0u8; 256];
    let mut reader = Reader::new(bytes, &mut scratch)?;
    while reader.state != State::Done {
        reader.next()?;
    }
    reader.finish()
}

/// A string read by [`Reader`]: borrowed from the document when it has no
/// escape, otherwise decoded into the reader's scratch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Text<'s>(&'s str);

impl<'s> Text<'s> {
    /// The decoded text (for a number, the literal as written).
    pub(crate) fn as_str(&self) -> &'s str {
        self.0
    }
}

impl core::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

/// One step through a document (`Reader::next`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Event<'s> {
    /// `{`
    StartObject,
    /// `}`
    EndObject,
    /// `[`
    StartArray,
    /// `]`
    EndArray,
    /// An object key, decoded.
    Key(Text<'s>),
    /// A string value, decoded.
    String(Text<'s>),
    /// A number literal as written (valid JSON number syntax).
    Number(Text<'s>),
    /// `true` or `false`
    Bool(bool),
    /// `null`
    Null,
}

/// Where the reader is in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value must come (the document's, or after `:` or an array's `,`).
    Value,
    /// Just after `[`: a value or `]`.
    FirstValue,
    /// Just after `{`: a key or `}`.
    FirstKey,
    /// After an object's `,`: a key.
    Key,
    /// After a value inside a container: `,` or the container's end.
    After,
    /// The document's value is complete.
    Done,
}

/// Most levels of nesting a document may have (as serde_json's default).
pub(crate) const MAX_DEPTH: u32 = 128;

/// A pull reader over one complete document, with the contract's rules
/// (`SPEC A1`): RFC 8259 syntax (no leading zeros, no `NaN`, no raw control
/// characters, no trailing commas), no lone surrogate escape, nothing but
/// whitespace after the value, at most [`MAX_DEPTH`] levels. No recursion,
/// no allocation: an escaped string is decoded into `scratch`, which bounds
/// the longest such string ([`JsonError::StringTooLong`]).
pub(crate) struct Reader<'a, 'b> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
    scratch: &'b mut [u8],
    /// One bit per open container, the innermost lowest: 1 for an object.
    stack: u128,
    depth: u32,
    state: State,
}

const fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<'a, 'b> Reader<'a, 'b> {
    /// Checks the encoding and opens the document.
    pub(crate) fn new(bytes: &'a [u8], scratch: &'b mut [u8]) -> Result<Self, JsonError> {
        let text = check_document(bytes)?;
        Ok(Self {
            bytes,
            text,
            at: 0,
            scratch,
            stack: 0,
            depth: 0,
            state: State::Value,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.at += 1;
        }
    }

    fn in_object(&self) -> bool {
        self.stack & 1 == 1
    }

    fn open(&mut self, object: bool) -> Result<(), JsonError> {
        if self.depth >= MAX_DEPTH {
            return Err(JsonError::Syntax);
        }
        self.stack = (self.stack << 1) | u128::from(object);
        self.depth += 1;
        self.state = if object {
            State::FirstKey
        } else {
            State::FirstValue
        };
        Ok(())
    }

    fn close(&mut self) {
        self.stack >>= 1;
        self.depth = self.depth.saturating_sub(1);
        self.value_done();
    }

    fn value_done(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::After
        };
    }

    /// The next event; the end of the document is a syntax error here, since
    /// every caller knows when its value ends.
    pub(crate) fn next(&mut self) -> Result<Event<'_>, JsonError> {
        loop {
            self.skip_space();
            let b = self.peek().ok_or(JsonError::Syntax)?;
            match self.state {
                State::Done => return Err(JsonError::Syntax),
                State::After => {
                    self.at += 1;
                    match (b, self.in_object()) {
                        (b',', true) => self.state = State::Key,
                        (b',', false) => self.state = State::Value,
                        (b'}', true) => {
                            self.close();
                            return Ok(Event::EndObject);
                        }
                        (b']', false) => {
                            self.close();
                            return Ok(Event::EndArray);
                        }
                        _ => return Err(JsonError::Syntax),
                    }
                }
                State::FirstKey | State::Key => {
                    if b == b'}' && self.state == State::FirstKey {
                        self.at += 1;
                        self.close();
                        return Ok(Event::EndObject);
                    }
                    if b != b'"' {
                        return Err(JsonError::Syntax);
                    }
                    let (start, end, escaped) = self.string_span()?;
                    self.skip_space();
                    if self.peek() != Some(b':') {
                        return Err(JsonError::Syntax);
                    }
                    self.at += 1;
                    self.state = State::Value;
                    return self.text_of(start, end, escaped).map(Event::Key);
                }
                State::Value | State::FirstValue => {
                    if b == b']' && self.state == State::FirstValue {
                        self.at += 1;
                        self.close();
                        return Ok(Event::EndArray);
                    }
                    return self.value(b);
                }
            }
        }
    }

    fn value(&mut self, b: u8) -> Result<Event<'_>, JsonError> {
        match b {
            b'{' => {
                self.at += 1;
                self.open(true)?;
                Ok(Event::StartObject)
            }
            b'[' => {
                self.at += 1;
                self.open(false)?;
                Ok(Event::StartArray)
            }
            b'"' => {
                let (start, end, escaped) = self.string_span()?;
                self.value_done();
                self.text_of(start, end, escaped).map(Event::String)
            }
            b't' => self.literal(b"true", Event::Bool(true)),
            b'f' => self.literal(b"false", Event::Bool(false)),
            b'n' => self.literal(b"null", Event::Null),
            b'-' | b'0'..=b'9' => {
                let start = self.at;
                self.number()?;
                self.value_done();
                let literal = self.text.get(start..self.at).ok_or(JsonError::Syntax)?;
                Ok(Event::Number(Text(literal)))
            }
            _ => Err(JsonError::Syntax),
        }
    }

    /// Whether the byte after a number or literal may end it.
    fn at_delimiter(&self) -> bool {
        self.peek()
            .is_none_or(|b| is_space(b) || matches!(b, b',' | b']' | b'}'))
    }

    fn literal(&mut self, word: &[u8], event: Event<'static>) -> Result<Event<'_>, JsonError> {
        if self.bytes.get(self.at..self.at + word.len()) != Some(word) {
            return Err(JsonError::Syntax);
        }
        self.at += word.len();
        if !self.at_delimiter() {
            return Err(JsonError::Syntax);
        }
        self.value_done();
        Ok(event)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        self.at - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, then a delimiter.
    fn number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(JsonError::Syntax),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(JsonError::Syntax);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(JsonError::Syntax);
            }
        }
        if self.at_delimiter() {
            Ok(())
        } else {
            Err(JsonError::Syntax)
        }
    }

    /// Reads a string from its opening quote: the span of its contents and
    /// whether it holds an escape. Raw control characters are refused;
    /// escapes are checked when decoded.
    fn string_span(&mut self) -> Result<(usize, usize, bool), JsonError> {
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            // The plain run up to the next quote, backslash or control
            // character, in one tight loop.
            let rest = self.bytes.get(self.at..).unwrap_or_default();
            let run = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .ok_or(JsonError::Syntax)?;
            self.at += run;
            match self.peek() {
                Some(b'"') => {
                    let end = self.at;
                    self.at += 1;
                    return Ok((start, end, escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    // The escaped byte is checked when decoded; skipping it
                    // here keeps an escaped quote inside the string.
                    self.at += 2;
                }
                _ => return Err(JsonError::Syntax),
            }
        }
    }

    /// The text of a string's contents `start..end`: borrowed, or decoded
    /// into the scratch buffer when it has escapes.
    fn text_of(&mut self, start: usize, end: usize, escaped: bool) -> Result<Text<'_>, JsonError> {
        if !escaped {
            return self.text.get(start..end).map(Text).ok_or(JsonError::Syntax);
        }
        let raw = self.bytes.get(start..end).ok_or(JsonError::Syntax)?;
        let mut len = 0usize;
        let mut i = 0usize;
        while let Some(&b) = raw.get(i) {
            if b != b'\\' {
                // A run of plain bytes: whole UTF-8 sequences, since the run
                // ends only at a backslash, which is ASCII.
                let rest = raw.get(i..).unwrap_or_default();
                let run = rest.iter().position(|&c| c == b'\\').unwrap_or(rest.len());
                let src = rest.get(..run).unwrap_or_default();
                self.scratch
                    .get_mut(len..len + run)
                    .ok_or(JsonError::StringTooLong)?
                    .copy_from_slice(src);
                len += run;
                i += run;
                continue;
            }
            let (c, used) = escape_at(raw, i)?;
            i += used;
            len += self.put_char(len, c)?;
        }
        let decoded = self.scratch.get(..len).ok_or(JsonError::StringTooLong)?;
        core::str::from_utf8(decoded)
            .map(Text)
            .map_err(|_| JsonError::InvalidEscape)
    }

    fn put_char(&mut self, at: usize, c: char) -> Result<usize, JsonError> {
        let mut buf = [0u8; 4];
        let encoded = c.encode_utf8(&mut buf).as_bytes();
        self.scratch
            .get_mut(at..at + encoded.len())
            .ok_or(JsonError::StringTooLong)?
            .copy_from_slice(encoded);
        Ok(encoded.len())
    }

    /// Confirms that nothing but whitespace follows the value.
    pub(crate) fn finish(mut self) -> Result<(), JsonError> {
        if self.state != State::Done {
            return Err(JsonError::Syntax);
        }
        self.skip_space();
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(JsonError::TrailingData)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast-path readers' integer: its value and length, or declined.
    #[test]
    fn a_plain_uint_is_digits_without_a_leading_zero_ending_at_a_delimiter() {
        for (text, read) in [
            (&b"0,"[..], Some((0, 1))),
            (b"7}", Some((7, 1))),
            (b"42 ", Some((42, 2))),
            (b"42\t", Some((42, 2))),
            (b"42\n", Some((42, 2))),
            (b"42\r", Some((42, 2))),
            (b"4294967295,", Some((u32::MAX, 10))),
            (b"4294967296,", None),
            (b"99999999999999999999,", None),
            (b"01,", None),
            (b"00,", None),
            (b"-1,", None),
            (b"1.5,", None),
            (b"1e3,", None),
            (b"12", None),
            (b"12]", None),
            (b"12x", None),
            (b",", None),
            (b"", None),
            (b"null,", None),
        ] {
            assert_eq!(plain_uint(text), read, "{:?}", core::str::from_utf8(text));
        }
    }

    /// `SPEC A1`: with the exact parser (the default `exact-floats`
    /// feature), a float literal the fast path cannot read exactly — more
    /// than 15 significant digits, or a power of ten beyond ±22 — is read
    /// to the nearest double, as Python reads it, never refused or read as
    /// something else; without the feature it is refused.
    #[test]
    fn floats_beyond_the_fast_path_are_read_exactly_or_refused() {
        for raw in [
            "0.1000000000000000055511151231257827",
            "1.2345678901234567e-300",
            "-9007199254740993",
            "1.7976931348623157e308",
            "5e-324",
        ] {
            assert_eq!(fast_float(raw), Err(JsonError::FloatPrecision), "{raw}");
            let want: f64 = raw.parse().expect("a float");
            if cfg!(feature = "exact-floats") {
                assert_eq!(parse_float(raw), Ok(want), "{raw}");
            } else {
                assert_eq!(parse_float(raw), Err(JsonError::FloatPrecision), "{raw}");
            }
        }
    }

    /// `SPEC A1`: a number or literal runs to a delimiter, so `01` (a
    /// leading zero), `1x` or `truex` is a syntax error where it stands,
    /// not a value followed by trailing data. Found by cargo-mutants (the
    /// whole-core run, shard 1/4): the delimiter check could be dropped.
    #[test]
    fn a_number_or_literal_runs_to_a_delimiter() {
        for doc in ["01", "1x", "-0x", "1.5e3e", "truex", "nulln", "falsefalse"] {
            assert_eq!(read_all(doc.as_bytes()), Err(JsonError::Syntax), "{doc}");
        }
        for doc in ["0", "1 ", "-0.5e3\n", "true", "[1,2]", "{\"a\":null}"] {
            assert_eq!(read_all(doc.as_bytes()), Ok(()), "{doc}");
        }
    }

    /// `SPEC A1` (issue 11: one escape rule): `escape_at` decodes every
    /// escape JSON has, with its length, at any offset, and refuses an
    /// unknown escape, a short or non-hex `\u`, and every lone surrogate.
    #[test]
    fn one_escape_rule_decodes_every_escape_and_refuses_lone_surrogates() {
        let good: [(&str, char, usize); 13] = [
            (r#"\""#, '"', 2),
            (r"\\", '\\', 2),
            (r"\/", '/', 2),
            (r"\b", '\u{8}', 2),
            (r"\f", '\u{c}', 2),
            (r"\n", '\n', 2),
            (r"\r", '\r', 2),
            (r"\t", '\t', 2),
            (r"\u00e9", 'é', 6),
            (r"\u0000", '\0', 6),
            (r"\uFFFF", '\u{FFFF}', 6),
            (r"\uD83D\uDE00x", '😀', 12),
            (r"\udbff\udfff", '\u{10FFFF}', 12),
        ];
        for (text, c, used) in good {
            assert_eq!(escape_at(text.as_bytes(), 0), Ok((c, used)), "{text}");
            let shifted = std::format!("ab{text}");
            assert_eq!(
                escape_at(shifted.as_bytes(), 2),
                Ok((c, used)),
                "{text} at 2"
            );
        }
        for bad in [
            r"\x",
            r"\",
            r"\u12",
            r"\u12G4",
            r"\uDE00",
            r"\uDFFF\uDC00",
            r"\uD83D",
            r"\uD83Dx",
            r"\uD83D\u0041",
            r"\uD83D\uD83D",
            r"\uD83D\uDE0",
            r"\uD83D/uDE00",
        ] {
            assert_eq!(
                escape_at(bad.as_bytes(), 0),
                Err(JsonError::InvalidEscape),
                "{bad}"
            );
        }
    }

    /// Issue 11 (one escape rule): the reader, the action scanner and the
    /// decoding of a validated action string agree on every escape: the
    /// same documents accepted, the same characters read.
    #[test]
    fn the_reader_and_the_action_scanner_read_escapes_alike() {
        let texts = [
            r"plain",
            r#"q\"uote"#,
            r"back\\slash",
            r"\/\b\f\n\r\t",
            r"caf\u00e9",
            r"\uD83D\uDE00 smile",
            r"\u0041\u00DF\u6771",
            r"lone \uD83D",
            r"low \uDC00 first",
            r"bad \x",
            r"short \u12",
            r"\uD83D\u0041",
        ];
        for text in texts {
            let string = std::format!("\"{text}\"");
            let mut scratch = [0u8; 256];
            let read =
                Reader::new(string.as_bytes(), &mut scratch).and_then(|mut r| match r.next()? {
                    Event::String(t) => Ok(std::string::String::from(t.as_str())),
                    _ => Err(JsonError::Syntax),
                });
            let action = std::format!(r#"{{"kind":"final","text":"{text}"}}"#);
            let scanned = crate::ActionRef::parse(action.as_bytes()).map(|a| match a {
                crate::ActionRef::Final { text } => text.chars().collect::<std::string::String>(),
                crate::ActionRef::Tool(_) => std::string::String::new(),
            });
            match (&read, &scanned) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{text}: reader {read:?}, scanner {scanned:?}"),
            }
        }
    }

    /// Reads a whole document, every event, then its end.
    fn read_all(bytes: &[u8]) -> Result<(), JsonError> {
        let mut scratch = [0u8; 256];
        let mut reader = Reader::new(bytes, &mut scratch)?;
        let mut depth = 0i32;
        loop {
            match reader.next()? {
                Event::StartObject | Event::StartArray => depth += 1,
                Event::EndObject | Event::EndArray => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
        reader.finish()
    }

    /// The events of a document as text, or "error", for comparing readers.
    fn ours(bytes: &[u8]) -> std::string::String {
        use std::fmt::Write as _;
        let mut scratch = [0u8; 4096];
        let mut out = std::string::String::new();
        let Ok(mut reader) = Reader::new(bytes, &mut scratch) else {
            return "error".into();
        };
        let mut depth = 0i32;
        loop {
            let Ok(e) = reader.next() else {
                return "error".into();
            };
            match e {
                Event::StartObject => {
                    depth += 1;
                    out += "{"
                }
                Event::StartArray => {
                    depth += 1;
                    out += "["
                }
                Event::EndObject => {
                    depth -= 1;
                    out += "}"
                }
                Event::EndArray => {
                    depth -= 1;
                    out += "]"
                }
                Event::Key(k) => write!(out, "k{:?}", k.as_str()).unwrap(),
                Event::String(t) => write!(out, "s{:?}", t.as_str()).unwrap(),
                Event::Number(n) => write!(out, "n{}", n.as_str()).unwrap(),
                Event::Bool(b) => write!(out, "b{b}").unwrap(),
                Event::Null => out += "null",
            }
            if depth == 0 {
                break;
            }
        }
        match reader.finish() {
            Ok(()) => out,
            Err(_) => "error".into(),
        }
    }

    /// The pre-scan the picojson reader needed: picojson accepted a lone
    /// high surrogate followed by a short escape.
    fn lone_surrogate(bytes: &[u8]) -> bool {
        let mut i = 0;
        while let Some(offset) = bytes
            .get(i..)
            .and_then(|r| r.iter().position(|&b| b == b'\\'))
        {
            let at = i + offset;
            match bytes.get(at + 1) {
                Some(b'u') => {
                    let Some(unit) = hex4(bytes, at + 2) else {
                        return true;
                    };
                    i = at + 6;
                    if (0xDC00..=0xDFFF).contains(&unit) {
                        return true;
                    }
                    if (0xD800..=0xDBFF).contains(&unit) {
                        let low = match (bytes.get(i), bytes.get(i + 1)) {
                            (Some(b'\\'), Some(b'u')) => hex4(bytes, i + 2),
                            _ => None,
                        };
                        if !low.is_some_and(|l| (0xDC00..=0xDFFF).contains(&l)) {
                            return true;
                        }
                        i += 6;
                    }
                }
                Some(_) => i = at + 2,
                None => return false,
            }
        }
        false
    }

    /// The events the picojson-based reader gave (with its pre-scans).
    fn picojson_events(bytes: &[u8]) -> std::string::String {
        use picojson::{Event as P, PullParser, SliceParser};
        use std::fmt::Write as _;
        let Ok(text) = check_document(bytes) else {
            return "error".into();
        };
        if lone_surrogate(bytes) {
            return "error".into();
        }
        let mut scratch = [0u8; 1 << 16];
        let mut parser = SliceParser::with_buffer(text, &mut scratch);
        let mut out = std::string::String::new();
        let mut depth = 0i32;
        loop {
            match parser.next_event() {
                Ok(P::EndDocument) => return "error".into(),
                Ok(P::StartObject) => {
                    depth += 1;
                    out += "{"
                }
                Ok(P::StartArray) => {
                    depth += 1;
                    out += "["
                }
                Ok(P::EndObject) => {
                    depth -= 1;
                    out += "}"
                }
                Ok(P::EndArray) => {
                    depth -= 1;
                    out += "]"
                }
                Ok(P::Key(k)) => write!(out, "k{:?}", k.as_str()).unwrap(),
                Ok(P::String(t)) => write!(out, "s{:?}", t.as_str()).unwrap(),
                Ok(P::Number(n)) => write!(out, "n{}", n.as_str()).unwrap(),
                Ok(P::Bool(b)) => write!(out, "b{b}").unwrap(),
                Ok(P::Null) => out += "null",
                Err(_) => return "error".into(),
            }
            if depth == 0 {
                break;
            }
        }
        // As the old reader's `finish`: only the end of the document may follow.
        match parser.next_event() {
            Ok(P::EndDocument) => out,
            _ => "error".into(),
        }
    }

    /// The reader gives the same events, and accepts and refuses the same
    /// documents, as the picojson-based reader it replaced, over edge
    /// documents and 200 000 random mutations of them — except where
    /// picojson accepts what RFC 8259 (and serde_json) refuses.
    #[test]
    fn reader_agrees_with_picojson() {
        let seeds: &[&str] = &[
            r#"[{"id":"a","parent":null,"tokens":2,"output":1},{"id":"b","parent":"a","tokens":3,"output":2}]"#,
            r#"{"steps":4,"tokens":4,"output":10,"depth":4,"fanout":4}"#,
            r#"{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":null,"x":{"a":[1,2,{"b":[]}]}}"#,
            r#"{"q":"caf\u00e9 \ud83d\ude00 \n\t\"\\\/","n":[-0,0.5,1e2,1E-2,-12.5e+3,true,false,null]}"#,
            r#" [ ] "#,
            r#"{}"#,
            r#""plain""#,
            r#"[1,[2,[3,[4,[]]]]]"#,
            r#"{"a":1,"a":2}"#,
            "[1,]",
            r#"{"a":1,}"#,
            "01",
            "[01]",
            "1.",
            ".5",
            "1e",
            "-",
            "[",
            r#"{"a"}"#,
            r#"{"a":}"#,
            "nul",
            "tru",
            "[1 2]",
            r#""\x""#,
            "\"a\nb\"",
            "NaN",
            "[Infinity]",
            "1 2",
            r#"{"a":1}x"#,
            r#""\ud800\n""#,
            r#""\udc00""#,
            "[true1]",
            "{1:2}",
            "-01",
            "1.e5",
            "[-]",
            r#""\u12""#,
            r#"["\ud83d\ude00"]"#,
        ];
        for doc in seeds {
            assert_eq!(
                ours(doc.as_bytes()),
                picojson_events(doc.as_bytes()),
                "{doc}"
            );
        }
        let alphabet = br#"{}[],:"\ 0123456789-+.eEtrufalsnu0e9abxd8"#;
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut accepted, mut lenient) = (0, 0);
        for _ in 0..200_000 {
            let mut doc = seeds[(next() % seeds.len() as u64) as usize]
                .as_bytes()
                .to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % (doc.len() as u64 + 1)) as usize;
                let byte = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 3 {
                    0 if at < doc.len() => doc[at] = byte,
                    1 if at < doc.len() => {
                        doc.remove(at);
                    }
                    _ => doc.insert(at, byte),
                }
            }
            let (a, b) = (ours(&doc), picojson_events(&doc));
            // `check` reads as the reader does, and accepts nothing that
            // serde_json refuses (what `budgetgate eval` relies on).
            let checked = check(&doc).is_ok();
            assert_eq!(
                checked,
                a != "error",
                "{}",
                std::string::String::from_utf8_lossy(&doc)
            );
            if checked {
                assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&doc).is_ok());
            }
            if a != b {
                // picojson is lenient where RFC 8259 is not (it accepts a
                // container closed by the other bracket, `[12}`): there the
                // new reader must refuse, as serde_json does.
                let serde = serde_json::from_slice::<serde::de::IgnoredAny>(&doc).is_ok();
                assert!(
                    a == "error" && !serde,
                    "{}: ours {a}, picojson {b}, serde_json accepts: {serde}",
                    std::string::String::from_utf8_lossy(&doc)
                );
                lenient += 1;
            }
            accepted += usize::from(a != "error");
        }
        assert!(accepted > 20_000, "only {accepted} mutants were valid JSON");
        std::println!("{accepted} valid mutants; {lenient} accepted by picojson alone");
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused() {
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert_eq!(read_all(deep(MAX_DEPTH as usize).as_bytes()), Ok(()));
        assert_eq!(
            read_all(deep(MAX_DEPTH as usize + 1).as_bytes()),
            Err(JsonError::Syntax)
        );
        assert_eq!(read_all(deep(100_000).as_bytes()), Err(JsonError::Syntax));
    }

    #[test]
    fn an_escaped_string_longer_than_the_scratch_is_refused() {
        let long = std::format!(r#""{}\n""#, "x".repeat(300));
        assert_eq!(read_all(long.as_bytes()), Err(JsonError::StringTooLong));
        let plain = std::format!(r#""{}""#, "x".repeat(300));
        assert_eq!(read_all(plain.as_bytes()), Ok(()));
    }

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
                read_all(bad.as_bytes()),
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
            assert_eq!(read_all(good.as_bytes()), Ok(()), "{good}");
        }
    }

    /// The fast path's bounds (`SPEC A1` numbers read exactly): trailing
    /// zeros of a long mantissa are dropped against a negative scale, so
    /// `12.300000000000000000` is read by it; a mantissa of exactly 2^53 is
    /// still exact, one more is not (the exact parser then reads it).
    #[test]
    fn the_fast_path_drops_trailing_zeros_and_stops_just_past_2_53() {
        assert_eq!(exact_product(12_300_000_000_000_000_000, -18), Some(12.3));
        assert_eq!(fast_float("12.300000000000000000"), Ok(12.3));
        assert_eq!(exact_product(1 << 53, 0), Some(9_007_199_254_740_992.0));
        assert_eq!(fast_float("9007199254740992"), Ok(9_007_199_254_740_992.0));
        assert_eq!(exact_product((1 << 53) + 1, 0), None);
        assert_eq!(
            fast_float("9007199254740993"),
            Err(JsonError::FloatPrecision)
        );
        assert_eq!(exact_product(0, -5), Some(0.0));
        assert_eq!(exact_product(5, 23), None);
    }

    /// Each reader error says what is wrong, in its own words.
    #[test]
    fn each_json_error_says_what_is_wrong() {
        let words = [
            (
                JsonError::InvalidUtf8 { offset: 3 },
                "invalid UTF-8 at byte 3",
            ),
            (JsonError::ByteOrderMark, "a byte-order mark is not allowed"),
            (JsonError::Empty, "empty document"),
            (JsonError::Syntax, "invalid JSON syntax"),
            (
                JsonError::InvalidEscape,
                "invalid string escape or lone surrogate",
            ),
            (JsonError::TrailingData, "text after the JSON value"),
            (JsonError::DuplicateKey, "duplicate object key"),
            (
                JsonError::StringTooLong,
                "escaped strings longer than the buffer for them",
            ),
        ];
        for (error, said) in words {
            assert_eq!(error.to_string(), said);
        }
        assert!(JsonError::FloatPrecision
            .to_string()
            .starts_with("float literal too precise"));
    }

    /// `SPEC A1` (JSON numbers): an exponent may carry its sign, `+` as
    /// well as `-`, in either case of `e`; each is read as written.
    #[test]
    fn an_exponent_with_a_sign_is_read_as_written() {
        for (raw, value) in [
            ("1e+5", 1e5),
            ("2.5E+3", 2500.0),
            ("-4e+0", -4.0),
            ("1e-2", 0.01),
            ("3E-1", 0.3),
            ("7e5", 7e5),
        ] {
            assert_eq!(parse_float(raw), Ok(value), "{raw}");
            assert_eq!(fast_float(raw), Ok(value), "{raw}");
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
