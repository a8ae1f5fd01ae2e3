//! A fixed-size fingerprint of a tool call's arguments in canonical form (`SPEC C`, repetitions).
//!
//! The reference compares `(name, json.dumps(args, sort_keys=True))`. Storing
//! that text would need up to tens of kilobytes per call, so the gate keeps a
//! 128-bit fingerprint of the same canonical form instead:
//!
//! * **Key order does not matter.** An object's hash is the wrapping sum of
//!   the hashes of its entries (each entry hashes its key with its value's
//!   hash), and a sum does not depend on order, so no sorting (and no buffer)
//!   is needed.
//! * **Types stay apart as `json.dumps` keeps them apart.** Integers hash
//!   their decimal digits (`-0` is `0`, as Python reads it), floats hash their
//!   IEEE-754 bits (so `1.0`, `1.00` and `1e0` are the same float, written
//!   `1.0` by Python, while `-0.0` stays apart from `0.0`), strings their
//!   decoded UTF-8; each value carries a type tag, so `1`, `1.0`, `"1"` and
//!   `true` all differ. Arrays keep their order (each element is hashed with
//!   its index).
//! * **The hash is SipHash-1-3 with 128-bit output** (crate `siphasher`), with
//!   fixed keys so the fingerprint is the same on the desktop and on the device.
//!
//! **Collisions.** Equal canonical forms always give equal fingerprints (the
//! fingerprint is a function of the canonical form), so the repetition count
//! of a call is never lower than the number of truly identical calls: a real
//! third repeat is always refused. A collision can only merge two *different*
//! calls under one count, which refuses a call early as a repeat (stricter,
//! never looser). Accidental collisions are negligible at 128 bits (about
//! `n²/2¹²⁹` for `n` distinct calls); a model crafting one gains only a
//! refusal. The table of fingerprints is bounded too: when it is full a new
//! distinct call is refused (`repeat-capacity`), never forgotten or evicted,
//! because eviction would let a repeat through.

use core::fmt;
use core::hash::Hasher as _;

use crate::json::Event;
use heapless::Vec;
use siphasher::sip128::{Hasher128 as _, SipHasher13};

use crate::action::{Arguments, Scalar};
use crate::json::{JsonError, Number, Reader};
use crate::limits::{MAX_FINGERPRINT_DEPTH, MAX_FINGERPRINT_KEYS};

/// Fixed SipHash keys: "budgetgate-turn1" split into two little-endian words.
const KEY0: u64 = u64::from_le_bytes(*b"budgetga");
const KEY1: u64 = u64::from_le_bytes(*b"te-turn1");

/// Type tags, so values of different JSON types never share a pre-image.
mod tag {
    pub(super) const NULL: u8 = b'n';
    pub(super) const FALSE: u8 = b'f';
    pub(super) const TRUE: u8 = b't';
    pub(super) const INT: u8 = b'i';
    pub(super) const FLOAT: u8 = b'd';
    pub(super) const STRING: u8 = b's';
    pub(super) const OBJECT: u8 = b'o';
    pub(super) const ENTRY: u8 = b'e';
    pub(super) const ARRAY: u8 = b'a';
    pub(super) const ELEMENT: u8 = b'x';
    pub(super) const CALL: u8 = b'c';
    pub(super) const SEEN_KEY: u8 = b'k';
}

fn hash_parts(tag: u8, parts: &[&[u8]]) -> u128 {
    let mut h = SipHasher13::new_with_keys(KEY0, KEY1);
    h.write(&[tag]);
    for part in parts {
        // Length-prefixed, so the boundaries between parts are part of the input.
        h.write(&(part.len() as u64).to_le_bytes());
        h.write(part);
    }
    h.finish128().as_u128()
}

/// The 128-bit fingerprint of a value in canonical form (`SPEC C`).
///
/// Two values whose `json.dumps(value, sort_keys=True)` texts are equal have
/// equal fingerprints; see the module docs for what a collision can and
/// cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArgsFingerprint(u128);

impl ArgsFingerprint {
    /// The fingerprint as a number (for logs and tests) (`SPEC C`).
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The fingerprint [`as_u128`](Self::as_u128) gave, back from a store
    /// that keeps it as a number (the host's replay keeps a long recording's
    /// calls in a temporary file) (`SPEC C`).
    pub const fn from_u128(value: u128) -> Self {
        Self(value)
    }

    /// Fingerprints validated scalar arguments (`SPEC A1` actions), equal to
    /// [`ArgsFingerprint::of_json`] of the same object in any key order (`SPEC C`).
    pub fn of_arguments<const S: usize>(arguments: &Arguments<S>) -> Self {
        let mut sum = 0u128;
        let mut count = 0u64;
        for (key, value) in arguments.iter() {
            let value = match value {
                Scalar::Null => scalar_null(),
                Scalar::Bool(b) => scalar_bool(*b),
                Scalar::Int(i) => scalar_i64(*i),
                Scalar::Float(x) => scalar_f64(*x),
                Scalar::Str(s) => scalar_str(s),
            };
            sum = sum.wrapping_add(entry(key.as_str(), value));
            count += 1;
        }
        Self(close_object(sum, count))
    }

    /// Fingerprints a raw JSON arguments document (any JSON value; a
    /// `tool_use` block's `input` is an object).
    ///
    /// `scratch` receives strings that contain escapes while they are
    /// hashed, so it must be at least as long as the longest such string
    /// (`json.len()` always suffices). Refuses what Python would read
    /// differently from its text: duplicate keys (Python keeps the last one,
    /// which would hide a repeat), and anything the strict reader refuses.
    /// Nesting deeper than [`MAX_FINGERPRINT_DEPTH`] and more than
    /// [`MAX_FINGERPRINT_KEYS`] keys in the whole document are refused as
    /// capacity limits (`SPEC C`).
    pub fn of_json(json: &[u8], scratch: &mut [u8]) -> Result<Self, FingerprintError> {
        let mut reader = Reader::new(json, scratch)?;
        let mut builder: FingerprintBuilder = FingerprintBuilder::new();
        // Keys seen so far, each hashed with the serial number of its object,
        // to find duplicate keys without keeping the keys themselves.
        let mut keys: Vec<u128, MAX_FINGERPRINT_KEYS> = Vec::new();
        let mut objects: Vec<u64, MAX_FINGERPRINT_DEPTH> = Vec::new();
        let mut serial = 0u64;
        loop {
            match reader.next()? {
                Event::StartObject => {
                    serial += 1;
                    objects
                        .push(serial)
                        .map_err(|_| FingerprintError::TooDeep)?;
                    builder.begin_object()?;
                }
                Event::EndObject => {
                    objects.pop();
                    builder.end_object()?;
                }
                Event::StartArray => builder.begin_array()?,
                Event::EndArray => builder.end_array()?,
                Event::Key(key) => {
                    let owner = objects.last().copied().unwrap_or(0);
                    let id = hash_parts(tag::SEEN_KEY, &[&owner.to_le_bytes(), key.as_bytes()]);
                    if keys.contains(&id) {
                        return Err(FingerprintError::DuplicateKey);
                    }
                    keys.push(id).map_err(|_| FingerprintError::TooManyKeys)?;
                    builder.key(key.as_str())?;
                }
                Event::String(s) => builder.str(s.as_str())?,
                Event::Number(n) => match Number::parse(n.as_str())? {
                    // An integer hashes its digits, whatever its size, as
                    // Python keeps integers exact.
                    Number::Int(_) | Number::HugeInt => builder.int_literal(n.as_str())?,
                    Number::Float(x) => builder.f64(x)?,
                },
                Event::Bool(b) => builder.bool(b)?,
                Event::Null => builder.null()?,
            }
            if builder.is_complete() {
                break;
            }
        }
        reader.finish()?;
        builder.finish()
    }

    /// The fingerprint of a whole call: the tool's name with its arguments.
    /// This is the key the repetition rule counts under (`SPEC C`).
    pub fn with_name(self, name: &str) -> CallFingerprint {
        CallFingerprint(hash_parts(
            tag::CALL,
            &[name.as_bytes(), &self.0.to_le_bytes()],
        ))
    }
}

/// The fingerprint of a tool name together with its arguments (`SPEC C`):
/// the key of the repetition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CallFingerprint(u128);

impl CallFingerprint {
    /// The fingerprint as a number (`SPEC C`).
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The fingerprint [`as_u128`](Self::as_u128) gave, back from a record.
    pub(crate) const fn from_u128(value: u128) -> Self {
        Self(value)
    }
}

/// Why arguments could not be fingerprinted (`SPEC C`); the gate refuses such
/// a call as `invalid-arguments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FingerprintError {
    /// The document is not acceptable JSON.
    Json(JsonError),
    /// An object holds the same key twice.
    DuplicateKey,
    /// Objects and arrays nest deeper than [`MAX_FINGERPRINT_DEPTH`].
    TooDeep,
    /// The document has more than [`MAX_FINGERPRINT_KEYS`] keys in all.
    TooManyKeys,
    /// The builder was driven out of order: a key outside an object, a value
    /// without its key, a close that does not match, a second top-level
    /// value, or no value at all.
    Unbalanced,
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "arguments are not acceptable JSON: {e}"),
            Self::DuplicateKey => f.write_str("arguments hold the same key twice"),
            Self::TooDeep => write!(
                f,
                "arguments nest deeper than {MAX_FINGERPRINT_DEPTH} levels"
            ),
            Self::TooManyKeys => write!(f, "arguments have more than {MAX_FINGERPRINT_KEYS} keys"),
            Self::Unbalanced => f.write_str("arguments were described out of order"),
        }
    }
}

impl core::error::Error for FingerprintError {}

impl From<JsonError> for FingerprintError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

fn scalar_null() -> u128 {
    hash_parts(tag::NULL, &[])
}

fn scalar_bool(b: bool) -> u128 {
    hash_parts(if b { tag::TRUE } else { tag::FALSE }, &[])
}

fn scalar_int_digits(digits: &[u8]) -> u128 {
    // Python reads `-0` as the integer 0 and writes it `0`.
    let digits = if digits == b"-0" {
        b"0".as_slice()
    } else {
        digits
    };
    hash_parts(tag::INT, &[digits])
}

fn scalar_i64(v: i64) -> u128 {
    scalar_int_digits(itoa::Buffer::new().format(v).as_bytes())
}

fn scalar_f64(x: f64) -> u128 {
    hash_parts(tag::FLOAT, &[&x.to_bits().to_le_bytes()])
}

fn scalar_str(s: &str) -> u128 {
    hash_parts(tag::STRING, &[s.as_bytes()])
}

fn entry(key: &str, value: u128) -> u128 {
    entry_hashed(scalar_str(key), value)
}

/// An object entry: its key's hash (as a string value) with its value's hash.
fn entry_hashed(key: u128, value: u128) -> u128 {
    hash_parts(tag::ENTRY, &[&key.to_le_bytes(), &value.to_le_bytes()])
}

fn close_object(sum: u128, count: u64) -> u128 {
    hash_parts(tag::OBJECT, &[&count.to_le_bytes(), &sum.to_le_bytes()])
}

fn element(index: u64, value: u128) -> u128 {
    hash_parts(tag::ELEMENT, &[&index.to_le_bytes(), &value.to_le_bytes()])
}

fn close_array(sum: u128, count: u64) -> u128 {
    hash_parts(tag::ARRAY, &[&count.to_le_bytes(), &sum.to_le_bytes()])
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    object: bool,
    sum: u128,
    count: u64,
    /// The key whose value comes next (objects only).
    key: Option<u128>,
}

/// Builds an [`ArgsFingerprint`] from a value described event by event
/// (`SPEC C`), for callers that hold arguments in their own form (a host's
/// JSON tree, a device's fixed record). The result equals
/// [`ArgsFingerprint::of_json`] of the same value.
///
/// `DEPTH` bounds the nesting (default [`MAX_FINGERPRINT_DEPTH`]). The builder
/// does not look for duplicate keys: a caller whose form may hold them must
/// keep the value Python would keep (the last) before describing it.
#[derive(Debug, Clone)]
pub struct FingerprintBuilder<const DEPTH: usize = MAX_FINGERPRINT_DEPTH> {
    frames: Vec<Frame, DEPTH>,
    done: Option<u128>,
}

impl<const DEPTH: usize> Default for FingerprintBuilder<DEPTH> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const DEPTH: usize> FingerprintBuilder<DEPTH> {
    /// Nothing described yet (`SPEC C`).
    pub const fn new() -> Self {
        Self {
            frames: Vec::new(),
            done: None,
        }
    }

    /// Whether one complete top-level value has been described (`SPEC C`).
    pub fn is_complete(&self) -> bool {
        self.done.is_some()
    }

    fn value(&mut self, hash: u128) -> Result<(), FingerprintError> {
        if self.done.is_some() {
            return Err(FingerprintError::Unbalanced);
        }
        match self.frames.last_mut() {
            None => self.done = Some(hash),
            Some(frame) if frame.object => {
                let key = frame.key.take().ok_or(FingerprintError::Unbalanced)?;
                frame.sum = frame.sum.wrapping_add(entry_hashed(key, hash));
                frame.count += 1;
            }
            Some(frame) => {
                frame.sum = frame.sum.wrapping_add(element(frame.count, hash));
                frame.count += 1;
            }
        }
        Ok(())
    }

    /// `null` (`SPEC C`).
    pub fn null(&mut self) -> Result<(), FingerprintError> {
        self.value(scalar_null())
    }

    /// `true` or `false` (`SPEC C`).
    pub fn bool(&mut self, value: bool) -> Result<(), FingerprintError> {
        self.value(scalar_bool(value))
    }

    /// An integer (`SPEC C`).
    pub fn i64(&mut self, value: i64) -> Result<(), FingerprintError> {
        self.value(scalar_i64(value))
    }

    /// An integer beyond `i64` (`SPEC C`).
    pub fn u64(&mut self, value: u64) -> Result<(), FingerprintError> {
        match i64::try_from(value) {
            Ok(v) => self.i64(v),
            Err(_) => self.value(scalar_int_digits(
                itoa::Buffer::new().format(value).as_bytes(),
            )),
        }
    }

    /// An integer given as a JSON integer literal (any size; `-0` is `0`).
    /// The caller vouches that `digits` is such a literal (`SPEC C`).
    pub fn int_literal(&mut self, digits: &str) -> Result<(), FingerprintError> {
        self.value(scalar_int_digits(digits.as_bytes()))
    }

    /// A float (written with a fraction or exponent in JSON) (`SPEC C`).
    pub fn f64(&mut self, value: f64) -> Result<(), FingerprintError> {
        self.value(scalar_f64(value))
    }

    /// A string (decoded text, not its JSON spelling) (`SPEC C`).
    pub fn str(&mut self, value: &str) -> Result<(), FingerprintError> {
        self.value(scalar_str(value))
    }

    fn open(&mut self, object: bool) -> Result<(), FingerprintError> {
        if self.done.is_some() {
            return Err(FingerprintError::Unbalanced);
        }
        if let Some(parent) = self.frames.last() {
            if parent.object && parent.key.is_none() {
                return Err(FingerprintError::Unbalanced);
            }
        }
        self.frames
            .push(Frame {
                object,
                sum: 0,
                count: 0,
                key: None,
            })
            .map_err(|_| FingerprintError::TooDeep)
    }

    fn close(&mut self, object: bool) -> Result<(), FingerprintError> {
        match self.frames.last() {
            Some(frame) if frame.object == object && frame.key.is_none() => {}
            _ => return Err(FingerprintError::Unbalanced),
        }
        let frame = self.frames.pop().ok_or(FingerprintError::Unbalanced)?;
        let hash = if object {
            close_object(frame.sum, frame.count)
        } else {
            close_array(frame.sum, frame.count)
        };
        self.value(hash)
    }

    /// Opens an object; then alternate [`key`](Self::key) and a value (`SPEC C`).
    pub fn begin_object(&mut self) -> Result<(), FingerprintError> {
        self.open(true)
    }

    /// The key of the next entry of the innermost open object (`SPEC C`).
    pub fn key(&mut self, key: &str) -> Result<(), FingerprintError> {
        match self.frames.last_mut() {
            Some(frame) if frame.object && frame.key.is_none() => {
                frame.key = Some(scalar_str(key));
                Ok(())
            }
            _ => Err(FingerprintError::Unbalanced),
        }
    }

    /// Closes the innermost object (`SPEC C`).
    pub fn end_object(&mut self) -> Result<(), FingerprintError> {
        self.close(true)
    }

    /// Opens an array (`SPEC C`).
    pub fn begin_array(&mut self) -> Result<(), FingerprintError> {
        self.open(false)
    }

    /// Closes the innermost array (`SPEC C`).
    pub fn end_array(&mut self) -> Result<(), FingerprintError> {
        self.close(false)
    }

    /// The fingerprint of the one complete value described (`SPEC C`).
    pub fn finish(self) -> Result<ArgsFingerprint, FingerprintError> {
        self.done
            .map(ArgsFingerprint)
            .ok_or(FingerprintError::Unbalanced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Action, ToolCall};

    /// The fingerprints of `null`, `true`, `false`, `-7`, `2.5`, `"x"`,
    /// `{"a":[1,null],"b":{}}` and `[]`, as every build computes them.
    const GOLDEN: [u128; 8] = [
        0x12cbbec80d6e4e46b3244f69039796ae,
        0x8f5521ac1939ae82915ae3bda62f18ef,
        0x3a0598bcadca5e459516b74e32cc48b8,
        0x9f6d4f9288762b9d151d7602deefdca8,
        0xa99a4c6e87cc835e95e1c4b640456ea5,
        0x05e5c550d2cccf0914630451f302023d,
        0x2a9e2a1afed5e4ae77694efc268d9532,
        0x07e043a4ee5599739d42468b2080ab4f,
    ];
    /// `{"q":"x"}` called as `search`.
    const GOLDEN_CALL: u128 = 0xe94c23a3189406bab5e100189a0a3e3e;

    fn fp(json: &str) -> ArgsFingerprint {
        let mut scratch = [0u8; 256];
        ArgsFingerprint::of_json(json.as_bytes(), &mut scratch).unwrap()
    }

    #[test]
    fn key_order_does_not_matter() {
        assert_eq!(fp(r#"{"a":1,"b":"x"}"#), fp(r#"{ "b" : "x", "a" : 1 }"#));
        assert_eq!(
            fp(r#"{"o":{"p":[1,2],"q":null},"r":true}"#),
            fp(r#"{"r":true,"o":{"q":null,"p":[1,2]}}"#)
        );
    }

    #[test]
    fn json_dumps_distinctions_are_kept() {
        // 1 and 1.0 differ, as json.dumps writes them differently.
        assert_ne!(fp(r#"{"a":1}"#), fp(r#"{"a":1.0}"#));
        assert_ne!(fp(r#"{"a":1}"#), fp(r#"{"a":"1"}"#));
        assert_ne!(fp(r#"{"a":1}"#), fp(r#"{"a":true}"#));
        assert_ne!(fp(r#"{"a":0}"#), fp(r#"{"a":false}"#));
        assert_ne!(fp(r#"{"a":null}"#), fp(r#"{}"#));
        assert_ne!(fp(r#"{"a":0.0}"#), fp(r#"{"a":-0.0}"#));
        assert_ne!(fp("[1,2]"), fp("[2,1]"));
        assert_ne!(fp(r#"{"a":[]}"#), fp(r#"{"a":{}}"#));
        assert_ne!(fp(r#"{"ab":"c"}"#), fp(r#"{"a":"bc"}"#));
        assert_ne!(fp(r#"[[1],2]"#), fp(r#"[1,[2]]"#));
    }

    #[test]
    fn same_python_value_same_fingerprint() {
        // Python reads these pairs as equal values and dumps them identically.
        assert_eq!(fp(r#"{"a":1.0}"#), fp(r#"{"a":1.00}"#));
        assert_eq!(fp(r#"{"a":100.0}"#), fp(r#"{"a":1e2}"#));
        assert_eq!(fp(r#"{"a":0}"#), fp(r#"{"a":-0}"#));
        assert_eq!(fp(r#"{"a":"é"}"#), fp(r#"{"a":"\u00e9"}"#));
        assert_eq!(
            fp(r#"{"a":123456789012345678901234567890}"#),
            fp(r#"{"a":123456789012345678901234567890}"#)
        );
        assert_ne!(
            fp(r#"{"a":123456789012345678901234567890}"#),
            fp(r#"{"a":123456789012345678901234567891}"#)
        );
    }

    #[test]
    fn validated_arguments_agree_with_raw_json() {
        let Ok(Action::Tool(ToolCall { arguments, .. })) = Action::<64>::parse(
            br#"{"kind":"tool","call_id":"c","name":"n","arguments":{"b":-7,"a":2.5,"s":"x","t":true,"z":null}}"#,
        ) else {
            panic!("valid action")
        };
        assert_eq!(
            ArgsFingerprint::of_arguments(&arguments),
            fp(r#"{"a":2.5,"b":-7,"s":"x","t":true,"z":null}"#)
        );
    }

    #[test]
    fn refusals() {
        let mut scratch = [0u8; 64];
        let mut of = |s: &str| ArgsFingerprint::of_json(s.as_bytes(), &mut scratch);
        assert_eq!(of(r#"{"a":1,"a":2}"#), Err(FingerprintError::DuplicateKey));
        // The same key in two different objects is fine.
        assert!(of(r#"{"a":{"a":1},"b":{"a":1}}"#).is_ok());
        let deep = format!("{}{}", "[".repeat(17), "]".repeat(17));
        assert_eq!(of(&deep), Err(FingerprintError::TooDeep));
        let ok_deep = format!("{}{}", "[".repeat(16), "]".repeat(16));
        assert!(of(&ok_deep).is_ok());
        let many: std::vec::Vec<_> = (0..65).map(|i| format!("\"k{i}\":0")).collect();
        assert_eq!(
            of(&format!("{{{}}}", many.join(","))),
            Err(FingerprintError::TooManyKeys)
        );
        assert_eq!(
            of(r#"{"a":1} 2"#),
            Err(FingerprintError::Json(JsonError::TrailingData))
        );
    }

    #[test]
    fn builder_must_be_driven_in_order() {
        let mut b: FingerprintBuilder = FingerprintBuilder::new();
        assert_eq!(b.key("a"), Err(FingerprintError::Unbalanced));
        b.begin_object().unwrap();
        assert_eq!(b.null(), Err(FingerprintError::Unbalanced));
        assert_eq!(b.end_array(), Err(FingerprintError::Unbalanced));
        b.key("a").unwrap();
        assert_eq!(b.end_object(), Err(FingerprintError::Unbalanced));
        b.u64(u64::MAX).unwrap();
        b.end_object().unwrap();
        assert_eq!(b.null(), Err(FingerprintError::Unbalanced));
        assert_eq!(b.finish().unwrap(), fp(r#"{"a":18446744073709551615}"#));
        let empty: FingerprintBuilder = FingerprintBuilder::new();
        assert_eq!(empty.finish(), Err(FingerprintError::Unbalanced));
        // A signed integer described to the builder is the integer's text.
        let mut b: FingerprintBuilder = FingerprintBuilder::new();
        b.begin_array().unwrap();
        b.i64(-7).unwrap();
        b.i64(i64::MIN).unwrap();
        b.end_array().unwrap();
        assert_eq!(b.finish().unwrap(), fp("[-7,-9223372036854775808]"));
    }

    /// `SPEC C`: the builder takes a key only where an open object awaits
    /// one: not inside an array, not a second time for the same entry. A
    /// key refused changes nothing, so the value described next is counted
    /// as before, under the key given first.
    #[test]
    fn a_key_is_taken_only_where_an_object_awaits_one() {
        let mut b: FingerprintBuilder = FingerprintBuilder::new();
        b.begin_array().unwrap();
        assert_eq!(b.key("a"), Err(FingerprintError::Unbalanced));
        b.null().unwrap();
        b.begin_object().unwrap();
        b.key("a").unwrap();
        assert_eq!(b.key("b"), Err(FingerprintError::Unbalanced));
        b.i64(1).unwrap();
        b.end_object().unwrap();
        b.end_array().unwrap();
        assert_eq!(b.finish().unwrap(), fp(r#"[null,{"a":1}]"#));
    }

    /// `SPEC C`, durable state: a fingerprint is the same number in every
    /// build, since stored ledgers key repetition counts by it (the host's
    /// `repeats` table) and a replay's spill file keeps it: a changed hash
    /// would give a repeated call a fresh count. Pinned here for each kind
    /// of value, and for a call's key.
    #[test]
    fn fingerprints_are_the_same_numbers_in_every_build() {
        let cases: [(&str, u128); 8] = [
            ("null", GOLDEN[0]),
            ("true", GOLDEN[1]),
            ("false", GOLDEN[2]),
            ("-7", GOLDEN[3]),
            ("2.5", GOLDEN[4]),
            (r#""x""#, GOLDEN[5]),
            (r#"{"a":[1,null],"b":{}}"#, GOLDEN[6]),
            ("[]", GOLDEN[7]),
        ];
        for (json, want) in cases {
            assert_eq!(
                fp(json).as_u128(),
                want,
                "{json}: {:#x}",
                fp(json).as_u128()
            );
            assert_eq!(ArgsFingerprint::from_u128(want), fp(json));
        }
        let call = fp(r#"{"q":"x"}"#).with_name("search");
        assert_eq!(call.as_u128(), GOLDEN_CALL, "{:#x}", call.as_u128());
    }

    /// `SPEC C`: why arguments could not be fingerprinted, in words.
    #[test]
    fn fingerprint_errors_say_why() {
        let cases = [
            (FingerprintError::DuplicateKey, "the same key twice"),
            (FingerprintError::TooDeep, "nest deeper than"),
            (FingerprintError::TooManyKeys, "more than"),
            (FingerprintError::Unbalanced, "out of order"),
            (
                FingerprintError::Json(JsonError::TrailingData),
                "not acceptable JSON",
            ),
        ];
        for (e, words) in cases {
            let text = format!("{e}");
            assert!(text.contains(words), "{e:?}: {text}");
        }
    }

    #[test]
    fn name_is_part_of_the_call_key() {
        let a = fp(r#"{"q":"x"}"#);
        assert_ne!(a.with_name("search"), a.with_name("fetch"));
        assert_eq!(
            a.with_name("search"),
            fp(r#"{"q":"x"}"#).with_name("search")
        );
    }
}
