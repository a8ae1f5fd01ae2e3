//! Stop conditions and approval around a model (`SPEC C`), as a sans-IO turn gate.
//!
//! A run around a real model needs several stop conditions, each for its own
//! risk: model calls (steps), accumulated tokens (every call resends the
//! history, cache reads included), wall time, repetitions of the same call,
//! and a human's approval for consequential tools. [`TurnGate`] enforces all
//! of them without I/O: the caller makes the model calls, runs the tools,
//! asks the approver and reads the clock, and tells the gate what happened;
//! the gate says what may happen next and which error result answers each
//! refused call.
//!
//! ```
//! use budgetgate_core::turn::{
//!     Admission, ArgsFingerprint, CallVerdict, ProposedCall, RunStatus, StopReason,
//!     TokenUsage, ToolOutcome, ToolRule, ToolRules, TurnEnd, TurnGate, TurnLimits,
//! };
//!
//! let mut rules: ToolRules = ToolRules::new();
//! rules.try_add("lookup", ToolRule::Run).unwrap();
//! let mut gate: TurnGate = TurnGate::new(TurnLimits::DEFAULT, rules, 0);
//!
//! // Turn 1: the model asks for a tool.
//! assert_eq!(gate.begin_call(0), Ok(Admission::Proceed { call: 0 }));
//! let usage = TokenUsage::parse(br#"{"input_tokens": 420, "output_tokens": 30,
//!     "cache_read_input_tokens": null}"#).unwrap();
//! gate.record(usage, StopReason::parse("tool_use").unwrap()).unwrap();
//! let input = br#"{"name": "Alice"}"#;
//! let call = ProposedCall {
//!     call_id: "toolu_1",
//!     name: "lookup",
//!     arguments: ArgsFingerprint::of_json(input, &mut [0u8; 64]).ok(),
//!     input,
//! };
//! assert_eq!(gate.propose(&call), Ok(CallVerdict::Execute));
//! gate.report("toolu_1", ToolOutcome::Ok).unwrap(); // after running it
//! assert_eq!(gate.finish_turn(), Ok(TurnEnd::Continue));
//!
//! // Turn 2: the answer.
//! assert_eq!(gate.begin_call(1_500), Ok(Admission::Proceed { call: 1 }));
//! gate.record(TokenUsage { input_tokens: 500, output_tokens: 12, ..TokenUsage::ZERO },
//!             StopReason::EndTurn).unwrap();
//! assert_eq!(gate.finish_turn(), Ok(TurnEnd::Complete));
//! assert_eq!(gate.status(), RunStatus::Complete);
//! assert_eq!(gate.usage().total(), 962);
//! ```
//!
//! Design notes (also in `docs/TURN-GATE.md`):
//! * **Default mode vs reserve mode.** By default the token limit is checked
//!   after the fact, as the reference does: a call that starts below the
//!   limit may end above it (overshoot by at most one call). In
//!   [`TokenMode::Reserve`] each call declares a trusted worst case first and
//!   is refused unless it fits, so the budget is never overshot.
//! * **Parallel calls** are decided one by one in order against what is left
//!   (see [`TurnGate`]).
//! * **Repetitions** are counted under a 128-bit fingerprint of the canonical
//!   form (see [`ArgsFingerprint`]): a collision can only refuse early, never
//!   let a repeat through.

mod fingerprint;
mod gate;
mod ids;
mod outcome;
mod rules;
mod usage;

pub use fingerprint::{ArgsFingerprint, CallFingerprint, FingerprintBuilder, FingerprintError};
pub use gate::{
    Admission, AdmitError, ApprovalAnswer, ApprovalError, Approver, CallState, CallVerdict,
    CloseError, Closing, FinishError, GatePhase, ProposeError, ProposedCall, RecordError, Recorded,
    ReportError, ResumeError, TokenMode, ToolOutcome, TurnEnd, TurnGate, TurnLimits,
    TOOL_ERROR_PREFIX,
};
pub use outcome::{
    ErrorResult, ExhaustReason, Exhaustion, ReasonText, RefusalCounts, RefusalReason, RunStatus,
    StopReason, StopReasonError, MAX_REASON_LEN,
};
pub use rules::{CallId, NameError, ToolName, ToolRule, ToolRules, ToolRulesError};
pub use usage::{TokenUsage, UsageError, UsageField};

#[cfg(test)]
mod tests;
