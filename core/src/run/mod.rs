//! The bounded run: one decision round at a time, as a sans-IO state machine (`SPEC A2`).
//!
//! The run never calls a policy, a tool or a clock. The caller asks its policy,
//! hands the proposal to [`Run::decide`], and gets a [`Verdict`] that carries
//! what it is about, borrowed from the proposal: the call to execute (with
//! the tool's index and a [`Pending`] token), the unknown tool's call, the
//! final answer's text, or the stop with the refused call. After executing
//! the call, the caller hands the token and the tool's outcome to
//! [`Run::complete`] (or the token alone to [`Run::refuse`] when the host
//! would not run it), which measures the result exactly as the reference
//! does and records the observation's verdict and the trace row. The token
//! is the only way to end a call: it is not `Clone`, so a call is completed
//! at most once, and only a verdict to execute makes one.
//!
//! Why the proposal was not a valid action is kept by the parse step
//! ([`ActionRef::validate`](crate::ActionRef::validate): the
//! [`ActionError`](crate::ActionError) and the byte offset), not by the run:
//! the contract's run only knows that it was invalid.
//!
//! ```
//! use budgetgate_core::{ActionRef, Progress, Run, RunLimits, Status, ToolSet, Verdict};
//!
//! let mut tools = ToolSet::new();
//! tools.try_add("add").unwrap();
//! let mut run: Run = Run::new(RunLimits::DEFAULT, tools);
//!
//! let proposal = ActionRef::parse(br#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#);
//! let Ok(Verdict::Execute { tool: 0, call, pending }) = run.decide(proposal.as_ref().ok()) else { panic!() };
//! assert_eq!(call.arguments.get("b"), Some(budgetgate_core::ScalarRef::Int(8)));
//! assert_eq!(run.complete(pending, Some(&15)).unwrap().progress, Progress::Continue);
//!
//! let answer = ActionRef::parse(br#"{"kind":"final","text":"15"}"#);
//! let Ok(Verdict::Final { text }) = run.decide(answer.as_ref().ok()) else { panic!() };
//! assert!(*text == "15");
//! assert_eq!(run.status(), Some(Status::Final));
//! assert_eq!((run.trace().len(), run.tool_attempts()), (2, 1));
//! ```
//!
//! This file holds the run itself, its limits and its call token. Beside
//! it: the statuses and trace rows it records (`trace`), the registered
//! tools (`tool_set`), and what each round answers (`verdict`).

use core::fmt;

use heapless::Vec;
use serde::ser::Serialize;

use crate::action::{Proposal, Shape};
use crate::limits::{
    DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS, MAX_DECISIONS, MAX_RESULT_BYTES, MAX_STEPS,
    MAX_TOOLS, MAX_TOOL_CALLS,
};
use crate::pyjson::encoded_len;
use crate::tools::ToolTable;

mod tool_set;
mod trace;
mod verdict;

pub use tool_set::{ToolSet, ToolSetError};
pub use trace::{RejectReason, Status, TraceRow};
pub use verdict::{Completed, ObservationData, Progress, RunError, Verdict};

/// Why run limits are invalid (`SPEC A2`; an error before anything runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RunLimitsError {
    /// `max_decisions` is outside 1..=32 (or above this build's step capacity).
    MaxDecisions,
    /// `max_tool_calls` is outside 0..=16.
    MaxToolCalls,
}

impl fmt::Display for RunLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxDecisions => write!(f, "max_decisions must be an integer 1..={MAX_DECISIONS}"),
            Self::MaxToolCalls => {
                write!(f, "max_tool_calls must be an integer 0..={MAX_TOOL_CALLS}")
            }
        }
    }
}

impl core::error::Error for RunLimitsError {}

/// The two budgets of a run (`SPEC A2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RunLimits {
    max_decisions: u8,
    max_tool_calls: u8,
}

impl RunLimits {
    /// The reference's defaults: 8 decisions, 4 tool attempts.
    pub const DEFAULT: Self = Self {
        max_decisions: DEFAULT_MAX_DECISIONS as u8,
        max_tool_calls: DEFAULT_MAX_TOOL_CALLS as u8,
    };

    /// Checks `max_decisions` in 1..=32 and `max_tool_calls` in 0..=16.
    pub const fn new(max_decisions: u32, max_tool_calls: u32) -> Result<Self, RunLimitsError> {
        if max_decisions < 1 || max_decisions > MAX_DECISIONS {
            return Err(RunLimitsError::MaxDecisions);
        }
        if max_tool_calls > MAX_TOOL_CALLS {
            return Err(RunLimitsError::MaxToolCalls);
        }
        Ok(Self {
            max_decisions: max_decisions as u8,
            max_tool_calls: max_tool_calls as u8,
        })
    }

    /// Most decision rounds.
    pub const fn max_decisions(&self) -> u8 {
        self.max_decisions
    }

    /// Most tool attempts.
    pub const fn max_tool_calls(&self) -> u8 {
        self.max_tool_calls
    }
}

impl Default for RunLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The run's token for the one tool call awaiting its outcome: made only by
/// [`Verdict::Execute`], consumed by [`Run::complete`] or [`Run::refuse`].
/// Not `Clone`: an outcome is reported once. Small (its round number), so a
/// caller that waits for an approval keeps it with the call.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a pending call ends with Run::complete or Run::refuse"]
pub struct Pending {
    step: u8,
}

impl Pending {
    /// The round of the call, from 0 (its trace row's `step`).
    pub const fn step(&self) -> u8 {
        self.step
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitingProposal,
    AwaitingOutcome,
    Stopped(Status),
}

/// One bounded run (`SPEC A2`): budgets, registered tools, and the trace.
///
/// `STEPS` is the trace capacity (32 by default, the contract's most decisions),
/// `TOOLS` the tool capacity (8). Holds no observations: their data lives with
/// the caller, which the run tells whether each is a result or an error. With
/// the defaults its size is a few kilobytes (see the `state_sizes` test).
#[derive(Debug, Clone)]
pub struct Run<const STEPS: usize = MAX_STEPS, const TOOLS: usize = MAX_TOOLS> {
    limits: RunLimits,
    tools: ToolTable<TOOLS>,
    trace: Vec<TraceRow, STEPS>,
    tool_attempts: u8,
    state: State,
}

impl<const STEPS: usize, const TOOLS: usize> Run<STEPS, TOOLS> {
    const FITS: () = assert!(
        STEPS >= MAX_DECISIONS as usize,
        "a run needs room for 32 trace rows"
    );

    /// A run that has not asked its policy yet, over the tools of `tools`.
    pub fn new(limits: RunLimits, tools: ToolSet<TOOLS>) -> Self {
        Self::with_table(limits, tools.into_table())
    }

    /// Starts this run again from nothing with `limits`, over the same
    /// tools (a device gate starting its next run): no copy of the tool
    /// table is made.
    pub(crate) fn restart(&mut self, limits: RunLimits) {
        self.limits = limits;
        self.trace.clear();
        self.tool_attempts = 0;
        self.state = State::AwaitingProposal;
    }

    /// [`Run::new`] with the table of a [`ToolSet`].
    const fn with_table(limits: RunLimits, tools: ToolTable<TOOLS>) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Self {
            limits,
            tools,
            trace: Vec::new(),
            tool_attempts: 0,
            state: State::AwaitingProposal,
        }
    }

    /// Decides one round on the policy's proposal (`SPEC A2`, steps 1 to 5).
    ///
    /// `proposal` is `None` when the policy failed or its proposal did not
    /// validate. The checks run in the contract's order: invalid proposal,
    /// final, duplicate call id, tool budget, then the attempt is counted.
    /// The verdict borrows the call (or text) from `proposal`.
    pub fn decide<'p, P: Proposal + ?Sized>(
        &mut self,
        proposal: Option<&'p P>,
    ) -> Result<Verdict<'p, P::Call, P::Text>, RunError> {
        match self.state {
            State::AwaitingProposal => {}
            State::AwaitingOutcome => return Err(RunError::AwaitingOutcome),
            State::Stopped(status) => return Err(RunError::Stopped(status)),
        }
        let step = self.next_step();
        let (call_id, name, call) = match proposal.map(Proposal::shape) {
            None => {
                let row = TraceRow::Rejected {
                    step,
                    reason: RejectReason::InvalidPolicyAction,
                };
                return Ok(self.stop(row, Status::PolicyError, None));
            }
            Some(Shape::Final(text)) => {
                self.push(TraceRow::Final { step });
                self.state = State::Stopped(Status::Final);
                return Ok(Verdict::Final { text });
            }
            Some(Shape::Tool {
                call_id,
                name,
                call,
            }) => (call_id, name, call),
        };
        if self
            .trace
            .iter()
            .any(|row| matches!(row, TraceRow::Tool { call_id: seen, .. } if seen == call_id))
        {
            let row = TraceRow::Rejected {
                step,
                reason: RejectReason::DuplicateCallId,
            };
            return Ok(self.stop(row, Status::DuplicateCall, Some(call)));
        }
        if self.tool_attempts >= self.limits.max_tool_calls {
            let row = TraceRow::Rejected {
                step,
                reason: RejectReason::ToolBudget,
            };
            return Ok(self.stop(row, Status::ToolBudget, Some(call)));
        }
        self.tool_attempts += 1;
        let tool = self.tools.position(name);
        let row = TraceRow::Tool {
            step,
            call_id: call_id.clone(),
            name: name.clone(),
            executed: tool.is_some(),
            ok: false,
        };
        match tool {
            Some(tool) => {
                self.push(row);
                self.state = State::AwaitingOutcome;
                Ok(Verdict::Execute {
                    tool,
                    call,
                    pending: Pending { step },
                })
            }
            None => Ok(Verdict::UnknownTool {
                call,
                progress: self.end_round(row),
            }),
        }
    }

    /// Records the outcome of the call that `pending` stands for, the one
    /// [`Verdict::Execute`] named (`SPEC A2`, step 5-6).
    ///
    /// `outcome` is the tool's return value, or `None` if it failed. The
    /// value is measured with the reference's encoder ([`crate::pyjson`]); over
    /// 4096 bytes or not encodable makes the observation a `tool-error`.
    /// Errors only for a token of another run ([`RunError::NoPendingCall`],
    /// or [`RunError::Stopped`] if this run has stopped); nothing changes.
    pub fn complete<T: Serialize + ?Sized>(
        &mut self,
        pending: Pending,
        outcome: Option<&T>,
    ) -> Result<Completed, RunError> {
        self.check(&pending)?;
        // Any encoding failure (too large, NaN, a non-string key) is the
        // reference's tool-error, as is a failed tool.
        let data = match outcome.map(|value| encoded_len(value, MAX_RESULT_BYTES)) {
            Some(Ok(bytes)) => ObservationData::Result { bytes },
            Some(Err(_)) | None => ObservationData::ToolError,
        };
        let ok = matches!(data, ObservationData::Result { .. });
        if let Some(TraceRow::Tool { ok: row_ok, .. }) = self.trace.last_mut() {
            *row_ok = ok;
        }
        self.state = State::AwaitingProposal;
        Ok(Completed {
            data,
            progress: self.after_round(),
        })
    }

    /// Ends the call that `pending` stands for without running it: the host
    /// refused it after [`Verdict::Execute`] (its arguments broke the
    /// tool's signature, or a human said no). The attempt stays counted; the
    /// trace row records `executed: false, ok: false`, so the trace says
    /// what really happened. The contract has no such step (`SPEC A2` knows
    /// no approval); it is how `SPEC C`'s refusals are recorded in an A2
    /// run. Errors as [`Run::complete`] does.
    pub fn refuse(&mut self, pending: Pending) -> Result<Progress, RunError> {
        let done = self.complete(pending, None::<&()>)?;
        if let Some(TraceRow::Tool { executed, .. }) = self.trace.last_mut() {
            *executed = false;
        }
        Ok(done.progress)
    }

    /// Whether `pending` is the call this run awaits.
    fn check(&self, pending: &Pending) -> Result<(), RunError> {
        match self.state {
            State::AwaitingOutcome if self.trace.len() == usize::from(pending.step) + 1 => Ok(()),
            State::Stopped(status) => Err(RunError::Stopped(status)),
            _ => Err(RunError::NoPendingCall),
        }
    }

    /// The status once stopped, `None` while running.
    pub fn status(&self) -> Option<Status> {
        match self.state {
            State::Stopped(status) => Some(status),
            _ => None,
        }
    }

    /// One row per decided round, in order.
    pub fn trace(&self) -> &[TraceRow] {
        &self.trace
    }

    /// Tool attempts counted so far (accepted tool actions, known or not).
    pub fn tool_attempts(&self) -> u8 {
        self.tool_attempts
    }

    /// The run's budgets.
    pub fn limits(&self) -> RunLimits {
        self.limits
    }

    /// The registered tools: the tool table of the run's [`ToolSet`].
    pub fn tools(&self) -> &ToolTable<TOOLS> {
        &self.tools
    }

    /// Whether a tool outcome is awaited ([`Verdict::Execute`] was given
    /// and neither [`Run::complete`] nor [`Run::refuse`] has been called).
    pub fn awaiting_outcome(&self) -> bool {
        self.state == State::AwaitingOutcome
    }

    /// The token of the call a restored run awaits ([`Run::restore`] with
    /// a call in flight), so the caller can end it; `None` when no outcome
    /// is awaited. Crate-only: outside, tokens come from verdicts alone.
    pub(crate) fn restored_pending(&self) -> Option<Pending> {
        self.awaiting_outcome().then(|| Pending {
            step: self.next_step().saturating_sub(1),
        })
    }

    /// Rebuilds this run in place from its stored parts (`crate::resume`),
    /// which the caller has checked: `trace` rows in step order,
    /// `tool_attempts` the number of tool rows, a stop row only last, at
    /// most [`Run::capacity`] rows. Returns `false` (the run then holds the
    /// rows that fitted) if they do not fit, or `status` comes with a call
    /// in flight. In place: no second run on the stack.
    pub(crate) fn restore(
        &mut self,
        limits: RunLimits,
        trace: impl Iterator<Item = TraceRow>,
        tool_attempts: u8,
        awaiting_outcome: bool,
        status: Option<Status>,
    ) -> bool {
        self.limits = limits;
        self.trace.clear();
        self.tool_attempts = tool_attempts;
        for row in trace {
            if self.trace.push(row).is_err() {
                return false;
            }
        }
        self.state = match (status, awaiting_outcome) {
            (Some(status), false) => State::Stopped(status),
            (None, true) => State::AwaitingOutcome,
            (None, false) => State::AwaitingProposal,
            (Some(_), true) => return false,
        };
        true
    }

    /// Most trace rows this run holds (`STEPS`).
    pub const fn capacity(&self) -> usize {
        STEPS
    }

    fn next_step(&self) -> u8 {
        // The trace never exceeds 32 rows, so this always fits.
        u8::try_from(self.trace.len()).unwrap_or(u8::MAX)
    }

    fn push(&mut self, row: TraceRow) {
        // Capacity is at least max_decisions (checked at compile time) and a
        // round is only decided while fewer rows than that exist.
        let _ = self.trace.push(row);
    }

    fn stop<'p, C: ?Sized, T: ?Sized>(
        &mut self,
        row: TraceRow,
        status: Status,
        call: Option<&'p C>,
    ) -> Verdict<'p, C, T> {
        self.push(row);
        self.state = State::Stopped(status);
        Verdict::Stop { status, call }
    }

    fn end_round(&mut self, row: TraceRow) -> Progress {
        self.push(row);
        self.after_round()
    }

    fn after_round(&mut self) -> Progress {
        if self.trace.len() >= usize::from(self.limits.max_decisions) {
            self.state = State::Stopped(Status::DecisionBudget);
            Progress::Stopped(Status::DecisionBudget)
        } else {
            Progress::Continue
        }
    }
}

#[cfg(test)]
mod tests;
