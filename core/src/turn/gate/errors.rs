//! Why a step of the turn gate's cycle cannot run: one error per step,
//! each naming the phase the gate is in where that is the reason (`SPEC C`).

use core::fmt;

use super::GatePhase;
#[cfg(doc)]
use super::TurnGate;
#[cfg(doc)]
use crate::turn::outcome::RefusalReason;
use crate::turn::rules::NameError;

/// Why [`TurnGate::begin_call`] or [`TurnGate::begin_reserved_call`] cannot run (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AdmitError {
    /// Not between turns (a call is in flight, calls await answers, or the
    /// run has finished).
    NotReady(GatePhase),
    /// Reserve mode: every call must declare its worst case
    /// ([`TurnGate::begin_reserved_call`]).
    ReservationRequired,
}

/// Why [`TurnGate::record`] cannot run (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RecordError {
    /// No model call is in flight.
    NotAwaitingResponse(GatePhase),
}

/// Why [`TurnGate::propose`] cannot decide a call (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ProposeError {
    /// No response is being handled.
    NotInTurn(GatePhase),
    /// The call id is not `[A-Za-z0-9_-]{1,64}`.
    InvalidCallId(NameError),
    /// The call id was already proposed in this response (an id of an
    /// earlier response is a verdict instead, refused
    /// [`RefusalReason::DuplicateCallId`]).
    DuplicateCallId,
}

/// Why [`TurnGate::approve`] cannot take an answer (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ApprovalError {
    /// No call with this id was proposed in the current response.
    UnknownCallId,
    /// The call is not awaiting approval (it was answered, or needs none).
    NotAwaitingApproval,
}

/// Why [`TurnGate::report`] refuses a result (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReportError {
    /// No call with this id was proposed in the current response.
    UnknownCallId,
    /// The call already has its answer (a result, or the gate's refusal).
    AlreadyAnswered,
    /// The call awaits approval and must not have run.
    AwaitingApproval,
}

/// Why [`TurnGate::finish_turn`] cannot end the turn (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FinishError {
    /// No response is being handled.
    NotInTurn(GatePhase),
    /// This many calls still lack an answer ([`TurnGate::unanswered`] names them).
    Unanswered(u16),
}

/// Why [`TurnGate::close`] cannot close (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CloseError {
    /// A model call is in flight: record its response first.
    AwaitingResponse,
    /// The run is complete; there is nothing to close.
    Complete,
}

/// Why [`TurnGate::resume`] cannot start a new question (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ResumeError {
    /// The run has not finished.
    NotFinished(GatePhase),
    /// The budget is exhausted; a new question would be refused at once.
    Exhausted,
}

impl fmt::Display for AdmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotReady(phase) => write!(f, "cannot begin a model call while {phase}"),
            Self::ReservationRequired => {
                f.write_str("reserve mode: declare the call's worst-case tokens")
            }
        }
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAwaitingResponse(phase) => {
                write!(f, "no model call is in flight (the gate is {phase})")
            }
        }
    }
}

impl fmt::Display for ProposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInTurn(phase) => {
                write!(f, "no response is being handled (the gate is {phase})")
            }
            Self::InvalidCallId(e) => write!(f, "call id {e}"),
            Self::DuplicateCallId => f.write_str("call id proposed twice in one response"),
        }
    }
}

impl fmt::Display for ApprovalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownCallId => "no call with this id was proposed in this response",
            Self::NotAwaitingApproval => "this call is not awaiting approval",
        })
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownCallId => "result for a call id that was never proposed",
            Self::AlreadyAnswered => "result for a call that already has its answer",
            Self::AwaitingApproval => "result for a call still awaiting approval",
        })
    }
}

impl fmt::Display for FinishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInTurn(phase) => {
                write!(f, "no response is being handled (the gate is {phase})")
            }
            Self::Unanswered(n) => write!(f, "{n} tool call(s) still lack a result"),
        }
    }
}

impl fmt::Display for CloseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AwaitingResponse => "a model call is in flight; record its response first",
            Self::Complete => "the run is complete; there is nothing to close",
        })
    }
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFinished(phase) => write!(f, "the run has not finished (it is {phase})"),
            Self::Exhausted => f.write_str("the budget is exhausted"),
        }
    }
}

impl core::error::Error for AdmitError {}
impl core::error::Error for RecordError {}
impl core::error::Error for ProposeError {}
impl core::error::Error for ApprovalError {}
impl core::error::Error for ReportError {}
impl core::error::Error for FinishError {}
impl core::error::Error for CloseError {}
impl core::error::Error for ResumeError {}
