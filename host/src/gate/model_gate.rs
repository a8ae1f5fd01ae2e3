//! A front-end's model calls over the ledger: the core engine's check
//! before a model call ([`crate::gate::model`]) and its counting of the
//! response, each in one transaction of the session, with the call's
//! reservation stored so that a process killed mid-call never gives budget
//! back. The model proxy ([`crate::proxy`]) and the Python package
//! (`python/`) decide with it: reserve ([`ModelGate::admit`]), then commit
//! or roll back ([`ModelGate::finish`]).

use std::sync::Mutex;

use budgetgate_core::engine::{self, Admitted, ModelStop, Response, WorstCase};
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
    /// How many replies the call asks for, each up to its output bound
    /// (Chat Completions' `n`; 1 elsewhere): its worst case counts each. A
    /// call of more than one is never lowered.
    pub choices: u64,
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
    /// Its answer began and broke off before its end (the client went
    /// away, the upstream failed, the deadline passed): what was reported
    /// so far (`reported`; a stream's first usage reports the input and a
    /// placeholder of output) is not what was generated. Reserve mode
    /// counts the reservation (the most it can have been billed), or more
    /// if more was reported; after the fact, the input reported (else the
    /// input bound) and as output at least `answer_bytes`, the bytes of
    /// the answer read (no token is less than a byte of the text it adds).
    Cut {
        /// The usage reported before the cut, if any.
        reported: Option<TokenUsage>,
        /// The bytes of the answer read from the upstream.
        answer_bytes: u64,
    },
}

/// The answer before a model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Forward it; count its response against the ticket.
    Go(Ticket),
    /// Do not: the budget says why.
    Stop(ModelStop),
}

/// How a call ended, to count ([`ModelGate::finish_soon`]).
struct Finish {
    ticket: Ticket,
    outcome: Outcome,
    now: u64,
}

/// The model-call gate: the ledger, the budget, and how long a call's
/// reservation outlives a proxy that stopped renewing it.
pub struct ModelGate {
    backend: Mutex<Backend>,
    /// Calls that ended, not yet counted ([`ModelGate::finish_soon`]).
    pending: Mutex<Vec<Finish>>,
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
            pending: Mutex::new(Vec::new()),
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
        let choices = request.choices.max(1);
        let worst = reserve.then(|| WorstCase {
            input: request.input_bound,
            output: output.map_or(u64::MAX, |o| o.saturating_mul(choices)),
            min_output: self
                .budget
                .reserve_min_reply_tokens
                .filter(|_| request.can_set_max_output && choices == 1),
        });
        let ttl = self.ttl_ms;
        let price = price_of(&self.budget.prices, request.model);
        // The session's calls that ended since its last decision are
        // counted first, in this decision's transaction.
        let ended = self.take_pending(session);
        let decided = self.transaction(Commit::Durable, session, now, |tx, ledgers, now| {
            for f in &ended {
                self.count_finish(tx, ledgers, &f.ticket, f.outcome, f.now)?;
            }
            model::mark_proxied(tx, session)?;
            gate::count_expired(tx, session, &mut ledgers.session, now)?;
            ledgers.observe_time(now);
            let who = model::Whose {
                session,
                agent: None,
            };
            // The model asked for is known before the call: under a cost
            // limit, one without a price is not made (the engine's
            // `unpriced-model`, after the limits it checks first), never
            // let through free to be found out from its response.
            let unpriced = price
                .is_none()
                .then(|| engine::spent_in_memory(&ledgers.session, now, true))
                .flatten();
            let decided = match unpriced {
                Some(stop) => Err(stop),
                None => model::before_model_call(tx, &who, ledgers, now, worst)?,
            };
            match decided {
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
        });
        if decided.is_err() {
            self.put_back(ended);
        }
        decided
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
        self.transaction(Commit::Lazy, &ticket.session, now, |tx, ledgers, _| {
            self.count_finish(tx, ledgers, ticket, outcome, now)
        })
    }

    /// [`Self::finish`], left for the next decision on the ticket's session
    /// to count in its own transaction (one transaction a call instead of
    /// two when the next call comes at once: an agent's loop) or for
    /// [`Self::flush`], which the caller runs next. Until one of them has,
    /// the call holds its reservation, as in [`Self::finish`]'s own
    /// transaction until it commits; a process that dies first leaves it,
    /// counted at its charge when it expires.
    pub fn finish_soon(&self, ticket: Ticket, outcome: Outcome, now: u64) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.push(Finish {
                ticket,
                outcome,
                now,
            });
        }
        // A poisoned lock: nothing is counted, and the reservation expires
        // and is counted at its charge (never free).
    }

    /// Counts every call left by [`Self::finish_soon`] that no decision
    /// counted yet, each in its own transaction; the ones that could not be
    /// counted, with why (their reservations expire and are counted at
    /// their charge).
    pub fn flush(&self) -> Vec<(String, String)> {
        let taken = match self.pending.lock() {
            Ok(mut pending) => std::mem::take(&mut *pending),
            Err(_) => return Vec::new(),
        };
        taken
            .into_iter()
            .filter_map(|f| {
                self.finish(&f.ticket, f.outcome, f.now)
                    .err()
                    .map(|e| (f.ticket.key, e))
            })
            .collect()
    }

    /// The calls of `session` left by [`Self::finish_soon`], taken out.
    fn take_pending(&self, session: &str) -> Vec<Finish> {
        let Ok(mut pending) = self.pending.lock() else {
            return Vec::new();
        };
        if pending.iter().all(|f| f.ticket.session != session) {
            return Vec::new();
        }
        let (mine, others) = std::mem::take(&mut *pending)
            .into_iter()
            .partition(|f| f.ticket.session == session);
        *pending = others;
        mine
    }

    /// Puts back calls taken by [`Self::take_pending`] whose transaction
    /// failed: [`Self::flush`] tries them again.
    fn put_back(&self, finishes: Vec<Finish>) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.extend(finishes);
        }
    }

    /// Counts how one call ended, in the transaction `tx` of its session:
    /// its reservation taken from the store and committed with the usage
    /// reported (or its charge when nothing was), or given back when the
    /// call cannot have been billed; nothing when the reservation is no
    /// longer stored (it expired and was counted).
    fn count_finish(
        &self,
        tx: &dyn crate::store::LedgerTx,
        ledgers: &mut gate::Ledgers<'_>,
        ticket: &Ticket,
        outcome: Outcome,
        now: u64,
    ) -> Result<(), GateError> {
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
            Outcome::Cut {
                reported,
                answer_bytes,
            } => cut_usage(ticket, reported, answer_bytes),
        };
        let price = price_of(&self.budget.prices, &ticket.model);
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

/// What a call whose answer broke off counts ([`Outcome::Cut`]).
fn cut_usage(ticket: &Ticket, reported: Option<TokenUsage>, answer_bytes: u64) -> TokenUsage {
    if ticket.admitted.reserved.is_some() {
        // The reservation: its whole worst case, or what was reported
        // when that is more.
        let reported = reported.unwrap_or(TokenUsage::ZERO);
        if reported.total() >= ticket.charge {
            return reported;
        }
        return TokenUsage {
            output_tokens: ticket.charge,
            ..TokenUsage::ZERO
        };
    }
    match reported {
        Some(r) => TokenUsage {
            output_tokens: r.output_tokens.max(answer_bytes),
            ..r
        },
        // After the fact, the charge is the input bound.
        None => TokenUsage {
            input_tokens: ticket.charge,
            output_tokens: answer_bytes,
            ..TokenUsage::ZERO
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::budget_file::parse_budget;
    use crate::store::MemoryStore;
    use budgetgate_core::budget::Limit;

    fn gate() -> ModelGate {
        let budget = parse_budget("[budget]\nmax_model_calls = 10\nmax_tokens = 100000\n").unwrap();
        ModelGate::new(Backend::Memory(MemoryStore::new()), budget, 600_000)
    }

    fn call(gate: &ModelGate, session: &str, key: &str) -> Ticket {
        let request = ModelCall {
            model: "m",
            max_output: Some(10),
            input_bound: 100,
            can_set_max_output: true,
            choices: 1,
        };
        match gate.admit(session, key, &request, 1_000).unwrap() {
            Admission::Go(t) => t,
            Admission::Stop(s) => panic!("{s:?}"),
        }
    }

    const USAGE: TokenUsage = TokenUsage {
        input_tokens: 40,
        output_tokens: 2,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
    };

    fn figures(gate: &ModelGate, session: &str) -> (u64, u64, u64) {
        let l = gate.ledger(session, 1_000).unwrap();
        (
            l.used(Limit::Tokens),
            l.used(Limit::ModelCalls),
            l.reserved(Limit::ModelCalls),
        )
    }

    /// Issue 31: a call that ended is counted by the session's next
    /// decision, in its transaction, when that comes before the flush;
    /// the flush then counts nothing again. Another session's decision
    /// leaves it to the flush.
    #[test]
    fn a_call_left_to_count_is_counted_once_by_the_next_decision_or_the_flush() {
        let gate = gate();
        let first = call(&gate, "a", "k1");
        gate.finish_soon(first, Outcome::Billed(USAGE), 1_000);
        assert_eq!(figures(&gate, "a"), (0, 0, 1), "held, not yet counted");
        let _other = call(&gate, "b", "k2");
        assert_eq!(
            figures(&gate, "a"),
            (0, 0, 1),
            "not by another session's decision"
        );
        let _second = call(&gate, "a", "k3");
        assert_eq!(figures(&gate, "a"), (42, 1, 1), "by the session's next one");
        assert!(gate.flush().is_empty());
        assert_eq!(figures(&gate, "a"), (42, 1, 1), "once");

        let third = call(&gate, "b", "k4");
        gate.finish_soon(third, Outcome::Billed(USAGE), 1_000);
        assert!(gate.flush().is_empty());
        assert_eq!(figures(&gate, "b"), (42, 1, 1), "by the flush");
        assert!(gate.flush().is_empty());
        assert_eq!(figures(&gate, "b"), (42, 1, 1), "once");
    }
}
