//! `budgetgate mcp`: the budget gate in front of any MCP server over stdio
//! (`SPEC C`, `SPEC E`; `docs/MCP.md`). [`Proxy`] is shared with the
//! Streamable HTTP transport (`--listen`, [`crate::mcp_http`]).
//!
//! The gateway starts the server as a child and serves the client on its
//! own stdin and stdout, both sides speaking MCP's stdio transport:
//! newline-delimited JSON-RPC 2.0. It forwards every line unchanged and in
//! order — requests, responses, notifications, batches, methods it does not
//! know — except:
//!
//! * **`tools/call`**, decided first by [`crate::gate::decide_tool_call`]
//!   (the Claude Code hook's order and words) against the shared ledger. A
//!   refused call is answered by the gateway with a `CallToolResult`
//!   `{"content":[{"type":"text","text":REASON}],"isError":true,
//!   "_meta":{"budgetgate":{…}}}` and never reaches the server. A call let
//!   through is reserved, and counted unless it is known not to have run:
//!   committed when any result comes (a cancelled call's too, not passed
//!   on), when the server dies or the gateway ends first; rolled back only
//!   when the server answers it with a JSON-RPC error or it never reached
//!   the server. The gateway renews the reservations it holds, so they
//!   never expire while it lives; a failed commit is kept and made before
//!   the next decision ([`Proxy::renew_held`], [`CallGate::renew`]).
//! * **Approval** (`needs_approval`): the gateway asks the client with
//!   `elicitation/create` when the client declared the `elicitation`
//!   capability in `initialize`; `accept` forwards the call, `decline`,
//!   `cancel`, an error or no answer within the deadline refuses it. A
//!   client without the capability is not asked; the person at the
//!   gateway's controlling terminal is ([`crate::mcp_terminal`],
//!   `--terminal auto`), and only that person answers. With neither, the
//!   call is refused and the reason says so.
//! * **Results** over `max_result_bytes` (compact JSON of the `result`,
//!   default 4096) are replaced by an error result saying so; **`tools/list`**
//!   results lose the tools the budget denies outright (a cap of 0).
//! * A line that is not JSON is answered `-32700`, one that is not a
//!   JSON-RPC 2.0 message, or a request (not a `tools/call`) reusing the id
//!   of one still awaiting its answer, `-32600`; neither is forwarded. A line longer than
//!   [`MAX_LINE`] is skipped as it is read (never held whole) and answered
//!   `-32600`.
//! * **Strict reading** (fail closed): a `tools/call` is read with
//!   [`crate::strict::value_from_str`] and refused, never forwarded, when
//!   it repeats a key anywhere (`-32600`: the gate and the server could read
//!   different calls), when its id is `null` or not a string or an integer
//!   (`-32600`, with the id when it is a number, else `null`), or when its
//!   `params` cannot be read or are not
//!   an object with a string `name` (`-32602`, naming the problem).
//!   `initialize`, `notifications/cancelled` and answers to the gateway's
//!   approval questions, whose content it reads, are refused when they
//!   repeat a key; a result whose size cannot be told is withheld. Other
//!   messages pass through unchecked (nothing is decided on them).
//!
//! The protocol is handled with `serde_json` and a few typed views that
//! borrow the raw line (`RawValue`), not with the `rmcp` SDK: the gateway
//! must forward bytes it does not understand unchanged, which a typed SDK
//! (that parses into its own model and writes it back) cannot promise.
//!
//! [`Proxy`] is the decision logic without I/O (messages in, messages out,
//! time passed in); [`serve`] runs it between four pipes from one thread
//! that waits on them with `poll(2)` (Unix), reading a bounded chunk at a
//! time, so a flooding server is slowed down (its pipe fills) instead of
//! growing the gateway's memory.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
#[cfg(unix)]
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::gate::{self, Counting, GateError, Ledgers, Refusal, ToolCall, Verdict};
use crate::ledger::{Durability, LedgerTx, LedgerUrl, Store, StoreError};
use crate::mcp_terminal::Terminal;
use crate::replay::budget::{ReplayBudget, BUDGET_TOOLS};
use budgetgate_core::approval::{self, Answer, Decision};
use budgetgate_core::tools::ToolTable;
use budgetgate_core::word;

mod id_scan;
pub use id_scan::IdScan;

/// Longest JSON-RPC line read from either side (16 MiB); a longer one is
/// skipped while it is read and refused.
pub const MAX_LINE: usize = 16 << 20;

/// Most requests from the client awaiting an answer at once; one more is
/// answered with an error (memory stays bounded).
pub const MAX_PENDING: usize = 4096;

/// Answers from the terminal queued for the proxy at once.
pub const CHANNEL_MESSAGES: usize = 64;

/// JSON-RPC's parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// The gateway's own errors (JSON-RPC's server-error range).
pub const GATEWAY_ERROR: i64 = -32000;

/// Exit status when the MCP server exited or crashed first.
pub const EXIT_SERVER_GONE: u8 = 3;

/// Arguments of `budgetgate mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Budget file (TOML, docs/TURN-GATE.md and docs/MCP.md); the
    /// reference's defaults when absent.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// The ledger: `sqlite:FILE`, a state folder (its ledger.sqlite3), or
    /// `redis://HOST:PORT/DB` for gateways on many machines. The folder the
    /// file or state folder is in must exist.
    /// Default: the hook's (BUDGETGATE_STATE_DIR, else
    /// $XDG_STATE_HOME/budgetgate, else ~/.local/state/budgetgate).
    #[arg(long, value_name = "URL")]
    pub ledger: Option<String>,
    /// The session whose budget the calls draw from (default: `mcp-` with
    /// the command's file name and a hash of the whole command line).
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// How durable each decision is in a SQLite ledger (docs/MCP.md,
    /// "Durability"); a Redis ledger's is the server's own (`appendfsync`).
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = Durability::Full)]
    pub durability: Durability,
    /// Where to ask approval when the client cannot (it declared no
    /// `elicitation` capability): `auto` asks the person at the gateway's
    /// controlling terminal (/dev/tty, not stdin) when there is one; `never`
    /// refuses such calls.
    #[arg(long, value_enum, value_name = "WHERE", default_value_t = TerminalUse::Auto)]
    pub terminal: TerminalUse,
    /// Seconds the client (or the person at the terminal) has to answer an
    /// approval request.
    #[arg(long, value_name = "S", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub approval_timeout: u64,
    /// Seconds after which a call in flight that was never answered gives
    /// its reservation back (a crashed gateway's calls).
    #[arg(long, value_name = "S", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub reservation_ttl: u64,
    /// Milliseconds the server has to exit once the client closed stdin;
    /// then it is killed.
    #[arg(long, value_name = "MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub shutdown_ms: u64,
    /// Serve MCP's Streamable HTTP transport at `http://ADDR/mcp` instead
    /// of stdio, in front of `--upstream` (ADDR: `PORT` or `HOST:PORT`; the
    /// host is 127.0.0.1 unless named; port 0 picks a free one, printed on
    /// stderr).
    #[arg(
        long,
        value_name = "ADDR",
        requires = "upstream",
        conflicts_with = "command"
    )]
    pub listen: Option<String>,
    /// The upstream MCP server's Streamable HTTP endpoint
    /// (`http://HOST:PORT/PATH`; no TLS in this build), with `--listen`.
    #[arg(
        long,
        value_name = "URL",
        requires = "listen",
        conflicts_with = "command"
    )]
    pub upstream: Option<String>,
    /// Seconds the upstream has to start answering a request (its response
    /// headers); then the request is answered with a JSON-RPC error.
    #[arg(long, value_name = "S", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub upstream_timeout: u64,
    /// The MCP server's command and its arguments, best after `--` (without
    /// it, everything from the first word that is not one of the gateway's
    /// options is the command's); exactly one of a command or `--upstream`.
    #[arg(
        required_unless_present_any = ["upstream", "listen"],
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

/// Whether approval may be asked at the gateway's terminal (`--terminal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TerminalUse {
    /// At the controlling terminal, when there is one.
    Auto,
    /// Never: a call the client cannot be asked about is refused.
    Never,
}

/// What both transports share: the gate on the ledger, and the budget's
/// result bound (bytes of compact JSON).
pub struct Setup {
    /// The gate, on the session's ledger.
    pub gate: LedgerGate,
    /// `max_result_bytes` of the budget.
    pub max_result_bytes: u64,
}

/// Reads the budget, opens the ledger and checks the session of `args`
/// (`default_session` when `--session` is absent); `Err` is the one-line
/// reason the gateway does not start (exit 2, fail closed).
pub fn setup(args: &McpArgs, default_session: String) -> Result<Setup, String> {
    let budget = match &args.budget {
        None => ReplayBudget::default(),
        Some(path) => crate::replay::budget::read_budget_file(path)?,
    };
    let mut store = open_ledger(
        args.ledger.as_deref(),
        Duration::from_secs(5),
        args.durability,
    )?;
    // A Redis that does not persist every write loses the ledger when it
    // restarts: said at start (the gateway still starts).
    if let Backend::Redis(redis) = &mut store {
        if let Some(warning) = redis.persistence_warning() {
            eprintln!(
                "budgetgate mcp: warning: {}",
                crate::term::terminal_safe(&warning)
            );
        }
    }
    let session = args.session.clone().unwrap_or(default_session);
    if session.is_empty() || session.chars().count() > 256 || session.chars().any(char::is_control)
    {
        return Err("--session must be 1 to 256 characters without control characters".into());
    }
    let max_result_bytes = budget.max_result_bytes;
    let gate = LedgerGate::on(store, budget, session, args.reservation_ttl * 1000);
    Ok(Setup {
        gate,
        max_result_bytes,
    })
}

// ------------------------------------------------------------------ gate

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

/// Where the ledger is kept.
pub enum Backend {
    /// The SQLite file the hook uses.
    Sqlite(Store),
    /// A Redis (or Valkey) server, for gateways on many machines.
    Redis(crate::ledger_redis::RedisStore),
}

/// The ledger's gate: one transaction per decision, shared with the hook
/// and other gateways on the same session.
pub struct LedgerGate {
    backend: Backend,
    budget: ReplayBudget,
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
        let mut decide = |tx: &dyn LedgerTx| {
            let now = tx.clock_ms().unwrap_or(now);
            let mut ledgers = Ledgers::load(tx, session, budget, tools, now)?;
            let out = f(tx, &mut ledgers, budget, session, now)?;
            ledgers.store(tx, session, now)?;
            Ok(out)
        };
        match &mut self.backend {
            Backend::Sqlite(store) => store.decide(|tx| decide(&*tx)),
            Backend::Redis(store) => store.decide(session, |tx| decide(tx)),
        }
        .map_err(|e: GateError| e.to_string())
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

    fn commit(&mut self, key: &str, tool: &str, now: u64) -> Result<(), String> {
        let _ = tool;
        self.transaction(now, |tx, l, _, session, _| {
            gate::commit_reservation(tx, session, &mut l.session, key)
        })
    }

    fn refused(
        &mut self,
        key: &str,
        tool: &str,
        reason: &str,
        detail: &str,
        now: u64,
    ) -> Result<(), String> {
        let _ = tool;
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

    fn denied(&self, tool: &str) -> bool {
        // A cap of 0 in the budget's tool table; a table that cannot be
        // built (fail closed) denies every tool.
        self.tools
            .as_ref()
            .map_or(true, |tools| tools.cap(tool) == Some(0))
            || self.budget.limits.max_tool_calls == Some(0)
    }
}

// ------------------------------------------------------------------ messages

/// A JSON-RPC message as the proxy reads it: the members it looks at,
/// borrowed from the line; every other member is checked as JSON and left
/// alone. A member given twice is refused.
#[derive(Deserialize)]
pub(crate) struct Message<'a> {
    pub(crate) jsonrpc: Option<String>,
    pub(crate) method: Option<String>,
    #[serde(borrow)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) params: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

/// One message out of the proxy: a JSON text without its newline, or a
/// question for the person at the gateway's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// To the client (the gateway's stdout).
    Client(String),
    /// To the server (its stdin).
    Server(String),
    /// To the person at the terminal: a question to ask
    /// ([`crate::mcp_terminal`]); the answer comes back through
    /// [`Proxy::on_person`].
    Ask(Question),
    /// To the person at the terminal: the question `eid` is no longer
    /// asked (`why`: its deadline passed, its call was cancelled).
    Withdraw {
        /// The question's id.
        eid: String,
        /// Why, for the terminal.
        why: String,
    },
}

/// An approval question for the person at the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question's id (as a client's question would have: compact JSON).
    pub eid: String,
    /// What is asked, one line (the tool and its arguments, shortened; not
    /// yet escaped for a terminal).
    pub text: String,
    /// When it is no longer asked (the proxy's clock, milliseconds).
    pub deadline_ms: u64,
}

/// Who was asked about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The client, by `elicitation/create`.
    Client,
    /// The person at the gateway's terminal.
    Terminal,
}

pub(crate) fn error_line(id: &str, code: i64, message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{}}}}}"#,
        Value::from(message)
    )
}

/// The `CallToolResult` of a call the gateway answers itself.
fn refused_line(id: &str, refusal: &Refusal) -> String {
    let mut meta = json!({"reason": refusal.reason});
    if let Some(limit) = &refusal.limit {
        meta["limit"] = json!(limit);
    }
    if let Some(used) = refusal.used {
        meta["used"] = json!(used);
    }
    if let Some(max) = refusal.max {
        meta["max"] = json!(max);
    }
    if let Some(ms) = refusal.retry_after_ms {
        meta["retry_after"] = json!(ms.div_ceil(1000).max(1));
    }
    let result = json!({
        "content": [{"type": "text", "text": refusal.text}],
        "isError": true,
        "_meta": {"budgetgate": meta},
    });
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// Counts the bytes of a value's compact JSON, stopping past `limit`.
struct Counter {
    bytes: u64,
    limit: u64,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if self.bytes > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the compact JSON of `value` is over `limit` bytes (counted
/// without building it).
fn over_limit(value: &Value, limit: u64) -> bool {
    let mut counter = Counter { bytes: 0, limit };
    serde_json::to_writer(&mut counter, value).is_err()
}

/// A JSON-RPC id as the proxy keys it: its compact JSON, so that `"a"`
/// and `"\u0061"` are one id, and a number as a JavaScript or Python peer
/// reads it, so that `1`, `1.0` and `1e0` are one id too (a server that
/// reads them as one would otherwise answer one request with the answer
/// to another).
pub(crate) fn normal_id(raw: &RawValue) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(v) => id_key(&v),
        Err(_) => raw.get().to_owned(),
    }
}

/// [`normal_id`] of a read id.
fn id_key(v: &Value) -> String {
    let Value::Number(n) = v else {
        return v.to_string();
    };
    match n.as_f64() {
        // A double, as the peer holds it: integers past 2^53 round there.
        #[allow(clippy::cast_possible_truncation)]
        Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e18 => (f as i64).to_string(),
        _ => n.to_string(),
    }
}

/// The largest integer id a JavaScript peer holds exactly (2^53).
const MAX_EXACT_ID: u64 = 1 << 53;

/// An id's compact JSON, read back: `None` when its value cannot be read
/// (a number beyond a 64-bit float), which the gateway's own answers then
/// give as `null`.
fn readable_id(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<Value>(raw.get())
        .ok()
        .map(|v| v.to_string())
}

/// Whether `e` is [`crate::strict::value_from_str`]'s refusal of a key
/// given twice.
fn is_duplicate(e: &serde_json::Error) -> bool {
    e.is_data() && e.to_string().starts_with("duplicate key ")
}

/// serde_json's error reading a value, with what it means when its own
/// words are obscure (a `\u` escape of half a surrogate pair ends in
/// "unexpected end of hex escape").
fn unreadable(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("hex escape") || text.contains("surrogate") {
        format!("a \\u escape that is not a whole character, such as a lone surrogate (\\ud800-\\udfff without its pair): {text}")
    } else if text.contains("number out of range") {
        format!("{text} (a number beyond the range of a 64-bit float)")
    } else {
        text
    }
}

/// What a JSON value is, for an error message.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => {
            "a number outside the 64-bit integers (a fraction, an exponent or too large)"
        }
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether the proxy reads the content of a client message (other than a
/// `tools/call`) to decide something: `initialize` (the elicitation
/// capability), `notifications/cancelled` (which reservation to give
/// back) and the answer to one of its own approval questions (`awaited`).
fn is_read(msg: &Message<'_>, awaited: impl Fn(&str) -> bool) -> bool {
    match msg.method.as_deref() {
        Some("initialize" | "notifications/cancelled") => true,
        Some(_) => false,
        None => msg.id.map(normal_id).is_some_and(|id| awaited(&id)),
    }
}

/// The question `eid`, asked of `by`, withdrawn (`why`): a
/// `notifications/cancelled` to the client, or word to the terminal.
fn withdrawn(eid: &str, by: Asker, why: &str) -> Out {
    match by {
        Asker::Client => Out::Client(format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{eid},"reason":"{why}"}}}}"#
        )),
        Asker::Terminal => Out::Withdraw {
            eid: eid.to_owned(),
            why: why.to_owned(),
        },
    }
}

/// At most `max` characters of `text`, cut on a character boundary.
fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

// ------------------------------------------------------------------ proxy

/// How many calls given back on a server's error are remembered, should
/// the server answer one with a result after all.
const GIVEN_BACK_KEPT: usize = 256;

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
    },
    /// A `tools/list`, whose result is filtered.
    List,
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
}

/// The gateway's logic without I/O: lines in, [`Out`] messages out, the
/// time passed in (milliseconds; the ledger's clock).
pub struct Proxy<G: CallGate> {
    gate: G,
    connection: String,
    max_result_bytes: u64,
    approval_timeout_ms: u64,
    elicitation: bool,
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
    /// When the reservations this proxy holds were last renewed
    /// ([`CallGate::renew`]).
    renewed_at: u64,
    /// Calls given back on the server's JSON-RPC error, newest last: id,
    /// key and tool ([`Self::unawaited_answer`]).
    given_back: VecDeque<(String, String, String)>,
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
            connection,
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
            renewed_at: 0,
            given_back: VecDeque::new(),
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
            .collect()
    }

    /// When the held reservations are next to be renewed.
    fn renewal_due(&self) -> Option<u64> {
        let every = self.gate.renew_every_ms()?;
        let holds = self.approvals.len() + self.pending.len() > 0;
        holds.then(|| self.renewed_at.saturating_add(every))
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
            eprintln!("budgetgate mcp: renewing {} reservation(s): {e} (tried again at the next renewal; a reservation not renewed in time is counted as spent, never given back)", keys.len());
        }
    }

    /// Starts the renewal clock when the first reservation is taken, so a
    /// new one is renewed a full period after it was made.
    fn holding_from(&mut self, now: u64) {
        if self.approvals.is_empty()
            && !self
                .pending
                .values()
                .any(|p| matches!(p, Pending::Call { .. }))
        {
            self.renewed_at = now;
        }
    }

    /// How many answered calls wait for their commit ([`Self::settle`]).
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
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
            .min()
    }

    /// A line from the client. Answered calls not yet settled stay so,
    /// unless a `tools/call` commits them with its decision.
    pub fn on_client(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let mut out = Vec::new();
        let Ok(text) = std::str::from_utf8(line) else {
            out.push(Out::Client(error_line(
                "null",
                PARSE_ERROR,
                "Parse error: not UTF-8",
            )));
            return out;
        };
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return out;
        }
        if text.trim_start().starts_with('[') {
            let items: Vec<&RawValue> = match serde_json::from_str(text) {
                Ok(items) => items,
                Err(e) => {
                    out.push(Out::Client(error_line(
                        "null",
                        PARSE_ERROR,
                        &format!("Parse error: {e}"),
                    )));
                    return out;
                }
            };
            if items.is_empty() {
                out.push(Out::Client(error_line(
                    "null",
                    INVALID_REQUEST,
                    "Invalid Request: an empty batch",
                )));
                return out;
            }
            let mut forward = Vec::new();
            for item in items {
                let raw = item.get();
                if self.client_one(raw, now, &mut out) {
                    forward.push(raw);
                }
            }
            if !forward.is_empty() {
                out.push(Out::Server(format!("[{}]", forward.join(","))));
            }
        } else if self.client_one(text, now, &mut out) {
            out.push(Out::Server(text.to_owned()));
        }
        out
    }

    /// The client sent a line longer than [`MAX_LINE`] (skipped).
    pub fn on_client_too_long(&mut self) -> Vec<Out> {
        vec![Out::Client(error_line(
            "null",
            INVALID_REQUEST,
            &format!(
                "Invalid Request: a message longer than {} MiB was refused",
                MAX_LINE >> 20
            ),
        ))]
    }

    /// Reads one message from the client; `true`: forward its text.
    fn client_one(&mut self, text: &str, now: u64, out: &mut Vec<Out>) -> bool {
        let msg: Message<'_> = match serde_json::from_str(text) {
            Ok(msg) => msg,
            Err(e) => {
                let (code, what) = if e.is_data() {
                    (INVALID_REQUEST, "Invalid Request")
                } else {
                    (PARSE_ERROR, "Parse error")
                };
                // The id, when the line is a JSON object without a
                // duplicate member (which id would be meant?).
                let id = crate::strict::value_from_str(text)
                    .ok()
                    .and_then(|v| {
                        v.get("id")
                            .filter(|id| id.is_string() || id.is_number())
                            .map(Value::to_string)
                    })
                    .unwrap_or_else(|| "null".into());
                out.push(Out::Client(error_line(&id, code, &format!("{what}: {e}"))));
                return false;
            }
        };
        // The id as the proxy keys it ([`normal_id`], read once), and as
        // the gateway's own answers carry it: an id whose value cannot be
        // read is answered as no id, JSON-RPC's null when the id cannot be
        // detected, not a line the client may not parse.
        let readable = msg.id.and_then(readable_id);
        let key = msg.id.map(normal_id);
        let id = key.as_deref();
        let reply_id = readable.as_deref().unwrap_or("null");
        if msg.jsonrpc.as_deref() != Some("2.0") {
            out.push(Out::Client(error_line(
                reply_id,
                INVALID_REQUEST,
                "Invalid Request: `jsonrpc` must be \"2.0\"",
            )));
            return false;
        }
        if msg.method.as_deref() == Some("tools/call") {
            return self.client_call(text, msg.params, now, out);
        }
        if is_read(&msg, |eid| self.approvals.contains_key(eid)) {
            // The gateway reads this message's content to decide: a key
            // given twice would let it read one value and the other side
            // another (`docs/MCP.md`, "Transparency and faults").
            if let Err(e) = crate::strict::value_from_str(text) {
                if is_duplicate(&e) {
                    if msg.method.is_none() {
                        if let Some(approval) = id.and_then(|eid| self.approvals.remove(eid)) {
                            let answer = format!("the client's answer could not be read ({e})");
                            self.refuse_approval(approval, &answer, now, out);
                        }
                    } else {
                        out.push(Out::Client(error_line(
                            reply_id,
                            INVALID_REQUEST,
                            &format!("Invalid Request: {e}: a message the gateway reads must not repeat a key (refused, not forwarded)"),
                        )));
                    }
                    return false;
                }
            }
        }
        match (msg.method.as_deref(), id) {
            (Some(method), Some(id)) => {
                // An id still awaited would replace the request it names
                // here: a call's reservation would then never be committed
                // (the server's answer read as another request's) and the
                // ledger would give back an attempt that ran. MCP forbids
                // reusing an id within a session; refused, not forwarded.
                // (A `tools/call` reusing one is the gate's: `duplicate-call-id`.)
                if method != "tools/call"
                    && (self.pending.contains_key(id)
                        || self.approvals.values().any(|a| a.id == id))
                {
                    out.push(Out::Client(error_line(
                        reply_id,
                        INVALID_REQUEST,
                        &format!("Invalid Request: the id {id} is already used by a request awaiting its answer"),
                    )));
                    return false;
                }
                if self.in_flight() >= MAX_PENDING {
                    out.push(Out::Client(error_line(
                        reply_id,
                        GATEWAY_ERROR,
                        &format!("budgetgate: more than {MAX_PENDING} requests in flight"),
                    )));
                    return false;
                }
                match method {
                    "initialize" => {
                        self.elicitation = msg
                            .params
                            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                            .is_some_and(|p| p["capabilities"].get("elicitation").is_some());
                        self.pending.insert(id.to_owned(), Pending::Other);
                    }
                    "tools/list" => {
                        self.pending.insert(id.to_owned(), Pending::List);
                    }
                    _ => {
                        self.pending.insert(id.to_owned(), Pending::Other);
                    }
                }
                true
            }
            (Some("notifications/cancelled"), None) => {
                let target = msg
                    .params
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p.get("requestId").map(id_key));
                if let Some(target) = target {
                    return self.cancel(&target, now, out);
                }
                true
            }
            (Some(_), None) => true,
            (None, Some(id)) if msg.result.is_some() || msg.error.is_some() => {
                if self.asks(id) == Some(Asker::Terminal) {
                    // Only the person at the terminal answers a question
                    // asked there; the agent's client cannot.
                    eprintln!("budgetgate mcp: the client answered {id}, a question asked at the terminal (dropped)");
                    return false;
                }
                if let Some(approval) = self.approvals.remove(id) {
                    // Both a result and an error (JSON-RPC forbids it) is
                    // not an accept.
                    let result = if msg.error.is_some() {
                        None
                    } else {
                        msg.result
                    };
                    self.approval_answer(approval, result, msg.error.is_some(), now, out);
                    return false;
                }
                // A late answer to a question already withdrawn is the
                // gateway's: the server never asked it.
                !self.asked_once(id)
            }
            _ => {
                out.push(Out::Client(error_line(
                    reply_id,
                    INVALID_REQUEST,
                    "Invalid Request: neither a request, a notification nor a response",
                )));
                false
            }
        }
    }

    /// A client's `notifications/cancelled` for request `target`; `true`:
    /// forward it (the server saw the request). A call still awaiting its
    /// approval is dropped, and its question withdrawn from the client.
    fn cancel(&mut self, target: &str, now: u64, out: &mut Vec<Out>) -> bool {
        let waiting = self
            .approvals
            .iter()
            .find(|(_, a)| a.id == target)
            .map(|(k, _)| k.clone());
        if let Some(eid) = waiting {
            if let Some(a) = self.approvals.remove(&eid) {
                self.roll_back(&a.key, now);
                out.push(withdrawn(&eid, a.by, "the call was cancelled"));
            }
            return false;
        }
        // A forwarded call may have run whatever the client says now: it
        // stays reserved until the server answers (its result counted and
        // withheld, an error given back) or the gateway ends (counted).
        if let Some(Pending::Call { cancelled, .. }) = self.pending.get_mut(target) {
            *cancelled = true;
        }
        true
    }

    fn roll_back(&mut self, key: &str, now: u64) {
        if let Err(e) = self.gate.roll_back(key, now) {
            eprintln!("budgetgate mcp: rolling back {key}: {e}");
        }
    }

    /// Commits a call that ran; one that fails is kept in `unsettled`,
    /// made again before the next decision.
    fn commit(&mut self, key: &str, tool: &str, now: u64) {
        if let Err(e) = self.gate.commit(key, tool, now) {
            eprintln!("budgetgate mcp: committing {key}: {e} (kept: committed again before the next decision, which waits for it)");
            self.unsettled.push((key.to_owned(), tool.to_owned()));
        }
    }

    /// Counts a reserved call whose approval was refused, logging why
    /// (`why`: [`CallGate::refused`]), and answers the client with `refusal`.
    #[allow(clippy::too_many_arguments)]
    fn refuse_reserved(
        &mut self,
        id: &str,
        key: &str,
        tool: &str,
        refusal: &Refusal,
        why: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        if let Err(e) = self.gate.refused(key, tool, refusal.reason, why, now) {
            eprintln!("budgetgate mcp: committing {key}: {e} (kept: committed again before the next decision, which waits for it)");
            self.unsettled.push((key.to_owned(), tool.to_owned()));
        }
        out.push(Out::Client(refused_line(id, refusal)));
    }

    /// Reads a client's `tools/call` (one message, `jsonrpc` checked)
    /// strictly, then decides it; `true`: forward its text now. Refused
    /// without being forwarded (fail closed), each answered with the rule
    /// it breaks: a key given twice anywhere in it (`-32600`: the gate and
    /// the server could read different calls), an id that is `null` or
    /// not a string or an integer (`-32600`, with the id when it is a
    /// number, else `null`), a number out of
    /// range or a lone surrogate (`-32602` when in `params`), `params`
    /// that is not an object with a string `name` or non-object
    /// `arguments` (`-32602`). Without an id (a notification, which
    /// cannot be answered) it is dropped.
    fn client_call(
        &mut self,
        text: &str,
        raw_params: Option<&RawValue>,
        now: u64,
        out: &mut Vec<Out>,
    ) -> bool {
        let refuse = |out: &mut Vec<Out>, id: &str, code: i64, message: String| {
            out.push(Out::Client(error_line(id, code, &message)));
            false
        };
        let top: crate::strict::StrictObject = match serde_json::from_str(text) {
            Ok(top) => top,
            Err(e) => {
                return refuse(
                    out,
                    "null",
                    INVALID_REQUEST,
                    format!("Invalid Request: {e}: a tools/call must not repeat a key (refused, not forwarded)"),
                )
            }
        };
        let Some(raw_id) = top.get("id") else {
            // A call that cannot be answered cannot be gated: dropped.
            eprintln!("budgetgate mcp: a tools/call without an id was dropped (not forwarded)");
            return false;
        };
        let id = match crate::strict::value_from_str(raw_id.get()) {
            Ok(v @ Value::String(_)) => v.to_string(),
            Ok(Value::Number(n))
                if n.as_i64().is_some_and(|i| i.unsigned_abs() <= MAX_EXACT_ID)
                    || n.as_u64().is_some_and(|u| u <= MAX_EXACT_ID) =>
            {
                n.to_string()
            }
            Ok(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                return refuse(
                    out,
                    raw_id.get(),
                    INVALID_REQUEST,
                    format!("Invalid Request: a tools/call id past 2^53 ({n}) is not told apart from its neighbours by a JavaScript peer (refused, not forwarded)"),
                )
            }
            Ok(v) => {
                // A number is an id JSON-RPC knows (MCP wants an integer):
                // answered with it as sent, so the client can match the
                // refusal to its request; other kinds are no id at all.
                let answer_id = if v.is_number() { raw_id.get() } else { "null" };
                return refuse(
                    out,
                    answer_id,
                    INVALID_REQUEST,
                    format!(
                        "Invalid Request: a tools/call id must be a string or an integer, not {} (refused, not forwarded)",
                        kind(&v)
                    ),
                )
            }
            Err(e) => {
                return refuse(
                    out,
                    "null",
                    INVALID_REQUEST,
                    format!("Invalid Request: a tools/call id must be a string or an integer ({}; refused, not forwarded)", unreadable(&e)),
                )
            }
        };
        // A request still awaiting its answer under this id (not a call:
        // a call's id again is the gate's `duplicate-call-id`) would take
        // the call's answer, or give it the request's error.
        if matches!(self.pending.get(&id), Some(p) if !matches!(p, Pending::Call { .. }))
            || self.approvals.values().any(|a| a.id == id)
        {
            return refuse(
                out,
                &id,
                INVALID_REQUEST,
                format!("Invalid Request: the id {id} is already used by a request awaiting its answer (refused, not forwarded)"),
            );
        }
        if self.in_flight() >= MAX_PENDING {
            return refuse(
                out,
                &id,
                GATEWAY_ERROR,
                format!("budgetgate: more than {MAX_PENDING} requests in flight"),
            );
        }
        let whole = match crate::strict::value_from_str(text) {
            Ok(v) => v,
            Err(e) if is_duplicate(&e) => {
                return refuse(
                    out,
                    &id,
                    INVALID_REQUEST,
                    format!("Invalid Request: {e}: a tools/call must not repeat a key (refused, not forwarded)"),
                )
            }
            Err(e) => {
                let in_params =
                    raw_params.is_some_and(|p| crate::strict::value_from_str(p.get()).is_err());
                let (code, what) = if in_params {
                    (INVALID_PARAMS, "Invalid params")
                } else {
                    (INVALID_REQUEST, "Invalid Request")
                };
                return refuse(out, &id, code, format!("{what}: {}", unreadable(&e)));
            }
        };
        let params = match whole.get("params") {
            Some(p @ Value::Object(_)) => p,
            None => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call needs `params`, an object with a string `name`"
                        .into(),
                )
            }
            Some(p) => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: tools/call `params` must be an object, not {}",
                        kind(p)
                    ),
                )
            }
        };
        match params.get("name") {
            Some(Value::String(_)) => {}
            None => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call needs a string `name`".into(),
                )
            }
            Some(n) => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: tools/call `name` must be a string, not {}",
                        kind(n)
                    ),
                )
            }
        }
        self.gate_call(&id, params, text, now, out)
    }

    /// Decides a `tools/call` whose `params` is an object with a string
    /// `name`; `true`: forward it now.
    fn gate_call(
        &mut self,
        id: &str,
        params: &Value,
        text: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) -> bool {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            out.push(Out::Client(error_line(
                id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs a string `name`",
            )));
            return false;
        };
        let empty = json!({});
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(a @ Value::Object(_)) => a,
            Some(_) => {
                out.push(Out::Client(error_line(
                    id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call `arguments` must be an object",
                )));
                return false;
            }
        };
        let key = format!("mcp/{}/{id}", self.connection);
        let shown_id = format!("the request id {id}");
        let call = ToolCall {
            name,
            input: arguments,
            call_id: &key,
            shown_id: &shown_id,
            // The key holds the connection: a client numbers its requests
            // afresh on each connection.
            id_scope: "on this connection",
        };
        let ran = std::mem::take(&mut self.unsettled);
        let (failed, verdict) = self.gate.commit_then_decide(&ran, &call, now);
        for f in failed {
            eprintln!(
                "budgetgate mcp: committing {}: {} (kept: committed again before the next decision)",
                f.key, f.error
            );
            self.unsettled.push((f.key, f.tool));
        }
        let verdict = match verdict {
            Ok(v) => v,
            Err(e) => {
                let refusal = Refusal::worded(
                    "gate-error",
                    &format!("the budget could not be checked ({e})"),
                    "Not executed (the gate fails closed). Tell the user the budget gate is not working.",
                    "",
                );
                out.push(Out::Client(refused_line(id, &refusal)));
                return false;
            }
        };
        match verdict {
            Verdict::Refuse(refusal) => {
                out.push(Out::Client(refused_line(id, &refusal)));
                false
            }
            Verdict::Run => {
                self.holding_from(now);
                self.pending.insert(
                    id.to_owned(),
                    Pending::Call {
                        key,
                        tool: name.to_owned(),
                        cancelled: false,
                    },
                );
                true
            }
            Verdict::Ask(_)
                if self.cannot_ask.is_some() || !(self.elicitation || self.terminal) =>
            {
                // The attempt counts, as a refused approval does.
                let why = self.cannot_ask.clone().unwrap_or_else(|| {
                    "this client cannot ask one: it did not declare the elicitation capability (and the gateway asks no one at a terminal: none is attached, or --terminal never)"
                        .into()
                });
                let refusal = Refusal::worded(
                    "approval-refused",
                    &format!(
                        "{name} needs a person's approval (needs_approval in the budget), and {why}"
                    ),
                    "Not executed. Do not repeat this call; tell the user it needs their approval.",
                    "",
                );
                self.refuse_reserved(id, &key, name, &refusal, &why, now, out);
                false
            }
            Verdict::Ask(_) => {
                self.next_approval += 1;
                let eid = self.question_id(self.next_approval);
                let shown = shortened(&arguments.to_string(), 400);
                let message =
                    format!("budgetgate: the agent wants to call {name} with {shown}. Allow it?");
                let question = approval::Question::asked(now, self.approval_timeout_ms);
                let deadline_ms = question.deadline_ms();
                let by = if self.elicitation {
                    let request = json!({
                        "message": message,
                        "requestedSchema": {"type": "object", "properties": {}},
                    });
                    out.push(Out::Client(format!(
                        r#"{{"jsonrpc":"2.0","id":{eid},"method":"elicitation/create","params":{request}}}"#
                    )));
                    Asker::Client
                } else {
                    out.push(Out::Ask(Question {
                        eid: eid.clone(),
                        text: message,
                        deadline_ms,
                    }));
                    Asker::Terminal
                };
                self.holding_from(now);
                self.approvals.insert(
                    eid,
                    Approval {
                        id: id.to_owned(),
                        key,
                        tool: name.to_owned(),
                        line: text.to_owned(),
                        question,
                        by,
                    },
                );
                false
            }
        }
    }

    fn approval_answer(
        &mut self,
        approval: Approval,
        result: Option<&RawValue>,
        error: bool,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let action = result
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
            .and_then(|r| r.get("action").and_then(Value::as_str).map(str::to_owned));
        match action.as_deref() {
            Some("accept" | "decline" | "cancel") => {
                self.approval_action(approval, action.as_deref(), now, out);
            }
            Some(other) => {
                let answer = format!(
                    "the client answered {}, not accept",
                    Value::from(shortened(other, 40))
                );
                self.refuse_approval(approval, &answer, now, out);
            }
            None if error => self.approval_action(approval, None, now, out),
            None => self.refuse_approval(
                approval,
                "the client's answer had no `action` of accept, decline or cancel",
                now,
                out,
            ),
        }
    }

    /// The person at the terminal answered the question `eid`: `approved`
    /// forwards its call, otherwise it is refused (`approval-refused`).
    /// Nothing when that question is not asked there (any more).
    pub fn on_person(&mut self, eid: &str, approved: bool, now: u64) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        if self.asks(eid) == Some(Asker::Terminal) {
            if let Some(approval) = self.approvals.remove(eid) {
                let action = if approved { "accept" } else { "decline" };
                self.approval_action(approval, Some(action), now, &mut out);
            }
        }
        out
    }

    fn approval_action(
        &mut self,
        approval: Approval,
        action: Option<&str>,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let answer = match action {
            Some("accept") => Answer::Approve,
            _ => Answer::Refuse,
        };
        let why = match approval.question.answer(answer, now) {
            Some(Decision::Approved) => {
                out.push(Out::Server(approval.line));
                self.pending.insert(
                    approval.id,
                    Pending::Call {
                        key: approval.key,
                        tool: approval.tool,
                        cancelled: false,
                    },
                );
                return;
            }
            // An accept read at or after the deadline, before the tick that
            // would have withdrawn the question, never runs the call.
            Some(Decision::TimedOut) => self.no_answer_in_time(),
            _ => match action {
                Some("decline") if approval.by == Asker::Terminal => {
                    "the person at the gateway's terminal declined it"
                }
                Some("decline") => "the person declined it",
                Some("cancel") => "the person dismissed the request",
                _ => "the client could not ask",
            }
            .to_owned(),
        };
        self.refuse_approval(approval, &why, now, out);
    }

    fn refuse_approval(&mut self, approval: Approval, answer: &str, now: u64, out: &mut Vec<Out>) {
        let refusal = Refusal::new(
            budgetgate_core::turn::RefusalReason::ApprovalRefused,
            &format!(
                "{} needs a person's approval (needs_approval in the budget), and {answer}",
                approval.tool
            ),
        );
        self.refuse_reserved(
            &approval.id,
            &approval.key,
            &approval.tool,
            &refusal,
            answer,
            now,
            out,
        );
    }

    /// Refuses the calls whose approval is past its deadline, and renews
    /// the reservations held ([`Self::renew_held`]).
    pub fn on_tick(&mut self, now: u64) -> Vec<Out> {
        self.renew_held(now);
        let mut out = Vec::new();
        let late: Vec<String> = self
            .approvals
            .iter()
            .filter(|(_, a)| a.question.expired(now).is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for eid in late {
            out.extend(self.expire(&eid, now));
        }
        out
    }

    /// The question `eid` had no answer in time: withdrawn from the client
    /// (`notifications/cancelled`) and its call refused (`approval-refused`;
    /// the attempt counts). Nothing when it is no longer asked.
    pub fn expire(&mut self, eid: &str, now: u64) -> Vec<Out> {
        self.settle(now);
        let answer = self.no_answer_in_time();
        self.refuse_question(eid, "no answer in time", &answer, now)
    }

    /// Why a question past its deadline refuses its call.
    fn no_answer_in_time(&self) -> String {
        format!(
            "no answer came within {} s",
            self.approval_timeout_ms.div_ceil(1000)
        )
    }

    /// The question `eid` cannot be answered any more: withdrawn
    /// (`withdrawn` says why to whoever was asked) and its call refused
    /// (`approval-refused`, "… and `answer`"; the attempt counts). Nothing
    /// when it is no longer asked.
    pub fn refuse_question(
        &mut self,
        eid: &str,
        withdrawn_why: &str,
        answer: &str,
        now: u64,
    ) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        if let Some(approval) = self.approvals.remove(eid) {
            out.push(withdrawn(eid, approval.by, withdrawn_why));
            self.refuse_approval(approval, answer, now, &mut out);
        }
        out
    }

    /// A line from the server: the calls it answers are committed before
    /// this returns.
    pub fn on_server(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let out = self.on_server_unsettled(line, now);
        self.settle(now);
        out
    }

    /// A line from the server, whose answers to calls are committed by the
    /// next decision's transaction, [`Self::settle`] or another entry point
    /// (not [`Self::on_client`] or this): the transport writes the answer
    /// to the client first, so the commit's transaction (with
    /// `--durability full`, its fsync) is not in the call's round trip, and
    /// while calls follow each other each costs one transaction. A crash
    /// between the two leaves the call reserved, as a crash while the
    /// server ran it does: the stdio transport settles within
    /// [`SETTLE_WAIT`] of the answer.
    pub fn on_server_unsettled(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let Ok(text) = std::str::from_utf8(line) else {
            eprintln!("budgetgate mcp: the server sent a line that is not UTF-8 (dropped)");
            return Vec::new();
        };
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return Vec::new();
        }
        if text.trim_start().starts_with('[') {
            let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
                eprintln!("budgetgate mcp: the server sent a line that is not JSON (dropped)");
                return Vec::new();
            };
            let mut changed = false;
            let parts: Vec<String> = items
                .iter()
                .filter_map(|item| match self.server_one(item.get(), now) {
                    Reply::Same => Some(item.get().to_owned()),
                    Reply::Instead(new) => {
                        changed = true;
                        Some(new)
                    }
                    Reply::Drop => {
                        changed = true;
                        None
                    }
                })
                .collect();
            if !changed {
                return vec![Out::Client(text.to_owned())];
            }
            if parts.is_empty() {
                return Vec::new();
            }
            return vec![Out::Client(format!("[{}]", parts.join(",")))];
        }
        match serde_json::from_str::<Message<'_>>(text) {
            Err(e) => {
                eprintln!("budgetgate mcp: the server sent a line that is not a JSON-RPC message ({e}; dropped)");
                Vec::new()
            }
            Ok(msg) => match self.server_message(text, &msg, now) {
                Reply::Same => vec![Out::Client(text.to_owned())],
                Reply::Instead(new) => vec![Out::Client(new)],
                Reply::Drop => Vec::new(),
            },
        }
    }

    /// Reads one message from the server.
    fn server_one(&mut self, text: &str, now: u64) -> Reply {
        match serde_json::from_str::<Message<'_>>(text) {
            Ok(msg) => self.server_message(text, &msg, now),
            // As a line that is not a JSON-RPC message: dropped.
            Err(e) => {
                eprintln!("budgetgate mcp: the server sent a batch member that is not a JSON-RPC message ({e}; dropped)");
                Reply::Drop
            }
        }
    }

    fn server_message(&mut self, text: &str, msg: &Message<'_>, now: u64) -> Reply {
        if msg.method.is_some() {
            return Reply::Same;
        }
        let Some(id) = msg.id else {
            return Reply::Same;
        };
        let id = normal_id(id);
        let id = id.as_str();
        let Some(pending) = self.pending.remove(id) else {
            return self.unawaited_answer(id, text, msg, now);
        };
        match pending {
            Pending::Other => Reply::Same,
            Pending::Call {
                key,
                tool,
                cancelled,
            } => {
                if says_not_run(text, msg) {
                    // A JSON-RPC error from the server for this request:
                    // the call did not run. The only answer that gives a
                    // call back (`SPEC E`).
                    self.roll_back(&key, now);
                    self.remember_given_back(id, &key, &tool);
                    return if cancelled { Reply::Drop } else { Reply::Same };
                }
                let result = msg.result.filter(|r| r.get().trim_start().starts_with('{'));
                // Any result counts, whatever it holds: the call ran.
                self.unsettled.push((key, tool.clone()));
                if cancelled {
                    // The client cancelled it: it ignores an answer (MCP's
                    // cancellation), so none is passed on, whatever size.
                    return Reply::Drop;
                }
                let mut refusal = Refusal::worded(word::TOOL_ERROR, "", "", "");
                let Some(result) = result.filter(|_| msg.error.is_none()) else {
                    // No result object, or an error beside one: not an
                    // answer the gate can read, yet not one that says the
                    // call did not run. Counted, withheld (fail closed).
                    refusal.text = format!(
                        "budgetgate withheld this answer (tool-error): the server's answer for {tool} is not a JSON-RPC result or error it can read, so it was not passed on. The call may have run, so it counts against the budget."
                    );
                    return Reply::Instead(refused_line(id, &refusal));
                };
                match crate::strict::value_from_str(result.get()) {
                    Ok(value) if !over_limit(&value, self.max_result_bytes) => return Reply::Same,
                    Ok(_) => {
                        refusal.text = format!(
                            "budgetgate withheld this result (tool-error): {tool} ran, but its result is over the budget's bound of {} bytes of compact JSON (max_result_bytes), so it was not passed on. Ask for less at a time (a smaller range, a filter, a summary).",
                            self.max_result_bytes
                        );
                        refusal.limit = Some("max_result_bytes".into());
                        refusal.max = Some(self.max_result_bytes);
                    }
                    // Its size cannot be told (a key given twice, a number
                    // out of range): withheld, fail closed.
                    Err(e) => {
                        refusal.text = format!(
                            "budgetgate withheld this result (tool-error): {tool} ran, but its result could not be read ({e}), so its size could not be checked and it was not passed on."
                        );
                    }
                }
                Reply::Instead(refused_line(id, &refusal))
            }
            Pending::List => {
                let mut value: Value = match crate::strict::value_from_str(text) {
                    Ok(v) => v,
                    // Which tools it lists cannot be told: withheld.
                    Err(e) => {
                        return Reply::Instead(error_line(
                            id,
                            GATEWAY_ERROR,
                            &format!("budgetgate: the server's tools/list answer could not be read ({e}); withheld"),
                        ))
                    }
                };
                let Some(tools) = value
                    .get_mut("result")
                    .and_then(|r| r.get_mut("tools"))
                    .and_then(Value::as_array_mut)
                else {
                    return Reply::Same;
                };
                let before = tools.len();
                tools.retain(|t| {
                    !t.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| self.gate.denied(n))
                });
                if tools.len() == before {
                    Reply::Same
                } else {
                    Reply::Instead(value.to_string())
                }
            }
        }
    }

    /// An answer from the server to an id no request awaits (a second
    /// answer, or one to a call it had answered with an error): never
    /// passed on (the client awaits nothing under that id, and its size
    /// was never checked). A result for a call that was given back on the
    /// server's error means the call ran after all: counted now.
    fn unawaited_answer(&mut self, id: &str, text: &str, msg: &Message<'_>, now: u64) -> Reply {
        if !says_not_run(text, msg) {
            if let Some(at) = self.given_back.iter().position(|(i, _, _)| i == id) {
                if let Some((_, key, tool)) = self.given_back.remove(at) {
                    if let Err(e) = self.gate.count_unreserved(&key, &tool, now) {
                        eprintln!("budgetgate mcp: counting {key}, answered after its error: {e}");
                    }
                }
            }
        }
        eprintln!("budgetgate mcp: the server answered {id}, which no request awaits (dropped)");
        Reply::Drop
    }

    /// Remembers a call given back on the server's error, in case the
    /// server answers it with a result after all (the last
    /// [`GIVEN_BACK_KEPT`]).
    fn remember_given_back(&mut self, id: &str, key: &str, tool: &str) {
        if self.given_back.len() >= GIVEN_BACK_KEPT {
            self.given_back.pop_front();
        }
        self.given_back
            .push_back((id.to_owned(), key.to_owned(), tool.to_owned()));
    }

    /// The server's answer to request `id` (compact JSON; `None` when it
    /// could not be read) was over [`MAX_LINE`] and skipped unread. A call
    /// it answers ran: counted, and answered with a withheld result (the
    /// bound of `max_result_bytes` applies to it as to any result). An
    /// answer whose id cannot be read leaves its call reserved, counted at
    /// the latest when the gateway ends.
    pub fn on_server_too_long(&mut self, id: Option<&str>, now: u64) -> Vec<Out> {
        let why = format!("answered with a message longer than {} MiB", MAX_LINE >> 20);
        let Some(id) = id.filter(|id| self.pending.contains_key(*id)) else {
            eprintln!("budgetgate mcp: the server sent a message longer than {} MiB whose id is not one awaited (dropped)", MAX_LINE >> 20);
            return Vec::new();
        };
        let out = self.no_answer(id, Ran::Maybe, &why, now);
        self.settle(now);
        out
    }

    /// Request `id` (compact JSON) will get no answer from the server
    /// (`why`: what happened, as "the upstream MCP server WHY" reads):
    /// answered here. A call is counted unless it is known not to have run
    /// (`ran`: [`Ran::No`] only when the request never reached the server);
    /// a counted call's answer says it may have run. Nothing when `id` is
    /// not awaited.
    pub fn on_no_answer(&mut self, id: &str, ran: Ran, why: &str, now: u64) -> Vec<Out> {
        let out = self.no_answer(id, ran, why, now);
        self.settle(now);
        out
    }

    fn no_answer(&mut self, id: &str, ran: Ran, why: &str, now: u64) -> Vec<Out> {
        let Some(pending) = self.pending.remove(id) else {
            return Vec::new();
        };
        let Pending::Call {
            key,
            tool,
            cancelled,
        } = pending
        else {
            let message = format!("budgetgate: the MCP server {why}");
            return vec![Out::Client(error_line(id, GATEWAY_ERROR, &message))];
        };
        match ran {
            Ran::No => self.roll_back(&key, now),
            Ran::Maybe => self.unsettled.push((key, tool.clone())),
        }
        if cancelled {
            return Vec::new();
        }
        match ran {
            Ran::No => {
                let message = format!(
                    "budgetgate: the MCP server {why}; {tool} did not run and is not counted"
                );
                vec![Out::Client(error_line(id, GATEWAY_ERROR, &message))]
            }
            Ran::Maybe => {
                let mut refusal = Refusal::worded(word::TOOL_ERROR, "", "", "");
                refusal.text = format!(
                    "budgetgate (tool-error): the MCP server {why}, so {tool}'s result is not known. It may have run, so it counts against the budget; check its effect before calling it again."
                );
                vec![Out::Client(refused_line(id, &refusal))]
            }
        }
    }

    /// The server is gone (`why`): every request awaiting it or an
    /// approver is answered. Calls it was sent may have run before it went:
    /// counted ([`Self::on_no_answer`]); calls awaiting approval never
    /// reached it: given back.
    pub fn on_server_exit(&mut self, why: &str, now: u64) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        let why = format!("{why} before answering");
        let message = format!("budgetgate: the MCP server {why}");
        let mut ids: Vec<String> = self.pending.keys().cloned().collect();
        ids.sort();
        for id in ids {
            out.extend(self.no_answer(&id, Ran::Maybe, &why, now));
        }
        self.settle(now);
        let approvals: Vec<Approval> = self.approvals.drain().map(|(_, a)| a).collect();
        for a in approvals {
            self.roll_back(&a.key, now);
            out.push(Out::Client(error_line(&a.id, GATEWAY_ERROR, &message)));
        }
        out
    }

    /// Whether a request the proxy forwarded awaits the server's answer.
    pub fn awaits_server(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The client is gone. Calls the server was running may have run
    /// (the server is stopped next, not asked): they count, cancelled or
    /// not. Calls still awaiting approval never reached it: given back.
    pub fn on_client_closed(&mut self, now: u64) {
        self.settle(now);
        let running: Vec<(String, String)> = self
            .pending
            .drain()
            .filter_map(|(_, p)| match p {
                Pending::Call { key, tool, .. } => Some((key, tool)),
                _ => None,
            })
            .collect();
        for (key, tool) in running {
            self.commit(&key, &tool, now);
        }
        let asked: Vec<String> = self.approvals.drain().map(|(_, a)| a.key).collect();
        for key in asked {
            self.roll_back(&key, now);
        }
    }
}

/// A proxy dropped with answered calls not yet committed commits them:
/// a call that ran is counted whichever way the transport ends.
impl<G: CallGate> Drop for Proxy<G> {
    fn drop(&mut self) {
        if !self.unsettled.is_empty() {
            self.settle(now());
        }
    }
}

// ------------------------------------------------------------------ I/O

/// One input of the gateway cut into lines, as its bytes arrive in chunks
/// of any size: a line over `max` bytes is skipped as it is read (at most
/// `max` bytes of a line are ever held) and reported as
/// [`Line::TooLong`]. What a chunk completes waits in order for
/// [`Lines::take_line`].
#[derive(Debug)]
pub struct Lines {
    max: usize,
    partial: Vec<u8>,
    /// While a line over `max` is skipped: its id, read as it passes.
    skipping: Option<IdScan>,
    ended: bool,
    ready: VecDeque<Line>,
}

/// A line from [`Lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A whole line (its newline removed).
    Text(Vec<u8>),
    /// A line longer than the limit, skipped as it was read: the top-level
    /// id of the message it held, when that could be told ([`IdScan`]).
    TooLong(Option<String>),
}

impl Lines {
    /// No line read yet; lines over `max` bytes are skipped.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            partial: Vec::new(),
            skipping: None,
            ended: false,
            ready: VecDeque::new(),
        }
    }

    /// Takes the next bytes of the input.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, rest) = match memchr::memchr(b'\n', chunk) {
                Some(at) => (&chunk[..at], Some(&chunk[at + 1..])),
                None => (chunk, None),
            };
            match &mut self.skipping {
                Some(scan) => scan.feed(part),
                None if self.partial.len() + part.len() > self.max => {
                    let mut scan = IdScan::new();
                    scan.feed(&self.partial);
                    scan.feed(part);
                    self.skipping = Some(scan);
                    self.partial = Vec::new();
                }
                None => self.partial.extend_from_slice(part),
            }
            let Some(rest) = rest else { break };
            self.end_line();
            chunk = rest;
        }
    }

    /// The input ended: an unterminated last line is a line.
    pub fn finish(&mut self) {
        if self.skipping.is_some() || !self.partial.is_empty() {
            self.end_line();
        }
        self.ended = true;
    }

    /// Whether the input ended ([`Lines::finish`]); lines may still wait.
    pub fn ended(&self) -> bool {
        self.ended
    }

    fn end_line(&mut self) {
        let line = match self.skipping.take() {
            Some(scan) => Line::TooLong(scan.id()),
            None => Line::Text(std::mem::take(&mut self.partial)),
        };
        self.ready.push_back(line);
    }

    /// The oldest line not yet taken.
    pub fn take_line(&mut self) -> Option<Line> {
        self.ready.pop_front()
    }

    /// Whether a line waits to be taken.
    pub fn has_next(&self) -> bool {
        !self.ready.is_empty()
    }
}

/// How [`serve`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The client closed its stdin (or stopped reading) at `at`: the
    /// server's shutdown deadline counts from then.
    ClientClosed {
        /// When the gateway saw it.
        at: Instant,
    },
    /// The server closed its stdout or exited (`why`).
    ServerGone(String),
}

/// The wall clock in milliseconds (the ledger's clock).
fn now() -> u64 {
    crate::hook::now_ms()
}

/// Bytes read from an input at a time.
const READ_CHUNK: usize = 1 << 16;

/// How long the stdio gateway lets an answered call wait for its commit
/// to join the next decision's transaction (one transaction per gated call
/// while calls follow each other, `docs/BENCHMARKS.md`), before it commits
/// it on its own. A crash in between leaves the call reserved, as a crash
/// while the server ran it does (the reservation's expiry gives it back):
/// this widens that window by at most this much.
pub const SETTLE_WAIT: Duration = Duration::from_millis(SETTLE_WAIT_MS);
const SETTLE_WAIT_MS: u64 = 1;

/// How long a commit that failed waits before it is made again by the
/// transport (the next decision makes it at once, and waits for it).
const SETTLE_RETRY: Duration = Duration::from_millis(250);

/// The gateway's pipes, driven from its one thread by `poll(2)`: the
/// client's stdin, the server's stdin (non-blocking, so the proxy never
/// waits on it: what it will not take yet waits in `backlog`) and stdout,
/// and the wake-up pipe of the terminal's answers.
#[cfg(unix)]
struct Pipes<CI, SI, SO> {
    client_in: CI,
    client: Lines,
    /// `None` once closed (the server's stdin closes with it).
    server_in: Option<SI>,
    /// Lines (newline included) for the server, oldest first; `sent`
    /// bytes of the first are written.
    backlog: VecDeque<Vec<u8>>,
    sent: usize,
    server_out: SO,
    server: Lines,
    wake: Option<std::io::PipeReader>,
    buf: Vec<u8>,
}

#[cfg(unix)]
impl<CI: AsFd, SI: AsFd, SO: AsFd> Pipes<CI, SI, SO> {
    /// Writes to the server what its stdin takes now, without waiting. A
    /// server that closed its stdin takes nothing more: its end comes as
    /// the end of its stdout.
    fn flush(&mut self) {
        let Some(server_in) = &self.server_in else {
            self.backlog.clear();
            return;
        };
        while let Some(front) = self.backlog.front() {
            match rustix::io::write(server_in, &front[self.sent..]) {
                Ok(n) => {
                    self.sent += n;
                    if self.sent == front.len() {
                        self.backlog.pop_front();
                        self.sent = 0;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return,
                Err(_) => {
                    self.backlog.clear();
                    self.sent = 0;
                }
            }
        }
    }

    fn send(&mut self, line: String) {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        self.backlog.push_back(bytes);
    }

    /// Waits at most `wait` for the server's output, room in its stdin
    /// while the backlog waits, the client's input (when `take_client`)
    /// or the terminal's wake-up, and reads one chunk from each input that
    /// is ready. `false`: nothing was ready within `wait`.
    fn wait(&mut self, wait: Duration, take_client: bool) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let client = take_client && !self.client.ended() && !self.client.has_next();
        let server = !self.server.ended();
        let room = !self.backlog.is_empty() && self.server_in.is_some();
        let mut fds = Vec::with_capacity(4);
        if server {
            fds.push(PollFd::new(&self.server_out, PollFlags::IN));
        }
        if client {
            fds.push(PollFd::new(&self.client_in, PollFlags::IN));
        }
        if let (true, Some(server_in)) = (room, &self.server_in) {
            fds.push(PollFd::new(server_in, PollFlags::OUT));
        }
        if let Some(wake) = &self.wake {
            fds.push(PollFd::new(wake, PollFlags::IN));
        }
        let timeout = rustix::event::Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => return false,
            Err(_) => return true,
            Ok(_) => {}
        }
        let mut ready = fds.iter().map(|fd| !fd.revents().is_empty());
        let server_ready = server && ready.next() == Some(true);
        let client_ready = client && ready.next() == Some(true);
        let _room = room && ready.next() == Some(true);
        let woken = self.wake.is_some() && ready.next() == Some(true);
        drop(fds);
        if server_ready {
            read_chunk(&self.server_out, &mut self.buf, &mut self.server);
        }
        if client_ready {
            read_chunk(&self.client_in, &mut self.buf, &mut self.client);
        }
        if woken {
            if let Some(wake) = &self.wake {
                let mut drained = [0u8; 64];
                match rustix::io::read(wake, &mut drained) {
                    Ok(1..) | Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    // The terminal's thread is gone (its end closed): no
                    // more answers come, and a closed pipe would wake every
                    // poll at once.
                    Ok(0) | Err(_) => self.wake = None,
                }
            }
        }
        true
    }
}

/// Reads one chunk of `input` into `lines`; its end (or an error reading
/// it) ends it.
#[cfg(unix)]
fn read_chunk(input: impl AsFd, buf: &mut [u8], lines: &mut Lines) {
    match rustix::io::read(input, &mut *buf) {
        Ok(n @ 1..) => lines.feed(&buf[..n]),
        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
        Ok(0) | Err(_) => lines.finish(),
    }
}

/// What [`serve`] takes next.
enum Event {
    Client(Line),
    ClientClosed,
    Server(Line),
    ServerClosed,
}

/// Runs `proxy` between the client (`client_in`, `client_out`) and the
/// server (`server_in`, `server_out`) until one side ends, from this one
/// thread: it waits on the pipes with `poll(2)`, so a message costs the
/// gateway one wake-up each way. `server_exited` is polled a few times a
/// second and tells whether (and how) the server process ended. When the
/// client closes its stdin (MCP's stdio shutdown), the server's stdin is
/// closed and what the server still answers to requests it was running is
/// relayed, through the proxy, until it closes its stdout or exits,
/// nothing is pending any more, or `shutdown` has passed; what is still
/// running then is counted.
///
/// The proxy never waits on the server's stdin (made non-blocking here):
/// what it does not take yet waits in a backlog (at most one client
/// message's worth), and while it waits no client message is taken, but
/// the server's output still is — so a server blocked writing its stdout
/// can always go on, and a client or server that floods only fills its own
/// pipe. At most one chunk of input (64 KiB) and one line ([`MAX_LINE`])
/// per side are held.
#[cfg(unix)]
#[allow(clippy::too_many_arguments)]
pub fn serve<G: CallGate>(
    proxy: &mut Proxy<G>,
    client_in: impl AsFd,
    client_out: &mut dyn Write,
    server_in: impl AsFd,
    server_out: impl AsFd,
    server_exited: &mut dyn FnMut() -> Option<String>,
    shutdown: Duration,
    terminal: Option<std::fs::File>,
) -> Ending {
    if let Err(e) = rustix::io::ioctl_fionbio(&server_in, true) {
        let why = format!("could not be written to without blocking ({e})");
        let _ = write_client(client_out, &proxy.on_server_exit(&why, now()));
        return Ending::ServerGone(why);
    }
    // The person at the terminal, asked when the client cannot be: each
    // answer is queued and wakes the poll through a pipe (non-blocking: a
    // full pipe means the gateway is woken already).
    let (person_tx, person_rx) = sync_channel::<(String, bool)>(CHANNEL_MESSAGES);
    let mut wake = None;
    let terminal = terminal.and_then(|tty| {
        let (reader, writer) = std::io::pipe().ok()?;
        rustix::io::ioctl_fionbio(&writer, true).ok()?;
        wake = Some(reader);
        Terminal::on(tty, move |eid, yes| {
            let _ = person_tx.send((eid, yes));
            let _ = rustix::io::write(&writer, &[1]);
        })
    });
    proxy.ask_on_terminal(terminal.is_some());
    let mut io = Pipes {
        client_in,
        client: Lines::new(MAX_LINE),
        server_in: Some(server_in),
        backlog: VecDeque::new(),
        sent: 0,
        server_out,
        server: Lines::new(MAX_LINE),
        wake,
        buf: vec![0; READ_CHUNK],
    };
    let mut exited_at: Option<(Instant, String)> = None;
    // Whether the last wait ended with nothing to read, and when the
    // server was last asked whether it exited (a `wait4` call): asked when
    // quiet or 50 ms after the last time, not on every message's way
    // through.
    let mut quiet = true;
    let mut asked = Instant::now();
    // Since when answered calls wait for their commit: the next
    // `tools/call` commits them in its decision's transaction, or they are
    // settled once they have waited SETTLE_WAIT.
    let mut unsettled_since: Option<Instant> = None;
    loop {
        match (proxy.unsettled(), unsettled_since) {
            (0, _) => unsettled_since = None,
            (_, None) => unsettled_since = Some(Instant::now()),
            (_, Some(since)) if since.elapsed() >= SETTLE_WAIT => {
                proxy.settle(now());
                // A commit that failed stays; made again after a pause
                // (or by the next decision, which waits for it).
                unsettled_since = (proxy.unsettled() > 0).then(|| Instant::now() + SETTLE_RETRY);
            }
            _ => {}
        }
        let mut person = Vec::new();
        while let Ok((eid, yes)) = person_rx.try_recv() {
            person.extend(proxy.on_person(&eid, yes, now()));
        }
        if proxy.next_deadline().is_some_and(|d| d <= now()) {
            person.extend(proxy.on_tick(now()));
        }
        if !person.is_empty() {
            let outs = to_terminal(proxy, terminal.as_ref(), person);
            for out in &outs {
                if let Out::Server(line) = out {
                    io.send(line.clone());
                }
            }
            if write_client(client_out, &outs).is_err() {
                proxy.on_client_closed(now());
                return Ending::ClientClosed { at: Instant::now() };
            }
        }
        io.flush();
        // The server's output first; the client's only while nothing
        // waits for the server's stdin.
        let event = if let Some(line) = io.server.take_line() {
            Some(Event::Server(line))
        } else if io.server.ended() {
            Some(Event::ServerClosed)
        } else if !io.backlog.is_empty() {
            None
        } else if let Some(line) = io.client.take_line() {
            Some(Event::Client(line))
        } else if io.client.ended() {
            Some(Event::ClientClosed)
        } else {
            None
        };
        let Some(event) = event else {
            // Nothing to do: a server that exited while something still
            // holds its stdout open gets a moment for its last lines.
            match &exited_at {
                None if quiet || asked.elapsed() >= Duration::from_millis(50) => {
                    asked = Instant::now();
                    if let Some(why) = server_exited() {
                        exited_at = Some((Instant::now(), why));
                    }
                }
                None => {}
                Some((at, why)) if at.elapsed() > Duration::from_millis(500) => {
                    let why = why.clone();
                    let outs = proxy.on_server_exit(&why, now());
                    let _ = write_client(client_out, &outs);
                    return Ending::ServerGone(why);
                }
                Some(_) => {}
            }
            let mut wait = proxy
                .next_deadline()
                .map_or(200, |d| d.saturating_sub(now()).clamp(1, 200));
            if let Some(since) = unsettled_since {
                let left = (since + SETTLE_WAIT).saturating_duration_since(Instant::now());
                wait = wait.min(u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
            }
            let take_client = io.backlog.is_empty();
            quiet = !io.wait(Duration::from_millis(wait), take_client);
            continue;
        };
        let outs = match event {
            Event::Client(Line::Text(line)) => proxy.on_client(&line, now()),
            Event::Client(Line::TooLong(_)) => proxy.on_client_too_long(),
            Event::ClientClosed => {
                let at = Instant::now();
                drain(proxy, client_out, &mut io, server_exited, at + shutdown);
                proxy.on_client_closed(now());
                return Ending::ClientClosed { at };
            }
            // Answered first; committed with the next decision, or once it
            // has waited SETTLE_WAIT (the top of the loop).
            Event::Server(Line::Text(line)) => proxy.on_server_unsettled(&line, now()),
            Event::Server(Line::TooLong(id)) => proxy.on_server_too_long(id.as_deref(), now()),
            Event::ServerClosed => {
                // A process that closed its stdout is usually exiting: give
                // it a moment, so the answer can name how it ended.
                let until = Instant::now() + Duration::from_millis(500);
                let why = loop {
                    if let Some(why) = server_exited() {
                        break why;
                    }
                    if Instant::now() >= until {
                        break "closed its stdout".to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
                let outs = proxy.on_server_exit(&why, now());
                if write_client(client_out, &outs).is_err() {
                    return Ending::ClientClosed { at: Instant::now() };
                }
                return Ending::ServerGone(why);
            }
        };
        let mut to_client = Vec::new();
        for out in to_terminal(proxy, terminal.as_ref(), outs) {
            match out {
                Out::Server(line) => io.send(line),
                client => to_client.push(client),
            }
        }
        // What the server can take now goes before the client's answer is
        // written, so neither waits on the other.
        io.flush();
        if write_client(client_out, &to_client).is_err() {
            proxy.on_client_closed(now());
            return Ending::ClientClosed { at: Instant::now() };
        }
    }
}

/// Off Unix the stdio gateway does not run (it waits on its pipes with
/// `poll(2)`): the server is reported gone at once and the gateway ends
/// with status 3 before it reads a message, so nothing reaches the server
/// ungated (fail closed). Not built or tested by this project's CI.
#[cfg(not(unix))]
#[allow(clippy::too_many_arguments)]
pub fn serve<G: CallGate, CI, SI, SO>(
    proxy: &mut Proxy<G>,
    _client_in: CI,
    client_out: &mut dyn Write,
    _server_in: SI,
    _server_out: SO,
    _server_exited: &mut dyn FnMut() -> Option<String>,
    _shutdown: Duration,
    _terminal: Option<std::fs::File>,
) -> Ending {
    let why = "could not be served: the stdio gateway needs poll(2) (Unix only)".to_owned();
    let _ = write_client(client_out, &proxy.on_server_exit(&why, now()));
    Ending::ServerGone(why)
}

/// After the client closed its stdin: writes what the server was still to
/// be sent, closes its stdin, and relays what it still sends (answers to
/// the requests it was running, through the proxy, so a call answered is
/// committed and its result bounded as ever) until it closes its stdout or
/// exits, no request is pending, the client stops reading, or `until`.
/// What the server asks of the client meanwhile is dropped: there is no
/// one to answer it.
#[cfg(unix)]
fn drain<G: CallGate, CI: AsFd, SI: AsFd, SO: AsFd>(
    proxy: &mut Proxy<G>,
    client_out: &mut dyn Write,
    io: &mut Pipes<CI, SI, SO>,
    server_exited: &mut dyn FnMut() -> Option<String>,
    until: Instant,
) {
    loop {
        io.flush();
        if io.backlog.is_empty() {
            // Dropping it closes the server's stdin.
            io.server_in = None;
        }
        if let Some(line) = io.server.take_line() {
            {
                let outs = match line {
                    Line::Text(line) => proxy.on_server_unsettled(&line, now()),
                    Line::TooLong(id) => proxy.on_server_too_long(id.as_deref(), now()),
                };
                let outs: Vec<Out> = outs
                    .into_iter()
                    .filter(|o| matches!(o, Out::Client(_)))
                    .collect();
                let written = write_client(client_out, &outs);
                proxy.settle(now());
                if written.is_err() {
                    return;
                }
            }
            continue;
        }
        if io.server.ended() || (io.server_in.is_none() && !proxy.awaits_server()) {
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        // A server that exited may have left a long answer in its pipe:
        // it is read to the end (or `until`); only 100 ms in which nothing
        // came ends the wait early.
        let came = io.wait(left.min(Duration::from_millis(100)), false);
        if !came && server_exited().is_some() {
            return;
        }
    }
}

/// Hands the terminal its part of `outs` (a question it cannot take is
/// refused at once, through the proxy) and returns the rest.
fn to_terminal<G: CallGate>(
    proxy: &mut Proxy<G>,
    terminal: Option<&Terminal>,
    outs: Vec<Out>,
) -> Vec<Out> {
    let mut rest = Vec::new();
    let mut todo: std::collections::VecDeque<Out> = outs.into();
    while let Some(out) = todo.pop_front() {
        match out {
            Out::Ask(q) => {
                if !terminal.is_some_and(|t| t.ask(q.eid.clone(), &q)) {
                    todo.extend(proxy.refuse_question(
                        &q.eid,
                        "not asked",
                        "the gateway's terminal could not take the question",
                        now(),
                    ));
                }
            }
            Out::Withdraw { eid, why } => {
                if let Some(t) = terminal {
                    t.withdraw(eid, &why);
                }
            }
            other => rest.push(other),
        }
    }
    rest
}

/// Writes the client's part of `outs` in one write (each line and its
/// newline together: a pipe's reader is woken once, and never sees half a
/// line followed by a pause).
fn write_client(client_out: &mut dyn Write, outs: &[Out]) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    for out in outs {
        if let Out::Client(line) = out {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
    }
    if !bytes.is_empty() {
        client_out.write_all(&bytes)?;
        client_out.flush()?;
    }
    Ok(())
}

/// The default session of a command line: `mcp-`, the command's file name
/// (letters, digits, `-`, `_`, `.` kept, at most 32) and 16 hex digits of a
/// 64-bit FNV-1a hash of the whole command line (arguments separated by
/// NUL), so the same server started the same way draws from the same
/// budget.
pub fn default_session(command: &[String]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in command.join("\0").bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let base: String = command
        .first()
        .map(|c| c.rsplit('/').next().unwrap_or(c))
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(32)
        .collect();
    format!("mcp-{base}-{hash:016x}")
}

/// The refusal of a `--ledger` in a folder that does not exist.
fn missing_folder(url: &str, dir: &std::path::Path) -> String {
    format!(
        "--ledger {url}: the folder {} does not exist (create it first: a mistyped path would start an empty budget)",
        dir.display()
    )
}

/// Opens the ledger named by `--ledger`: `redis://…` (or `rediss://…`
/// where the client supports it), `sqlite:FILE`, or a state folder; a
/// SQLite ledger with `durability`. A Redis ledger with any durability but
/// the default is refused: how durable Redis is, is the server's setting.
pub fn open_ledger(
    url: Option<&str>,
    wait: Duration,
    durability: Durability,
) -> Result<Backend, String> {
    let shown = |e: StoreError| e.to_string();
    let parsed = LedgerUrl::parse(url, None)?;
    let shown_url = url.unwrap_or_default();
    match parsed {
        LedgerUrl::Redis(url) => {
            if durability != Durability::Full {
                return Err(format!(
                    "--durability {}: applies to a SQLite ledger; a Redis ledger ({url}) is as durable as the server's appendfsync setting",
                    durability.synchronous().to_lowercase()
                ));
            }
            crate::ledger_redis::RedisStore::open(&url, wait)
                .map(Backend::Redis)
                .map_err(shown)
        }
        LedgerUrl::SqliteFile(file) => {
            if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
                if !dir.is_dir() {
                    return Err(missing_folder(shown_url, dir));
                }
            }
            Store::open_file_with(&file, wait, durability)
                .map(Backend::Sqlite)
                .map_err(shown)
        }
        LedgerUrl::StateDir(dir) => {
            // The state folder itself may be new; the folder it is in must
            // exist (a mistyped path never starts an empty budget).
            if url.is_some() {
                if let Some(parent) = dir.parent().filter(|d| !d.as_os_str().is_empty()) {
                    if !parent.is_dir() {
                        return Err(missing_folder(shown_url, parent));
                    }
                }
            }
            Store::open_with(&dir, wait, durability)
                .map(Backend::Sqlite)
                .map_err(shown)
        }
    }
}

/// The terminal to ask approval at (`--terminal auto`: the controlling
/// terminal, when the gateway has one).
pub fn terminal(args: &McpArgs) -> Option<std::fs::File> {
    match args.terminal {
        TerminalUse::Auto => crate::mcp_terminal::controlling(),
        TerminalUse::Never => None,
    }
}

/// Kills the server and its process group (what it started), and reaps it.
fn kill(child: &mut Child) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn describe_exit(child: &mut Child) -> Option<String> {
    let status = child.try_wait().ok()??;
    Some(match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => {
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                match status.signal() {
                    Some(sig) => format!("was killed by signal {sig}"),
                    None => "exited".to_owned(),
                }
            }
            #[cfg(not(unix))]
            {
                "exited".to_owned()
            }
        }
    })
}

/// `budgetgate mcp`: exit 0 when the client closed stdin (the server was
/// stopped), 2 when the gateway cannot start (budget, ledger, command),
/// [`EXIT_SERVER_GONE`] when the server exited or crashed first.
pub fn command(args: &McpArgs) -> ExitCode {
    let fail = |what: String| {
        eprintln!(
            "budgetgate mcp: {}; not started (fail closed)",
            crate::term::terminal_safe(&what)
        );
        ExitCode::from(2)
    };
    if let Some(url) = &args.upstream {
        return crate::mcp_http::command(args, url);
    }
    let Some(program) = args.command.first() else {
        return fail("no MCP server command (after --) and no --upstream".into());
    };
    let Setup {
        gate,
        max_result_bytes,
    } = match setup(args, default_session(&args.command)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut server = Command::new(program);
    server
        .args(&args.command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        server.process_group(0);
    }
    let mut child = match server.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("starting {program:?}: {e}")),
    };
    let (Some(server_in), Some(server_out)) = (child.stdin.take(), child.stdout.take()) else {
        kill(&mut child);
        return fail("the server's pipes could not be opened".into());
    };
    let connection = format!("{}-{}", std::process::id(), now());
    let mut proxy = Proxy::new(
        gate,
        connection,
        max_result_bytes,
        args.approval_timeout * 1000,
    );
    let stdout = std::io::stdout();
    let mut client_out = stdout.lock();
    let ending = serve(
        &mut proxy,
        std::io::stdin(),
        &mut client_out,
        server_in,
        server_out,
        &mut || describe_exit(&mut child),
        Duration::from_millis(args.shutdown_ms),
        terminal(args),
    );
    match ending {
        Ending::ClientClosed { at } => {
            // The server's stdin is closed by now (its writer ended with the
            // proxy's channel); it has the deadline from the client's close
            // to exit, then it is killed.
            let deadline = at + Duration::from_millis(args.shutdown_ms);
            while Instant::now() < deadline {
                if describe_exit(&mut child).is_some() {
                    // What it started and left behind goes with it.
                    kill(&mut child);
                    return ExitCode::SUCCESS;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kill(&mut child);
            eprintln!(
                "budgetgate mcp: the server did not exit within {} ms of the client closing stdin; killed",
                args.shutdown_ms
            );
            ExitCode::SUCCESS
        }
        Ending::ServerGone(why) => {
            let why = describe_exit(&mut child).unwrap_or(why);
            kill(&mut child);
            eprintln!(
                "budgetgate mcp: the MCP server {why}; the gateway ends (exit {EXIT_SERVER_GONE})"
            );
            ExitCode::from(EXIT_SERVER_GONE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    /// What the gateway wrote to the client, one JSON value a line.
    fn json_lines(out: &[u8]) -> Vec<Value> {
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("JSON"))
            .collect()
    }

    struct Setup {
        dir: tempfile::TempDir,
    }

    /// A budget that asks before `send_mail`.
    const SEND_MAIL_ASKS: &str =
        "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"send_mail\"]\n";

    impl Setup {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().expect("temp dir"),
            }
        }
        fn gate(&self, budget: &str, ttl_ms: u64) -> LedgerGate {
            let store = Store::open(self.dir.path(), Duration::from_secs(5)).expect("ledger");
            let budget = crate::replay::budget::parse_budget(budget).expect("budget");
            LedgerGate::new(store, budget, "s".into(), ttl_ms)
        }
        /// A gate that waits at most `wait_ms` for the ledger's lock.
        fn gate_with_timeout(&self, budget: &str, ttl_ms: u64, wait_ms: u64) -> LedgerGate {
            let store =
                Store::open(self.dir.path(), Duration::from_millis(wait_ms)).expect("ledger");
            let budget = crate::replay::budget::parse_budget(budget).expect("budget");
            LedgerGate::new(store, budget, "s".into(), ttl_ms)
        }
        /// Another process's write transaction on the ledger, held while
        /// the returned connection lives.
        fn lock_ledger(&self) -> rusqlite::Connection {
            let c = rusqlite::Connection::open(self.dir.path().join(crate::ledger::FILE_NAME))
                .expect("open");
            c.execute_batch("BEGIN IMMEDIATE").expect("lock");
            c
        }
        fn proxy(&self, budget: &str) -> Proxy<LedgerGate> {
            let gate = self.gate(budget, 60_000);
            let max = gate.budget.max_result_bytes;
            Proxy::new(gate, "c1".into(), max, 1_000)
        }
        /// A proxy whose budget asks before `send_mail`, for a client
        /// that declared the elicitation capability.
        fn eliciting_proxy(&self) -> Proxy<LedgerGate> {
            let mut p = self.proxy(SEND_MAIL_ASKS);
            p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
            p
        }
        /// A proxy whose budget asks before `send_mail`, for a client
        /// without elicitation: the gateway's terminal is asked.
        fn terminal_proxy(&self) -> Proxy<LedgerGate> {
            let mut p = self.proxy(SEND_MAIL_ASKS);
            p.ask_on_terminal(true);
            p.on_client(
                br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
                T0,
            );
            p
        }
        fn used(&self) -> (u64, u64) {
            let store = Store::open(self.dir.path(), Duration::from_secs(5)).expect("ledger");
            let l = store.list().expect("list");
            let Some(first) = l.first() else {
                return (0, 0);
            };
            let ledger = first.ledger.as_ref().expect("record");
            (
                ledger.used(budgetgate_core::budget::Limit::ToolCalls),
                ledger.reserved(budgetgate_core::budget::Limit::ToolCalls),
            )
        }
    }

    const T0: u64 = 1_000_000;
    const BUDGET: &str = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";

    fn call(id: u64, tool: &str, args: Value) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": args}})
        .to_string()
        .into_bytes()
    }

    fn answer(id: u64, result: Value) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "result": result})
            .to_string()
            .into_bytes()
    }

    fn client(outs: &[Out]) -> Vec<Value> {
        outs.iter()
            .filter_map(|o| match o {
                Out::Client(l) => Some(serde_json::from_str(l).expect("JSON")),
                _ => None,
            })
            .collect()
    }

    fn server(outs: &[Out]) -> Vec<&str> {
        outs.iter()
            .filter_map(|o| match o {
                Out::Server(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn what_is_not_gated_passes_through_unchanged_both_ways() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        for line in [
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc": "2.0", "id": "p", "method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"x:/é"}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"no/such/method","extra":[1,2.50]}"#,
            r#"{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}"#,
            r#"[{"jsonrpc":"2.0","id":11,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]"#,
        ] {
            let outs = p.on_client(line.as_bytes(), T0);
            assert_eq!(outs, [Out::Server(line.into())], "{line}");
        }
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":"srv-2","method":"sampling/createMessage","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"srv-3","method":"elicitation/create","params":{}}"#,
            r#"{"result":{},"jsonrpc":"2.0","id":"p"}"#,
            r#"[{"jsonrpc":"2.0","id":11,"result":{}}]"#,
        ] {
            let outs = p.on_server(line.as_bytes(), T0);
            assert_eq!(outs, [Out::Client(line.into())], "{line}");
        }
        assert_eq!(p.in_flight(), 3, "initialize, 9 and 10 are still awaited");
    }

    #[test]
    fn unreadable_lines_are_answered_and_never_forwarded() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        for (line, code, id) in [
            ("garbage", PARSE_ERROR, Value::Null),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
                PARSE_ERROR,
                Value::Null,
            ),
            (r#"{"id":2,"method":"ping"}"#, INVALID_REQUEST, json!(2)),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(3),
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"id":5,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0","id":6}"#, INVALID_REQUEST, json!(6)),
            // An id beyond a 64-bit float cannot be read back: null.
            (
                r#"{"jsonrpc":"1.0","id":8e888,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"id":-1e400,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":0.5e8888}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (r#"[]"#, INVALID_REQUEST, Value::Null),
            ("42", INVALID_REQUEST, Value::Null),
        ] {
            let outs = p.on_client(line.as_bytes(), T0);
            assert!(server(&outs).is_empty(), "{line}");
            let got = client(&outs);
            assert_eq!(got.len(), 1, "{line}");
            assert_eq!(got[0]["error"]["code"], code, "{line}: {}", got[0]);
            assert_eq!(got[0]["id"], id, "{line}");
        }
        // A request with such an id passes through as it is; one reusing
        // it while it is awaited is refused, answered with id null.
        let ping = br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#;
        assert_eq!(server(&p.on_client(ping, T0)).len(), 1);
        let outs = p.on_client(ping, T0);
        assert!(server(&outs).is_empty());
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        assert_eq!(client(&outs)[0]["id"], Value::Null);
        let outs = p.on_client(b"\xff\xfe{}", T0);
        assert_eq!(client(&outs)[0]["error"]["code"], PARSE_ERROR);
        let outs = p.on_client_too_long();
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        assert!(p.on_client(b"  \r\n", T0).is_empty());
    }

    /// `SPEC E` (fail closed): a `tools/call` holding a key twice, at any
    /// depth, is refused `-32600` naming the key and never forwarded — the
    /// gate would decide one reading (`Bash`) and the server could run the
    /// other (`echo`); nothing is reserved.
    #[test]
    fn a_call_repeating_a_key_is_refused_and_never_forwarded() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        for (line, key) in [
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","name":"Bash","arguments":{}}}"#,
                "`name`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x1","m":"same"}}}"#,
                "`m`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"a":[{"k":1,"k":2}]}}}"#,
                "`k`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"},"_x":1,"_x":2}"#,
                "`_x`",
            ),
        ] {
            let outs = p.on_client(line.as_bytes(), T0);
            assert!(server(&outs).is_empty(), "{line}");
            let got = client(&outs);
            assert_eq!(got.len(), 1, "{line}");
            assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{line}");
            let message = got[0]["error"]["message"].as_str().unwrap_or("");
            assert!(
                message.contains(&format!("duplicate key {key}")),
                "{line}: {message}"
            );
            assert!(!p.awaits("8"), "{line}");
        }
        // In a batch, the repeated call alone is refused.
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","name":"Bash"}}]"#;
        let outs = p.on_client(batch.as_bytes(), T0);
        assert_eq!(
            server(&outs),
            [r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#]
        );
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        // The same call without the repeat is let through.
        let outs = p.on_client(&call(9, "echo", json!({"m": "x1"})), T0);
        assert_eq!(server(&outs).len(), 1);
        assert_eq!(s.used(), (0, 1), "only the well-formed call is reserved");
    }

    /// `SPEC E` (fail closed): the other client messages the gateway reads
    /// to decide — `initialize` (the elicitation capability),
    /// `notifications/cancelled` (which reservation to give back) and the
    /// answer to its approval question — are refused, not acted on and not
    /// forwarded, when they repeat a key.
    #[test]
    fn messages_the_gateway_reads_are_refused_when_they_repeat_a_key() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"capabilities":{"elicitation":{},"elicitation":null}}}"#;
        let outs = p.on_client(init.as_bytes(), T0);
        assert!(server(&outs).is_empty());
        assert_eq!(client(&outs)[0]["id"], "i");
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        assert!(!p.elicitation);
        // A call in flight keeps its reservation when the cancel naming it
        // is ambiguous (which request would the server cancel?).
        assert_eq!(
            server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
            1
        );
        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"requestId":1}}"#;
        let outs = p.on_client(cancel.as_bytes(), T0);
        assert!(server(&outs).is_empty());
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        assert_eq!(s.used(), (0, 1));
        // An approval answer saying decline and accept at once refuses.
        let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"Bash\"]\n";
        let s = Setup::new();
        let mut p = s.proxy(budget);
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#;
        assert_eq!(server(&p.on_client(init, T0)).len(), 1);
        let outs = p.on_client(&call(3, "Bash", json!({"command": "ls"})), T0);
        let ask = client(&outs);
        assert_eq!(ask[0]["method"], "elicitation/create", "{ask:?}");
        let eid = ask[0]["id"].to_string();
        let reply = format!(
            r#"{{"jsonrpc":"2.0","id":{eid},"result":{{"action":"decline","action":"accept"}}}}"#
        );
        let outs = p.on_client(reply.as_bytes(), T0);
        assert!(
            server(&outs).is_empty(),
            "the call never reaches the server"
        );
        let got = client(&outs);
        assert_eq!(got[0]["id"], 3);
        assert_eq!(got[0]["result"]["isError"], true);
        assert_eq!(
            got[0]["result"]["_meta"]["budgetgate"]["reason"],
            "approval-refused"
        );
    }

    /// A `tools/call` that is not readable is answered `-32602` naming
    /// what is wrong — a number out of range, a lone surrogate, `params`
    /// that is not an object, a `name` that is not a string — and never
    /// forwarded (`SPEC E`, fail closed).
    #[test]
    fn unreadable_calls_are_answered_with_the_rule_they_break() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        for (params, says) in [
            (
                r#"{"name":"echo","arguments":{"m":1e400}}"#,
                "number out of range",
            ),
            (r#"{"name":"echo","arguments":{"m":"\ud800"}}"#, "surrogate"),
            (r#""x""#, "`params` must be an object, not a string"),
            (r#"[1]"#, "`params` must be an object, not an array"),
            (r#"{"name":7}"#, "`name` must be a string, not a number"),
            (r#"{"arguments":{}}"#, "needs a string `name`"),
            (
                r#"{"name":"echo","arguments":[]}"#,
                "`arguments` must be an object",
            ),
        ] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{params}}}"#);
            let outs = p.on_client(line.as_bytes(), T0);
            assert!(server(&outs).is_empty(), "{line}");
            let got = client(&outs);
            assert_eq!(got[0]["id"], 4, "{line}");
            assert_eq!(got[0]["error"]["code"], INVALID_PARAMS, "{line}");
            let message = got[0]["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains(says), "{line}: {message}");
        }
        let line = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#;
        let got = client(&p.on_client(line.as_bytes(), T0));
        assert!(got[0]["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("needs `params`"));
        assert_eq!(p.in_flight(), 0);
    }

    /// A `tools/call` whose id is `null` is answered `-32600` (id `null`)
    /// instead of being dropped unanswered; one whose id is not a string or
    /// an integer (an object, a float, a boolean, an array, a number out
    /// of range) likewise, never forwarded (`SPEC E`, every call answered);
    /// a number JSON-RPC reads (a float, an integer past 64 bits) is
    /// answered with that id, as sent, so the client can match the answer
    /// (found by the `mcp_lines` fuzz target's id rule).
    #[test]
    fn calls_with_a_null_or_non_integer_id_are_answered_and_never_forwarded() {
        let s = Setup::new();
        let mut p = s.proxy("[budget]\nmax_seconds = 3600\n");
        for (id, says) in [
            ("null", "not null"),
            (r#"{"a":1}"#, "not an object"),
            ("1.5", "not a number outside the 64-bit integers"),
            ("1e3", "(a fraction, an exponent or too large)"),
            ("18446744073709551616", "outside the 64-bit integers"),
            ("true", "not a boolean"),
            ("[1]", "not an array"),
            ("1e400", "number out of range"),
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{}}}}}}"#
            );
            let outs = p.on_client(line.as_bytes(), T0);
            assert!(server(&outs).is_empty(), "{line}");
            let got = client(&outs);
            assert_eq!(got.len(), 1, "{line}");
            let sent: Value = serde_json::from_str(id).unwrap_or(Value::Null);
            let kept = if sent.is_number() { sent } else { Value::Null };
            assert_eq!(got[0]["id"], kept, "{line}");
            assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{line}");
            let message = got[0]["error"]["message"].as_str().unwrap_or("");
            assert!(
                message.contains("a string or an integer"),
                "{line}: {message}"
            );
            assert!(message.contains(says), "{line}: {message}");
        }
        assert_eq!(p.in_flight(), 0);
        // String and integer ids are let through, up to 2^53 (past it a
        // JavaScript server could not tell two ids apart: issue 29's
        // hostile trial; refused in a_call_may_not_take_the_id_of_…).
        for (n, id) in [r#""a""#, "-3", "9007199254740992"].iter().enumerate() {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo{n}"}}}}"#
            );
            assert_eq!(server(&p.on_client(line.as_bytes(), T0)).len(), 1, "{line}");
            assert!(p.awaits(id), "{id}");
        }
    }

    /// `SPEC E` (fail closed), results: a call's result whose size cannot
    /// be told (a key given twice, a number out of range) is withheld, the
    /// call counted; a `tools/list` answer that cannot be read is withheld
    /// (which tools it lists cannot be told).
    #[test]
    fn unreadable_results_are_withheld() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        assert_eq!(
            server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
            1
        );
        let result = br#"{"jsonrpc":"2.0","id":1,"result":{"content":"big","content":"x"}}"#;
        let got = client(&p.on_server(result, T0));
        assert_eq!(got[0]["id"], 1);
        assert_eq!(got[0]["result"]["isError"], true);
        let text = got[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        assert!(text.contains("duplicate key `content`"), "{text}");
        assert_eq!(s.used(), (1, 0), "it ran: counted");
        let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        assert_eq!(server(&p.on_client(list, T0)).len(), 1);
        let answer =
            br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"Bash","name":"echo"}]}}"#;
        let got = client(&p.on_server(answer, T0));
        assert_eq!(got[0]["error"]["code"], GATEWAY_ERROR, "{got:?}");
    }

    /// `SPEC E` (fail closed), `SPEC C` (every attempt counted): a request
    /// (not a `tools/call`, which the gate refuses `duplicate-call-id`)
    /// reusing the id of a call still in flight is refused `-32600` and not
    /// forwarded, so the call's reservation is still committed when the
    /// server answers (before, the second request replaced the call's entry
    /// and the attempt was never counted; found while writing the
    /// `mcp_lines` fuzz target, whose reservation check fails on it).
    #[test]
    fn a_request_reusing_the_id_of_a_call_in_flight_is_refused() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        assert_eq!(
            server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
            1
        );
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        ] {
            let outs = p.on_client(line.as_bytes(), T0);
            assert!(server(&outs).is_empty(), "forwarded {line}");
            let got = client(&outs);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{}", got[0]);
            assert_eq!(got[0]["id"], 1);
        }
        // A call reusing it is the gate's duplicate, as before.
        let outs = p.on_client(&call(1, "other", json!({"a": 1})), T0);
        assert!(server(&outs).is_empty());
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "duplicate-call-id"
        );
        assert_eq!(s.used(), (0, 1), "the first call is still reserved");
        p.on_server(&answer(1, json!({"content": []})), T0);
        assert_eq!(s.used(), (1, 0), "the call that ran is counted");
        // Once answered, the id may be used again.
        let outs = p.on_client(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, T0);
        assert_eq!(server(&outs).len(), 1);
    }

    #[test]
    fn calls_are_reserved_then_committed_or_rolled_back() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        let outs = p.on_client(&call(1, "echo", json!({"m": 1})), T0);
        assert_eq!(server(&outs).len(), 1);
        assert_eq!(s.used(), (0, 1), "reserved while in flight");
        let outs = p.on_client(&call(2, "echo", json!({"m": 2})), T0);
        assert_eq!(server(&outs).len(), 1);
        // Both attempts are held: a third is refused before any answer.
        let outs = p.on_client(&call(3, "echo", json!({"m": 3})), T0);
        let refused = &client(&outs)[0];
        assert_eq!(refused["id"], 3);
        assert_eq!(refused["result"]["isError"], true);
        let meta = &refused["result"]["_meta"]["budgetgate"];
        assert_eq!(meta["reason"], "tool-budget");
        assert_eq!(
            (meta["used"].clone(), meta["max"].clone()),
            (json!(2), json!(2))
        );
        let text = refused["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("budgetgate refused this call (tool-budget): 2 of 2 tool calls used."),
            "{text}"
        );
        // A result commits, a JSON-RPC error rolls back.
        let ok = answer(1, json!({"content": [{"type": "text", "text": "1"}]}));
        assert_eq!(
            p.on_server(&ok, T0),
            [Out::Client(String::from_utf8(ok.clone()).unwrap())]
        );
        let err = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}"#;
        assert_eq!(client(&p.on_server(err, T0))[0]["error"]["code"], -32602);
        assert_eq!(s.used(), (1, 0));
        // The rolled-back attempt is there again.
        let outs = p.on_client(&call(4, "echo", json!({"m": 4})), T0);
        assert_eq!(server(&outs).len(), 1);
        // A request id used before is refused, whatever was decided then.
        let outs = p.on_client(&call(3, "echo", json!({"m": 5})), T0);
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "duplicate-call-id"
        );
        // Ids are compared as JSON values, not as spelled.
        let failed = br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#;
        p.on_server(failed, T0);
        let spelled = br#"{"jsonrpc":"2.0","id":"\u0061","method":"tools/call","params":{"name":"echo","arguments":{"m":6}}}"#;
        assert_eq!(server(&p.on_client(spelled, T0)).len(), 1);
        let again = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"m":7}}}"#;
        let refused = &client(&p.on_client(again, T0))[0]["result"];
        assert_eq!(
            refused["_meta"]["budgetgate"]["reason"],
            "duplicate-call-id"
        );
        // Said to be unique where it is: on the connection.
        let text = refused["content"][0]["text"].as_str().unwrap_or("");
        assert!(
            text.contains("the request id \"a\" was already used on this connection"),
            "{text}"
        );
        let answered = br#"{"jsonrpc":"2.0","id":"a","result":{"content":[]}}"#;
        assert_eq!(client(&p.on_server(answered, T0)).len(), 1);
        assert_eq!(
            s.used(),
            (2, 0),
            "the answer to the id spelled another way committed it"
        );
    }

    /// SPEC E (reserve, then commit): the stdio transport writes an
    /// answer before its commit; the call stays reserved (counted) until
    /// the commit, which the next decision (in its own transaction), any
    /// event but a client's message, an explicit settle or the proxy's end
    /// makes, and never after a later decision.
    #[test]
    fn an_answer_written_first_is_committed_before_anything_else_happens() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "echo", json!({"m": 1})), T0);
        let ok = answer(1, json!({"content": []}));
        assert_eq!(
            p.on_server_unsettled(&ok, T0),
            [Out::Client(String::from_utf8(ok.clone()).unwrap())]
        );
        assert_eq!(s.used(), (0, 1), "still reserved: counted, not committed");
        p.settle(T0);
        assert_eq!(s.used(), (1, 0), "settled");
        p.settle(T0);
        assert_eq!(s.used(), (1, 0), "settled once");
        // A message passed through leaves it reserved; the next decision
        // commits it first, in its own transaction, and sees the commit.
        p.on_client(&call(2, "echo", json!({"m": 2})), T0);
        p.on_server_unsettled(&answer(2, json!({"content": []})), T0);
        assert_eq!(s.used(), (1, 1));
        let ping = br#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
        assert_eq!(server(&p.on_client(ping, T0)).len(), 1);
        assert_eq!(
            (s.used(), p.unsettled()),
            ((1, 1), 1),
            "a ping settles nothing"
        );
        let outs = p.on_client(&call(3, "echo", json!({"m": 3})), T0);
        assert_eq!(p.unsettled(), 0);
        assert_eq!(s.used(), (2, 0), "committed before call 3 was decided");
        let meta = &client(&outs)[0]["result"]["_meta"]["budgetgate"];
        assert_eq!(
            (meta["reason"].clone(), meta["used"].clone()),
            (json!("tool-budget"), json!(2))
        );
        // A proxy that ends with an answer unsettled commits it.
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "echo", json!({"m": 1})), T0);
        p.on_server_unsettled(&answer(1, json!({"content": []})), T0);
        drop(p);
        assert_eq!(s.used(), (1, 0), "committed when the proxy was dropped");
        // So do the transport's other events: the server's exit, the
        // client's close, the clock.
        for end in 0..3 {
            let s = Setup::new();
            let mut p = s.proxy(BUDGET);
            p.on_client(&call(1, "echo", json!({"m": 1})), T0);
            p.on_server_unsettled(&answer(1, json!({"content": []})), T0);
            match end {
                0 => drop(p.on_server_exit("exited", T0)),
                1 => p.on_client_closed(T0),
                _ => drop(p.on_tick(T0)),
            }
            assert_eq!(s.used(), (1, 0), "event {end}");
        }
    }

    #[test]
    fn wall_time_since_the_sessions_first_call_ends_every_call() {
        let s = Setup::new();
        let mut p = s.proxy("[budget]\nmax_seconds = 1\n");
        assert_eq!(
            server(&p.on_client(&call(1, "t", json!({"i": 1})), T0)).len(),
            1
        );
        assert_eq!(
            server(&p.on_client(&call(2, "t", json!({"i": 2})), T0 + 999)).len(),
            1
        );
        let outs = p.on_client(&call(3, "t", json!({"i": 3})), T0 + 1_000);
        let refused = &client(&outs)[0]["result"];
        assert_eq!(refused["_meta"]["budgetgate"]["reason"], "budget-exhausted");
        assert_eq!(refused["_meta"]["budgetgate"]["limit"], "time_ms");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("session time_ms budget exhausted (1000 of 1000 ms)"),
            "{text}"
        );
        assert!(text.ends_with("do not retry."), "{text}");
    }

    /// Issue 29, reproduction 1: a cancel right after the call gave the
    /// call back while the server ran it. A cancelled call stays reserved;
    /// its result counts and is not passed on (the client ignores it),
    /// whatever its size; only the server's JSON-RPC error gives it back.
    #[test]
    fn a_cancelled_call_still_counts_when_it_ran_and_its_result_is_not_passed_on() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 6\nmax_result_bytes = 4096\n[tools]\nmax_calls = { \"get-sum\" = 3 }\n";
        let mut p = s.proxy(budget);
        let cancel = |n: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{n},"reason":"user"}}}}"#
            )
        };
        // Each call and its cancel in one write, as the trial sent them.
        let mut ran = 0;
        for n in 1..=20u64 {
            let mut both = call(n, "get-sum", json!({"a": n, "b": 1}));
            both.push(b'\n');
            both.extend(cancel(n).as_bytes());
            let mut outs = Vec::new();
            for line in both.split(|b| *b == b'\n') {
                outs.extend(p.on_client(line, T0 + n));
            }
            if server(&outs).len() == 2 {
                ran += 1;
                // The server ignores the cancel and answers, 20 KB.
                let big = answer(
                    n,
                    json!({"content": [{"type": "text", "text": "x".repeat(20_000)}]}),
                );
                assert!(
                    p.on_server(&big, T0 + n).is_empty(),
                    "a cancelled call's result is not passed on"
                );
            } else {
                let refused = &client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"];
                assert_eq!(refused, "tool-cap", "call {n}");
            }
        }
        assert_eq!(ran, 3, "the per-tool cap holds");
        assert_eq!(s.used(), (3, 0));
        // A cancel the server answers with a JSON-RPC error: did not run.
        p.on_client(&call(30, "other", json!({})), T0 + 100);
        p.on_client(cancel(30).as_bytes(), T0 + 100);
        assert_eq!(s.used(), (3, 1));
        let error = br#"{"jsonrpc":"2.0","id":30,"error":{"code":-32800,"message":"cancelled"}}"#;
        assert!(p.on_server(error, T0 + 101).is_empty());
        assert_eq!(s.used(), (3, 0), "given back on the server's error");
        // A cancel whose call is never answered: counted when the gateway ends.
        p.on_client(&call(31, "other", json!({})), T0 + 200);
        p.on_client(cancel(31).as_bytes(), T0 + 200);
        p.on_client_closed(T0 + 300);
        assert_eq!(s.used(), (4, 0));
    }

    #[test]
    fn approval_asks_the_client_by_elicitation_when_it_can() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"send_mail\"]\n";
        let mut p = s.proxy(budget);
        // Without the capability: refused, and the reason says why.
        p.on_client(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
            T0,
        );
        let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
        let text = client(&outs)[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            text.contains("did not declare the elicitation capability"),
            "{text}"
        );
        assert!(server(&outs).is_empty());
        // With it: accept forwards the call unchanged, decline refuses it.
        p.on_client(br#"{"jsonrpc":"2.0","id":"i2","method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
        let line = call(2, "send_mail", json!({"to": "b"}));
        let outs = p.on_client(&line, T0);
        assert!(server(&outs).is_empty());
        let ask = &client(&outs)[0];
        assert_eq!(ask["method"], "elicitation/create");
        assert!(ask["params"]["message"]
            .as_str()
            .unwrap()
            .contains("send_mail"));
        let eid = ask["id"].clone();
        let accept =
            json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}});
        let outs = p.on_client(accept.to_string().as_bytes(), T0);
        assert_eq!(outs, [Out::Server(String::from_utf8(line).unwrap())]);
        let outs = p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
        let eid = client(&outs)[0]["id"].clone();
        let decline = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "decline"}});
        let outs = p.on_client(decline.to_string().as_bytes(), T0);
        let refused = &client(&outs)[0];
        assert_eq!(refused["id"], 3);
        assert_eq!(
            refused["result"]["_meta"]["budgetgate"]["reason"],
            "approval-refused"
        );
        // A call cancelled while its approval is asked: dropped, the question
        // withdrawn, nothing sent to the server.
        p.on_client(&call(5, "send_mail", json!({"to": "e"})), T0);
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
        let outs = p.on_client(cancel, T0);
        assert!(server(&outs).is_empty());
        assert_eq!(client(&outs)[0]["method"], "notifications/cancelled");
        assert!(p.asking().is_empty());
        // No answer within the deadline: refused, and the request withdrawn.
        p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0);
        assert_eq!(p.next_deadline(), Some(T0 + 1_000));
        assert!(p.on_tick(T0 + 999).is_empty());
        let outs = client(&p.on_tick(T0 + 1_000));
        assert_eq!(outs[0]["method"], "notifications/cancelled");
        assert_eq!(outs[1]["id"], 4);
        assert!(outs[1]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no answer came within 1 s"));
        // The late answer to that withdrawn question is the gateway's own:
        // never forwarded, and it changes nothing.
        let late = json!({"jsonrpc": "2.0", "id": outs[0]["params"]["requestId"], "result": {"action": "accept"}});
        assert!(p
            .on_client(late.to_string().as_bytes(), T0 + 1_001)
            .is_empty());
        // An answer with an id the gateway never asked is the server's.
        for id in [
            json!("budgetgate-approval-99"),
            json!("budgetgate-approval-+1"),
            json!(1),
        ] {
            let other = json!({"jsonrpc": "2.0", "id": id, "result": {}});
            let outs = p.on_client(other.to_string().as_bytes(), T0 + 1_001);
            assert_eq!(server(&outs).len(), 1, "{id}");
        }
    }

    /// SPEC E (reserve, then commit): the calls that ran are committed
    /// whatever becomes of the decision they were to share a transaction
    /// with: a decision that fails (here a call nested too deeply to
    /// compare, which no client line can bring) is refused, and the calls
    /// before it still count, once.
    #[test]
    fn commits_made_with_a_decision_stand_when_the_decision_fails() {
        let s = Setup::new();
        let mut g = s.gate(BUDGET, 60_000);
        let input = json!({"m": 1});
        let plain = ToolCall {
            name: "echo",
            input: &input,
            call_id: "k1",
            shown_id: "the id k1",
            id_scope: "on this connection",
        };
        assert_eq!(g.decide(&plain, T0), Ok(Verdict::Run));
        assert_eq!(s.used(), (0, 1));
        let mut deep = json!(0);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let deep = json!({ "d": deep });
        let too_deep = ToolCall {
            input: &deep,
            call_id: "k2",
            shown_id: "the id k2",
            ..plain
        };
        let ran = [("k1".to_owned(), "echo".to_owned())];
        let (failed, verdict) = g.commit_then_decide(&ran, &too_deep, T0);
        assert!(failed.is_empty(), "{failed:?}");
        assert!(verdict.unwrap_err().contains("nested too deeply"));
        assert_eq!(s.used(), (1, 0), "k1 committed once, k2 not reserved");
        // Folded with a decision that stands: one transaction, both kept.
        let again = ToolCall {
            call_id: "k3",
            shown_id: "the id k3",
            ..plain
        };
        assert_eq!(g.decide(&again, T0), Ok(Verdict::Run));
        let ran = [("k3".to_owned(), "echo".to_owned())];
        let next = ToolCall {
            call_id: "k4",
            shown_id: "the id k4",
            input: &json!({"m": 2}),
            ..plain
        };
        let (failed, verdict) = g.commit_then_decide(&ran, &next, T0);
        assert!(failed.is_empty());
        assert!(
            matches!(verdict, Ok(Verdict::Refuse(ref r)) if r.reason == "tool-budget"),
            "{verdict:?}"
        );
        assert_eq!(s.used(), (2, 0), "k3 committed before k4 was decided");
    }

    /// SPEC E, the ledger's log: a call whose approval is refused, by the
    /// person, by the deadline, or because no one can be asked, counts as
    /// an attempt and is logged as a refusal with the answer, so that
    /// `budgetgate ledger show` lists it beside the budget's refusals.
    #[test]
    fn every_refused_approval_is_counted_and_logged_with_its_answer() {
        let s = Setup::new();
        let mut p = s.eliciting_proxy();
        let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
        let eid = client(&outs)[0]["id"].clone();
        let decline = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "decline"}});
        p.on_client(decline.to_string().as_bytes(), T0);
        p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0);
        p.on_tick(T0 + 1_000);
        let mut blind = s.proxy(SEND_MAIL_ASKS);
        blind.on_client(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
            T0,
        );
        blind.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
        assert_eq!(s.used(), (3, 0), "each refused approval counts once");
        let store = Store::open(s.dir.path(), Duration::from_secs(5)).expect("ledger");
        let log: Vec<(String, String)> = store
            .log()
            .expect("log")
            .into_iter()
            .map(|(_, _, action, detail)| (action, detail))
            .collect();
        assert_eq!(log.len(), 3, "{log:?}");
        for ((action, detail), (key, answer)) in log.iter().zip([
            ("mcp/c1/1", "the person declined it"),
            ("mcp/c1/2", "no answer came within 1 s"),
            ("mcp/c1/3", "did not declare the elicitation capability"),
        ]) {
            assert_eq!(action, "deny");
            assert!(
                detail.starts_with(&format!("{key}: approval-refused (")),
                "{detail}"
            );
            assert!(detail.contains(answer), "{detail}");
        }
    }

    /// SPEC C, the approval deadline (issue 11, one approval state
    /// machine): an accept read at or after the question's deadline, before
    /// the tick that would have withdrawn it, is refused as "no answer in
    /// time" and never reaches the server, from the client and from the
    /// terminal alike; one a millisecond before the deadline runs the call.
    #[test]
    fn an_accept_at_the_deadline_before_the_tick_never_runs_the_call() {
        let s = Setup::new();
        let mut p = s.eliciting_proxy();
        let accept = |eid: &Value| {
            json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}})
                .to_string()
        };
        let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
        let eid = client(&outs)[0]["id"].clone();
        let outs = p.on_client(accept(&eid).as_bytes(), T0 + 1_000);
        assert!(server(&outs).is_empty(), "{outs:?}");
        let refused = &client(&outs)[0];
        assert_eq!(refused["id"], 1);
        assert_eq!(
            refused["result"]["_meta"]["budgetgate"]["reason"],
            "approval-refused"
        );
        assert!(refused["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no answer came within 1 s"));
        assert!(p.asking().is_empty());
        // In time, by one millisecond: forwarded.
        let line = call(2, "send_mail", json!({"to": "b"}));
        let outs = p.on_client(&line, T0);
        let eid = client(&outs)[0]["id"].clone();
        assert_eq!(
            p.on_client(accept(&eid).as_bytes(), T0 + 999),
            [Out::Server(String::from_utf8(line).unwrap())]
        );
        // At the terminal: the same rule.
        let mut p = s.terminal_proxy();
        let outs = p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
        let [Out::Ask(q)] = outs.as_slice() else {
            panic!("{outs:?}")
        };
        let outs = p.on_person(&q.eid, true, T0 + 5_000);
        assert!(server(&outs).is_empty(), "{outs:?}");
        assert!(client(&outs)[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no answer came within 1 s"));
    }

    /// Approval at the terminal (docs/MCP.md, "Approval"): a client
    /// without the elicitation capability is not asked, the terminal is;
    /// only the person there answers (the client's answer to that
    /// question is dropped), and a question withdrawn is said so to the
    /// terminal, not to the client.
    #[test]
    fn without_elicitation_the_terminal_is_asked_and_only_it_answers() {
        // The one question asked at the terminal.
        let asked = |outs: Vec<Out>| match outs.as_slice() {
            [Out::Ask(q)] => q.clone(),
            _ => panic!("{outs:?}"),
        };
        let s = Setup::new();
        let mut p = s.terminal_proxy();
        let line = call(1, "send_mail", json!({"to": "a"}));
        let q = asked(p.on_client(&line, T0));
        assert!(
            q.text
                .contains("wants to call send_mail with {\"to\":\"a\"}"),
            "{q:?}"
        );
        assert_eq!(q.deadline_ms, T0 + 1_000);
        let eid = q.eid.clone();
        assert_eq!(p.asks(&eid), Some(Asker::Terminal));
        // The client cannot answer it.
        let forged = json!({"jsonrpc": "2.0", "id": serde_json::from_str::<Value>(&eid).unwrap(), "result": {"action": "accept"}});
        assert!(p.on_client(forged.to_string().as_bytes(), T0).is_empty());
        assert_eq!(p.asks(&eid), Some(Asker::Terminal));
        assert!(p
            .on_person("\"budgetgate-approval-9\"", true, T0)
            .is_empty());
        assert_eq!(
            p.on_person(&eid, true, T0),
            [Out::Server(String::from_utf8(line).unwrap())]
        );
        assert!(p.on_person(&eid, true, T0).is_empty(), "answered once");
        // No: refused, with who said so.
        let q = asked(p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0));
        let refused = client(&p.on_person(&q.eid, false, T0));
        assert_eq!(refused[0]["id"], 2);
        assert!(refused[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("the person at the gateway's terminal declined it"));
        // Cancelled by the client, or past its deadline: withdrawn at the
        // terminal; only the deadline's refusal goes to the client.
        let q = asked(p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0));
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#;
        assert_eq!(
            p.on_client(cancel, T0),
            [Out::Withdraw {
                eid: q.eid.clone(),
                why: "the call was cancelled".into()
            }]
        );
        let q = asked(p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0));
        let outs = p.on_tick(T0 + 1_000);
        assert_eq!(
            outs[0],
            Out::Withdraw {
                eid: q.eid.clone(),
                why: "no answer in time".into()
            }
        );
        assert_eq!(client(&outs[1..])[0]["id"], 4);
        // Without a terminal either: refused, and the reason says both.
        p.ask_on_terminal(false);
        let outs = client(&p.on_client(&call(5, "send_mail", json!({"to": "e"})), T0));
        assert!(outs[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("none is attached, or --terminal never"));
        // 2, 4 and 5 count; 1 runs (reserved until the server answers); 3
        // was given back.
        assert_eq!(s.used(), (3, 1));
    }

    /// Approval (docs/MCP.md, "Approval"): a question's id cannot be
    /// guessed, so a client cannot answer a question before it is sent; an
    /// answer that is not a plain accept (an error beside the result, an
    /// action the gateway does not know) refuses the call, saying what came.
    #[test]
    fn only_a_plain_accept_of_a_question_sent_runs_its_call() {
        let s = Setup::new();
        let mut p = s.eliciting_proxy();
        // Sent in one batch with the call: the guessed id answers nothing.
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_mail","arguments":{}}},{"jsonrpc":"2.0","id":"budgetgate-approval-1","result":{"action":"accept"}}]"#;
        let outs = p.on_client(batch, T0);
        let ask = &client(&outs)[0];
        let eid = ask["id"].as_str().unwrap().to_owned();
        assert!(
            eid.starts_with("budgetgate-approval-1-") && eid.len() > 30,
            "{eid}"
        );
        assert!(
            !server(&outs).iter().any(|l| l.contains("tools/call")),
            "{outs:?}"
        );
        let both = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept"}, "error": {"code": 1, "message": "x"}});
        let refused = client(&p.on_client(both.to_string().as_bytes(), T0));
        assert_eq!(refused[0]["id"], 1);
        assert_eq!(
            refused[0]["result"]["_meta"]["budgetgate"]["reason"],
            "approval-refused"
        );
        for (n, action, says) in [
            (2, json!("ACCEPT"), "answered \"ACCEPT\", not accept"),
            (3, json!(["accept"]), "had no `action`"),
        ] {
            let outs = p.on_client(&call(n, "send_mail", json!({ "n": n })), T0);
            let eid = client(&outs)[0]["id"].clone();
            let answer = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": action}});
            let refused = client(&p.on_client(answer.to_string().as_bytes(), T0));
            let text = refused[0]["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.contains(says), "{text}");
        }
    }

    /// Over Streamable HTTP the asking transport says which question is
    /// asked, about which call, and expires each on its own deadline.
    #[test]
    fn each_question_is_known_by_its_id_and_expires_on_its_own() {
        let s = Setup::new();
        let mut p = s.eliciting_proxy();
        let first = client(&p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0))[0]["id"]
            .to_string();
        let second = client(&p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0 + 500))[0]
            ["id"]
            .to_string();
        let mut asking = p.asking();
        asking.sort();
        assert_eq!(
            asking,
            [(first.clone(), T0 + 1_000), (second.clone(), T0 + 1_500)]
        );
        assert_eq!(p.question_about("2"), Some(second.as_str()));
        assert_eq!(p.question_about("3"), None);
        assert_eq!(p.asks(&first), Some(Asker::Client));
        assert_eq!(p.asks("\"budgetgate-approval-3\""), None);
        // The second expires first when told to; the first is still asked.
        let outs = client(&p.expire(&second, T0 + 600));
        assert_eq!(outs[0]["params"]["requestId"].to_string(), second);
        assert_eq!(outs[1]["id"], 2);
        assert_eq!(
            outs[1]["result"]["_meta"]["budgetgate"]["reason"],
            "approval-refused"
        );
        assert!(p.expire(&second, T0 + 600).is_empty());
        assert!(p.asks(&first).is_some());
        // A transport that cannot carry the question refuses with its reason.
        p.set_cannot_ask(Some("no stream".into()));
        let outs = client(&p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0));
        assert!(outs[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("and no stream"));
        p.set_cannot_ask(None);
        let outs = client(&p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0));
        assert_eq!(outs[0]["method"], "elicitation/create");
    }

    #[test]
    fn results_over_the_bound_are_replaced_and_denied_tools_are_not_listed() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_result_bytes = 40\n[tools]\nmax_calls = { rm = 0 }\n";
        let mut p = s.proxy(budget);
        p.on_client(&call(1, "big", json!({})), T0);
        // 41 bytes of compact JSON, whatever the server's spacing.
        let result = json!({"content": [{"type": "text", "text": "ééééééééé"}]});
        assert!(result.to_string().len() > 40);
        let outs = client(&p.on_server(&answer(1, result), T0));
        let text = outs[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("over the budget's bound of 40 bytes"),
            "{text}"
        );
        assert_eq!(outs[0]["result"]["isError"], true);
        p.on_client(&call(2, "small", json!({})), T0);
        let small = answer(2, json!({"content": []}));
        assert_eq!(
            client(&p.on_server(&small, T0))[0]["result"],
            json!({"content": []})
        );
        p.on_client(br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#, T0);
        let list = answer(3, json!({"tools": [{"name": "ls"}, {"name": "rm"}]}));
        let outs = client(&p.on_server(&list, T0));
        assert_eq!(outs[0]["result"]["tools"], json!([{"name": "ls"}]));
        let outs = p.on_client(&call(4, "rm", json!({})), T0);
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "tool-cap"
        );
    }

    #[test]
    fn a_server_gone_mid_call_answers_every_pending_request() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "slow", json!({})), T0);
        p.on_client(
            br#"{"jsonrpc":"2.0","id":"r","method":"resources/list"}"#,
            T0,
        );
        let outs = client(&p.on_server_exit("was killed by signal 9", T0));
        assert_eq!(outs.len(), 2);
        // The call: an error result the model reads, saying it may have run.
        let result = &outs.iter().find(|o| o["id"] == 1).unwrap()["result"];
        assert_eq!(result["isError"], true);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("was killed by signal 9"), "{text}");
        assert!(text.contains("may have run"), "{text}");
        // Any other request: a JSON-RPC error.
        let other = outs.iter().find(|o| o["id"] == "r").unwrap();
        assert_eq!(other["error"]["code"], GATEWAY_ERROR);
        // The server may have run the call before it died: counted.
        assert_eq!(s.used(), (1, 0), "the call in flight counts");
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn a_client_gone_counts_the_calls_in_flight_and_gives_back_those_being_asked() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"ask\"]\n";
        let mut p = s.proxy(budget);
        p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
        p.on_client(&call(1, "run", json!({})), T0);
        p.on_client(&call(2, "ask", json!({})), T0);
        assert_eq!(s.used(), (0, 2));
        p.on_client_closed(T0);
        assert_eq!(s.used(), (1, 0));
        assert_eq!(p.in_flight(), 0);
    }

    /// A reservation left by a gateway that died is counted as spent at
    /// the next decision after its expiry: its call may have run.
    #[test]
    fn a_crashed_gateways_reservation_is_spent_at_its_expiry_never_given_back() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n";
        let mut crashed = Proxy::new(s.gate(budget, 1_000), "gone".into(), 4096, 1_000);
        crashed.on_client(&call(1, "slow", json!({})), T0);
        drop(crashed);
        assert_eq!(s.used(), (0, 1));
        let mut p = s.proxy(budget);
        let outs = p.on_client(&call(1, "slow", json!({})), T0 + 999);
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "tool-budget"
        );
        let outs = p.on_client(&call(2, "slow", json!({"again": true})), T0 + 1_000);
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "tool-budget",
            "the expired reservation was given back: {outs:?}"
        );
        assert_eq!(s.used(), (1, 0));
    }

    /// Issue 29, reproduction 3: reservations of live calls expired (a
    /// tool slower than the TTL, a call waiting for approval), so waves of
    /// calls ran past the budget. A live proxy renews what it holds.
    #[test]
    fn a_live_gateway_renews_its_reservations_so_slow_calls_never_expire() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";
        let ttl = 2_000;
        let mut p = Proxy::new(s.gate(budget, ttl), "a".into(), 4096, 60_000);
        let mut other = Proxy::new(s.gate(budget, ttl), "b".into(), 4096, 60_000);
        let mut ran = 0;
        // Three waves of two calls, 2.5 s apart, each call taking 8 s.
        for wave in 0..3u64 {
            let at = T0 + wave * 2_500;
            // The proxies tick as their transports do.
            let mut t = at.saturating_sub(2_500).max(T0);
            while t <= at {
                p.on_tick(t);
                other.on_tick(t);
                t += 100;
            }
            for n in 0..2 {
                let id = wave * 10 + n;
                let outs = other.on_client(&call(id, "slow", json!({"n": id})), at);
                ran += server(&outs).len();
                let outs = p.on_client(&call(id, "slow", json!({"n": id})), at);
                ran += server(&outs).len();
            }
        }
        assert_eq!(ran, 2, "only two calls ran on a budget of two");
        assert_eq!(s.used(), (0, 2));
        // Renewal is due within a third of the TTL.
        assert!(p.next_deadline().is_some_and(|d| d <= T0 + 5_000 + ttl / 3));
    }

    /// Hostile trial of issue 29's fix, F1: a `tools/call` took over the
    /// id of a request still awaiting its answer, so the server's error
    /// for that request gave the call back and the call's own result went
    /// through unchecked. Refused, not forwarded; `1.0` and `1` are one id.
    #[test]
    fn a_call_may_not_take_the_id_of_a_request_awaiting_its_answer() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        for (first, id) in [
            (r#"{"jsonrpc":"2.0","id":5,"method":"nosuch/method"}"#, 5),
            (r#"{"jsonrpc":"2.0","id":6.0,"method":"nosuch/method"}"#, 6),
            (r#"{"jsonrpc":"2.0","id":7e0,"method":"nosuch/method"}"#, 7),
        ] {
            assert_eq!(server(&p.on_client(first.as_bytes(), T0)).len(), 1);
            let outs = p.on_client(&call(id, "t", json!({"i": id})), T0);
            assert!(server(&outs).is_empty(), "{outs:?}");
            assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
            // The server's error for the request is its own, nothing more.
            let error = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"no"}}}}"#
            );
            assert_eq!(client(&p.on_server(error.as_bytes(), T0)).len(), 1);
        }
        assert_eq!(s.used(), (0, 0));
        // In one batch, the same.
        let batch = format!(
            "[{},{}]",
            r#"{"jsonrpc":"2.0","id":9,"method":"nosuch/method"}"#,
            String::from_utf8(call(9, "t", json!({}))).unwrap()
        );
        let outs = p.on_client(batch.as_bytes(), T0);
        assert_eq!(
            server(&outs),
            [r#"[{"jsonrpc":"2.0","id":9,"method":"nosuch/method"}]"#]
        );
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        // An id past 2^53 cannot be told apart by a JavaScript server.
        let big = br#"{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"t","arguments":{}}}"#;
        let outs = p.on_client(big, T0);
        assert!(server(&outs).is_empty());
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    }

    /// F2: an answer that is no JSON-RPC error (`result: null`, neither
    /// member, `error: null`) gave the call back. Counted, and withheld
    /// when it is no result object.
    #[test]
    fn only_a_json_rpc_error_object_gives_a_call_back() {
        let s = Setup::new();
        let mut p = s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 9\n");
        let answers = [
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":2}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null,"error":null}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"x"},"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":5,"error":"not an object"}"#,
        ];
        for (n, a) in answers.iter().enumerate() {
            let id = n as u64 + 1;
            p.on_client(&call(id, "t", json!({"i": id})), T0);
            let outs = client(&p.on_server(a.as_bytes(), T0));
            assert_eq!(outs[0]["result"]["isError"], true, "{a}: {outs:?}");
            assert_eq!(s.used(), (id, 0), "{a}");
        }
        p.on_client(&call(6, "t", json!({"i": 6})), T0);
        p.on_server(
            br#"{"jsonrpc":"2.0","id":6,"error":{"code":-32602,"message":"bad"}}"#,
            T0,
        );
        assert_eq!(s.used(), (5, 0), "a JSON-RPC error gives it back");
    }

    /// F3: a second answer to the same id went through unchecked (a result
    /// after an error: uncounted and unbounded). Dropped; a result after
    /// the error counts the call after all.
    #[test]
    fn a_second_answer_to_one_id_is_dropped_and_a_result_after_an_error_counts() {
        let s = Setup::new();
        let mut p =
            s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 9\nmax_result_bytes = 100\n");
        let big = json!({"content": [{"type": "text", "text": "x".repeat(2_000)}]});
        p.on_client(&call(1, "t", json!({})), T0);
        p.on_server(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#,
            T0,
        );
        assert_eq!(s.used(), (0, 0));
        assert!(p.on_server(&answer(1, big.clone()), T0).is_empty());
        assert_eq!(s.used(), (1, 0), "it ran after all");
        assert!(p.on_server(&answer(1, big.clone()), T0).is_empty());
        assert_eq!(s.used(), (1, 0), "counted once");
        p.on_client(&call(2, "t", json!({"n": 2})), T0);
        assert_eq!(
            client(&p.on_server(&answer(2, json!({"content": []})), T0)).len(),
            1
        );
        assert!(p.on_server(&answer(2, big), T0).is_empty());
        assert_eq!(s.used(), (2, 0));
    }

    /// F4: a member of a server batch that is no JSON-RPC message went
    /// through unchecked (one line with the same fault is dropped).
    #[test]
    fn a_batch_member_that_cannot_be_read_is_dropped() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "t", json!({})), T0);
        let x = "x".repeat(2_000);
        let batch = format!(
            r#"[{{"jsonrpc":"2.0","id":1,"result":{{"a":"{x}"}},"result":{{"b":"{x}"}}}},{{"jsonrpc":"2.0","method":5}},{{"jsonrpc":"2.0","method":"notifications/message","params":{{}}}}]"#
        );
        let outs = client(&p.on_server(batch.as_bytes(), T0));
        assert_eq!(outs.len(), 1);
        let kept = outs[0].as_array().expect("a batch");
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0]["method"], "notifications/message");
    }

    /// A call waiting for approval keeps its reservation past the TTL.
    #[test]
    fn a_call_awaiting_approval_keeps_its_reservation_past_the_ttl() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n[tools]\nneeds_approval = [\"send_mail\"]\n";
        let mut p = Proxy::new(s.gate(budget, 2_000), "a".into(), 4096, 30_000);
        p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
        let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
        let eid = client(&outs)[0]["id"].clone();
        let mut other = s.proxy(budget);
        for t in (T0..T0 + 10_000).step_by(200) {
            p.on_tick(t);
            let outs = other.on_client(&call(t, "ls", json!({"t": t})), t);
            assert!(
                server(&outs).is_empty(),
                "another call ran at {t}: {outs:?}"
            );
        }
        let accept =
            json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}});
        let outs = p.on_client(accept.to_string().as_bytes(), T0 + 10_000);
        assert_eq!(server(&outs).len(), 1, "the approved call runs: {outs:?}");
        assert_eq!(s.used(), (0, 1));
    }

    /// Issue 29, reproduction 2: a commit that failed was lost, and the
    /// reservation expired and was given back. A failed commit is kept,
    /// made again before the next decision, and calls are refused until it
    /// lands.
    #[test]
    fn a_failed_commit_is_kept_and_calls_are_refused_until_it_lands() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";
        let mut p = Proxy::new(
            s.gate_with_timeout(budget, 2_000, 50),
            "a".into(),
            4096,
            1_000,
        );
        assert_eq!(
            server(&p.on_client(&call(1, "t", json!({"i": 1})), T0)).len(),
            1
        );
        // Another process holds the ledger's write lock while the answer comes.
        let blocker = s.lock_ledger();
        p.on_server(&answer(1, json!({"content": []})), T0 + 1_000);
        assert_eq!(p.unsettled(), 1, "the failed commit is kept");
        let outs = p.on_client(&call(2, "t", json!({"i": 2})), T0 + 3_000);
        assert!(server(&outs).is_empty());
        assert_eq!(
            client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
            "gate-error"
        );
        drop(blocker);
        // Past the TTL: the commit lands before the decision; nothing was
        // given back by expiry.
        let mut ran = 0;
        for n in 3..=6 {
            ran += server(&p.on_client(&call(n, "t", json!({"i": n})), T0 + 4_000 + n)).len();
        }
        assert_eq!(ran, 1, "one more call on a budget of two");
        assert_eq!(p.unsettled(), 0);
        assert_eq!(s.used(), (1, 1));
    }

    /// Issue 29, reproduction 4, over stdio: an answer over 16 MiB was
    /// dropped and its call never answered (then given back). Its call is
    /// counted and answered with a withheld result.
    #[test]
    fn an_answer_over_the_line_bound_counts_its_call_and_is_answered_withheld() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(7, "slow", json!({})), T0);
        let outs = client(&p.on_server_too_long(Some("7"), T0));
        assert_eq!(outs[0]["id"], 7);
        assert_eq!(outs[0]["result"]["isError"], true);
        let text = outs[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("longer than 16 MiB"), "{text}");
        assert_eq!(s.used(), (1, 0));
        // An id not awaited (or unreadable): dropped; a call stays reserved.
        p.on_client(&call(8, "slow", json!({})), T0);
        assert!(p.on_server_too_long(Some("99"), T0).is_empty());
        assert!(p.on_server_too_long(None, T0).is_empty());
        assert_eq!(s.used(), (1, 1));
    }

    /// Issue 29, reproduction 5: an upstream that timed out or broke off
    /// after the request was sent had its call given back. Counted unless
    /// the request never reached the server.
    #[test]
    fn a_call_with_no_answer_counts_unless_it_never_reached_the_server() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "slow", json!({})), T0);
        p.on_client(&call(2, "slow", json!({"n": 2})), T0);
        let outs = client(&p.on_no_answer("1", Ran::Maybe, "did not answer within 1 s", T0));
        assert_eq!(outs[0]["result"]["isError"], true);
        assert_eq!(s.used(), (1, 1));
        let outs = client(&p.on_no_answer("2", Ran::No, "could not be reached", T0));
        assert_eq!(outs[0]["error"]["code"], GATEWAY_ERROR);
        assert!(outs[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not run"));
        assert_eq!(s.used(), (1, 0));
        assert!(p.on_no_answer("2", Ran::Maybe, "again", T0).is_empty());
        assert_eq!(s.used(), (1, 0));
    }

    #[test]
    fn rate_windows_refuse_with_when_they_reopen() {
        let s = Setup::new();
        let budget = "[budget]\nmax_seconds = 100000\n[rate]\nper_minute = 2\n";
        let mut p = s.proxy(budget);
        for (id, at) in [(1, T0), (2, T0 + 10_000)] {
            assert_eq!(
                server(&p.on_client(&call(id, "t", json!({"i": id})), at)).len(),
                1
            );
        }
        let outs = p.on_client(&call(3, "t", json!({"i": 3})), T0 + 20_000);
        let meta = &client(&outs)[0]["result"]["_meta"]["budgetgate"];
        assert_eq!(meta["reason"], "rate-limit");
        assert_eq!(meta["limit"], "per_minute");
        assert_eq!(meta["retry_after"], 40);
        assert_eq!(
            server(&p.on_client(&call(4, "t", json!({"i": 4})), T0 + 60_000)).len(),
            1
        );
    }

    #[test]
    fn a_batch_is_split_around_its_gated_calls() {
        let s = Setup::new();
        let mut p = s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 0\n");
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}},{"jsonrpc":"2.0","method":"n"}]"#;
        let outs = p.on_client(batch.as_bytes(), T0);
        assert_eq!(
            server(&outs),
            [r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#]
        );
        assert_eq!(client(&outs)[0]["id"], 2);
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_while_read() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        // A message over the limit: its top-level id is read as it passes.
        input.extend(b"\n{\"result\":{\"id\":1,\"text\":\"");
        input.extend(std::iter::repeat_n(b'y', 1000));
        input.extend(b"\"},\"id\":\"c-7\"}");
        input.extend(b"\n{}\nlast");
        // In one chunk, and a byte at a time: the same lines.
        for size in [input.len(), 1, 7] {
            let mut lines = Lines::new(100);
            for chunk in input.chunks(size) {
                lines.feed(chunk);
            }
            lines.finish();
            let got: Vec<Line> = std::iter::from_fn(|| lines.take_line()).collect();
            assert_eq!(
                got,
                [
                    Line::Text(b"{\"a\":1}".to_vec()),
                    Line::TooLong(None),
                    Line::TooLong(Some("\"c-7\"".into())),
                    Line::Text(b"{}".to_vec()),
                    Line::Text(b"last".to_vec()),
                ],
                "chunks of {size}"
            );
        }
        // A line of exactly the limit is kept; one byte more is not.
        let mut lines = Lines::new(4);
        lines.feed(b"abcd\nabcde\n");
        assert_eq!(lines.take_line(), Some(Line::Text(b"abcd".to_vec())));
        assert_eq!(lines.take_line(), Some(Line::TooLong(None)));
        assert_eq!(lines.take_line(), None);
    }

    #[test]
    fn serve_over_pipes_with_a_server_that_answers_and_exits() {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
        let (from_gateway, server_in) = std::io::pipe().expect("pipe");
        let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
        // A server answering two requests and exiting once it read the third.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(from_gateway).lines();
            for _ in 0..2 {
                let line = lines.next().expect("a line").expect("read");
                let v: Value = serde_json::from_str(&line).expect("JSON");
                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"content": []}});
                writeln!(server_writes, "{reply}").expect("write");
            }
            let _third = lines.next();
        });
        writeln!(
            to_gateway,
            "{}",
            String::from_utf8(call(1, "a", json!({}))).unwrap()
        )
        .unwrap();
        writeln!(
            to_gateway,
            "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}}"
        )
        .unwrap();
        writeln!(
            to_gateway,
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}}"
        )
        .unwrap();
        let mut out = Vec::new();
        let ending = serve(
            &mut p,
            client_in,
            &mut out,
            server_in,
            server_out,
            &mut || None,
            Duration::from_secs(2),
            None,
        );
        assert_eq!(ending, Ending::ServerGone("closed its stdout".into()));
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 3);
        assert_eq!(
            (lines[0]["id"].clone(), lines[1]["id"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(lines[2]["error"]["code"], GATEWAY_ERROR);
        assert_eq!(s.used(), (1, 0));
    }

    #[test]
    fn lines_longer_than_a_pipe_reach_a_slow_server_whole_and_in_order() {
        let s = Setup::new();
        let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
        let (from_gateway, server_in) = std::io::pipe().expect("pipe");
        let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
        // A server that reads slowly, 4 KiB at a time (so the gateway's
        // non-blocking writes stop part-way through a line), and answers
        // with what it got.
        struct Slow(std::io::PipeReader);
        impl std::io::Read for Slow {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_micros(200));
                let n = buf.len().min(4096);
                self.0.read(&mut buf[..n])
            }
        }
        std::thread::spawn(move || {
            let mut reader = BufReader::with_capacity(4096, Slow(from_gateway));
            loop {
                let mut line = Vec::new();
                if reader.read_until(b'\n', &mut line).expect("read") == 0 {
                    return;
                }
                let v: Value = serde_json::from_slice(&line).expect("one whole line");
                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"got": line.len(), "pad": v["params"]["pad"]}});
                writeln!(server_writes, "{reply}").expect("write");
            }
        });
        std::thread::spawn(move || {
            for (i, size) in [300_000usize, 70_000, 1].into_iter().enumerate() {
                let pad: String = "abcdefghij".chars().cycle().take(size).collect();
                let msg =
                    json!({"jsonrpc": "2.0", "id": i, "method": "x/big", "params": {"pad": pad}});
                writeln!(to_gateway, "{msg}").expect("write");
            }
        });
        let mut p = s.proxy(BUDGET);
        let mut out = Vec::new();
        let ending = serve(
            &mut p,
            client_in,
            &mut out,
            server_in,
            server_out,
            &mut || None,
            Duration::from_secs(5),
            None,
        );
        assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 3);
        for (i, (line, size)) in lines.iter().zip([300_000usize, 70_000, 1]).enumerate() {
            assert_eq!(line["id"], i, "in order");
            assert_eq!(line["result"]["pad"].as_str().map(str::len), Some(size));
        }
    }

    /// Issue 13 (faults): after the client closed its stdin, an answer
    /// longer than one read (64 KiB) from a server already known to have
    /// exited is read to its end and reaches the client, and the call is
    /// committed once.
    #[test]
    fn a_long_last_answer_of_a_server_that_exited_reaches_a_client_that_closed() {
        let s = Setup::new();
        let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
        let (from_gateway, server_in) = std::io::pipe().expect("pipe");
        let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
        let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let told = std::sync::Arc::clone(&exited);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(from_gateway).lines();
            let line = lines.next().expect("a line").expect("read");
            let v: Value = serde_json::from_str(&line).expect("JSON");
            // Reported gone before the answer is read: the exit status of a
            // process that wrote into its pipe and ended.
            told.store(true, std::sync::atomic::Ordering::SeqCst);
            let text: String = "x".repeat(300_000);
            let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"content": [{"type": "text", "text": text}]}});
            writeln!(server_writes, "{reply}").expect("write");
        });
        writeln!(
            to_gateway,
            "{}",
            String::from_utf8(call(7, "a", json!({}))).unwrap()
        )
        .unwrap();
        drop(to_gateway);
        let mut p = s.proxy(BUDGET);
        let mut out = Vec::new();
        let ending = serve(
            &mut p,
            client_in,
            &mut out,
            server_in,
            server_out,
            &mut || {
                exited
                    .load(std::sync::atomic::Ordering::SeqCst)
                    .then(|| "exited with status 0".to_owned())
            },
            Duration::from_secs(5),
            None,
        );
        assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
        drop(p);
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1, "the answer reached the client");
        assert_eq!(lines[0]["id"], 7);
        assert_eq!(s.used(), (1, 0));
    }

    #[test]
    fn a_flood_both_ways_never_deadlocks_the_proxy() {
        let s = Setup::new();
        let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
        let (from_gateway, server_in) = std::io::pipe().expect("pipe");
        let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
        // A server answering every line at once (and writing a notification
        // besides), so both pipes fill faster than they are read.
        std::thread::spawn(move || {
            for line in BufReader::new(from_gateway).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line).expect("JSON");
                let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {}});
                if writeln!(server_writes, "{note}\n{reply}").is_err() {
                    return;
                }
            }
        });
        const N: usize = 20_000;
        let (client_reads, client_out) = std::io::pipe().expect("pipe");
        // The client reads everything, and closes once it has every line.
        let (seen_tx, seen) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut count = 0;
            for line in BufReader::new(client_reads).lines() {
                if line.is_err() {
                    return;
                }
                count += 1;
                if count == 2 * N {
                    let _ = seen_tx.send(count);
                }
            }
        });
        let (closed_tx, closed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for i in 0..N {
                writeln!(
                    to_gateway,
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#
                )
                .expect("write");
            }
            let _ = closed_tx.send(seen.recv_timeout(Duration::from_secs(60)));
        });
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut p = s.proxy(BUDGET);
            let mut out = client_out;
            let ending = serve(
                &mut p,
                client_in,
                &mut out,
                server_in,
                server_out,
                &mut || None,
                Duration::from_secs(2),
                None,
            );
            let _ = done_tx.send(ending);
        });
        let ending = done
            .recv_timeout(Duration::from_secs(90))
            .expect("no deadlock");
        assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
        let lines = closed
            .recv_timeout(Duration::from_secs(5))
            .expect("the client")
            .expect("every line in time");
        assert_eq!(lines, 2 * N, "every answer and notification passed on");
    }

    #[test]
    fn default_sessions_name_the_command() {
        let a = default_session(&["/usr/bin/npx".into(), "-y".into(), "srv".into()]);
        assert!(a.starts_with("mcp-npx-"), "{a}");
        assert_eq!(a.len(), "mcp-npx-".len() + 16);
        assert_ne!(
            a,
            default_session(&["/usr/bin/npx".into(), "-y srv".into()])
        );
        assert_eq!(
            a,
            default_session(&["/usr/bin/npx".into(), "-y".into(), "srv".into()])
        );
    }
}
