//! `budgetgate proxy`: the gate in front of the model API (`SPEC C`,
//! `SPEC E`; `docs/PROXY.md`). It serves the model API on loopback and
//! forwards to the upstream; before each model call the core engine
//! decides (model calls, tokens, cost, time, and in reserve mode the call's
//! worst case), so a call the budget does not allow never reaches the
//! upstream; the response's usage is read on the way back and counted.
//!
//! * **Gated:** `POST /v1/messages` (Anthropic), `POST /v1/chat/completions`
//!   and `POST /v1/responses` (OpenAI), streamed or not. Everything else
//!   (`count_tokens`, model lists, …) is passed through ungated.
//! * **TLS** to an `https://` upstream with rustls: the system's roots,
//!   `--upstream-ca FILE` for a private CA, certificate and host name
//!   verified; a failed verification answers `502` naming the cause.
//! * **Passed through unchanged**, headers and body, but for: hop-by-hop
//!   headers and `Accept-Encoding` (the proxy asks for an answer it can
//!   read); a streamed Chat Completions call whose client did not ask for
//!   usage gets `stream_options.include_usage`, and its usage chunk is kept
//!   from the client.
//! * **Whose budget:** `X-Claude-Code-Session-Id` when the request has one,
//!   else the header named by `--session-header`, else `--session`.
//! * **A refusal** is the provider's own error shape with status 402
//!   (Anthropic's `billing_error`) and `x-should-retry: false`, which the
//!   official SDKs and Claude Code do not send again; its message names the
//!   limit and what was used.
//! * **Never free, never lost:** a call let through is stored as a
//!   reservation before it is forwarded; its response's usage commits it; a
//!   stream cut off counts what was reported (or, with nothing reported,
//!   the call's charge: its reservation, or its input bound); a proxy
//!   killed mid-call leaves the reservation to expire and be counted.

pub mod api;
pub mod gate;
mod relay;

pub use relay::MAX_TOKENS_HEADER;
use relay::{not_counted, relay, Tap};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use hyper::{Method, Request, StatusCode};

use crate::gate::backend::{open_ledger, Backend};
use crate::gate::budget_file::ReplayBudget;
use crate::gate::clock::now_ms;
use crate::net::{self, ReadError, Reply};
use crate::store::Durability;
use api::{Api, Refused};
use budgetgate_core::engine;
use budgetgate_core::turn::RefusalReason;
use gate::{Admission, ModelGate, Outcome, Ticket};

/// Largest request body read by default (64 MiB: a long conversation with
/// images; `--max-request-mib`).
pub const MAX_REQUEST: usize = 64 << 20;

/// How many of the largest request bodies may be held at once, over every
/// request being read or forwarded: past that many bytes a request is
/// refused `503` until others are done, so that many large bodies at once
/// cannot take the machine's memory (256 MiB by default).
pub const HELD_REQUESTS: usize = 4;

/// How long a client may take to send a request's body.
const BODY_DEADLINE: Duration = Duration::from_secs(60);

/// Largest whole (not streamed) answer read for its usage (64 MiB); a
/// longer one is relayed all the same and counted at its charge.
pub const MAX_ANSWER: usize = 64 << 20;

/// Chunks queued towards a client that reads slowly; when full, the proxy
/// stops reading the upstream.
pub const CHUNK_QUEUE: usize = 32;

/// The header Claude Code names its session in.
pub const CLAUDE_CODE_SESSION: &str = "x-claude-code-session-id";

/// How the proxy is set up (`budgetgate proxy`'s options).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The upstream's base URL.
    pub upstream: String,
    /// The budget file, if any.
    pub budget: Option<std::path::PathBuf>,
    /// The ledger URL (`--ledger`).
    pub ledger: Option<String>,
    /// The session of requests that name none.
    pub session: String,
    /// A header that names the session, after Claude Code's.
    pub session_header: Option<String>,
    /// How durable each decision is in a SQLite ledger.
    pub durability: Durability,
    /// How long a call may take, from its request to its last byte.
    pub call_timeout: Duration,
    /// How long past its deadline a call no proxy counted (its proxy was
    /// killed) holds its place before it is counted as spent.
    pub orphan_grace: Duration,
    /// A PEM file of certificates trusted beside the system's (a private
    /// CA of an HTTPS upstream).
    pub upstream_ca: Option<std::path::PathBuf>,
    /// The largest request body read (bytes; [`MAX_REQUEST`] by default).
    pub max_request: usize,
}

/// The running proxy.
pub struct Proxy {
    gate: ModelGate,
    client: reqwest::Client,
    upstream: reqwest::Url,
    session: String,
    session_header: Option<HeaderName>,
    call_timeout: Duration,
    ids: AtomicU64,
    id_prefix: String,
    /// The largest request body read.
    max_request: usize,
    /// The request bytes held ([`HELD_REQUESTS`] × `max_request` at most).
    held: Arc<tokio::sync::Semaphore>,
}

/// Whether `session` may name a session: 1 to 256 characters, no control
/// characters.
pub fn valid_session(session: &str) -> bool {
    !session.is_empty() && session.chars().count() <= 256 && !session.chars().any(char::is_control)
}

impl Proxy {
    /// A proxy as `config` says, on `backend` with `budget`.
    pub fn new(config: &Config, backend: Backend, budget: ReplayBudget) -> Result<Self, String> {
        let upstream = net::upstream_url("--upstream", &config.upstream)?;
        if !valid_session(&config.session) {
            return Err("--session must be 1 to 256 characters without control characters".into());
        }
        let session_header = config
            .session_header
            .as_deref()
            .map(|h| {
                HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| format!("--session-header {h}: not a header name"))
            })
            .transpose()?;
        let client = net::upstream_client(config.upstream_ca.as_deref())?;
        // A reservation outlives any call this proxy lets run.
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let ttl_ms = millis(config.call_timeout).saturating_add(millis(config.orphan_grace));
        Ok(Self {
            gate: ModelGate::new(backend, budget, ttl_ms),
            client,
            upstream,
            session: config.session.clone(),
            session_header,
            call_timeout: config.call_timeout,
            ids: AtomicU64::new(0),
            max_request: config.max_request,
            held: Arc::new(tokio::sync::Semaphore::new(
                HELD_REQUESTS.saturating_mul(config.max_request),
            )),
            id_prefix: format!("proxy-{}-{}", std::process::id(), now_ms()),
        })
    }

    /// The path the upstream gets for a request to `path`: the
    /// `--upstream` URL's own path, then the request's (what is gated is
    /// known by it, and what is forwarded goes to it).
    fn upstream_path(&self, path: &str) -> String {
        format!("{}{path}", self.upstream.path().trim_end_matches('/'))
    }

    /// The session a request counts in.
    fn session_of(&self, headers: &HeaderMap) -> Result<String, String> {
        let named = headers
            .get(CLAUDE_CODE_SESSION)
            .map(|v| (CLAUDE_CODE_SESSION, v))
            .or_else(|| {
                let h = self.session_header.as_ref()?;
                headers.get(h).map(|v| (h.as_str(), v))
            });
        match named {
            None => Ok(self.session.clone()),
            Some((name, value)) => match value.to_str() {
                Ok(s) if valid_session(s) => Ok(s.to_owned()),
                _ => Err(format!(
                    "the {name} header is not a session name (1 to 256 characters, no control characters)"
                )),
            },
        }
    }

    fn next_key(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.id_prefix)
    }
}

/// The proxy's own answer in `api`'s error shape (Anthropic's when the
/// request is not a model call), with `x-should-retry: false` but for an
/// upstream that failed (the call was not made: a client may try again).
fn refusal(api: Api, kind: Refused, code: &str, message: &str) -> Reply {
    let status = StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = net::full(
        status,
        "application/json",
        api::refusal_body(api, kind, code, message),
    );
    let retry = if matches!(kind, Refused::Upstream | Refused::Busy) {
        "true"
    } else {
        "false"
    };
    r.headers_mut()
        .insert("x-should-retry", HeaderValue::from_static(retry));
    r
}

/// Handles one request.
pub async fn handle(proxy: Arc<Proxy>, bound: SocketAddr, req: Request<Incoming>) -> Reply {
    let host_ok = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .is_none_or(|h| net::allowed_host(h, bound));
    if !host_ok {
        return refusal(
            Api::Messages,
            Refused::Forbidden,
            "forbidden",
            "budgetgate: the Host header does not name this proxy",
        );
    }
    if let Some(why) = net::foreign_origin(&req) {
        return refusal(
            Api::Messages,
            Refused::Forbidden,
            "forbidden",
            &format!("budgetgate: {why}"),
        );
    }
    // A path that reaches a model call only once cleaned up (`/v1/./messages`,
    // `/v1//messages`, `/V1/messages`, `%2e`): the URL library or the
    // upstream would make it one, so it is refused rather than passed
    // through ungated (fail closed).
    // The path as the upstream gets it: its own prefix (`--upstream
    // https://host/v1`), then the request's. A model call is known by how
    // it ends, whatever the prefix, so no prefix passes one ungated.
    let full = proxy.upstream_path(req.uri().path());
    let path = full.as_str();
    let post_like = req.method().as_str().eq_ignore_ascii_case("POST");
    if let Some(api) = post_like.then(|| Api::loosely(path)).flatten() {
        if req.method() != Method::POST || Api::of_path(path) != Some(api) {
            return refusal(
                api,
                Refused::Invalid,
                "invalid_request",
                &format!(
                    "budgetgate: the path {:?} is a model call written another way; send it as POST {}",
                    crate::term::terminal_safe(path),
                    api.path()
                ),
            );
        }
    }
    if let Some(endpoint) = post_like.then(|| Api::ungated_billed(path)).flatten() {
        return refusal(
            Api::Messages,
            Refused::Forbidden,
            "ungated_endpoint",
            &format!(
                "budgetgate: POST {endpoint} is billed and cannot be gated (its usage cannot be bounded before it runs), so it is refused; make model calls with {}, {} or {}",
                Api::Messages.path(),
                Api::Chat.path(),
                Api::Responses.path()
            ),
        );
    }
    let gated = (req.method() == Method::POST)
        .then(|| Api::of_path(path))
        .flatten();
    let (parts, body) = req.into_parts();
    let api_for_errors = gated.unwrap_or(Api::Messages);
    let read = tokio::time::timeout(
        BODY_DEADLINE,
        net::read_held(body, proxy.max_request, &proxy.held),
    )
    .await
    .unwrap_or_else(|_| {
        Err(ReadError::Failed(format!(
            "the body was not sent within {} s",
            BODY_DEADLINE.as_secs()
        )))
    });
    // Held until this request is done.
    let (body, _held) = match read {
        Ok(b) => b,
        Err(ReadError::Busy) => {
            return refusal(
                api_for_errors,
                Refused::Busy,
                "busy",
                &format!(
                    "budgetgate: the proxy holds {} MiB of requests already; the call was not made, send it again shortly",
                    (HELD_REQUESTS * proxy.max_request) >> 20
                ),
            )
        }
        Err(ReadError::TooLarge) => {
            return refusal(
                api_for_errors,
                Refused::TooLarge,
                "request_too_large",
                &format!(
                    "budgetgate: the request body is over {} MiB",
                    proxy.max_request >> 20
                ),
            )
        }
        Err(ReadError::Failed(e)) => {
            return refusal(
                api_for_errors,
                Refused::Invalid,
                "invalid_request",
                &format!("budgetgate: reading the request: {e}"),
            )
        }
    };
    let req = Request::from_parts(parts, ());
    match gated {
        None => pass_through(&proxy, &req, body).await,
        Some(api) => gated_call(&proxy, api, &req, body).await,
    }
}

/// The parts of a request the proxy reads (its body read already).
type Head = Request<()>;

async fn pass_through(proxy: &Arc<Proxy>, req: &Head, body: Vec<u8>) -> Reply {
    let rb = forward(proxy, req, body);
    match rb.send().await {
        Ok(resp) => relay(resp, None).await,
        Err(e) => upstream_failed(Api::Messages, &e),
    }
}

fn forward(proxy: &Proxy, req: &Head, body: Vec<u8>) -> reqwest::RequestBuilder {
    let (uri, headers) = (req.uri(), req.headers());
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .unwrap_or(reqwest::Method::POST);
    let mut out = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let n = name.as_str();
        if net::HOP_BY_HOP.contains(&n)
            || matches!(n, "host" | "content-length" | "accept-encoding")
        {
            continue;
        }
        if let (Ok(k), Ok(v)) = (
            reqwest::header::HeaderName::from_bytes(n.as_bytes()),
            reqwest::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append(k, v);
        }
    }
    let mut url = proxy.upstream.clone();
    url.set_path(&proxy.upstream_path(uri.path()));
    url.set_query(uri.query());
    proxy
        .client
        .request(method, url)
        .headers(out)
        .timeout(proxy.call_timeout)
        .body(body)
}

fn upstream_failed(api: Api, e: &reqwest::Error) -> Reply {
    let why = if e.is_timeout() {
        "did not answer in time".to_owned()
    } else if e.is_connect() {
        format!("could not be reached ({})", net::error_chain(e))
    } else {
        format!("failed ({})", net::error_chain(e))
    };
    refusal(
        api,
        Refused::Upstream,
        "upstream_failed",
        &format!("budgetgate: the upstream {why}"),
    )
}

async fn gated_call(proxy: &Arc<Proxy>, api: Api, req: &Head, body: Vec<u8>) -> Reply {
    let session = match proxy.session_of(req.headers()) {
        Ok(s) => s,
        Err(e) => {
            return refusal(
                api,
                Refused::Invalid,
                "invalid_session",
                &format!("budgetgate: {e}"),
            )
        }
    };
    let request = match api::read_request(api, &body) {
        Ok(r) => r,
        Err(e) => {
            return refusal(
                api,
                Refused::Invalid,
                "invalid_request",
                &format!("budgetgate: {e}; the call was not made"),
            )
        }
    };
    if let Some(stop) = stalled(proxy, api, &body) {
        return stop;
    }
    let key = proxy.next_key();
    // A request without a reply bound may get one written in (reserve
    // mode): its input bound counts the bytes that adds.
    let added = if request.max_output.is_none() {
        api::MAX_FIELD_BYTES
    } else {
        0
    };
    // A streamed Chat call without the usage chunk: asked for, then kept
    // from the client; the bytes that adds count in its input bound too.
    let hide_usage = api == Api::Chat && request.stream && !request.include_usage;
    let added = added
        + if hide_usage {
            api::USAGE_OPTION_BYTES
        } else {
            0
        };
    let call = gate::ModelCall {
        model: &request.model,
        max_output: request.max_output,
        input_bound: request.input_bound.saturating_add(added),
        can_set_max_output: true,
        choices: request.choices,
    };
    let ticket = match proxy.gate.admit(&session, &key, &call, now_ms()) {
        Ok(Admission::Go(t)) => t,
        Ok(Admission::Stop(stop)) => {
            // Said where the proxy runs too: an operator sees a session
            // being refused, not only the agent.
            log::info!(
                "budgetgate proxy: refused a model call of session {} ({}, {key})",
                crate::term::terminal_safe(&session),
                stop.reason
            );
            return refusal(
                api,
                Refused::Budget,
                stop.reason.as_str(),
                &stop.detail_for(&request.model).to_string(),
            );
        }
        Err(e) => {
            log::warn!(
                "budgetgate proxy: the ledger could not decide a model call of session {} ({}); refused (fail closed)",
                crate::term::terminal_safe(&session),
                crate::term::terminal_safe(&e)
            );
            return refusal(
                api,
                Refused::Unavailable,
                "ledger_unavailable",
                &format!("budgetgate: the ledger could not decide ({e}); the call is refused (fail closed)"),
            );
        }
    };
    // Reserve mode: the reply bound the call was let through with, when it
    // is not the request's own (lowered to fit, or the budget's
    // `reserve_max_tokens` for a request that sets none).
    let body = match ticket.send_max_output {
        None => body,
        Some(max) => match api::with_max_output(api, &body, max) {
            Some(body) => body,
            None => return not_sent(proxy, &ticket, api, "its reply bound could not be set"),
        },
    };
    let body = if hide_usage {
        match api::with_include_usage(&body) {
            Some(body) => body,
            // Without the usage chunk its output would go uncounted: not
            // sent (fail closed).
            None => {
                return not_sent(
                    proxy,
                    &ticket,
                    api,
                    "it could not be made to report its usage",
                )
            }
        }
    } else {
        body
    };
    let tap = Tap {
        proxy: Arc::clone(proxy),
        ticket,
        request,
        hide_usage,
        deadline: tokio::time::Instant::now() + proxy.call_timeout,
    };
    match forward(proxy, req, body).send().await {
        Ok(resp) => relay(resp, Some(tap)).await,
        Err(e) => {
            // Not reached, or no answer head: a connection that could not
            // be made was not billed; one that timed out may have been.
            let outcome = if e.is_connect() {
                Outcome::NotBilled
            } else {
                Outcome::Unknown
            };
            tap.finish(outcome);
            upstream_failed(api, &e)
        }
    }
}

/// A call let through that the proxy could not rewrite as it must (`why`):
/// not sent, its reservation given back (or, failing that, counted when it
/// expires), and refused.
fn not_sent(proxy: &Proxy, ticket: &Ticket, api: Api, why: &str) -> Reply {
    let _ = proxy.gate.finish(ticket, Outcome::NotBilled, now_ms());
    refusal(
        api,
        Refused::Invalid,
        "invalid_request",
        &format!("budgetgate: the request was let through, but {why}; the call was not made"),
    )
}

/// Under `[loops]`: the refusal of a model call whose request brings the
/// results of a tool call that completed a pattern of calls making no
/// progress, or after the model gave the same text answer `same_answer`
/// times in a row (the engine's words; `no-progress`). The proxy sees a call only
/// after it ran, with its result in the next request, so it stops the
/// model call that would follow it; a request it cannot read the history
/// of is refused (fail closed).
fn stalled(proxy: &Proxy, api: Api, body: &[u8]) -> Option<Reply> {
    let rules = &proxy.gate.budget().loops;
    if !rules.is_on() {
        return None;
    }
    let history = match api::history::tool_history(api, body) {
        Ok(h) => h,
        Err(e) => {
            return Some(refusal(
                api,
                Refused::Invalid,
                "invalid_request",
                &format!("budgetgate: {e}; the call was not made"),
            ))
        }
    };
    // The model's answers (`same_answer`), else the latest tool calls.
    let answers = (!history.new_prompt)
        .then(|| history.answers.check(rules))
        .flatten();
    let (found, tool, how) = match answers {
        Some(found) => (found, None, "the model keeps giving the same answer"),
        None => {
            let latest = history.latest?;
            let (found, tool) = engine::loops::completed(&history.calls, rules, latest)?;
            (
                found,
                Some(tool),
                "the last tool call repeated a pattern that makes no progress, and it returned the same again",
            )
        }
    };
    // The engine's sentence of the pattern; the refusal is of the model
    // call after what ran or was said.
    let reason = RefusalReason::NoProgress.as_str();
    let text = format!(
        "budgetgate refused this model call ({reason}): {how} ({}). Change approach or stop and answer with what you have.",
        found.sentence(tool.as_ref().map_or("", |t| t.as_str()))
    );
    Some(refusal(api, Refused::Budget, reason, &text))
}

/// Serves the proxy until SIGINT or SIGTERM (calls that ended counted,
/// calls in flight left to their reservations, counted when they expire);
/// `Err` says why it cannot start.
pub fn run(config: &Config) -> Result<(), String> {
    let budget = match &config.budget {
        None => ReplayBudget::default(),
        Some(path) => crate::gate::budget_file::read_budget_file(path)?,
    };
    let mut backend = open_ledger(
        config.ledger.as_deref(),
        Duration::from_secs(5),
        config.durability,
    )?;
    backend.check()?;
    // Said once it listens, in replay's words (what a replay adds of its
    // approver and recording has no place here).
    let in_force = crate::gate::budget_report::BudgetReport::new(&budget);
    let proxy = Arc::new(Proxy::new(config, backend, budget)?);
    // Each request keeps its own path (`/v1/messages`): an upstream given
    // with the API's `/v1` (as an SDK's base URL is) doubles it.
    if proxy.upstream.path().trim_end_matches('/').ends_with("/v1") {
        log::warn!(
            "budgetgate proxy: warning: --upstream {} ends in /v1, and each request keeps its own path (/v1/messages, /v1/chat/completions), so calls go to …/v1/v1/…; give the API's root (https://api.openai.com), and the client the proxy's URL (with /v1 where its SDK wants it)",
            net::shown_url(proxy.upstream.as_str())
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the async runtime: {e}"))?;
    let listen = config.listen;
    let upstream = config.upstream.clone();
    runtime.block_on(async move {
        let listener = net::bind(listen, "proxy", "", &upstream).await?;
        for line in std::iter::once(in_force.limits_line()).chain(in_force.cost_line()) {
            log::info!("budgetgate proxy: {line}");
        }
        let gate = Arc::clone(&proxy);
        let handler = move |bound, req| handle(Arc::clone(&proxy), bound, req);
        net::serve(listener, "proxy", handler).await;
        // Calls that ended and wait for their count are counted before the
        // process ends (those still in flight hold their reservations).
        for (key, e) in gate.gate.flush() {
            not_counted(&key, &e);
        }
        log::info!("budgetgate proxy: stopped");
        Ok(())
    })
}
