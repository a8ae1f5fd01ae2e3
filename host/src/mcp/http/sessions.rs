//! The gateway's state ([`Gateway`]): the upstream and its client, one
//! proxy per MCP session (bounded, the least recently used idle one giving
//! way), the approval questions awaiting an answer, and the renewal of the
//! reservations every session holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{now, Gate, Session, MAX_SESSIONS};
use crate::mcp::{
    expire_retries, AwaitedRetries, CallGate, LedgerGate, Proxy, Question, SharedRetries,
};

/// The gateway's state: the upstream, its client, and one proxy per MCP
/// session (keyed by `Mcp-Session-Id`; `""` for an upstream without
/// sessions).
pub struct Gateway {
    pub(super) upstream: String,
    pub(super) client: reqwest::Client,
    pub(super) upstream_timeout: Duration,
    gate: Gate,
    max_result_bytes: u64,
    approval_timeout_ms: u64,
    connection: String,
    pub(super) sessions: Mutex<Sessions>,
    /// The approval questions awaiting an answer, keyed by
    /// [`waiter_key`]: where to hand the answer (the task that holds the
    /// stream the question went out on).
    pub(super) waiters: Waiters,
    /// The person at the gateway's terminal, asked when a client cannot be.
    terminal: Option<crate::mcp::terminal::Terminal>,
    /// Stateless calls whose approval was asked by `InputRequiredResult`,
    /// awaiting their retry (in any request, so shared by every proxy).
    retries: SharedRetries,
}

/// An answer to one of the gateway's questions.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// From the client: its JSON-RPC response to the question, or its
    /// `notifications/cancelled` of the call asked about.
    Client(String),
    /// From the person at the terminal: allowed or not.
    Person(bool),
}

/// Hands an answer to the task that asked the question.
pub(super) type Waiter = tokio::sync::oneshot::Sender<Answer>;
pub(super) type Waiters = Arc<Mutex<HashMap<String, Waiter>>>;

/// A question's key among the gateway's waiters: the session's ledger
/// name and the question's id (question ids are numbered per session).
pub(super) fn waiter_key(connection: &str, eid: &str) -> String {
    format!("{connection}\n{eid}")
}

pub(super) struct Sessions {
    /// Each session's proxy and when it was last used (a tick of `made`).
    pub(super) map: HashMap<String, (Session, u64)>,
    made: u64,
}

impl Sessions {
    /// Makes room for one more session; `false` when every one is busy.
    fn room(&mut self) -> bool {
        if self.map.len() < MAX_SESSIONS {
            return true;
        }
        let idle = self
            .map
            .iter()
            .filter(|(_, (p, _))| p.try_lock().is_ok_and(|p| p.in_flight() == 0))
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k.clone());
        match idle {
            Some(k) => self.map.remove(&k).is_some(),
            None => false,
        }
    }
}

impl Gateway {
    /// The gateway with the certificates of `ca` (a PEM file: a private
    /// CA of an HTTPS upstream) trusted beside the system's.
    pub fn with_upstream_ca(mut self, ca: &std::path::Path) -> Result<Self, String> {
        self.client = crate::net::upstream_client(Some(ca))?;
        Ok(self)
    }

    /// A gateway in front of `upstream` (an `http://` URL) deciding with
    /// `gate`; `connection` prefixes the ledger keys of its sessions' calls.
    pub fn new(
        upstream: String,
        gate: LedgerGate,
        max_result_bytes: u64,
        upstream_timeout: Duration,
        approval_timeout: Duration,
        connection: String,
        terminal: Option<std::fs::File>,
    ) -> Result<Self, String> {
        let client = crate::net::upstream_client(None)?;
        let waiters: Waiters = Arc::default();
        let terminal = terminal.and_then(|tty| {
            let waiters = Arc::clone(&waiters);
            crate::mcp::terminal::Terminal::on(tty, move |key, yes| {
                let waiter = waiters.lock().ok().and_then(|mut w| w.remove(&key));
                if let Some(w) = waiter {
                    let _ = w.send(Answer::Person(yes));
                }
            })
        });
        Ok(Self {
            upstream,
            client,
            upstream_timeout,
            gate: Arc::new(Mutex::new(gate)),
            max_result_bytes,
            approval_timeout_ms: u64::try_from(approval_timeout.as_millis()).unwrap_or(u64::MAX),
            connection,
            sessions: Mutex::new(Sessions {
                map: HashMap::new(),
                made: 0,
            }),
            waiters,
            terminal,
            retries: AwaitedRetries::shared(),
        })
    }

    /// A proxy for the MCP session `key` (`""`: none), the `made`th.
    fn new_proxy(&self, made: u64, key: &str) -> Session {
        let mut proxy = Proxy::new(
            Arc::clone(&self.gate),
            format!("{}-{made}", self.connection),
            self.max_result_bytes,
            self.approval_timeout_ms,
        );
        proxy.ask_on_terminal(self.terminal.is_some());
        // An approval's state is bound to the session it was asked in;
        // stateless requests (no session) share the gateway's.
        proxy.share_retries(
            Arc::clone(&self.retries),
            format!("{}/{key}", self.connection),
        );
        Arc::new(Mutex::new(proxy))
    }

    /// A proxy for one stateless request (2026-07-28, no session): its
    /// own, so that two clients' request ids never meet, and not kept.
    pub(super) fn stateless(&self) -> Session {
        let made = self.sessions.lock().map_or(0, |mut s| {
            s.made += 1;
            s.made
        });
        self.new_proxy(made, "")
    }

    /// The proxy of session `key`; a new one (not yet kept: `false`) for a
    /// client without a session; `None` when there are too many sessions.
    pub(super) fn session(&self, key: &str) -> Option<(Session, bool)> {
        let mut s = self.sessions.lock().ok()?;
        s.made += 1;
        let tick = s.made;
        if let Some((p, used)) = s.map.get_mut(key) {
            *used = tick;
            return Some((Arc::clone(p), true));
        }
        if !s.room() {
            return None;
        }
        let proxy = self.new_proxy(tick, key);
        if key.is_empty() {
            return Some((proxy, false));
        }
        s.map.insert(key.to_owned(), (Arc::clone(&proxy), tick));
        Some((proxy, true))
    }

    pub(super) fn keep(&self, key: &str, proxy: &Session) {
        if let Ok(mut s) = self.sessions.lock() {
            if s.map.contains_key(key) || s.room() {
                let tick = s.made;
                s.map
                    .entry(key.to_owned())
                    .or_insert_with(|| (Arc::clone(proxy), tick));
            }
        }
    }

    /// Asks `question` at the terminal under `key`; `false`: it cannot be.
    pub(super) fn ask_person(&self, key: String, question: &Question) -> bool {
        self.terminal.as_ref().is_some_and(|t| t.ask(key, question))
    }

    /// The question `key` is no longer asked at the terminal.
    pub(super) fn withdraw_person(&self, key: String, why: &str) {
        if let Some(t) = &self.terminal {
            t.withdraw(key, why);
        }
    }

    pub(super) fn forget(&self, key: &str) -> Option<Session> {
        self.sessions.lock().ok()?.map.remove(key).map(|(p, _)| p)
    }

    /// Every session ends (the gateway stops): calls still running count;
    /// approvals awaiting a retry never reached the upstream: given back.
    pub fn close_all(&self) {
        let awaited = self
            .retries
            .lock()
            .map(|mut r| r.take_all())
            .unwrap_or_default();
        if let Ok(mut gate) = self.gate.lock() {
            for a in awaited {
                if let Err(e) = gate.roll_back(&a.key, now()) {
                    log::warn!("budgetgate mcp: rolling back {}: {e}", a.key);
                }
            }
        }
        let all: Vec<Session> = match self.sessions.lock() {
            Ok(mut s) => s.map.drain().map(|(_, (p, _))| p).collect(),
            Err(_) => return,
        };
        for p in all {
            if let Ok(mut p) = p.lock() {
                p.on_client_closed(now());
            }
        }
    }
}

impl Gateway {
    /// Renews the reservations every session holds, as they fall due
    /// ([`Proxy::renew_held`]): a call that runs long, or waits long for
    /// approval, keeps its reservation while this gateway lives.
    pub fn renew_all(&self) {
        let sessions: Vec<Session> = match self.sessions.lock() {
            Ok(s) => s.map.values().map(|(p, _)| Arc::clone(p)).collect(),
            Err(_) => return,
        };
        for proxy in sessions {
            if let Ok(mut p) = proxy.lock() {
                p.renew_held(now());
            }
        }
        // Approvals awaiting a retry: refused (counted) past their
        // deadline, their reservations renewed until then.
        let mut gate = Arc::clone(&self.gate);
        // An attempt that could not be counted is said on stderr; its
        // reservation, never given back, is counted as spent when it
        // expires.
        let _uncounted = expire_retries(&self.retries, &mut gate, self.approval_timeout_ms, now());
        let held = self.retries.lock().map(|r| r.held()).unwrap_or_default();
        if let Err(e) = gate.renew(&held, now()) {
            log::warn!(
                "budgetgate mcp: renewing {} reservation(s) awaiting approval: {e}",
                held.len()
            );
        }
    }

    /// How often [`Self::renew_all`] runs: half the renewal period, within
    /// 50 ms and 60 s.
    pub(super) fn renew_tick(&self) -> Duration {
        let every = self
            .gate
            .renew_every_ms()
            .unwrap_or(60_000)
            .div_ceil(2)
            .clamp(50, 60_000);
        Duration::from_millis(every)
    }
}
