//! The model-call side of the gate over the store (`SPEC C`, `SPEC E`): the
//! core engine's check before a model call and its counting of a response
//! ([`budgetgate_core::engine::before_model_call`],
//! [`budgetgate_core::engine::count_response`]), with the session's state
//! read from and written to a [`LedgerTx`]. The hook counts the responses
//! its transcript shows; the model proxy decides before each call and
//! counts the response it relays.

use budgetgate_core::engine::{self, Admitted, ModelStop, Response};

use super::{GateError, Ledgers, Stored};
use crate::store::{LedgerTx, TranscriptCursor};

/// Whose ledgers a model call counts in: the session's and, for a
/// sub-agent's call, the sub-agent's (loaded into `ledgers` first with
/// [`Ledgers::agent`]).
pub struct Whose<'a> {
    /// The session.
    pub session: &'a str,
    /// The sub-agent, if the call is one's.
    pub agent: Option<&'a str>,
}

/// Decides whether the next model call of `who` may be made at `now`
/// ([`engine::before_model_call`]); in reserve mode `worst_case` is
/// reserved in `ledgers` when it fits (lowered first when it allows). The caller stores `ledgers` with
/// the transaction.
pub fn before_model_call(
    tx: &(impl LedgerTx + ?Sized),
    who: &Whose<'_>,
    ledgers: &mut Ledgers<'_>,
    now: u64,
    worst_case: Option<engine::WorstCase>,
) -> Result<Result<Admitted, ModelStop>, GateError> {
    let mut state = Stored::new(tx, who.session, who.agent, ledgers);
    engine::before_model_call(&mut state, now, worst_case)
}

/// Counts one model response of `who` ([`engine::count_response`]): a
/// model call when it is new, its tokens, its cost; a model without a price
/// under a cost limit is remembered in the store.
pub fn count_response(
    tx: &(impl LedgerTx + ?Sized),
    who: &Whose<'_>,
    ledgers: &mut Ledgers<'_>,
    admitted: Admitted,
    response: &Response<'_>,
) -> Result<(), GateError> {
    let mut state = Stored::new(tx, who.session, who.agent, ledgers);
    engine::count_response(&mut state, admitted, response)
}

/// Gives back the reservation of a model call of `who` that was never
/// billed ([`engine::release`]).
pub fn release(
    tx: &(impl LedgerTx + ?Sized),
    who: &Whose<'_>,
    ledgers: &mut Ledgers<'_>,
    admitted: Admitted,
) {
    let mut state = Stored::new(tx, who.session, who.agent, ledgers);
    engine::release(&mut state, admitted);
}

/// The mark a session's model calls are counted by the model proxy: kept
/// as the read offset of a transcript path no file has (transcripts are
/// named by absolute paths), so both stores hold it as they are.
pub const PROXIED: &str = "<budgetgate proxy>";

/// Marks `session` as counted by the model proxy ([`PROXIED`]).
pub fn mark_proxied(tx: &(impl LedgerTx + ?Sized), session: &str) -> Result<(), GateError> {
    if tx.transcript_cursor(session, PROXIED)?.offset == 0 {
        let marked = TranscriptCursor {
            offset: 1,
            open: None,
        };
        tx.set_transcript_cursor(session, PROXIED, &marked)?;
    }
    Ok(())
}

/// Whether `session`'s model calls are counted by the model proxy: the
/// hook then leaves its transcript unread.
pub fn proxied(tx: &(impl LedgerTx + ?Sized), session: &str) -> Result<bool, GateError> {
    Ok(tx.transcript_cursor(session, PROXIED)?.offset > 0)
}

/// How a model call's reservation is stored (the store's reservation row
/// holds one text): `model:HELD:CHARGE:COST:MODEL`, the tokens held in the
/// ledger, the tokens and the cost (micro-USD, `-` for a model without a
/// price) to count should its process die before the response is counted,
/// and the model. A tool's name never holds `:`, so a tool call's
/// reservation is never read as one.
pub fn reservation_text(
    admitted: &Admitted,
    charge: u64,
    cost_micros: Option<u64>,
    model: &str,
) -> String {
    let held = admitted.reserved.map_or(0, |r| r.amount);
    let cost = cost_micros.map_or_else(|| "-".to_owned(), |c| c.to_string());
    format!("{MODEL_RESERVATION}{held}:{charge}:{cost}:{model}")
}

/// The prefix of [`reservation_text`].
pub const MODEL_RESERVATION: &str = "model:";

/// A model call's stored reservation, read back ([`reservation_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiring<'a> {
    /// Tokens held in the ledger.
    pub held: u64,
    /// Tokens to count.
    pub charge: u64,
    /// Cost to count; `None`: the model has no price.
    pub cost_micros: Option<u64>,
    /// The model.
    pub model: &'a str,
}

/// Reads a stored reservation; `None`: not a model call's.
pub fn read_reservation(text: &str) -> Option<Expiring<'_>> {
    let rest = text.strip_prefix(MODEL_RESERVATION)?;
    let mut parts = rest.splitn(4, ':');
    let held = parts.next()?.parse().ok()?;
    let charge = parts.next()?.parse().ok()?;
    let cost = match parts.next()? {
        "-" => None,
        c => Some(c.parse().ok()?),
    };
    Some(Expiring {
        held,
        charge,
        cost_micros: cost,
        model: parts.next()?,
    })
}

/// Counts a model call whose process died with its response uncounted
/// (its reservation expired): the call, its charge in tokens (at least
/// what was held in reserve mode) and its cost: never free, never given
/// back.
pub fn spend_expired(ledger: &mut budgetgate_core::budget::Ledger, e: &Expiring<'_>) {
    let (held, charge, cost_micros) = (e.held, e.charge, e.cost_micros);
    use budgetgate_core::budget::{Limit, Reservation};
    if ledger.commit(engine::ONE_MODEL_CALL, 1).is_err() {
        ledger.record(Limit::ModelCalls, 1);
    }
    let tokens = Reservation {
        limit: Limit::Tokens,
        amount: held,
    };
    if held == 0 || ledger.commit(tokens, charge.max(held)).is_err() {
        ledger.record(Limit::Tokens, charge.max(held));
    }
    if let Some(cost) = cost_micros {
        ledger.record(Limit::CostMicros, cost);
    }
}
