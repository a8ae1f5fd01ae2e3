//! `budgetgate mcp`: the budget gate in front of any MCP server over stdio
//! (`SPEC C`, `SPEC E`; `docs/MCP.md`). [`Proxy`] is shared with the
//! Streamable HTTP transport (`--listen`, [`crate::mcp::http`]).
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
//!   gateway's controlling terminal is ([`crate::mcp::terminal`],
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
//! The rooms of this folder: `mod.rs` the command's arguments, set-up and
//! [`command`]; [`call_gate`] the gate the proxy decides with
//! ([`CallGate`], [`LedgerGate`]); [`message`] the JSON-RPC messages and
//! their ids; [`proxy`] the sans-IO state machine (client side, questions,
//! server side); [`lines`] bounded line reading; [`stdio`] the stdio
//! transport; [`http`] the Streamable HTTP transport ([`sse`] its stream reader); [`terminal`] the
//! person at the gateway's terminal.
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

use crate::gate::budget_file::{ReplayBudget, BUDGET_TOOLS};
use crate::gate::{self, Counting, GateError, Ledgers, Refusal, ToolCall, Verdict};
use crate::mcp::terminal::Terminal;
use crate::store::{Durability, LedgerTx, LedgerUrl, Store, StoreError};
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
        Some(path) => crate::gate::budget_file::read_budget_file(path)?,
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

pub mod call_gate;
pub mod http;
pub mod lines;
pub mod message;
pub mod proxy;
pub mod sse;
pub mod stdio;
pub mod terminal;

pub use call_gate::*;
pub use lines::{Line, Lines};
pub use message::*;
pub use proxy::*;
pub use stdio::*;

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
/// The folder `path` is in must exist (`url` names it in the error): a
/// mistyped path never starts an empty budget.
fn folder_of_exists(url: &str, path: &std::path::Path) -> Result<(), String> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => Err(missing_folder(url, dir)),
        _ => Ok(()),
    }
}

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
            crate::store::RedisStore::open(&url, wait)
                .map(Backend::Redis)
                .map_err(shown)
        }
        LedgerUrl::SqliteFile(file) => {
            folder_of_exists(shown_url, &file)?;
            Store::open_file_with(&file, wait, durability)
                .map(Backend::Sqlite)
                .map_err(shown)
        }
        LedgerUrl::StateDir(dir) => {
            // The state folder itself may be new; the folder it is in must
            // exist (a mistyped path never starts an empty budget).
            if url.is_some() {
                folder_of_exists(shown_url, &dir)?;
            }
            Store::open_with(&dir, wait, durability)
                .map(Backend::Sqlite)
                .map_err(shown)
        }
    }
}

/// The terminal to ask approval at (`--terminal auto`: the controlling
/// terminal, when the gateway has one).
pub fn asking_terminal(args: &McpArgs) -> Option<std::fs::File> {
    match args.terminal {
        TerminalUse::Auto => crate::mcp::terminal::controlling(),
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
        return crate::mcp::http::command(args, url);
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
        asking_terminal(args),
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
mod tests;
