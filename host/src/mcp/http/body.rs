//! The bodies the gateway reads and writes: replies built, a client's
//! body read within its bound, the messages of a body (request ids,
//! answers merged into one body, SSE events), and the requests still
//! awaited answered with errors.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::value::RawValue;

use super::{now, Reply, Session, MAX_BODY, MAX_DRAIN};
use crate::mcp::{error_line, normal_id, Message, Out, Ran, INVALID_REQUEST};

pub(super) use crate::net::{full, ChannelBody};

pub(super) fn json_reply(status: StatusCode, body: String) -> Reply {
    full(status, "application/json", body)
}

pub(super) fn error_reply(status: StatusCode, code: i64, message: &str) -> Reply {
    json_reply(status, error_line("null", code, message))
}

pub(super) enum ReadError {
    TooLarge,
    Failed(String),
}

/// Reads `body` up to `max` bytes; past that reads on (at most
/// [`MAX_DRAIN`] bytes, dropped as they come) so the client sees the answer.
pub(super) async fn read_bounded(mut body: Incoming, max: usize) -> Result<Vec<u8>, ReadError> {
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

pub(super) fn too_large() -> Reply {
    error_reply(
        StatusCode::PAYLOAD_TOO_LARGE,
        INVALID_REQUEST,
        &format!(
            "Invalid Request: a body longer than {} MiB was refused",
            MAX_BODY >> 20
        ),
    )
}

/// The ids (compact JSON) of the requests in `text`, one message or a batch.
pub(super) fn request_ids(text: &str) -> Vec<String> {
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
pub(super) fn to_client(outs: Vec<Out>) -> Vec<String> {
    outs.into_iter()
        .filter_map(|o| match o {
            Out::Client(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// Answers every request of `ids` the proxy still awaits, naming `why`
/// (through the proxy,
/// [`Proxy::on_no_answer`](crate::mcp::Proxy::on_no_answer): a call is
/// counted unless `ran` says it never reached the upstream).
pub(super) fn fail_pending(proxy: &Session, ids: &[String], ran: Ran, why: &str) -> Vec<String> {
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
pub(super) fn merged(texts: &[String]) -> String {
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

pub(super) fn sse_event(data: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {data}\n\n"))
}

pub(super) fn sse_reply(status: u16, rx: tokio::sync::mpsc::Receiver<Bytes>) -> Reply {
    let mut r = Response::new(ChannelBody::new(rx).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}
