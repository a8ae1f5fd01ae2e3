//! The model proxy's test parts: a scripted model API on loopback (the
//! model itself is the one part that cannot run here: it answers with
//! fixed usage in the real API's shapes), a raw HTTP/1.1 client that sees
//! every byte, and the ledger as `budgetgate ledger list` shows it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::ProxyProcess as Proxy;

/// Input and output tokens of every scripted answer.
pub const INPUT: u64 = 1_000;
pub const OUTPUT: u64 = 100;

/// What the scripted upstream saw: each request's path, headers and body.
#[derive(Default)]
pub struct Seen {
    pub requests: Vec<(String, String, Vec<u8>)>,
}

/// A scripted model API on loopback.
pub struct Upstream {
    pub port: u16,
    pub seen: Arc<Mutex<Seen>>,
}

impl Upstream {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Arc::clone(&shared);
                std::thread::spawn(move || answer(stream, &seen));
            }
        });
        Self { port, seen }
    }

    pub fn count(&self, path: &str) -> usize {
        let seen = self.seen.lock().expect("lock");
        seen.requests.iter().filter(|(p, _, _)| p == path).count()
    }

    pub fn last_body(&self) -> Value {
        let seen = self.seen.lock().expect("lock");
        let (_, _, body) = seen.requests.last().expect("a request");
        serde_json::from_slice(body).expect("JSON body")
    }

    pub fn last_head(&self) -> String {
        let seen = self.seen.lock().expect("lock");
        seen.requests.last().expect("a request").1.clone()
    }
}

pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let path = head.split_whitespace().nth(1)?.to_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((path, head.to_ascii_lowercase(), body))
}

pub fn answer(stream: TcpStream, seen: &Mutex<Seen>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let Some((path, head, body)) = read_request(&mut reader) else {
        return;
    };
    seen.lock()
        .expect("lock")
        .requests
        .push((path.clone(), head.clone(), body.clone()));
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let streamed = request["stream"] == json!(true);
    let delay = head
        .lines()
        .find_map(|l| l.strip_prefix("x-test-delay-ms: "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(ms) = delay {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let mut out = stream;
    let cut = head.contains("x-test-cut: 1");
    let stall = head.contains("x-test-stall: 1");
    // The streams' line ending: LF, or as `x-test-eol` says (`cr`: a CR
    // alone, valid SSE; `crlf`).
    let eol = match head.lines().find_map(|l| l.strip_prefix("x-test-eol: ")) {
        Some(e) if e.trim() == "cr" => "\r",
        Some(e) if e.trim() == "crlf" => "\r\n",
        _ => "\n",
    };
    if head.contains("x-test-status: 529") {
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let _ = write!(
            out,
            "HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let usage = json!({"input_tokens": INPUT, "output_tokens": OUTPUT});
    match (path.as_str(), streamed) {
        ("/v1/messages", false) => {
            let body = json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn", "stop_sequence": null, "usage": usage,
            })
            .to_string();
            if head.contains("x-test-te-cl: 1") {
                // Both a length (a wrong one) and chunked framing, which
                // HTTP/1.1 says to read as chunked.
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 20\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                    body.len()
                );
                return;
            }
            if cut {
                // The head and half the body, then the connection closed.
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    body.len(),
                    &body[..body.len() / 2]
                );
                return;
            }
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nrequest-id: req_1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        ("/v1/messages", true) => {
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
            );
            let start = json!({"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": INPUT, "output_tokens": 1}}});
            let _ = write!(out, "event: message_start{eol}data: {start}{eol}{eol}");
            let _ = out.flush();
            if cut {
                return;
            }
            if stall {
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
            // `x-test-flood: N`: N MiB of text deltas before the end, for
            // a client that does not read.
            let flood = head
                .lines()
                .find_map(|l| l.strip_prefix("x-test-flood: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let text = "x".repeat(64 << 10);
            let delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
            for _ in 0..flood * 16 {
                if write!(
                    out,
                    "event: content_block_delta{eol}data: {delta}{eol}{eol}"
                )
                .is_err()
                {
                    return;
                }
            }
            let events = [
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                (
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": OUTPUT}}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ];
            for (name, data) in events {
                let _ = write!(out, "event: {name}{eol}data: {data}{eol}{eol}");
                let _ = out.flush();
            }
        }
        ("/v1/chat/completions", false) => {
            let body = json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": request["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": INPUT, "completion_tokens": OUTPUT, "total_tokens": INPUT + OUTPUT},
            })
            .to_string();
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        ("/v1/chat/completions", true) => {
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            );
            let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": request["model"],
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": null}]});
            let _ = write!(out, "data: {chunk}{eol}{eol}");
            let done = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": request["model"],
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
            let _ = write!(out, "data: {done}{eol}{eol}");
            if request["stream_options"]["include_usage"] == json!(true) {
                let usage = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": request["model"],
                    "choices": [], "usage": {"prompt_tokens": INPUT, "completion_tokens": OUTPUT, "total_tokens": INPUT + OUTPUT}});
                let _ = write!(out, "data: {usage}{eol}{eol}");
            }
            let _ = write!(out, "data: [DONE]{eol}{eol}");
        }
        _ => {
            let body = r#"{"input_tokens":42}"#;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    }
}

pub fn start_proxy(upstream: &Upstream, budget: &Path, ledger: &Path, extra: &[&str]) -> Proxy {
    let url = format!("http://127.0.0.1:{}", upstream.port);
    Proxy::start(&url, budget, ledger, extra)
}

/// One answer as the client got it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    /// A chunked body ended with its last chunk (not broken off).
    pub ended: bool,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    post_text(port, path, headers, &body.to_string())
}

/// [`post`] of a body given as its text, sent as it is (the proxy may
/// answer, 413, before the whole body is sent).
pub fn post_text(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let _ = stream.write_all(body.as_bytes());
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head[9..12].parse().expect("status");
    let mut body = raw[split + 4..].to_vec();
    let mut ended = true;
    if head.contains("transfer-encoding: chunked") {
        ended = body.ends_with(b"0\r\n\r\n");
        body = unchunk(&body);
    }
    Answer {
        status,
        head,
        body,
        ended,
    }
}

pub fn unchunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap_or("0").trim(), 16)
                .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = end + 2;
        out.extend_from_slice(&raw[start..(start + size).min(raw.len())]);
        raw = &raw[(start + size + 2).min(raw.len())..];
    }
}

/// A temporary folder with `budget` written, a ledger path in it, a
/// scripted upstream and a proxy in front of it with `extra` options.
pub fn setup(
    budget: &str,
    extra: &[&str],
) -> (tempfile::TempDir, PathBuf, PathBuf, Upstream, Proxy) {
    let dir = tempfile::tempdir().expect("dir");
    let budget = write_budget(dir.path(), budget);
    let ledger = dir.path().join("ledger.sqlite3");
    let upstream = Upstream::start();
    let proxy = start_proxy(&upstream, &budget, &ledger, extra);
    (dir, budget, ledger, upstream, proxy)
}

pub fn messages(stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 100, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

pub fn write_budget(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("budget.toml");
    std::fs::write(&path, text).expect("budget");
    path
}

/// The session's ledger as `budgetgate ledger list --json` shows it.
pub fn ledger_row(ledger: &Path, session: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_budgetgate"))
        .args(["ledger", "list", "--json", "--ledger"])
        .arg(format!("sqlite:{}", ledger.display()))
        .output()
        .expect("ledger list");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .find(|row| row["session"] == session && row["agent"].as_str().unwrap_or("").is_empty())
        .unwrap_or_else(|| panic!("no row for {session} in {text}"))
}

/// [`ledger_row`] once the session's calls are counted: a call's count
/// runs just after its answer is out (within 50 ms), so a client can read
/// the ledger before it; waits (at most 10 s) until no model call is
/// reserved.
pub fn settled_row(ledger: &Path, session: &str) -> Value {
    let started = std::time::Instant::now();
    loop {
        let row = ledger_row(ledger, session);
        if row["limits"]["model_calls"]["reserved"] == json!(0)
            || started.elapsed() > Duration::from_secs(10)
        {
            return row;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn used(row: &Value, limit: &str) -> u64 {
    row["limits"][limit]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {limit} in {row}"))
}
