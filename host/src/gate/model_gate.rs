//! A front-end's model calls over the ledger: the core engine's check
//! before a model call ([`crate::gate::model`]) and its counting of the
//! response, each in one transaction of the session, with the call's
//! reservation stored so that a process killed mid-call never gives budget
//! back. The model proxy ([`crate::proxy`]) and the Python package
//! (`python/`) decide with it: reserve ([`ModelGate::admit`]), then commit
//! or roll back ([`ModelGate::finish`]).

use std::sync::Mutex;

use budgetgate_core::engine::{Admitted, ModelStop, Response, WorstCase};
use budgetgate_core::tools::ToolTable;
use budgetgate_core::turn::{TokenMode, TokenUsage};

use budgetgate_core::budget::Ledger;

use crate::gate::backend::Backend;
use crate::gate::budget_file::{price_of, ReplayBudget, BUDGET_TOOLS};
use crate::gate::{self, model, GateError};
use crate::store::Commit;

/// One model call to decide, as the front-end knows it before making it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelCall<'a> {
    /// The model asked for (its price is looked up by this name).
    pub model: &'a str,
    /// The most output tokens the call allows, if it says.
    pub max_output: Option<u64>,
    /// Tokens the input cannot be billed above.
    pub input_bound: u64,
    /// Whether the front-end sends the call with the output bound the gate
    /// names ([`Ticket::send_max_output`]): it can rewrite the request (the
    /// proxy can; the Python package's adapters cannot). Only then is a
    /// call whose worst case does not fit lowered to what is left
    /// (`reserve_min_reply_tokens`) instead of refused.
    pub can_set_max_output: bool,
}

/// A model call let through: what its response is counted against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The session it counts in.
    pub session: String,
    /// Its reservation's key in the store.
    pub key: String,
    /// What the engine holds for it.
    pub admitted: Admitted,
    /// The model asked for.
    pub model: String,
    /// Tokens counted when it ends with nothing reported: its reservation
    /// (reserve mode) or its input bound.
    pub charge: u64,
    /// Reserve mode: the output bound the call must be sent with, when it
    /// is not the request's own: lowered to fit
    /// ([`Admitted::lowered_output`]), or the budget's
    /// `reserve_max_tokens` for a request that sets none.
    pub send_max_output: Option<u64>,
}

/// How a model call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream reported this usage (all of it, or up to where the
    /// stream was cut).
    Billed(TokenUsage),
    /// The upstream cannot have billed it: it was not reached, or it
    /// refused the request (an error status before any answer).
    NotBilled,
    /// It may have been billed and nothing was reported (a stream cut
    /// before its first usage, an answer that could not be read): the
    /// ticket's charge is counted.
    Unknown,
}

/// The answer before a model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Forward it; count its response against the ticket.
    Go(Ticket),
    /// Do not: the budget says why.
    Stop(ModelStop),
}

/// The model-call gate: the ledger, the budget, and how long a call's
/// reservation outlives a proxy that stopped renewing it.
pub struct ModelGate {
    backend: Mutex<Backend>,
    budget: ReplayBudget,
    tools: Result<Box<ToolTable<BUDGET_TOOLS>>, String>,
    ttl_ms: u64,
}

impl ModelGate {
    /// A gate on `backend`; a call's reservation expires `ttl_ms` after it
    /// is made (longer than any call may last).
    pub fn new(backend: Backend, budget: ReplayBudget, ttl_ms: u64) -> Self {
        Self {
            backend: Mutex::new(backend),
            tools: budget.tool_table(),
            budget,
            ttl_ms,
        }
    }

    /// The budget.
    pub fn budget(&self) -> &ReplayBudget {
        &self.budget
    }

    fn transaction<T>(
        &self,
        commit: Commit,
        session: &str,
        now: u64,
        mut f: impl FnMut(
            &dyn crate::store::LedgerTx,
            &mut gate::Ledgers<'_>,
            u64,
        ) -> Result<T, GateError>,
    ) -> Result<T, String> {
        let tools = self.tools.as_deref().map_err(|e| format!("budget {e}"))?;
        let mut backend = self
            .backend
            .lock()
            .map_err(|_| "the ledger's lock was poisoned".to_owned())?;
        backend.transaction(
            commit,
            session,
            &self.budget,
            tools,
            now,
            &mut |tx, ledgers, _, _, now| f(tx, ledgers, now),
        )
    }

    /// Decides model call `request` of `session` (`key`: unique to the
    /// call) at `now`: the engine's check before a model call; in reserve
    /// mode its worst case (its input bound and its most output tokens, or
    /// the budget's `reserve_max_tokens`) reserved, lowered to fit when the
    /// front-end can send it so and the budget allows
    /// (`reserve_min_reply_tokens`). A call let through is
    /// stored as a reservation until [`Self::finish`]. `Err`: the ledger
    /// could not decide (the front-end refuses: fail closed).
    pub fn admit(
        &self,
        session: &str,
        key: &str,
        request: &ModelCall<'_>,
        now: u64,
    ) -> Result<Admission, String> {
        let reserve = self.budget.limits.token_mode == TokenMode::Reserve;
        let output = request.max_output.or(self.budget.reserve_max_tokens);
        let worst = reserve.then(|| WorstCase {
            input: request.input_bound,
            output: output.unwrap_or(u64::MAX),
            min_output: self
                .budget
                .reserve_min_reply_tokens
                .filter(|_| request.can_set_max_output),
        });
        let ttl = self.ttl_ms;
        let price = price_of(&self.budget.prices, request.model);
        self.transaction(Commit::Durable, session, now, |tx, ledgers, now| {
            model::mark_proxied(tx, session)?;
            gate::count_expired(tx, session, &mut ledgers.session, now)?;
            ledgers.observe_time(now);
            let who = model::Whose {
                session,
                agent: None,
            };
            match model::before_model_call(tx, &who, ledgers, now, worst)? {
                Err(stop) => {
                    tx.log(
                        now,
                        session,
                        "deny",
                        &format!("model call {key}: {}", stop.reason),
                    )?;
                    Ok(Admission::Stop(stop))
                }
                Ok(admitted) => {
                    let send_max_output = admitted.lowered_output.or_else(|| {
                        (reserve && request.max_output.is_none())
                            .then_some(output)
                            .flatten()
                    });
                    let charge = match worst {
                        Some(w) => w.input.saturating_add(send_max_output.unwrap_or(w.output)),
                        None => request.input_bound,
                    };
                    let cost = price.map(|p| {
                        p.cost_micros(&TokenUsage {
                            output_tokens: charge,
                            ..TokenUsage::ZERO
                        })
                    });
                    let text = model::reservation_text(&admitted, charge, cost, request.model);
                    tx.put_reservation(session, key, &text, now.saturating_add(ttl))?;
                    if let (Some(lowered), Some(w)) = (admitted.lowered_output, worst) {
                        tx.log(
                            now,
                            session,
                            "lower",
                            &format!(
                                "model call {key}: its reply bound lowered from {} to {lowered} tokens to fit the token budget",
                                w.output
                            ),
                        )?;
                    }
                    Ok(Admission::Go(Ticket {
                        session: session.to_owned(),
                        key: key.to_owned(),
                        admitted,
                        model: request.model.to_owned(),
                        charge,
                        send_max_output,
                    }))
                }
            }
        })
    }

    /// Counts how call `ticket` ended, once: its reservation is taken
    /// from the store and committed with the usage reported (or its charge
    /// when nothing was), or given back when the call cannot have been
    /// billed. A reservation no longer stored was counted already (it
    /// expired): nothing more is counted. Its commit is not waited for on
    /// disk ([`Commit::Lazy`]): the next decision's durable commit carries
    /// it, and a power cut before that leaves the reservation, counted at
    /// its charge when it expires, as for a proxy killed mid-call.
    pub fn finish(&self, ticket: &Ticket, outcome: Outcome, now: u64) -> Result<(), String> {
        let price = price_of(&self.budget.prices, &ticket.model);
        self.transaction(Commit::Lazy, &ticket.session, now, |tx, ledgers, now| {
            let session = ticket.session.as_str();
            if tx.take_reservation(session, &ticket.key)?.is_none() {
                return Ok(());
            }
            let who = model::Whose {
                session,
                agent: None,
            };
            let usage = match outcome {
                Outcome::NotBilled => {
                    model::release(tx, &who, ledgers, ticket.admitted);
                    return Ok(());
                }
                Outcome::Billed(usage) => usage,
                Outcome::Unknown => TokenUsage {
                    output_tokens: ticket.charge,
                    ..TokenUsage::ZERO
                },
            };
            let response = Response {
                model: &ticket.model,
                tokens: usage.total(),
                cost_micros: price.map(|p| p.cost_micros(&usage)),
                new_call: true,
            };
            model::count_response(tx, &who, ledgers, ticket.admitted, &response)?;
            tx.log(
                now,
                session,
                "model",
                &format!("{} {}: {} tokens", ticket.key, ticket.model, usage.total()),
            )?;
            Ok(())
        })
    }

    /// The session's ledger at `now`, with the budget's maxima, as the
    /// next decision reads it (reservations expired by `now` counted as
    /// spent). Stored again as it is read: its time is brought up to `now`.
    pub fn ledger(&self, session: &str, now: u64) -> Result<Ledger, String> {
        self.transaction(Commit::Durable, session, now, |tx, ledgers, now| {
            gate::count_expired(tx, session, &mut ledgers.session, now)?;
            ledgers.observe_time(now);
            Ok(ledgers.session.clone())
        })
    }
}
