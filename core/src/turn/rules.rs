//! Call ids, tool names and the per-tool rules of the turn gate (`SPEC C`).

use core::fmt;

use heapless::Vec;

use crate::limits::{MAX_CALL_ID_LEN, MAX_TOOLS, MAX_TOOL_NAME_LEN};

/// Why a text is not a valid call id or tool name (`SPEC C`): the same rules
/// as every identifier (an empty text, a character outside `[A-Za-z0-9_-]`,
/// more than 64 characters).
pub use crate::ident::IdentifierError as NameError;

/// Call ids and tool names allow every character of the set anywhere.
fn api_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

crate::ident::identifier!(
    /// The id of one tool call (a `tool_use` block's `id`, answered by the
    /// `tool_use_id` of its `tool_result`) (`SPEC C`): ASCII letters, digits,
    /// `_` and `-`, 1 to 64 characters, as the Messages API spells ids.
    CallId,
    MAX_CALL_ID_LEN,
    api_char,
    api_char,
    "[A-Za-z0-9_-]{1,64}"
);

crate::ident::identifier!(
    /// A tool's name in the turn gate's rules (`SPEC C`): ASCII letters,
    /// digits, `_` and `-`, 1 to 64 characters, as the Messages API allows.
    ToolName,
    MAX_TOOL_NAME_LEN,
    api_char,
    api_char,
    "[A-Za-z0-9_-]{1,64}"
);

/// What the gate does with a call to one tool (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ToolRule {
    /// Run it once the budget and repetition checks pass.
    Run,
    /// Consequential (send mail, refund, delete, move an actuator): run it
    /// only after an approver says yes.
    NeedsApproval,
    /// Not a tool this run knows: answer with the `unknown-tool` error result.
    Unknown,
}

impl ToolRule {
    /// The spelling used in reports: `run`, `needs-approval`, `unknown` (`SPEC C`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::NeedsApproval => "needs-approval",
            Self::Unknown => "unknown",
        }
    }
}

/// Why a tool rule cannot be added (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ToolRulesError {
    /// The name does not match `[A-Za-z0-9_-]{1,64}`.
    InvalidName(NameError),
    /// The name already has a rule.
    Duplicate,
    /// The rules already hold their capacity of named tools.
    Full,
}

impl fmt::Display for ToolRulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(e) => write!(f, "tool name {e}"),
            Self::Duplicate => f.write_str("tool name given two rules"),
            Self::Full => f.write_str("more named tools than this build's capacity"),
        }
    }
}

impl core::error::Error for ToolRulesError {}

/// The rule for each named tool, and one rule for every other name (`SPEC C`).
///
/// `N` is the capacity of named tools (8 by default). The rule for names not
/// listed starts as [`ToolRule::Unknown`] (fail closed); a host replaying a
/// log whose tool list it does not know may set it to [`ToolRule::Run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRules<const N: usize = MAX_TOOLS> {
    named: Vec<(ToolName, ToolRule), N>,
    others: ToolRule,
}

impl<const N: usize> Default for ToolRules<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ToolRules<N> {
    /// No named tools; every name is unknown (`SPEC C`).
    pub const fn new() -> Self {
        Self {
            named: Vec::new(),
            others: ToolRule::Unknown,
        }
    }

    /// Gives `name` its rule (`SPEC C`).
    pub fn try_add(&mut self, name: &str, rule: ToolRule) -> Result<(), ToolRulesError> {
        let name = ToolName::new(name).map_err(ToolRulesError::InvalidName)?;
        if self.named.iter().any(|(n, _)| *n == name) {
            return Err(ToolRulesError::Duplicate);
        }
        self.named
            .push((name, rule))
            .map_err(|_| ToolRulesError::Full)
    }

    /// Sets the rule for every name not added (default [`ToolRule::Unknown`]) (`SPEC C`).
    pub fn set_others(&mut self, rule: ToolRule) {
        self.others = rule;
    }

    /// The rule for names not added (`SPEC C`).
    pub fn others(&self) -> ToolRule {
        self.others
    }

    /// The rule for `name` (any text) (`SPEC C`). A name outside the grammar
    /// `[A-Za-z0-9_-]{1,64}` is never listed and never gets the rule for
    /// others either: it is [`ToolRule::Unknown`], whatever
    /// [`set_others`](Self::set_others) said (`SPEC E`: names outside the
    /// grammar never run). Names are compared exactly, never loosely.
    pub fn rule(&self, name: &str) -> ToolRule {
        if ToolName::new(name).is_err() {
            return ToolRule::Unknown;
        }
        self.named
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map_or(self.others, |(_, rule)| *rule)
    }

    /// The named tools and their rules, in the order added (`SPEC C`).
    pub fn iter(&self) -> impl Iterator<Item = (&ToolName, ToolRule)> {
        self.named.iter().map(|(n, r)| (n, *r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_api_pattern() {
        assert!(CallId::new("toolu_01Lc1iXDm3oMyqhyT2LCaMH6").is_ok());
        assert!(CallId::new("0-leading-digit-ok").is_ok());
        assert_eq!(CallId::new(""), Err(NameError::Empty));
        assert_eq!(CallId::new("a b"), Err(NameError::BadCharacter));
        assert!(CallId::new(&"x".repeat(64)).is_ok());
        assert_eq!(CallId::new(&"x".repeat(65)), Err(NameError::TooLong));
        assert_eq!(ToolName::new("é"), Err(NameError::BadFirst));
        assert_eq!(ToolName::new("aé"), Err(NameError::BadCharacter));
    }

    #[test]
    fn rules_capacity_and_fallback() {
        let mut rules = ToolRules::<2>::new();
        rules.try_add("search", ToolRule::Run).unwrap();
        rules.try_add("refund", ToolRule::NeedsApproval).unwrap();
        assert_eq!(
            rules.try_add("delete", ToolRule::Run),
            Err(ToolRulesError::Full)
        );
        let mut one = ToolRules::<2>::new();
        one.try_add("a", ToolRule::Run).unwrap();
        assert_eq!(
            one.try_add("a", ToolRule::Run),
            Err(ToolRulesError::Duplicate)
        );
        assert_eq!(rules.rule("refund"), ToolRule::NeedsApproval);
        assert_eq!(rules.rule("other"), ToolRule::Unknown);
        rules.set_others(ToolRule::Run);
        assert_eq!(rules.rule("other"), ToolRule::Run);
        // A name outside the grammar never takes the rule for others.
        for name in ["not valid!", "", "search ", "sea\0rch", "search\u{200b}"] {
            assert_eq!(rules.rule(name), ToolRule::Unknown, "{name:?}");
        }
    }
}
