//! The model-call side of the engine (`SPEC C`, `SPEC E`): the check before
//! a model call is made, and the counting of its response. Every front-end
//! that sees model calls uses these: the turn gate (replay), the Claude Code
//! hook (from the transcript, after the fact), the model proxy (on the
//! call's path, before it goes out).
//!
//! Before a model call the limits checked are those of [`Limit::ALL`] that
//! [`Limit::before_model_call`] selects, in that order (model calls, tokens,
//! time, cost), the session's then the sub-agent's, each with `>=` as the
//! reference's `agotado()`; then, under a cost limit, a model counted
//! without a price (`unpriced-model`: a cost budget never counts a call as
//! free); then, in reserve mode, whether the call's worst case fits
//! (`token-reserve`), or, when the front-end can send the call with a
//! lower output bound and asks for it ([`WorstCase::min_output`]), how
//! far its bound is lowered to fit. The first that applies stops the call;
//! its word is an [`ExhaustReason`].

use core::fmt;

use super::{State, Whose};

#[cfg(test)]
mod tests;
use crate::budget::{Exceeded, Ledger, LedgerError, Limit, Reservation};
use crate::turn::ExhaustReason;

/// Why a model call is not made: the contract's stop word and the figures
/// behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelStop {
    /// The stop word: `steps`, `tokens`, `time`, `cost`, `unpriced-model`
    /// or `token-reserve`.
    pub reason: ExhaustReason,
    /// The session's budget or the sub-agent's.
    pub whose: Whose,
    /// The limit, what was used (with what is reserved) and its maximum.
    /// For `unpriced-model`: the cost limit, with the cost counted so far.
    pub exceeded: Exceeded,
    /// `token-reserve` only: the refused call's worst case, in tokens.
    pub worst_case: u64,
}

impl ModelStop {
    /// The sentence that says why, for a person and for the agent: the
    /// limit, what was used, and that no further call will be made.
    pub fn detail(&self) -> ModelStopDetail<'_> {
        ModelStopDetail(self, None)
    }

    /// [`Self::detail`] for a front-end that knows the model asked for
    /// (the proxy): an `unpriced-model` stop names it, and the price to
    /// add.
    pub fn detail_for<'a>(&'a self, model: &'a str) -> ModelStopDetail<'a> {
        ModelStopDetail(self, Some(model))
    }
}

/// [`ModelStop::detail`]'s sentence (and the model asked for, when the
/// front-end knows it).
pub struct ModelStopDetail<'a>(&'a ModelStop, Option<&'a str>);

impl fmt::Display for ModelStopDetail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let e = s.exceeded;
        let whose = s.whose.as_str();
        match (s.reason, self.1) {
            (ExhaustReason::Unpriced, Some(model)) => write!(
                f,
                "budgetgate: model {} has no price in the budget, and the {whose}'s cost \
                 budget ({} micro-USD) never counts a call as free, so it is not made: add \
                 [prices.{}] (input, output, cache_read, cache_write: USD per million \
                 tokens) to the budget file (unpriced-model)",
                crate::pyjson::Quoted(model),
                e.max,
                crate::pyjson::Quoted(model)
            ),
            (ExhaustReason::Unpriced, None) => write!(
                f,
                "budgetgate: the {whose}'s cost budget ({} micro-USD) cannot count a model \
                 that has no price, so no further model call is made (unpriced-model)",
                e.max
            ),
            // No output bound: the request sets none and the budget gives
            // none (its worst case is every token there is).
            (ExhaustReason::TokenReserve, _) if s.worst_case == u64::MAX => write!(
                f,
                "budgetgate: this model call sets no output bound (max_tokens), and the \
                 budget sets no reserve_max_tokens, so its worst case cannot be reserved \
                 in the {whose}'s token budget ({} of {} left) and it is not made: set \
                 max_tokens in the request, or reserve_max_tokens in the budget file \
                 (token-reserve)",
                e.max.saturating_sub(e.used),
                e.max
            ),
            (ExhaustReason::TokenReserve, _) => write!(
                f,
                "budgetgate: this model call could use up to {} tokens, and the {whose}'s \
                 token budget has {} of {} left, so it is not made (token-reserve)",
                s.worst_case,
                e.max.saturating_sub(e.used),
                e.max
            ),
            (reason, _) => write!(
                f,
                "budgetgate: the {whose}'s budget is spent: {} of {} {} used ({}), so no \
                 further model call is made; stop and report the work done so far",
                e.used,
                e.max,
                e.limit.unit(),
                reason
            ),
        }
    }
}

/// What a model call can be billed at most, in reserve mode: its input
/// (counted soundly: never below what the provider bills) and the most
/// output tokens it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WorstCase {
    /// Tokens the input cannot be billed above.
    pub input: u64,
    /// The most output tokens the call allows.
    pub output: u64,
    /// When the whole worst case does not fit: the fewest output tokens
    /// worth sending the call with. If at least that many (and at least
    /// one) are left after its input, the call is let through with its
    /// output bound lowered to what is left ([`Admitted::lowered_output`]);
    /// `None`: it is refused (`token-reserve`), as a front-end that cannot
    /// change the call must.
    pub min_output: Option<u64>,
}

impl WorstCase {
    /// A worst case of `tokens` in all, never lowered.
    pub const fn tokens(tokens: u64) -> Self {
        Self {
            input: tokens,
            output: 0,
            min_output: None,
        }
    }

    /// Input and output together.
    pub const fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// A model call let through: what it holds until its response is counted
/// ([`count_response`] commits it) or the call is known not to have been
/// billed ([`release`] gives it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Admitted {
    /// The model call itself, held in the session's ledger (and the
    /// sub-agent's) from the moment it is let through, so that calls made
    /// at once never pass `max_model_calls` together.
    pub call: Option<Reservation>,
    /// Reserve mode: the worst case held in the session's ledger (and the
    /// sub-agent's, when it has a token limit).
    pub reserved: Option<Reservation>,
    /// Reserve mode, when the whole worst case did not fit: the output
    /// bound the call is let through with, lower than it asked
    /// ([`WorstCase::min_output`]). The front-end must send the call with
    /// it.
    pub lowered_output: Option<u64>,
}

impl Admitted {
    /// Nothing held: a response counted after the fact, without a decision
    /// before its call (the hook reads it from the transcript).
    pub const AFTER_THE_FACT: Self = Self {
        call: None,
        reserved: None,
        lowered_output: None,
    };
}

/// One model call, as held by [`Admitted::call`].
pub const ONE_MODEL_CALL: Reservation = Reservation {
    limit: Limit::ModelCalls,
    amount: 1,
};

/// The first limit checked before each model call that `ledger` has
/// reached at `now_ms`, or, under a cost limit, a model counted without a
/// price (`unpriced`): [`before_model_call`]'s walk, for a front-end that
/// holds its ledger and its unpriced flag in memory (the turn gate's
/// check, which changes nothing).
pub fn spent_in_memory<const T: usize>(
    ledger: &Ledger<T>,
    now_ms: u64,
    unpriced: bool,
) -> Option<ModelStop> {
    limit_reached(ledger, None, now_ms).or_else(|| {
        // Models without a price matter in cost mode only.
        unpriced.then(|| unpriced_stop(ledger)).flatten()
    })
}

/// The first limit checked before a model call that `ledger` reached at
/// `now_ms`.
fn first_reached<const T: usize>(ledger: &Ledger<T>, now_ms: u64) -> Option<Exceeded> {
    Limit::ALL
        .into_iter()
        .filter(|l| l.before_model_call())
        .find_map(|limit| ledger.exhausted_at(limit, now_ms))
}

/// The sub-agent's own walk before a model call (its ledger alone), for a
/// front-end that refuses a sub-agent's tool calls once the sub-agent has
/// spent its own budget ([`super::BudgetPerCall::SubAgent`]).
pub(super) fn sub_agent_stopped<const T: usize>(agent: &Ledger<T>) -> Option<ModelStop> {
    stop_of(Whose::SubAgent, first_reached(agent, agent.started_ms())?)
}

/// The ledgers' walk before a model call: the session's, then the
/// sub-agent's.
fn limit_reached<const T: usize>(
    session: &Ledger<T>,
    agent: Option<&Ledger<T>>,
    now_ms: u64,
) -> Option<ModelStop> {
    let (whose, exceeded) = first_reached(session, now_ms)
        .map(|e| (Whose::Session, e))
        .or_else(|| {
            agent
                .and_then(|a| first_reached(a, now_ms))
                .map(|e| (Whose::SubAgent, e))
        })?;
    stop_of(whose, exceeded)
}

/// The stop of a limit reached: its word, whose it is, the figures.
fn stop_of(whose: Whose, exceeded: Exceeded) -> Option<ModelStop> {
    Some(ModelStop {
        // Every limit checked before a model call has its word.
        reason: ExhaustReason::of_limit(exceeded.limit).unwrap_or(ExhaustReason::Closed),
        whose,
        exceeded,
        worst_case: 0,
    })
}

/// `unpriced-model`, with the session's cost figures; `None` without a
/// cost limit.
fn unpriced_stop<const T: usize>(session: &Ledger<T>) -> Option<ModelStop> {
    let max = session.max(Limit::CostMicros)?;
    Some(ModelStop {
        reason: ExhaustReason::Unpriced,
        whose: Whose::Session,
        exceeded: Exceeded {
            limit: Limit::CostMicros,
            used: session.used(Limit::CostMicros),
            max,
        },
        worst_case: 0,
    })
}

/// Decides whether the next model call may be made at `now_ms` (`SPEC C`).
/// `worst_case` is, in reserve mode, the most tokens the call can be billed
/// (its input counted soundly plus its `max_tokens`): it is reserved in
/// the session's ledger (and the sub-agent's, when that has a token limit)
/// when it fits; when it does not, the call is let through with a lower
/// output bound if the worst case allows it ([`WorstCase::min_output`]),
/// else stopped `token-reserve`.
/// Errors only when `state` cannot be read; the front-end then refuses.
pub fn before_model_call<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
    now_ms: u64,
    worst_case: Option<WorstCase>,
) -> Result<Result<Admitted, ModelStop>, S::Error> {
    if let Some(stop) = stopped(state, now_ms)? {
        return Ok(Err(stop));
    }
    let mut ledgers = state.ledgers();
    let refused = |whose, e: Exceeded| ModelStop {
        reason: ExhaustReason::TokenReserve,
        whose,
        exceeded: e,
        worst_case: worst_case.map_or(0, |w| w.total()),
    };
    let mut reserved = None;
    let mut lowered_output = None;
    if let Some(worst) = worst_case {
        let output = fitted_output(&worst, [Some(&*ledgers.session), ledgers.agent.as_deref()]);
        if output < worst.output {
            lowered_output = Some(output);
        }
        let tokens = worst.input.saturating_add(output);
        let session_max = ledgers.session.max(Limit::Tokens);
        let r = match ledgers.session.try_reserve(Limit::Tokens, tokens) {
            Ok(r) => r,
            Err(e) => {
                return Ok(Err(refused(
                    Whose::Session,
                    reserve_failure(e, session_max),
                )))
            }
        };
        if let Some(agent) = ledgers.agent.as_deref_mut() {
            if let Some(agent_max) = agent.max(Limit::Tokens) {
                if let Err(e) = agent.try_reserve(Limit::Tokens, tokens) {
                    // Nothing is held for a call that is not made.
                    let _ = ledgers.session.roll_back(r);
                    return Ok(Err(refused(
                        Whose::SubAgent,
                        reserve_failure(e, Some(agent_max)),
                    )));
                }
            }
        }
        reserved = Some(r);
    }
    // Below its maximum (checked above), so one more call fits; a sum past
    // u64::MAX (no maximum) holds nothing, and the response counts it.
    let held = ledgers.session.try_reserve(Limit::ModelCalls, 1).is_ok();
    if let Some(agent) = ledgers.agent {
        let _ = agent.try_reserve(Limit::ModelCalls, 1);
    }
    Ok(Ok(Admitted {
        call: held.then_some(ONE_MODEL_CALL),
        reserved,
        lowered_output,
    }))
}

/// The output bound `worst` is reserved with: its own when the whole of it
/// fits in every ledger with a token limit; else, when the front-end asks
/// ([`WorstCase::min_output`]), what is left after its input, if that is
/// at least the minimum (and at least one token); else its own (which
/// then does not fit, and is refused).
fn fitted_output<const T: usize>(worst: &WorstCase, ledgers: [Option<&Ledger<T>>; 2]) -> u64 {
    let Some(min) = worst.min_output else {
        return worst.output;
    };
    let left = ledgers
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let max = l.max(Limit::Tokens)?;
            let held = l
                .used(Limit::Tokens)
                .saturating_add(l.reserved(Limit::Tokens));
            Some(max.saturating_sub(held))
        })
        .min();
    match left.map(|left| left.saturating_sub(worst.input)) {
        // At most its own: a call that fits is kept as it came.
        Some(room) if room >= min.max(1) => room.min(worst.output),
        _ => worst.output,
    }
}

/// The walk over a front-end's state: its ledgers, then (in cost mode) its
/// unpriced flag.
pub(super) fn stopped<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
    now_ms: u64,
) -> Result<Option<ModelStop>, S::Error> {
    let ledgers = state.ledgers();
    if let Some(stop) = limit_reached(ledgers.session, ledgers.agent.as_deref(), now_ms) {
        return Ok(Some(stop));
    }
    if state.ledgers().session.max(Limit::CostMicros).is_none() || !state.unpriced()? {
        return Ok(None);
    }
    Ok(unpriced_stop(state.ledgers().session))
}

/// What a failed reservation reports: the limit passed, or (a sum past
/// `u64::MAX`, which no budget reaches) the limit as if full.
fn reserve_failure(e: LedgerError, max: Option<u64>) -> Exceeded {
    match e {
        LedgerError::Exceeded(e) => e,
        _ => {
            let max = max.unwrap_or(u64::MAX);
            Exceeded {
                limit: Limit::Tokens,
                used: max,
                max,
            }
        }
    }
}

/// One model response to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response<'a> {
    /// The model that answered (named to the state when it has no price).
    pub model: &'a str,
    /// Tokens billed (input, output, cache reads and writes), or the part
    /// not counted before when a response is seen again with more.
    pub tokens: u64,
    /// Its cost in micro-dollars; `None`: the model has no price.
    pub cost_micros: Option<u64>,
    /// Whether this is the response's first sight, so that it counts as a
    /// model call (a response read again with more usage counts its tokens
    /// only).
    pub new_call: bool,
}

/// Counts a model response (`SPEC C`, the reference's `registrar`): a model
/// call when it is new, its tokens (committing `admitted`'s reservation,
/// or counted after the fact), its cost, in the session's ledger and the
/// sub-agent's. A model without a price under a cost limit is told to the
/// state ([`State::add_unpriced`]): the next model call is then stopped.
/// Usage above a reservation is counted all the same, never hidden.
pub fn count_response<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
    admitted: Admitted,
    response: &Response<'_>,
) -> Result<(), S::Error> {
    let cost_mode = {
        let ledgers = state.ledgers();
        let count = |ledger: &mut Ledger<T>| {
            let held = admitted.call.is_some_and(|c| ledger.commit(c, 1).is_ok());
            if response.new_call && !held {
                ledger.record(Limit::ModelCalls, 1);
            }
            let committed = admitted
                .reserved
                .is_some_and(|r| ledger.commit(r, response.tokens).is_ok());
            if !committed {
                // After the fact, or a reservation this ledger does not
                // hold (a sub-agent without a token limit).
                ledger.record(Limit::Tokens, response.tokens);
            }
            if let Some(cost) = response.cost_micros {
                ledger.record(Limit::CostMicros, cost);
            }
        };
        count(ledgers.session);
        if let Some(agent) = ledgers.agent {
            count(agent);
        }
        ledgers.session.max(Limit::CostMicros).is_some()
    };
    if response.cost_micros.is_none() && cost_mode {
        state.add_unpriced(response.model)?;
    }
    Ok(())
}

/// Gives back a reservation of a model call that was never made or failed
/// before the upstream billed anything (refused, unreachable). A call that
/// may have been billed is counted with [`count_response`] instead.
pub fn release<S: State<T> + ?Sized, const T: usize>(state: &mut S, admitted: Admitted) {
    let mut ledgers = state.ledgers();
    for r in [admitted.call, admitted.reserved].into_iter().flatten() {
        let _ = ledgers.session.roll_back(r);
        if let Some(agent) = ledgers.agent.as_deref_mut() {
            let _ = agent.roll_back(r);
        }
    }
}
