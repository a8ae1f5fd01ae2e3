//! Validated identifiers: call ids, tool names, argument keys and plan ids.

use core::fmt;

use crate::limits::{MAX_ARGUMENT_KEY_LEN, MAX_IDENTIFIER_LEN, MAX_PLAN_ID_LEN};

/// Why a text is not a valid identifier of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum IdentifierError {
    /// The text is empty.
    Empty,
    /// The text is longer than the kind allows.
    TooLong,
    /// The first character is not allowed first (for most kinds: not an
    /// ASCII letter of the allowed case).
    BadFirst,
    /// A later character is outside the allowed ASCII set.
    BadCharacter,
}

impl fmt::Display for IdentifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "is empty",
            Self::TooLong => "is too long",
            Self::BadFirst => "starts with a character not allowed first",
            Self::BadCharacter => "holds a character outside the allowed set",
        })
    }
}

impl core::error::Error for IdentifierError {}

/// Checks `text` against `[first][rest]{0,max-1}`, whole string, ASCII only.
pub(crate) fn check(
    text: &str,
    max: usize,
    first: fn(u8) -> bool,
    rest: fn(u8) -> bool,
) -> Result<(), IdentifierError> {
    let bytes = text.as_bytes();
    let (head, tail) = bytes.split_first().ok_or(IdentifierError::Empty)?;
    if !first(*head) {
        return Err(IdentifierError::BadFirst);
    }
    if !tail.iter().all(|b| rest(*b)) {
        return Err(IdentifierError::BadCharacter);
    }
    // Every accepted byte is ASCII, so bytes are characters here.
    if bytes.len() > max {
        return Err(IdentifierError::TooLong);
    }
    Ok(())
}

/// Defines a validated identifier type: a `heapless::String<$cap>` whose
/// text matches `$pattern`, checked by the `$first` and `$rest` byte tests.
macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $cap:expr, $first:expr, $rest:expr, $pattern:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(heapless::String<{ $cap }>);

        impl $name {
            #[doc = concat!("The pattern every value matches: `", $pattern, "`.")]
            pub const PATTERN: &'static str = $pattern;

            /// Validates `text` and copies it.
            pub fn new(text: &str) -> Result<Self, $crate::ident::IdentifierError> {
                $crate::ident::check(text, $cap, $first, $rest)?;
                let mut owned = heapless::String::new();
                owned
                    .push_str(text)
                    .map_err(|_| $crate::ident::IdentifierError::TooLong)?;
                Ok(Self(owned))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl core::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                self.as_str()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "defmt")]
        impl defmt::Format for $name {
            fn format(&self, f: defmt::Formatter<'_>) {
                defmt::write!(f, "{=str}", self.as_str())
            }
        }
    };
}

pub(crate) use identifier;

identifier!(
    /// A call id or a tool name (`SPEC A1`): ASCII, a letter then up to 39
    /// letters, digits, `_` or `-`.
    Identifier,
    MAX_IDENTIFIER_LEN,
    |b: u8| b.is_ascii_alphabetic(),
    |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
    "[A-Za-z][A-Za-z0-9_-]{0,39}"
);

identifier!(
    /// An argument key (`SPEC A1`): ASCII, a letter then up to 31 letters,
    /// digits or `_` (no `-`).
    ArgumentKey,
    MAX_ARGUMENT_KEY_LEN,
    |b: u8| b.is_ascii_alphabetic(),
    |b: u8| b.is_ascii_alphanumeric() || b == b'_',
    "[A-Za-z][A-Za-z0-9_]{0,31}"
);

identifier!(
    /// A plan step id (`SPEC B`): ASCII, a lowercase letter then up to 31
    /// lowercase letters, digits or `-`.
    PlanId,
    MAX_PLAN_ID_LEN,
    |b: u8| b.is_ascii_lowercase(),
    |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-',
    "[a-z][a-z0-9-]{0,31}"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_length_boundary() {
        let forty = "c".repeat(40);
        assert!(Identifier::new(&forty).is_ok());
        assert_eq!(
            Identifier::new(&"c".repeat(41)),
            Err(IdentifierError::TooLong)
        );
    }

    #[test]
    fn identifier_patterns_differ_per_kind() {
        assert!(Identifier::new("a-b_c9").is_ok());
        assert_eq!(ArgumentKey::new("a-b"), Err(IdentifierError::BadCharacter));
        assert!(ArgumentKey::new(&"k".repeat(32)).is_ok());
        assert_eq!(
            ArgumentKey::new(&"k".repeat(33)),
            Err(IdentifierError::TooLong)
        );
        assert_eq!(Identifier::new("9a"), Err(IdentifierError::BadFirst));
        assert_eq!(Identifier::new("_a"), Err(IdentifierError::BadFirst));
        assert_eq!(Identifier::new(""), Err(IdentifierError::Empty));
        assert_eq!(Identifier::new("é"), Err(IdentifierError::BadFirst));
        assert_eq!(Identifier::new("aé"), Err(IdentifierError::BadCharacter));
        assert_eq!(PlanId::new("Ab"), Err(IdentifierError::BadFirst));
        assert_eq!(PlanId::new("a_b"), Err(IdentifierError::BadCharacter));
        assert!(PlanId::new("a-1").is_ok());
        assert_eq!(Identifier::new("a\n"), Err(IdentifierError::BadCharacter));
    }
}
