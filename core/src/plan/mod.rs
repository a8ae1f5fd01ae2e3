//! Plans of sub-tasks, their usage, and the bounded workflow (`SPEC B`).
//!
//! A plan is at most 32 rows `{id, parent, tokens, output}`. The whole plan is
//! validated when it is built, so a stop found later never hides an invalid row.
//!
//! This file holds the plan and its rows, built row by row with every rule
//! checked. Beside it: reading a plan from JSON (`read`), the workflow
//! limits (`limits`), and the usage and the bounded workflow (`workflow`).

use core::fmt;

use heapless::Vec;

use crate::ident::{IdentifierError, PlanId};
use crate::json::JsonError;
use crate::limits::{MAX_ROW_COST, MAX_STEPS};

mod limits;
mod read;
mod workflow;

pub use limits::{LimitKey, Limits, LimitsError};
pub use workflow::{StopReason, Usage, Workflow, WorkflowReport};

/// A field of a plan row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RowField {
    /// `id`
    Id,
    /// `parent`
    Parent,
    /// `tokens`
    Tokens,
    /// `output`
    Output,
}

impl RowField {
    const ALL: [Self; 4] = [Self::Id, Self::Parent, Self::Tokens, Self::Output];

    /// The key as written in JSON.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::Parent => "parent",
            Self::Tokens => "tokens",
            Self::Output => "output",
        }
    }
}

/// The rule a plan row breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RowRule {
    /// The row is not an object.
    NotAnObject,
    /// The row has a key other than `id`, `parent`, `tokens`, `output`.
    UnexpectedKey,
    /// The row lacks this key.
    MissingKey(RowField),
    /// `id` or `parent` is not a string matching `[a-z][a-z0-9-]{0,31}`
    /// (`parent` may also be null).
    InvalidId(RowField, Option<IdentifierError>),
    /// `id` repeats an earlier row's id.
    DuplicateId,
    /// `parent` is not the id of an earlier row.
    UnknownParent,
    /// `tokens` or `output` is not an integer 0..=10000.
    Cost(RowField),
}

/// Why a plan is invalid (`SPEC B`; the reference's `ValueError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PlanError {
    /// The document is not acceptable JSON (includes duplicate keys).
    Json(JsonError),
    /// The plan is not a JSON array.
    NotAList,
    /// The plan has more than 32 rows (or more than this build's capacity).
    TooManyRows,
    /// Row `row` (0-based) breaks `rule`.
    Row {
        /// Position of the row.
        row: u8,
        /// The rule it breaks.
        rule: RowRule,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not acceptable JSON: {e}"),
            Self::NotAList => f.write_str("a plan must be a JSON array of rows"),
            Self::TooManyRows => write!(f, "a plan has at most {MAX_STEPS} rows"),
            Self::Row { row, rule } => {
                write!(f, "row {row}: ")?;
                match rule {
                    RowRule::NotAnObject => f.write_str("must be an object"),
                    RowRule::UnexpectedKey => {
                        f.write_str("unexpected key; a row has exactly id, parent, tokens, output")
                    }
                    RowRule::MissingKey(k) => write!(f, "missing key `{}`", k.key()),
                    RowRule::InvalidId(k, _) => write!(
                        f,
                        "`{}` must be a string matching {}{}",
                        k.key(),
                        PlanId::PATTERN,
                        if *k == RowField::Parent {
                            " or null"
                        } else {
                            ""
                        }
                    ),
                    RowRule::DuplicateId => f.write_str("`id` repeats an earlier row's id"),
                    RowRule::UnknownParent => {
                        f.write_str("`parent` is not the id of an earlier row")
                    }
                    RowRule::Cost(k) => {
                        write!(f, "`{}` must be an integer 0..={MAX_ROW_COST}", k.key())
                    }
                }
            }
        }
    }
}

impl core::error::Error for PlanError {}

impl From<JsonError> for PlanError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// One validated plan row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    id: PlanId,
    parent: Option<u8>,
    tokens: u32,
    output: u32,
    depth: u8,
}

impl PlanRow {
    /// The step's id.
    pub fn id(&self) -> &PlanId {
        &self.id
    }
    /// Index of the parent row, `None` for a root.
    pub fn parent(&self) -> Option<usize> {
        self.parent.map(usize::from)
    }
    /// Tokens the step uses (0..=10000).
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
    /// Output the step produces (0..=10000).
    pub fn output(&self) -> u32 {
        self.output
    }
    /// Depth: 1 for a root, parent's depth + 1 otherwise.
    pub fn depth(&self) -> u32 {
        u32::from(self.depth)
    }
}

/// A validated plan of at most `N` rows (32 by default) (`SPEC B`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<const N: usize = MAX_STEPS> {
    rows: Vec<PlanRow, N>,
}

impl<const N: usize> Default for Plan<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Plan<N> {
    const FITS: () = assert!(N <= MAX_STEPS, "plans hold at most 32 rows");

    /// The empty plan.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Self { rows: Vec::new() }
    }

    /// The rows in order.
    pub fn rows(&self) -> &[PlanRow] {
        &self.rows
    }

    /// Appends a row after checking every rule of `SPEC B` against the rows
    /// already present. On error the plan is unchanged.
    pub fn try_push(
        &mut self,
        id: &str,
        parent: Option<&str>,
        tokens: u32,
        output: u32,
    ) -> Result<(), PlanError> {
        let row = u8::try_from(self.rows.len()).unwrap_or(u8::MAX);
        let fail = |rule| PlanError::Row { row, rule };
        let id = PlanId::new(id).map_err(|e| fail(RowRule::InvalidId(RowField::Id, Some(e))))?;
        let parent = match parent {
            None => None,
            Some(p) => {
                PlanId::new(p).map_err(|e| fail(RowRule::InvalidId(RowField::Parent, Some(e))))?;
                Some(p)
            }
        };
        self.push_checked(id, parent, tokens, output)
    }

    /// [`Self::try_push`] for an id (and parent) already checked against
    /// the id rules: the rules between rows and the costs.
    fn push_checked(
        &mut self,
        id: PlanId,
        parent: Option<&str>,
        tokens: u32,
        output: u32,
    ) -> Result<(), PlanError> {
        let row = u8::try_from(self.rows.len()).unwrap_or(u8::MAX);
        let fail = |rule| PlanError::Row { row, rule };
        if self.position(&id).is_some() {
            return Err(fail(RowRule::DuplicateId));
        }
        let (parent, depth) = match parent {
            None => (None, 1),
            Some(p) => {
                let index = self.position(p).ok_or(fail(RowRule::UnknownParent))?;
                let depth = self.rows.get(index).map_or(0, |r| r.depth);
                (Some(index as u8), depth + 1)
            }
        };
        for (field, value) in [(RowField::Tokens, tokens), (RowField::Output, output)] {
            if value > MAX_ROW_COST {
                return Err(fail(RowRule::Cost(field)));
            }
        }
        self.rows
            .push(PlanRow {
                id,
                parent,
                tokens,
                output,
                depth,
            })
            .map_err(|_| PlanError::TooManyRows)
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.rows.iter().position(|r| r.id.as_str() == id)
    }
}

#[cfg(test)]
mod tests;
