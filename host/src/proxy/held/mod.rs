//! A model call's request body whose last byte waits for the ledger's
//! disk ([`HeldBody`]): with `--durability full`, the request goes out
//! while its decision is synced, and the upstream, which acts on a request
//! only once it has it whole, cannot start on it (nor bill it) before the
//! decision is durable. The wait for the disk overlaps the hop to the
//! upstream instead of coming before it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::oneshot;

use crate::store::WalSync;

/// Why a held body was not sent whole: the ledger's sync failed (or was
/// lost), so the decision may not be on the disk, and the call is not made.
#[derive(Debug)]
pub(super) struct NotSynced(pub(super) String);

impl std::fmt::Display for NotSynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the ledger could not be synced to disk ({})", self.0)
    }
}

impl std::error::Error for NotSynced {}

/// The body: all but its last byte at once, the last byte once the sync
/// said `Ok`; an error instead (the request cut short, never complete)
/// when it did not. Its exact length is known, so it goes out with its
/// `content-length`, as the client sent it.
pub(super) struct HeldBody {
    head: Option<Bytes>,
    tail: Option<Bytes>,
    synced: Option<oneshot::Receiver<Result<(), String>>>,
}

impl HeldBody {
    /// `body` held on `synced` (the sync's result). A body of no bytes
    /// cannot be held by its last byte: the caller waits for the sync
    /// before sending it.
    pub(super) fn new(body: Vec<u8>, synced: oneshot::Receiver<Result<(), String>>) -> Self {
        let mut head = Bytes::from(body);
        let tail = head.split_off(head.len().saturating_sub(1));
        Self {
            head: (!head.is_empty()).then_some(head),
            tail: (!tail.is_empty()).then_some(tail),
            synced: Some(synced),
        }
    }

    fn left(&self) -> u64 {
        let len = |b: &Option<Bytes>| b.as_ref().map_or(0, |b| b.len() as u64);
        len(&self.head) + len(&self.tail)
    }
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = NotSynced;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, NotSynced>>> {
        let this = &mut *self;
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(synced) = this.synced.as_mut() {
            let result = match Pin::new(synced).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(result)) => result,
                Poll::Ready(Err(_)) => Err("its thread ended without an answer".to_owned()),
            };
            this.synced = None;
            if let Err(e) = result {
                this.tail = None;
                return Poll::Ready(Some(Err(NotSynced(e))));
            }
        }
        Poll::Ready(this.tail.take().map(|tail| Ok(Frame::data(tail))))
    }

    fn is_end_stream(&self) -> bool {
        self.synced.is_none() && self.head.is_none() && self.tail.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left())
    }
}

/// Runs `sync` on the runtime's blocking threads; its result comes on the
/// receiver.
pub(super) fn start(sync: WalSync) -> oneshot::Receiver<Result<(), String>> {
    let (tx, rx) = oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let _ = tx.send(sync.run().map_err(|e| e.to_string()));
    });
    rx
}

/// Whether `e` (the upstream client's error) came from a [`HeldBody`]
/// whose sync failed.
pub(super) fn not_synced<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a NotSynced> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<NotSynced>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests;
