//! The model-call side of the turn gate: the budget checks before a model
//! call and the recording of its response (`SPEC C`).

use super::{AdmitError, Phase, RecordError, TokenMode, TurnGate};
use crate::budget::Limit;
use crate::engine;
use crate::turn::ids::Seen;
use crate::turn::outcome::{ExhaustReason, Exhaustion, RunStatus, StopReason};
use crate::turn::usage::TokenUsage;

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

impl<const CALLS: usize, const SEEN: usize, const TOOLS: usize, const IDS: usize>
    TurnGate<CALLS, SEEN, TOOLS, IDS>
{
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
        self.admit(now_ms, Some(engine::WorstCase::tokens(worst_case_tokens)))
    }

    fn ready(&self) -> Result<(), AdmitError> {
        match self.phase {
            Phase::Ready => Ok(()),
            _ => Err(AdmitError::NotReady(self.phase())),
        }
    }

    fn admit(
        &mut self,
        now_ms: u64,
        worst_case: Option<engine::WorstCase>,
    ) -> Result<Admission, AdmitError> {
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
}
