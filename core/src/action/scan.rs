//! The action scanner: one pass over a document, specialised to the two
//! action shapes, that validates as it goes and copies no string (`SPEC A1`).
//!
//! JSON is read as RFC 8259 has it, with the contract's extra rules: no
//! byte-order mark, valid UTF-8 only, no lone surrogate escape, no duplicate
//! key, nothing but whitespace after the value. No recursion: a nested value
//! can only stand where a scalar or a string is required, and is refused
//! as soon as it opens.
//!
//! This file holds the scanner's reading of JSON itself: strings, numbers,
//! literals and the punctuation of objects. Reading the action's members
//! and the arguments object with it is `document`'s job.

use super::view::JsonStr;
use super::{ActionError, Field};
use crate::json::{self, JsonError};

mod document;

pub use document::Members;
pub(crate) use document::Values;
pub(super) use document::{action, action_into};

/// Bytes that end the fast run through a string: `"`, `\` and the control
/// characters, which JSON forbids raw.
// Built at compile time: an index out of range would fail the build.
#[allow(clippy::indexing_slicing)]
const STOPS: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The bytes of an argument key after its first (`[A-Za-z0-9_]`); the field
/// names of an action are made of them too. `true` marks the bytes outside.
// Built at compile time: an index out of range would fail the build.
#[allow(clippy::indexing_slicing)]
const NOT_KEY: [bool; 256] = {
    let mut table = [true; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = !((b as u8).is_ascii_alphanumeric() || b == b'_' as usize);
        b += 1;
    }
    table
};

/// The bytes of an identifier after its first (`[A-Za-z0-9_-]`). `true`
/// marks the bytes outside.
// Built at compile time: an index out of range would fail the build.
#[allow(clippy::indexing_slicing)]
const NOT_IDENT: [bool; 256] = {
    let mut table = NOT_KEY;
    table[b'-' as usize] = false;
    table
};

/// Whether `table` marks `byte` (every byte indexes a 256-entry table).
#[inline(always)]
fn in_set(table: &[bool; 256], byte: u8) -> bool {
    table.get(usize::from(byte)).copied().unwrap_or(true)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = ONES * 0x80;

/// The high bit of each byte of `x7` (every byte below 0x80) within
/// `lo..=hi`. No sum carries out of its byte, so each byte is tested alone.
const fn within(x7: u64, lo: u8, hi: u8) -> u64 {
    x7.wrapping_add(ONES * (0x80 - lo as u64)) & !x7.wrapping_add(ONES * (0x7F - hi as u64)) & HIGH
}

/// Eight bytes of a string at once: the high bit of each byte that ends a
/// run through it (`STOPS`).
const fn string_ends(word: u64) -> u64 {
    let x7 = word & !HIGH;
    let ascii = !word & HIGH;
    (within(x7, 0, 0x1F) | within(x7, b'"', b'"') | within(x7, b'\\', b'\\')) & ascii
}

/// How many bytes at the start of `rest` precede the first that `ends`
/// marks (`rest.len()` if none does): eight at a time by the word test
/// `word`, which must agree with the table on every byte, then one at a time.
#[inline(always)]
fn run_len(rest: &[u8], ends: &[bool; 256], word: impl Fn(u64) -> u64) -> usize {
    let mut chunks = rest.chunks_exact(8);
    let mut len = 0;
    for chunk in chunks.by_ref() {
        // Always eight bytes; an impossible short chunk reads as NULs,
        // which end every run.
        let marks = word(u64::from_le_bytes(
            <[u8; 8]>::try_from(chunk).unwrap_or([0; 8]),
        ));
        if marks != 0 {
            return len + (marks.trailing_zeros() / 8) as usize;
        }
        len += 8;
    }
    let tail = chunks.remainder();
    len + tail
        .iter()
        .position(|&b| in_set(ends, b))
        .unwrap_or(tail.len())
}

/// The field names as written, from their opening quote, in pieces of four
/// and two bytes read as little-endian integers.
const KIND: u32 = u32::from_le_bytes(*b"\"kin");
const TEXT: u32 = u32::from_le_bytes(*b"\"tex");
const NAME: u32 = u32::from_le_bytes(*b"\"nam");
const CALL: u32 = u32::from_le_bytes(*b"\"cal");
const ARGU: u32 = u32::from_le_bytes(*b"\"arg");
const L_ID: u32 = u32::from_le_bytes(*b"l_id");
const UMEN: u32 = u32::from_le_bytes(*b"umen");
const D_Q: u16 = u16::from_le_bytes(*b"d\"");
const T_Q: u16 = u16::from_le_bytes(*b"t\"");
const E_Q: u16 = u16::from_le_bytes(*b"e\"");
const TS: u16 = u16::from_le_bytes(*b"ts");
/// `"tool"`: the kind of a tool call, as written.
const TOOL: u32 = u32::from_le_bytes(*b"\"too");
const L_Q: u16 = u16::from_le_bytes(*b"l\"");

/// Longest decoded key that can name a field (`arguments`).
const KEY_MAX: usize = 9;

/// A value that is not a string, as far as the scanner needs to know it.
enum Other {
    /// `{` or `[`: refused where it stands, so never read further.
    Open,
    /// An integer literal: its value, `None` beyond `i64`.
    Int(Option<i64>),
    /// A literal with a fraction or exponent, read as `json::parse_float`
    /// reads it.
    Float(Result<f64, JsonError>),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone)]
struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Where the member being read starts (its key's opening quote): the
    /// offset of an error about it.
    mark: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The four bytes at `at` as a little-endian integer (0 past the end):
    /// compared with a constant, one load and one comparison on every
    /// target, where a slice comparison may call `memcmp`.
    fn word(&self, at: usize) -> u32 {
        self.bytes
            .get(at..)
            .and_then(|b| b.first_chunk::<4>())
            .map_or(0, |b| u32::from_le_bytes(*b))
    }

    /// The two bytes at `at` as a little-endian integer (0 past the end).
    fn pair(&self, at: usize) -> u16 {
        self.bytes
            .get(at..)
            .and_then(|b| b.first_chunk::<2>())
            .map_or(0, |b| u16::from_le_bytes(*b))
    }

    fn skip_space(&mut self) {
        // One comparison in the common case: every byte above the space is
        // something else.
        while let Some(b) = self.peek().filter(|&b| b <= b' ') {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.at += 1;
        }
    }

    /// Skips whitespace and takes `byte`, or fails with a syntax error.
    fn expect(&mut self, byte: u8) -> Result<(), JsonError> {
        self.skip_space();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(JsonError::Syntax)
        }
    }

    /// The string whose opening quote is at the cursor.
    fn string(&mut self) -> Result<JsonStr<'a>, JsonError> {
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            at += run_len(
                self.bytes.get(at..).unwrap_or_default(),
                &STOPS,
                string_ends,
            );
            match self.bytes.get(at) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    self.at = at;
                    self.escape()?;
                    at = self.at;
                }
                // A raw control character, or the end inside a string.
                _ => return Err(JsonError::Syntax),
            }
        }
        let raw = self.text.get(start..at).ok_or(JsonError::Syntax)?;
        self.at = at + 1;
        Ok(if escaped {
            JsonStr::escaped(raw)
        } else {
            JsonStr::plain(raw)
        })
    }

    /// The string at the cursor (which must be at its opening quote), if it is made only of `[A-Za-z0-9_]` (with
    /// `dash`, `[A-Za-z0-9_-]`), so it holds no escape, and is not empty: the common case of keys and
    /// identifiers, read in one pass. Otherwise the cursor stays.
    #[inline(always)]
    fn plain(&mut self, dash: bool) -> Option<&'a str> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.at + 1;
        let rest = self.bytes.get(start..)?;
        // Keys and identifiers are short: a byte at a time is quickest.
        let outside = if dash { &NOT_IDENT } else { &NOT_KEY };
        let len = rest
            .iter()
            .position(|&b| in_set(outside, b))
            .unwrap_or(rest.len());
        if len == 0 || rest.get(len) != Some(&b'"') {
            return None;
        }
        let raw = self.text.get(start..start + len)?;
        self.at = start + len + 1;
        Some(raw)
    }

    /// The field named by the key at the cursor, when it is written exactly
    /// as `"kind"`, `"text"`, `"call_id"`, `"name"` or `"arguments"` (no
    /// escape): compared whole, without a scan. Otherwise the cursor stays.
    fn known_field(&mut self) -> Option<Field> {
        let at = self.at;
        let quote = |i: usize| self.bytes.get(at + i) == Some(&b'"');
        let (field, len) = match self.word(at) {
            KIND if self.pair(at + 4) == D_Q => (Field::Kind, 6),
            TEXT if self.pair(at + 4) == T_Q => (Field::Text, 6),
            NAME if self.pair(at + 4) == E_Q => (Field::Name, 6),
            CALL if self.word(at + 4) == L_ID && quote(8) => (Field::CallId, 9),
            ARGU if self.word(at + 4) == UMEN && self.pair(at + 8) == TS && quote(10) => {
                (Field::Arguments, 11)
            }
            _ => return None,
        };
        self.at += len;
        Some(field)
    }

    /// Checks the escape whose backslash is at the cursor and steps over it
    /// (the one escape rule, [`json::escape_at`]).
    fn escape(&mut self) -> Result<(), JsonError> {
        let (_, used) = json::escape_at(self.bytes, self.at)?;
        self.at += used;
        Ok(())
    }

    /// A value other than a string, at the cursor. Numbers and literals must
    /// end where a value may end.
    fn other(&mut self) -> Result<Other, JsonError> {
        let start = self.at;
        let found = match self.peek() {
            Some(b'{' | b'[') => {
                self.at += 1;
                return Ok(Other::Open);
            }
            Some(b'-' | b'0'..=b'9') => self.number(start)?,
            Some(b't') => self.literal(b"true", Other::Bool(true))?,
            Some(b'f') => self.literal(b"false", Other::Bool(false))?,
            Some(b'n') => self.literal(b"null", Other::Null)?,
            _ => return Err(JsonError::Syntax),
        };
        if self.at_value_end() {
            Ok(found)
        } else {
            Err(JsonError::Syntax)
        }
    }

    /// Whether a value may end at the cursor: the end, whitespace, `,`, `}`
    /// or `]` follows.
    fn at_value_end(&self) -> bool {
        matches!(
            self.peek(),
            None | Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}' | b']')
        )
    }

    fn literal(&mut self, word: &[u8], value: Other) -> Result<Other, JsonError> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(JsonError::Syntax)
        }
    }

    /// Decimal digits at the cursor, appended to `mantissa` (which wraps
    /// after 19 digits); returns how many.
    fn digits(&mut self, mantissa: &mut u64) -> u32 {
        let start = self.at;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            *mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
            self.at += 1;
        }
        u32::try_from(self.at - start).unwrap_or(u32::MAX)
    }

    /// An integer of at most nine digits, neither fraction nor exponent (the
    /// common case), read in 32 bits; `None`, with the cursor unmoved, for
    /// anything else.
    #[inline]
    fn small_integer(&mut self) -> Option<i64> {
        let negative = self.peek() == Some(b'-');
        let first = self.at + usize::from(negative);
        let mut at = first;
        let mut value: u32 = 0;
        while let Some(d @ b'0'..=b'9') = self.bytes.get(at).copied() {
            if at - first == 9 {
                return None;
            }
            value = value * 10 + u32::from(d - b'0');
            at += 1;
        }
        let digits = at - first;
        let leading_zero = digits > 1 && self.bytes.get(first) == Some(&b'0');
        if digits == 0 || leading_zero {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes.get(at) {
            return None;
        }
        self.at = at;
        let value = i64::from(value);
        Some(if negative { -value } else { value })
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, starting at `start`,
    /// read as it is scanned: an integer exactly, a float exactly when
    /// Clinger's fast path applies (the common case).
    fn number(&mut self, start: usize) -> Result<Other, JsonError> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        // The digits of the integer part and the fraction, as one integer;
        // exact while there are at most 19 of them.
        let mut mantissa: u64 = 0;
        let mut count: u32 = match self.peek() {
            Some(b'0') => {
                self.at += 1;
                1
            }
            Some(b'1'..=b'9') => self.digits(&mut mantissa),
            _ => return Err(JsonError::Syntax),
        };
        let mut float = false;
        let mut scale: i64 = 0;
        if self.peek() == Some(b'.') {
            float = true;
            self.at += 1;
            let fraction = self.digits(&mut mantissa);
            if fraction == 0 {
                return Err(JsonError::Syntax);
            }
            count = count.saturating_add(fraction);
            scale -= i64::from(fraction);
        }
        if let Some(b'e' | b'E') = self.peek() {
            float = true;
            self.at += 1;
            let down = match self.peek() {
                Some(b'-') => {
                    self.at += 1;
                    true
                }
                Some(b'+') => {
                    self.at += 1;
                    false
                }
                _ => false,
            };
            let first = self.at;
            let mut exp: i64 = 0;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                // Saturated far beyond any double's range.
                exp = (exp * 10 + i64::from(d - b'0')).min(1_000_000);
                self.at += 1;
            }
            if self.at == first {
                return Err(JsonError::Syntax);
            }
            scale += if down { -exp } else { exp };
        }
        let exact = count <= 19;
        let sign = |v: f64| if negative { -v } else { v };
        if !float {
            // At most 18 digits always fit an i64; anything longer is out of
            // every range here.
            let value = i64::try_from(mantissa).ok().filter(|_| count <= 18);
            return Ok(Other::Int(value.map(|v| if negative { -v } else { v })));
        }
        let fast = match exact {
            false => None,
            true if mantissa == 0 => Some(0.0),
            true => json::exact_product(mantissa, scale),
        };
        Ok(Other::Float(match fast {
            Some(v) => Ok(sign(v)),
            None => json::parse_float(self.text.get(start..self.at).ok_or(JsonError::Syntax)?),
        }))
    }

    /// A value that must be a string: anything else is `wrong`, once it is
    /// known to be valid JSON as far as it was read.
    fn string_or(&mut self, wrong: ActionError) -> Result<JsonStr<'a>, ActionError> {
        self.skip_space();
        if self.peek() == Some(b'"') {
            Ok(self.string()?)
        } else {
            self.other()?;
            Err(wrong)
        }
    }

    /// After a member: `,` then the next key's opening quote, or `}`.
    /// Returns whether another member follows.
    fn next_member(&mut self) -> Result<bool, JsonError> {
        self.skip_space();
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.skip_space();
                if self.peek() == Some(b'"') {
                    Ok(true)
                } else {
                    Err(JsonError::Syntax)
                }
            }
            Some(b'}') => {
                self.at += 1;
                Ok(false)
            }
            _ => Err(JsonError::Syntax),
        }
    }

    /// After `{`: whether the object has a first member.
    fn first_member(&mut self) -> Result<bool, JsonError> {
        self.skip_space();
        match self.peek() {
            Some(b'"') => Ok(true),
            Some(b'}') => {
                self.at += 1;
                Ok(false)
            }
            _ => Err(JsonError::Syntax),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ActionRef;
    // Only the exact float reader's expectations name a scalar.
    #[cfg(feature = "exact-floats")]
    use crate::action::ScalarRef;
    use crate::ident::IdentifierError;
    use crate::limits::MAX_ARGUMENT_KEY_LEN;
    use std::format;
    use std::string::String;

    /// The refusal of `doc` and its byte offset.
    fn refusal(doc: &str) -> (ActionError, usize) {
        let invalid = action(doc.as_bytes()).unwrap_err();
        (invalid.error, invalid.offset)
    }

    /// A tool call with `args` as its arguments' members.
    fn tool(args: &str) -> String {
        format!(r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{args}}}}}"#)
    }

    /// `SPEC A1` (exactly the keys of the two shapes): a key that only
    /// begins like a field name, or has one of its bytes changed, is an
    /// unexpected key, refused at its opening quote, wherever it stands and
    /// whatever follows it. The field names are compared whole as four and
    /// two bytes at fixed distances from the quote; the sweep places keys
    /// made of those pieces at many offsets, after a first member or none,
    /// and fills what comes before and after with each piece compared, so a
    /// comparison made at the wrong distance would see a field's bytes.
    #[test]
    fn a_key_that_only_begins_like_a_field_name_is_an_unexpected_key() {
        for key in [
            "kinx",
            "kin",
            "kindd",
            "texx",
            "namx",
            "named",
            "call_idx",
            "calxxxx",
            "call_i",
            "cal_idx",
            "argumentsx",
            "argumenxx",
            "argxxxxts",
            "argl_idts",
            "",
        ] {
            let doc = format!(r#"{{"{key}":"n"}}"#);
            assert_eq!(refusal(&doc), (ActionError::UnexpectedKey, 1), "{doc}");
        }
        let fields = ["kind", "text", "name", "call_id", "arguments"];
        let pieces = [
            "", "d", "t", "e", "l", "x", "xx", "ts", "_id", "l_id", "umen",
        ];
        let fills = ["\"", "d\"", "t\"", "e\"", "l_id", "umen", "ts"];
        let mut checked = 0;
        for start in ["kin", "tex", "nam", "cal", "arg"] {
            for a in pieces {
                for b in pieces {
                    let key = format!("{start}{a}{b}");
                    if fields.contains(&key.as_str()) {
                        continue;
                    }
                    for fill in fills {
                        for pad in 0..=10 {
                            let spaces = " ".repeat(pad);
                            for before in [
                                format!("{{{spaces}"),
                                format!(
                                    r#"{{"text":"{}",{spaces}"#,
                                    fill.replace('"', "q").repeat(4)
                                ),
                            ] {
                                let at = before.len();
                                let after = fill.repeat((12 * at + 16) / fill.len() + 1);
                                let doc = format!(r#"{before}"{key}":{after}"#);
                                assert_eq!(
                                    refusal(&doc),
                                    (ActionError::UnexpectedKey, at),
                                    "{doc}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 80_000, "{checked}");
    }

    /// `SPEC A1` (`kind` is `"final"` or `"tool"`): a kind that only begins
    /// or ends like `"tool"` is an unknown kind, refused at its member,
    /// wherever its value stands and whatever follows it (the common
    /// spelling is compared whole, as four and two bytes).
    #[test]
    fn a_kind_that_only_looks_like_tool_is_an_unknown_kind() {
        let pieces = ["", "too", "tool", "fo", "o", "l", "x", "ls", "final"];
        let mut checked = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let kind = format!("{a}{b}{c}");
                    if kind == "tool" || kind == "final" {
                        continue;
                    }
                    for pad in 0..=8 {
                        let at = 8 + pad;
                        let after = "l\"".repeat(2 * at + 8);
                        let doc = format!(r#"{{"kind":{}"{kind}"{after}"#, " ".repeat(pad));
                        assert_eq!(refusal(&doc), (ActionError::UnknownKind, 1), "{doc}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 5_000, "{checked}");
    }

    /// `SPEC A1` (JSON as RFC 8259 has it): a number or a literal is read
    /// whole, and must end where a value may end, even where a string or an
    /// object is required and it will be refused anyway: `{"kind":truex}`
    /// and `{"kind":1.}` are syntax errors where reading stopped, not the
    /// shape error of a valid value (which `{"kind":1}` is).
    #[test]
    fn a_misplaced_number_or_literal_must_still_be_valid_json() {
        let syntax = ActionError::Json(JsonError::Syntax);
        let arguments = r#"{"kind":"tool","call_id":"c","name":"n","arguments":"#;
        for (doc, rest) in [
            (String::from(r#"{"kind":truex}"#), "x}"),
            (String::from(r#"{"kind":1x}"#), "x}"),
            (String::from(r#"{"text":"t","kind":nullx}"#), "x}"),
            (String::from(r#"{"kind":"tool","call_id":7x}"#), "x}"),
            (String::from(r#"{"kind":"tool","name":falsex}"#), "x}"),
            (format!("{arguments}12x}}"), "x}"),
            (format!("{arguments}truex}}"), "x}"),
            (String::from("1x"), "x"),
            (String::from("  nullx "), "x "),
            (String::from(r#"{"kind":1.}"#), "}"),
            (String::from(r#"{"kind":1.e5}"#), "e5}"),
            (String::from(r#"{"kind":12.}"#), "}"),
            (String::from(r#"{"kind":-}"#), "}"),
            (String::from(r#"{"kind":1e}"#), "}"),
            (format!("{arguments}3.}}"), "}"),
            (String::from("1."), ""),
        ] {
            let (error, offset) = refusal(&doc);
            assert_eq!((error, &doc[offset..]), (syntax, rest), "{doc}");
        }
        assert_eq!(
            refusal(r#"{"kind":1}"#),
            (ActionError::NotAString(Field::Kind), 1)
        );
        assert_eq!(
            refusal(r#"{"kind":1.5}"#).0,
            ActionError::NotAString(Field::Kind)
        );
        assert_eq!(refusal("1.5 ").0, ActionError::NotAnObject);
        assert_eq!(
            refusal(&format!("{arguments}12}}")).0,
            ActionError::ArgumentsNotObject
        );
    }

    /// `SPEC A1` (JSON as RFC 8259 has it): an argument's key must be
    /// followed by a value; `:` then `}` or `,` is a syntax error there.
    #[test]
    fn an_argument_without_a_value_is_a_syntax_error() {
        for (args, rest) in [
            (r#""x":"#, "}}"),
            (r#""x": "#, "}}"),
            (r#""x":,"y":1"#, r#","y":1}}"#),
            (r#""x":-"#, "}}"),
            (r#""x":-,"y":1"#, r#","y":1}}"#),
            (r#""a":1,"x":"#, "}}"),
        ] {
            let doc = tool(args);
            let (error, offset) = refusal(&doc);
            assert_eq!(
                (error, &doc[offset..]),
                (ActionError::Json(JsonError::Syntax), rest),
                "{doc}"
            );
        }
    }

    /// `SPEC A1` (integers of magnitude at most 1e6): an integer beyond 64
    /// bits is out of range, never read modulo 2^64 (where 2^64 would be 0).
    #[test]
    fn an_integer_beyond_64_bits_is_out_of_range() {
        for value in [
            "18446744073709551616",
            "18446744073709551621",
            "-18446744073709551617",
            "36893488147419103232",
            "1000000000000000000000",
        ] {
            let doc = tool(&format!(r#""a":1,"x":{value}"#));
            let (error, offset) = refusal(&doc);
            assert_eq!(
                (error, &doc[offset..]),
                (
                    ActionError::ArgumentOutOfRange { index: 1 },
                    &*format!(r#""x":{value}}}}}"#)
                ),
                "{doc}"
            );
        }
    }

    /// `SPEC A1` (floats read as Python's `float` reads them): a float of
    /// more than 19 digits is read exactly, not from its digits modulo
    /// 2^64 (`1.8446744073709551621` is not `5e-19`); without the
    /// `exact-floats` feature it is refused as needing the exact reader.
    #[test]
    fn a_float_of_more_than_19_digits_is_read_exactly() {
        for value in [
            "1.8446744073709551621",
            "0.18446744073709551621e1",
            "184467.44073709551621",
            "-1.8446744073709551616",
        ] {
            let doc = tool(&format!(r#""x":{value}"#));
            let got = match action(doc.as_bytes()) {
                Ok(ActionRef::Tool(call)) => Ok(call.arguments.get("x")),
                Ok(other) => panic!("{other:?}"),
                Err(invalid) => Err(invalid.error),
            };
            #[cfg(feature = "exact-floats")]
            let want = Ok(Some(ScalarRef::Float(value.parse::<f64>().unwrap())));
            #[cfg(not(feature = "exact-floats"))]
            let want = Err(ActionError::Json(JsonError::FloatPrecision));
            assert_eq!(got, want, "{doc}");
        }
    }

    /// `SPEC A1` (argument keys: at most 32 characters): a key of 33 plain
    /// letters is refused at its member, by the borrowed view as by the
    /// owned action; one of 32 is accepted.
    #[test]
    fn an_argument_key_of_33_characters_is_refused() {
        let longest = "k".repeat(MAX_ARGUMENT_KEY_LEN);
        assert!(action(tool(&format!(r#""{longest}":1"#)).as_bytes()).is_ok());
        for key in [
            format!("{longest}k"),
            format!("{longest}_9"),
            "a".repeat(64),
        ] {
            let doc = tool(&format!(r#""a":1,"{key}":2"#));
            let (error, offset) = refusal(&doc);
            let want = ActionError::InvalidArgumentKey {
                index: 1,
                reason: IdentifierError::TooLong,
            };
            assert_eq!(error, want, "{doc}");
            assert!(doc[offset..].starts_with(&format!(r#""{key}":2"#)), "{doc}");
            assert_eq!(crate::Action::<64>::parse(doc.as_bytes()), Err(want));
        }
    }

    /// The word test agrees with the table on every byte in every position.
    #[test]
    fn word_tests_agree_with_the_tables() {
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        type Class = (&'static [bool; 256], fn(u64) -> u64);
        let classes: [Class; 1] = [(&STOPS, string_ends)];
        for (table, word) in classes {
            // Every byte value alone, in every position of a word.
            for b in 0..=255u8 {
                for at in 0..8 {
                    let mut bytes = [b'a'; 8];
                    bytes[at] = b;
                    let marks = word(u64::from_le_bytes(bytes));
                    assert_eq!(
                        marks & (0x80 << (8 * at)) != 0,
                        in_set(table, b),
                        "byte {b:#x} at {at}"
                    );
                }
            }
            // Random documents: the run lengths match a byte-at-a-time scan.
            for _ in 0..20_000 {
                let len = (next() % 40) as usize;
                let bytes: std::vec::Vec<u8> = (0..len)
                    .map(|_| match next() % 4 {
                        0 => (next() % 256) as u8,
                        _ => b"abcXYZ09_-\"\\ \x1f\x7f\x80\xe9"[(next() % 17) as usize],
                    })
                    .collect();
                let naive = bytes.iter().position(|&b| in_set(table, b)).unwrap_or(len);
                assert_eq!(run_len(&bytes, table, word), naive, "{bytes:?}");
            }
        }
    }

    /// Issue 15 (the verdict's cost on a device): the values the reading of
    /// a document keeps for the device gate's argument check are the
    /// members [`ArgumentsRef::iter`] reads again, key for key and value for
    /// value, in order, for every kind of scalar and escaped keys and
    /// strings; a final answer keeps none, and a refused document leaves
    /// no more than the members read before the rule it broke.
    #[test]
    fn the_values_kept_by_the_reading_are_the_members_read_again() {
        for args in [
            "",
            r#""a":7,"b":8"#,
            r#" "a" : -12 , "b":"x\u00e9" ,"c":true,"d":false,"e":null "#,
            r#""\u0061b":1.5e3,"c":-0,"d":999999,"e":-1000000,"f":"","g":2.5,"h":0.1"#,
        ] {
            let doc = tool(args);
            let mut values = Values::new();
            let read = action_into(doc.as_bytes(), &mut values);
            let Ok(ActionRef::Tool(call)) = read else {
                panic!("{doc} is a tool call: {read:?}");
            };
            let again: std::vec::Vec<_> = call.arguments.iter().collect();
            assert_eq!(values.len(), again.len(), "{doc}");
            assert_eq!(values.len(), call.arguments.len(), "{doc}");
            for ((key, value), (key_again, value_again)) in values.iter().zip(&again) {
                assert_eq!(format!("{key}"), format!("{key_again}"), "{doc}");
                assert_eq!(key.is_escaped(), key_again.is_escaped(), "{doc}");
                assert_eq!(value, value_again, "{doc}");
            }
        }
        let (before, refused) = (tool(r#""a":1,"b":2"#), tool(r#""a":1,"a":2"#));
        let mut values = Values::new();
        assert!(action_into(before.as_bytes(), &mut values).is_ok());
        let final_ = br#"{"kind":"final","text":"done"}"#;
        assert!(matches!(
            action_into(final_, &mut values),
            Ok(ActionRef::Final { .. })
        ));
        assert!(values.is_empty(), "a final answer keeps no values");
        assert!(action_into(refused.as_bytes(), &mut values).is_err());
        assert_eq!(values.len(), 1, "the member before the repeated key");
    }
}
