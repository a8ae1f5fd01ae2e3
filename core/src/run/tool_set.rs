//! The tools registered for a bounded run (`SPEC A2`), with A2's rules for
//! their names.

use core::fmt;

#[cfg(doc)]
use super::Run;
use crate::ident::{Identifier, IdentifierError};
use crate::limits::MAX_TOOLS;
use crate::registry::{Param, ToolSpec};
use crate::tools::{ToolName, ToolRule, ToolTable, ToolTableError};

/// Why a tool cannot be registered (`SPEC A2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ToolSetError {
    /// The name does not match `[A-Za-z][A-Za-z0-9_-]{0,39}`.
    InvalidName(IdentifierError),
    /// The name is already registered.
    Duplicate,
    /// The set already holds its capacity of tools (8 by default).
    Full,
}

impl fmt::Display for ToolSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(e) => {
                write!(f, "tool name {e}; it must match {}", Identifier::PATTERN)
            }
            Self::Duplicate => f.write_str("tool name registered twice"),
            Self::Full => write!(f, "more than {MAX_TOOLS} tools"),
        }
    }
}

impl core::error::Error for ToolSetError {}

/// The tools registered for a bounded run (`SPEC A2`), at most `N` (8 by
/// default): the registration front of the one tool table
/// ([`ToolTable`]). It keeps A2's rules, which are stricter than the
/// table's: a name matches `[A-Za-z][A-Za-z0-9_-]{0,39}` (`SPEC A1`), every
/// name not registered is unknown (no rule for others), and there are no
/// caps. A tool is referred to by its index in registration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSet<const N: usize = MAX_TOOLS> {
    table: ToolTable<N>,
}

impl<const N: usize> Default for ToolSet<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ToolSet<N> {
    /// No tools.
    pub const fn new() -> Self {
        Self {
            table: ToolTable::new(),
        }
    }

    /// Registers `name` (rule [`ToolRule::Run`], no signature) and returns
    /// its index. Errors: [`ToolSetError::InvalidName`] outside
    /// `[A-Za-z][A-Za-z0-9_-]{0,39}`, [`ToolSetError::Duplicate`],
    /// [`ToolSetError::Full`] past `N` tools; the set is unchanged then.
    pub fn try_add(&mut self, name: &str) -> Result<usize, ToolSetError> {
        self.try_add_with(name, ToolRule::Run, None)
    }

    /// Registers a device's tool: `spec`'s name, its signature, and
    /// [`ToolRule::NeedsApproval`] if the spec asks for approval
    /// ([`ToolRule::Run`] otherwise). Errors as [`Self::try_add`].
    pub fn try_add_spec(&mut self, spec: &ToolSpec) -> Result<usize, ToolSetError> {
        let rule = if spec.needs_approval {
            ToolRule::NeedsApproval
        } else {
            ToolRule::Run
        };
        self.try_add_with(spec.name, rule, Some(spec.params))
    }

    /// Registers `specs` in order ([`Self::try_add_spec`]): tool index `i`
    /// is `specs[i]`. Fails on the first spec that cannot be registered.
    pub fn from_specs(specs: &[ToolSpec]) -> Result<Self, ToolSetError> {
        let mut set = Self::new();
        for spec in specs {
            set.try_add_spec(spec)?;
        }
        Ok(set)
    }

    fn try_add_with(
        &mut self,
        name: &str,
        rule: ToolRule,
        signature: Option<&'static [Param]>,
    ) -> Result<usize, ToolSetError> {
        // A1's grammar, stricter than the table's: a letter first, at most
        // 40 characters. A name that passes is a valid table name. (The
        // check is `Identifier::new`, which the action scanner's build
        // already holds: on a device no second copy of the grammar.)
        Identifier::new(name).map_err(ToolSetError::InvalidName)?;
        let name = ToolName::from_checked(name).map_err(ToolSetError::InvalidName)?;
        self.table
            .try_push(name, rule, signature)
            .map_err(|e| match e {
                ToolTableError::InvalidName(e) => ToolSetError::InvalidName(e),
                ToolTableError::Duplicate | ToolTableError::DuplicateCap => ToolSetError::Duplicate,
                ToolTableError::Full => ToolSetError::Full,
            })
    }

    /// The index of `name`, if registered.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.table.position(name)
    }

    /// The tool table the run decides with.
    pub fn table(&self) -> &ToolTable<N> {
        &self.table
    }

    /// The tool table, for [`Run::new`]. Not `const`: a set holds a
    /// `heapless::Vec`, whose destructor a `const fn` cannot run.
    pub fn into_table(self) -> ToolTable<N> {
        self.table
    }
}
