//! The turn gate: budget checks before each model call, and the decision on
//! every tool call of each response (`SPEC C`).

use core::fmt;

use heapless::Vec;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::fingerprint::{ArgsFingerprint, CallFingerprint};
use super::ids::{CallIds, Seen};
use super::outcome::{
    ErrorResult, ExhaustReason, Exhaustion, RefusalCounts, RefusalReason, RunStatus, StopReason,
};
use super::rules::{CallId, NameError, ToolName, ToolRules, ToolRulesError};
use super::usage::TokenUsage;
use crate::budget::{Ledger, Limit};
use crate::engine;
use crate::engine::loops::{self, LoopRules, Window};
use crate::limits::{
    DEFAULT_MAX_MODEL_CALLS, DEFAULT_MAX_REPEATS, DEFAULT_MAX_RUN_MILLIS, DEFAULT_MAX_RUN_TOKENS,
    MAX_DISTINCT_CALLS, MAX_RUN_CALL_IDS, MAX_TOOLS, MAX_TURN_CALLS,
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

/// What [`TurnGate::begin_call`] allows (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Admission {
    /// Make the model call, then hand its response to [`TurnGate::record`].
    Proceed {
        /// This call's number, from 0.
        call: u32,
    },
    /// The budget is exhausted: do not call the model. The run's status is
    /// now `incomplete`; [`TurnGate::close`] builds the closing message.
    Exhausted(Exhaustion),
}

/// What [`TurnGate::record`] noted (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Recorded {
    /// Model calls made so far, this one included.
    pub steps: u32,
    /// Tokens so far, field by field.
    pub usage: TokenUsage,
    /// In reserve mode, by how much the real usage passed the declared bound
    /// (0 when it held). A non-zero value means the caller's bound was wrong
    /// and the budget may be overshot; the usage is recorded all the same.
    pub over_reservation: u64,
}

/// One tool call of a response, as the caller hands it to the gate (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProposedCall<'a> {
    /// The `tool_use` block's `id`.
    pub call_id: &'a str,
    /// The tool's name, exactly as the model wrote it: a name outside
    /// `[A-Za-z0-9_-]{1,64}` is refused `invalid-name` (`SPEC E`).
    pub name: &'a str,
    /// The fingerprint of the arguments ([`ArgsFingerprint::of_json`] and
    /// friends), or `None` when they could not be read (cut off, not JSON):
    /// such a call is refused as `invalid-arguments` in a `tool_use` turn.
    pub arguments: Option<ArgsFingerprint>,
    /// The arguments as received, for an approver to show; may be empty.
    pub input: &'a [u8],
}

/// The gate's decision on one tool call (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CallVerdict {
    /// Run it, then report the outcome with [`TurnGate::report`].
    Execute,
    /// Ask the approver; report the answer with [`TurnGate::approve`].
    NeedsApproval,
    /// Do not run it. The call is already answered: send
    /// [`RefusalReason::result_for`] as its `tool_result`.
    Refused(RefusalReason),
}

/// An approver's answer (`SPEC C`): the one [`crate::approval::Answer`].
pub use crate::approval::Answer as ApprovalAnswer;

/// Who decides on tools that need approval (`SPEC C`): a terminal prompt,
/// a policy file, a physical button. Sans-IO friendly: an approver that
/// cannot answer at once returns [`ApprovalAnswer::Later`] and the caller
/// reports the answer when it comes.
pub trait Approver {
    /// Answers for one call whose tool needs approval.
    fn answer(&mut self, call: &ProposedCall<'_>) -> ApprovalAnswer;
}

impl<F: FnMut(&ProposedCall<'_>) -> ApprovalAnswer> Approver for F {
    fn answer(&mut self, call: &ProposedCall<'_>) -> ApprovalAnswer {
        self(call)
    }
}

/// What an executed tool did (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ToolOutcome {
    /// A result (`is_error: false`).
    Ok,
    /// It failed or raised: the caller answers with an error result whose
    /// text starts with [`TOOL_ERROR_PREFIX`] (the reference's `Error: {e}`).
    Error,
}

/// The start of the error result for a tool that failed: `Error: ` then the
/// failure's text, as the reference writes `f"Error: {e}"` (`SPEC C`).
pub const TOOL_ERROR_PREFIX: &str = "Error: ";

/// Where one call of the current response stands (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CallState {
    /// Allowed; its outcome is awaited.
    Executing,
    /// Its approval is awaited.
    AwaitingApproval,
    /// Refused; the refusal is its answer.
    Refused(RefusalReason),
    /// Executed and reported.
    Done(ToolOutcome),
}

impl CallState {
    /// Whether the call still needs an answer (`SPEC C`).
    pub const fn is_open(&self) -> bool {
        matches!(self, Self::Executing | Self::AwaitingApproval)
    }
}

/// How a response's turn ended, from [`TurnGate::finish_turn`] (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TurnEnd {
    /// `tool_use` (results sent back) or `pause_turn`: check the budget and
    /// call the model again.
    Continue,
    /// `end_turn`: the run is `complete`; the answer is the response's text.
    Complete,
    /// Any other stop reason: the run's status is `error` with this reason.
    Stopped(StopReason),
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

/// The closing after exhaustion (`SPEC C`): error results for every call
/// left unanswered ("Budget exhausted, not executed."), then the summary
/// request, all in one user message, sent with tools disabled
/// (`tool_choice` [`Closing::TOOL_CHOICE`]).
///
/// Serializes as that Messages API user message:
/// `{"role": "user", "content": [tool_result…, {"type": "text", "text": …}]}`.
/// The closing call itself is outside the budget, as in the reference; bound
/// it with a small `max_tokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing<const CALLS: usize = MAX_TURN_CALLS> {
    unanswered: Vec<CallId, CALLS>,
    status: RunStatus,
}

impl<const CALLS: usize> Closing<CALLS> {
    /// The text asking for the summary (`SPEC C`).
    pub const SUMMARY_REQUEST: &'static str = "The budget for this task is exhausted. Do not call any tools. Summarize what you found so far, and say what is still open.";

    /// The `tool_choice` to send with the closing call: tools disabled (`SPEC C`).
    pub const TOOL_CHOICE: &'static str = r#"{"type":"none"}"#;

    /// The calls answered by the closing, in proposal order (`SPEC C`).
    pub fn unanswered(&self) -> &[CallId] {
        &self.unanswered
    }

    /// The run's status after closing (`SPEC C`).
    pub fn status(&self) -> RunStatus {
        self.status
    }
}

impl<const CALLS: usize> Serialize for Closing<CALLS> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Content<'a>(&'a [CallId]);
        struct Text;
        impl Serialize for Text {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", Closing::<1>::SUMMARY_REQUEST)?;
                map.end()
            }
        }
        impl Serialize for Content<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len() + 1))?;
                for id in self.0 {
                    seq.serialize_element(&RefusalReason::BudgetExhausted.result_for(id.as_str()))?;
                }
                seq.serialize_element(&Text)?;
                seq.end()
            }
        }
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("role", "user")?;
        map.serialize_entry("content", &Content(&self.unanswered))?;
        map.end()
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
            agent: None,
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

    /// The reference's `agotado()`: the first limit reached, checked in the
    /// order steps, tokens, time, then cost, each with `>=`, then a response
    /// recorded without a price under a cost limit (`unpriced-model`);
    /// `None` if none is. Changes nothing. [`begin_call`](Self::begin_call)
    /// applies it (`SPEC C`).
    pub fn check(&self, now_ms: u64) -> Option<Exhaustion> {
        let stop = engine::spent_in_memory(&self.ledger, now_ms, self.unpriced)?;
        Some(self.exhaustion(stop.reason, stop.exceeded.max, self.elapsed_ms(now_ms), 0))
    }

    /// The time limit alone (`>=`), for a host that also bounds time
    /// between tool executions, since a slow call can pass the limit while
    /// checks happen only between steps. Steps and tokens are not looked at:
    /// as in the reference, the calls of a response that reached them still
    /// run, and the run stops before the next model call. A host that gets
    /// `Some` here leaves the remaining calls unrun and
    /// [`close`](Self::close)s (`SPEC C`).
    pub fn check_time(&self, now_ms: u64) -> Option<Exhaustion> {
        let elapsed_ms = self.elapsed_ms(now_ms);
        self.ledger
            .exhausted_at(Limit::Millis, now_ms)
            .map(|e| self.exhaustion(ExhaustReason::Time, e.max, elapsed_ms, 0))
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

    /// Checks the budget before a model call (`SPEC C`) in
    /// [`TokenMode::AfterTheFact`]. In reserve mode this is refused with
    /// [`AdmitError::ReservationRequired`].
    pub fn begin_call(&mut self, now_ms: u64) -> Result<Admission, AdmitError> {
        if self.limits.token_mode == TokenMode::Reserve {
            self.ready()?;
            return Err(AdmitError::ReservationRequired);
        }
        self.admit(now_ms, None)
    }

    /// Checks the budget before a model call whose usage cannot pass
    /// `worst_case_tokens` (its `max_tokens` plus its known input, cache
    /// included) (`SPEC C`, reserve mode). After the usual checks, the call
    /// is refused (`token-reserve`) unless the tokens so far plus the worst
    /// case stay within the limit. Also usable in after-the-fact mode, for
    /// a single stricter call.
    pub fn begin_reserved_call(
        &mut self,
        now_ms: u64,
        worst_case_tokens: u64,
    ) -> Result<Admission, AdmitError> {
        self.admit(now_ms, Some(worst_case_tokens))
    }

    fn ready(&self) -> Result<(), AdmitError> {
        match self.phase {
            Phase::Ready => Ok(()),
            _ => Err(AdmitError::NotReady(self.phase())),
        }
    }

    fn admit(&mut self, now_ms: u64, worst_case: Option<u64>) -> Result<Admission, AdmitError> {
        self.ready()?;
        let mut state = self.state(Seen::New);
        // The engine's one check before a model call: the limits in order,
        // then `unpriced-model`, then (with a worst case) the reservation,
        // held in the ledger until the response is recorded.
        let Ok(admitted) = engine::before_model_call(&mut state, now_ms, worst_case);
        match admitted {
            Ok(admitted) => {
                self.phase = Phase::AwaitingResponse { admitted };
                Ok(Admission::Proceed { call: self.steps() })
            }
            Err(stop) => {
                let e = self.exhaustion(
                    stop.reason,
                    stop.exceeded.max,
                    self.elapsed_ms(now_ms),
                    stop.worst_case,
                );
                self.phase = Phase::Finished(RunStatus::Incomplete(e));
                Ok(Admission::Exhausted(e))
            }
        }
    }

    /// Records a model response (`SPEC C`, the reference's `registrar`):
    /// counts the call, adds its usage, and opens its turn. Then
    /// [`propose`](Self::propose) each of its `tool_use` blocks (none for a
    /// text answer) and [`finish_turn`](Self::finish_turn).
    ///
    /// A response whose `stop_reason` is null (as in some logs) is the
    /// caller's to classify: a response holding a `tool_use` block is a
    /// `tool_use` turn, otherwise `end_turn`.
    ///
    /// The response's cost is unknown here: with a cost limit set the run
    /// stops before the next call (`unpriced-model`); use
    /// [`record_priced`](Self::record_priced) to count its cost.
    pub fn record(&mut self, usage: TokenUsage, stop: StopReason) -> Result<Recorded, RecordError> {
        self.record_priced(usage, stop, None)
    }

    /// [`record`](Self::record) with the response's cost in micro-dollars,
    /// from the caller's price of its model (`None`: the model has no
    /// price, which stops a run that has a cost limit before its next call)
    /// (`SPEC C`, `SPEC E`: cost budget).
    pub fn record_priced(
        &mut self,
        usage: TokenUsage,
        stop: StopReason,
        cost_micros: Option<u64>,
    ) -> Result<Recorded, RecordError> {
        let Phase::AwaitingResponse { admitted } = self.phase else {
            return Err(RecordError::NotAwaitingResponse(self.phase()));
        };
        let total = usage.total();
        let mut state = self.state(Seen::New);
        // The engine counts it: a model call, its tokens (the reservation
        // committed, or after the fact; never hidden), its cost.
        let response = engine::Response {
            model: "",
            tokens: total,
            cost_micros,
            new_call: true,
        };
        let Ok(()) = engine::count_response(&mut state, admitted, &response);
        self.usage = self.usage.saturating_add(usage);
        self.calls.clear();
        self.phase = Phase::InTurn { stop };
        Ok(Recorded {
            steps: self.steps(),
            usage: self.usage,
            over_reservation: admitted
                .reserved
                .map_or(0, |r| total.saturating_sub(r.amount)),
        })
    }

    /// Counts `n` server tool uses of the current response (web search,
    /// code execution: run by the API while it answered, so not the
    /// gate's to refuse) as tool attempts, so that `max_tool_calls` bounds
    /// them too: client calls after them find that many fewer attempts left
    /// (`tool-budget`). Saturates; a caller whose budget says server tools do
    /// not count simply does not call it.
    ///
    /// Only between [`record`](Self::record) and
    /// [`finish_turn`](Self::finish_turn); otherwise
    /// `ProposeError::NotInTurn` and nothing is counted.
    pub fn count_server_calls(&mut self, n: u32) -> Result<(), ProposeError> {
        let Phase::InTurn { .. } = self.phase else {
            return Err(ProposeError::NotInTurn(self.phase()));
        };
        self.ledger.record(Limit::ToolCalls, u64::from(n));
        Ok(())
    }

    /// Decides one tool call of the current response (`SPEC C`), in the
    /// order documented on [`TurnGate`].
    ///
    /// Errors leave nothing recorded: the id is invalid, or was already
    /// proposed in this response, or no response is being handled. An id of
    /// an earlier response is not an error but a refusal,
    /// `duplicate-call-id`, answered like any other (`SPEC E`).
    pub fn propose(&mut self, call: &ProposedCall<'_>) -> Result<CallVerdict, ProposeError> {
        let Phase::InTurn { stop } = self.phase else {
            return Err(ProposeError::NotInTurn(self.phase()));
        };
        let id = CallId::new(call.call_id).map_err(ProposeError::InvalidCallId)?;
        let decided = engine::Call {
            name: call.name,
            id: call.call_id,
            stop: Some(stop),
            fingerprint: call.arguments.map(|a| a.with_name(call.name)),
            now_ms: 0,
        };
        // The response's stop reason, then the name, come before the id
        // (`SPEC E`, one check order for every front-end).
        if self.calls.iter().any(|t| t.id == id) {
            if let Some(reason) = engine::stateless(&decided) {
                // Untracked (its id is the earlier block's) but answered.
                self.refusals.add(reason);
                return Ok(CallVerdict::Refused(reason));
            }
            return Err(ProposeError::DuplicateCallId);
        }
        // Every id proposed is remembered for the whole run, refused or not
        // (`SPEC E`), so none can come back in a later response.
        let seen = self.call_ids.try_insert(id.as_str());
        if self.calls.is_full() {
            // Untracked but answered: the refusal is the call's result.
            self.refusals.add(RefusalReason::TurnCapacity);
            return Ok(CallVerdict::Refused(RefusalReason::TurnCapacity));
        }
        let rules = engine::Rules {
            max_repeats: self.limits.max_repeats,
            tools: &self.rules,
            rate: &[],
            loops: self.loops,
            // The run stops before its next model call instead: as in the
            // reference, the calls of a response that reached a limit run.
            budget_per_call: false,
        };
        let mut state = RunState {
            id: seen,
            repeats: &mut self.seen,
            ledger: &mut self.ledger,
            unpriced: &mut self.unpriced,
            window: &mut self.window,
        };
        let verdict = match engine::decide(&mut state, &rules, &decided, engine::Counting::Record) {
            Ok(engine::Decision::Run) => CallVerdict::Execute,
            Ok(engine::Decision::Ask) => CallVerdict::NeedsApproval,
            Ok(engine::Decision::Refused(r)) => {
                self.last_refusal = Some(r);
                CallVerdict::Refused(r.reason)
            }
            Err(never) => match never {},
        };
        if !matches!(verdict, CallVerdict::Refused(_)) {
            self.last_refusal = None;
        }
        let state = match verdict {
            CallVerdict::Execute => CallState::Executing,
            CallVerdict::NeedsApproval => CallState::AwaitingApproval,
            CallVerdict::Refused(reason) => {
                self.refusals.add(reason);
                CallState::Refused(reason)
            }
        };
        // Cannot fail: fullness was checked above.
        let _ = self.calls.push(Tracked {
            id,
            state,
            fingerprint: decided.fingerprint,
        });
        Ok(verdict)
    }

    /// [`propose`](Self::propose), then, if the call needs approval, asks
    /// `approver` and applies an immediate answer (`SPEC C`). With
    /// [`ApprovalAnswer::Later`] the verdict stays
    /// [`CallVerdict::NeedsApproval`].
    pub fn propose_with<A: Approver + ?Sized>(
        &mut self,
        call: &ProposedCall<'_>,
        approver: &mut A,
    ) -> Result<CallVerdict, ProposeError> {
        let verdict = self.propose(call)?;
        if verdict != CallVerdict::NeedsApproval {
            return Ok(verdict);
        }
        let granted = match approver.answer(call) {
            ApprovalAnswer::Approve => true,
            ApprovalAnswer::Refuse => false,
            ApprovalAnswer::Later => return Ok(verdict),
        };
        // The call was just tracked as awaiting approval, so this succeeds.
        Ok(self
            .approve(call.call_id, granted)
            .unwrap_or(CallVerdict::Refused(RefusalReason::ApprovalRefused)))
    }

    fn tracked_mut(&mut self, call_id: &str) -> Option<&mut Tracked> {
        self.calls.iter_mut().find(|t| t.id.as_str() == call_id)
    }

    /// Takes the approver's answer for a call awaiting approval (`SPEC C`):
    /// yes → [`CallVerdict::Execute`]; no → refused `approval-refused`, and
    /// that refusal is the call's result.
    pub fn approve(&mut self, call_id: &str, granted: bool) -> Result<CallVerdict, ApprovalError> {
        let tracked = self
            .tracked_mut(call_id)
            .ok_or(ApprovalError::UnknownCallId)?;
        if tracked.state != CallState::AwaitingApproval {
            return Err(ApprovalError::NotAwaitingApproval);
        }
        if granted {
            tracked.state = CallState::Executing;
            Ok(CallVerdict::Execute)
        } else {
            tracked.state = CallState::Refused(RefusalReason::ApprovalRefused);
            let never_ran = tracked.fingerprint;
            self.refusals.add(RefusalReason::ApprovalRefused);
            // It never runs: no step of the loop window.
            if let Some(call) = never_ran {
                self.window.forget(call);
            }
            Ok(CallVerdict::Refused(RefusalReason::ApprovalRefused))
        }
    }

    /// Records the outcome of an executed call (`SPEC C`). A result for an
    /// id never proposed in this response, for a call already answered (by a
    /// result or by the gate's refusal), or for a call still awaiting
    /// approval is refused.
    pub fn report(&mut self, call_id: &str, outcome: ToolOutcome) -> Result<(), ReportError> {
        let tracked = self
            .tracked_mut(call_id)
            .ok_or(ReportError::UnknownCallId)?;
        match tracked.state {
            CallState::Executing => {}
            CallState::AwaitingApproval => return Err(ReportError::AwaitingApproval),
            CallState::Refused(_) | CallState::Done(_) => return Err(ReportError::AlreadyAnswered),
        }
        tracked.state = CallState::Done(outcome);
        if outcome == ToolOutcome::Error {
            self.tool_errors = self.tool_errors.saturating_add(1);
        }
        Ok(())
    }

    /// [`report`](Self::report) with what the call returned: its outcome
    /// is an error or not as `result` says, and under `[loops]`
    /// ([`set_loops`](Self::set_loops)) the result goes to the loop window.
    pub fn report_result(
        &mut self,
        call_id: &str,
        result: loops::Outcome,
    ) -> Result<(), ReportError> {
        let outcome = if result.error {
            ToolOutcome::Error
        } else {
            ToolOutcome::Ok
        };
        self.report(call_id, outcome)?;
        let fingerprint = self
            .calls
            .iter()
            .find(|t| t.id.as_str() == call_id)
            .and_then(|t| t.fingerprint);
        if let (Some(call), true) = (fingerprint, self.loops.is_on()) {
            self.window.report(call, result);
        }
        Ok(())
    }

    /// Ends the current response's turn (`SPEC C`) once every call has its
    /// answer: `tool_use` and `pause_turn` continue; `end_turn` completes
    /// the run; any other stop reason ends it with status `error`.
    pub fn finish_turn(&mut self) -> Result<TurnEnd, FinishError> {
        let Phase::InTurn { stop } = self.phase else {
            return Err(FinishError::NotInTurn(self.phase()));
        };
        let open = self.calls.iter().filter(|t| t.state.is_open()).count();
        if open > 0 {
            return Err(FinishError::Unanswered(
                u16::try_from(open).unwrap_or(u16::MAX),
            ));
        }
        let (phase, end) = match stop {
            StopReason::ToolUse | StopReason::PauseTurn => (Phase::Ready, TurnEnd::Continue),
            StopReason::EndTurn => (Phase::Finished(RunStatus::Complete), TurnEnd::Complete),
            other => (
                Phase::Finished(RunStatus::Error(other)),
                TurnEnd::Stopped(other),
            ),
        };
        self.phase = phase;
        Ok(end)
    }

    /// Closes the run for a summary (`SPEC C`): every call of the current
    /// response still without an answer is answered "Budget exhausted, not
    /// executed." (refused `budget-exhausted`), and the run ends
    /// `incomplete` (with the budget's reason at `now_ms`, or `closed` if no
    /// limit is reached) unless it already has a final status. Returns the
    /// closing message to send with tools disabled.
    ///
    /// After closing, no call of the response may still run: a later
    /// [`report`](Self::report) for one is refused as already answered.
    pub fn close(&mut self, now_ms: u64) -> Result<Closing<CALLS>, CloseError> {
        let status = match self.phase {
            Phase::AwaitingResponse { .. } => return Err(CloseError::AwaitingResponse),
            Phase::Finished(RunStatus::Complete) => return Err(CloseError::Complete),
            Phase::Finished(status) => status,
            Phase::Ready | Phase::InTurn { .. } => {
                RunStatus::Incomplete(self.check(now_ms).unwrap_or_else(|| {
                    self.exhaustion(ExhaustReason::Closed, 0, self.elapsed_ms(now_ms), 0)
                }))
            }
        };
        let mut unanswered = Vec::new();
        for tracked in self.calls.iter_mut().filter(|t| t.state.is_open()) {
            tracked.state = CallState::Refused(RefusalReason::BudgetExhausted);
            self.refusals.add(RefusalReason::BudgetExhausted);
            // Both vectors have capacity CALLS, so this always fits.
            let _ = unanswered.push(tracked.id.clone());
        }
        self.phase = Phase::Finished(status);
        Ok(Closing { unanswered, status })
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
