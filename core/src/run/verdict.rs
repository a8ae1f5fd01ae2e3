//! What each round of a bounded run answers (`SPEC A2`): the verdict on a
//! proposal, the verdict on a tool's outcome, and the errors of a call made
//! in the wrong state.

use core::fmt;

use super::{Pending, Status};
#[cfg(doc)]
use super::{Run, ToolSet};
#[cfg(doc)]
use crate::action::Proposal;
#[cfg(doc)]
use crate::tools::ToolTable;
use crate::word;

/// What the caller must do after [`Run::decide`], with what the verdict is
/// about borrowed from the proposal: `C` is the proposal's tool call and
/// `T` its final text ([`Proposal::Call`], [`Proposal::Text`]).
#[derive(Debug, PartialEq)]
pub enum Verdict<'p, C: ?Sized, T: ?Sized> {
    /// Call registered tool number `tool` with `call`'s arguments, then
    /// hand `pending` and the outcome to [`Run::complete`] (or `pending`
    /// alone to [`Run::refuse`]). The attempt is already counted.
    Execute {
        /// Index of the tool in the run's [`ToolTable`] (its [`ToolSet`]).
        tool: usize,
        /// The call to execute.
        call: &'p C,
        /// The run's token for this call's outcome.
        pending: Pending,
    },
    /// The tool name is not registered: nothing is executed; the observation is
    /// `{ok: false, data: "unknown-tool"}` ([`word::UNKNOWN_TOOL`]) and the
    /// row is recorded.
    UnknownTool {
        /// The call of the unknown tool.
        call: &'p C,
        /// Whether the run continues or stopped on its decision budget.
        progress: Progress,
    },
    /// The policy answered: the run stopped with [`Status::Final`].
    Final {
        /// The answer.
        text: &'p T,
    },
    /// The run stopped in this round with `status`: `policy-error`,
    /// `duplicate-call` or `tool-budget`.
    Stop {
        /// Why the run stopped.
        status: Status,
        /// The tool call refused (`duplicate-call`, `tool-budget`); `None`
        /// for `policy-error` (there was no valid proposal).
        call: Option<&'p C>,
    },
}

impl<C: ?Sized, T: ?Sized> Verdict<'_, C, T> {
    /// The status the run stopped with in this round, if it did: the stop's,
    /// `final`, or an unknown tool's round that used the last decision.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Execute { .. } => None,
            Self::UnknownTool { progress, .. } => match progress {
                Progress::Continue => None,
                Progress::Stopped(status) => Some(*status),
            },
            Self::Final { .. } => Some(Status::Final),
            Self::Stop { status, .. } => Some(*status),
        }
    }
}

/// Whether the run goes on after a tool round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Progress {
    /// Ask the policy again.
    Continue,
    /// The run has stopped with this status (only `decision-budget` here).
    Stopped(Status),
}

/// What an executed tool's observation holds, as decided by [`Run::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ObservationData {
    /// `ok: true`; the data is the result itself, whose compact encoding has
    /// this many bytes (at most 4096).
    Result {
        /// Exact encoded size in UTF-8 bytes.
        bytes: usize,
    },
    /// `ok: false, data: "tool-error"` ([`word::TOOL_ERROR`]): the tool
    /// failed, or its result was over 4096 bytes or not encodable.
    ToolError,
}

impl ObservationData {
    /// The observation's error word ([`word::TOOL_ERROR`]), `None` for a
    /// result.
    pub const fn word(self) -> Option<&'static str> {
        match self {
            Self::Result { .. } => None,
            Self::ToolError => Some(word::TOOL_ERROR),
        }
    }
}

/// The verdict on one executed tool's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Completed {
    /// What the observation holds.
    pub data: ObservationData,
    /// Whether the run goes on.
    pub progress: Progress,
}

/// A call in the wrong state of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RunError {
    /// The run has already stopped with this status.
    Stopped(Status),
    /// [`Run::decide`] was called while a tool outcome is still awaited.
    AwaitingOutcome,
    /// [`Run::complete`] or [`Run::refuse`] was given a [`Pending`] token
    /// that is not the call this run awaits: a token of another run (a
    /// run's own tokens always match).
    NoPendingCall,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped(s) => write!(f, "the run has stopped ({s})"),
            Self::AwaitingOutcome => {
                f.write_str("a tool outcome is awaited before the next decision")
            }
            Self::NoPendingCall => f.write_str("this run awaits no such tool call"),
        }
    }
}

impl core::error::Error for RunError {}
