//! A report's per-turn rows as the gate decided them ([`DecidedTurns`]),
//! each made from the session when it is written.

use budgetgate_core::turn::{StopReason, TokenUsage};
use serde::Serialize;

use super::report::{CallReport, Report, TurnReport, TurnRows};
use super::session::{RecordedCall, Session};
use super::spill_read_error;

/// What the gate made of a response it let happen (the outcome of its row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TurnOutcome {
    /// `continue`.
    Continue,
    /// `complete`.
    Complete,
    /// `error: REASON`: the stop reason ended the run.
    Error(StopReason),
}

/// The gate's decision on one call of a response it let happen: two bytes,
/// kept for every call the gate decided (issue 14, memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CallDecision {
    verdict: Verdict,
    /// Why it was refused: its place in [`DecidedTurns::reasons`] plus one,
    /// or 0.
    reason: u8,
}

/// What the gate did with a call it decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Execute,
    Approved,
    Refused,
}

impl Verdict {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Execute => "execute",
            Self::Approved => "approved",
            Self::Refused => "refused",
        }
    }
}

/// A session's per-turn rows as the gate decided them, each made from the
/// recorded response and its decisions only when it is written: the rows of
/// a long session (its `--json` report is about 650 bytes a response) are
/// never all held. Only the responses the gate let happen, which come
/// first, have decisions; every later one is `not reached`.
#[derive(Debug, Clone)]
pub struct DecidedTurns<'s> {
    pub(super) session: &'s Session,
    /// How many responses the session has.
    pub(super) count: usize,
    /// How many calls its last response has.
    pub(super) last_calls: usize,
    /// The outcome of each response the gate let happen: the first ones.
    pub(super) outcomes: Vec<TurnOutcome>,
    /// The decision on each call of those responses, in order.
    pub(super) calls: Vec<CallDecision>,
    /// The refusal reasons the decisions name.
    pub(super) reasons: Vec<&'static str>,
    /// The response before which the budget stopped the run, if it did.
    pub(super) stopped_before: Option<usize>,
}

impl DecidedTurns<'_> {
    /// Keeps the decision on the next call.
    pub(super) fn push_call(&mut self, verdict: Verdict, reason: Option<&'static str>) {
        let reason = reason.map_or(0, |reason| {
            let at = self
                .reasons
                .iter()
                .position(|r| *r == reason)
                .unwrap_or_else(|| {
                    self.reasons.push(reason);
                    self.reasons.len() - 1
                });
            // Refusal reasons are a few dozen words.
            u8::try_from(at + 1).unwrap_or(u8::MAX)
        });
        self.calls.push(CallDecision { verdict, reason });
    }

    /// Whether the gate let the last response happen.
    pub(super) fn last_reached(&self) -> bool {
        self.count > 0 && self.outcomes.len() == self.count
    }

    /// Whether the gate let the last response happen and ran every call of
    /// it.
    pub(super) fn last_ran(&self) -> bool {
        self.last_reached()
            && self
                .calls
                .iter()
                .rev()
                .take(self.last_calls)
                .all(|c| matches!(c.verdict, Verdict::Execute | Verdict::Approved))
    }

    /// The rows, in order, each made when it is taken; an error reading a
    /// spilled response back ends them.
    pub fn rows(&self) -> impl Iterator<Item = std::io::Result<TurnReport>> + '_ {
        let mut running = TokenUsage::ZERO;
        let mut decided = self.calls.iter();
        self.session
            .each_turn()
            .enumerate()
            .map(move |(index, turn)| {
                let turn = turn?;
                if let Some(u) = turn.usage {
                    running = running.saturating_add(u);
                }
                let (stop_reason, stop_reason_inferred) = turn.effective_stop_reason();
                let report = |call: &RecordedCall, verdict, reason: Option<&str>| CallReport {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    verdict,
                    reason: reason.map(str::to_owned),
                    recorded: recorded_word(call),
                };
                let outcome = self.outcomes.get(index);
                let calls = match outcome {
                    // One decision per call, in order.
                    Some(_) => turn
                        .calls
                        .iter()
                        .zip(decided.by_ref())
                        .map(|(call, d)| {
                            let reason = usize::from(d.reason)
                                .checked_sub(1)
                                .and_then(|at| self.reasons.get(at).copied());
                            report(call, d.verdict.as_str(), reason)
                        })
                        .collect(),
                    None => turn
                        .calls
                        .iter()
                        .map(|call| report(call, "not-reached", None))
                        .collect(),
                };
                Ok(TurnReport {
                    turn: index,
                    message_id: turn.message_id.clone(),
                    stop_reason,
                    stop_reason_inferred,
                    usage: turn.usage,
                    running_total: turn.usage.map(|_| running),
                    reached: outcome.is_some(),
                    outcome: match outcome {
                        Some(TurnOutcome::Continue) => "continue".into(),
                        Some(TurnOutcome::Complete) => "complete".into(),
                        Some(TurnOutcome::Error(reason)) => format!("error: {reason}"),
                        None if self.stopped_before == Some(index) => {
                            "stopped before this call".into()
                        }
                        None => "not reached".into(),
                    },
                    calls,
                    usage_iterations: turn.iterations.clone(),
                    server_tool_calls: turn.server_calls.clone(),
                    cut_off: turn.cut_off.clone(),
                    agent: turn.agent.clone(),
                })
            })
    }
}

impl TurnRows for DecidedTurns<'_> {
    fn count(&self) -> usize {
        self.count
    }

    fn try_for_each_row<E: From<std::io::Error>>(
        &self,
        mut each: impl FnMut(&TurnReport) -> Result<(), E>,
    ) -> Result<(), E> {
        self.rows().try_for_each(|row| each(&row?))
    }
}

impl Serialize for DecidedTurns<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.count))?;
        for row in self.rows() {
            seq.serialize_element(&row.map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

impl<'s> Report<DecidedTurns<'s>> {
    /// The same report with every row made and held; an error reading a
    /// spilled response back is the error.
    pub fn held(self) -> Result<Report, String> {
        Ok(Report {
            per_turn: self
                .per_turn
                .rows()
                .collect::<std::io::Result<_>>()
                .map_err(spill_read_error)?,
            schema_version: self.schema_version,
            format: self.format,
            format_description: self.format_description,
            turns: self.turns,
            tool_calls: self.tool_calls,
            server_tool_calls: self.server_tool_calls,
            usage: self.usage,
            usage_per_turn: self.usage_per_turn,
            usage_known: self.usage_known,
            stopped: self.stopped,
            no_progress: self.no_progress,
            overshoot: self.overshoot,
            status: self.status,
            refusals: self.refusals,
            executed: self.executed,
            approved: self.approved,
            reached_turns: self.reached_turns,
            gate_usage: self.gate_usage,
            gate_cost_micro_usd: self.gate_cost_micro_usd,
            budget: self.budget,
            notes: self.notes,
            agents: self.agents,
        })
    }
}

fn recorded_word(call: &RecordedCall) -> &'static str {
    match call.recorded_error() {
        Some(true) => "error",
        Some(false) => "ok",
        None => "none",
    }
}
