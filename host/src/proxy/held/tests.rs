use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::*;

const BODY: &[u8] = br#"{"model":"m","max_tokens":5,"messages":[]}"#;

/// What the upstream has read of one request so far: its head, and the
/// body bytes after it.
struct Upstream {
    conn: TcpStream,
    got: Vec<u8>,
}

impl Upstream {
    async fn accept(listener: &TcpListener) -> Self {
        let (conn, _) = listener.accept().await.unwrap();
        Self {
            conn,
            got: Vec::new(),
        }
    }

    fn body(&self) -> &[u8] {
        let at = memchr::memmem::find(&self.got, b"\r\n\r\n").map_or(self.got.len(), |i| i + 4);
        &self.got[at..]
    }

    fn head(&self) -> String {
        let at = memchr::memmem::find(&self.got, b"\r\n\r\n").unwrap_or(self.got.len());
        String::from_utf8_lossy(&self.got[..at]).to_ascii_lowercase()
    }

    /// Reads until the body has `n` bytes; `false` when `wait` passed or
    /// the connection ended first.
    async fn read_body(&mut self, n: usize, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        let mut buf = [0u8; 4096];
        while self.body().len() < n {
            match tokio::time::timeout_at(deadline, self.conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return false,
                Ok(Ok(k)) => self.got.extend_from_slice(&buf[..k]),
            }
        }
        true
    }

    /// Whether the client closed the connection within `wait`, reading
    /// what else came.
    async fn closed(&mut self, wait: Duration) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(wait, self.conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(k)) => self.got.extend_from_slice(&buf[..k]),
                Err(_) => return false,
            }
        }
    }
}

async fn setup() -> (TcpListener, String, reqwest::Client) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/messages", listener.local_addr().unwrap());
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    (listener, url, client)
}

/// The request goes out at once but for its last byte, which follows the
/// sync's `Ok`: the upstream never has the request whole before the
/// decision is on the disk, and has the rest of it while the disk works.
#[tokio::test(flavor = "current_thread")]
async fn all_but_the_last_byte_goes_before_the_sync() {
    let (listener, url, client) = setup().await;
    let (tx, rx) = oneshot::channel();
    let body = reqwest::Body::wrap(HeldBody::new(BODY.to_vec(), rx));
    let send = tokio::spawn(client.post(&url).body(body).send());
    let mut upstream = Upstream::accept(&listener).await;
    assert!(
        upstream
            .read_body(BODY.len() - 1, Duration::from_secs(10))
            .await
    );
    assert!(
        upstream
            .head()
            .contains(&format!("content-length: {}", BODY.len())),
        "{}",
        upstream.head()
    );
    // Not whole while the sync has not answered.
    assert!(
        !upstream
            .read_body(BODY.len(), Duration::from_millis(200))
            .await
    );
    assert_eq!(upstream.body(), &BODY[..BODY.len() - 1]);
    tx.send(Ok(())).unwrap();
    assert!(
        upstream
            .read_body(BODY.len(), Duration::from_secs(10))
            .await
    );
    assert_eq!(upstream.body(), BODY);
    send.abort();
}

/// A sync that failed (or whose thread is gone) cuts the request short:
/// the upstream is left with all but its last byte and a closed
/// connection, so it never had the call to bill, and the client's error
/// says why.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_sync_never_lets_the_request_be_whole() {
    for fail in [true, false] {
        let (listener, url, client) = setup().await;
        let (tx, rx) = oneshot::channel();
        let body = reqwest::Body::wrap(HeldBody::new(BODY.to_vec(), rx));
        let send = tokio::spawn(client.post(&url).body(body).send());
        let mut upstream = Upstream::accept(&listener).await;
        assert!(
            upstream
                .read_body(BODY.len() - 1, Duration::from_secs(10))
                .await
        );
        if fail {
            tx.send(Err("disk full".to_owned())).unwrap();
        } else {
            drop(tx);
        }
        let err = send.await.unwrap().unwrap_err();
        let found = not_synced(&err).expect("the sync's failure in the error's chain");
        let expected = if fail {
            "the ledger could not be synced to disk (disk full)"
        } else {
            "the ledger could not be synced to disk (its thread ended without an answer)"
        };
        assert_eq!(found.to_string(), expected);
        assert!(upstream.closed(Duration::from_secs(10)).await);
        assert_eq!(upstream.body(), &BODY[..BODY.len() - 1]);
    }
}

/// An upstream error of any other kind is not taken for a failed sync.
#[tokio::test(flavor = "current_thread")]
async fn other_errors_are_not_a_failed_sync() {
    let (listener, url, client) = setup().await;
    drop(listener);
    let err = client
        .post(&url)
        .body(BODY.to_vec())
        .send()
        .await
        .unwrap_err();
    assert!(not_synced(&err).is_none());
}

/// A body of one byte is held whole; its length is exact from the start.
#[test]
fn lengths() {
    let (_tx, rx) = oneshot::channel();
    let one = HeldBody::new(b"x".to_vec(), rx);
    assert!(one.head.is_none());
    assert_eq!(one.size_hint().exact(), Some(1));
    assert!(!one.is_end_stream());
    let (_tx, rx) = oneshot::channel();
    let body = HeldBody::new(BODY.to_vec(), rx);
    assert_eq!(body.size_hint().exact(), Some(BODY.len() as u64));
    assert_eq!(body.tail.as_deref(), Some(&b"}"[..]));
}
