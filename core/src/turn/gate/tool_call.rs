//! The tool-call side of the turn gate: the decision on each tool call of
//! a response, approvals, the calls' results and the end of the turn
//! (`SPEC C`).

use super::{
    ApprovalError, FinishError, Phase, ProposeError, ReportError, RunState, Tracked, TurnGate,
};
use crate::budget::{Ledger, Limit};
use crate::engine;
use crate::engine::loops;
use crate::turn::fingerprint::ArgsFingerprint;
use crate::turn::outcome::{RefusalReason, RunStatus, StopReason};
use crate::turn::rules::CallId;

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

impl<const CALLS: usize, const SEEN: usize, const TOOLS: usize, const IDS: usize>
    TurnGate<CALLS, SEEN, TOOLS, IDS>
{
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
        self.propose_for(call, None)
    }

    /// [`propose`](Self::propose) for a call of a sub-agent whose own
    /// ledger is `agent` (`[subagent]`): the engine checks it too, and
    /// counts the attempt in it. The run cannot stop a sub-agent's model
    /// calls, so a sub-agent past its own limits has its calls refused
    /// (`budget-exhausted`, its [`engine::BudgetPerCall::SubAgent`] check;
    /// `tool-budget` for its tool calls) while the run goes on.
    pub fn propose_for(
        &mut self,
        call: &ProposedCall<'_>,
        agent: Option<&mut Ledger<TOOLS>>,
    ) -> Result<CallVerdict, ProposeError> {
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
            // A sub-agent's model calls it cannot stop: its calls are.
            budget_per_call: engine::BudgetPerCall::SubAgent,
        };
        let mut state = RunState {
            id: seen,
            repeats: &mut self.seen,
            ledger: &mut self.ledger,
            agent,
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
        self.propose_with_for(call, approver, None)
    }

    /// [`propose_with`](Self::propose_with) for a sub-agent's call
    /// ([`propose_for`](Self::propose_for)).
    pub fn propose_with_for<A: Approver + ?Sized>(
        &mut self,
        call: &ProposedCall<'_>,
        approver: &mut A,
        agent: Option<&mut Ledger<TOOLS>>,
    ) -> Result<CallVerdict, ProposeError> {
        let verdict = self.propose_for(call, agent)?;
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
}
