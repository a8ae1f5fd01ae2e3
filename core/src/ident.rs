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

/// Byte equality that compares short texts (keys, names, ids: the common
/// case) in a loop of its own rather than through a call to `memcmp`, which
/// on a small device costs more than the comparison.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    const SHORT: usize = 16;
    a.len() == b.len()
        && if a.len() <= SHORT {
            a.iter().zip(b).all(|(x, y)| x == y)
        } else {
            a == b
        }
}

/// Checks a text, given as its characters' code points, against
/// `[first][rest]{0,max-1}`, whole string, ASCII only. The bytes of a `&str`
/// serve as well as its characters: a byte above 0x7F is never allowed, and
/// an all-ASCII text has as many bytes as characters.
pub(crate) fn check(
    codes: impl Iterator<Item = u32>,
    max: usize,
    first: fn(u8) -> bool,
    rest: fn(u8) -> bool,
) -> Result<(), IdentifierError> {
    let allowed =
        |c: u32, class: fn(u8) -> bool| u8::try_from(c).is_ok_and(|b| b.is_ascii() && class(b));
    let mut codes = codes;
    let head = codes.next().ok_or(IdentifierError::Empty)?;
    if !allowed(head, first) {
        return Err(IdentifierError::BadFirst);
    }
    let mut len = 1;
    for c in codes {
        if !allowed(c, rest) {
            return Err(IdentifierError::BadCharacter);
        }
        len += 1;
    }
    if len > max {
        return Err(IdentifierError::TooLong);
    }
    Ok(())
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $cap:expr, $first:expr, $rest:expr, $pattern:literal) => {
        $crate::ident::identifier!($(#[$doc])* $name, $cap, usize, $first, $rest, $pattern);
    };
    // `$len`: the type of the stored length (`u8` keeps a value of up to
    // 255 bytes one byte longer than its text, where `usize` adds eight).
    ($(#[$doc:meta])* $name:ident, $cap:expr, $len:ty, $first:expr, $rest:expr, $pattern:literal) => {
        $(#[$doc])*
        // Equality is the bytes' (as derived), compared without a call to
        // `memcmp` for short values; `Hash` and `Ord` agree with it.
        #[allow(clippy::derived_hash_with_manual_eq)]
        #[derive(Debug, Clone, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(heapless::String<{ $cap }, $len>);

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                $crate::ident::same_bytes(self.0.as_bytes(), other.0.as_bytes())
            }
        }

        impl $name {
            #[doc = concat!("The pattern every value matches: `", $pattern, "`.")]
            pub const PATTERN: &'static str = $pattern;

            /// Validates `text` and copies it.
            pub fn new(text: &str) -> Result<Self, $crate::ident::IdentifierError> {
                $crate::ident::check(text.bytes().map(u32::from), $cap, $first, $rest)?;
                let mut owned = heapless::String::new();
                owned
                    .push_str(text)
                    .map_err(|_| $crate::ident::IdentifierError::TooLong)?;
                Ok(Self(owned))
            }

            /// A value from a text the caller has already checked against
            /// the pattern (the action scanner does, as it reads).
            #[allow(dead_code)]
            pub(crate) fn from_checked(text: &str) -> Result<Self, $crate::ident::IdentifierError> {
                debug_assert!(Self::new(text).is_ok());
                let mut owned = heapless::String::new();
                owned
                    .push_str(text)
                    .map_err(|_| $crate::ident::IdentifierError::TooLong)?;
                Ok(Self(owned))
            }

            /// Whether `chars` would make a valid value, without building it.
            #[allow(dead_code)]
            pub(crate) fn check_chars(
                chars: impl Iterator<Item = char>,
            ) -> Result<(), $crate::ident::IdentifierError> {
                $crate::ident::check(chars.map(u32::from), $cap, $first, $rest)
            }

            /// Validates a text given as its characters, as `new` does.
            #[allow(dead_code)]
            pub(crate) fn from_chars(
                chars: impl Iterator<Item = char> + Clone,
            ) -> Result<Self, $crate::ident::IdentifierError> {
                $crate::ident::check(chars.clone().map(u32::from), $cap, $first, $rest)?;
                let mut owned = heapless::String::new();
                for c in chars {
                    owned
                        .push(c)
                        .map_err(|_| $crate::ident::IdentifierError::TooLong)?;
                }
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

    /// `SPEC A1`: the length rule holds in the character-wise check the
    /// action scanner uses (`check_chars`, which builds nothing), not only
    /// where a value is built; the same for every error, which each say what
    /// is wrong.
    #[test]
    fn the_checks_without_building_refuse_what_building_refuses() {
        let at_most = "a".repeat(MAX_IDENTIFIER_LEN);
        let over = "a".repeat(MAX_IDENTIFIER_LEN + 1);
        assert_eq!(Identifier::check_chars(at_most.chars()), Ok(()));
        assert_eq!(
            Identifier::check_chars(over.chars()),
            Err(IdentifierError::TooLong)
        );
        assert_eq!(
            ArgumentKey::check_chars("k".repeat(33).chars()),
            Err(IdentifierError::TooLong)
        );
        for (text, error) in [
            ("", IdentifierError::Empty),
            (over.as_str(), IdentifierError::TooLong),
            ("1", IdentifierError::BadFirst),
            ("a b", IdentifierError::BadCharacter),
        ] {
            assert_eq!(
                Identifier::check_chars(text.chars()),
                Err(error),
                "{text:?}"
            );
            assert_eq!(Identifier::new(text), Err(error), "{text:?}");
        }
        let words: std::vec::Vec<std::string::String> = [
            IdentifierError::Empty,
            IdentifierError::TooLong,
            IdentifierError::BadFirst,
            IdentifierError::BadCharacter,
        ]
        .iter()
        .map(|e| e.to_string())
        .collect();
        assert_eq!(
            words,
            [
                "is empty",
                "is too long",
                "starts with a character not allowed first",
                "holds a character outside the allowed set"
            ]
        );
    }
}
