//! The model-call side of the gate over the store (`SPEC C`, `SPEC E`): the
//! core engine's check before a model call and its counting of a response
//! ([`budgetgate_core::engine::before_model_call`],
//! [`budgetgate_core::engine::count_response`]), with the session's state
//! read from and written to a [`LedgerTx`]. The hook counts the responses
//! its transcript shows; the model proxy decides before each call and
//! counts the response it relays.

use budgetgate_core::engine::{self, Admitted, ModelStop, Response};

use super::{GateError, Ledgers, Stored};
use crate::ledger::LedgerTx;

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
/// ([`engine::before_model_call`]); in reserve mode `worst_case` tokens are
/// reserved in `ledgers` when they fit. The caller stores `ledgers` with
/// the transaction.
pub fn before_model_call(
    tx: &(impl LedgerTx + ?Sized),
    who: &Whose<'_>,
    ledgers: &mut Ledgers<'_>,
    now: u64,
    worst_case: Option<u64>,
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
