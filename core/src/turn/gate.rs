//! The turn gate: budget checks before each model call, and the decision on
//! every tool call of each response (`SPEC C`).
//!
//! This file holds the gate itself: its limits, its phases, its state and
//! what it reports. The steps of a turn live beside it: the model call
//! (`model_call`), the tool calls (`tool_call`), the closing for a summary
//! (`closing`), and the reasons a step is refused (`errors`).

use core::fmt;

use heapless::Vec;

use super::fingerprint::CallFingerprint;
use super::ids::{CallIds, Seen};
use super::outcome::{
    ErrorResult, ExhaustReason, Exhaustion, RefusalCounts, RunStatus, StopReason,
};
use super::rules::{CallId, ToolName, ToolRules, ToolRulesError};
use super::usage::TokenUsage;
use crate::budget::{Ledger, Limit};
use crate::engine;
use crate::engine::loops::{LoopRules, Window};
use crate::limits::{
    DEFAULT_MAX_MODEL_CALLS, DEFAULT_MAX_REPEATS, DEFAULT_MAX_RUN_MILLIS, DEFAULT_MAX_RUN_TOKENS,
    MAX_DISTINCT_CALLS, MAX_RUN_CALL_IDS, MAX_TOOLS, MAX_TURN_CALLS,
};

mod closing;
mod errors;
mod model_call;
mod tool_call;

pub use closing::Closing;
pub use errors::{
    AdmitError, ApprovalError, CloseError, FinishError, ProposeError, RecordError, ReportError,
    ResumeError,
};
pub use model_call::{Admission, Recorded};
pub use tool_call::{
    ApprovalAnswer, Approver, CallState, CallVerdict, ProposedCall, ToolOutcome, TurnEnd,
    TOOL_ERROR_PREFIX,
};

/// How the token budget is enforced (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TokenMode {
    /// The reference's rule: before each call, stop if the tokens so far
    /// reached the limit (`>=`). A call that starts below the limit may end
    /// above it, so the budget can be overshot by up to one call's usage.
    #[default]
    AfterTheFact,
    /// Stricter: before each call the caller declares a trusted upper bound
    /// for it (its `max_tokens` plus the known input size, cache included),
    /// and the call is refused unless the tokens so far plus that bound stay
    /// within the limit. The real usage is then recorded. As long as the
    /// bound holds (the API enforces `max_tokens`; the input is known before
    /// sending), the budget can never be overshot.
    Reserve,
}

impl TokenMode {
    /// `after-the-fact` or `reserve` (`SPEC C`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AfterTheFact => "after-the-fact",
            Self::Reserve => "reserve",
        }
    }
}

/// The limits of a turn-gated run (`SPEC C`, the reference's `Presupuesto`).
///
/// Every value is allowed: a zero limit stops the run before its first
/// model call, `max_repeats: 0` refuses every tool call as a repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TurnLimits {
    /// Most model calls (`max_pasos`, default 15).
    pub max_model_calls: u32,
    /// Most accumulated tokens, all four usage fields (`max_tokens_totales`, default 150 000).
    pub max_tokens: u64,
    /// Most wall time since the run began, in milliseconds (`max_segundos`, default 120 000).
    pub max_millis: u64,
    /// Most identical calls (same tool, same arguments in canonical form);
    /// the next one is refused (`max_repeticiones`, default 2).
    pub max_repeats: u32,
    /// Most tool attempts in the whole run, or `None` for no such limit (the
    /// reference has none; default `None`). Parallel calls of one response are
    /// counted one by one, in order.
    pub max_tool_calls: Option<u32>,
    /// How the token limit is enforced (default [`TokenMode::AfterTheFact`]).
    pub token_mode: TokenMode,
    /// Most cost in micro-dollars (millionths of a US dollar), checked with
    /// `>=` before each model call after time, or `None` for no cost limit
    /// (the reference has none; default `None`). The caller prices each
    /// response ([`TurnGate::record_priced`]); with a cost limit, a response
    /// recorded without a price stops the run before the next call
    /// (`unpriced-model`): a cost budget never counts a call as free.
    pub max_cost_micros: Option<u64>,
}

impl TurnLimits {
    /// The reference's defaults: 15 model calls, 150 000 tokens, 120 s,
    /// 2 repeats, no tool-attempt limit, after-the-fact token checks (`SPEC C`).
    pub const DEFAULT: Self = Self {
        max_model_calls: DEFAULT_MAX_MODEL_CALLS,
        max_tokens: DEFAULT_MAX_RUN_TOKENS,
        max_millis: DEFAULT_MAX_RUN_MILLIS,
        max_repeats: DEFAULT_MAX_REPEATS,
        max_tool_calls: None,
        token_mode: TokenMode::AfterTheFact,
        max_cost_micros: None,
    };
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Where the gate is in its cycle, named in errors (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GatePhase {
    /// Between turns: [`TurnGate::begin_call`] comes next.
    Ready,
    /// A model call is in flight: [`TurnGate::record`] comes next.
    AwaitingResponse,
    /// A response's tool calls are being decided and answered.
    InTurn,
    /// The run has a final status.
    Finished,
}

impl fmt::Display for GatePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ready => "between turns",
            Self::AwaitingResponse => "awaiting a model response",
            Self::InTurn => "deciding a response's tool calls",
            Self::Finished => "finished",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tracked {
    id: CallId,
    state: CallState,
    /// The call's fingerprint, for its outcome in the loop window.
    fingerprint: Option<CallFingerprint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    AwaitingResponse { admitted: engine::Admitted },
    InTurn { stop: StopReason },
    Finished(RunStatus),
}

/// A turn-gated run (`SPEC C`): the budget (model calls, tokens, wall time,
/// repetitions, optionally tool attempts), the tool rules with approval, and
/// the bookkeeping that leaves no tool call without exactly one result.
///
/// Sans-IO: the gate never calls the model, a tool, an approver of its own
/// or a clock. Time is a monotonic instant in milliseconds that the caller
/// passes in (a clock that goes back counts as no time passing).
///
/// The cycle, in the reference's order:
/// 1. [`begin_call`](Self::begin_call) (or
///    [`begin_reserved_call`](Self::begin_reserved_call) in reserve mode)
///    checks steps, tokens, time — each with `>=`, as `agotado()` does — and
///    either allows the model call or ends the run `incomplete`;
/// 2. [`record`](Self::record) counts the call and its usage and takes the
///    response's stop reason;
/// 3. [`propose`](Self::propose) decides each `tool_use` block, in order:
///    stop reason (`cut-off`, `not-tool-turn`: the response's, before any
///    call's), tool name (`[A-Za-z0-9_-]{1,64}`, else `invalid-name`), call
///    id (`duplicate-call-id`), arguments, repetition, tool-attempt budget,
///    tool cap, tool rule (unknown / approval / run): the per-call order
///    every front-end keeps (`SPEC E`, one check order). Refused calls are answered on the spot;
///    [`approve`](Self::approve) takes approvals, [`report`](Self::report)
///    the outcome of each executed call;
/// 4. [`finish_turn`](Self::finish_turn) checks that every call has its
///    answer and says whether to continue, or that the run is complete or
///    stopped with an error.
///
/// **Parallel calls.** The calls of one response are decided one by one, in
/// the order given; each is checked against what is left after the ones
/// before it. With one tool attempt left and two calls, the first may run
/// and the second is refused (`tool-budget`); no call is allowed before its
/// own check. An attempt is counted when a call passes the repetition and
/// budget checks, whether the tool then turns out unknown, is refused by the
/// approver, or runs (an attempt bounds executions from above). The
/// repetition count is raised for every call decided in a `tool_use`
/// response, refused or not, as the reference's `repetida` does.
///
/// **Call ids over the whole run** (`SPEC E`). Every id proposed is
/// remembered for the rest of the run (as a 64-bit fingerprint): a call
/// whose id an earlier response used is refused `duplicate-call-id` and
/// answered, after the response's stop reason and the name only, so it
/// never runs twice. The same id twice in one response is
/// [`ProposeError::DuplicateCallId`] (the caller cannot answer both with
/// one `tool_use_id`), unless the response or the name refuses the second
/// block first: that refusal is answered, untracked.
///
/// Capacities: `CALLS` calls tracked per response (16), `SEEN` distinct
/// calls remembered for repetitions (64), `TOOLS` named tool rules (8),
/// `IDS` slots for the run's call ids (128, of which three quarters, 96, can
/// be filled). A call past `CALLS` is refused `turn-capacity`, a new
/// distinct call past `SEEN` is refused `repeat-capacity`, a new id past the
/// id table's capacity `call-id-capacity`: refused, never dropped or
/// forgotten.
#[derive(Debug, Clone)]
pub struct TurnGate<
    const CALLS: usize = MAX_TURN_CALLS,
    const SEEN: usize = MAX_DISTINCT_CALLS,
    const TOOLS: usize = MAX_TOOLS,
    const IDS: usize = MAX_RUN_CALL_IDS,
> {
    limits: TurnLimits,
    rules: ToolRules<TOOLS>,
    /// Model calls, tokens (the total), time, cost and tool attempts, with
    /// the per-tool caps: the core's one budget engine (`SPEC E`).
    ledger: Ledger<TOOLS>,
    /// The tokens field by field (the ledger counts their total).
    usage: TokenUsage,
    /// A response was recorded without a price while a cost limit is set.
    unpriced: bool,
    seen: Vec<(CallFingerprint, u32), SEEN>,
    call_ids: CallIds<IDS>,
    calls: Vec<Tracked, CALLS>,
    refusals: RefusalCounts,
    tool_errors: u32,
    phase: Phase,
    /// `[loops]`: the thresholds ([`LoopRules::OFF`] unless
    /// [`set_loops`](Self::set_loops)), and the run's last calls.
    loops: LoopRules,
    window: Window,
    /// The engine's last refusal of a proposed call, with its figures.
    last_refusal: Option<engine::Refusal>,
}

/// A run's memory as the engine reads it ([`engine::State`]): the id
/// already looked up (the gate remembers every id it is shown, even one it
/// then refuses for its name), the distinct calls, the run's ledger.
struct RunState<'g, const SEEN: usize, const TOOLS: usize> {
    id: Seen,
    repeats: &'g mut Vec<(CallFingerprint, u32), SEEN>,
    ledger: &'g mut Ledger<TOOLS>,
    /// A sub-agent's own ledger, for its call ([`TurnGate::propose_for`]).
    agent: Option<&'g mut Ledger<TOOLS>>,
    unpriced: &'g mut bool,
    window: &'g mut Window,
}

impl<const SEEN: usize, const TOOLS: usize> engine::State<TOOLS> for RunState<'_, SEEN, TOOLS> {
    type Error = core::convert::Infallible;

    fn see_id(&mut self, _id: &str) -> Result<Seen, Self::Error> {
        Ok(self.id)
    }

    fn raise_repeat(&mut self, key: CallFingerprint) -> Result<Option<u64>, Self::Error> {
        Ok(match self.repeats.iter_mut().find(|(k, _)| *k == key) {
            Some((_, count)) => {
                *count = count.saturating_add(1);
                Some(u64::from(*count))
            }
            None => self.repeats.push((key, 1)).ok().map(|()| 1),
        })
    }

    fn ledgers(&mut self) -> engine::Ledgers<'_, TOOLS> {
        engine::Ledgers {
            session: self.ledger,
            agent: self.agent.as_deref_mut(),
        }
    }

    fn unpriced(&mut self) -> Result<bool, Self::Error> {
        Ok(*self.unpriced)
    }

    fn add_unpriced(&mut self, _model: &str) -> Result<(), Self::Error> {
        *self.unpriced = true;
        Ok(())
    }

    fn loop_window(&mut self) -> Result<Option<&mut Window>, Self::Error> {
        Ok(Some(self.window))
    }
}

impl<const CALLS: usize, const SEEN: usize, const TOOLS: usize, const IDS: usize>
    TurnGate<CALLS, SEEN, TOOLS, IDS>
{
    const FITS: () = assert!(
        CALLS >= 1 && CALLS <= u16::MAX as usize && SEEN >= 1 && IDS >= 1,
        "a turn gate tracks 1..=65535 calls per response, at least one distinct call and one call id"
    );

    /// A run that began at `now_ms` (a monotonic instant in milliseconds)
    /// and has made no model call yet (`SPEC C`).
    pub fn new(limits: TurnLimits, rules: ToolRules<TOOLS>, now_ms: u64) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        let mut ledger = Ledger::new(now_ms);
        ledger.set_max(Limit::ModelCalls, Some(u64::from(limits.max_model_calls)));
        ledger.set_max(Limit::Tokens, Some(limits.max_tokens));
        ledger.set_max(Limit::Millis, Some(limits.max_millis));
        ledger.set_max(Limit::CostMicros, limits.max_cost_micros);
        ledger.set_max(Limit::ToolCalls, limits.max_tool_calls.map(u64::from));
        // Cannot fail: the ledger counts as many tools as the table lists.
        let _ = ledger.track_caps(&rules);
        Self {
            limits,
            rules,
            ledger,
            usage: TokenUsage::ZERO,
            unpriced: false,
            seen: Vec::new(),
            call_ids: CallIds::new(),
            calls: Vec::new(),
            refusals: RefusalCounts::new(),
            tool_errors: 0,
            phase: Phase::Ready,
            loops: LoopRules::OFF,
            window: Window::new(),
            last_refusal: None,
        }
    }

    /// Swaps the loop window with `other` (see [`Window::swap`]): a
    /// front-end whose run has sub-agents calling in parallel keeps one
    /// window per agent and swaps the agent's in before its calls.
    pub fn swap_loop_window(&mut self, other: &mut Window) {
        self.window.swap(other);
    }

    /// The engine's refusal of the last call [`propose`](Self::propose)
    /// refused for a limit or a rule (with its figures: the pattern of a
    /// `no-progress`, the count of a `repeat`), for a front-end that words
    /// it ([`engine::Refusal::detail`]); `None` after a call let through.
    pub fn last_refusal(&self) -> Option<&engine::Refusal> {
        self.last_refusal.as_ref()
    }

    /// The run's memory as the engine reads it, with the id looked up.
    fn state(&mut self, id: Seen) -> RunState<'_, SEEN, TOOLS> {
        RunState {
            id,
            repeats: &mut self.seen,
            ledger: &mut self.ledger,
            agent: None,
            unpriced: &mut self.unpriced,
            window: &mut self.window,
        }
    }

    /// Looks for loops (`[loops]`, [`engine::loops`]) with `rules` from
    /// now on: a call that would complete a pattern of calls whose results
    /// (given with [`report_result`](Self::report_result)) do not change is
    /// refused `no-progress`.
    pub fn set_loops(&mut self, rules: LoopRules) {
        self.loops = rules;
    }
    fn exhaustion(
        &self,
        reason: ExhaustReason,
        limit: u64,
        elapsed_ms: u64,
        worst_case: u64,
    ) -> Exhaustion {
        Exhaustion {
            reason,
            steps: self.steps(),
            usage: self.usage,
            cost_micros: self.cost_micros(),
            elapsed_ms,
            limit,
            worst_case,
        }
    }

    /// Starts a new question on the same budget after the run completed or
    /// stopped with an error (`SPEC C`): as calling the reference's `agente`
    /// again with the same `Presupuesto`. Steps, tokens, time since the
    /// first start, repetitions and tool attempts carry over.
    pub fn resume(&mut self) -> Result<(), ResumeError> {
        match self.phase {
            Phase::Finished(RunStatus::Incomplete(_)) => Err(ResumeError::Exhausted),
            Phase::Finished(_) => {
                self.phase = Phase::Ready;
                Ok(())
            }
            _ => Err(ResumeError::NotFinished(self.phase())),
        }
    }

    /// The run's status (`SPEC C`).
    pub fn status(&self) -> RunStatus {
        match self.phase {
            Phase::Finished(status) => status,
            _ => RunStatus::Running,
        }
    }

    /// Where the gate is in its cycle (`SPEC C`).
    pub fn phase(&self) -> GatePhase {
        match self.phase {
            Phase::Ready => GatePhase::Ready,
            Phase::AwaitingResponse { .. } => GatePhase::AwaitingResponse,
            Phase::InTurn { .. } => GatePhase::InTurn,
            Phase::Finished(_) => GatePhase::Finished,
        }
    }

    /// The stop reason of the response whose turn is open (`SPEC C`);
    /// `None` in every other phase: before the first response, while one
    /// is awaited, and once the turn or the run has ended (unlike
    /// [`TurnGate::calls`], which keeps the last response's calls).
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self.phase {
            Phase::InTurn { stop } => Some(stop),
            _ => None,
        }
    }

    /// Model calls recorded (`SPEC C`).
    pub fn steps(&self) -> u32 {
        u32::try_from(self.ledger.used(Limit::ModelCalls)).unwrap_or(u32::MAX)
    }

    /// Cost recorded so far, in micro-dollars ([`record_priced`](Self::record_priced)).
    pub fn cost_micros(&self) -> u64 {
        self.ledger.used(Limit::CostMicros)
    }

    /// The budget ledger: used and maximum per [`Limit`] and the calls
    /// counted per capped tool (`SPEC E`), e.g. to store it
    /// ([`Ledger::to_record`]).
    pub fn ledger(&self) -> &Ledger<TOOLS> {
        &self.ledger
    }

    /// Caps the calls of tool `name` at `max` over the run (`SPEC E`:
    /// per-tool caps): a call past it is refused `tool-cap`, after the
    /// repetition and tool-attempt checks, and is not counted as an
    /// attempt. The cap is the tool table's ([`ToolRules::try_add_cap`]:
    /// a tool not listed is listed with the rule for others), its count the
    /// ledger's. Fails as the table does: the tool has a cap already
    /// ([`ToolRulesError::DuplicateCap`]) or the table is full.
    pub fn try_add_cap(&mut self, name: ToolName, max: u32) -> Result<(), ToolRulesError> {
        self.rules.try_add_cap(name.as_str(), max)?;
        // Cannot fail: the ledger counts as many tools as the table lists.
        let _ = self.ledger.track_caps(&self.rules);
        Ok(())
    }

    /// Tokens so far, field by field (`SPEC C`).
    pub fn usage(&self) -> TokenUsage {
        self.usage
    }

    /// Tokens left before the limit (0 once reached) (`SPEC C`).
    pub fn remaining_tokens(&self) -> u64 {
        self.limits
            .max_tokens
            .saturating_sub(self.ledger.used(Limit::Tokens))
    }

    /// Tool attempts counted (`SPEC C`).
    pub fn tool_attempts(&self) -> u32 {
        u32::try_from(self.ledger.used(Limit::ToolCalls)).unwrap_or(u32::MAX)
    }

    /// Executed calls reported as failed (`SPEC C`).
    pub fn tool_errors(&self) -> u32 {
        self.tool_errors
    }

    /// Refusals so far, per reason (`SPEC C`).
    pub fn refusals(&self) -> &RefusalCounts {
        &self.refusals
    }

    /// Milliseconds since the run began, at `now_ms` (0 if the clock went back) (`SPEC C`).
    pub fn elapsed_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.ledger.started_ms())
    }

    /// The limits (`SPEC C`).
    pub fn limits(&self) -> &TurnLimits {
        &self.limits
    }

    /// The tool rules (`SPEC C`).
    pub fn rules(&self) -> &ToolRules<TOOLS> {
        &self.rules
    }

    /// The calls of the current (or last) response and where each stands,
    /// in proposal order (calls refused `turn-capacity` are not tracked) (`SPEC C`).
    pub fn calls(&self) -> impl Iterator<Item = (&CallId, CallState)> {
        self.calls.iter().map(|t| (&t.id, t.state))
    }

    /// The calls of the current response still without an answer (`SPEC C`).
    pub fn unanswered(&self) -> impl Iterator<Item = &CallId> {
        self.calls
            .iter()
            .filter(|t| t.state.is_open())
            .map(|t| &t.id)
    }

    /// The error result answering a refused call of the current response (`SPEC C`).
    pub fn refusal_result<'a>(&self, call_id: &'a str) -> Option<ErrorResult<'a>> {
        self.calls.iter().find_map(|t| match t.state {
            CallState::Refused(reason) if t.id.as_str() == call_id => {
                Some(reason.result_for(call_id))
            }
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::rules::NameError;
    use std::format;
    use std::string::ToString;

    /// `SPEC C`: each way the turn gate refuses to go on says why, naming
    /// the phase it is in where that is the reason; the token modes are
    /// spelled as the budget file spells them.
    #[test]
    fn each_turn_gate_error_says_why_and_the_phase() {
        assert_eq!(TokenMode::AfterTheFact.as_str(), "after-the-fact");
        assert_eq!(TokenMode::Reserve.as_str(), "reserve");
        let phases = [
            (GatePhase::Ready, "between turns"),
            (GatePhase::AwaitingResponse, "awaiting a model response"),
            (GatePhase::InTurn, "deciding a response's tool calls"),
            (GatePhase::Finished, "finished"),
        ];
        for (phase, words) in phases {
            assert_eq!(phase.to_string(), words);
        }
        let cases: [(std::string::String, &str); 17] = [
            (
                AdmitError::NotReady(GatePhase::InTurn).to_string(),
                "cannot begin a model call while deciding a response's tool calls",
            ),
            (
                AdmitError::ReservationRequired.to_string(),
                "reserve mode: declare the call's worst-case tokens",
            ),
            (
                RecordError::NotAwaitingResponse(GatePhase::Ready).to_string(),
                "no model call is in flight (the gate is between turns)",
            ),
            (
                ProposeError::NotInTurn(GatePhase::Finished).to_string(),
                "no response is being handled (the gate is finished)",
            ),
            (
                ProposeError::InvalidCallId(NameError::Empty).to_string(),
                "call id ",
            ),
            (
                ProposeError::DuplicateCallId.to_string(),
                "call id proposed twice in one response",
            ),
            (
                ApprovalError::UnknownCallId.to_string(),
                "no call with this id was proposed in this response",
            ),
            (
                ApprovalError::NotAwaitingApproval.to_string(),
                "this call is not awaiting approval",
            ),
            (
                ReportError::UnknownCallId.to_string(),
                "result for a call id that was never proposed",
            ),
            (
                ReportError::AlreadyAnswered.to_string(),
                "result for a call that already has its answer",
            ),
            (
                ReportError::AwaitingApproval.to_string(),
                "result for a call still awaiting approval",
            ),
            (
                FinishError::NotInTurn(GatePhase::AwaitingResponse).to_string(),
                "no response is being handled (the gate is awaiting a model response)",
            ),
            (
                FinishError::Unanswered(2).to_string(),
                "2 tool call(s) still lack a result",
            ),
            (
                CloseError::AwaitingResponse.to_string(),
                "a model call is in flight; record its response first",
            ),
            (
                CloseError::Complete.to_string(),
                "the run is complete; there is nothing to close",
            ),
            (
                ResumeError::NotFinished(GatePhase::Ready).to_string(),
                "the run has not finished (it is between turns)",
            ),
            (
                ResumeError::Exhausted.to_string(),
                "the budget is exhausted",
            ),
        ];
        for (said, words) in &cases {
            assert!(said.starts_with(words), "{said:?} against {words:?}");
        }
        let invalid = ProposeError::InvalidCallId(NameError::Empty).to_string();
        assert_eq!(invalid, format!("call id {}", NameError::Empty));
        assert!(invalid.len() > "call id ".len());
    }
}
