//! `budgetgate mcp` and the MCP 2026-07-28 protocol, end to end with real
//! parts: the official Python SDK 2.x (`mcp` 2.3.0, its `Client` in `auto`,
//! `legacy` and `2026-07-28` modes and its `MCPServer`), installed by
//! `tests/mcp/install.sh` into `tests/mcp/.venv2026`, and the reference
//! server `@modelcontextprotocol/server-everything` (2025 handshake) from npm.
//!
//! Without them these tests say so and pass, unless `BUDGETGATE_REQUIRE_MCP=1`
//! is set (as `scripts/test` sets it): then a missing part fails the test.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

mod common;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

use common::mcp_dir;

/// The installed parts, or `None` (the test is skipped) when they are
/// missing and not required.
struct Parts {
    python: PathBuf,
    everything: PathBuf,
}

fn parts() -> Option<Parts> {
    let dir = mcp_dir();
    let p = Parts {
        python: dir.join(".venv2026/bin/python"),
        everything: dir.join("node_modules/.bin/mcp-server-everything"),
    };
    let installed =
        common::mcp_parts_installed(&[&p.python, &p.everything], "MCP 2026 end-to-end parts");
    installed.then_some(p)
}

use common::Setup;

impl Setup {
    /// The gateway's options (budget, ledger, session `e2e`, no terminal).
    fn gateway_options(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "mcp".into(),
            "--budget".into(),
            self.path("budget.toml").display().to_string(),
            "--ledger".into(),
            format!("sqlite:{}", self.path("ledger.sqlite3").display()),
            "--session".into(),
            "e2e".into(),
            "--terminal".into(),
            "never".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }
    /// Runs `tests/mcp/client2026.py` in `mode` through the stdio gateway
    /// (with `extra` options) in front of `server`; its JSON lines.
    fn stdio(
        &self,
        parts: &Parts,
        mode: &str,
        steps: Value,
        approve: Option<&str>,
        extra: &[&str],
        server: &[String],
    ) -> Vec<Value> {
        let mut cmd = Command::new(&parts.python);
        cmd.arg(mcp_dir().join("client2026.py"))
            .arg(steps.to_string())
            .arg(mode);
        if let Some(a) = approve {
            cmd.args(["--approve", a]);
        }
        cmd.arg("--")
            .arg(bin())
            .args(self.gateway_options(extra))
            .arg("--")
            .args(server);
        lines_of(cmd)
    }
    /// Tool calls (used, reserved) in the session's ledger.
    fn tool_calls(&self) -> (u64, u64) {
        let store = budgetgate::ledger::Store::open_file(
            &self.path("ledger.sqlite3"),
            std::time::Duration::from_secs(5),
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

/// Runs a client command; its JSON lines (the run must succeed).
fn lines_of(mut cmd: Command) -> Vec<Value> {
    let out = cmd.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The 2026-07-28 server of the SDK over stdio.
fn server_2026(parts: &Parts) -> Vec<String> {
    vec![
        parts.python.display().to_string(),
        mcp_dir().join("server2026.py").display().to_string(),
        "stdio".into(),
    ]
}

/// The observations of calls (lines with `call`).
fn calls(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l.get("call").is_some()).collect()
}

/// No line says the client raised (a validation error of the SDK, say).
fn nothing_raised(lines: &[Value]) {
    let raised: Vec<&Value> = lines.iter().filter(|l| l.get("raised").is_some()).collect();
    assert!(raised.is_empty(), "the client raised: {raised:?}");
}

const CAP_2: &str =
    "[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n[tools]\nmax_calls = { echo = 2 }\n";

/// Issue 33's case: the SDK 2.x client and an `MCPServer` of the same SDK
/// behind the gateway with a per-tool cap of 2. The third call is the
/// gateway's refusal, read by the client as an `isError` result in every
/// mode, not a validation error (`CallToolResult.resultType: Field
/// required`).
#[test]
fn a_2026_client_reads_the_gateways_refusal_in_every_mode() {
    let Some(parts) = parts() else { return };
    for mode in ["2026-07-28", "auto", "legacy"] {
        let setup = Setup::new(CAP_2);
        let steps = json!([
            {"list": true},
            {"call": "echo", "arguments": {"message": "a"}},
            {"call": "echo", "arguments": {"message": "b"}},
            {"call": "echo", "arguments": {"message": "c"}},
        ]);
        let lines = setup.stdio(&parts, mode, steps, None, &[], &server_2026(&parts));
        nothing_raised(&lines);
        let c = calls(&lines);
        assert_eq!(c.len(), 3, "{mode}: {lines:?}");
        assert_eq!(
            (c[0]["is_error"].clone(), c[0]["text"].clone()),
            (json!(false), json!("Echo: a")),
            "{mode}"
        );
        assert_eq!(c[1]["text"], "Echo: b", "{mode}");
        assert_eq!(c[2]["is_error"], true, "{mode}: {:?}", c[2]);
        assert_eq!(c[2]["meta"]["reason"], "tool-cap", "{mode}: {:?}", c[2]);
        assert!(
            c[2]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("budgetgate refused this call (tool-cap)")),
            "{mode}: {:?}",
            c[2]
        );
        assert_eq!(setup.tool_calls(), (2, 0), "{mode}");
    }
}

const ECHO_ASKS: &str =
    "[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n";

/// Approval in the stateless protocol: the gateway answers the call with an
/// `InputRequiredResult`; the SDK's client asks its elicitation callback and
/// retries with the answer and the gateway's `requestState`. Accepted: the
/// call runs (counted once); declined: refused and counted. The server's own
/// `InputRequiredResult` (`confirm`) passes through to the same callback.
#[test]
fn a_2026_client_approves_or_declines_by_input_required_result() {
    let Some(parts) = parts() else { return };
    for (approve, want) in [("accept", "Echo: a"), ("decline", "the person declined it")] {
        let setup = Setup::new(ECHO_ASKS);
        let steps = json!([
            {"call": "echo", "arguments": {"message": "a"}},
            {"call": "confirm", "arguments": {"what": "x"}},
        ]);
        let lines = setup.stdio(
            &parts,
            "2026-07-28",
            steps,
            Some(approve),
            &[],
            &server_2026(&parts),
        );
        nothing_raised(&lines);
        let asked: Vec<&str> = lines
            .iter()
            .filter_map(|l| l["elicitation"].as_str())
            .collect();
        assert_eq!(asked.len(), 2, "{lines:?}");
        assert!(
            asked[0].starts_with("budgetgate: the agent wants to call echo"),
            "{asked:?}"
        );
        assert_eq!(asked[1], "server: confirm x?");
        let c = calls(&lines);
        assert!(
            c[0]["text"].as_str().unwrap_or("").contains(want),
            "{approve}: {c:?}"
        );
        assert_eq!(c[0]["is_error"], approve != "accept", "{c:?}");
        assert_eq!(c[1]["text"], format!("server saw {approve} for x"), "{c:?}");
        // echo (accepted or refused: an attempt) and confirm once, though
        // it took the server two requests.
        assert_eq!(setup.tool_calls(), (2, 0), "{approve}");
    }
}

/// The gateway's `requestState` misused by a client driving the round trip
/// itself: edited, retried for other arguments or another tool, replayed,
/// retried after the deadline, or dropped. Each is refused with its reason;
/// none reaches the server.
#[test]
fn a_forged_replayed_stale_or_mismatched_request_state_is_refused() {
    let Some(parts) = parts() else { return };
    let setup = Setup::new(
        "[budget]\nmax_tool_calls = 20\nmax_repeats = 20\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\", \"confirm\"]\n",
    );
    let args = json!({"message": "a"});
    // The first step starts the server (its deadline then is not spent
    // on the server's start).
    let steps = json!([
        {"call": "big", "arguments": {"size": 1}},
        {"forge": "echo", "arguments": args, "how": "edited"},
        {"forge": "echo", "arguments": args, "how": "other-arguments"},
        {"forge": "echo", "arguments": args, "how": "other-tool", "to": "confirm"},
        {"forge": "echo", "arguments": args, "how": "replayed"},
        {"forge": "echo", "arguments": args, "how": "stale", "wait": 4.5},
        {"forge": "echo", "arguments": args, "how": "none"},
    ]);
    let lines = setup.stdio(
        &parts,
        "2026-07-28",
        steps,
        Some("accept"),
        &["--approval-timeout", "4"],
        &server_2026(&parts),
    );
    nothing_raised(&lines);
    let rounds: Vec<&Value> = calls(&lines)
        .into_iter()
        .filter(|c| c.get("round").is_some())
        .collect();
    let text = |i: usize| rounds[i]["text"].as_str().unwrap_or("").to_owned();
    // Each first round asks; the second is refused for its own reason.
    for i in (0..rounds.len()).filter(|i| rounds[*i]["round"] == 1) {
        assert_eq!(
            rounds[i]["input_required"],
            json!(["budgetgate_approval"]),
            "{rounds:?}"
        );
    }
    let seconds: Vec<usize> = (0..rounds.len())
        .filter(|i| rounds[*i]["round"] != 1)
        .collect();
    let wants = [
        "does not carry the gateway's signature",
        "not the ones the approval was asked about",
        "not the ones the approval was asked about",
        "Echo: a",
        "already used",
        "no answer came within 4 s",
        "",
    ];
    assert_eq!(seconds.len(), wants.len(), "{rounds:?}");
    for (i, want) in seconds.iter().zip(wants) {
        if want.is_empty() {
            // Without the state the retry is a new call, asked again.
            assert_eq!(
                rounds[*i]["input_required"],
                json!(["budgetgate_approval"]),
                "{:?}",
                rounds[*i]
            );
        } else {
            assert!(text(*i).contains(want), "{want}: {:?}", rounds[*i]);
        }
        if want != "Echo: a" && !want.is_empty() {
            assert_eq!(
                rounds[*i]["meta"]["reason"], "approval-refused",
                "{:?}",
                rounds[*i]
            );
        }
    }
}

/// A process killed when dropped.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The SDK's 2026-07-28 server over Streamable HTTP (stateless), with
/// `extra` options (`--tls CERT KEY`); the process and its port.
fn http_server(parts: &Parts, extra: &[&str]) -> (Proc, u16) {
    use std::io::BufRead;
    let mut child = Command::new(&parts.python)
        .arg(mcp_dir().join("server2026.py"))
        .arg("http")
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("port");
    let port = line.trim().parse().expect("a port");
    (Proc(child), port)
}

impl Setup {
    /// The gateway with `--listen` in front of `upstream` (with `extra`
    /// options); the process, its URL, and its stderr as it comes.
    fn http_gateway(
        &self,
        upstream: &str,
        extra: &[&str],
    ) -> (Proc, String, std::sync::Arc<std::sync::Mutex<String>>) {
        use std::io::BufRead;
        let mut child = Command::new(bin())
            .args(self.gateway_options(extra))
            .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starts");
        let stderr = child.stderr.take().expect("stderr");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = std::sync::Arc::clone(&seen);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if line.contains("listening on http://") {
                    let _ = tx.send(line.clone());
                }
                keep.lock().expect("lock").push_str(&format!("{line}\n"));
            }
        });
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("not ready: {}", seen.lock().expect("lock")));
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("the URL")
            .trim_end_matches(',')
            .to_owned();
        (Proc(child), url, seen)
    }
}

/// Runs `tests/mcp/client2026.py` in `mode` against the gateway at `url`.
fn http_client(
    parts: &Parts,
    mode: &str,
    steps: Value,
    approve: Option<&str>,
    url: &str,
) -> Vec<Value> {
    let mut cmd = Command::new(&parts.python);
    cmd.arg(mcp_dir().join("client2026.py"))
        .arg(steps.to_string())
        .arg(mode);
    if let Some(a) = approve {
        cmd.args(["--approve", a]);
    }
    cmd.args(["--url", url]);
    lines_of(cmd)
}

/// A raw HTTP/1.1 POST of `body` with `headers` to the gateway at `url`;
/// the status and the body.
fn raw_post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    let mut req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("write");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// Streamable HTTP in both generations: the SDK 2.x client in each mode
/// through `--listen` in front of the SDK's stateless 2026-07-28 server.
/// Refusals are read as results; a call needing approval is asked (by
/// `InputRequiredResult` in the 2026-07-28 mode) and runs once accepted; the
/// `Mcp-Method` and `Mcp-Name` headers reach the server (which rejects a
/// 2026-07-28 request without them).
#[test]
fn a_2026_client_over_streamable_http_in_every_mode() {
    let Some(parts) = parts() else { return };
    let (_server, port) = http_server(&parts, &[]);
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    for mode in ["2026-07-28", "auto", "legacy"] {
        let setup = Setup::new(
            "[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n[tools]\nmax_calls = { echo = 2 }\nneeds_approval = [\"big\"]\n",
        );
        let (_gw, url, stderr) = setup.http_gateway(&upstream, &[]);
        let steps = json!([
            {"list": true},
            {"call": "echo", "arguments": {"message": "a"}},
            {"call": "echo", "arguments": {"message": "b"}},
            {"call": "echo", "arguments": {"message": "c"}},
            {"call": "big", "arguments": {"size": 3}},
        ]);
        let lines = http_client(&parts, mode, steps, Some("accept"), &url);
        nothing_raised(&lines);
        let c = calls(&lines);
        let log = stderr.lock().expect("lock").clone();
        assert_eq!(c.len(), 4, "{mode}: {lines:?}\n{log}");
        assert_eq!(c[1]["text"], "Echo: b", "{mode}: {c:?}\n{log}");
        assert_eq!(c[2]["meta"]["reason"], "tool-cap", "{mode}: {c:?}");
        assert_eq!(c[2]["is_error"], true, "{mode}");
        let asked = lines
            .iter()
            .filter(|l| l.get("elicitation").is_some())
            .count();
        assert_eq!(asked, 1, "{mode}: {lines:?}");
        assert_eq!(c[3]["text"], "xxx", "{mode}: {c:?}\n{log}");
        assert_eq!(setup.tool_calls(), (3, 0), "{mode}");
    }
}

/// A 2026-07-28 POST whose `Mcp-Method` or `Mcp-Name` header does not say
/// what its body says, or lacks one, is answered `400` with the spec's
/// `HeaderMismatch` (`-32020`) and never reaches the server (nothing is
/// reserved or counted); the same request with matching headers runs.
#[test]
fn headers_that_do_not_match_the_body_are_refused_with_header_mismatch() {
    let Some(parts) = parts() else { return };
    let (_server, port) = http_server(&parts, &["--json"]);
    let setup = Setup::new("[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n");
    let (_gw, url, _) = setup.http_gateway(&format!("http://127.0.0.1:{port}/mcp"), &[]);
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
    "name": "echo", "arguments": {"message": "hi"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}})
    .to_string();
    let v = ("MCP-Protocol-Version", "2026-07-28");
    for (headers, want) in [
        (
            vec![v, ("Mcp-Method", "tools/call"), ("Mcp-Name", "big")],
            "'big' does not match body value 'echo'",
        ),
        (
            vec![v, ("Mcp-Method", "tools/list"), ("Mcp-Name", "echo")],
            "'tools/list' does not match body value 'tools/call'",
        ),
        (
            vec![v, ("Mcp-Method", "tools/call")],
            "Mcp-Name header is missing",
        ),
        (
            vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "echo")],
            "MCP-Protocol-Version header is missing",
        ),
    ] {
        let (status, answer) = raw_post(&url, &headers, &body);
        assert_eq!(status, 400, "{want}: {answer}");
        let answer: Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["id"], 5, "{answer}");
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(want), "{want}: {message}");
    }
    assert_eq!(setup.tool_calls(), (0, 0));
    let (status, answer) = raw_post(
        &url,
        &[
            v,
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?ZWNobw==?="),
        ],
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("Echo: hi"), "{answer}");
    assert_eq!(setup.tool_calls(), (1, 0));
}

/// The 2025 handshake server from npm (server-everything) behind the stdio
/// gateway, driven by the SDK 2.x client: in `auto` it falls back to the
/// handshake (server-everything answers `server/discover` with an error),
/// and calls, refusals and approval by `elicitation/create` work as with
/// the 1.x client; the forced 2026-07-28 mode is the spec's "modern client,
/// legacy server", which fails in the client, not in the gateway.
#[test]
fn a_2026_client_in_front_of_a_handshake_server_falls_back_and_works() {
    let Some(parts) = parts() else { return };
    let everything = vec![parts.everything.display().to_string(), "stdio".into()];
    for mode in ["auto", "legacy"] {
        let setup = Setup::new(
            "[budget]\nmax_tool_calls = 3\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"get-sum\"]\n",
        );
        let steps = json!([
            {"call": "echo", "arguments": {"message": "a"}},
            {"call": "get-sum", "arguments": {"a": 1, "b": 2}},
            {"call": "echo", "arguments": {"message": "b"}},
            {"call": "echo", "arguments": {"message": "c"}},
        ]);
        let lines = setup.stdio(&parts, mode, steps, Some("accept"), &[], &everything);
        nothing_raised(&lines);
        let c = calls(&lines);
        assert_eq!(c.len(), 4, "{mode}: {lines:?}");
        assert!(
            c[0]["text"].as_str().unwrap_or("").contains("a"),
            "{mode}: {c:?}"
        );
        assert!(
            c[1]["text"].as_str().unwrap_or("").contains('3'),
            "{mode}: {c:?}"
        );
        assert_eq!(c[1]["is_error"], false, "{mode}: {c:?}");
        assert_eq!(c[3]["meta"]["reason"], "tool-budget", "{mode}: {c:?}");
        let asked = lines
            .iter()
            .filter(|l| l.get("elicitation").is_some())
            .count();
        assert_eq!(asked, 1, "{mode}: {lines:?}");
        assert_eq!(setup.tool_calls(), (3, 0), "{mode}");
    }
}

/// An HTTPS MCP server on loopback, its certificate from a test CA made
/// here: reached with `--upstream-ca` (the SDK client's calls run and are
/// counted); without the CA, or by a name its certificate does not carry
/// (`localhost` for a certificate of 127.0.0.1), the call is answered with
/// an error naming the certificate, never sent in clear, and not counted.
#[test]
fn an_https_upstream_is_reached_with_its_ca_and_refused_without_it_or_by_another_name() {
    let Some(parts) = parts() else { return };
    let dir = tempfile::tempdir().expect("dir");
    let (ca, cert, key) = common::tls::test_ca(dir.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let (_server, port) = http_server(&parts, &["--json", "--tls", &cert, &key]);
    let ca = ca.display().to_string();
    let setup = Setup::new("[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n");
    let https = format!("https://127.0.0.1:{port}/mcp");
    let (_gw, url, stderr) = setup.http_gateway(&https, &["--upstream-ca", &ca]);
    let steps = json!([{"call": "echo", "arguments": {"message": "over tls"}}]);
    let lines = http_client(&parts, "2026-07-28", steps, None, &url);
    nothing_raised(&lines);
    let c = calls(&lines);
    let log = stderr.lock().expect("lock").clone();
    assert_eq!(c[0]["text"], "Echo: over tls", "{lines:?}\n{log}");
    assert_eq!(setup.tool_calls(), (1, 0));

    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"message": "hi"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    let renamed = format!("https://localhost:{port}/mcp");
    for (upstream, extra, want) in [
        (https.as_str(), vec![], "certificate"),
        (
            renamed.as_str(),
            vec!["--upstream-ca", ca.as_str()],
            "certificate",
        ),
    ] {
        let (_gw, url, _) = setup.http_gateway(upstream, &extra);
        let (status, answer) = raw_post(&url, &headers, &body);
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["error"]["code"], -32000, "{upstream}: {answer}");
        let message = answer["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_lowercase();
        assert!(message.contains(want), "{upstream}: {message}");
        assert!(
            message.contains("echo did not run and is not counted"),
            "{message}"
        );
        assert!(message.contains(&upstream.to_lowercase()), "{message}");
        assert_eq!(setup.tool_calls(), (1, 0), "{upstream}");
    }
}

/// A tool that needs approval whose server also asks for input itself:
/// the gateway asks once; the server's `InputRequiredResult` then reaches
/// the client untouched, and its retry (carrying the server's state) is not
/// asked about again. One call counted.
#[test]
fn an_approved_call_whose_server_asks_too_is_asked_by_the_gateway_once() {
    let Some(parts) = parts() else { return };
    let setup = Setup::new(
        "[budget]\nmax_tool_calls = 20\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"confirm\"]\n",
    );
    let steps = json!([{"call": "confirm", "arguments": {"what": "x"}}]);
    let lines = setup.stdio(
        &parts,
        "2026-07-28",
        steps,
        Some("accept"),
        &[],
        &server_2026(&parts),
    );
    nothing_raised(&lines);
    let asked: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["elicitation"].as_str())
        .collect();
    assert_eq!(asked.len(), 2, "{lines:?}");
    assert!(asked[0].starts_with("budgetgate: the agent wants to call confirm"));
    assert_eq!(asked[1], "server: confirm x?");
    let c = calls(&lines);
    assert_eq!(c[0]["text"], "server saw accept for x", "{c:?}");
    assert_eq!(setup.tool_calls(), (1, 0));
}

/// One ledger across both generations: a 2026-07-28 client and a
/// handshake-era client (the same SDK in `legacy` mode) on one session draw
/// from one per-tool cap and one tool budget.
#[test]
fn both_generations_draw_from_one_ledger() {
    let Some(parts) = parts() else { return };
    let setup = Setup::new(
        "[budget]\nmax_tool_calls = 3\nmax_seconds = 3600\n[tools]\nmax_calls = { echo = 2 }\n",
    );
    let run = |mode: &str, steps: Value| {
        let lines = setup.stdio(&parts, mode, steps, None, &[], &server_2026(&parts));
        nothing_raised(&lines);
        lines
    };
    let modern = run(
        "2026-07-28",
        json!([{"call": "echo", "arguments": {"message": "a"}}]),
    );
    assert_eq!(calls(&modern)[0]["text"], "Echo: a");
    let old = run(
        "legacy",
        json!([
            {"call": "echo", "arguments": {"message": "b"}},
            {"call": "echo", "arguments": {"message": "c"}},
            {"call": "big", "arguments": {"size": 1}},
        ]),
    );
    let c = calls(&old);
    assert_eq!(c[0]["text"], "Echo: b", "{c:?}");
    assert_eq!(c[1]["meta"]["reason"], "tool-cap", "{c:?}");
    assert_eq!(c[2]["text"], "x", "{c:?}");
    let modern = run(
        "2026-07-28",
        json!([{"call": "big", "arguments": {"size": 1}}]),
    );
    let c = calls(&modern);
    assert_eq!(c[0]["meta"]["reason"], "tool-budget", "{c:?}");
    assert_eq!(setup.tool_calls(), (3, 0));
}
