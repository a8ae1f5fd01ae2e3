//! The upstream's side: requests sent to the upstream MCP server with the
//! client's headers, its answers read within their bound, and its streams
//! relayed to the client through the proxy.

use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::StatusCode;

use super::body::{fail_pending, full, request_ids, sse_event, to_client};
use super::{now, Gateway, Reply, Session, MAX_BODY, MAX_ERROR_BODY};
use crate::mcp::Ran;
use crate::net::sse::{SseItem, SseParser};

/// The request headers passed to the upstream as they came (and every
/// `Mcp-Param-*`: [`PARAM_HEADERS`]).
const REQUEST_HEADERS: [&str; 6] = [
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "authorization",
    "mcp-method",
    "mcp-name",
];

/// The prefix of the headers a 2026-07-28 client mirrors tool arguments
/// into (`x-mcp-header`): passed on as they came.
const PARAM_HEADERS: &str = "mcp-param-";

/// The upstream's response headers passed to the client.
const RESPONSE_HEADERS: [&str; 3] = ["mcp-session-id", "www-authenticate", "mcp-protocol-version"];

/// Reads an upstream body up to `max` bytes; `None` past it.
pub(super) async fn read_upstream(
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

pub(super) fn with_headers(mut reply: Reply, from: &HeaderMap) -> Reply {
    for name in RESPONSE_HEADERS {
        if let Some(v) = from.get(name) {
            reply
                .headers_mut()
                .insert(HeaderName::from_static(name), v.clone());
        }
    }
    reply
}

pub(super) fn upstream_request(
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
    for (name, v) in headers {
        if name.as_str().starts_with(PARAM_HEADERS) {
            rb = rb.header(name.as_str(), v.as_bytes());
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
pub(super) async fn send(
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

use crate::net::error_chain;

pub(super) fn is_sse(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("text/event-stream")
}

pub(super) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// POSTs `forward` (what the proxy let through) upstream and writes the
/// answers to its requests into the stream `tx` as events: the upstream's
/// own stream relayed, a JSON answer as one event, a failure as an error
/// for each request (its reservation rolled back).
pub(super) async fn deliver(
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

/// Relays the upstream's SSE stream to the client, each event's data
/// through the proxy; at its end, the requests of `ids` still unanswered
/// are answered with errors. A client that went away stops being written
/// to, but the stream is read to its end (its answers are counted).
pub(super) async fn relay(
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
    let mut ending = None;
    while ending.is_none() {
        let events = match resp.chunk().await {
            Ok(Some(c)) => parser.feed(&c),
            // Its end: the line its last byte, a CR, ended is read.
            Ok(None) => {
                ending = Some(None);
                parser.finish()
            }
            Err(e) => {
                ending = Some(Some(format!("at {upstream} broke off its stream ({e})")));
                parser.finish()
            }
        };
        for event in events {
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
                // Not made by this reader (it does not relay over-long
                // events: their answers are withheld below).
                SseItem::Overflow(_) => continue,
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
                            log::warn!("budgetgate mcp: the upstream {why}");
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
    }
    let why = ending
        .flatten()
        .unwrap_or_else(|| "ended its stream before answering".into());
    for t in fail_pending(&proxy, &ids, Ran::Maybe, &why) {
        if open && tx.send(sse_event(&t)).await.is_err() {
            open = false;
        }
    }
}

pub(super) async fn pass_on(
    resp: &mut reqwest::Response,
    status: StatusCode,
    up: &HeaderMap,
) -> Reply {
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
