//! The relay of an upstream's answer to the client: a stream as it comes,
//! its usage read on the way ([`UsageReader`]), and the call counted once
//! the answer is written out ([`Tap`]); an answer that broke off breaks
//! off for the client too.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Response, StatusCode};

use super::api::{self, Api, EventUse, ModelRequest, StreamUsage};
use super::gate::{Outcome, Ticket};
use super::{Proxy, CHUNK_QUEUE, MAX_ANSWER};
use crate::gate::clock::now_ms;
use crate::net::sse::{SseItem, SseParser};
use crate::net::{self, ChannelBody, Reply};

/// The answer's header that names the reply bound a call was sent with,
/// when the proxy set it (reserve mode: lowered to fit the token budget,
/// or the budget's `reserve_max_tokens` for a request that sets none).
pub const MAX_TOKENS_HEADER: &str = "x-budgetgate-max-tokens";

/// What a gated call's relay counts.
pub(super) struct Tap {
    pub(super) proxy: Arc<Proxy>,
    pub(super) ticket: Ticket,
    pub(super) request: ModelRequest,
    pub(super) hide_usage: bool,
    /// The call's deadline (`--call-timeout` from its decision): a client
    /// that does not read its answer by then is cut off, so the call is
    /// counted before its reservation expires.
    pub(super) deadline: tokio::time::Instant,
}

impl Tap {
    pub(super) fn finish(&self, outcome: Outcome) {
        if let Err(e) = self.proxy.gate.finish(&self.ticket, outcome, now_ms()) {
            not_counted(&self.ticket.key, &e);
        }
    }

    /// Counts how the call ended once the client's answer is written out
    /// (`written`: the server is done with its body) or [`COUNT_WITHIN`]
    /// has passed (a client slow to read its answer does not hold its
    /// count back), unless the session's next call, come at once, counted
    /// it in its own decision's transaction first.
    async fn finish_soon(self, outcome: Outcome, written: tokio::sync::oneshot::Receiver<()>) {
        let gate = &self.proxy.gate;
        gate.finish_soon(self.ticket, outcome, now_ms());
        // Sent or dropped: either way the server is done with the body.
        let _ = tokio::time::timeout(COUNT_WITHIN, written).await;
        for (key, e) in gate.flush() {
            not_counted(&key, &e);
        }
    }
}

/// How long after its answer ended a call is counted at the latest.
const COUNT_WITHIN: Duration = Duration::from_millis(50);

/// How long the answer's head waits for its first bytes, to leave with
/// them.
const FIRST_BYTES_WAIT: Duration = Duration::from_millis(1);

/// A call's count that failed: its reservation stays stored, and is
/// counted at its charge when it expires.
pub(super) fn not_counted(key: &str, e: &str) {
    log::warn!(
        "budgetgate proxy: counting call {key}: {}; its reservation will be counted when it expires",
        crate::term::terminal_safe(e)
    );
}

/// Relays the upstream's answer as it comes; for a gated call, reads its
/// usage on the way and counts it at the end.
pub(super) async fn relay(mut resp: reqwest::Response, tap: Option<Tap>) -> Reply {
    let status = resp.status();
    let mut builder = Response::builder().status(status.as_u16());
    let streamed = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    // An answer relayed byte for byte keeps its length (one write for a
    // whole answer, no chunked framing); one whose events are withheld
    // does not, nor one the upstream also sent chunked (the length is then
    // not the body's: HTTP/1.1 says to drop it), nor one whose status has
    // no body.
    let same_bytes = !(streamed && tap.as_ref().is_some_and(|t| t.hide_usage));
    let keep_length = same_bytes
        && !resp.headers().contains_key("transfer-encoding")
        && !status.is_informational()
        && status != reqwest::StatusCode::NO_CONTENT
        && status != reqwest::StatusCode::NOT_MODIFIED;
    for (name, value) in resp.headers() {
        let n = name.as_str();
        if net::HOP_BY_HOP.contains(&n) || (n == "content-length" && !keep_length) {
            continue;
        }
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    if let Some(max) = tap.as_ref().and_then(|t| t.ticket.send_max_output) {
        // Said to the client: the reply bound its call was sent with.
        builder = builder.header(MAX_TOKENS_HEADER, max);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(CHUNK_QUEUE);
    // Set when the upstream's answer broke off (it failed, or the call ran
    // past its deadline): the client's answer then breaks off too.
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let broke = Arc::clone(&broken);
    let mut body = ChannelBody::breakable(rx, broken);
    let written = body.when_done();
    let deadline = tap.as_ref().map(|t| t.deadline);
    let mut reader = UsageReader::new(tap.as_ref(), streamed);
    // The answer's first bytes, when they come at once (a whole answer
    // comes with its head): queued before the head goes out, so that head
    // and body leave together. Waited for a moment at most, so a stream
    // whose first event is slow does not hold its head back.
    let mut early = std::collections::VecDeque::new();
    let mut first = None;
    if let Ok(read) = tokio::time::timeout(FIRST_BYTES_WAIT, resp.chunk()).await {
        match read {
            Ok(Some(chunk)) => {
                for piece in reader.feed(&chunk).into_iter().flatten() {
                    if !early.is_empty() {
                        early.push_back(piece);
                    } else if let Err(full) = tx.try_send(piece) {
                        early.push_back(full.into_inner());
                    }
                }
            }
            end => first = Some(end),
        }
    }
    tokio::spawn(async move {
        // Until the end, or a stream cut (the upstream failed, or the call
        // ran past its deadline), or the client gone: what was reported
        // counts.
        let mut gone = false;
        'relay: loop {
            let pieces = if early.is_empty() {
                let read = match first.take() {
                    Some(end) => end,
                    None => resp.chunk().await,
                };
                let chunk = match read {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(_) => {
                        broke.store(true, std::sync::atomic::Ordering::Release);
                        break;
                    }
                };
                reader.feed(&chunk).into_iter().flatten().collect()
            } else {
                std::mem::take(&mut early)
            };
            for piece in pieces {
                let sent = match deadline {
                    Some(at) => tokio::time::timeout_at(at, tx.send(piece))
                        .await
                        .unwrap_or(Err(tokio::sync::mpsc::error::SendError(Bytes::new()))),
                    None => tx.send(piece).await,
                };
                if sent.is_err() {
                    // The client went away, or did not read by the
                    // deadline: its answer breaks off.
                    broke.store(true, std::sync::atomic::Ordering::Release);
                    gone = true;
                    break 'relay;
                }
            }
        }
        // A line the stream's last byte, a CR, ended: read (what it
        // reported counts), and relayed when the stream goes event by event.
        for piece in reader.finish().into_iter().flatten() {
            if !gone && tx.send(piece).await.is_err() {
                gone = true;
            }
        }
        // A stream relayed event by event that ended inside an event (no
        // blank line after the last): its bytes go on as they came.
        if let (false, Some(rest)) = (gone, reader.rest()) {
            let _ = tx.send(rest).await;
        }
        // A model's stream that ended without its last event (the upstream
        // closed the connection mid-answer) broke off too.
        if status.is_success() && reader.cut_short() {
            broke.store(true, std::sync::atomic::Ordering::Release);
        }
        let broken_off = broke.load(std::sync::atomic::Ordering::Acquire);
        drop(tx);
        if let Some(tap) = tap {
            let usage = reader.usage(tap.request.api);
            let outcome = if !status.is_success() {
                // An error answer is not billed.
                Outcome::NotBilled
            } else if reader.broke_off(usage.is_some(), broken_off || gone) {
                // Cut before its end: what was reported so far is not what
                // was generated.
                Outcome::Cut {
                    reported: usage,
                    answer_bytes: reader.read,
                }
            } else {
                // Nothing reported: the call's charge counts.
                usage.map_or(Outcome::Unknown, Outcome::Billed)
            };
            tap.finish_soon(outcome, written).await;
        }
    });
    builder.body(body.boxed()).unwrap_or_else(|_| {
        net::full(
            StatusCode::BAD_GATEWAY,
            "text/plain",
            "budgetgate: the upstream's answer has headers that cannot be relayed",
        )
    })
}

/// Reads a gated answer's usage as it passes: a stream event by event, a
/// whole answer kept up to [`MAX_ANSWER`] bytes.
struct UsageReader {
    api: Option<Api>,
    hide_usage: bool,
    streamed: bool,
    sse: SseParser,
    stream: StreamUsage,
    whole: Vec<u8>,
    whole_over: bool,
    /// The answer's bytes read so far.
    read: u64,
}

impl UsageReader {
    fn new(tap: Option<&Tap>, streamed: bool) -> Self {
        Self {
            api: tap.map(|t| t.request.api),
            hide_usage: tap.is_some_and(|t| t.hide_usage),
            streamed,
            // The events' bytes are needed only to relay them one by one
            // (then one over the bound is relayed as it comes, unread);
            // otherwise an event is read up to the bound of a whole answer.
            sse: if tap.is_some_and(|t| t.hide_usage) {
                SseParser::relaying()
            } else {
                SseParser::without_raw().with_limit(MAX_ANSWER)
            },
            stream: StreamUsage::default(),
            whole: Vec::new(),
            whole_over: false,
            read: 0,
        }
    }

    /// What to send the client of `chunk`: the chunk itself, or (when an
    /// event is withheld) the events to relay.
    fn feed(&mut self, chunk: &Bytes) -> Vec<Option<Bytes>> {
        self.read = self.read.saturating_add(chunk.len() as u64);
        let Some(api) = self.api else {
            return vec![Some(chunk.clone())];
        };
        if !self.streamed {
            if !self.whole_over {
                if self.whole.len() + chunk.len() > MAX_ANSWER {
                    self.whole_over = true;
                    self.whole = Vec::new();
                } else {
                    self.whole.extend_from_slice(chunk);
                }
            }
            return vec![Some(chunk.clone())];
        }
        let items = self.sse.feed(chunk);
        self.read(api, items, Some(chunk))
    }

    /// Reads the stream's `items`; what to send the client: `chunk` as it
    /// came, or (when an event is withheld) the events to relay.
    fn read(&mut self, api: Api, items: Vec<SseItem>, chunk: Option<&Bytes>) -> Vec<Option<Bytes>> {
        if !self.hide_usage {
            for item in &items {
                if let SseItem::Event { data, .. } = item {
                    self.stream.read_event(api, data, false);
                }
            }
            return vec![chunk.cloned()];
        }
        // Relayed event by event, the usage chunk left out.
        items
            .into_iter()
            .map(|item| match item {
                SseItem::Event { raw, data, .. } => {
                    match self.stream.read_event(api, &data, true) {
                        EventUse::Relay => Some(raw),
                        EventUse::Withhold => None,
                    }
                }
                SseItem::Other(raw) | SseItem::Overflow(raw) => Some(raw),
                SseItem::TooLong => None,
            })
            .collect()
    }

    /// The stream ended: what its last byte, a CR, completes (the line it
    /// ended), to send the client.
    fn finish(&mut self) -> Vec<Option<Bytes>> {
        match self.api {
            Some(api) if self.streamed => {
                let items = self.sse.finish();
                self.read(api, items, None)
            }
            _ => Vec::new(),
        }
    }

    /// Whether a gated answer broke off before its end: a stream without
    /// the event that ends it; a whole answer not read whole (`read_whole`:
    /// its usage was read, so it was) when the relay stopped early
    /// (`stopped`: the upstream failed or the client went away).
    fn broke_off(&self, read_whole: bool, stopped: bool) -> bool {
        if self.streamed {
            self.cut_short()
        } else {
            self.api.is_some() && !read_whole && stopped
        }
    }

    /// A gated stream that ended without the event that ends a model's
    /// stream (`message_stop`, `[DONE]`, `response.completed`…).
    fn cut_short(&self) -> bool {
        self.api.is_some() && self.streamed && !self.stream.ended
    }

    /// The bytes held of an event the stream did not end, when they are
    /// relayed event by event.
    fn rest(&mut self) -> Option<Bytes> {
        (self.api.is_some() && self.streamed && self.hide_usage)
            .then(|| self.sse.rest())
            .flatten()
    }

    fn usage(&self, api: Api) -> Option<budgetgate_core::turn::TokenUsage> {
        if self.streamed {
            return self.stream.usage;
        }
        if self.whole_over {
            return None;
        }
        api::answer_usage(api, &self.whole).ok().flatten()
    }
}
