//! What the HTTP front-ends share (the model proxy; the MCP gateway's
//! Streamable HTTP transport is moving here): the accept loop with its
//! bounds on connections and slow clients, a body fed by a channel, a
//! bounded body reader, the check that a request comes from this machine's
//! pages only, and the upstream client.

pub mod sse;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};

/// A response as the front-ends build it. Its body's error breaks the
/// connection off, so that a client sees a relayed answer that broke off
/// as broken, not as ended ([`ChannelBody::breakable`]).
pub type Reply = Response<BoxBody<Bytes, std::io::Error>>;

/// Most client connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a new connection may wait before its first byte (ms): past it,
/// it is closed and its slot given to another.
pub const FIRST_BYTE_MS: u64 = 2_000;

/// How long a request's head may take to arrive (s), on a new connection
/// and between requests on a kept-alive one (longer than the 5 s that
/// common HTTP clients keep an idle connection).
pub const HEAD_TIMEOUT_S: u64 = 10;

/// A response body fed by a channel (a stream relayed as it comes); the
/// channel's sender dropped ends it, or, once [`ChannelBody::breakable`]'s
/// flag is set, breaks it off (the connection is closed without the
/// body's end: the client sees an answer cut off, not a whole one).
pub struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    broken: Option<Arc<std::sync::atomic::AtomicBool>>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ChannelBody {
    /// A body that ends when the channel's sender is dropped.
    pub fn new(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        Self {
            rx,
            broken: None,
            done: None,
        }
    }

    /// Told when the server is done with this body (it read its end, or the
    /// client went away): the server drops the body as it writes its
    /// end, so a task woken by it runs after that write.
    pub fn when_done(&mut self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.done = Some(tx);
        rx
    }

    /// A body that, when the sender is dropped after `broken` was set,
    /// breaks off instead of ending.
    pub fn breakable(
        rx: tokio::sync::mpsc::Receiver<Bytes>,
        broken: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            rx,
            broken: Some(broken),
            done: None,
        }
    }
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.rx.poll_recv(cx).map(|b| match b {
            Some(b) => Some(Ok(Frame::data(b))),
            None if self
                .broken
                .as_ref()
                .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire)) =>
            {
                Some(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the upstream's answer broke off",
                )))
            }
            None => None,
        })
    }
}

/// A whole response.
pub fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Reply {
    let body = Full::new(body.into()).map_err(|never: Infallible| match never {});
    let mut r = Response::new(body.boxed());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

/// Why a body was not read whole.
#[derive(Debug)]
pub enum ReadError {
    /// Longer than allowed.
    TooLarge,
    /// The connection failed.
    Failed(String),
    /// The bodies being read at once already hold all the bytes allowed
    /// ([`read_held`]).
    Busy,
}

/// Reads `body` up to `max` bytes; past that, `TooLarge` (nothing more is
/// kept).
pub async fn read_bounded(body: Incoming, max: usize) -> Result<Vec<u8>, ReadError> {
    read_body(body, max, None).await.map(|(buf, _)| buf)
}

/// [`read_bounded`] with the bytes held counted against `held`, shared by
/// every request being read (a semaphore of bytes): past what it has
/// left, `Busy`, so that many large bodies at once cannot take the
/// machine's memory. The permit returned holds the body's bytes until it
/// is dropped (when the request is done).
pub async fn read_held(
    body: Incoming,
    max: usize,
    held: &Arc<tokio::sync::Semaphore>,
) -> Result<(Vec<u8>, Option<tokio::sync::OwnedSemaphorePermit>), ReadError> {
    read_body(body, max, Some(held)).await
}

async fn read_body(
    mut body: Incoming,
    max: usize,
    held: Option<&Arc<tokio::sync::Semaphore>>,
) -> Result<(Vec<u8>, Option<tokio::sync::OwnedSemaphorePermit>), ReadError> {
    let mut buf = Vec::new();
    let mut permit: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Failed(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > max {
            return Err(ReadError::TooLarge);
        }
        if let Some(held) = held.filter(|_| !data.is_empty()) {
            let n = u32::try_from(data.len()).map_err(|_| ReadError::TooLarge)?;
            let more = Arc::clone(held)
                .try_acquire_many_owned(n)
                .map_err(|_| ReadError::Busy)?;
            match permit.as_mut() {
                Some(p) => p.merge(more),
                None => permit = Some(more),
            }
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf, permit))
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

/// Why a request from a browser page must be refused (`403`): an `Origin`
/// of another machine, or more than one. `None`: no `Origin` (not a
/// browser) or this machine's.
pub fn foreign_origin(req: &Request<Incoming>) -> Option<&'static str> {
    let origins: Vec<&HeaderValue> = req.headers().get_all("origin").iter().collect();
    match origins.as_slice() {
        [] => None,
        [one] if local_origin(one.to_str().unwrap_or("")) => None,
        [_] => Some("requests from a web page of another origin are refused (Origin)"),
        _ => Some("a request with more than one Origin header is refused"),
    }
}

/// Serves `handle` on `listener` until SIGINT or SIGTERM: at most
/// [`MAX_CONNECTIONS`] at once, a connection that sends nothing within
/// [`FIRST_BYTE_MS`] closed, a request head given [`HEAD_TIMEOUT_S`].
pub async fn serve<H, F>(listener: tokio::net::TcpListener, name: &'static str, handle: H)
where
    H: Fn(SocketAddr, Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    let Ok(bound) = listener.local_addr() else {
        log::warn!("budgetgate {name}: the listening address cannot be read; stopped");
        return;
    };
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
                    log::warn!("budgetgate {name}: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
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
            let service = hyper::service::service_fn(move |req| {
                let reply = handle(bound, req);
                async move { Ok::<_, Infallible>(reply.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(HEAD_TIMEOUT_S))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

/// Resolves at SIGINT or SIGTERM.
pub async fn stop_signal() {
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

/// Request and response headers that concern one connection only
/// (RFC 9110 §7.6.1), never passed on.
pub const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The address of `--listen`: `PORT` (on 127.0.0.1) or `HOST:PORT`.
pub fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("--listen {text}: not PORT or HOST:PORT with an IP address (127.0.0.1:8080, [::1]:8080)")
    })
}

/// Seconds an upstream has to accept a TCP connection (and finish TLS).
pub const CONNECT_TIMEOUT_S: u64 = 10;

/// Largest `--upstream-ca` file read (1 MiB of PEM).
pub const MAX_CA_BYTES: u64 = 1 << 20;

/// Checks an upstream URL for option `flag`: `http://` or `https://` with a
/// host. Another scheme, or none (`127.0.0.1:9`, which the URL parser
/// calls a relative URL), is named as such; a malformed `http(s)://` URL
/// in the parser's words.
pub fn upstream_url(flag: &str, text: &str) -> Result<reqwest::Url, String> {
    let not_http =
        || format!("{flag} {text}: must be an http:// or https:// URL (http://HOST:PORT/PATH)");
    match reqwest::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(url),
        Ok(_) => Err(not_http()),
        Err(_) if !text.contains("://") => Err(not_http()),
        Err(e) => Err(format!("{flag} {text}: {e}")),
    }
}

/// The upstream client every HTTP front-end uses: HTTP/1.1, no proxy from
/// the environment, no redirects followed, TLS by rustls with the system's
/// roots (certificates and host names verified), and the certificates of
/// `ca` (a PEM file: a private CA) trusted beside them.
pub fn upstream_client(ca: Option<&std::path::Path>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_S))
        .tcp_nodelay(true);
    if let Some(path) = ca {
        let shown = path.display();
        let pem = crate::input::read_path(path, MAX_CA_BYTES).map_err(|e| match e {
            crate::input::ReadError::Io(e) => format!("--upstream-ca {shown}: {e}"),
            crate::input::ReadError::TooLarge { limit } => {
                format!("--upstream-ca {shown}: larger than {} KiB", limit >> 10)
            }
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("--upstream-ca {shown}: {}", error_chain(&e)))?;
        if certs.is_empty() {
            return Err(format!("--upstream-ca {shown}: no PEM certificate in it"));
        }
        builder = builder.tls_certs_merge(certs);
    }
    builder
        .build()
        .map_err(|e| format!("the HTTP client: {}", error_chain(&e)))
}

/// An error with its causes, outermost first (`error sending request: …:
/// invalid peer certificate: UnknownIssuer`), so a failed TLS verification
/// names its cause.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Binds `addr` for front-end `name` and says where it listens on stderr
/// (`budgetgate NAME: listening on http://ADDR{path}, upstream URL`, the
/// line tests and scripts read the port from), with a warning when that is
/// not loopback: anyone who reaches it spends the budget.
pub async fn bind(
    addr: SocketAddr,
    name: &str,
    path: &str,
    upstream: &str,
) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--listen {addr}: {e}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    if !bound.ip().is_loopback() {
        log::warn!("budgetgate {name}: warning: listening on {bound}, not loopback: anyone who reaches it spends this budget");
    }
    log::info!(
        "budgetgate {name}: listening on http://{bound}{path}, upstream {}",
        shown_url(upstream)
    );
    Ok(listener)
}

/// `url` as said on stderr: as the URL parser writes it (what a terminal
/// would act on escaped), with a password in it hidden.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            crate::term::terminal_safe(parsed.as_str()).into_owned()
        }
        Err(_) => crate::term::terminal_safe(url).into_owned(),
    }
}
