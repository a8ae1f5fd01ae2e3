//! `budgetgate mcp --listen ADDR --upstream URL`: the budget gate in front
//! of a remote MCP server over MCP's Streamable HTTP transport (`SPEC C`,
//! `SPEC E`; `docs/MCP.md`, "Streamable HTTP").
//!
//! The gateway serves the client at `http://ADDR/mcp` and is itself a
//! Streamable HTTP client of the upstream URL. Each message goes through the
//! same [`Proxy`] as on stdio (one per MCP session, all on one ledger gate),
//! so the decisions, words, reservations and transparency are the stdio
//! gateway's:
//!
//! * **POST** (JSON-RPC from the client): the body, read up to [`MAX_BODY`]
//!   bytes (a longer one is drained without being kept and answered `413`
//!   with a JSON-RPC `-32600`; an empty or blank one `400` with `-32700`),
//!   goes through [`Proxy::on_client`]. What the
//!   proxy answers itself (a refused `tools/call`, `-32700`, `-32600`) is
//!   answered here without reaching the upstream; what it forwards is POSTed
//!   upstream byte for byte. The upstream's answer, `application/json` or
//!   `text/event-stream` (each event's data through [`Proxy::on_server`]:
//!   reservations committed on a result, rolled back on an error, results
//!   over the bound withheld), goes back in the form the upstream chose,
//!   every other event and field as it came.
//! * **GET** (the server-to-client SSE stream) and **DELETE** (end of the
//!   session) are forwarded; `Mcp-Session-Id`, `MCP-Protocol-Version`,
//!   `Last-Event-ID` and `Authorization` pass through, and so do the
//!   upstream's `Mcp-Session-Id` and `WWW-Authenticate`.
//! * **The upstream failing** (not reachable, no answer within
//!   `--upstream-timeout`, a 5xx, a stream that ends before every request
//!   in it was answered): each request awaiting it is answered naming the
//!   cause. A call counts unless it never reached the upstream (a
//!   connection that could not be made, a 4xx): answered with an error
//!   result saying it may have run (`SPEC E`; `docs/MCP.md`, "Reservations
//!   and the ledger").
//! * **Who may connect**: an `Origin` of another machine, two of them, or a
//!   `Host` that is not this gateway's is refused `403`; a connection that
//!   sends nothing within [`FIRST_BYTE_MS`] is closed.
//! * **Approval** (`needs_approval`): the call's POST is answered with an
//!   SSE stream whose first event is the gateway's `elicitation/create`;
//!   the client's answer, in a POST of its own, goes to the task that asked
//!   (`route_answers`), which forwards the call and relays its answer on
//!   that stream, or writes the refusal there (declined, cancelled, no
//!   answer within `--approval-timeout`).
//!
//! One tokio current-thread runtime runs hyper (HTTP/1.1, the server) and
//! reqwest (the upstream client, TLS by rustls: `net::upstream_client`).
//! The ledger's transactions are
//! short and synchronous, made under the session's lock, never across an
//! await.
//!
//! The rooms of this folder: `mod.rs` the transport's bounds and the
//! addresses of `--listen` and `--upstream` (the command itself is the
//! binary's glue, `host/src/cli/mcp.rs`); `sessions.rs`
//! the gateway's state ([`Gateway`]: one proxy per MCP session, the
//! questions awaiting answers, the renewal of reservations); `server.rs`
//! the client's side (accepting connections, [`handle`] routing POST, GET
//! and DELETE); `upstream.rs` the upstream's side (requests sent, answers
//! and streams relayed); `questions.rs` approval over HTTP; `body.rs` the
//! bodies read and written; `tests.rs` the unit tests.

use std::sync::{Arc, Mutex};

use crate::mcp::{LedgerGate, Proxy};

mod body;
mod headers;
mod questions;
mod server;
mod sessions;
mod upstream;

pub use server::*;
pub use sessions::*;

/// Largest request body read from the client, and largest JSON body or SSE
/// event read from the upstream (16 MiB, the stdio gateway's line bound).
pub const MAX_BODY: usize = crate::mcp::MAX_LINE;

/// Bytes of an over-long request body read (and dropped) so that the client
/// can read the `413` (256 MiB); past that the connection is closed.
pub const MAX_DRAIN: u64 = 256 << 20;

/// Largest body of an upstream error answer (4xx, 5xx) passed on (64 KiB).
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// Most MCP sessions the gateway keeps at once. A new one beyond takes
/// the place of the least recently used session with nothing in flight (a
/// client that comes back to it gets a new proxy, as after a restart); when
/// every session has requests in flight, it is answered `503`.
pub const MAX_SESSIONS: usize = 1024;

/// SSE chunks queued towards a client that reads slowly; when full, the
/// gateway stops reading the upstream's stream.
pub const EVENT_QUEUE: usize = 16;

/// Seconds a client has to send its request headers, and its body.
pub const CLIENT_TIMEOUT_S: u64 = 30;

/// The path the gateway serves.
pub const PATH: &str = "/mcp";

// The bounds every HTTP front-end shares (connections, slow clients, the
// upstream's connection).
pub use crate::net::{CONNECT_TIMEOUT_S, FIRST_BYTE_MS, HEAD_TIMEOUT_S, MAX_CONNECTIONS};

type Gate = Arc<Mutex<LedgerGate>>;
type Session = Arc<Mutex<Proxy<Gate>>>;
type Reply = crate::net::Reply;

fn now() -> u64 {
    crate::gate::clock::now_ms()
}

pub use crate::net::listen_addr;

/// Checks the upstream URL: `http://` or `https://` with a host (TLS by
/// rustls with the system's roots; `--upstream-ca` adds a private CA's).
pub fn upstream_url(text: &str) -> Result<reqwest::Url, String> {
    crate::net::upstream_url("--upstream", text)
}

/// The default session of an upstream URL: `mcp-`, its host and 16 hex
/// digits of a 64-bit FNV-1a hash of the host and the whole URL.
pub fn default_session(url: &reqwest::Url) -> String {
    crate::mcp::default_session(&[
        url.host_str().unwrap_or("").to_owned(),
        url.as_str().to_owned(),
    ])
}

#[cfg(test)]
mod tests;
