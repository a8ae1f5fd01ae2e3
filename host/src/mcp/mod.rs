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
//! The rooms of this folder: `mod.rs` the bounds, JSON-RPC's error codes,
//! the default session and the opening of `--ledger` ([`open_ledger`]);
//! [`call_gate`] the gate the proxy decides with
//! ([`CallGate`], [`LedgerGate`]); [`message`] the JSON-RPC messages and
//! their ids; [`generation`] the two generations of MCP (the handshake era
//! and 2026-07-28's stateless requests) and what each wants of the
//! gateway's answers; [`request_state`] the sealed `requestState` of an
//! approval asked by `InputRequiredResult`; [`proxy`] the sans-IO state machine (client side, questions,
//! server side); [`lines`] bounded line reading; [`stdio`] the stdio
//! transport; [`http`] the Streamable HTTP transport ([`sse`] its stream reader); [`terminal`] the
//! person at the gateway's terminal. The command's arguments, set-up and
//! exit statuses are the binary's glue (`host/src/cli/mcp.rs`).
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
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::gate::budget_file::{ReplayBudget, BUDGET_TOOLS};
use crate::gate::{self, Counting, GateError, Ledgers, Refusal, ToolCall, Verdict};
use crate::mcp::terminal::Terminal;
use crate::store::{LedgerTx, Store};
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

pub mod call_gate;
pub mod generation;
pub mod http;
pub mod lines;
pub mod message;
pub mod proxy;
pub mod request_state;
pub mod stdio;
pub mod terminal;

pub use crate::gate::backend::{open_ledger, Backend};
pub use crate::net::sse;
pub use call_gate::*;
pub use generation::Generation;
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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_stateless;
