//! `budgetgate mcp --listen ADDR --upstream URL` end to end, with real
//! parts: the reference MCP server from the npm registry
//! (`@modelcontextprotocol/server-everything streamableHttp`) and the
//! official Python MCP client (`streamable_http_client`), installed by
//! `tests/mcp/install.sh`; for the `application/json` path, a server of that
//! SDK (`tests/mcp/json_server.py`). Between the gateway and the server a tap (a TCP
//! relay in this test) records every byte the gateway sends upstream, so a
//! refused call is seen never to reach the server.
//!
//! Without the parts these tests say so and pass, unless
//! `BUDGETGATE_REQUIRE_MCP=1` is set: then a missing part fails the test.
//! The tests at the end need no npm package (the upstream is down, or never
//! reached) and always run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

mod common;
use common::mcp_dir;

struct Parts {
    everything: PathBuf,
    python: PathBuf,
}

/// The installed parts, or `None` (the test is skipped) when they are
/// missing and not required.
fn parts() -> Option<Parts> {
    let dir = mcp_dir();
    let p = Parts {
        everything: dir.join("node_modules/.bin/mcp-server-everything"),
        python: dir.join(".venv/bin/python"),
    };
    let installed =
        common::mcp_parts_installed(&[&p.everything, &p.python], "MCP end-to-end parts");
    installed.then_some(p)
}

/// A process killed when dropped.
struct Proc(Child);

impl Proc {
    /// Waits for the process (60 s at most, then kills it); its output.
    fn wait_output(mut self) -> std::process::Output {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.0.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "the process did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = std::process::Output {
            status: self.0.wait().expect("status"),
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        if let Some(mut o) = self.0.stdout.take() {
            let _ = o.read_to_end(&mut out.stdout);
        }
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_end(&mut out.stderr);
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` with stderr piped and waits (30 s at most) for a line of
/// it containing `ready`; returns the process and that line. The rest of
/// stderr is drained into the returned buffer.
fn start(mut cmd: Command, ready: &str) -> (Proc, String, Arc<Mutex<String>>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let rest = Arc::new(Mutex::new(String::new()));
    let keep = Arc::clone(&rest);
    let ready = ready.to_owned();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if !sent && line.contains(&ready) {
                sent = true;
                let _ = tx.send(line.clone());
            }
            let mut k = keep.lock().expect("lock");
            k.push_str(&line);
            k.push('\n');
        }
    });
    let proc = Proc(child);
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("not ready: {}", rest.lock().expect("lock")));
    (proc, line, rest)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The everything server over Streamable HTTP on a free port.
fn everything(parts: &Parts) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(&parts.everything);
    cmd.arg("streamableHttp").env("PORT", port.to_string());
    let (p, _, _) = start(cmd, "listening on port");
    (p, port)
}

/// Bytes a tap saw, as they came.
type Record = Arc<Mutex<Vec<u8>>>;

/// A TCP relay to `127.0.0.1:port` recording what goes through it towards
/// the server; returns its port and the record.
fn tap(port: u16) -> (u16, Record) {
    let (at, sent, _) = tap_both(port);
    (at, sent)
}

/// [`tap`], recording what comes back from the server too.
fn tap_both(port: u16) -> (u16, Record, Record) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let back = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let record_back = Arc::clone(&back);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut down) = conn else { return };
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let (mut down2, mut up2) = (
                down.try_clone().expect("clone"),
                up.try_clone().expect("clone"),
            );
            let record = Arc::clone(&record);
            let record_back = Arc::clone(&record_back);
            std::thread::spawn(move || {
                let mut buf = [0u8; 1 << 16];
                while let Ok(n @ 1..) = down.read(&mut buf) {
                    record.lock().expect("lock").extend_from_slice(&buf[..n]);
                    if up.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = up.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let mut buf = [0u8; 1 << 16];
                while let Ok(n @ 1..) = up2.read(&mut buf) {
                    record_back
                        .lock()
                        .expect("lock")
                        .extend_from_slice(&buf[..n]);
                    if down2.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = down2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (at, seen, back)
}

use common::Setup;

impl Setup {
    /// Starts the gateway in front of `upstream`; the process and its URL.
    fn gateway(&self, upstream: &str) -> (Proc, String, Arc<Mutex<String>>) {
        self.gateway_with(upstream, &[])
    }
    /// The same, with more of the gateway's options.
    fn gateway_with(&self, upstream: &str, more: &[&str]) -> (Proc, String, Arc<Mutex<String>>) {
        self.gateway_in(Command::new(bin()), upstream, more)
    }
    /// The gateway with a terminal of its own (`tests/mcp/with_terminal.py`),
    /// where `answers` are typed in turn; what the terminal showed is kept
    /// in the file `terminal.log`.
    fn gateway_at_terminal(
        &self,
        parts: &Parts,
        upstream: &str,
        answers: &[&str],
    ) -> (Proc, String, Arc<Mutex<String>>) {
        let mut cmd = Command::new(&parts.python);
        cmd.arg(mcp_dir().join("with_terminal.py"))
            .arg(json!(answers).to_string())
            .arg(self.path("terminal.log"))
            .arg("--")
            .arg(bin());
        self.gateway_in(cmd, upstream, &["--terminal", "auto"])
    }
    fn gateway_in(
        &self,
        mut cmd: Command,
        upstream: &str,
        more: &[&str],
    ) -> (Proc, String, Arc<Mutex<String>>) {
        cmd.args(["mcp", "--listen", "127.0.0.1:0", "--budget"])
            .arg(self.path("budget.toml"))
            .arg("--ledger")
            .arg(format!("sqlite:{}", self.path("ledger.sqlite3").display()))
            .args(["--session", "e2e", "--upstream", upstream])
            .args(more);
        if !more.contains(&"--terminal") {
            // A test run from a terminal must not ask there.
            cmd.args(["--terminal", "never"]);
        }
        let (p, line, rest) = start(cmd, "listening on http://");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("the URL")
            .trim_end_matches(',')
            .to_owned();
        (p, url, rest)
    }
    /// Tool calls (used, reserved) in the session's ledger.
    fn tool_calls(&self) -> (u64, u64) {
        let store = budgetgate::ledger::Store::open_file(
            &self.path("ledger.sqlite3"),
            Duration::from_secs(5),
        )
        .expect("ledger");
        let listed = store.list().expect("list");
        let Some(found) = listed.iter().find(|l| l.session == "e2e") else {
            return (0, 0);
        };
        let ledger = found.ledger.as_ref().expect("record");
        use budgetgate_core::budget::Limit;
        (
            ledger.used(Limit::ToolCalls),
            ledger.reserved(Limit::ToolCalls),
        )
    }
}

/// Runs the Python client's scenario against the gateway at `url`.
fn python(parts: &Parts, scenario: Value, url: &str) -> Vec<Value> {
    python_with(parts, scenario, url, &[])
}

/// The same, with the client's options (`--approve ACTION`, `--delay S`).
fn python_with(parts: &Parts, scenario: Value, url: &str, more: &[&str]) -> Vec<Value> {
    let out = Command::new(&parts.python)
        .arg(mcp_dir().join("http_client.py"))
        .arg(scenario.to_string())
        .arg(url)
        .args(more)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// One HTTP/1.1 request on a new connection (closed after it); the
/// status, the headers (names in lower case) and the body (`body` is
/// written in pieces of at most 1 MiB).
fn http(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut s = TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut head = format!(
        "{method} /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    for piece in body.chunks(1 << 20) {
        s.write_all(piece).expect("write the body");
    }
    read_response(s)
}

fn read_response(s: TcpStream) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).expect("status line");
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a status: {status:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = Vec::new();
    r.read_to_end(&mut body).expect("body");
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = unchunk(&body);
    }
    (code, headers, body)
}

fn unchunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(at) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..at]).expect("size").trim(), 16)
                .expect("a chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[at + 2..at + 2 + size]);
        data = &data[at + 2 + size + 2..];
    }
    out
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "e2e", "version": "1"}}})
    .to_string()
}

const JSON_SSE: (&str, &str) = ("accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("content-type", "application/json");

/// `SPEC C` / `SPEC E` over Streamable HTTP (docs/MCP.md, "Streamable
/// HTTP"): the official Python client through the gateway to the real
/// server initializes and lists tools; a call within budget reaches the
/// server; a repeat (`max_repeats`) and a call over `max_tool_calls` are
/// answered with `isError` and `_meta.budgetgate` and never reach it (the
/// tap); the ledger counts what ran; the client's GET stream and DELETE
/// are forwarded.
#[test]
fn python_client_over_http_calls_within_budget_and_is_refused_over_it() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\nmax_repeats = 1\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let scenario = json!([
        {"list": true},
        {"call": "echo", "arguments": {"message": "first-call"}},
        {"call": "echo", "arguments": {"message": "first-call"}},
        {"call": "echo", "arguments": {"message": "second-call"}},
        {"call": "echo", "arguments": {"message": "over-budget-call"}},
    ]);
    let got = python(&parts, scenario, &url);
    assert_eq!(got.len(), 6, "{got:?}");
    assert_eq!(got[0]["initialized"], "mcp-servers/everything", "{got:?}");
    assert!(
        got[0]["session"].is_string(),
        "the upstream's session id passed on"
    );
    let tools = got[1]["tools"].as_array().expect("tools");
    assert!(tools.contains(&json!("echo")), "{tools:?}");
    assert_eq!(got[2]["is_error"], false, "{:?}", got[2]);
    assert_eq!(got[2]["text"], "Echo: first-call");
    assert_eq!(got[3]["is_error"], true, "{:?}", got[3]);
    assert_eq!(got[3]["meta"]["reason"], "repeat");
    assert_eq!(got[4]["text"], "Echo: second-call", "{:?}", got[4]);
    assert_eq!(got[5]["is_error"], true);
    assert_eq!(got[5]["meta"]["reason"], "tool-budget");
    assert_eq!(got[5]["meta"]["used"], 2);
    assert!(got[5]["text"]
        .as_str()
        .unwrap()
        .starts_with("budgetgate refused this call (tool-budget)"));
    assert_eq!(s.tool_calls(), (2, 0));
    // What reached the server: each call let through once, the refused
    // never; the session ended with DELETE.
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&seen.lock().unwrap(), "DELETE /mcp") == 0 {
        assert!(Instant::now() < deadline, "no DELETE reached the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = seen.lock().unwrap();
    assert_eq!(count(&seen, "first-call"), 1);
    assert_eq!(count(&seen, "second-call"), 1);
    assert_eq!(count(&seen, "over-budget-call"), 0);
    assert!(
        count(&seen, "mcp-session-id: ") > 0,
        "the session id passed on"
    );
    assert!(
        count(&seen, "GET /mcp") > 0,
        "the client's server-to-client stream (GET) was forwarded"
    );
}

/// `SPEC C` / `SPEC E` over Streamable HTTP with an upstream that answers
/// `application/json` and keeps no sessions (the Python SDK's own server,
/// `json_response`, `stateless_http`): a call within budget reaches it, a
/// result over `max_result_bytes` is withheld (the call counted), a call
/// over `max_tool_calls` is refused and never reaches it.
#[test]
fn a_json_answering_sessionless_upstream_is_gated_the_same_way() {
    let Some(parts) = parts() else { return };
    let s =
        Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\nmax_result_bytes = 1000\n");
    let port = free_port();
    let server = Command::new(&parts.python)
        .arg(mcp_dir().join("json_server.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let _server = Proc(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the JSON server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (tap_port, seen, back) = tap_both(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let got = python(
        &parts,
        json!([
            {"list": true},
            {"call": "echo", "arguments": {"message": "json-first"}},
            {"call": "big", "arguments": {"size": 5000}},
            {"call": "echo", "arguments": {"message": "json-over"}},
        ]),
        &url,
    );
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(got[0]["initialized"], "json-server");
    assert!(got[0]["session"].is_null(), "no session: {:?}", got[0]);
    assert_eq!(got[1]["tools"], json!(["echo", "big"]));
    assert_eq!(got[2]["text"], "Echo: json-first", "{:?}", got[2]);
    assert_eq!(got[3]["is_error"], true, "{:?}", got[3]);
    assert!(got[3]["text"]
        .as_str()
        .unwrap()
        .contains("over the budget's bound of 1000 bytes"));
    assert_eq!(got[4]["meta"]["reason"], "tool-budget", "{:?}", got[4]);
    assert_eq!(s.tool_calls(), (2, 0));
    assert_eq!(count(&seen.lock().unwrap(), "json-first"), 1);
    assert_eq!(count(&seen.lock().unwrap(), "json-over"), 0);
    assert!(count(&back.lock().unwrap(), "content-type: application/json") > 0);
}

/// Approval over Streamable HTTP (docs/MCP.md, "Streamable HTTP"): for a
/// tool in `needs_approval` the gateway asks the client by
/// `elicitation/create` on the stream of the call's POST; the client's
/// answer comes in another POST. Accepted, the call reaches the server and
/// its result comes back on that stream; declined, it is refused
/// (`approval-refused`) and never reaches the server. Each asked call
/// counts as an attempt, as on stdio.
#[test]
fn approval_over_http_asks_by_elicitation_and_runs_only_what_is_accepted() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let got = python_with(
        &parts,
        json!([{"call": "echo", "arguments": {"message": "a-person-said-yes"}},
               {"call": "get-sum", "arguments": {"a": 2, "b": 3}}]),
        &url,
        &["--approve", "accept"],
    );
    let asked = got[1]["elicitation"]
        .as_str()
        .unwrap_or_else(|| panic!("{got:?}"));
    assert!(asked.contains("wants to call echo"), "{asked}");
    assert!(asked.contains("a-person-said-yes"), "{asked}");
    assert_eq!(got[2]["is_error"], false, "{got:?}");
    assert_eq!(got[2]["text"], "Echo: a-person-said-yes", "{got:?}");
    assert!(got[3]["text"].as_str().unwrap().contains('5'), "{got:?}");
    assert_eq!(count(&seen.lock().unwrap(), "a-person-said-yes"), 1);
    // The gateway's question and its answer are between it and the client.
    assert_eq!(count(&seen.lock().unwrap(), "budgetgate-approval"), 0);
    assert_eq!(s.tool_calls(), (2, 0));

    let got = python_with(
        &parts,
        json!([{"call": "echo", "arguments": {"message": "a-person-said-no"}},
               {"call": "get-sum", "arguments": {"a": 1, "b": 1}}]),
        &url,
        &["--approve", "decline"],
    );
    assert!(got[1]["elicitation"].is_string(), "{got:?}");
    assert_eq!(got[2]["is_error"], true, "{got:?}");
    assert_eq!(got[2]["meta"]["reason"], "approval-refused");
    assert!(
        got[2]["text"]
            .as_str()
            .unwrap()
            .contains("the person declined it"),
        "{got:?}"
    );
    assert!(got[3]["text"].as_str().unwrap().contains('2'), "{got:?}");
    assert_eq!(count(&seen.lock().unwrap(), "a-person-said-no"), 0);
    assert_eq!(s.tool_calls(), (4, 0));
}

/// Approval at the terminal over HTTP (docs/MCP.md, "Approval"): a client
/// without the elicitation capability is not asked, the person at the
/// gateway's terminal is; the call's POST waits on its stream for the
/// answer. `y` runs the call on the server, `n` refuses it.
#[test]
fn over_http_the_person_at_the_gateways_terminal_is_asked_when_the_client_cannot_be() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway_at_terminal(
        &parts,
        &format!("http://127.0.0.1:{tap_port}/mcp"),
        &["y\n", "n\n"],
    );
    let got = python(
        &parts,
        json!([{"call": "echo", "arguments": {"message": "said-yes-at-the-terminal"}},
               {"call": "echo", "arguments": {"message": "said-no-at-the-terminal"}}]),
        &url,
    );
    assert_eq!(got[1]["text"], "Echo: said-yes-at-the-terminal", "{got:?}");
    assert_eq!(got[2]["meta"]["reason"], "approval-refused", "{got:?}");
    assert!(got[2]["text"]
        .as_str()
        .unwrap()
        .contains("the person at the gateway's terminal declined it"));
    assert_eq!(count(&seen.lock().unwrap(), "said-yes-at-the-terminal"), 1);
    assert_eq!(count(&seen.lock().unwrap(), "said-no-at-the-terminal"), 0);
    let shown = std::fs::read_to_string(s.path("terminal.log")).expect("the terminal's log");
    assert!(
        shown.contains("wants to call echo with {\"message\":\"said-yes-at-the-terminal\"}"),
        "{shown}"
    );
    assert_eq!(s.tool_calls(), (2, 0));
}

/// A question over HTTP that is not answered within `--approval-timeout`
/// refuses its call (`approval-refused`, "no answer came within"), which
/// never reaches the server, and the late answer is not forwarded; a
/// client that did not declare elicitation is refused with that reason.
#[test]
fn approval_over_http_refuses_when_no_answer_comes_in_time_or_none_can() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway_with(
        &format!("http://127.0.0.1:{tap_port}/mcp"),
        &["--approval-timeout", "1"],
    );
    let got = python_with(
        &parts,
        json!([{"call": "echo", "arguments": {"message": "too-late"}},
               {"call": "get-sum", "arguments": {"a": 2, "b": 2}}]),
        &url,
        &["--approve", "accept", "--delay", "2.5"],
    );
    assert!(got[1]["elicitation"].is_string(), "{got:?}");
    assert_eq!(got[2]["is_error"], true, "{got:?}");
    assert_eq!(got[2]["meta"]["reason"], "approval-refused");
    assert!(
        got[2]["text"]
            .as_str()
            .unwrap()
            .contains("no answer came within 1 s"),
        "{got:?}"
    );
    assert!(got[3]["text"].as_str().unwrap().contains('4'), "{got:?}");
    assert_eq!(count(&seen.lock().unwrap(), "too-late"), 0);
    assert_eq!(count(&seen.lock().unwrap(), "budgetgate-approval"), 0);

    let got = python(
        &parts,
        json!([{"call": "echo", "arguments": {"message": "nobody-to-ask"}}]),
        &url,
    );
    assert_eq!(got[1]["meta"]["reason"], "approval-refused", "{got:?}");
    assert!(got[1]["text"]
        .as_str()
        .unwrap()
        .contains("did not declare the elicitation capability"));
    assert_eq!(count(&seen.lock().unwrap(), "nobody-to-ask"), 0);
    assert_eq!(s.tool_calls(), (3, 0));
}

/// Transparency over Streamable HTTP: a request the gateway does not gate
/// (`ping`) passes to the upstream and its SSE answer comes back with its
/// id; a body that is not JSON is answered 400 / `-32700` and never
/// forwarded; a GET on an unknown path is 404.
#[test]
fn raw_requests_pass_through_and_malformed_ones_stop_at_the_gateway() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let (code, headers, body) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        initialize_body().as_bytes(),
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .expect("the upstream's session id");
    let ct = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .expect("type");
    assert!(ct.1.starts_with("text/event-stream"), "{ct:?}");
    assert!(String::from_utf8_lossy(&body).contains("\"serverInfo\""));
    let with = [
        JSON,
        JSON_SSE,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let (code, _, _) = http(
        &url,
        "POST",
        &with,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(code, 202);
    let (code, _, body) = http(
        &url,
        "POST",
        &with,
        br#"{"jsonrpc":"2.0","id":"p-7","method":"ping"}"#,
    );
    assert_eq!(code, 200);
    let body = String::from_utf8_lossy(&body);
    let data = body
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("an SSE event");
    let v: Value = serde_json::from_str(data).expect("JSON");
    assert_eq!(
        (v["id"].clone(), v["result"].clone()),
        (json!("p-7"), json!({}))
    );
    let (code, _, body) = http(&url, "POST", &with, b"{not json: never-forwarded");
    assert_eq!(code, 400);
    let v: Value = serde_json::from_slice(&body).expect("a JSON-RPC error");
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(count(&seen.lock().unwrap(), "never-forwarded"), 0);
    let (code, _, _) = http(&url.replace("/mcp", "/other"), "GET", &[], b"");
    assert_eq!(code, 404);
}

/// `SPEC E` (fail closed) over Streamable HTTP: a `tools/call` repeating a
/// key is answered `400` / `-32600` naming the key, one with id `null`,
/// an object or a float `400` / `-32600` with id `null`, one with a number
/// out of range `-32602` saying so, and an empty or blank body `400` /
/// `-32700`; none of them is POSTed upstream (the tap sees none) and none
/// counts.
#[test]
fn calls_repeating_a_key_or_with_a_bad_id_and_empty_bodies_never_reach_the_upstream() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let (_server, port) = everything(&parts);
    let (tap_port, seen) = tap(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let (code, headers, _) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        initialize_body().as_bytes(),
    );
    assert_eq!(code, 200);
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .expect("the upstream's session id");
    let with = [
        JSON,
        JSON_SSE,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let posts = || count(&seen.lock().unwrap(), "POST /mcp");
    let before = posts();
    for (id, params, status, code, says) in [
        (
            "8",
            r#"{"name":"echo","name":"Bash","arguments":{"message":"never-forwarded"}}"#,
            400,
            -32600,
            "duplicate key `name`",
        ),
        (
            "9",
            r#"{"name":"echo","arguments":{"message":"never-forwarded","message":"same"}}"#,
            400,
            -32600,
            "duplicate key `message`",
        ),
        (
            "10",
            r#"{"name":"echo","arguments":{"message":1e400,"m":"never-forwarded"}}"#,
            200,
            -32602,
            "number out of range",
        ),
        (
            "null",
            r#"{"name":"echo","arguments":{"message":"never-forwarded"}}"#,
            400,
            -32600,
            "not null",
        ),
        (
            r#"{"a":1}"#,
            r#"{"name":"echo","arguments":{"message":"never-forwarded"}}"#,
            400,
            -32600,
            "not an object",
        ),
        (
            "1.5",
            r#"{"name":"echo","arguments":{"message":"never-forwarded"}}"#,
            400,
            -32600,
            "a string or an integer",
        ),
    ] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
        let (got, _, answer) = http(&url, "POST", &with, body.as_bytes());
        let v: Value = serde_json::from_slice(&answer).expect("a JSON-RPC error");
        assert_eq!(got, status, "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{body}: {v}");
        if code == -32600 && !id.starts_with(|c: char| c.is_ascii_digit()) {
            assert_eq!(v["id"], Value::Null, "{body}: {v}");
        }
    }
    for body in ["", "  \r\n\t "] {
        let (got, _, answer) = http(&url, "POST", &with, body.as_bytes());
        assert_eq!(got, 400, "{body:?}");
        let v: Value = serde_json::from_slice(&answer).expect("a JSON-RPC error");
        assert_eq!(v["error"]["code"], -32700, "{body:?}: {v}");
    }
    assert_eq!(count(&seen.lock().unwrap(), "never-forwarded"), 0);
    assert_eq!(posts(), before, "nothing was POSTed upstream");
    assert_eq!(s.tool_calls(), (0, 0));
}

/// Fail closed over Streamable HTTP (`SPEC E`, docs/MCP.md): the server
/// killed while it streams a call's answer (its progress notifications
/// passed on) — the client's call is answered with a
/// JSON-RPC error `-32000` and its reservation rolled back; `tools/list`
/// over HTTP loses the tools the budget denies outright (a cap of 0), and a
/// result over `max_result_bytes` in an SSE answer is withheld (the event
/// rewritten, the call counted).
#[test]
fn a_server_killed_mid_call_answers_it_with_an_error_result_and_counts_it() {
    let Some(parts) = parts() else { return };
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_result_bytes = 200\n[tools]\nmax_calls = { get-env = 0 }\n",
    );
    let (mut server, port) = everything(&parts);
    let (tap_port, seen, back) = tap_both(port);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{tap_port}/mcp"));
    let scenario = json!([
        {"list": true},
        {"call": "get-tiny-image", "arguments": {}},
        {"call": "trigger-long-running-operation", "arguments": {"duration": 600, "steps": 600},
         "progress": true},
    ]);
    let client = Command::new(&parts.python)
        .arg(mcp_dir().join("http_client.py"))
        .arg(scenario.to_string())
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let client = Proc(client);
    let deadline = Instant::now() + Duration::from_secs(30);
    // The server has started its SSE answer (a progress event came back).
    while s.tool_calls() != (1, 1)
        || count(&seen.lock().unwrap(), "trigger-long") == 0
        || count(&back.lock().unwrap(), "notifications/progress") == 0
    {
        assert!(
            Instant::now() < deadline,
            "the call did not start: {:?}",
            s.tool_calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.0.kill().expect("kill the server");
    let _ = server.0.wait();
    let out = client.wait_output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (progress, got): (Vec<Value>, Vec<Value>) = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .partition(|v| v.get("progress").is_some());
    assert!(
        !progress.is_empty(),
        "progress notifications passed on: {stdout}"
    );
    assert_eq!(
        got.len(),
        4,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools = got[1]["tools"].as_array().expect("tools");
    assert!(
        tools.contains(&json!("echo")) && !tools.contains(&json!("get-env")),
        "{tools:?}"
    );
    assert_eq!(got[2]["is_error"], true, "{:?}", got[2]);
    assert!(got[2]["text"]
        .as_str()
        .unwrap()
        .contains("over the budget's bound of 200 bytes"));
    // Issue 29, reproduction 5: the server may have run the call before
    // it broke off: an error result the model reads, and counted.
    assert_eq!(got[3]["is_error"], true, "{:?}", got[3]);
    let text = got[3]["text"].as_str().unwrap();
    assert!(text.contains("broke off its stream"), "{text}");
    assert!(text.contains("may have run"), "{text}");
    assert_eq!(
        s.tool_calls(),
        (2, 0),
        "the broken-off call counts (it may have run)"
    );
}

/// `HOST:PORT` of an `http://HOST:PORT/PATH` URL.
fn host_port(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http URL");
    rest.split('/').next().expect("a host").to_owned()
}

/// The scripted upstream (`tests/mcp/slow_upstream.py`): answers a call
/// after `delay` seconds with `size` bytes of text; its stderr counts the
/// calls it ran (`ran NAME`).
fn slow_upstream(delay: &str, size: usize) -> (Proc, u16, Arc<Mutex<String>>) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(mcp_dir().join("slow_upstream.py"))
        .arg(port.to_string())
        .arg(delay)
        .arg(size.to_string());
    let (p, _, ran) = start(cmd, "listening on port");
    (p, port, ran)
}

fn call_body(id: u64, name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": {"n": id}}})
    .to_string()
}

/// Issue 29, reproduction 5: an upstream that timed out after the request
/// was sent had the call given back, so a budget of one ran two. Now the
/// call counts (it may have run) and the next one is refused.
#[test]
fn over_http_a_call_that_timed_out_upstream_counts_and_the_budget_holds() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n");
    let (_up, port, ran) = slow_upstream("3", 10);
    let (_gw, url, _) = s.gateway_with(
        &format!("http://127.0.0.1:{port}/mcp"),
        &["--upstream-timeout", "1"],
    );
    let (_, _, body) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        call_body(1, "slow").as_bytes(),
    );
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["result"]["isError"], true, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("did not answer within 1 s"), "{text}");
    assert_eq!(s.tool_calls(), (1, 0), "the timed-out call counts");
    let (_, _, body) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        call_body(2, "slow").as_bytes(),
    );
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        v["result"]["_meta"]["budgetgate"]["reason"], "tool-budget",
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ran.lock().unwrap().matches("ran slow").count(), 1);
}

/// Issue 29, reproduction 3 over HTTP: the gateway's timer renews the
/// reservation of a call slower than `--reservation-ttl`, so a second
/// gateway on the same budget cannot take it for a dead one's.
#[test]
fn over_http_a_call_slower_than_the_ttl_keeps_its_reservation() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n");
    let (_up, port, ran) = slow_upstream("4", 10);
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    let (_gw, url, _) = s.gateway_with(&upstream, &["--reservation-ttl", "1"]);
    let (_gw2, url2, _) = s.gateway_with(&upstream, &["--reservation-ttl", "1"]);
    let at = url.clone();
    let slow = std::thread::spawn(move || {
        http(
            &at,
            "POST",
            &[JSON, JSON_SSE],
            call_body(1, "slow").as_bytes(),
        )
    });
    std::thread::sleep(Duration::from_millis(2_500));
    let (_, _, body) = http(
        &url2,
        "POST",
        &[JSON, JSON_SSE],
        call_body(2, "slow").as_bytes(),
    );
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        v["result"]["_meta"]["budgetgate"]["reason"], "tool-budget",
        "{v}"
    );
    let (_, _, body) = slow.join().expect("the slow POST");
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert!(v["result"]["content"].is_array(), "{v}");
    assert_eq!(ran.lock().unwrap().matches("ran slow").count(), 1);
    assert_eq!(s.tool_calls(), (1, 0));
}

/// Issue 29, reproduction 4 over HTTP: an answer over 16 MiB had its call
/// given back. It counts, and the client gets an error result.
#[test]
fn over_http_an_answer_over_16_mib_counts_its_call_and_is_withheld() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let (_up, port, _) = slow_upstream("0", 17 << 20);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{port}/mcp"));
    let (_, _, body) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        call_body(1, "huge").as_bytes(),
    );
    assert!(body.len() < 4096, "{} bytes passed on", body.len());
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["result"]["isError"], true, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("more than 16 MiB"), "{text}");
    assert_eq!(s.tool_calls(), (1, 0));
}

/// Hostile trial of issue 29's fix, F5: a POST whose client went away
/// before the answer left its call reserved (and its id awaited) for as
/// long as the gateway ran. The call is answered to no one and counted.
#[test]
fn over_http_a_call_whose_client_went_away_is_counted_not_left_pending() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let (_up, port, ran) = slow_upstream("1", 10);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{port}/mcp"));
    let addr = host_port(&url);
    let body = call_body(7, "slow");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut tcp = TcpStream::connect(&addr).expect("connect");
    tcp.write_all(head.as_bytes()).expect("write");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran.lock().unwrap().matches("ran slow").count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the call never reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(tcp);
    while s.tool_calls() != (1, 0) {
        assert!(
            Instant::now() < deadline,
            "the abandoned call: {:?}, not counted",
            s.tool_calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 29, reproduction 1 over HTTP: a call cancelled 0.1 s after it was
/// sent, whose 20 KB result came 0.5 s later, passed the 4 096-byte bound
/// and counted nothing. Now it counts and its result is not passed on.
#[test]
fn over_http_a_cancelled_call_counts_and_its_result_is_not_passed_on() {
    let s =
        Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\nmax_result_bytes = 4096\n");
    let (_up, port, ran) = slow_upstream("0.5", 20_000);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{port}/mcp"));
    let mut answers = Vec::new();
    for id in 1..=3u64 {
        let at = url.clone();
        let post = std::thread::spawn(move || {
            http(
                &at,
                "POST",
                &[JSON, JSON_SSE],
                call_body(id, "big").as_bytes(),
            )
        });
        std::thread::sleep(Duration::from_millis(100));
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id}});
        http(
            &url,
            "POST",
            &[JSON, JSON_SSE],
            cancel.to_string().as_bytes(),
        );
        answers.push(post.join().expect("the POST"));
    }
    for (_, _, body) in &answers {
        assert!(
            count(body, "xxxxxxxxxx") == 0,
            "a cancelled call's result reached the client: {} bytes",
            body.len()
        );
    }
    assert_eq!(ran.lock().unwrap().matches("ran big").count(), 3);
    assert_eq!(s.tool_calls(), (3, 0), "every call that ran counts");
}

/// Fail closed over Streamable HTTP: with the upstream down, `initialize`
/// and a `tools/call` are answered with a JSON-RPC error `-32000` naming
/// the upstream, and the call's reservation is rolled back; a request from
/// a web page of another origin is refused 403 (DNS rebinding); SIGTERM
/// stops the gateway with status 0.
#[test]
fn an_upstream_that_is_down_answers_with_a_json_rpc_error_and_counts_nothing() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let down = free_port();
    let (gw, url, log) = s.gateway(&format!("http://127.0.0.1:{down}/mcp"));
    let (code, _, body) = http(
        &url,
        "POST",
        &[JSON, JSON_SSE],
        initialize_body().as_bytes(),
    );
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["id"], 1);
    assert_eq!(v["error"]["code"], -32000, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be reached"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{down}")), "{message}");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "x"}}});
    let (_, _, body) = http(&url, "POST", &[JSON, JSON_SSE], call.to_string().as_bytes());
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(2), json!(-32000))
    );
    assert_eq!(
        s.tool_calls(),
        (0, 0),
        "the call that did not run was rolled back"
    );
    // A notification has nothing to answer: 502.
    let (code, _, _) = http(
        &url,
        "POST",
        &[JSON],
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(code, 502);
    // A web page of another origin is refused; other methods are 405.
    let evil = [JSON, JSON_SSE, ("origin", "http://evil.example")];
    let (code, _, _) = http(&url, "POST", &evil, initialize_body().as_bytes());
    assert_eq!(code, 403);
    // Two Origin headers (which one is meant?), a rebound name in Host, two
    // Hosts: refused (issue 29).
    let twice = [
        JSON,
        JSON_SSE,
        ("origin", "http://localhost:1"),
        ("origin", "http://evil.example"),
    ];
    let (code, _, _) = http(&url, "POST", &twice, initialize_body().as_bytes());
    assert_eq!(code, 403);
    let addr = host_port(&url);
    for hosts in [
        vec!["evil.example"],
        vec![addr.as_str(), "evil.example"],
        vec![],
    ] {
        let mut head = String::from("POST /mcp HTTP/1.1\r\nconnection: close\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n");
        for h in &hosts {
            head.push_str(&format!("host: {h}\r\n"));
        }
        let body = initialize_body();
        head.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        let mut tcp = TcpStream::connect(&addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        tcp.write_all(head.as_bytes()).expect("write");
        let (code, _, body) = read_response(tcp);
        // hyper itself answers 400 to a request without Host or with two.
        assert!(
            code == 403 || code == 400,
            "Host {hosts:?}: {code} {}",
            String::from_utf8_lossy(&body)
        );
        if hosts.len() == 1 {
            assert_eq!(code, 403, "Host {hosts:?}");
            assert!(String::from_utf8_lossy(&body).contains("(Host)"));
        }
    }
    let local = [JSON, JSON_SSE, ("origin", "http://localhost:6274")];
    let (code, _, _) = http(&url, "POST", &local, initialize_body().as_bytes());
    assert_eq!(code, 200, "a page of this machine is served");
    let (code, headers, _) = http(&url, "PUT", &[], b"");
    assert_eq!(code, 405);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "allow" && v.contains("POST")));
    // SIGTERM stops it: exit 0.
    let pid = gw.0.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = gw.wait_output().status;
    assert_eq!(status.code(), Some(0), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.lock().unwrap().contains("budgetgate mcp: stopped") {
        assert!(Instant::now() < deadline, "{}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 29: 256 connections that send nothing locked every other client
/// out for about 30 s. Each now gives up its slot after 2 s without a
/// byte: a client's request behind them is served (the test allows 10 s;
/// the old gateway answered after about 30).
#[test]
fn idle_connections_do_not_lock_other_clients_out() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let (_up, port, _) = slow_upstream("0", 10);
    let (_gw, url, _) = s.gateway(&format!("http://127.0.0.1:{port}/mcp"));
    let addr = host_port(&url);
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(idle.len() >= 256, "{} idle connections", idle.len());
    std::thread::sleep(Duration::from_millis(200));
    let mut tcp = TcpStream::connect(&addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = initialize_body();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).expect("write");
    let (code, _, _) = read_response(tcp);
    assert_eq!(code, 200);
    drop(idle);
}

/// Bounded memory over Streamable HTTP: a 100 MB body is answered 413 with
/// a JSON-RPC `-32600`, without being held (the gateway's peak memory stays
/// far under 80 MiB) and without reaching the upstream; the gateway then
/// answers the next request.
#[test]
fn a_100_mb_body_is_refused_without_being_held() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let upstream = listener.local_addr().expect("addr").port();
    let reached = Arc::new(Mutex::new(0usize));
    let r = Arc::clone(&reached);
    std::thread::spawn(move || {
        for c in listener.incoming() {
            *r.lock().unwrap() += 1;
            drop(c);
        }
    });
    let (gw, url, _) = s.gateway(&format!("http://127.0.0.1:{upstream}/mcp"));
    let mut body = br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"message":""#.to_vec();
    body.resize(100 << 20, b'a');
    body.extend_from_slice(b"\"}}}");
    let (code, _, answer) = http(&url, "POST", &[JSON, JSON_SSE], &body);
    drop(body);
    assert_eq!(code, 413);
    let v: Value = serde_json::from_slice(&answer).expect("JSON");
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("longer than 16 MiB"));
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.0.id())).expect("status");
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    eprintln!("the gateway's peak memory: {peak_kib} KiB for a 100 MB body");
    assert!(
        peak_kib < 80 * 1024,
        "the gateway's peak memory was {peak_kib} KiB for a 100 MB body"
    );
    assert_eq!(*reached.lock().unwrap(), 0, "nothing reached the upstream");
    let (code, _, _) = http(&url, "POST", &[JSON], b"[]");
    assert_eq!(code, 400, "the gateway answers after it");
    assert_eq!(s.tool_calls(), (0, 0));
}

/// `--listen` and `--upstream` go together, a command and `--upstream`
/// exclude each other, and an https upstream is refused before starting
/// (exit 2, fail closed).
#[test]
fn the_http_options_are_checked_before_starting() {
    let run = |args: &[&str]| {
        Command::new(bin())
            .arg("mcp")
            .args(args)
            .output()
            .expect("runs")
    };
    let out = run(&["--listen", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upstream"));
    let out = run(&[
        "--listen",
        "0",
        "--upstream",
        "http://127.0.0.1:1/mcp",
        "--",
        "srv",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let dir = tempfile::tempdir().expect("dir");
    let ledger = format!("sqlite:{}", dir.path().join("l.sqlite3").display());
    let out = run(&[
        "--listen",
        "0",
        "--ledger",
        &ledger,
        "--upstream",
        "https://127.0.0.1:1/mcp",
        "--upstream-ca",
        "/nonexistent/ca.pem",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--upstream-ca /nonexistent/ca.pem") && err.contains("fail closed"),
        "{err}"
    );
}
