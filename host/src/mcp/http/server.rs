//! The client's side: connections accepted (bounded, idle ones closed)
//! until SIGINT or SIGTERM, and each request routed ([`handle`]): POST
//! through the proxy to the upstream, GET and DELETE passed on.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_LENGTH, HOST};
use hyper::{Method, Request, StatusCode};

use super::body::{
    error_reply, fail_pending, full, json_reply, merged, read_bounded, request_ids, sse_reply,
    to_client, too_large, ReadError,
};
use super::questions::{ask, route_answers};
use super::sessions::waiter_key;
use super::upstream::{
    content_type, is_sse, pass_on, read_upstream, relay, send, upstream_request, with_headers,
};
use super::{
    now, Gateway, Reply, Session, CLIENT_TIMEOUT_S, EVENT_QUEUE, MAX_BODY, MAX_DRAIN,
    MAX_ERROR_BODY, MAX_SESSIONS, PATH,
};
use crate::mcp::generation::HEADER_MISMATCH;
use crate::mcp::{Generation, Out, Ran, GATEWAY_ERROR, INVALID_REQUEST, PARSE_ERROR};

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

pub use crate::net::{allowed_host, local_origin};

fn session_key(req: &Request<Incoming>) -> String {
    req.headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
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
    if let Err(m) = super::headers::check(&headers, &body) {
        return json_reply(
            StatusCode::BAD_REQUEST,
            crate::mcp::error_line(&m.id, HEADER_MISMATCH, &m.message),
        );
    }
    // A stateless request without a session (2026-07-28) gets a proxy of
    // its own, never kept: the gateway invents no session for it.
    let stateless = key.is_empty()
        && std::str::from_utf8(&body)
            .is_ok_and(|t| Generation::of_text(t) == Generation::Stateless);
    let found = if stateless {
        Some((gw.stateless(), true))
    } else {
        gw.session(&key)
    };
    let Some((proxy, kept)) = found else {
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
pub(super) fn accepts_stream(headers: &HeaderMap) -> bool {
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

/// Accepts connections on `listener` until SIGINT or SIGTERM.
pub async fn serve(listener: tokio::net::TcpListener, gw: Arc<Gateway>) {
    let renewing = Arc::clone(&gw);
    let renewer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(renewing.renew_tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            renewing.renew_all();
        }
    });
    let handler = move |bound, req| {
        let gw = Arc::clone(&gw);
        async move {
            match handle(gw, bound, req).await {
                Ok(reply) => reply,
                Err(never) => match never {},
            }
        }
    };
    crate::net::serve(listener, "mcp", handler).await;
    renewer.abort();
}
