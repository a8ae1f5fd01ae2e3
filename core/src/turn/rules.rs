//! Call ids of the turn gate, and its tool rules: the one tool table
//! ([`crate::tools`]) under the names the turn gate has always used (`SPEC C`).

use crate::limits::{MAX_CALL_ID_LEN, MAX_TOOLS};
use crate::tools::api_char;

pub use crate::tools::{NameError, ToolName, ToolRule};

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

/// The turn gate's tool rules: the one tool table ([`crate::tools::ToolTable`]),
/// `N` named tools (8 by default), a rule and an optional cap each, and one
/// rule for every other name (`SPEC C`).
pub type ToolRules<const N: usize = MAX_TOOLS> = crate::tools::ToolTable<N>;

/// Why a tool rule cannot be added: the tool table's error (`SPEC C`).
pub type ToolRulesError = crate::tools::ToolTableError;

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
