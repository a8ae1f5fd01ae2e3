//! A tool result's digest for loop detection (`[loops]`): 64-bit FNV-1a of
//! the JSON value's structure, the same whether the value is walked
//! ([`digest_value`]) or read from the text without being built
//! ([`DigestSeed`], for the Claude Code reader, which never builds a
//! result's content: whole files). Two results are the same for loop
//! detection when their digests are.
//!
//! Each value feeds a tag and its data: `n` null, `t`/`f`, `u`/`i`/`d` and
//! 8 bytes, `s` with its length (8 bytes) and bytes, `[`…`]`, `{` with each
//! key as a string, then `}`; a whole value that is a non-negative integer
//! is its own digest (a content already digested, read again). Below
//! [`MAX_DIGEST_DEPTH`] levels a value is
//! skipped (without recursion) and fed as `D`: the stack stays bounded
//! whatever a recording holds.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Levels of a result digested; deeper parts are fed as one marker.
pub const MAX_DIGEST_DEPTH: usize = 64;

/// FNV-1a, 64 bits (as [`budgetgate_core::engine::loops::Outcome::of`]).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    const fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn text(&mut self, text: &str) {
        self.feed(b"s");
        self.feed(&(text.len() as u64).to_le_bytes());
        self.feed(text.as_bytes());
    }
}

/// The digest of a model's text answer (`same_answer`): 64-bit FNV-1a of
/// its text, fed a piece at a time (its text blocks in order): the same as
/// of the pieces joined, so a reader that sees an answer's blocks on
/// separate lines (Claude Code) digests it as one that sees it whole (the
/// model proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextDigest(u64);

impl Default for TextDigest {
    fn default() -> Self {
        Self(Fnv::new().0)
    }
}

impl TextDigest {
    /// The digest of `text` alone.
    pub fn of(text: &str) -> Self {
        let mut d = Self::default();
        d.feed(text);
        d
    }

    /// Adds the next piece of the text.
    pub fn feed(&mut self, text: &str) {
        let mut h = Fnv(self.0);
        h.feed(text.as_bytes());
        self.0 = h.0;
    }

    /// The digest.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A digest as [`get`](Self::get) gave it (read back from a spill).
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }
}

/// The digest of `value`. A whole value that is a non-negative integer is
/// its own digest: a reader that replaced a result's content by its
/// digest (`prune_claude_code_line`) hands it on as that number, and a
/// tool result's content is never a bare number, so reading it again gives
/// the same digest, never a digest of the digest.
pub fn digest_value(value: &Value) -> u64 {
    if let Some(digest) = value.as_u64() {
        return digest;
    }
    fn walk(h: &mut Fnv, v: &Value, depth: usize) {
        if depth >= MAX_DIGEST_DEPTH {
            h.feed(b"D");
            return;
        }
        match v {
            Value::Null => h.feed(b"n"),
            Value::Bool(true) => h.feed(b"t"),
            Value::Bool(false) => h.feed(b"f"),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    h.feed(b"u");
                    h.feed(&u.to_le_bytes());
                } else if let Some(i) = n.as_i64() {
                    h.feed(b"i");
                    h.feed(&i.to_le_bytes());
                } else {
                    h.feed(b"d");
                    h.feed(&n.as_f64().unwrap_or(0.0).to_bits().to_le_bytes());
                }
            }
            Value::String(s) => h.text(s),
            Value::Array(items) => {
                h.feed(b"[");
                for item in items {
                    walk(h, item, depth + 1);
                }
                h.feed(b"]");
            }
            Value::Object(map) => {
                h.feed(b"{");
                for (k, item) in map {
                    h.text(k);
                    walk(h, item, depth + 1);
                }
                h.feed(b"}");
            }
        }
    }
    let mut h = Fnv::new();
    walk(&mut h, value, 0);
    h.0
}

/// Reads one JSON value and gives its [`digest_value`] without building it.
pub struct DigestSeed;

impl<'de> DeserializeSeed<'de> for DigestSeed {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        let mut h = Fnv::new();
        d.deserialize_any(Walk {
            h: &mut h,
            depth: 0,
        })?;
        Ok(h.0)
    }
}

/// One value at `depth`, fed to `h`.
struct Walk<'h> {
    h: &'h mut Fnv,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth >= MAX_DIGEST_DEPTH {
            IgnoredAny::deserialize(d)?;
            self.h.feed(b"D");
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

use serde::Deserialize as _;

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.h.feed(b"n");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.h.feed(if v { b"t" } else { b"f" });
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if self.depth == 0 {
            // A whole value that is a digest already (see `digest_value`).
            self.h.0 = v;
            return Ok(());
        }
        self.h.feed(b"u");
        self.h.feed(&v.to_le_bytes());
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        // As `Value` keeps it: a non-negative integer is a u64.
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => {
                self.h.feed(b"i");
                self.h.feed(&v.to_le_bytes());
                Ok(())
            }
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.h.feed(b"d");
        self.h.feed(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.h.text(v);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.h.feed(b"[");
        while seq
            .next_element_seed(Walk {
                h: &mut *self.h,
                depth: self.depth + 1,
            })?
            .is_some()
        {}
        self.h.feed(b"]");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.h.feed(b"{");
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            self.h.text(&key);
            map.next_value_seed(Walk {
                h: &mut *self.h,
                depth: self.depth + 1,
            })?;
        }
        self.h.feed(b"}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(text: &str) -> u64 {
        let mut d = serde_json::Deserializer::from_str(text);
        DigestSeed.deserialize(&mut d).expect("JSON")
    }

    /// Walked and streamed give the same digest, for every kind of value.
    #[test]
    fn walked_and_streamed_digests_agree() {
        for text in [
            "null",
            "true",
            "false",
            "0",
            "-1",
            "18446744073709551615",
            "-9223372036854775808",
            "1.5",
            "-0.0",
            "1e300",
            r#""""#,
            r#""a\"b\u00e9\ud83d\ude00""#,
            "[]",
            "{}",
            r#"[{"type":"text","text":"x"},{"type":"image","source":{"data":"AAAA"}}]"#,
            r#"{"a":[1,2,{"b":null}],"c":"d"}"#,
        ] {
            let value: Value = serde_json::from_str(text).expect("JSON");
            assert_eq!(digest_value(&value), streamed(text), "{text}");
        }
    }

    /// Different values, different digests: text against a list holding
    /// it, key order, a changed character, a number against its text.
    #[test]
    fn different_results_have_different_digests() {
        let texts = [
            r#""x""#,
            r#"["x"]"#,
            r#"[{"type":"text","text":"x"}]"#,
            r#"[{"text":"x","type":"text"}]"#,
            r#""y""#,
            "1",
            r#""1""#,
            "1.0",
            "null",
            r#""""#,
        ];
        let mut seen: Vec<u64> = texts.iter().map(|t| streamed(t)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), texts.len());
    }

    /// A content already replaced by its digest and read again (the line
    /// pruned, then read by the one-pass reader) keeps its digest.
    #[test]
    fn a_digest_read_again_is_itself() {
        let value: Value = serde_json::from_str(r#"[{"type":"text","text":"x"}]"#).unwrap();
        let d = digest_value(&value);
        assert_eq!(streamed(&d.to_string()), d);
        assert_eq!(digest_value(&Value::from(d)), d);
    }

    /// Deep values: below MAX_DIGEST_DEPTH levels they are one marker, so
    /// the stack stays bounded; both ways agree up to serde_json's own
    /// limit, and the stream goes deeper without recursing.
    #[test]
    fn deep_values_are_bounded() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for n in [
            MAX_DIGEST_DEPTH - 1,
            MAX_DIGEST_DEPTH,
            MAX_DIGEST_DEPTH + 1,
            120,
        ] {
            let value: Value = serde_json::from_str(&nested(n)).expect("JSON");
            assert_eq!(digest_value(&value), streamed(&nested(n)), "{n}");
        }
        // Differences below the cut are not seen; above it they are.
        let deep_a = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let deep_b = format!("{}2{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(streamed(&deep_a), streamed(&deep_b));
        assert_ne!(streamed("[[1]]"), streamed("[[2]]"));
    }
}
