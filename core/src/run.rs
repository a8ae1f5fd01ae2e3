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

use core::fmt;

use heapless::Vec;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::action::{Proposal, Shape};
use crate::ident::{Identifier, IdentifierError};
use crate::limits::{
    DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS, MAX_DECISIONS, MAX_RESULT_BYTES, MAX_STEPS,
    MAX_TOOLS, MAX_TOOL_CALLS,
};
use crate::pyjson::encoded_len;
use crate::registry::{Param, ToolSpec};
use crate::tools::{ToolName, ToolRule, ToolTable, ToolTableError};
use crate::word;

/// How a run ended (`SPEC A2`); spelled as the contract spells it by [`Status::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Status {
    /// The policy answered with a final action: `final`.
    Final,
    /// The policy failed or proposed an invalid action: `policy-error`.
    PolicyError,
    /// A call id was reused: `duplicate-call`.
    DuplicateCall,
    /// A tool action came with no tool attempts left: `tool-budget`.
    ToolBudget,
    /// The decision rounds ran out: `decision-budget`.
    DecisionBudget,
}

impl Status {
    /// The contract's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Final => word::FINAL,
            Self::PolicyError => word::POLICY_ERROR,
            Self::DuplicateCall => word::DUPLICATE_CALL,
            Self::ToolBudget => word::TOOL_BUDGET,
            Self::DecisionBudget => word::DECISION_BUDGET,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Why a decision round was rejected (the `reason` of a `rejected` trace row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RejectReason {
    /// `invalid-policy-action`
    InvalidPolicyAction,
    /// `duplicate-call-id`
    DuplicateCallId,
    /// `tool-budget`
    ToolBudget,
}

impl RejectReason {
    /// The contract's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidPolicyAction => word::INVALID_POLICY_ACTION,
            Self::DuplicateCallId => word::DUPLICATE_CALL_ID,
            Self::ToolBudget => word::TOOL_BUDGET,
        }
    }
}

/// One row of the trace: one per decision round, steps counted from 0 (`SPEC A2`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TraceRow {
    /// `{step, kind: "final"}`
    Final {
        /// Round number from 0.
        step: u8,
    },
    /// `{step, kind: "rejected", reason}`
    Rejected {
        /// Round number from 0.
        step: u8,
        /// Why the round was rejected.
        reason: RejectReason,
    },
    /// `{step, kind: "tool", call_id, name, executed, ok}`
    Tool {
        /// Round number from 0.
        step: u8,
        /// The call id of the attempt.
        call_id: Identifier,
        /// The tool name proposed (registered or not).
        name: Identifier,
        /// Whether a registered tool was called (even if it failed).
        executed: bool,
        /// Whether the observation is a usable result.
        ok: bool,
    },
}

impl TraceRow {
    /// The round number, from 0.
    pub fn step(&self) -> u8 {
        match self {
            Self::Final { step } | Self::Rejected { step, .. } | Self::Tool { step, .. } => *step,
        }
    }
}

impl Serialize for TraceRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Final { step } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "final")?;
                map.end()
            }
            Self::Rejected { step, reason } => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "rejected")?;
                map.serialize_entry("reason", reason.as_str())?;
                map.end()
            }
            Self::Tool {
                step,
                call_id,
                name,
                executed,
                ok,
            } => {
                let mut map = s.serialize_map(Some(6))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "tool")?;
                map.serialize_entry("call_id", call_id)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("executed", executed)?;
                map.serialize_entry("ok", ok)?;
                map.end()
            }
        }
    }
}

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
mod tests {
    use super::*;
    use crate::action::{Action, ActionRef, ToolCall};

    fn action(json: &str) -> Action<256> {
        Action::parse(json.as_bytes()).unwrap()
    }

    fn add(id: &str) -> Action<256> {
        action(&format!(
            r#"{{"kind":"tool","call_id":"{id}","name":"add","arguments":{{"a":7,"b":8}}}}"#
        ))
    }

    fn tools() -> ToolSet {
        let mut t = ToolSet::new();
        t.try_add("add").unwrap();
        t
    }

    /// Decides `proposal`, which must be a call to execute: its token.
    fn execute(run: &mut Run, proposal: &Action<256>) -> Pending {
        let verdict = run.decide(Some(proposal));
        assert_eq!(verdict.as_ref().map(Verdict::status), Ok(None));
        match verdict {
            Ok(Verdict::Execute { pending, .. }) => pending,
            other => panic!("not executed: {other:?}"),
        }
    }

    fn call_of(proposal: &Action<256>) -> &ToolCall<256> {
        match proposal {
            Action::Tool(call) => call,
            Action::Final { .. } => panic!("not a call"),
        }
    }

    #[test]
    fn seed_example_repeat_policy_stops_on_tool_budget() {
        let mut run: Run = Run::new(RunLimits::new(3, 1).unwrap(), tools());
        let first = add("c0");
        let pending = execute(&mut run, &first);
        assert_eq!(pending.step(), 0);
        assert_eq!(
            run.complete(pending, Some(&15)).unwrap().progress,
            Progress::Continue
        );
        let second = add("c1");
        assert_eq!(
            run.decide(Some(&second)),
            Ok(Verdict::Stop {
                status: Status::ToolBudget,
                call: Some(call_of(&second))
            })
        );
        assert_eq!(run.trace().len(), 2);
        assert_eq!(run.tool_attempts(), 1);
        assert_eq!(
            run.decide(Some(&add("c2"))),
            Err(RunError::Stopped(Status::ToolBudget))
        );
    }

    /// `SPEC A2` step 5 (issue 11, decisions carry the call): the verdict
    /// to execute hands back the proposal's own call, borrowed, with the
    /// tool's index and a token for the round.
    #[test]
    fn execute_hands_back_the_call_of_the_proposal() {
        let mut set = ToolSet::new();
        set.try_add("sub").unwrap();
        set.try_add("add").unwrap();
        let mut run: Run = Run::new(RunLimits::DEFAULT, set);
        let json = br#"{"kind":"tool","call_id":"c9","name":"add","arguments":{"a":7}}"#;
        let proposal = ActionRef::parse(json).unwrap();
        let Ok(Verdict::Execute {
            tool,
            call,
            pending,
        }) = run.decide(Some(&proposal))
        else {
            panic!("not executed")
        };
        assert_eq!(tool, 1);
        assert!(core::ptr::eq(
            call,
            match &proposal {
                ActionRef::Tool(c) => c,
                ActionRef::Final { .. } => unreachable!(),
            }
        ));
        assert_eq!(call.call_id.as_str(), "c9");
        assert_eq!(pending, Pending { step: 0 });
        assert_eq!(run.refuse(pending), Ok(Progress::Continue));
    }

    #[test]
    fn seed_example_one_decision_is_decision_budget() {
        let mut run: Run = Run::new(RunLimits::new(1, 4).unwrap(), tools());
        let pending = execute(&mut run, &add("c1"));
        let done = run.complete(pending, Some(&15)).unwrap();
        assert_eq!(done.progress, Progress::Stopped(Status::DecisionBudget));
        assert_eq!(done.data, ObservationData::Result { bytes: 2 });
        assert_eq!(done.data.word(), None);
        assert_eq!(run.status(), Some(Status::DecisionBudget));
    }

    #[test]
    fn duplicate_call_id_is_checked_before_tool_budget() {
        let mut run: Run = Run::new(RunLimits::new(4, 1).unwrap(), tools());
        let pending = execute(&mut run, &add("c1"));
        let done = run.complete(pending, None::<&i32>).unwrap();
        assert_eq!(done.data.word(), Some("tool-error"));
        let again = add("c1");
        let verdict = run.decide(Some(&again));
        assert_eq!(
            verdict,
            Ok(Verdict::Stop {
                status: Status::DuplicateCall,
                call: Some(call_of(&again))
            })
        );
        assert_eq!(verdict.unwrap().status(), Some(Status::DuplicateCall));
        assert_eq!(
            run.trace().last(),
            Some(&TraceRow::Rejected {
                step: 1,
                reason: RejectReason::DuplicateCallId
            })
        );
    }

    /// `SPEC A2` step 2: a final answer stops the run, and the verdict
    /// hands back its text.
    #[test]
    fn final_stops_even_with_no_tool_attempts_left() {
        let mut run: Run = Run::new(RunLimits::new(2, 0).unwrap(), tools());
        let fin = action(r#"{"kind":"final","text":"done"}"#);
        let verdict = run.decide(Some(&fin)).unwrap();
        assert_eq!(verdict.status(), Some(Status::Final));
        let Verdict::Final { text } = verdict else {
            panic!("not final")
        };
        assert_eq!(text.as_str(), "done");
        assert_eq!(run.status(), Some(Status::Final));
        assert_eq!(run.trace(), &[TraceRow::Final { step: 0 }]);
    }

    #[test]
    fn zero_tool_budget_refuses_the_first_tool_action() {
        let mut run: Run = Run::new(RunLimits::new(2, 0).unwrap(), tools());
        let call = add("c1");
        assert_eq!(
            run.decide(Some(&call)),
            Ok(Verdict::Stop {
                status: Status::ToolBudget,
                call: Some(call_of(&call))
            })
        );
        assert_eq!(run.tool_attempts(), 0);
    }

    #[test]
    fn unknown_tool_counts_an_attempt_without_executing() {
        let mut run: Run = Run::new(RunLimits::new(2, 4).unwrap(), ToolSet::new());
        let call = add("c1");
        let verdict = run.decide(Some(&call));
        assert_eq!(
            verdict,
            Ok(Verdict::UnknownTool {
                call: call_of(&call),
                progress: Progress::Continue
            })
        );
        assert_eq!(verdict.unwrap().status(), None);
        assert_eq!(run.tool_attempts(), 1);
        assert!(matches!(
            run.trace()[0],
            TraceRow::Tool {
                executed: false,
                ok: false,
                ..
            }
        ));
        assert!(!run.awaiting_outcome());
        assert_eq!(run.restored_pending(), None);
        let last = add("c2");
        let verdict = run.decide(Some(&last)).unwrap();
        assert_eq!(verdict.status(), Some(Status::DecisionBudget));
    }

    #[test]
    fn policy_error_is_recorded_and_stops() {
        let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
        assert_eq!(
            run.decide(None::<&Action<8>>),
            Ok(Verdict::Stop {
                status: Status::PolicyError,
                call: None
            })
        );
        assert_eq!(
            run.trace(),
            &[TraceRow::Rejected {
                step: 0,
                reason: RejectReason::InvalidPolicyAction
            }]
        );
    }

    #[test]
    fn oversize_result_is_a_tool_error_but_executed() {
        let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
        let pending = execute(&mut run, &add("c1"));
        let at_edge = "x".repeat(4094);
        assert_eq!(
            run.complete(pending, Some(at_edge.as_str())).unwrap().data,
            ObservationData::Result { bytes: 4096 }
        );
        let pending = execute(&mut run, &add("c2"));
        let over = "x".repeat(4095);
        assert_eq!(
            run.complete(pending, Some(over.as_str())).unwrap().data,
            ObservationData::ToolError
        );
        assert!(matches!(
            run.trace()[1],
            TraceRow::Tool {
                executed: true,
                ok: false,
                ..
            }
        ));
        let pending = execute(&mut run, &add("c3"));
        assert_eq!(
            run.complete(pending, Some(&f64::NAN)).unwrap().data,
            ObservationData::ToolError
        );
    }

    #[test]
    fn a_refused_call_is_counted_but_recorded_as_not_executed() {
        let mut run: Run = Run::new(RunLimits::new(2, 4).unwrap(), tools());
        let pending = execute(&mut run, &add("c1"));
        assert_eq!(run.refuse(pending), Ok(Progress::Continue));
        assert_eq!(run.tool_attempts(), 1);
        assert!(matches!(
            run.trace()[0],
            TraceRow::Tool {
                executed: false,
                ok: false,
                ..
            }
        ));
        let pending = execute(&mut run, &add("c2"));
        assert_eq!(
            run.refuse(pending),
            Ok(Progress::Stopped(Status::DecisionBudget))
        );
    }

    /// Issue 11: a token ends only the call it was made for; one of another
    /// run changes nothing and is named for what it is.
    #[test]
    fn a_token_of_another_run_is_refused_and_changes_nothing() {
        let mut a: Run = Run::new(RunLimits::DEFAULT, tools());
        let mut b: Run = Run::new(RunLimits::DEFAULT, tools());
        let foreign = execute(&mut a, &add("a1"));
        // b awaits no outcome at all.
        assert_eq!(
            b.complete(Pending { step: 0 }, Some(&1)),
            Err(RunError::NoPendingCall)
        );
        assert_eq!(b.refuse(Pending { step: 0 }), Err(RunError::NoPendingCall));
        // b awaits the outcome of another round.
        let own = execute(&mut b, &add("b1"));
        b.complete(own, Some(&1)).unwrap();
        let own = execute(&mut b, &add("b2"));
        assert_eq!(b.complete(foreign, Some(&1)), Err(RunError::NoPendingCall));
        assert!(b.awaiting_outcome());
        assert_eq!(b.trace().len(), 2);
        assert_eq!(b.restored_pending(), Some(Pending { step: 1 }));
        assert_eq!(b.complete(own, Some(&1)).unwrap().data.word(), None);
        // A stopped run says so.
        let fin = action(r#"{"kind":"final","text":"done"}"#);
        b.decide(Some(&fin)).unwrap();
        assert_eq!(
            b.complete(Pending { step: 2 }, Some(&1)),
            Err(RunError::Stopped(Status::Final))
        );
        let stray = a.restored_pending().unwrap();
        assert_eq!(stray.step(), 0);
        assert_eq!(a.refuse(stray), Ok(Progress::Continue));
        assert_eq!(a.restored_pending(), None);
    }

    #[test]
    fn out_of_order_calls_are_errors() {
        let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
        let _pending = execute(&mut run, &add("c1"));
        assert_eq!(run.decide(Some(&add("c2"))), Err(RunError::AwaitingOutcome));
    }

    #[test]
    fn limits_boundaries() {
        assert!(RunLimits::new(1, 0).is_ok());
        assert!(RunLimits::new(32, 16).is_ok());
        assert_eq!(RunLimits::new(0, 0), Err(RunLimitsError::MaxDecisions));
        assert_eq!(RunLimits::new(33, 0), Err(RunLimitsError::MaxDecisions));
        assert_eq!(RunLimits::new(1, 17), Err(RunLimitsError::MaxToolCalls));
    }

    #[test]
    fn tool_set_boundaries() {
        let mut set = ToolSet::<8>::new();
        for i in 0..8 {
            assert_eq!(set.try_add(&format!("t{i}")), Ok(i));
        }
        assert_eq!(set.try_add("t9"), Err(ToolSetError::Full));
        let mut set = ToolSet::<8>::new();
        set.try_add("a").unwrap();
        assert_eq!(set.try_add("a"), Err(ToolSetError::Duplicate));
        assert!(matches!(
            set.try_add("1a"),
            Err(ToolSetError::InvalidName(_))
        ));
    }

    /// Issue 11 (one tool table), `SPEC A2`: a run's tools are entries of
    /// the one table, registered under A1's stricter names (the table
    /// itself takes `[A-Za-z0-9_-]{1,64}`): a leading digit or a 41st
    /// character is refused, and refused as the table refuses nothing; the
    /// run's table has every registered tool at its index with rule `run`,
    /// a spec's approval and signature, no rule for others and no cap.
    #[test]
    fn a_tool_set_keeps_a1_names_on_the_one_table() {
        use crate::registry::{ParamKind, ToolSpec};
        let mut set = ToolSet::<4>::new();
        let long = "x".repeat(41);
        for name in ["0abc", "-a", long.as_str()] {
            assert!(crate::tools::ToolName::new(name).is_ok(), "{name:?}");
            assert!(
                matches!(set.try_add(name), Err(ToolSetError::InvalidName(_))),
                "{name:?}"
            );
        }
        assert!(set.table().is_empty());
        assert_eq!(set.try_add(&"x".repeat(40)), Ok(0));
        const P: &[Param] = &[Param {
            key: "on",
            kind: ParamKind::Bool,
            required: true,
        }];
        let spec = ToolSpec {
            name: "valve",
            description: "",
            params: P,
            needs_approval: true,
        };
        assert_eq!(set.try_add_spec(&spec), Ok(1));
        assert_eq!(set.try_add_spec(&spec), Err(ToolSetError::Duplicate));
        let run: Run<32, 4> = Run::new(RunLimits::DEFAULT, set);
        let tools = run.tools();
        assert_eq!(tools.others(), ToolRule::Unknown);
        assert_eq!(
            tools.get(0).map(|e| (e.rule(), e.signature())),
            Some((ToolRule::Run, None))
        );
        let valve = tools.get(1).unwrap();
        assert_eq!(
            (valve.rule(), valve.signature(), valve.cap()),
            (ToolRule::NeedsApproval, Some(P), None)
        );
        assert_eq!(tools.caps().count(), 0);
    }

    /// `SPEC A2`: every status and rejection reason is spelled as the
    /// contract spells it (the words of `--json` traces and the device's
    /// replies), and the run's errors say what went wrong. Found by
    /// cargo-mutants (the whole-core run, shard 2/4).
    #[test]
    fn statuses_reasons_and_errors_are_spelled_as_the_contract_and_say_why() {
        for (status, said) in [
            (Status::Final, "final"),
            (Status::PolicyError, "policy-error"),
            (Status::DuplicateCall, "duplicate-call"),
            (Status::ToolBudget, "tool-budget"),
            (Status::DecisionBudget, "decision-budget"),
        ] {
            assert_eq!((status.as_str(), status.to_string().as_str()), (said, said));
        }
        for (reason, said) in [
            (RejectReason::InvalidPolicyAction, "invalid-policy-action"),
            (RejectReason::DuplicateCallId, "duplicate-call-id"),
            (RejectReason::ToolBudget, "tool-budget"),
        ] {
            assert_eq!(reason.as_str(), said);
        }
        assert_eq!(
            ToolSetError::Duplicate.to_string(),
            "tool name registered twice"
        );
        assert_eq!(ToolSetError::Full.to_string(), "more than 8 tools");
        let invalid = ToolSet::<8>::new().try_add("1a").unwrap_err();
        assert!(invalid.to_string().starts_with("tool name "), "{invalid}");
        assert!(
            invalid.to_string().contains(Identifier::PATTERN),
            "{invalid}"
        );
        assert_eq!(
            RunError::Stopped(Status::Final).to_string(),
            "the run has stopped (final)"
        );
        assert_eq!(
            RunError::AwaitingOutcome.to_string(),
            "a tool outcome is awaited before the next decision"
        );
        assert_eq!(
            RunError::NoPendingCall.to_string(),
            "this run awaits no such tool call"
        );
    }

    /// `SPEC A2`: the run's budgets are checked when they are made, and a
    /// budget out of range is refused with the range it must be in (what
    /// `budgetgate run` and the device console print). Found by
    /// cargo-mutants (a rerun over the whole-core shard 1/4's functions).
    #[test]
    fn budgets_out_of_range_are_refused_with_their_range() {
        assert_eq!(RunLimits::new(0, 4), Err(RunLimitsError::MaxDecisions));
        assert_eq!(RunLimits::new(33, 4), Err(RunLimitsError::MaxDecisions));
        assert_eq!(RunLimits::new(8, 17), Err(RunLimitsError::MaxToolCalls));
        assert!(RunLimits::new(32, 16).is_ok() && RunLimits::new(1, 0).is_ok());
        assert_eq!(
            RunLimitsError::MaxDecisions.to_string(),
            "max_decisions must be an integer 1..=32"
        );
        assert_eq!(
            RunLimitsError::MaxToolCalls.to_string(),
            "max_tool_calls must be an integer 0..=16"
        );
    }

    #[test]
    fn thirty_two_rounds_fill_the_trace_exactly() {
        let mut run: Run = Run::new(RunLimits::new(32, 16).unwrap(), ToolSet::new());
        for i in 0..16 {
            let proposal = add(&format!("c{i}"));
            let v = run.decide(Some(&proposal)).unwrap();
            assert!(matches!(
                v,
                Verdict::UnknownTool {
                    progress: Progress::Continue,
                    ..
                }
            ));
        }
        // 16 attempts used: every later tool round is refused with tool-budget.
        let proposal = add("cx");
        assert_eq!(
            run.decide(Some(&proposal)).map(|v| v.status()),
            Ok(Some(Status::ToolBudget))
        );
        assert_eq!(run.trace().len(), 17);
    }
}
