//! The closing after exhaustion: every call left unanswered gets its error
//! result, and the model is asked for a summary with tools disabled (`SPEC C`).

use heapless::Vec;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::{CallState, CloseError, Phase, TurnGate};
use crate::limits::MAX_TURN_CALLS;
use crate::turn::outcome::{ExhaustReason, RefusalReason, RunStatus};
use crate::turn::rules::CallId;

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

impl<const CALLS: usize, const SEEN: usize, const TOOLS: usize, const IDS: usize>
    TurnGate<CALLS, SEEN, TOOLS, IDS>
{
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
}
