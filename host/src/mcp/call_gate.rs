//! The gate the proxy decides with: [`CallGate`], and [`LedgerGate`] on
//! the shared ledger (`SPEC E`: reserve, commit, roll back).

#[allow(unused_imports)]
use super::*;
use crate::store::Commit;
use budgetgate_core::engine::loops::Outcome;
use budgetgate_core::turn::CallFingerprint;

/// What the proxy asks of the budget: decide a call, end its reservation,
/// and whether a tool is denied outright. [`LedgerGate`] is the real one.
pub trait CallGate {
    /// Decides `call` (reserved under `call.call_id` when let through).
    fn decide(&mut self, call: &ToolCall<'_>, now_ms: u64) -> Result<Verdict, String>;
    /// The call ran: count it.
    fn commit(&mut self, key: &str, tool: &str, now_ms: u64) -> Result<(), String>;
    /// The call was refused after its reservation (its approval was
    /// refused, or could not be asked): the attempt counts, as
    /// [`Self::commit`], and the ledger's log says why (`reason`: the
    /// refusal's word, `detail`: its text). By default only counted.
    fn refused(
        &mut self,
        key: &str,
        tool: &str,
        reason: &str,
        detail: &str,
        now_ms: u64,
    ) -> Result<(), String> {
        let _ = (reason, detail);
        self.commit(key, tool, now_ms)
    }
    /// The call is known not to have run (the server answered its
    /// request with a JSON-RPC error, or it never reached the server):
    /// give it back.
    fn roll_back(&mut self, key: &str, now_ms: u64) -> Result<(), String>;
    /// Whether the budget never lets `tool` run (removed from `tools/list`).
    fn denied(&self, tool: &str) -> bool;
    /// The tool names the budget gives a rule of their own, each with the
    /// rule (`needs_approval`, `max_calls`): checked against the server's
    /// `tools/list`, where a misspelt one would silently apply to nothing.
    fn named_tools(&self) -> Vec<(String, &'static str)> {
        Vec::new()
    }
    /// The call `key`, given back on the server's error, ran after all (the
    /// server answered it with a result too): count it, with no
    /// reservation left to commit. By default as [`Self::commit`].
    fn count_unreserved(&mut self, key: &str, tool: &str, now_ms: u64) -> Result<(), String> {
        self.commit(key, tool, now_ms)
    }
    /// Renews the reservations `keys` (calls still running or awaiting
    /// approval in this process), so that no other process's decision
    /// takes them for a dead gateway's. By default nothing to renew.
    fn renew(&mut self, keys: &[String], now_ms: u64) -> Result<(), String> {
        let _ = (keys, now_ms);
        Ok(())
    }
    /// How often held reservations must be renewed ([`Self::renew`]), in
    /// milliseconds; `None`: they never expire.
    fn renew_every_ms(&self) -> Option<u64> {
        None
    }
    /// Reports what a call that ran returned (`call`: its key,
    /// [`gate::loops::call_key`]; `None`: it did not run after all, and is
    /// forgotten), for loop detection (`[loops]`). By default nothing is
    /// kept.
    fn report_outcome(
        &mut self,
        call: CallFingerprint,
        outcome: Option<Outcome>,
        now_ms: u64,
    ) -> Result<(), String> {
        let _ = (call, outcome, now_ms);
        Ok(())
    }
    /// Whether loop detection wants the calls' outcomes
    /// ([`Self::report_outcome`]). By default not.
    fn loops_on(&self) -> bool {
        false
    }
    /// Commits the calls in `ran` (key and tool of each, in the order they
    /// were answered), then decides `call`: in one transaction where the
    /// gate can, so a gated call costs one transaction, not two. What could
    /// not be committed is returned (each call with the error); then no
    /// decision is made and the verdict is an error: a call is never let
    /// through while an earlier one's count is not recorded (fail closed).
    /// By default each is [`Self::commit`]ted on its own, then
    /// [`Self::decide`].
    fn commit_then_decide(
        &mut self,
        ran: &[(String, String)],
        call: &ToolCall<'_>,
        now_ms: u64,
    ) -> (Vec<Uncommitted>, Result<Verdict, String>) {
        let failed = commit_each(self, ran, now_ms);
        if let Some(first) = failed.first() {
            let e = first.uncounted_error();
            return (failed, Err(e));
        }
        (failed, self.decide(call, now_ms))
    }
}

/// A call that ran whose commit failed: kept and committed again before the
/// next decision ([`CallGate::commit_then_decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncommitted {
    /// The reservation's key.
    pub key: String,
    /// The tool.
    pub tool: String,
    /// Why its commit failed.
    pub error: String,
}

impl Uncommitted {
    /// The error that refuses the next call while this one is not counted.
    fn uncounted_error(&self) -> String {
        format!(
            "an earlier call ({}) ran and its count could not be recorded yet ({}); no call is let through until it is",
            self.key, self.error
        )
    }
}

/// Commits each call in `ran` on its own; what could not be committed.
fn commit_each<G: CallGate + ?Sized>(
    gate: &mut G,
    ran: &[(String, String)],
    now_ms: u64,
) -> Vec<Uncommitted> {
    ran.iter()
        .filter_map(|(key, tool)| {
            let error = gate.commit(key, tool, now_ms).err()?;
            Some(Uncommitted {
                key: key.clone(),
                tool: tool.clone(),
                error,
            })
        })
        .collect()
}

/// One gate shared by several proxies (the Streamable HTTP transport's
/// sessions); a poisoned lock refuses (fail closed).
impl<G: CallGate> CallGate for std::sync::Arc<std::sync::Mutex<G>> {
    fn decide(&mut self, call: &ToolCall<'_>, now_ms: u64) -> Result<Verdict, String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .decide(call, now_ms)
    }
    fn commit(&mut self, key: &str, tool: &str, now_ms: u64) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .commit(key, tool, now_ms)
    }
    fn refused(
        &mut self,
        key: &str,
        tool: &str,
        reason: &str,
        detail: &str,
        now_ms: u64,
    ) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .refused(key, tool, reason, detail, now_ms)
    }
    fn roll_back(&mut self, key: &str, now_ms: u64) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .roll_back(key, now_ms)
    }
    fn denied(&self, tool: &str) -> bool {
        self.lock().map_or(true, |g| g.denied(tool))
    }
    fn named_tools(&self) -> Vec<(String, &'static str)> {
        self.lock().map(|g| g.named_tools()).unwrap_or_default()
    }
    fn renew(&mut self, keys: &[String], now_ms: u64) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .renew(keys, now_ms)
    }
    fn count_unreserved(&mut self, key: &str, tool: &str, now_ms: u64) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .count_unreserved(key, tool, now_ms)
    }
    fn renew_every_ms(&self) -> Option<u64> {
        // A poisoned lock: renew often (each renewal fails, and says so).
        self.lock().map_or(Some(1_000), |g| g.renew_every_ms())
    }
    fn loops_on(&self) -> bool {
        // A poisoned lock: reported, and the report fails (fail closed).
        self.lock().map_or(true, |g| g.loops_on())
    }
    fn report_outcome(
        &mut self,
        call: CallFingerprint,
        outcome: Option<Outcome>,
        now_ms: u64,
    ) -> Result<(), String> {
        self.lock()
            .map_err(|_| "the gate's lock is poisoned".to_owned())?
            .report_outcome(call, outcome, now_ms)
    }
    fn commit_then_decide(
        &mut self,
        ran: &[(String, String)],
        call: &ToolCall<'_>,
        now_ms: u64,
    ) -> (Vec<Uncommitted>, Result<Verdict, String>) {
        match self.lock() {
            Ok(mut gate) => gate.commit_then_decide(ran, call, now_ms),
            Err(_) => {
                let poisoned = "the gate's lock is poisoned".to_owned();
                let failed = ran
                    .iter()
                    .map(|(key, tool)| Uncommitted {
                        key: key.clone(),
                        tool: tool.clone(),
                        error: poisoned.clone(),
                    })
                    .collect();
                (failed, Err(poisoned))
            }
        }
    }
}

/// The ledger's gate: one transaction per decision, shared with the hook
/// and other gateways on the same session.
pub struct LedgerGate {
    backend: Backend,
    pub(super) budget: ReplayBudget,
    /// The budget's tool table, built once (or why it cannot be: every
    /// call is then refused, fail closed).
    tools: Result<Box<ToolTable<BUDGET_TOOLS>>, String>,
    session: String,
    ttl_ms: u64,
}

impl LedgerGate {
    /// A gate on the SQLite `store` for `session`; reservations expire
    /// after `ttl_ms`.
    pub fn new(store: Store, budget: ReplayBudget, session: String, ttl_ms: u64) -> Self {
        Self::on(Backend::Sqlite(store), budget, session, ttl_ms)
    }

    /// A gate on `backend`.
    pub fn on(backend: Backend, budget: ReplayBudget, session: String, ttl_ms: u64) -> Self {
        Self {
            backend,
            tools: budget.tool_table(),
            budget,
            session,
            ttl_ms,
        }
    }

    /// Runs `f` in one transaction of the session (made again, for Redis,
    /// while another writer got in between) with the session's ledgers.
    /// The time of the transaction, given to `f` (its last argument), is
    /// the store's clock when it has one (Redis: the server's, so gateways
    /// whose clocks differ decide on one time), else `now`.
    fn transaction<T>(
        &mut self,
        now: u64,
        mut f: impl FnMut(
            &dyn LedgerTx,
            &mut Ledgers<'_>,
            &ReplayBudget,
            &str,
            u64,
        ) -> Result<T, GateError>,
    ) -> Result<T, String> {
        let (budget, session) = (&self.budget, self.session.as_str());
        let tools = self.tools.as_deref().map_err(|e| format!("budget {e}"))?;
        self.backend
            .transaction(Commit::Durable, session, budget, tools, now, &mut f)
    }

    /// Commits each call in `ran`, then decides `call`, in one transaction:
    /// all of it is kept, or none (an error).
    fn commit_then_decide_in_one(
        &mut self,
        ran: &[(String, String)],
        call: &ToolCall<'_>,
        now: u64,
    ) -> Result<Verdict, String> {
        let ttl = self.ttl_ms;
        self.transaction(now, |tx, ledgers, budget, session, now| {
            for (key, _) in ran {
                gate::commit_reservation(tx, session, &mut ledgers.session, key)?;
            }
            ledgers.observe_time(now);
            let counting = Counting::Reserve {
                key: call.call_id,
                expires_ms: now.saturating_add(ttl),
            };
            let cx = gate::Context {
                session,
                agent: None,
                budget,
                now,
            };
            let verdict = gate::decide_tool_call(tx, &cx, ledgers, call, counting)?;
            if let Verdict::Refuse(r) = &verdict {
                tx.log(
                    now,
                    session,
                    "deny",
                    &format!("{}: {}", call.call_id, r.reason),
                )?;
            }
            Ok(verdict)
        })
    }
}

impl CallGate for LedgerGate {
    fn decide(&mut self, call: &ToolCall<'_>, now: u64) -> Result<Verdict, String> {
        self.commit_then_decide_in_one(&[], call, now)
    }

    fn commit_then_decide(
        &mut self,
        ran: &[(String, String)],
        call: &ToolCall<'_>,
        now: u64,
    ) -> (Vec<Uncommitted>, Result<Verdict, String>) {
        if ran.is_empty() {
            return (Vec::new(), self.decide(call, now));
        }
        match self.commit_then_decide_in_one(ran, call, now) {
            Ok(verdict) => (Vec::new(), Ok(verdict)),
            // Nothing of that transaction was kept: each commit is made
            // again on its own, so an error of the decision cannot hold
            // back the commits; the decision only when every commit landed.
            Err(_) => {
                let failed = commit_each(self, ran, now);
                match failed.first() {
                    Some(first) => {
                        let e = first.uncounted_error();
                        (failed, Err(e))
                    }
                    None => (failed, self.decide(call, now)),
                }
            }
        }
    }

    fn commit(&mut self, key: &str, _tool: &str, now: u64) -> Result<(), String> {
        self.transaction(now, |tx, l, _, session, _| {
            gate::commit_reservation(tx, session, &mut l.session, key)
        })
    }

    fn refused(
        &mut self,
        key: &str,
        _tool: &str,
        reason: &str,
        detail: &str,
        now: u64,
    ) -> Result<(), String> {
        self.transaction(now, |tx, l, _, session, now| {
            gate::commit_reservation(tx, session, &mut l.session, key)?;
            // Logged as a refusal at decision time is: "deny KEY: REASON",
            // with the person's answer after it.
            tx.log(now, session, "deny", &format!("{key}: {reason} ({detail})"))?;
            Ok(())
        })
    }

    fn roll_back(&mut self, key: &str, now: u64) -> Result<(), String> {
        self.transaction(now, |tx, l, _, session, _| {
            gate::roll_back_reservation(tx, session, &mut l.session, key)
        })
    }

    fn report_outcome(
        &mut self,
        call: CallFingerprint,
        outcome: Option<Outcome>,
        now: u64,
    ) -> Result<(), String> {
        if !self.budget.loops.is_on() {
            return Ok(());
        }
        self.transaction(now, |tx, _, _, session, _| {
            gate::loops::report_tool_outcome(tx, session, "", call, outcome).map(|_| ())
        })
    }

    fn loops_on(&self) -> bool {
        self.budget.loops.is_on()
    }

    fn count_unreserved(&mut self, key: &str, tool: &str, now: u64) -> Result<(), String> {
        self.transaction(now, |tx, l, _, session, now| {
            let cap = l.tools.cap(tool);
            gate::count_unreserved(&mut l.session, tool, cap);
            tx.log(
                now,
                session,
                "late",
                &format!("{key}: {tool} answered with a result after its error; counted"),
            )?;
            Ok(())
        })
    }

    fn renew(&mut self, keys: &[String], now: u64) -> Result<(), String> {
        if keys.is_empty() {
            return Ok(());
        }
        let ttl = self.ttl_ms;
        // The store's clock where it has one (Redis), as every expiry.
        self.transaction(now, |tx, _, _, session, now| {
            let expires_ms = now.saturating_add(ttl);
            for key in keys {
                // One no longer stored was spent at its expiry (this
                // process could not renew it in time): its commit counts
                // nothing more, and nothing is given back.
                gate::renew_reservation(tx, session, key, expires_ms)?;
            }
            Ok(())
        })
    }

    fn renew_every_ms(&self) -> Option<u64> {
        // Three chances to renew before another process may take the
        // reservation for a dead gateway's.
        Some((self.ttl_ms / 3).max(1))
    }

    fn named_tools(&self) -> Vec<(String, &'static str)> {
        let approval = self
            .budget
            .needs_approval
            .iter()
            .map(|n| (n.clone(), "needs_approval"));
        let caps = self
            .budget
            .tool_caps
            .iter()
            .map(|(n, _)| (n.clone(), "max_calls"));
        approval.chain(caps).collect()
    }

    fn denied(&self, tool: &str) -> bool {
        // A cap of 0 in the budget's tool table; a table that cannot be
        // built (fail closed) denies every tool.
        self.tools
            .as_ref()
            .map_or(true, |tools| tools.cap(tool) == Some(0))
            || self.budget.limits.max_tool_calls == Some(0)
    }
}
