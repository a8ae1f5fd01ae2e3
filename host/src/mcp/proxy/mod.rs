//! The gateway's logic without I/O ([`Proxy`]): lines in, [`Out`]
//! messages out, time passed in. The client's side is in `client.rs`,
//! questions in `questions.rs`, the server's side in `server.rs`.

#[allow(unused_imports)]
use super::*;
use budgetgate_core::engine::loops::Outcome;
use budgetgate_core::turn::CallFingerprint;

mod client;
mod input_required;
mod questions;
mod server;

pub use input_required::{expire_retries, AwaitedRetries, SharedRetries};

/// How many calls no longer awaited are remembered, should the server
/// answer one after all ([`Proxy::unawaited_answer`]).
const CLOSED_KEPT: usize = 4096;

/// A call no longer awaited whose answer may still come.
#[derive(Debug)]
struct Closed {
    id: String,
    key: String,
    tool: String,
    /// Already counted (answered here); else given back on its error.
    counted: bool,
}

/// Whether the server's answer `msg` (whose text is `text`) says its
/// request did not run: a JSON-RPC error object and no `result` member at
/// all. Anything else — a result of any kind, `null`, neither — may come
/// from a call that ran (`SPEC E`).
fn says_not_run(text: &str, msg: &Message<'_>) -> bool {
    let error_object = msg
        .error
        .is_some_and(|e| e.get().trim_start().starts_with('{'));
    error_object
        && msg.result.is_none()
        && crate::strict::value_from_str(text).is_ok_and(|v| v.get("result").is_none())
}

/// What becomes of a message from the server on its way to the client.
enum Reply {
    /// Passed on as it came.
    Same,
    /// This message instead (a withheld result, a filtered list).
    Instead(String),
    /// Not passed on (the answer to a call the client cancelled).
    Drop,
}

/// Whether a request the server will not answer may have run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Known not to have run: it never reached the server (the connection
    /// to it could not be made, or the server refused the HTTP request
    /// before reading it). Given back.
    No,
    /// It reached the server, or may have: counted (`SPEC E`).
    Maybe,
}

#[derive(Debug)]
enum Pending {
    /// A `tools/call` let through, with its reservation.
    Call {
        key: String,
        tool: String,
        cancelled: bool,
        /// The generation the call came in: the shape of the gateway's
        /// own answers to it.
        generation: Generation,
        /// For a stateless call a person approved: the digest of its
        /// arguments, so that the server's own `InputRequiredResult` for it
        /// does not make the gateway ask again on its retry.
        approved: Option<String>,
        /// Its key for loop detection ([`gate::loops::call_key`]), to
        /// report its result by.
        call: Option<CallFingerprint>,
    },
    /// A `tools/list`, whose result is filtered; `first`: it asked for the
    /// first page (no `cursor`).
    List { first: bool },
    /// Any other request.
    Other,
}

#[derive(Debug)]
struct Approval {
    /// The client's request id (raw JSON).
    id: String,
    key: String,
    tool: String,
    /// The request line, forwarded once approved.
    line: String,
    /// The question and its deadline: the one approval state machine.
    question: approval::Question,
    by: Asker,
    /// The generation the call came in.
    generation: Generation,
}

/// Where the check of the budget's tool names stands.
enum NameCheck {
    /// No listing read from its first page yet (pages asked for out of
    /// order are not taken for a whole listing).
    Waiting,
    /// A listing from its first page is being read: the budget's names
    /// its pages listed so far.
    Reading(std::collections::BTreeSet<String>),
    /// Checked, at a listing's last page.
    Done,
}

/// The gateway's logic without I/O: lines in, [`Out`] messages out, the
/// time passed in (milliseconds; the ledger's clock).
pub struct Proxy<G: CallGate> {
    gate: G,
    connection: String,
    max_result_bytes: u64,
    approval_timeout_ms: u64,
    pub(super) elicitation: bool,
    /// Set when the transport cannot ask a person: why (approval refused).
    cannot_ask: Option<String>,
    /// A person at the gateway's terminal can be asked (when the client
    /// cannot).
    terminal: bool,
    pending: HashMap<String, Pending>,
    approvals: HashMap<String, Approval>,
    next_approval: u64,
    /// A secret of this proxy's, in every question id, so that a client
    /// cannot answer a question it has not been sent (ids are not guessed).
    question_salt: u64,
    /// Calls the server answered whose reservations are not committed
    /// yet ([`Self::on_server_unsettled`]): committed by [`Self::settle`],
    /// which every other entry point (and dropping the proxy) runs first.
    /// A commit that failed stays here and is made again before the next
    /// decision, which is refused until it lands (fail closed).
    unsettled: Vec<(String, String)>,
    /// Results of calls the server answered, not yet reported to loop
    /// detection (`[loops]`): reported by [`Self::settle`]; one that could
    /// not be is kept, and no call is decided until it is (fail closed).
    outcomes: Vec<(CallFingerprint, Option<Outcome>)>,
    /// When the reservations this proxy holds were last renewed
    /// ([`CallGate::renew`]).
    renewed_at: u64,
    /// Calls no longer awaited whose answer may still come from the server
    /// (given back on its JSON-RPC error, or answered here: lost, too long),
    /// newest last: id, key, tool, and whether the call is counted
    /// ([`Self::unawaited_answer`]). No request may take their ids.
    closed: VecDeque<Closed>,
    /// Calls that ran after their error whose count failed: counted again
    /// before the next decision, which waits for them (fail closed).
    late: Vec<(String, String)>,
    /// Stateless calls whose approval was asked by `InputRequiredResult`,
    /// awaiting their retry (shared by a Streamable HTTP gateway's
    /// proxies: [`Self::share_retries`]).
    retries: SharedRetries,
    /// Whether `retries` is this proxy's own (it then expires and renews
    /// them, and gives them back when the client goes).
    owns_retries: bool,
    /// The session the approval states this proxy writes are bound to.
    binding: String,
    /// The check of the budget's tool names against the server's
    /// `tools/list` ([`CallGate::named_tools`]), made once.
    names: NameCheck,
}

impl<G: CallGate> Proxy<G> {
    /// A proxy deciding with `gate`. `connection` names this client's MCP
    /// session in the ledger's call ids (JSON-RPC ids are unique within
    /// one connection only).
    pub fn new(
        gate: G,
        connection: String,
        max_result_bytes: u64,
        approval_timeout_ms: u64,
    ) -> Self {
        Self {
            gate,
            connection: connection.clone(),
            max_result_bytes,
            approval_timeout_ms,
            elicitation: false,
            cannot_ask: None,
            terminal: false,
            pending: HashMap::new(),
            approvals: HashMap::new(),
            next_approval: 0,
            question_salt: {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new()
                    .hash_one(std::time::SystemTime::now())
            },
            unsettled: Vec::new(),
            outcomes: Vec::new(),
            renewed_at: 0,
            closed: VecDeque::new(),
            late: Vec::new(),
            names: NameCheck::Waiting,
            retries: AwaitedRetries::shared(),
            owns_retries: true,
            binding: connection,
        }
    }

    /// Commits the reservations of the calls the server answered through
    /// [`Self::on_server_unsettled`] (in the order they were answered).
    /// Every entry point of the proxy but [`Self::on_client`] and
    /// [`Self::on_server_unsettled`] settles first; a client's
    /// `tools/call` commits them in its decision's own transaction
    /// ([`CallGate::commit_then_decide`]), and other messages leave them
    /// for the transport to settle ([`Self::unsettled`]). So a commit is
    /// never behind a later decision.
    /// A commit that fails is kept, to be made again.
    pub fn settle(&mut self, now: u64) {
        for (key, tool) in std::mem::take(&mut self.unsettled) {
            self.commit(&key, &tool, now);
        }
        for (key, tool) in std::mem::take(&mut self.late) {
            self.count_late(&key, &tool, now);
        }
        self.report_outcomes(now);
    }

    /// Reports the results in `outcomes` to loop detection; one that
    /// could not be is kept, to be reported again.
    fn report_outcomes(&mut self, now: u64) {
        for (call, outcome) in std::mem::take(&mut self.outcomes) {
            if let Err(e) = self.gate.report_outcome(call, outcome, now) {
                log::warn!("budgetgate mcp: reporting a call's result to loop detection: {e} (kept: reported again before the next decision, which waits for it)");
                self.outcomes.push((call, outcome));
            }
        }
    }

    /// Counts a call given back on its error that ran after all; kept in
    /// `late` when the count fails.
    fn count_late(&mut self, key: &str, tool: &str, now: u64) {
        if let Err(e) = self.gate.count_unreserved(key, tool, now) {
            log::warn!("budgetgate mcp: counting {key}, answered after its error: {e} (kept: counted again before the next decision, which waits for it)");
            self.late.push((key.to_owned(), tool.to_owned()));
        }
    }

    /// Whether the id `id` (its key) is a call's whose answer may still
    /// come: no request may take it.
    fn is_closed(&self, id: &str) -> bool {
        self.closed.iter().any(|c| c.id == id)
    }

    /// Remembers a call no longer awaited whose answer may still come
    /// (the last [`CLOSED_KEPT`]).
    fn close(&mut self, id: &str, key: &str, tool: &str, counted: bool) {
        if self.closed.len() >= CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(Closed {
            id: id.to_owned(),
            key: key.to_owned(),
            tool: tool.to_owned(),
            counted,
        });
    }

    /// The reservations this proxy holds: calls forwarded and not yet
    /// answered, and calls awaiting approval.
    fn held(&self) -> Vec<String> {
        let calls = self.pending.values().filter_map(|p| match p {
            Pending::Call { key, .. } => Some(key.clone()),
            _ => None,
        });
        calls
            .chain(self.approvals.values().map(|a| a.key.clone()))
            .chain(self.held_for_retries())
            .collect()
    }

    /// When the held reservations are next to be renewed.
    fn renewal_due(&self) -> Option<u64> {
        let every = self.gate.renew_every_ms()?;
        self.holds_reservations()
            .then(|| self.renewed_at.saturating_add(every))
    }

    /// Whether this proxy holds a reservation (a call in flight or one
    /// awaiting approval): what [`Self::held`] lists, without listing it.
    fn holds_reservations(&self) -> bool {
        !self.approvals.is_empty()
            || (self.owns_retries && self.retries.lock().is_ok_and(|r| !r.is_empty()))
            || self
                .pending
                .values()
                .any(|p| matches!(p, Pending::Call { .. }))
    }

    /// Renews the reservations this proxy holds when they are due
    /// ([`CallGate::renew`]), and commits answered calls: a reservation
    /// held by a live process never expires, whatever the tool's or the
    /// person's time (`SPEC E`). The Streamable HTTP transport calls this
    /// on a timer; [`Self::on_tick`] does too.
    pub fn renew_held(&mut self, now: u64) {
        self.settle(now);
        if self.renewal_due().is_none_or(|due| due > now) {
            return;
        }
        self.renewed_at = now;
        let keys = self.held();
        if let Err(e) = self.gate.renew(&keys, now) {
            log::warn!("budgetgate mcp: renewing {} reservation(s): {e} (tried again at the next renewal; a reservation not renewed in time is counted as spent, never given back)", keys.len());
        }
    }

    /// Starts the renewal clock when the first reservation is taken, so a
    /// new one is renewed a full period after it was made.
    fn holding_from(&mut self, now: u64) {
        if !self.holds_reservations() {
            self.renewed_at = now;
        }
    }

    /// How many answered calls wait for their commit ([`Self::settle`]).
    pub fn unsettled(&self) -> usize {
        self.unsettled.len() + self.late.len()
    }

    /// Whether approval may be asked: with `Some(why)`, calls to tools in
    /// `needs_approval` are refused (`approval-refused`) with `why` as the
    /// reason, as when the client declared no elicitation capability (a
    /// Streamable HTTP POST whose answer cannot be a stream, which is where
    /// the question would go); `None` asks again.
    pub fn set_cannot_ask(&mut self, why: Option<String>) {
        self.cannot_ask = why;
    }

    /// Whether the person at the gateway's terminal may be asked about a
    /// call when the client cannot be (no `elicitation` capability).
    pub fn ask_on_terminal(&mut self, yes: bool) {
        self.terminal = yes;
    }

    /// The name of this client's session in the ledger's call ids.
    pub fn connection(&self) -> &str {
        &self.connection
    }

    /// The approval questions awaiting the client's answer: each
    /// question's id (compact JSON) and its deadline.
    pub fn asking(&self) -> Vec<(String, u64)> {
        self.approvals
            .iter()
            .map(|(eid, a)| (eid.clone(), a.question.deadline_ms()))
            .collect()
    }

    /// The id (compact JSON) of this proxy's question number `n`:
    /// `"budgetgate-approval-N-SECRET"`, SECRET 16 hex digits that depend on
    /// the proxy's secret and `n`, so a client cannot answer a question
    /// before it has been sent.
    fn question_id(&self, n: u64) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.question_salt, n).hash(&mut h);
        format!("\"budgetgate-approval-{n}-{:016x}\"", h.finish())
    }

    /// Whether `eid` (compact JSON) is the id of a question this proxy
    /// asked, answered or not.
    fn asked_once(&self, eid: &str) -> bool {
        eid.strip_prefix("\"budgetgate-approval-")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(n, _)| n.parse::<u64>().ok())
            .is_some_and(|n| (1..=self.next_approval).contains(&n) && eid == self.question_id(n))
    }

    /// Who was asked the question `eid` (compact JSON), while it awaits
    /// its answer.
    pub fn asks(&self, eid: &str) -> Option<Asker> {
        self.approvals.get(eid).map(|a| a.by)
    }

    /// The id of the question asked about the call whose request id is
    /// `id` (compact JSON), while it awaits its answer.
    pub fn question_about(&self, id: &str) -> Option<&str> {
        self.approvals
            .iter()
            .find(|(_, a)| a.id == id)
            .map(|(eid, _)| eid.as_str())
    }

    /// Whether the request `id` (its compact JSON) awaits the server's answer.
    pub fn awaits(&self, id: &str) -> bool {
        self.pending.contains_key(id)
    }

    /// Requests awaiting an answer (from the server or an approver).
    pub fn in_flight(&self) -> usize {
        self.pending.len() + self.approvals.len()
    }

    /// The gate.
    pub fn gate(&self) -> &G {
        &self.gate
    }

    /// The gate, to change (tests and fuzzing drive a model gate's faults).
    pub fn gate_mut(&mut self) -> &mut G {
        &mut self.gate
    }

    /// When [`Self::on_tick`] next has something to do: a question's
    /// deadline, or the renewal of held reservations.
    pub fn next_deadline(&self) -> Option<u64> {
        self.approvals
            .values()
            .map(|a| a.question.deadline_ms())
            .chain(self.renewal_due())
            .chain(self.retries_due())
            .min()
    }
}

/// A proxy dropped with answered calls not yet committed commits them:
/// a call that ran is counted whichever way the transport ends.
impl<G: CallGate> Drop for Proxy<G> {
    fn drop(&mut self) {
        if !self.unsettled.is_empty() || !self.outcomes.is_empty() {
            self.settle(now());
        }
    }
}

impl<G: CallGate> Proxy<G> {
    /// The loop-detection key of call `name` with `arguments`, when the
    /// gate looks for loops (else none is kept, and no result is read for
    /// it).
    fn loop_key(&self, name: &str, arguments: &Value) -> Option<CallFingerprint> {
        if self.gate.loops_on() {
            gate::loops::call_key(name, arguments)
        } else {
            None
        }
    }

    /// [`Self::loop_key`] of the `tools/call` request `line`.
    fn loop_key_of_request(&self, line: &str) -> Option<CallFingerprint> {
        if self.gate.loops_on() {
            call_key_of_request(line)
        } else {
            None
        }
    }

    /// Call `call` (its loop key), let through, did not run after all: it
    /// is forgotten from the loop window.
    fn did_not_run(&mut self, call: Option<CallFingerprint>) {
        if let Some(call) = call {
            self.outcomes.push((call, None));
        }
    }
}

/// The loop-detection key of the `tools/call` request `line` (its tool and
/// arguments, absent arguments read as `{}` as the decision reads them).
fn call_key_of_request(line: &str) -> Option<CallFingerprint> {
    let value: Value = serde_json::from_str(line).ok()?;
    let params = value.get("params")?;
    let name = params.get("name")?.as_str()?;
    match params.get("arguments") {
        None | Some(Value::Null) => gate::loops::call_key(name, &json!({})),
        Some(arguments) => gate::loops::call_key(name, arguments),
    }
}
