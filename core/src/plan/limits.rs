//! The five limits of the bounded workflow (`SPEC B2`): their keys and
//! ranges, and reading them from JSON.

use core::fmt;

use super::read::Compact;
use crate::json::{Event, JsonError, Number, Reader};
use crate::limits::{MAX_COST_LIMIT, MAX_SHAPE_LIMIT};

/// A limit of the bounded workflow, in the order they are checked (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LimitKey {
    /// `steps` (0..=32)
    Steps,
    /// `tokens` (0..=320000)
    Tokens,
    /// `output` (0..=320000)
    Output,
    /// `depth` (0..=32)
    Depth,
    /// `fanout` (0..=32)
    Fanout,
}

impl LimitKey {
    /// Every limit, in checking order.
    pub const ALL: [Self; 5] = [
        Self::Steps,
        Self::Tokens,
        Self::Output,
        Self::Depth,
        Self::Fanout,
    ];

    /// The key as written in JSON and in `reason`.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Steps => "steps",
            Self::Tokens => "tokens",
            Self::Output => "output",
            Self::Depth => "depth",
            Self::Fanout => "fanout",
        }
    }

    /// Largest value this limit may be set to.
    pub const fn max(self) -> u32 {
        match self {
            Self::Tokens | Self::Output => MAX_COST_LIMIT,
            Self::Steps | Self::Depth | Self::Fanout => MAX_SHAPE_LIMIT,
        }
    }
}

/// Why workflow limits are invalid (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LimitsError {
    /// The document is not acceptable JSON (includes duplicate keys).
    Json(JsonError),
    /// The limits are not a JSON object.
    NotAnObject,
    /// A key other than the five limits.
    UnexpectedKey,
    /// A limit is missing.
    MissingKey(LimitKey),
    /// A limit is not an integer within its range.
    OutOfRange(LimitKey),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not acceptable JSON: {e}"),
            Self::NotAnObject => f.write_str("limits must be a JSON object"),
            Self::UnexpectedKey => f.write_str(
                "unexpected key; limits are exactly steps, tokens, output, depth, fanout",
            ),
            Self::MissingKey(k) => write!(f, "missing limit `{}`", k.key()),
            Self::OutOfRange(k) => {
                write!(f, "limit `{}` must be an integer 0..={}", k.key(), k.max())
            }
        }
    }
}

impl core::error::Error for LimitsError {}

impl From<JsonError> for LimitsError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// The five workflow limits (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    values: [u32; 5],
}

impl Limits {
    /// Checks each limit against its range (`steps`, `depth`, `fanout` 0..=32;
    /// `tokens`, `output` 0..=320000).
    pub fn new(
        steps: u32,
        tokens: u32,
        output: u32,
        depth: u32,
        fanout: u32,
    ) -> Result<Self, LimitsError> {
        let values = [steps, tokens, output, depth, fanout];
        for (key, value) in LimitKey::ALL.into_iter().zip(values) {
            if value > key.max() {
                return Err(LimitsError::OutOfRange(key));
            }
        }
        Ok(Self { values })
    }

    /// The value of one limit.
    pub fn get(&self, key: LimitKey) -> u32 {
        self.values.get(key as usize).copied().unwrap_or(0)
    }

    /// Reads and validates limits from a JSON object with exactly the five keys.
    pub fn parse(json: &[u8]) -> Result<Self, LimitsError> {
        // Every spelling without escapes in one pass; an escape, and every
        // error, is the general reader's (as for plans).
        let compact = core::str::from_utf8(json).ok().and_then(|text| {
            Compact {
                bytes: json,
                text,
                at: 0,
            }
            .limits()
        });
        if let Some(limits) = compact {
            return Ok(limits);
        }
        Self::parse_general(json)
    }

    pub(super) fn parse_general(json: &[u8]) -> Result<Self, LimitsError> {
        // Holds the five keys even when every one is escaped.
        let mut scratch = [0u8; 64];
        let mut reader = Reader::new(json, &mut scratch)?;
        match reader.next()? {
            Event::StartObject => {}
            _ => return Err(LimitsError::NotAnObject),
        }
        let mut values: [Option<u32>; 5] = [None; 5];
        loop {
            let key = match reader.next().map_err(|e| match e {
                JsonError::StringTooLong => LimitsError::UnexpectedKey,
                other => LimitsError::Json(other),
            })? {
                Event::EndObject => break,
                Event::Key(k) => LimitKey::ALL
                    .into_iter()
                    .find(|l| l.key() == k.as_str())
                    .ok_or(LimitsError::UnexpectedKey)?,
                _ => return Err(LimitsError::Json(JsonError::Syntax)),
            };
            let slot = values
                .get_mut(key as usize)
                .ok_or(LimitsError::UnexpectedKey)?;
            if slot.is_some() {
                return Err(LimitsError::Json(JsonError::DuplicateKey));
            }
            let event = reader.next().map_err(|e| match e {
                JsonError::StringTooLong => LimitsError::OutOfRange(key),
                other => LimitsError::Json(other),
            })?;
            *slot = Some(match &event {
                Event::Number(n) => Number::parse(n.as_str())?
                    .as_bounded_int(key.max())
                    .ok_or(LimitsError::OutOfRange(key))?,
                _ => return Err(LimitsError::OutOfRange(key)),
            });
        }
        reader.finish()?;
        let mut out = [0u32; 5];
        for ((key, value), slot) in LimitKey::ALL.into_iter().zip(values).zip(out.iter_mut()) {
            *slot = value.ok_or(LimitsError::MissingKey(key))?;
        }
        let [steps, tokens, output, depth, fanout] = out;
        Self::new(steps, tokens, output, depth, fanout)
    }
}
