//! The one tool table (`SPEC A2`, `SPEC C`, `SPEC E`): per tool name, what a
//! gate does with a call to it ([`ToolRule`]: run, ask a person first, or
//! deny as `unknown-tool`), an optional per-tool call cap and an optional
//! typed signature, and one rule for every name not listed.
//!
//! Every front-end reads its tools here: the bounded run ([`crate::Run`],
//! where a tool is its index in the table), the turn gate
//! ([`crate::TurnGate`], which also reads the caps), the device gate
//! ([`crate::device::DeviceGate`], which also reads the signatures and the
//! approval rule), and the desktop front-ends through them. The table is
//! configuration: it never changes while a call is decided. How many calls a
//! capped tool has used is state, and lives in the
//! [`Ledger`](crate::budget::Ledger) record, keyed by the tool's name.
//!
//! ```
//! use budgetgate_core::tools::{ToolRule, ToolTable};
//!
//! let mut tools: ToolTable<4> = ToolTable::new();
//! assert_eq!(tools.try_add("search", ToolRule::Run), Ok(0));
//! assert_eq!(tools.try_add("send_email", ToolRule::NeedsApproval), Ok(1));
//! tools.try_add_cap("send_email", 1).unwrap();
//! assert_eq!(tools.rule("send_email"), ToolRule::NeedsApproval);
//! assert_eq!(tools.cap("send_email"), Some(1));
//! // Unlisted names take the fallback rule (unknown unless set) ...
//! assert_eq!(tools.rule("delete"), ToolRule::Unknown);
//! tools.set_others(ToolRule::Run);
//! assert_eq!(tools.rule("delete"), ToolRule::Run);
//! // ... but a name outside the grammar never does.
//! assert_eq!(tools.rule("delete all"), ToolRule::Unknown);
//! ```

use core::fmt;

use heapless::Vec;

use crate::ident::same_bytes;
use crate::limits::{MAX_TOOLS, MAX_TOOL_NAME_LEN};
use crate::registry::{Param, ToolSpec};

/// Why a text is not a valid tool name (`SPEC C`): the same rules as every
/// identifier (an empty text, a character outside `[A-Za-z0-9_-]`, more than
/// 64 characters).
pub use crate::ident::IdentifierError as NameError;

/// Tool names and call ids allow every character of the set anywhere.
pub(crate) fn api_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

crate::ident::identifier!(
    /// A tool's name in the tool table (`SPEC C`): ASCII letters, digits,
    /// `_` and `-`, 1 to 64 characters, as the Messages API allows. Every
    /// `SPEC A1` tool name (`[A-Za-z][A-Za-z0-9_-]{0,39}`) is one.
    ToolName,
    MAX_TOOL_NAME_LEN,
    u8,
    api_char,
    api_char,
    "[A-Za-z0-9_-]{1,64}"
);

/// What a gate does with a call to one tool (`SPEC A2`, `SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ToolRule {
    /// Run it once the budget and repetition checks pass.
    Run,
    /// Consequential (send mail, refund, delete, move an actuator): run it
    /// only after an approver says yes.
    NeedsApproval,
    /// Deny it: not a tool this run knows; the call is answered with the
    /// `unknown-tool` error result and never runs.
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

    /// Whether a call under this rule may run at all (after an approval for
    /// [`ToolRule::NeedsApproval`]).
    pub const fn may_run(self) -> bool {
        !matches!(self, Self::Unknown)
    }
}

/// One listed tool: its name, rule, optional call cap and optional typed
/// signature (`SPEC C`, `SPEC E`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEntry {
    name: ToolName,
    rule: ToolRule,
    // The cap as a flag and a number rather than an `Option<u32>`: 8 bytes
    // less per entry (the bounded run holds a table, `state_sizes`).
    capped: bool,
    cap: u32,
    signature: Option<&'static [Param]>,
}

impl ToolEntry {
    /// The tool's name.
    pub fn name(&self) -> &ToolName {
        &self.name
    }

    /// What a gate does with a call to it.
    pub const fn rule(&self) -> ToolRule {
        self.rule
    }

    /// Most calls of this tool in one run (or session); `None`: no cap of
    /// its own. `Some(0)` denies every call (`tool-cap`).
    pub const fn cap(&self) -> Option<u32> {
        if self.capped {
            Some(self.cap)
        } else {
            None
        }
    }

    /// The typed parameters its calls must fit
    /// ([`crate::registry::check_arguments`]); `None`: the table says
    /// nothing of its arguments (a device gate then takes no arguments for
    /// it).
    pub const fn signature(&self) -> Option<&'static [Param]> {
        self.signature
    }
}

/// Why a tool cannot be listed, or given a cap (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ToolTableError {
    /// The name does not match `[A-Za-z0-9_-]{1,64}`.
    InvalidName(NameError),
    /// The name is already listed.
    Duplicate,
    /// The tool already has a cap.
    DuplicateCap,
    /// The table already holds its capacity of named tools.
    Full,
}

impl fmt::Display for ToolTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(e) => write!(f, "tool name {e}"),
            Self::Duplicate => f.write_str("tool name given two rules"),
            Self::DuplicateCap => f.write_str("tool given two caps"),
            Self::Full => f.write_str("more named tools than this build's capacity"),
        }
    }
}

impl core::error::Error for ToolTableError {}

/// The tools a gate knows, at most `N` (8 by default), each with its rule,
/// optional cap and optional signature, and one rule for every other name
/// (`SPEC A2`, `SPEC C`, `SPEC E`).
///
/// A listed tool is referred to by its index, in the order listed (the
/// bounded run's tool number). Names are compared exactly, byte for byte; a
/// name outside `[A-Za-z0-9_-]{1,64}` never matches an entry and never takes
/// the rule for others (`SPEC E`). The rule for others starts as
/// [`ToolRule::Unknown`] (fail closed). An entry is 80 bytes with 32-bit
/// pointers, 88 with 64-bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTable<const N: usize = MAX_TOOLS> {
    entries: Vec<ToolEntry, N>,
    others: ToolRule,
}

impl<const N: usize> Default for ToolTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ToolTable<N> {
    /// No listed tools; every name is unknown. `const`, so firmware can keep
    /// a table in a `static`.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
            others: ToolRule::Unknown,
        }
    }

    /// A table listing `specs` in order (tool index `i` is `specs[i]`):
    /// each with its signature, [`ToolRule::NeedsApproval`] where the spec
    /// says so and [`ToolRule::Run`] otherwise, no cap. Fails as
    /// [`Self::try_add`] does on the first spec that cannot be listed.
    pub fn from_specs(specs: &[ToolSpec]) -> Result<Self, ToolTableError> {
        let mut table = Self::new();
        for spec in specs {
            let rule = if spec.needs_approval {
                ToolRule::NeedsApproval
            } else {
                ToolRule::Run
            };
            let name = ToolName::new(spec.name).map_err(ToolTableError::InvalidName)?;
            table.try_push(name, rule, Some(spec.params))?;
        }
        Ok(table)
    }

    /// Lists `name` with `rule` (no cap, no signature) and returns its
    /// index. Errors: [`ToolTableError::InvalidName`] outside
    /// `[A-Za-z0-9_-]{1,64}`, [`ToolTableError::Duplicate`] for a name
    /// already listed, [`ToolTableError::Full`] past `N` names; the table is
    /// unchanged then.
    pub fn try_add(&mut self, name: &str, rule: ToolRule) -> Result<usize, ToolTableError> {
        let name = ToolName::new(name).map_err(ToolTableError::InvalidName)?;
        self.try_push(name, rule, None)
    }

    /// Lists the checked `name` with `rule` and `signature` (no cap);
    /// errors as [`Self::try_add`] does for a name listed already or a full
    /// table.
    pub(crate) fn try_push(
        &mut self,
        name: ToolName,
        rule: ToolRule,
        signature: Option<&'static [Param]>,
    ) -> Result<usize, ToolTableError> {
        if self.position(name.as_str()).is_some() {
            return Err(ToolTableError::Duplicate);
        }
        self.entries
            .push(ToolEntry {
                name,
                rule,
                capped: false,
                cap: 0,
                signature,
            })
            .map_err(|_| ToolTableError::Full)?;
        Ok(self.entries.len() - 1)
    }

    /// Gives tool `name` a cap of `max` calls (`Bash` at most 20; 0 denies
    /// every call) and returns its index. A name not listed yet is listed
    /// with the rule for others as it is now (so set that first). Errors:
    /// [`ToolTableError::InvalidName`], [`ToolTableError::DuplicateCap`]
    /// when the tool already has a cap, [`ToolTableError::Full`]; the table
    /// is unchanged then.
    pub fn try_add_cap(&mut self, name: &str, max: u32) -> Result<usize, ToolTableError> {
        let at = match self.position(name) {
            Some(at) => at,
            None => self.try_add(name, self.others)?,
        };
        match self.entries.get_mut(at) {
            Some(entry) if !entry.capped => {
                entry.capped = true;
                entry.cap = max;
                Ok(at)
            }
            _ => Err(ToolTableError::DuplicateCap),
        }
    }

    /// Sets the rule for every name not listed (default
    /// [`ToolRule::Unknown`]) (`SPEC C`).
    pub fn set_others(&mut self, rule: ToolRule) {
        self.others = rule;
    }

    /// The rule for names not listed (`SPEC C`).
    pub const fn others(&self) -> ToolRule {
        self.others
    }

    /// The index of the listed tool named exactly `name` (any text: one
    /// outside the grammar is never listed, so never found).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| same_bytes(e.name.as_bytes(), name.as_bytes()))
    }

    /// The listed tool named exactly `name`, if any.
    pub fn entry(&self, name: &str) -> Option<&ToolEntry> {
        self.entries
            .iter()
            .find(|e| same_bytes(e.name.as_bytes(), name.as_bytes()))
    }

    /// The listed tool at `index` (its [`position`](Self::position)).
    pub fn get(&self, index: usize) -> Option<&ToolEntry> {
        self.entries.get(index)
    }

    /// The rule for `name` (any text) (`SPEC C`): the listed tool's, else
    /// the rule for others. A name outside the grammar `[A-Za-z0-9_-]{1,64}`
    /// is never listed and never gets the rule for others either: it is
    /// [`ToolRule::Unknown`], whatever [`set_others`](Self::set_others)
    /// said (`SPEC E`: names outside the grammar never run).
    pub fn rule(&self, name: &str) -> ToolRule {
        if ToolName::new(name).is_err() {
            return ToolRule::Unknown;
        }
        self.entry(name).map_or(self.others, ToolEntry::rule)
    }

    /// The cap of tool `name`, if it is listed and has one. Unlisted names
    /// (and names outside the grammar) have none.
    pub fn cap(&self, name: &str) -> Option<u32> {
        self.entry(name).and_then(ToolEntry::cap)
    }

    /// Whether `name` is listed.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// The listed tools, in the order listed.
    pub fn entries(&self) -> &[ToolEntry] {
        &self.entries
    }

    /// The listed tools' names and rules, in the order listed (`SPEC C`).
    pub fn iter(&self) -> impl Iterator<Item = (&ToolName, ToolRule)> {
        self.entries.iter().map(|e| (&e.name, e.rule))
    }

    /// The listed tools with a cap: name and cap, in the order listed.
    pub fn caps(&self) -> impl Iterator<Item = (&ToolName, u32)> {
        self.entries
            .iter()
            .filter_map(|e| e.cap().map(|max| (&e.name, max)))
    }

    /// How many tools are listed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tool is listed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ParamKind;

    /// Issue 11 (one tool table): a table holds exactly its capacity; one
    /// more name is refused `Full` and leaves it unchanged.
    #[test]
    fn a_full_tool_table_refuses_one_more_name() {
        let mut t = ToolTable::<2>::new();
        assert_eq!(t.try_add("search", ToolRule::Run), Ok(0));
        assert_eq!(t.try_add("refund", ToolRule::NeedsApproval), Ok(1));
        assert_eq!(
            t.try_add("delete", ToolRule::Run),
            Err(ToolTableError::Full)
        );
        assert_eq!(t.try_add_cap("delete", 1), Err(ToolTableError::Full));
        assert_eq!(t.len(), 2);
        assert!(!t.is_empty() && ToolTable::<2>::new().is_empty());
        assert_eq!(t.rule("delete"), ToolRule::Unknown);
        assert_eq!(t.position("refund"), Some(1));
    }

    /// Issue 11: a name is listed once; a second rule for it, or a second
    /// cap, is refused `Duplicate` and the first stays.
    #[test]
    fn a_tool_name_is_listed_once_and_capped_once() {
        let mut t = ToolTable::<4>::new();
        t.try_add("a", ToolRule::Run).unwrap();
        assert_eq!(
            t.try_add("a", ToolRule::NeedsApproval),
            Err(ToolTableError::Duplicate)
        );
        assert_eq!(t.rule("a"), ToolRule::Run);
        assert_eq!(t.try_add_cap("a", 3), Ok(0));
        assert_eq!(t.try_add_cap("a", 5), Err(ToolTableError::DuplicateCap));
        assert_eq!(
            ToolTableError::DuplicateCap.to_string(),
            "tool given two caps"
        );
        assert_eq!(t.cap("a"), Some(3));
        assert_eq!(t.len(), 1);
    }

    /// Issue 11, `SPEC E`: a name outside `[A-Za-z0-9_-]{1,64}` cannot be
    /// listed or capped, never matches an entry and never takes the rule for
    /// others.
    #[test]
    fn names_outside_the_grammar_are_never_listed_and_never_take_the_fallback() {
        let mut t = ToolTable::<4>::new();
        t.try_add("search", ToolRule::Run).unwrap();
        t.set_others(ToolRule::Run);
        let long = "x".repeat(65);
        for name in [
            "",
            "a b",
            "é",
            "search ",
            "sea\0rch",
            "search\u{200b}",
            &long,
        ] {
            assert!(
                matches!(
                    t.try_add(name, ToolRule::Run),
                    Err(ToolTableError::InvalidName(_))
                ),
                "{name:?}"
            );
            assert!(matches!(
                t.try_add_cap(name, 1),
                Err(ToolTableError::InvalidName(_))
            ));
            assert_eq!(t.rule(name), ToolRule::Unknown, "{name:?}");
            assert_eq!(t.position(name), None);
            assert_eq!(t.cap(name), None);
        }
        assert!(t.try_add(&"x".repeat(64), ToolRule::Run).is_ok());
        assert!(t.try_add("0-leading-digit", ToolRule::Run).is_ok());
        assert_eq!(
            ToolTableError::InvalidName(NameError::BadCharacter).to_string(),
            "tool name holds a character outside the allowed set"
        );
    }

    /// Issue 11: unlisted names take the rule for others, unknown until set;
    /// listed names keep their own; lookups are exact (no case folding, no
    /// prefix).
    #[test]
    fn unlisted_names_take_the_fallback_rule() {
        let mut t = ToolTable::<4>::new();
        t.try_add("refund", ToolRule::NeedsApproval).unwrap();
        t.try_add("banned", ToolRule::Unknown).unwrap();
        assert_eq!(t.others(), ToolRule::Unknown);
        assert_eq!(t.rule("other"), ToolRule::Unknown);
        t.set_others(ToolRule::Run);
        assert_eq!(t.rule("other"), ToolRule::Run);
        assert_eq!(t.rule("Refund"), ToolRule::Run);
        assert_eq!(t.rule("refun"), ToolRule::Run);
        assert_eq!(t.rule("refund"), ToolRule::NeedsApproval);
        assert_eq!(t.rule("banned"), ToolRule::Unknown);
        // Listed is not the same as allowed, and the fallback lists nothing.
        assert!(t.contains("banned") && t.contains("refund"));
        assert!(!t.contains("other") && !t.contains("Refund"));
        assert!(!ToolRule::Unknown.may_run());
        assert!(ToolRule::NeedsApproval.may_run() && ToolRule::Run.may_run());
        let words: std::vec::Vec<_> = t.iter().map(|(n, r)| (n.as_str(), r.as_str())).collect();
        assert_eq!(words, [("refund", "needs-approval"), ("banned", "unknown")]);
    }

    /// Issue 11: a cap on an unlisted name lists it with the rule for
    /// others as it was then; a cap of 0 is kept (it denies every call, see
    /// the ledger's `a_cap_of_zero_denies_every_call`).
    #[test]
    fn a_cap_lists_an_unlisted_tool_with_the_fallback_rule() {
        let mut t = ToolTable::<4>::new();
        t.set_others(ToolRule::Run);
        assert_eq!(t.try_add_cap("Bash", 20), Ok(0));
        assert_eq!(t.try_add_cap("send_email", 0), Ok(1));
        assert_eq!(t.entry("Bash").map(ToolEntry::rule), Some(ToolRule::Run));
        assert_eq!(t.cap("send_email"), Some(0));
        assert_eq!(t.cap("other"), None);
        let caps: std::vec::Vec<_> = t.caps().map(|(n, m)| (n.as_str(), m)).collect();
        assert_eq!(caps, [("Bash", 20), ("send_email", 0)]);
    }

    /// Issue 11: a table from device specs lists them in order, each with
    /// its signature and its approval rule.
    #[test]
    fn a_table_from_specs_keeps_order_signature_and_approval() {
        const P: &[Param] = &[Param {
            key: "a",
            kind: ParamKind::Number,
            required: true,
        }];
        let spec = |name, needs_approval| ToolSpec {
            name,
            description: "",
            params: P,
            needs_approval,
        };
        let t = ToolTable::<2>::from_specs(&[spec("add", false), spec("open", true)]).unwrap();
        assert_eq!(t.position("open"), Some(1));
        let open = t.get(1).unwrap();
        assert_eq!(
            (
                open.name().as_str(),
                open.rule(),
                open.signature(),
                open.cap()
            ),
            ("open", ToolRule::NeedsApproval, Some(P), None)
        );
        assert_eq!(t.get(0).map(ToolEntry::rule), Some(ToolRule::Run));
        assert_eq!(t.get(2), None);
        assert_eq!(
            ToolTable::<1>::from_specs(&[spec("add", false), spec("open", true)]),
            Err(ToolTableError::Full)
        );
        assert_eq!(
            ToolTable::<2>::from_specs(&[spec("add", false), spec("add", true)]),
            Err(ToolTableError::Duplicate)
        );
    }
}
