//! Token usage of model calls: the four counted fields, each kept on its own (`SPEC C`).

use core::fmt;

use crate::json::Event;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::json::{JsonError, Number, Reader};

/// One of the four usage fields the token budget adds up (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UsageField {
    /// `input_tokens`: uncached input.
    InputTokens,
    /// `output_tokens`: generated output.
    OutputTokens,
    /// `cache_read_input_tokens`: input read from the prompt cache.
    CacheReadInputTokens,
    /// `cache_creation_input_tokens`: input written to the prompt cache.
    CacheCreationInputTokens,
}

impl UsageField {
    /// The four fields in the order the reference adds them (`SPEC C`).
    pub const ALL: [Self; 4] = [
        Self::InputTokens,
        Self::OutputTokens,
        Self::CacheReadInputTokens,
        Self::CacheCreationInputTokens,
    ];

    /// The key as the Messages API writes it (`SPEC C`).
    pub const fn key(self) -> &'static str {
        match self {
            Self::InputTokens => "input_tokens",
            Self::OutputTokens => "output_tokens",
            Self::CacheReadInputTokens => "cache_read_input_tokens",
            Self::CacheCreationInputTokens => "cache_creation_input_tokens",
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.key() == key)
    }
}

/// Why a usage object could not be read (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum UsageError {
    /// The document is not acceptable JSON (includes a counted field given twice).
    Json(JsonError),
    /// The value is not a JSON object.
    NotAnObject,
    /// A counted field is neither null nor a non-negative integer that fits 64 bits.
    NotACount(UsageField),
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "usage is not acceptable JSON: {e}"),
            Self::NotAnObject => f.write_str("usage must be a JSON object"),
            Self::NotACount(field) => write!(
                f,
                "`{}` must be null or a non-negative integer",
                field.key()
            ),
        }
    }
}

impl core::error::Error for UsageError {}

impl From<JsonError> for UsageError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// What one model call cost, or a running total of several (`SPEC C`).
///
/// Each field is kept on its own; [`TokenUsage::total`] is what the token
/// budget counts: `input_tokens + output_tokens + cache_read_input_tokens +
/// cache_creation_input_tokens`, as the reference's `registrar` adds them. A
/// field that is absent or null counts 0. Sums saturate at `u64::MAX` rather
/// than wrap, so a bogus count can only make the budget stricter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TokenUsage {
    /// `input_tokens` (uncached input).
    pub input_tokens: u64,
    /// `output_tokens`.
    pub output_tokens: u64,
    /// `cache_read_input_tokens`.
    pub cache_read_input_tokens: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation_input_tokens: u64,
}

impl TokenUsage {
    /// All four fields 0 (`SPEC C`).
    pub const ZERO: Self = Self {
        input_tokens: 0,
        output_tokens: 0,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
    };

    /// The sum the token budget counts (`SPEC C`), saturating.
    pub const fn total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
    }

    /// The input side only (everything but `output_tokens`): what a call
    /// processed as context (`SPEC C`).
    pub const fn input_total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
    }

    /// One field's count (`SPEC C`).
    pub const fn get(&self, field: UsageField) -> u64 {
        match field {
            UsageField::InputTokens => self.input_tokens,
            UsageField::OutputTokens => self.output_tokens,
            UsageField::CacheReadInputTokens => self.cache_read_input_tokens,
            UsageField::CacheCreationInputTokens => self.cache_creation_input_tokens,
        }
    }

    fn slot(&mut self, field: UsageField) -> &mut u64 {
        match field {
            UsageField::InputTokens => &mut self.input_tokens,
            UsageField::OutputTokens => &mut self.output_tokens,
            UsageField::CacheReadInputTokens => &mut self.cache_read_input_tokens,
            UsageField::CacheCreationInputTokens => &mut self.cache_creation_input_tokens,
        }
    }

    /// Field-by-field sum, saturating (`SPEC C`).
    pub const fn saturating_add(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_add(other.cache_read_input_tokens),
            cache_creation_input_tokens: self
                .cache_creation_input_tokens
                .saturating_add(other.cache_creation_input_tokens),
        }
    }

    /// Reads a Messages API `usage` object (`SPEC C`).
    ///
    /// The four counted fields may be absent or null (they count 0); when
    /// present they must be non-negative integers. Every other key
    /// (`cache_creation`, `service_tier`, `server_tool_use`, …) is skipped
    /// whatever its value. The JSON rules are those of the strict reader
    /// (no byte-order mark, valid UTF-8, no trailing text), and a counted field
    /// given twice is a duplicate key. Uses 256 bytes of stack as scratch, so
    /// a skipped string with escapes longer than that is refused.
    pub fn parse(json: &[u8]) -> Result<Self, UsageError> {
        let mut scratch = [0u8; 256];
        let mut reader = Reader::new(json, &mut scratch)?;
        match reader.next()? {
            Event::StartObject => {}
            _ => return Err(UsageError::NotAnObject),
        }
        let mut usage = Self::ZERO;
        let mut seen = 0u8;
        loop {
            let field = match reader.next()? {
                Event::EndObject => break,
                Event::Key(key) => UsageField::from_key(key.as_str()),
                _ => return Err(UsageError::Json(JsonError::Syntax)),
            };
            let Some(field) = field else {
                skip_value(&mut reader)?;
                continue;
            };
            let bit = 1u8 << (field as u8);
            if seen & bit != 0 {
                return Err(UsageError::Json(JsonError::DuplicateKey));
            }
            seen |= bit;
            let count = match reader.next()? {
                Event::Null => 0,
                Event::Number(n) => match Number::parse(n.as_str())? {
                    Number::Int(v) => u64::try_from(v).map_err(|_| UsageError::NotACount(field))?,
                    _ => return Err(UsageError::NotACount(field)),
                },
                _ => return Err(UsageError::NotACount(field)),
            };
            *usage.slot(field) = count;
        }
        reader.finish()?;
        Ok(usage)
    }
}

/// Skips one value, however deeply nested (the parser bounds the depth).
fn skip_value(reader: &mut Reader<'_, '_>) -> Result<(), JsonError> {
    let mut depth = 0usize;
    loop {
        match reader.next()? {
            Event::StartObject | Event::StartArray => depth += 1,
            Event::EndObject | Event::EndArray => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 {
            return Ok(());
        }
    }
}

impl Serialize for TokenUsage {
    /// The four fields plus `total`, in the API's spelling.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(5))?;
        for field in UsageField::ALL {
            map.serialize_entry(field.key(), &self.get(field))?;
        }
        map.serialize_entry("total", &self.total())?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_null_cache_fields_count_zero() {
        let u = TokenUsage::parse(br#"{"input_tokens":10,"output_tokens":5}"#).unwrap();
        assert_eq!(u.total(), 15);
        assert_eq!(u.cache_read_input_tokens, 0);
        let u = TokenUsage::parse(
            br#"{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":null,"cache_creation_input_tokens":null}"#,
        )
        .unwrap();
        assert_eq!(u.total(), 15);
        assert_eq!(TokenUsage::parse(b"{}").unwrap(), TokenUsage::ZERO);
    }

    #[test]
    fn cache_fields_are_counted_and_kept_apart() {
        let u = TokenUsage::parse(
            br#"{"input_tokens":3,"cache_creation_input_tokens":18050,"cache_read_input_tokens":7,
                "cache_creation":{"ephemeral_5m_input_tokens":18050,"ephemeral_1h_input_tokens":0},
                "output_tokens":1,"service_tier":"standard","server_tool_use":[{"a":[1,{"b":null}]}]}"#,
        )
        .unwrap();
        assert_eq!(u.input_tokens, 3);
        assert_eq!(u.output_tokens, 1);
        assert_eq!(u.cache_read_input_tokens, 7);
        assert_eq!(u.cache_creation_input_tokens, 18050);
        assert_eq!(u.total(), 18061);
        assert_eq!(u.input_total(), 18060);
    }

    #[test]
    fn counts_must_be_non_negative_integers() {
        let bad = |s: &str| TokenUsage::parse(s.as_bytes());
        let input = Err(UsageError::NotACount(UsageField::InputTokens));
        assert_eq!(bad(r#"{"input_tokens":-1}"#), input);
        assert_eq!(bad(r#"{"input_tokens":1.0}"#), input);
        assert_eq!(bad(r#"{"input_tokens":"1"}"#), input);
        assert_eq!(bad(r#"{"input_tokens":true}"#), input);
        assert_eq!(bad(r#"{"input_tokens":99999999999999999999}"#), input);
        assert_eq!(
            bad(r#"{"output_tokens":1,"output_tokens":2}"#),
            Err(UsageError::Json(JsonError::DuplicateKey))
        );
        assert_eq!(bad("[]"), Err(UsageError::NotAnObject));
        assert_eq!(
            bad(r#"{"input_tokens":1} x"#),
            Err(UsageError::Json(JsonError::TrailingData))
        );
    }

    /// `SPEC C`: each counted field is read back by its name, apart from
    /// the others. Found by cargo-mutants (the whole-core run, shard 3/4
    /// again): only the host used `get`.
    #[test]
    fn each_field_is_read_back_by_its_name() {
        let u = TokenUsage::parse(
            br#"{"input_tokens":3,"output_tokens":5,"cache_read_input_tokens":7,"cache_creation_input_tokens":11}"#,
        )
        .unwrap();
        let counts = UsageField::ALL.map(|f| u.get(f));
        assert_eq!(counts, [3, 5, 7, 11]);
    }

    /// A usage object that is refused says why, naming the field.
    #[test]
    fn usage_errors_say_why_naming_the_field() {
        let text = |s: &str| TokenUsage::parse(s.as_bytes()).unwrap_err().to_string();
        assert_eq!(
            text(r#"{"output_tokens":-1}"#),
            "`output_tokens` must be null or a non-negative integer"
        );
        assert_eq!(text("[]"), "usage must be a JSON object");
        assert!(text(r#"{"input_tokens":1} x"#).starts_with("usage is not acceptable JSON: "));
    }

    #[test]
    fn sums_saturate() {
        let big = TokenUsage {
            input_tokens: u64::MAX,
            output_tokens: 1,
            ..TokenUsage::ZERO
        };
        assert_eq!(big.total(), u64::MAX);
        assert_eq!(big.saturating_add(big).input_tokens, u64::MAX);
    }
}
