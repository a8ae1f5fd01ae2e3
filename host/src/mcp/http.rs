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
//! reqwest (the upstream client, no TLS). The ledger's transactions are
//! short and synchronous, made under the session's lock, never across an
//! await.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST,
};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::value::RawValue;

use crate::mcp::sse::{SseItem, SseParser};
use crate::mcp::{
    error_line, normal_id, Asker, CallGate, LedgerGate, McpArgs, Message, Out, Proxy, Question,
    Ran, Setup, GATEWAY_ERROR, INVALID_REQUEST, PARSE_ERROR,
};

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

/// Most client connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// SSE chunks queued towards a client that reads slowly; when full, the
/// gateway stops reading the upstream's stream.
pub const EVENT_QUEUE: usize = 16;

/// Seconds a client has to send its request headers, and its body.
pub const CLIENT_TIMEOUT_S: u64 = 30;

/// How long a new connection may wait before its first byte (ms): past it,
/// it is closed and its slot given to another.
pub const FIRST_BYTE_MS: u64 = 2_000;

/// How long a request's head may take to arrive (s), on a new connection
/// and between requests on a kept-alive one (longer than the 5 s that
/// common HTTP clients keep an idle connection).
pub const HEAD_TIMEOUT_S: u64 = 10;

/// Seconds the gateway waits for a TCP connection to the upstream.
pub const CONNECT_TIMEOUT_S: u64 = 10;

/// The path the gateway serves.
pub const PATH: &str = "/mcp";

/// The request headers passed to the upstream as they came.
const REQUEST_HEADERS: [&str; 4] = [
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "authorization",
];

/// The upstream's response headers passed to the client.
const RESPONSE_HEADERS: [&str; 3] = ["mcp-session-id", "www-authenticate", "mcp-protocol-version"];

type Gate = Arc<Mutex<LedgerGate>>;
type Session = Arc<Mutex<Proxy<Gate>>>;
type Reply = Response<BoxBody<Bytes, Infallible>>;

/// The gateway's state: the upstream, its client, and one proxy per MCP
/// session (keyed by `Mcp-Session-Id`; `""` for an upstream without
/// sessions).
pub struct Gateway {
    upstream: String,
    client: reqwest::Client,
    upstream_timeout: Duration,
    gate: Gate,
    max_result_bytes: u64,
    approval_timeout_ms: u64,
    connection: String,
    sessions: Mutex<Sessions>,
    /// The approval questions awaiting an answer, keyed by
    /// [`waiter_key`]: where to hand the answer (the task that holds the
    /// stream the question went out on).
    waiters: Waiters,
    /// The person at the gateway's terminal, asked when a client cannot be.
    terminal: Option<crate::mcp::terminal::Terminal>,
}

/// An answer to one of the gateway's questions.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// From the client: its JSON-RPC response to the question, or its
    /// `notifications/cancelled` of the call asked about.
    Client(String),
    /// From the person at the terminal: allowed or not.
    Person(bool),
}

/// Hands an answer to the task that asked the question.
type Waiter = tokio::sync::oneshot::Sender<Answer>;
type Waiters = Arc<Mutex<HashMap<String, Waiter>>>;

/// A question's key among the gateway's waiters: the session's ledger
/// name and the question's id (question ids are numbered per session).
fn waiter_key(connection: &str, eid: &str) -> String {
    format!("{connection}\n{eid}")
}

struct Sessions {
    /// Each session's proxy and when it was last used (a tick of `made`).
    map: HashMap<String, (Session, u64)>,
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

fn now() -> u64 {
    crate::gate::clock::now_ms()
}

impl Gateway {
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
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_S))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("the HTTP client: {e}"))?;
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
        })
    }

    fn new_proxy(&self, made: u64) -> Session {
        let mut proxy = Proxy::new(
            Arc::clone(&self.gate),
            format!("{}-{made}", self.connection),
            self.max_result_bytes,
            self.approval_timeout_ms,
        );
        proxy.ask_on_terminal(self.terminal.is_some());
        Arc::new(Mutex::new(proxy))
    }

    /// The proxy of session `key`; a new one (not yet kept: `false`) for a
    /// client without a session; `None` when there are too many sessions.
    fn session(&self, key: &str) -> Option<(Session, bool)> {
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
        let proxy = self.new_proxy(tick);
        if key.is_empty() {
            return Some((proxy, false));
        }
        s.map.insert(key.to_owned(), (Arc::clone(&proxy), tick));
        Some((proxy, true))
    }

    fn keep(&self, key: &str, proxy: &Session) {
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
    fn ask_person(&self, key: String, question: &Question) -> bool {
        self.terminal.as_ref().is_some_and(|t| t.ask(key, question))
    }

    /// The question `key` is no longer asked at the terminal.
    fn withdraw_person(&self, key: String, why: &str) {
        if let Some(t) = &self.terminal {
            t.withdraw(key, why);
        }
    }

    fn forget(&self, key: &str) -> Option<Session> {
        self.sessions.lock().ok()?.map.remove(key).map(|(p, _)| p)
    }

    /// Every session ends (the gateway stops): calls still running count.
    pub fn close_all(&self) {
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

// ------------------------------------------------------------------ bodies

/// A response body fed by a channel (an SSE stream relayed as it comes).
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn json_reply(status: StatusCode, body: String) -> Reply {
    full(status, "application/json", body)
}

fn error_reply(status: StatusCode, code: i64, message: &str) -> Reply {
    json_reply(status, error_line("null", code, message))
}

enum ReadError {
    TooLarge,
    Failed(String),
}

/// Reads `body` up to `max` bytes; past that reads on (at most
/// [`MAX_DRAIN`] bytes, dropped as they come) so the client sees the answer.
async fn read_bounded(mut body: Incoming, max: usize) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    let mut over: Option<u64> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Failed(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match &mut over {
            Some(n) => {
                *n += data.len() as u64;
                if *n > MAX_DRAIN {
                    return Err(ReadError::TooLarge);
                }
            }
            None if buf.len() + data.len() > max => {
                over = Some(0);
                buf = Vec::new();
            }
            None => buf.extend_from_slice(&data),
        }
    }
    match over {
        Some(_) => Err(ReadError::TooLarge),
        None => Ok(buf),
    }
}

/// Reads an upstream body up to `max` bytes; `None` past it.
async fn read_upstream(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, String> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if buf.len() + chunk.len() > max {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Some(buf))
}

fn too_large() -> Reply {
    error_reply(
        StatusCode::PAYLOAD_TOO_LARGE,
        INVALID_REQUEST,
        &format!(
            "Invalid Request: a body longer than {} MiB was refused",
            MAX_BODY >> 20
        ),
    )
}

// ------------------------------------------------------------------ messages

/// The ids (compact JSON) of the requests in `text`, one message or a batch.
fn request_ids(text: &str) -> Vec<String> {
    let one = |raw: &str| -> Option<String> {
        let msg: Message<'_> = serde_json::from_str(raw).ok()?;
        msg.method.as_ref()?;
        msg.id.map(normal_id)
    };
    if text.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<&RawValue>>(text)
            .map(|items| items.iter().filter_map(|i| one(i.get())).collect())
            .unwrap_or_default()
    } else {
        one(text).into_iter().collect()
    }
}

/// The texts to the client in `outs`.
fn to_client(outs: Vec<Out>) -> Vec<String> {
    outs.into_iter()
        .filter_map(|o| match o {
            Out::Client(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// Answers every request of `ids` the proxy still awaits, naming `why`
/// (through the proxy, [`Proxy::on_no_answer`]: a call is counted unless
/// `ran` says it never reached the upstream).
fn fail_pending(proxy: &Session, ids: &[String], ran: Ran, why: &str) -> Vec<String> {
    let Ok(mut p) = proxy.lock() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for id in ids {
        out.extend(to_client(p.on_no_answer(id, ran, why, now())));
    }
    out
}

/// One JSON body of messages: the only one as it is, several as a batch
/// (an upstream batch's items in it).
fn merged(texts: &[String]) -> String {
    if let [one] = texts {
        return one.clone();
    }
    let mut items: Vec<&str> = Vec::new();
    for t in texts {
        match serde_json::from_str::<Vec<&RawValue>>(t) {
            Ok(batch) if t.trim_start().starts_with('[') => {
                items.extend(batch.iter().map(|i| i.get()));
            }
            _ => items.push(t),
        }
    }
    format!("[{}]", items.join(","))
}

fn sse_event(data: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {data}\n\n"))
}

fn with_headers(mut reply: Reply, from: &HeaderMap) -> Reply {
    for name in RESPONSE_HEADERS {
        if let Some(v) = from.get(name) {
            reply
                .headers_mut()
                .insert(HeaderName::from_static(name), v.clone());
        }
    }
    reply
}

// ------------------------------------------------------------------ handlers

/// Serves one request of the client.
pub async fn handle(
    gw: Arc<Gateway>,
    bound: SocketAddr,
    req: Request<Incoming>,
) -> Result<Reply, Infallible> {
    if req.uri().path() != PATH {
        return Ok(full(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("budgetgate serves MCP at {PATH}\n"),
        ));
    }
    // DNS rebinding: a browser page of another origin is refused, and so
    // is a name other than this gateway's (a rebound name resolves here
    // but says so in `Host`). A header given twice could be read one way
    // here and another way elsewhere: refused.
    let origins: Vec<&HeaderValue> = req.headers().get_all("origin").iter().collect();
    let refused = match origins.as_slice() {
        [] => None,
        [one] if local_origin(one.to_str().unwrap_or("")) => None,
        [_] => Some("requests from a web page of another origin are refused (Origin)"),
        _ => Some("a request with more than one Origin header is refused"),
    };
    let hosts: Vec<&HeaderValue> = req.headers().get_all(HOST).iter().collect();
    let refused = refused.or(match hosts.as_slice() {
        [one] if allowed_host(one.to_str().unwrap_or(""), bound) => None,
        [_] => Some("a request for a host name other than this gateway's (localhost or the address it listens on) is refused (Host)"),
        [] => Some("a request without a Host header is refused"),
        _ => Some("a request with more than one Host header is refused"),
    });
    if let Some(why) = refused {
        return Ok(error_reply(
            StatusCode::FORBIDDEN,
            INVALID_REQUEST,
            &format!("budgetgate: {why}"),
        ));
    }
    Ok(match *req.method() {
        Method::POST => post(&gw, req).await,
        Method::GET => get(&gw, req).await,
        Method::DELETE => delete(&gw, req).await,
        _ => {
            let mut r = full(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "POST, GET or DELETE\n",
            );
            r.headers_mut()
                .insert("allow", HeaderValue::from_static("POST, GET, DELETE"));
            r
        }
    })
}

/// Whether an `Origin` is this machine's (`http://localhost[:P]`,
/// `http://127.0.0.1[:P]`, `http://[::1][:P]`).
pub fn local_origin(origin: &str) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().map(|h| format!("[{h}]"))
    } else {
        rest.split(':').next().map(str::to_owned)
    };
    matches!(host.as_deref(), Some("localhost" | "127.0.0.1" | "[::1]"))
}

/// Whether `host` (a `Host` header: a name or address, with or without a
/// port) names this gateway listening on `bound`: `localhost`, a loopback
/// address, or the address it listens on. A gateway listening on every
/// address (`0.0.0.0`, `::`) is reached by names it cannot know: any host.
pub fn allowed_host(host: &str, bound: SocketAddr) -> bool {
    if bound.ip().is_unspecified() {
        return true;
    }
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback() || ip == bound.ip())
}

fn session_key(req: &Request<Incoming>) -> String {
    req.headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

fn upstream_request(
    gw: &Gateway,
    method: reqwest::Method,
    headers: &HeaderMap,
    accept: &'static str,
) -> reqwest::RequestBuilder {
    let mut rb = gw.client.request(method, &gw.upstream);
    for name in REQUEST_HEADERS {
        if let Some(v) = headers.get(name) {
            rb = rb.header(name, v.as_bytes());
        }
    }
    let accept = headers
        .get("accept")
        .map_or(accept.as_bytes(), HeaderValue::as_bytes)
        .to_vec();
    rb.header("accept", accept)
}

/// Sends a request upstream. An error says whether the request may have
/// reached the upstream: only a connection that could not be made proves
/// it did not ([`Ran::No`]); a timeout, or a connection broken after it
/// was made, may come after the server read it ([`Ran::Maybe`]).
async fn send(
    gw: &Gateway,
    rb: reqwest::RequestBuilder,
) -> Result<reqwest::Response, (Ran, String)> {
    match tokio::time::timeout(gw.upstream_timeout, rb.send()).await {
        Err(_) => Err((
            Ran::Maybe,
            format!(
                "at {} did not answer within {} s",
                gw.upstream,
                gw.upstream_timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => {
            let ran = if e.is_connect() { Ran::No } else { Ran::Maybe };
            Err((
                ran,
                format!(
                    "at {} could not be reached ({})",
                    gw.upstream,
                    error_chain(&e)
                ),
            ))
        }
        Ok(Ok(r)) => Ok(r),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn is_sse(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("text/event-stream")
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

async fn post(gw: &Arc<Gateway>, req: Request<Incoming>) -> Reply {
    let key = session_key(&req);
    let headers = req.headers().clone();
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_DRAIN) {
        return too_large();
    }
    let read = tokio::time::timeout(
        Duration::from_secs(CLIENT_TIMEOUT_S),
        read_bounded(req.into_body(), MAX_BODY),
    )
    .await;
    let body = match read {
        Err(_) => {
            return error_reply(
                StatusCode::REQUEST_TIMEOUT,
                INVALID_REQUEST,
                &format!("Invalid Request: the body did not come within {CLIENT_TIMEOUT_S} s"),
            )
        }
        Ok(Err(ReadError::TooLarge)) => return too_large(),
        Ok(Err(ReadError::Failed(e))) => {
            return error_reply(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                &format!("Parse error: the body could not be read ({e})"),
            )
        }
        Ok(Ok(b)) => b,
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        // On stdio a blank line is skipped; a POST must carry a message.
        return error_reply(
            StatusCode::BAD_REQUEST,
            PARSE_ERROR,
            "Parse error: the body is empty (a POST to /mcp carries one JSON-RPC message or a batch)",
        );
    }
    let Some((proxy, kept)) = gw.session(&key) else {
        return error_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            GATEWAY_ERROR,
            &format!("budgetgate: more than {MAX_SESSIONS} MCP sessions are open"),
        );
    };
    let (local, forward, asked, connection) = {
        let Ok(mut p) = proxy.lock() else {
            return error_reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                GATEWAY_ERROR,
                "budgetgate: the session's lock is poisoned",
            );
        };
        // Answers to the gateway's own questions go to the task that
        // asked, whose stream carries the call's outcome.
        let Some(body) = route_answers(gw, &p, &body) else {
            return full(StatusCode::ACCEPTED, "text/plain", "");
        };
        p.set_cannot_ask((!accepts_stream(&headers)).then(|| {
            "this client's POST does not accept `text/event-stream`, the stream the question would be sent on".into()
        }));
        let before: HashSet<String> = p.asking().into_iter().map(|(eid, _)| eid).collect();
        let mut local = Vec::new();
        let mut forward = None;
        let mut questions = Vec::new();
        for out in p.on_client(&body, now()) {
            match out {
                Out::Client(t) => local.push(t),
                Out::Server(t) => forward = Some(t),
                Out::Ask(q) => questions.push(q),
                Out::Withdraw { eid, why } => {
                    gw.withdraw_person(waiter_key(p.connection(), &eid), &why);
                }
            }
        }
        let asked: Vec<(String, u64)> = p
            .asking()
            .into_iter()
            .filter(|(eid, _)| !before.contains(eid))
            .collect();
        (
            local,
            forward,
            (asked, questions),
            p.connection().to_owned(),
        )
    };
    if !asked.0.is_empty() {
        return ask(gw, &proxy, &connection, headers, local, forward, asked);
    }
    let Some(forward) = forward else {
        // Answered here, or nothing to answer (a notification dropped).
        if local.is_empty() {
            return full(StatusCode::ACCEPTED, "text/plain", "");
        }
        let malformed = local.iter().all(|t| {
            serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| {
                let code = v["error"]["code"].as_i64();
                code == Some(PARSE_ERROR) || code == Some(INVALID_REQUEST)
            })
        });
        let status = if malformed {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        return json_reply(status, merged(&local));
    };
    let ids = request_ids(&forward);
    // Should the client go away before the answer (hyper then drops this
    // task, and the upstream request with it), the requests still awaited
    // are answered to no one and counted: the upstream may have run them.
    let mut abandoned = Abandoned {
        proxy: Some(Arc::clone(&proxy)),
        ids: ids.clone(),
    };
    let rb = upstream_request(
        gw,
        reqwest::Method::POST,
        &headers,
        "application/json, text/event-stream",
    )
    .header("content-type", "application/json")
    .body(forward);
    let failed = |ran: Ran, why: &str| {
        let mut texts = local.clone();
        texts.extend(fail_pending(&proxy, &ids, ran, why));
        if texts.is_empty() {
            error_reply(
                StatusCode::BAD_GATEWAY,
                GATEWAY_ERROR,
                &format!("budgetgate: the upstream MCP server {why}"),
            )
        } else {
            json_reply(StatusCode::OK, merged(&texts))
        }
    };
    let mut resp = match send(gw, rb).await {
        Ok(r) => r,
        Err((ran, why)) => return failed(ran, &why),
    };
    let status = resp.status();
    let up_headers = resp.headers().clone();
    let new_key = up_headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if status.is_success() && !kept {
        gw.keep(new_key.as_deref().unwrap_or(""), &proxy);
    }
    if status.is_server_error() {
        // A 5xx may come after the server ran the call (a crash midway).
        return failed(
            Ran::Maybe,
            &format!("at {} answered HTTP {status}", gw.upstream),
        );
    }
    if !status.is_success() {
        // 4xx: the client must see it (401 to authorize, 404 to start a
        // new session). An HTTP status is no JSON-RPC answer that the
        // call did not run (something between may have forwarded it, a
        // server may run it and then fail): the calls in it count.
        let _ = fail_pending(&proxy, &ids, Ran::Maybe, &format!("answered HTTP {status}"));
        if status == StatusCode::NOT_FOUND && !key.is_empty() {
            if let Some(gone) = gw.forget(&key) {
                if let Ok(mut p) = gone.lock() {
                    let _ = p.on_server_exit("ended the session", now());
                }
            }
        }
        let body = read_upstream(&mut resp, MAX_ERROR_BODY)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let ct = content_type(&up_headers);
        let ct = if ct.is_empty() {
            "text/plain".into()
        } else {
            ct
        };
        let reply = full(
            StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
            &ct,
            body,
        );
        return with_headers(reply, &up_headers);
    }
    if is_sse(&up_headers) {
        // The relay reads the stream to its end whether the client stays.
        abandoned.proxy = None;
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        let relay_proxy = Arc::clone(&proxy);
        let upstream = gw.upstream.clone();
        tokio::spawn(relay(resp, relay_proxy, ids, local, tx, upstream));
        return with_headers(sse_reply(status.as_u16(), rx), &up_headers);
    }
    if ids.is_empty() && status == StatusCode::ACCEPTED {
        if local.is_empty() {
            return with_headers(full(StatusCode::ACCEPTED, "text/plain", ""), &up_headers);
        }
        return json_reply(StatusCode::OK, merged(&local));
    }
    let body = match read_upstream(&mut resp, MAX_BODY).await {
        Ok(Some(b)) => b,
        Ok(None) => {
            return failed(
                Ran::Maybe,
                &format!("answered with more than {} MiB (withheld)", MAX_BODY >> 20),
            )
        }
        Err(e) => return failed(Ran::Maybe, &format!("broke off its answer ({e})")),
    };
    let mut texts = local.clone();
    if let Ok(mut p) = proxy.lock() {
        texts.extend(to_client(p.on_server(&body, now())));
    }
    texts.extend(fail_pending(
        &proxy,
        &ids,
        Ran::Maybe,
        "answered without answering every request",
    ));
    if texts.is_empty() {
        return with_headers(full(StatusCode::ACCEPTED, "text/plain", ""), &up_headers);
    }
    with_headers(json_reply(StatusCode::OK, merged(&texts)), &up_headers)
}

/// The requests of a POST whose task may be dropped before their answers
/// (the client went away): on drop, each still awaited is answered to no
/// one and counted ([`Ran::Maybe`]), so no request stays pending for ever.
struct Abandoned {
    proxy: Option<Session>,
    ids: Vec<String>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(proxy) = self.proxy.take() {
            let _ = fail_pending(
                &proxy,
                &self.ids,
                Ran::Maybe,
                "lost its client before answering",
            );
        }
    }
}

/// Whether a client's request accepts an SSE stream as its answer.
fn accepts_stream(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|t| {
                let t = t.split(';').next().unwrap_or("").trim();
                t.eq_ignore_ascii_case("text/event-stream")
                    || t.eq_ignore_ascii_case("text/*")
                    || t == "*/*"
            })
        })
    })
}

/// Hands each answer to one of the gateway's questions in `body` (one
/// message or a batch) to the task that asked it: the client's JSON-RPC
/// response to the question, or its `notifications/cancelled` of the call
/// asked about. The rest of the body (the whole of it when nothing was
/// an answer), `None` when nothing is left.
fn route_answers<'b>(gw: &Gateway, p: &Proxy<Gate>, body: &'b [u8]) -> Option<Cow<'b, [u8]>> {
    let whole = Some(Cow::Borrowed(body));
    if p.next_deadline().is_none() {
        // No question awaits an answer: nothing to read here.
        return whole;
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return whole;
    };
    let batch = text.trim_start().starts_with('[');
    let items: Vec<&str> = if batch {
        match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) => items.iter().map(|i| i.get()).collect(),
            Err(_) => return whole,
        }
    } else {
        vec![text]
    };
    let Ok(mut waiters) = gw.waiters.lock() else {
        return whole;
    };
    let mut rest = Vec::new();
    for item in &items {
        let waiter = question_answered(p, item)
            .and_then(|eid| waiters.remove(&waiter_key(p.connection(), &eid)));
        match waiter {
            // The asker may just have given up (its deadline): the answer
            // is then not read, as after the deadline.
            Some(w) => drop(w.send(Answer::Client((*item).to_owned()))),
            None => rest.push(*item),
        }
    }
    if rest.len() == items.len() {
        return whole;
    }
    match rest.as_slice() {
        [] => None,
        [one] if !batch => Some(Cow::Owned(one.as_bytes().to_vec())),
        _ => Some(Cow::Owned(format!("[{}]", rest.join(",")).into_bytes())),
    }
}

/// The question a client message answers: its id when it is a JSON-RPC
/// 2.0 response (a result or an error) to one of the gateway's questions to
/// the client (not one asked at the terminal, which only the person there
/// answers), or the question about the call a `notifications/cancelled`
/// cancels. A message that is not a valid answer stays in the body, where
/// the proxy answers it as on stdio (`-32600`) and the question goes on.
fn question_answered(p: &Proxy<Gate>, text: &str) -> Option<String> {
    let msg: Message<'_> = serde_json::from_str(text).ok()?;
    if msg.jsonrpc.as_deref() != Some("2.0") {
        return None;
    }
    match msg.method.as_deref() {
        None if msg.result.is_some() || msg.error.is_some() => {
            Some(normal_id(msg.id?)).filter(|eid| p.asks(eid) == Some(Asker::Client))
        }
        None => None,
        Some("notifications/cancelled") if msg.id.is_none() => {
            let params: serde_json::Value = serde_json::from_str(msg.params?.get()).ok()?;
            let target = params.get("requestId")?.to_string();
            p.question_about(&target).map(str::to_owned)
        }
        Some(_) => None,
    }
}

/// A POST with calls that wait for a person (`needs_approval`): answered
/// with a stream that carries at once the questions (`elicitation/create`)
/// and whatever else the proxy answered here, then the answers to what was
/// forwarded, and each asked call's outcome once the client answers its
/// question in another POST (the call forwarded and its result relayed, or
/// its refusal), or its deadline passes (refused). The stream ends when
/// all of them are done.
fn ask(
    gw: &Arc<Gateway>,
    proxy: &Session,
    connection: &str,
    headers: HeaderMap,
    local: Vec<String>,
    forward: Option<String>,
    (asked, questions): (Vec<(String, u64)>, Vec<Question>),
) -> Reply {
    let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    let mut answers = Vec::new();
    let mut waiters = gw.waiters.lock().ok();
    for (eid, deadline) in asked {
        // Kept before the question is sent, so that no answer can come
        // before its waiter. (Without the table, poisoned, the waiter is
        // dropped: the question expires at once, refused.)
        let (waiter, answer) = tokio::sync::oneshot::channel();
        let key = waiter_key(connection, &eid);
        if let Some(w) = waiters.as_mut() {
            w.insert(key.clone(), waiter);
        }
        answers.push((key, eid, deadline, answer));
    }
    drop(waiters);
    for q in questions {
        let key = waiter_key(connection, &q.eid);
        if !gw.ask_person(key.clone(), &q) {
            // Not asked: its waiter goes, and the question expires at once.
            if let Ok(mut w) = gw.waiters.lock() {
                w.remove(&key);
            }
        }
    }
    let (gw, proxy) = (Arc::clone(gw), Arc::clone(proxy));
    tokio::spawn(async move {
        let mut open = true;
        for t in &local {
            open = open && tx.send(sse_event(t)).await.is_ok();
        }
        for (key, eid, deadline, answer) in answers {
            let wait = Waiting {
                gw: Arc::clone(&gw),
                proxy: Arc::clone(&proxy),
                headers: headers.clone(),
                key,
                eid,
                deadline,
            };
            tokio::spawn(wait.outcome(answer, tx.clone()));
        }
        if let Some(forward) = forward {
            deliver(&gw, &headers, &proxy, forward, tx).await;
        }
    });
    sse_reply(200, rx)
}

/// A question awaiting its answer, and what its call needs once answered.
struct Waiting {
    gw: Arc<Gateway>,
    proxy: Session,
    /// The asking POST's headers (its session, protocol version and
    /// authorization), for forwarding the call once approved.
    headers: HeaderMap,
    key: String,
    eid: String,
    deadline: u64,
}

impl Waiting {
    /// Reads what came for the question (`None`: nothing, by the
    /// deadline): the proxy's outs, and whether the question is settled; a
    /// question still asked gets a new waiter in `answer`. `None` when the
    /// session's lock is poisoned.
    fn settle(
        &self,
        came: Option<Answer>,
        answer: &mut tokio::sync::oneshot::Receiver<Answer>,
    ) -> Option<(Vec<Out>, bool)> {
        let mut p = self.proxy.lock().ok()?;
        let came = came.or_else(|| {
            // Past the deadline no answer is handed over any more; one
            // handed over just before is still read.
            if let Ok(mut waiters) = self.gw.waiters.lock() {
                waiters.remove(&self.key);
            }
            answer.try_recv().ok()
        });
        let outs = match came {
            Some(Answer::Person(yes)) => p.on_person(&self.eid, yes, now()),
            Some(Answer::Client(text)) if p.asks(&self.eid).is_some() => {
                p.on_client(text.as_bytes(), now())
            }
            Some(Answer::Client(_)) => Vec::new(),
            None => p.expire(&self.eid, now()),
        };
        if p.asks(&self.eid).is_none() {
            return Some((outs, true));
        }
        // Still asked (what came did not answer it): wait on with a new
        // waiter until the deadline, which then refuses it.
        let (waiter, again) = tokio::sync::oneshot::channel();
        if let Ok(mut w) = self.gw.waiters.lock() {
            w.insert(self.key.clone(), waiter);
        }
        *answer = again;
        Some((outs, false))
    }

    /// Waits for the answer until the deadline, then writes the call's
    /// outcome into `tx`: the server's answer once approved, the refusal
    /// otherwise (`approval-refused`, the attempt counted), nothing once
    /// the call was cancelled (its reservation given back).
    async fn outcome(
        self,
        mut answer: tokio::sync::oneshot::Receiver<Answer>,
        tx: tokio::sync::mpsc::Sender<Bytes>,
    ) {
        let outs = loop {
            let wait = Duration::from_millis(self.deadline.saturating_sub(now()));
            let came = tokio::time::timeout(wait, &mut answer)
                .await
                .ok()
                .and_then(Result::ok);
            let Some((outs, done)) = self.settle(came, &mut answer) else {
                return;
            };
            if done {
                break outs;
            }
            for out in outs {
                if let Out::Client(t) = out {
                    let _ = tx.send(sse_event(&t)).await;
                }
            }
        };
        let mut open = true;
        for out in outs {
            match out {
                Out::Client(t) => open = open && tx.send(sse_event(&t)).await.is_ok(),
                Out::Server(line) => {
                    deliver(&self.gw, &self.headers, &self.proxy, line, tx.clone()).await;
                }
                Out::Withdraw { why, .. } => self.gw.withdraw_person(self.key.clone(), &why),
                Out::Ask(_) => {}
            }
        }
    }
}

/// POSTs `forward` (what the proxy let through) upstream and writes the
/// answers to its requests into the stream `tx` as events: the upstream's
/// own stream relayed, a JSON answer as one event, a failure as an error
/// for each request (its reservation rolled back).
async fn deliver(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    proxy: &Session,
    forward: String,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let ids = request_ids(&forward);
    let rb = upstream_request(
        gw,
        reqwest::Method::POST,
        headers,
        "application/json, text/event-stream",
    )
    .header("content-type", "application/json")
    .body(forward);
    let texts = match send(gw, rb).await {
        Err((ran, why)) => fail_pending(proxy, &ids, ran, &why),
        Ok(resp) if resp.status().is_success() && is_sse(resp.headers()) => {
            let upstream = gw.upstream.clone();
            relay(resp, Arc::clone(proxy), ids, Vec::new(), tx, upstream).await;
            return;
        }
        Ok(resp) if !resp.status().is_success() => {
            let why = format!("at {} answered HTTP {}", gw.upstream, resp.status());
            fail_pending(proxy, &ids, Ran::Maybe, &why)
        }
        Ok(mut resp) => match read_upstream(&mut resp, MAX_BODY).await {
            Ok(Some(body)) => {
                let mut texts = proxy
                    .lock()
                    .map(|mut p| to_client(p.on_server(&body, now())))
                    .unwrap_or_default();
                texts.extend(fail_pending(
                    proxy,
                    &ids,
                    Ran::Maybe,
                    "answered without answering every request",
                ));
                texts
            }
            Ok(None) => fail_pending(
                proxy,
                &ids,
                Ran::Maybe,
                &format!("answered with more than {} MiB (withheld)", MAX_BODY >> 20),
            ),
            Err(e) => fail_pending(
                proxy,
                &ids,
                Ran::Maybe,
                &format!("broke off its answer ({e})"),
            ),
        },
    };
    for t in texts {
        if tx.send(sse_event(&t)).await.is_err() {
            break;
        }
    }
}

fn sse_reply(status: u16, rx: tokio::sync::mpsc::Receiver<Bytes>) -> Reply {
    let mut r = Response::new(ChannelBody(rx).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}

/// Relays the upstream's SSE stream to the client, each event's data
/// through the proxy; at its end, the requests of `ids` still unanswered
/// are answered with errors. A client that went away stops being written
/// to, but the stream is read to its end (its answers are counted).
async fn relay(
    mut resp: reqwest::Response,
    proxy: Session,
    ids: Vec<String>,
    local: Vec<String>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    upstream: String,
) {
    let mut open = true;
    for t in &local {
        if tx.send(sse_event(t)).await.is_err() {
            open = false;
        }
    }
    let mut parser = SseParser::default();
    let ending = loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break None,
            Err(e) => break Some(format!("at {upstream} broke off its stream ({e})")),
        };
        for event in parser.feed(&chunk) {
            let out = match event {
                SseItem::Event { raw, data, fields } => {
                    let replaced = proxy
                        .lock()
                        .map(|mut p| to_client(p.on_server(data.as_bytes(), now())))
                        .unwrap_or_default();
                    match replaced.as_slice() {
                        [same] if *same == data => raw,
                        // Dropped (the answer to a cancelled call, a line
                        // that is not JSON-RPC), as over stdio.
                        [] => continue,
                        [new, ..] => {
                            let mut text = fields;
                            text.push_str("data: ");
                            text.push_str(new);
                            text.push_str("\n\n");
                            Bytes::from(text)
                        }
                    }
                }
                SseItem::Other(raw) => raw,
                SseItem::TooLong => {
                    // Its id is not read. When one request of this POST is
                    // still awaited, the event is its answer: the call ran
                    // (counted, withheld); otherwise the requests still
                    // awaited are counted when the stream ends.
                    let awaited: Vec<String> = proxy
                        .lock()
                        .map(|p| ids.iter().filter(|id| p.awaits(id)).cloned().collect())
                        .unwrap_or_default();
                    let why = format!(
                        "sent an event longer than {} MiB (withheld)",
                        MAX_BODY >> 20
                    );
                    let answers = match awaited.as_slice() {
                        [_] => fail_pending(&proxy, &awaited, Ran::Maybe, &why),
                        _ => {
                            eprintln!("budgetgate mcp: the upstream {why}");
                            Vec::new()
                        }
                    };
                    for t in answers {
                        if open && tx.send(sse_event(&t)).await.is_err() {
                            open = false;
                        }
                    }
                    continue;
                }
            };
            if open && tx.send(out).await.is_err() {
                open = false;
            }
        }
    };
    let why = ending.unwrap_or_else(|| "ended its stream before answering".into());
    for t in fail_pending(&proxy, &ids, Ran::Maybe, &why) {
        if open && tx.send(sse_event(&t)).await.is_err() {
            open = false;
        }
    }
}

async fn get(gw: &Arc<Gateway>, req: Request<Incoming>) -> Reply {
    let key = session_key(&req);
    let rb = upstream_request(gw, reqwest::Method::GET, req.headers(), "text/event-stream");
    let mut resp = match send(gw, rb).await {
        Ok(r) => r,
        Err((_, why)) => {
            return error_reply(
                StatusCode::BAD_GATEWAY,
                GATEWAY_ERROR,
                &format!("budgetgate: the upstream MCP server {why}"),
            )
        }
    };
    let status = resp.status();
    let up_headers = resp.headers().clone();
    if status.is_success() && is_sse(&up_headers) {
        let Some((proxy, _)) = gw.session(&key) else {
            return error_reply(
                StatusCode::SERVICE_UNAVAILABLE,
                GATEWAY_ERROR,
                &format!("budgetgate: more than {MAX_SESSIONS} MCP sessions are open"),
            );
        };
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        let upstream = gw.upstream.clone();
        tokio::spawn(relay(resp, proxy, Vec::new(), Vec::new(), tx, upstream));
        return with_headers(sse_reply(status.as_u16(), rx), &up_headers);
    }
    pass_on(&mut resp, status, &up_headers).await
}

async fn pass_on(resp: &mut reqwest::Response, status: StatusCode, up: &HeaderMap) -> Reply {
    let body = read_upstream(resp, MAX_ERROR_BODY)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    let ct = content_type(up);
    let ct = if ct.is_empty() {
        "text/plain".into()
    } else {
        ct
    };
    with_headers(full(status, &ct, body), up)
}

async fn delete(gw: &Arc<Gateway>, req: Request<Incoming>) -> Reply {
    let key = session_key(&req);
    let rb = upstream_request(gw, reqwest::Method::DELETE, req.headers(), "*/*");
    let sent = send(gw, rb).await;
    // The session ends here whatever the upstream says: calls still running
    // count (they may have run).
    if !key.is_empty() {
        if let Some(p) = gw.forget(&key) {
            if let Ok(mut p) = p.lock() {
                p.on_client_closed(now());
            }
        }
    }
    match sent {
        Ok(mut resp) => {
            let status = resp.status();
            let up = resp.headers().clone();
            pass_on(&mut resp, status, &up).await
        }
        Err((_, why)) => error_reply(
            StatusCode::BAD_GATEWAY,
            GATEWAY_ERROR,
            &format!("budgetgate: the upstream MCP server {why}"),
        ),
    }
}

// ------------------------------------------------------------------ command

/// The address of `--listen`: `PORT` (on 127.0.0.1) or `HOST:PORT`.
pub fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("--listen {text}: not PORT or HOST:PORT with an IP address (127.0.0.1:8080, [::1]:8080)")
    })
}

/// Checks the upstream URL: `http://HOST[:PORT]/PATH` (no TLS in this
/// build).
pub fn upstream_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("--upstream {text}: {e}"))?;
    match url.scheme() {
        "http" if url.host().is_some() => Ok(url),
        "https" => Err(format!(
            "--upstream {text}: https is not supported by this build (no TLS); put a TLS-terminating proxy on this machine in front of it, or use http://"
        )),
        _ => Err(format!("--upstream {text}: not an http:// URL")),
    }
}

/// The default session of an upstream URL: `mcp-`, its host and 16 hex
/// digits of a 64-bit FNV-1a hash of the host and the whole URL.
pub fn default_session(url: &reqwest::Url) -> String {
    crate::mcp::default_session(&[
        url.host_str().unwrap_or("").to_owned(),
        url.as_str().to_owned(),
    ])
}

/// `budgetgate mcp --listen ADDR --upstream URL`: serves until SIGINT or
/// SIGTERM (exit 0, calls in flight counted); exit 2 when it cannot start.
pub fn command(args: &McpArgs, upstream: &str) -> ExitCode {
    let fail = |what: String| {
        eprintln!(
            "budgetgate mcp: {}; not started (fail closed)",
            crate::term::terminal_safe(&what)
        );
        ExitCode::from(2)
    };
    let addr = match args.listen.as_deref().map(listen_addr) {
        Some(Ok(a)) => a,
        Some(Err(e)) => return fail(e),
        None => return fail("--upstream needs --listen ADDR".into()),
    };
    let url = match upstream_url(upstream) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let Setup {
        gate,
        max_result_bytes,
    } = match crate::mcp::setup(args, default_session(&url)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("the async runtime: {e}")),
    };
    let connection = format!("{}-{}", std::process::id(), now());
    let gw = match Gateway::new(
        url.to_string(),
        gate,
        max_result_bytes,
        Duration::from_secs(args.upstream_timeout),
        Duration::from_secs(args.approval_timeout),
        connection,
        crate::mcp::asking_terminal(args),
    ) {
        Ok(g) => Arc::new(g),
        Err(e) => return fail(e),
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => return fail(format!("--listen {addr}: {e}")),
        };
        let bound = listener.local_addr().unwrap_or(addr);
        if !bound.ip().is_loopback() {
            eprintln!("budgetgate mcp: warning: listening on {bound}, not loopback: anyone who reaches it spends this budget");
        }
        eprintln!("budgetgate mcp: listening on http://{bound}{PATH}, upstream {url}");
        serve(listener, Arc::clone(&gw)).await;
        gw.close_all();
        eprintln!("budgetgate mcp: stopped");
        ExitCode::SUCCESS
    })
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
    }

    /// How often [`Self::renew_all`] runs: half the renewal period, within
    /// 50 ms and 60 s.
    fn renew_tick(&self) -> Duration {
        let every = self
            .gate
            .renew_every_ms()
            .unwrap_or(60_000)
            .div_ceil(2)
            .clamp(50, 60_000);
        Duration::from_millis(every)
    }
}

/// Accepts connections on `listener` until SIGINT or SIGTERM.
pub async fn serve(listener: tokio::net::TcpListener, gw: Arc<Gateway>) {
    let Ok(bound) = listener.local_addr() else {
        eprintln!("budgetgate mcp: the listening address cannot be read; stopped");
        return;
    };
    let renewing = Arc::clone(&gw);
    let renewer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(renewing.renew_tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            renewing.renew_all();
        }
    });
    serve_connections(listener, gw, bound).await;
    renewer.abort();
}

async fn serve_connections(listener: tokio::net::TcpListener, gw: Arc<Gateway>, bound: SocketAddr) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (stream, _) = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("budgetgate mcp: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let gw = Arc::clone(&gw);
        tokio::spawn(async move {
            // A connection holds one of MAX_CONNECTIONS slots: one that
            // sends nothing gives it up after FIRST_BYTE_MS, one that sends
            // its request head slowly after HEAD_TIMEOUT_S, so idle
            // connections cannot lock other clients out for long.
            let mut first = [0u8; 1];
            let first_byte = tokio::time::timeout(
                Duration::from_millis(FIRST_BYTE_MS),
                stream.peek(&mut first),
            )
            .await;
            if !matches!(first_byte, Ok(Ok(n)) if n > 0) {
                drop(permit);
                return;
            }
            let service =
                hyper::service::service_fn(move |req| handle(Arc::clone(&gw), bound, req));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(HEAD_TIMEOUT_S))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway in front of nothing, on a ledger in a new folder (kept
    /// while the folder is).
    fn gateway(budget: crate::gate::budget_file::ReplayBudget) -> (tempfile::TempDir, Gateway) {
        let dir = tempfile::tempdir().expect("dir");
        let store = crate::ledger::Store::open(dir.path(), Duration::from_secs(5)).expect("ledger");
        let gate = LedgerGate::new(store, budget, "s".into(), 60_000);
        let gw = Gateway::new(
            "http://127.0.0.1:1/mcp".into(),
            gate,
            4096,
            Duration::from_secs(1),
            Duration::from_secs(1),
            "t".into(),
            None,
        )
        .expect("gateway");
        (dir, gw)
    }

    /// Bounded memory (docs/MCP.md, "Streamable HTTP"): at most
    /// [`MAX_SESSIONS`] proxies; a new session takes the place of the least
    /// recently used idle one, never of one with a request in flight.
    #[test]
    fn sessions_are_bounded_and_the_least_recently_used_idle_one_gives_way() {
        let (_dir, gw) = gateway(Default::default());
        for i in 0..MAX_SESSIONS {
            assert!(gw.session(&format!("s{i}")).is_some());
        }
        let (busy, _) = gw.session("s0").expect("s0");
        let outs = busy
            .lock()
            .expect("lock")
            .on_client(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 1);
        assert!(matches!(outs.as_slice(), [Out::Server(_)]));
        // s1 is now the least recently used, and idle.
        assert!(gw.session("new").is_some());
        let held = |k: &str| gw.sessions.lock().expect("lock").map.contains_key(k);
        assert!(held("s0") && held("new") && held("s2"));
        assert!(!held("s1"));
        assert_eq!(gw.sessions.lock().expect("lock").map.len(), MAX_SESSIONS);
    }

    /// Approval over HTTP (docs/MCP.md, "Streamable HTTP"): a client's
    /// answer to one of the gateway's questions, or its cancelling of the
    /// call asked about, goes to the task that asked; everything else in
    /// the body stays, a batch a batch.
    #[test]
    fn answers_to_the_gateways_questions_go_to_the_task_that_asked() {
        let budget = crate::gate::budget_file::parse_budget(
            "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"mail\"]\n",
        )
        .expect("budget");
        let (_dir, gw) = gateway(budget);
        let (proxy, _) = gw.session("s").expect("session");
        let mut p = proxy.lock().expect("lock");
        p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, 1);
        let call = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"mail","arguments":{{"n":{id}}}}}}}"#
            )
        };
        p.on_client(call(1).as_bytes(), 1);
        p.on_client(call(2).as_bytes(), 1);
        let mut asked: Vec<String> = p.asking().into_iter().map(|(eid, _)| eid).collect();
        asked.sort();
        let mut waiting = Vec::new();
        for eid in &asked {
            let (tx, rx) = tokio::sync::oneshot::channel();
            gw.waiters
                .lock()
                .expect("lock")
                .insert(waiter_key(p.connection(), eid), tx);
            waiting.push(rx);
        }
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"action":"accept"}}}}"#,
            asked[0]
        );
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#;
        let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
        // Not an answer: the body as it came. Nor is a message to a
        // question's id that is not a JSON-RPC 2.0 result or error: the
        // proxy answers it (-32600) and the question goes on.
        for bad in [
            format!(
                r#"{{"jsonrpc":"1.0","id":{},"result":{{"action":"accept"}}}}"#,
                asked[0]
            ),
            format!(r#"{{"id":{},"result":{{"action":"accept"}}}}"#, asked[0]),
            format!(r#"{{"jsonrpc":"2.0","id":{},"result":null}}"#, asked[0]),
            format!(r#"{{"jsonrpc":"2.0","id":{}}}"#, asked[0]),
        ] {
            assert!(
                matches!(
                    route_answers(&gw, &p, bad.as_bytes()),
                    Some(Cow::Borrowed(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            route_answers(&gw, &p, ping.as_bytes()),
            Some(Cow::Borrowed(_))
        ));
        let batch = format!("[{answer}, {ping},{cancel}]");
        let rest = route_answers(&gw, &p, batch.as_bytes()).expect("the ping is left");
        assert_eq!(
            std::str::from_utf8(&rest).expect("text"),
            format!("[{ping}]")
        );
        assert_eq!(
            waiting[0].try_recv().expect("handed over"),
            Answer::Client(answer.clone())
        );
        let got = waiting[1].try_recv().expect("handed over");
        assert_eq!(got, Answer::Client(cancel.into()));
        assert!(gw.waiters.lock().expect("lock").is_empty());
        // A waiter gone (its deadline passed): the answer stays in the body,
        // and the proxy drops it as its own.
        assert!(matches!(
            route_answers(&gw, &p, answer.as_bytes()),
            Some(Cow::Borrowed(_))
        ));
        assert_eq!(route_answers(&gw, &p, b"[]").as_deref(), Some(&b"[]"[..]));
    }

    #[test]
    fn a_post_may_be_answered_with_a_stream_when_it_accepts_one() {
        let accepts = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(ACCEPT, HeaderValue::from_str(v).expect("value"));
            }
            accepts_stream(&h)
        };
        assert!(accepts(&["application/json, text/event-stream"]));
        assert!(accepts(&["application/json", "Text/Event-Stream;q=0.5"]));
        assert!(accepts(&["*/*"]) && accepts(&["text/*"]));
        assert!(!accepts(&["application/json"]) && !accepts(&[]));
        assert!(!accepts(&["text/event-streams"]));
    }

    #[test]
    fn request_ids_are_those_of_requests_only() {
        assert_eq!(
            request_ids(r#"{"jsonrpc":"2.0","id":"\u0061","method":"x"}"#),
            ["\"a\""]
        );
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"x"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"result":{}}]"#;
        assert_eq!(request_ids(batch), ["1"]);
    }

    #[test]
    fn answers_merge_into_one_body() {
        assert_eq!(merged(&["{\"a\":1}".into()]), "{\"a\":1}");
        assert_eq!(
            merged(&["{\"a\":1}".into(), "[{\"b\":2},{\"c\":3}]".into()]),
            "[{\"a\":1},{\"b\":2},{\"c\":3}]"
        );
    }

    #[test]
    fn listen_addresses_default_to_loopback_and_upstreams_are_http() {
        assert_eq!(
            listen_addr("8080"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 8080)))
        );
        assert!(listen_addr("[::1]:9").is_ok());
        assert!(listen_addr("localhost:80").is_err());
        assert!(upstream_url("http://127.0.0.1:3001/mcp").is_ok());
        assert!(upstream_url("https://example.com/mcp")
            .unwrap_err()
            .contains("no TLS"));
        assert!(upstream_url("ftp://x/").is_err());
        let loopback: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
            "127.0.0.1",
        ] {
            assert!(allowed_host(host, loopback), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1:8080",
            "",
            "[::2]:8080",
            "127.0.0.1.evil.example",
        ] {
            assert!(!allowed_host(host, loopback), "{host}");
        }
        let lan: SocketAddr = "192.0.2.7:8080".parse().expect("addr");
        assert!(allowed_host("192.0.2.7:8080", lan));
        assert!(!allowed_host("evil.example", lan));
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert!(allowed_host("gateway.example:8080", any));
        assert!(local_origin("http://localhost:6274"));
        assert!(local_origin("http://[::1]"));
        assert!(!local_origin("http://evil.example"));
        assert!(!local_origin("http://127.0.0.1.evil.example"));
    }
}
