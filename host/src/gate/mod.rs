//! The tool-call decision every desktop front-end makes: the Claude Code
//! hook ([`crate::hook`]) and the MCP gateway ([`crate::mcp`]) call
//! [`decide_tool_call`], so both refuse in the same order with the same
//! words (`SPEC C`, `SPEC E`: one budget engine).
//!
//! The order is the core's one check order
//! ([`budgetgate_core::engine::CallCheck::ORDER`]): `invalid-name`,
//! `duplicate-call-id`, `budget-exhausted` (the hook and the gateway cannot
//! refuse the model call itself), `repeat`, `tool-budget`, `tool-cap`,
//! `rate-limit`, then approval. This module adapts the store to the
//! engine ([`budgetgate_core::engine::State`]) and words its answer; it
//! restates no check. A call asked about again (the same id with the same
//! tool and input, where the front-end runs nothing itself: a second copy
//! of the hook, a retry) gets its first answer, counted once.
//!
//! Reservations (`SPEC E`, reserve → commit → roll back) are stored with an
//! expiry that the process holding them renews while their calls run or
//! wait for approval. A reservation still stored after its expiry belongs
//! to a process that died with its call's outcome unknown: every decision
//! first counts the session's expired reservations as spent
//! ([`count_expired`]), never gives them back, since the call may have run.
//! A call is given back only when it is known not to have run
//! ([`roll_back_reservation`]).

pub mod backend;
pub mod budget_file;
pub mod budget_report;
pub mod clock;
pub mod digest;
pub mod fingerprint;
pub mod loops;
pub mod model;
pub mod model_gate;
pub mod usage;

use budgetgate_core::budget::{Exceeded, Ledger, Limit};
use budgetgate_core::engine::{self, Seen, Shown, ONE_CALL};
use budgetgate_core::tools::ToolTable;
use budgetgate_core::turn::{CallFingerprint, RefusalReason};
use serde_json::Value;

use crate::store::{LedgerTx, StoreError};
use budget_file::{ReplayBudget, BUDGET_TOOLS};

/// Why a decision could not be made; the front-end refuses (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The budget cannot be applied (a cap's tool name, too many caps).
    #[error("budget {0}")]
    Budget(String),
    /// The call cannot be decided (its input is nested too deeply to compare).
    #[error("{0}")]
    Input(String),
    /// The ledger.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One tool call to decide.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// The tool's name, as sent.
    pub name: &'a str,
    /// Its arguments (a JSON object).
    pub input: &'a Value,
    /// Its id, unique in the session (the hook's `tool_use_id`; for MCP the
    /// connection and the JSON-RPC request id).
    pub call_id: &'a str,
    /// How the id is named to the model (`the tool_use_id "toolu_1"`).
    pub shown_id: &'a str,
    /// Where the id must be unique, as the refusal says it (`in this
    /// session`; `on this connection` for MCP's request ids).
    pub id_scope: &'a str,
    /// The id is known to be reused by another call (the Claude Code
    /// hook: its transcript shows it in two responses): refused
    /// `duplicate-call-id` whatever the id was answered before.
    pub reused: bool,
}

/// How an attempt let through is counted.
#[derive(Debug, Clone, Copy)]
pub enum Counting<'a> {
    /// Counted at once (the hook: it never learns whether the tool ran).
    Record,
    /// Reserved until the work ends ([`commit_reservation`] or
    /// [`roll_back_reservation`]), stored under `key` until `expires_ms`.
    Reserve {
        /// The reservation's name in the session.
        key: &'a str,
        /// When an unfinished reservation is rolled back by the next decision.
        expires_ms: u64,
    },
}

impl Counting<'_> {
    fn engine(self) -> engine::Counting {
        match self {
            Self::Record => engine::Counting::Record,
            Self::Reserve { .. } => engine::Counting::Reserve,
        }
    }
}

/// A refused call: the reason word, the text the model reads, and the
/// figures behind it (for MCP's `_meta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The contract's reason word (`tool-budget`, `repeat`, …).
    pub reason: &'static str,
    /// The text the model reads.
    pub text: String,
    /// The limit's key (`tool_calls`, `tokens`, `per_minute`, `max_repeats`,
    /// `max_calls.TOOL`), when a limit refused.
    pub limit: Option<String>,
    /// Used (with what is reserved) when it refused.
    pub used: Option<u64>,
    /// The limit's maximum.
    pub max: Option<u64>,
    /// Milliseconds until a rate window reopens.
    pub retry_after_ms: Option<u64>,
    /// The session's own budget is spent: the front-end also ends the agent
    /// loop (the hook's `continue: false`), since every next model call
    /// would be refused.
    pub ends_session: bool,
}

impl Refusal {
    /// A refusal with the core's word and text for `reason` after `detail`.
    pub fn new(reason: RefusalReason, detail: &str) -> Self {
        let extra = if reason == RefusalReason::BudgetExhausted {
            " Stop here and tell the user what you have done so far and what is left; do not retry."
        } else {
            ""
        };
        Self::worded(reason.as_str(), detail, reason.message(), extra)
    }

    /// The refusal of a call of `tool` that needs a person's approval
    /// (`needs_approval`) and did not get it: `answer` says how (declined,
    /// timed out, no one to ask). Every front-end's one wording.
    pub fn approval_refused(tool: &str, answer: &str) -> Self {
        Self::new(
            RefusalReason::ApprovalRefused,
            &format!(
                "{tool} needs a person's approval (needs_approval in the budget), and {answer}"
            ),
        )
    }

    /// A refusal with its own word and text.
    pub fn worded(reason: &'static str, detail: &str, message: &str, extra: &str) -> Self {
        Self {
            reason,
            text: format!("budgetgate refused this call ({reason}): {detail}. {message}{extra}"),
            limit: None,
            used: None,
            max: None,
            retry_after_ms: None,
            ends_session: false,
        }
    }

    /// The engine's refusal of `call`, worded (`SPEC E`: one set of words).
    pub fn of(refusal: &engine::Refusal, call: &Shown<'_>) -> Self {
        let mut out = Self::new(refusal.reason, &refusal.detail(call).to_string());
        if let Some((limit, used, max)) = refusal.figures() {
            out.limit = Some(limit.key_for(call.name).to_string());
            out.used = Some(used);
            out.max = Some(max);
        }
        out.retry_after_ms = refusal.retry_after_ms();
        out.ends_session = refusal.ends_session();
        out
    }
}

/// What is decided about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Refused; nothing counted (but the repetition count and the call id).
    Refuse(Refusal),
    /// Counted; it may run.
    Run,
    /// Counted; it may run once a person says yes (the text says why).
    Ask(String),
}

/// The reason words a stored answer may hold, as the static words they are.
fn reason_word(word: &str) -> Option<&'static str> {
    RefusalReason::ALL
        .iter()
        .map(|r| r.as_str())
        .find(|w| *w == word)
}

impl Verdict {
    /// The verdict as stored with its call id, so the same call seen again
    /// (a second copy of the hook, a retry) gets the same answer.
    pub fn stored(&self) -> String {
        match self {
            Self::Run => serde_json::json!({"run": true}),
            Self::Ask(text) => serde_json::json!({"ask": text}),
            Self::Refuse(r) => serde_json::json!({"refuse": r.reason, "text": r.text,
                "limit": r.limit, "used": r.used, "max": r.max,
                "retry_after_ms": r.retry_after_ms, "ends_session": r.ends_session}),
        }
        .to_string()
    }

    /// Reads a stored verdict back; anything else is an error (fail closed).
    pub fn from_stored(text: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::Answer(text.chars().take(80).collect());
        let v: Value = serde_json::from_str(text).map_err(|_| bad())?;
        if v.get("run").is_some() {
            return Ok(Self::Run);
        }
        if let Some(ask) = v.get("ask").and_then(Value::as_str) {
            return Ok(Self::Ask(ask.to_owned()));
        }
        let reason = v
            .get("refuse")
            .and_then(Value::as_str)
            .and_then(reason_word)
            .ok_or_else(bad)?;
        Ok(Self::Refuse(Refusal {
            reason,
            text: v
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(bad)?
                .to_owned(),
            limit: v.get("limit").and_then(Value::as_str).map(str::to_owned),
            used: v.get("used").and_then(Value::as_u64),
            max: v.get("max").and_then(Value::as_u64),
            retry_after_ms: v.get("retry_after_ms").and_then(Value::as_u64),
            ends_session: v
                .get("ends_session")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }))
    }
}

/// The session's fresh ledger with the budget's maxima and the caps of
/// `tools`, the budget's tool table ([`ReplayBudget::tool_table`]).
pub fn apply_budget(
    ledger: &mut Ledger,
    budget: &ReplayBudget,
    tools: &ToolTable<BUDGET_TOOLS>,
) -> Result<(), GateError> {
    let l = &budget.limits;
    ledger.set_max(Limit::ModelCalls, Some(u64::from(l.max_model_calls)));
    ledger.set_max(Limit::Tokens, Some(l.max_tokens));
    ledger.set_max(Limit::Millis, Some(l.max_millis));
    ledger.set_max(Limit::CostMicros, l.max_cost_micros);
    ledger.set_max(Limit::ToolCalls, l.max_tool_calls.map(u64::from));
    // The caps are the budget file's tool table as it is now: the calls of
    // a tool whose cap was removed are forgotten (its cap is lifted), those
    // counted under a cap that stays are kept.
    ledger
        .track_caps(tools)
        .map_err(|e| GateError::Budget(e.to_string()))?;
    Ok(())
}

fn apply_subagent(ledger: &mut Ledger, budget: &ReplayBudget) {
    let s = &budget.subagent;
    ledger.set_max(Limit::ModelCalls, s.max_model_calls.map(u64::from));
    ledger.set_max(Limit::Tokens, s.max_tokens);
    ledger.set_max(Limit::ToolCalls, s.max_tool_calls.map(u64::from));
}

/// The ledgers one decision reads and writes: the session's and, for a
/// sub-agent's event, the sub-agent's.
pub struct Ledgers<'t> {
    /// The session's ledger.
    pub session: Ledger,
    /// Sub-agents' ledgers loaded so far.
    pub agents: Vec<(String, Ledger)>,
    /// The budget's tool table ([`ReplayBudget::tool_table`]), built once
    /// by the caller: a gateway keeps one for all its decisions (building
    /// it clears a 22 KiB table).
    pub tools: &'t ToolTable<BUDGET_TOOLS>,
}

impl<'t> Ledgers<'t> {
    /// The session's ledger as stored (a fresh one started `now` if none),
    /// with the budget's maxima; `tools` is `budget`'s tool table.
    pub fn load(
        tx: &(impl LedgerTx + ?Sized),
        session: &str,
        budget: &ReplayBudget,
        tools: &'t ToolTable<BUDGET_TOOLS>,
        now: u64,
    ) -> Result<Self, GateError> {
        let mut ledger = match tx.ledger(session, "")? {
            Some(ledger) => ledger,
            // A session with state but no ledger lost it (deleted by hand,
            // or by a tool): refusing is the only safe answer.
            None if tx.has_traces(session)? => {
                return Err(GateError::Store(StoreError::LostLedger(session.to_owned())))
            }
            None => Ledger::new(now),
        };
        apply_budget(&mut ledger, budget, tools)?;
        Ok(Self {
            session: ledger,
            agents: Vec::new(),
            tools,
        })
    }

    /// The ledger of sub-agent `agent`, loaded on first use.
    pub fn agent(
        &mut self,
        tx: &(impl LedgerTx + ?Sized),
        session: &str,
        agent: &str,
        budget: &ReplayBudget,
        now: u64,
    ) -> Result<&mut Ledger, GateError> {
        // The session's own ledger is stored under the empty agent: a
        // sub-agent named so would be read and written over it.
        if agent.is_empty() {
            return Err(GateError::Input("a sub-agent's id is empty".into()));
        }
        if let Some(at) = self.agents.iter().position(|(a, _)| a == agent) {
            return Ok(&mut self.agents[at].1);
        }
        let mut ledger = tx
            .ledger(session, agent)?
            .unwrap_or_else(|| Ledger::new(now));
        apply_subagent(&mut ledger, budget);
        self.agents.push((agent.to_owned(), ledger));
        let last = self.agents.len() - 1;
        Ok(&mut self.agents[last].1)
    }

    /// Brings every ledger's time up to `now`.
    pub fn observe_time(&mut self, now: u64) {
        self.session.observe_time(now);
        for (_, ledger) in &mut self.agents {
            ledger.observe_time(now);
        }
    }

    /// Stores every ledger.
    pub fn store(
        &mut self,
        tx: &(impl LedgerTx + ?Sized),
        session: &str,
        now: u64,
    ) -> Result<(), GateError> {
        self.observe_time(now);
        tx.put_ledger(session, "", &self.session, now)?;
        for (agent, ledger) in &mut self.agents {
            tx.put_ledger(session, agent, ledger, now)?;
        }
        Ok(())
    }
}

/// The store as the engine reads it (`SPEC E`): the session's ledgers, its
/// call ids, repetition counts, rate windows and unpriced models.
struct Stored<'a, 't, T: LedgerTx + ?Sized> {
    tx: &'a T,
    session: &'a str,
    agent: Option<&'a str>,
    ledgers: &'a mut Ledgers<'t>,
    /// The call id as looked up before the decision (once: the same row
    /// answers a call asked about again).
    seen: Seen,
    /// Whether the engine came to the id's check: only then is the id
    /// remembered with its answer.
    id_checked: bool,
    /// The model counted without a price, once asked about.
    unpriced: Option<String>,
    /// The session's loop window, once asked for (`[loops]`); stored back
    /// after the decision.
    window: Option<Box<engine::Window>>,
}

impl<'a, 't, T: LedgerTx + ?Sized> Stored<'a, 't, T> {
    fn new(
        tx: &'a T,
        session: &'a str,
        agent: Option<&'a str>,
        ledgers: &'a mut Ledgers<'t>,
    ) -> Self {
        Self {
            tx,
            session,
            agent,
            ledgers,
            seen: Seen::New,
            id_checked: false,
            unpriced: None,
            window: None,
        }
    }
}

impl<T: LedgerTx + ?Sized> engine::State for Stored<'_, '_, T> {
    type Error = GateError;

    fn see_id(&mut self, _id: &str) -> Result<Seen, GateError> {
        self.id_checked = true;
        Ok(self.seen)
    }

    fn raise_repeat(&mut self, key: CallFingerprint) -> Result<Option<u64>, GateError> {
        Ok(Some(self.tx.raise_repeat(self.session, key.as_u128())?))
    }

    fn ledgers(&mut self) -> engine::Ledgers<'_> {
        let agent = self.agent;
        let Ledgers {
            session, agents, ..
        } = &mut *self.ledgers;
        engine::Ledgers {
            session,
            agent: agents
                .iter_mut()
                .find(|(a, _)| Some(a.as_str()) == agent)
                .map(|(_, ledger)| ledger),
        }
    }

    fn unpriced(&mut self) -> Result<bool, GateError> {
        self.unpriced = self.tx.unpriced(self.session)?;
        Ok(self.unpriced.is_some())
    }

    fn rate_calls_after(&mut self, since_ms: u64) -> Result<(u64, Option<u64>), GateError> {
        Ok(self.tx.rate_calls_after(self.session, since_ms)?)
    }

    fn add_rate_call(&mut self, now_ms: u64) -> Result<(), GateError> {
        Ok(self
            .tx
            .add_rate_call(self.session, now_ms, engine::LONGEST_RATE_WINDOW_MS)?)
    }

    fn loop_window(&mut self) -> Result<Option<&mut engine::Window>, GateError> {
        if self.window.is_none() {
            let stored = loops::load_window(self.tx, self.session, self.agent.unwrap_or(""))?;
            self.window = Some(Box::new(stored.unwrap_or_default()));
        }
        Ok(self.window.as_deref_mut())
    }

    fn add_unpriced(&mut self, model: &str) -> Result<(), GateError> {
        self.tx.add_unpriced(self.session, model)?;
        self.unpriced = Some(model.to_owned());
        Ok(())
    }
}

/// The first before-call limit reached among the session's ledger and the
/// sub-agent's (its text and figures), or a model used without a price in
/// cost mode: the engine's `budget-exhausted` check
/// ([`engine::budget_exhausted`]).
pub fn exhausted(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    agent: Option<&str>,
    ledgers: &mut Ledgers<'_>,
) -> Result<Option<(String, Option<Exceeded>)>, GateError> {
    let mut state = Stored::new(tx, session, agent, ledgers);
    let Some(refusal) = engine::budget_exhausted(&mut state)? else {
        return Ok(None);
    };
    let shown = Shown {
        name: "",
        id: "",
        id_scope: "",
        unpriced_model: state.unpriced.as_deref(),
    };
    let exceeded = match refusal.why {
        engine::Why::Exhausted { exceeded, .. } => exceeded,
        _ => None,
    };
    Ok(Some((refusal.detail(&shown).to_string(), exceeded)))
}

fn give_back(ledger: &mut Ledger, tool: &str) {
    // A ledger stored before the reservation (another build) may hold none:
    // nothing to give back then.
    let _ = ledger.roll_back(ONE_CALL);
    ledger.release_tool(tool);
}

/// Counts as spent every reservation of `session` that expired by `now`:
/// its process died (or could not renew it) with the call's outcome
/// unknown, and a call that may have run is never given back (`SPEC E`).
/// The tool's cap already counted it when it was reserved. Returns how many.
pub fn count_expired(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    ledger: &mut Ledger,
    now: u64,
) -> Result<usize, GateError> {
    // A ledger that holds no reservation has none stored: every stored
    // reservation is held in the ledger written by the same transaction
    // (one query less per decision when no call is in flight).
    if ledger.reserved(Limit::ToolCalls) == 0 && ledger.reserved(Limit::ModelCalls) == 0 {
        return Ok(0);
    }
    let expired = tx.take_expired_reservations(session, now)?;
    for text in &expired {
        match model::read_reservation(text) {
            Some(e) => {
                model::spend_expired(ledger, &e);
                // A cost budget never counts a call as free.
                if e.cost_micros.is_none() && ledger.max(Limit::CostMicros).is_some() {
                    tx.add_unpriced(session, e.model)?;
                }
            }
            None => spend(ledger),
        }
    }
    if !expired.is_empty() {
        tx.log(
            now,
            session,
            "expire",
            &format!(
                "{} reservation(s) of a gateway that stopped renewing them counted as spent (their calls may have run)",
                expired.len()
            ),
        )?;
    }
    Ok(expired.len())
}

/// Turns one reserved tool call into a used one.
fn spend(ledger: &mut Ledger) {
    if ledger.commit(ONE_CALL, 1).is_err() {
        // A ledger stored before the reservation (another build) holds
        // none: the call is counted all the same.
        ledger.record(Limit::ToolCalls, 1);
    }
}

/// Renews reservation `key` of `session` until `expires_ms` (its call is
/// still running or awaiting approval in this process). `false` when it is
/// no longer stored: it expired and was counted as spent by another
/// process's decision (its later commit then counts nothing more).
pub fn renew_reservation(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    key: &str,
    expires_ms: u64,
) -> Result<bool, GateError> {
    match tx.take_reservation(session, key)? {
        Some(tool) => {
            tx.put_reservation(session, key, &tool, expires_ms)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Ends reservation `key` of `session`: the call counts. A reservation no
/// longer stored was counted already (it expired and [`count_expired`]
/// spent it), or removed by an operator's `ledger reset`: nothing more is
/// counted then.
/// (The tool's cap counted the call when it was reserved.)
pub fn commit_reservation(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    ledger: &mut Ledger,
    key: &str,
) -> Result<(), GateError> {
    if tx.take_reservation(session, key)?.is_some() {
        spend(ledger);
    }
    Ok(())
}

/// Counts one tool call that holds no reservation (one given back on the
/// server's error, then answered with a result after all): the call and,
/// against `cap`, the tool.
pub fn count_unreserved(ledger: &mut Ledger, tool: &str, cap: Option<u32>) {
    ledger.record(Limit::ToolCalls, 1);
    let _ = ledger.try_count_tool(tool, cap);
}

/// Ends reservation `key` of `session` with nothing counted: only for a
/// call known not to have run (the server answered its request with a
/// JSON-RPC error, or it never reached the server). One already ended,
/// or spent at its expiry, is left alone.
pub fn roll_back_reservation(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    ledger: &mut Ledger,
    key: &str,
) -> Result<(), GateError> {
    if let Some(tool) = tx.take_reservation(session, key)? {
        give_back(ledger, &tool);
    }
    Ok(())
}

/// Whose call is decided, with what budget, when.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The session (the ledger's key).
    pub session: &'a str,
    /// The sub-agent, for a sub-agent's call (the hook's `agent_id`).
    pub agent: Option<&'a str>,
    /// The budget.
    pub budget: &'a ReplayBudget,
    /// Now, in milliseconds since the Unix epoch.
    pub now: u64,
}

/// Decides one tool call against the ledgers loaded in `tx` through the
/// core's engine, in its order (the module docs). The caller stores the
/// ledgers and commits the transaction.
pub fn decide_tool_call(
    tx: &(impl LedgerTx + ?Sized),
    cx: &Context<'_>,
    ledgers: &mut Ledgers<'_>,
    call: &ToolCall<'_>,
    counting: Counting<'_>,
) -> Result<Verdict, GateError> {
    let Context {
        session,
        agent,
        budget,
        now,
    } = *cx;
    count_expired(tx, session, &mut ledgers.session, now)?;
    let fingerprint = fingerprint::fingerprint_value(call.input).map(|f| f.with_name(call.name));
    let decided = engine::Call {
        name: call.name,
        id: call.call_id,
        stop: None,
        fingerprint,
        now_ms: now,
    };
    // Input the host cannot compare is not the model's error but a limit
    // of this reader: the call cannot be decided (fail closed).
    if fingerprint.is_none() && engine::stateless(&decided).is_none() {
        return Err(GateError::Input(
            "`tool_input` is nested too deeply to compare".into(),
        ));
    }
    let prior = tx.call(session, call.call_id)?;
    // Where the front-end runs nothing itself (the hook: Claude Code runs
    // the tool once per id), the same call asked about again — a second
    // copy of the hook, a retry — gets the answer it got, counted once.
    if let (Some((seen, stored)), Counting::Record, false) = (&prior, counting, call.reused) {
        if Some(*seen) == fingerprint.map(CallFingerprint::as_u128) {
            return Ok(Verdict::from_stored(stored)?);
        }
    }
    let windows = budget.rate.windows();
    let rules = engine::Rules {
        max_repeats: budget.limits.max_repeats,
        tools: ledgers.tools,
        rate: &windows,
        loops: budget.loops,
        budget_per_call: engine::BudgetPerCall::All,
    };
    let mut state = Stored::new(tx, session, agent, ledgers);
    state.seen = if prior.is_some() || call.reused {
        Seen::Again
    } else {
        Seen::New
    };
    let decision = engine::decide(&mut state, &rules, &decided, counting.engine())?;
    let shown = Shown {
        name: call.name,
        id: call.shown_id,
        id_scope: call.id_scope,
        unpriced_model: state.unpriced.as_deref(),
    };
    let verdict = match decision {
        engine::Decision::Refused(refusal) => Verdict::Refuse(Refusal::of(&refusal, &shown)),
        engine::Decision::Run => Verdict::Run,
        engine::Decision::Ask => Verdict::Ask(format!(
            "budgetgate: {} needs a person's approval (needs_approval in the budget)",
            call.name
        )),
    };
    // Asked for only under `[loops]`; the call let through is in it now.
    if let Some(window) = &state.window {
        loops::store_window(tx, session, agent.unwrap_or(""), window)?;
    }
    if let (Counting::Reserve { key, expires_ms }, engine::Decision::Run | engine::Decision::Ask) =
        (counting, decision)
    {
        tx.put_reservation(session, key, call.name, expires_ms)?;
    }
    // An id new to the session is remembered with its answer; a call
    // refused before its id was looked at (its name) leaves none.
    if state.id_checked && state.seen == Seen::New {
        let fingerprint = fingerprint.map_or(0, CallFingerprint::as_u128);
        tx.put_call(session, call.call_id, fingerprint, &verdict.stored())?;
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use serde_json::json;
    use std::time::Duration;

    fn decide(
        store: &mut Store,
        budget: &ReplayBudget,
        id: &str,
        input: Value,
        counting: Counting<'_>,
        now: u64,
    ) -> Verdict {
        let tools = budget.tool_table().expect("tools");
        store
            .decide(|tx| {
                let mut ledgers = Ledgers::load(tx, "s", budget, &tools, 0)?;
                let shown = format!("the id {id}");
                let call = ToolCall {
                    name: "t",
                    input: &input,
                    call_id: id,
                    shown_id: &shown,
                    id_scope: "in this session",
                    reused: false,
                };
                let cx = Context {
                    session: "s",
                    agent: None,
                    budget,
                    now,
                };
                let v = decide_tool_call(tx, &cx, &mut ledgers, &call, counting)?;
                ledgers.store(tx, "s", now)?;
                Ok::<_, GateError>(v)
            })
            .expect("decided")
    }

    fn tool_calls(store: &mut Store) -> (u64, u64, u32) {
        let l = store.list().expect("list");
        let ledger = l[0].ledger.as_ref().expect("record");
        (
            ledger.used(Limit::ToolCalls),
            ledger.reserved(Limit::ToolCalls),
            ledger.counts()[0].used(),
        )
    }

    #[test]
    fn the_hooks_counting_meets_rate_windows_too() {
        let dir = tempfile::tempdir().expect("dir");
        let mut store = Store::open(dir.path(), Duration::from_secs(5)).expect("store");
        let budget = budget_file::parse_budget(
            "[budget]\nmax_seconds = 100000\n[rate]\nper_minute = 1\nper_hour = 2\n",
        )
        .expect("budget");
        let rec = Counting::Record;
        assert_eq!(
            decide(&mut store, &budget, "a", json!({"i": 1}), rec, 1_000),
            Verdict::Run
        );
        let Verdict::Refuse(r) = decide(&mut store, &budget, "b", json!({"i": 2}), rec, 30_000)
        else {
            panic!("refused")
        };
        assert_eq!(
            (r.reason, r.retry_after_ms),
            (RefusalReason::RateLimit.as_str(), Some(31_000))
        );
        assert!(r.text.contains("the window reopens in 31 s"), "{}", r.text);
        assert_eq!(
            decide(&mut store, &budget, "c", json!({"i": 3}), rec, 61_001),
            Verdict::Run
        );
        let Verdict::Refuse(r) = decide(&mut store, &budget, "d", json!({"i": 4}), rec, 200_000)
        else {
            panic!("refused")
        };
        assert_eq!(r.limit.as_deref(), Some("per_hour"));
    }

    /// Issue 11 (one tool table): a capped tool's calls are counted in the
    /// session's ledger only, a sub-agent's call too; a sub-agent's ledger
    /// counts no tool of its own (it has no caps).
    #[test]
    fn a_sub_agents_call_counts_toward_the_sessions_cap_only() {
        let dir = tempfile::tempdir().expect("dir");
        let mut store = Store::open(dir.path(), Duration::from_secs(5)).expect("store");
        let budget = budget_file::parse_budget(
            "[budget]\nmax_seconds = 100000\n[tools]\nmax_calls = { t = 1 }\n[subagent]\nmax_tool_calls = 10\n",
        )
        .expect("budget");
        let tools = budget.tool_table().expect("tools");
        store
            .decide(|tx| {
                let mut ledgers = Ledgers::load(tx, "s", &budget, &tools, 0)?;
                ledgers.agent(tx, "s", "A", &budget, 0)?;
                let cx = Context {
                    session: "s",
                    agent: Some("A"),
                    budget: &budget,
                    now: 1,
                };
                for (id, expected) in [("a1", true), ("a2", false)] {
                    let input = json!({ "id": id });
                    let shown = format!("the id {id}");
                    let call = ToolCall {
                        name: "t",
                        input: &input,
                        call_id: id,
                        shown_id: &shown,
                        id_scope: "in this session",
                        reused: false,
                    };
                    let v = decide_tool_call(tx, &cx, &mut ledgers, &call, Counting::Record)?;
                    assert_eq!(v == Verdict::Run, expected, "{id}: {v:?}");
                }
                assert_eq!(ledgers.session.tool_used("t"), 1);
                assert!(ledgers.agents[0].1.counts().is_empty());
                Ok::<_, GateError>(())
            })
            .expect("decided");
    }

    #[test]
    fn an_expired_reservation_is_spent_not_given_back_and_counts_once() {
        let dir = tempfile::tempdir().expect("dir");
        let mut store = Store::open(dir.path(), Duration::from_secs(5)).expect("store");
        let budget = budget_file::parse_budget(
            "[budget]\nmax_seconds = 100000\n[tools]\nmax_calls = { t = 5 }\n",
        )
        .expect("budget");
        let tools = budget.tool_table().expect("tools");
        let reserve = |key| Counting::Reserve {
            key,
            expires_ms: 2_000,
        };
        assert_eq!(
            decide(
                &mut store,
                &budget,
                "k1",
                json!({"i": 1}),
                reserve("k1"),
                1_000
            ),
            Verdict::Run
        );
        assert_eq!(tool_calls(&mut store), (0, 1, 1));
        // Expired (its process stopped renewing it): the next decision
        // counts it as spent, never gives it back; the late commit counts
        // nothing more.
        assert_eq!(
            decide(
                &mut store,
                &budget,
                "k2",
                json!({"i": 2}),
                reserve("k2"),
                2_000
            ),
            Verdict::Run
        );
        assert_eq!(tool_calls(&mut store), (1, 1, 2), "k1 spent, k2 held");
        for key in ["k1", "k2"] {
            store
                .decide(|tx| {
                    let mut l = Ledgers::load(tx, "s", &budget, &tools, 0)?;
                    commit_reservation(tx, "s", &mut l.session, key)?;
                    l.store(tx, "s", 2_500)
                })
                .expect("commit");
        }
        assert_eq!(tool_calls(&mut store), (2, 0, 2));
        // A roll back of what already ended changes nothing.
        store
            .decide(|tx| {
                let mut l = Ledgers::load(tx, "s", &budget, &tools, 0)?;
                roll_back_reservation(tx, "s", &mut l.session, "k2")?;
                l.store(tx, "s", 2_600)
            })
            .expect("roll back");
        assert_eq!(tool_calls(&mut store), (2, 0, 2));
    }
}
