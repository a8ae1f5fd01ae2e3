//! `budgetgate mcp` end to end, with real parts: the reference MCP servers
//! from the npm registry (`@modelcontextprotocol/server-everything`,
//! `@modelcontextprotocol/server-filesystem` on a temporary folder) and the
//! official Python MCP client, installed by `tests/mcp/install.sh`.
//!
//! Without them these tests say so and pass, unless `BUDGETGATE_REQUIRE_MCP=1`
//! is set (as `scripts/test` sets it): then a missing part fails the test.
//! The tests at the end need no npm package (a shell stands in for the
//! server) and always run.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

use common::mcp_dir;

/// The installed parts, or `None` (the test is skipped) when they are
/// missing and not required.
struct Parts {
    everything: PathBuf,
    filesystem: PathBuf,
    python: PathBuf,
}

fn parts() -> Option<Parts> {
    let dir = mcp_dir();
    let p = Parts {
        everything: dir.join("node_modules/.bin/mcp-server-everything"),
        filesystem: dir.join("node_modules/.bin/mcp-server-filesystem"),
        python: dir.join(".venv/bin/python"),
    };
    let installed = common::mcp_parts_installed(
        &[&p.everything, &p.filesystem, &p.python],
        "MCP end-to-end parts",
    );
    installed.then_some(p)
}

use common::Setup;

impl Setup {
    /// The gateway's command line in front of `server`.
    fn gateway_args(&self, extra: &[&str], server: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            bin().display().to_string(),
            "mcp".into(),
            "--budget".into(),
            self.path("budget.toml").display().to_string(),
            "--ledger".into(),
            format!("sqlite:{}", self.path("ledger.sqlite3").display()),
            "--session".into(),
            "e2e".into(),
            // A test run from a terminal must not ask there.
            "--terminal".into(),
            "never".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push("--".into());
        args.extend(server.iter().map(|s| s.to_string()));
        args
    }
    /// Runs `tests/mcp/terminal_client.py`'s `steps` through the gateway
    /// (with `extra` options and `--terminal auto`) in front of
    /// server-everything, on a pseudo-terminal of its own (`background`: as
    /// a shell's background job there); its JSON lines.
    fn at_terminal(
        &self,
        parts: &Parts,
        steps: Value,
        extra: &[&str],
        background: bool,
    ) -> Vec<Value> {
        let everything = parts.everything.display().to_string();
        let mut args = self.gateway_args(extra, &[everything.as_str(), "stdio"]);
        // The helper's `--terminal never`, made `auto`.
        let at = args
            .iter()
            .position(|a| a == "never")
            .expect("--terminal never");
        args[at] = "auto".into();
        let mut cmd = Command::new(&parts.python);
        cmd.arg(mcp_dir().join("terminal_client.py"))
            .arg(steps.to_string());
        if background {
            cmd.arg("--background");
        }
        let out = cmd.arg("--").args(&args).output().expect("python runs");
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
    /// Waits (at most 20 s) until the ledger shows `want` (used, reserved).
    fn wait_for(&self, want: (u64, u64), what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.tool_calls() != want {
            assert!(
                Instant::now() < deadline,
                "{what}: {:?}, not {want:?}",
                self.tool_calls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// Runs the Python client's scenario through the gateway.
    fn python(
        &self,
        parts: &Parts,
        scenario: Value,
        approve: Option<&str>,
        server: &[&str],
    ) -> Vec<Value> {
        let mut cmd = Command::new(&parts.python);
        cmd.arg(mcp_dir().join("client.py"))
            .arg(scenario.to_string());
        if let Some(a) = approve {
            cmd.args(["--approve", a]);
        }
        cmd.arg("--").args(self.gateway_args(&[], server));
        let out = cmd.output().expect("python runs");
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
}

/// A gateway driven line by line.
struct Gateway {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Answers read while waiting for another.
    early: Vec<Value>,
}

impl Gateway {
    fn start(args: &[String]) -> Self {
        let (go, held) = channel();
        let _ = go.send(());
        Self::start_held(args, held)
    }
    /// Starts the gateway; its stdout is not read until `held` receives.
    fn start_held(args: &[String], held: Receiver<()>) -> Self {
        let mut child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gateway starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = held.recv();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line).expect("the gateway writes JSON");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines: rx,
            early: Vec::new(),
        }
    }
    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{v}").expect("write");
        stdin.flush().expect("flush");
    }
    /// Sends `line` as it is (for JSON a `Value` cannot hold, such as a key
    /// given twice).
    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
    }
    /// The next message with this id (notifications and others skipped).
    fn answer(&mut self, id: &Value) -> Value {
        if let Some(at) = self.early.iter().position(|v| &v["id"] == id) {
            return self.early.remove(at);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.lines.recv_timeout(left).expect("an answer in time");
            if v.get("method").is_some() {
                continue;
            }
            if &v["id"] == id {
                return v;
            }
            self.early.push(v);
        }
    }
    fn initialize(&mut self) {
        self.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "e2e", "version": "1"}}}),
        );
        let init = self.answer(&json!("init"));
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }
    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        self.answer(&json!(id))
    }
    /// Waits for the gateway to end; its status and stderr.
    fn end(mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (status.code(), err);
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not end within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// The server process the gateway started.
    fn server_pid(&self) -> u32 {
        let pid = self.child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            if let Some(first) = children.split_whitespace().next() {
                return first.parse().expect("a pid");
            }
            assert!(Instant::now() < deadline, "no server process");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn text_of(v: &Value) -> &str {
    v["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[test]
fn python_client_lists_calls_within_budget_and_is_refused_over_it() {
    let Some(parts) = parts() else { return };
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_tool_calls = 3\nmax_repeats = 1\n\
         [tools]\nmax_calls = { gzip-file-as-resource = 0 }\n",
    );
    let everything = parts.everything.display().to_string();
    let out = s.python(
        &parts,
        json!([
            {"list": true},
            {"call": "echo", "arguments": {"message": "one"}},
            {"call": "get-sum", "arguments": {"a": 2, "b": 3}},
            {"call": "echo", "arguments": {"message": "one"}},
            {"call": "echo", "arguments": {"message": "three"}},
            {"call": "echo", "arguments": {"message": "four"}},
        ]),
        None,
        &[&everything, "stdio"],
    );
    assert_eq!(out[0]["initialized"], "mcp-servers/everything");
    let tools: Vec<&str> = out[1]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"echo"), "{tools:?}");
    assert!(
        !tools.contains(&"gzip-file-as-resource"),
        "a tool with a cap of 0 is not listed: {tools:?}"
    );
    assert_eq!(out[2]["is_error"], false);
    assert_eq!(out[2]["text"], "Echo: one");
    assert_eq!(out[3]["is_error"], false);
    assert!(out[3]["text"].as_str().unwrap().contains('5'), "{}", out[3]);
    // The same call again: refused by repetition, never reaching the server.
    assert_eq!(out[4]["is_error"], true);
    assert_eq!(out[4]["meta"]["reason"], "repeat");
    assert_eq!(out[5]["is_error"], false);
    // Three calls let through: the fourth is over the budget.
    assert_eq!(out[6]["is_error"], true);
    assert_eq!(out[6]["meta"]["reason"], "tool-budget");
    assert_eq!(out[6]["meta"]["used"], 3);
    assert_eq!(out[6]["meta"]["max"], 3);
    assert!(
        out[6]["text"]
            .as_str()
            .unwrap()
            .starts_with("budgetgate refused this call (tool-budget): 3 of 3 tool calls used."),
        "{}",
        out[6]
    );
    assert_eq!(s.tool_calls(), (3, 0));
}

/// Loop detection in the gateway (issue 32): the server's results are each
/// call's outcome. `echo` with the same message returns the same text: the
/// third is refused `no-progress` (`same_outcome = 3`) and never reaches
/// the server; `get-sum` between with new numbers is news and starts the
/// count again; the window is in the ledger, so a second gateway process
/// on it refuses the same call at once.
#[test]
fn the_gateway_refuses_a_call_whose_results_do_not_change() {
    let Some(parts) = parts() else { return };
    let s =
        Setup::new("[budget]\nmax_seconds = 3600\nmax_repeats = 100\n[loops]\nsame_outcome = 3\n");
    let everything = parts.everything.display().to_string();
    let echo = json!({"call": "echo", "arguments": {"message": "pending"}});
    let out = s.python(
        &parts,
        json!([
            echo,
            echo,
            {"call": "get-sum", "arguments": {"a": 1, "b": 2}},
            echo,
            echo,
            echo,
        ]),
        None,
        &[&everything, "stdio"],
    );
    let verdicts: Vec<(bool, Option<&str>)> = out[1..]
        .iter()
        .map(|o| (o["is_error"] == true, o["meta"]["reason"].as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (false, None),
            (false, None),
            (false, None),
            // After get-sum's new result: two more before the refusal.
            (false, None),
            (false, None),
            (true, Some("no-progress")),
        ],
        "{out:?}"
    );
    assert!(
        out[6]["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("budgetgate refused this call (no-progress): echo has been called 2 times with this input and returned the same result each time"),
        "{}",
        out[6]
    );
    assert_eq!(s.tool_calls(), (5, 0));
    // Another gateway process on the same ledger: the window was kept.
    let again = s.python(&parts, json!([echo]), None, &[&everything, "stdio"]);
    assert_eq!(again[1]["meta"]["reason"], "no-progress", "{again:?}");
    assert_eq!(s.tool_calls(), (5, 0));
}

/// Approval at the gateway's terminal (docs/MCP.md, "Approval"): a client
/// without the elicitation capability is not asked; the person at the
/// gateway's controlling terminal is. `y` runs the call on the server, any
/// other answer refuses it, and the client cannot answer the terminal's
/// question itself: its answer is dropped and the deadline refuses the call.
/// What the agent put in the arguments is shown escaped, so it cannot
/// rewrite the prompt.
#[test]
fn without_elicitation_the_person_at_the_gateways_terminal_is_asked() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n");
    let steps = json!([
        {"call": "echo", "arguments": {"message": "yes-at-the-terminal\u{1b}[2K\u{202e}"}, "type": "y\n"},
        {"call": "echo", "arguments": {"message": "no-at-the-terminal"}, "type": "n\n"},
        {"call": "echo", "arguments": {"message": "the-agent-approves-itself"}, "client_answers": "accept"},
    ]);
    let got = s.at_terminal(&parts, steps, &["--approval-timeout", "2"], false);
    assert_eq!(got.len(), 3, "{got:?}");
    let asked = got[0]["asked"].as_str().unwrap();
    assert!(asked.contains("wants to call echo"), "{asked}");
    assert!(
        asked.contains("allow? [y/N]") && asked.contains("allowed"),
        "{asked}"
    );
    // What the agent sent to move the cursor or turn the text around is
    // shown as text, never sent to the terminal.
    assert!(
        !asked.contains('\u{1b}') && asked.contains("\\u001b[2K"),
        "{asked:?}"
    );
    assert!(
        !asked.contains('\u{202e}') && asked.contains("\\u{202e}"),
        "{asked:?}"
    );
    assert_eq!(
        text_of(&got[0]["answer"]),
        "Echo: yes-at-the-terminal\u{1b}[2K\u{202e}",
        "{got:?}"
    );
    let refused = &got[1]["answer"]["result"];
    assert_eq!(refused["isError"], true, "{got:?}");
    assert_eq!(refused["_meta"]["budgetgate"]["reason"], "approval-refused");
    assert!(text_of(&got[1]["answer"]).contains("the person at the gateway's terminal declined it"));
    let late = &got[2]["answer"]["result"];
    assert_eq!(
        late["_meta"]["budgetgate"]["reason"], "approval-refused",
        "{got:?}"
    );
    assert!(
        text_of(&got[2]["answer"]).contains("no answer came within 2 s"),
        "{got:?}"
    );
    assert!(got[2]["asked"]
        .as_str()
        .unwrap()
        .contains("no answer in time"));
    // Every asked call is an attempt; only the one allowed ran.
    assert_eq!(s.tool_calls(), (3, 0));
}

/// A gateway in the background of its terminal (`budgetgate mcp … &` in a
/// shell) asks nothing there: reading the terminal would stop it
/// (SIGTTIN). The call is refused at once with that reason, and the
/// gateway goes on answering.
#[test]
fn a_gateway_in_the_background_of_its_terminal_refuses_instead_of_asking() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"echo\"]\n");
    let steps = json!([
        {"call": "echo", "arguments": {"message": "from-the-background"}, "no_question": true},
        {"call": "get-sum", "arguments": {"a": 1, "b": 2}, "no_question": true},
    ]);
    let started = Instant::now();
    let got = s.at_terminal(&parts, steps, &[], true);
    let refused = &got[0]["answer"]["result"];
    assert_eq!(
        refused["_meta"]["budgetgate"]["reason"], "approval-refused",
        "{got:?}"
    );
    assert!(
        text_of(&got[0]["answer"]).contains("the gateway's terminal could not take the question"),
        "{got:?}"
    );
    assert!(
        !got[0]["asked"].as_str().unwrap().contains("allow?"),
        "{got:?}"
    );
    assert!(text_of(&got[1]["answer"]).contains('3'), "{got:?}");
    // Refused at once, not at the deadline (120 s).
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn python_client_approves_by_elicitation_accept_and_decline() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"get-sum\"]\n");
    let everything = parts.everything.display().to_string();
    let server = [everything.as_str(), "stdio"];
    let scenario = json!([{"call": "get-sum", "arguments": {"a": 20, "b": 22}}]);
    let accepted = s.python(&parts, scenario.clone(), Some("accept"), &server);
    assert!(
        accepted[1]["elicitation"]
            .as_str()
            .unwrap()
            .contains("get-sum"),
        "{accepted:?}"
    );
    assert_eq!(accepted[2]["is_error"], false, "{accepted:?}");
    assert!(accepted[2]["text"].as_str().unwrap().contains("42"));
    let declined = s.python(
        &parts,
        json!([{"call": "get-sum", "arguments": {"a": 1, "b": 1}}]),
        Some("decline"),
        &server,
    );
    assert_eq!(declined[2]["is_error"], true, "{declined:?}");
    assert_eq!(declined[2]["meta"]["reason"], "approval-refused");
    assert!(declined[2]["text"]
        .as_str()
        .unwrap()
        .contains("the person declined it"));
    // A client without the capability is told why it cannot run.
    let unasked = s.python(
        &parts,
        json!([{"call": "get-sum", "arguments": {"a": 2, "b": 2}}]),
        None,
        &server,
    );
    assert!(unasked[1]["text"]
        .as_str()
        .unwrap()
        .contains("did not declare the elicitation capability"));
    // `ledger show` lists both refused approvals with the answer, and
    // counts the three attempts.
    let shown = Command::new(bin())
        .args(["ledger", "show", "e2e", "--ledger"])
        .arg(format!("sqlite:{}", s.path("ledger.sqlite3").display()))
        .output()
        .expect("ledger show runs");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{text}");
    let denials: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" deny ") && l.contains("approval-refused"))
        .collect();
    assert_eq!(denials.len(), 2, "{text}");
    assert!(denials[0].contains("(the person declined it)"), "{text}");
    assert!(
        denials[1].contains("did not declare the elicitation capability"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.starts_with(&["tool_calls", "3", "/"])
        }),
        "{text}"
    );
}

#[test]
fn filesystem_server_reads_within_budget_and_an_unapproved_write_never_happens() {
    let Some(parts) = parts() else { return };
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_tool_calls = 10\n[tools]\nneeds_approval = [\"write_file\"]\n",
    );
    let root = s.path("files");
    std::fs::create_dir(&root).expect("folder");
    std::fs::write(root.join("note.txt"), "hello from the folder").expect("file");
    let root_shown = root.canonicalize().expect("path").display().to_string();
    let filesystem = parts.filesystem.display().to_string();
    let out = s.python(
        &parts,
        json!([
            {"call": "read_text_file", "arguments": {"path": format!("{root_shown}/note.txt")}},
            {"call": "write_file", "arguments": {"path": format!("{root_shown}/new.txt"), "content": "x"}},
        ]),
        None,
        &[&filesystem, &root_shown],
    );
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert!(out[1]["text"]
        .as_str()
        .unwrap()
        .contains("hello from the folder"));
    assert_eq!(out[2]["is_error"], true);
    assert_eq!(out[2]["meta"]["reason"], "approval-refused");
    assert!(
        !root.join("new.txt").exists(),
        "the refused write never ran"
    );
}

/// `SPEC E` (fail closed, every call answered), over stdio in front of the
/// real server: a `tools/call` repeating a key (`name` twice, a key of
/// `arguments` twice) is answered `-32600` naming the key; one whose id is
/// `null`, an object or a float is answered `-32600` with id `null`; one
/// with a number out of range or `params` that is not an object is
/// answered `-32602` saying so. None reaches the server (no second answer
/// comes from it) and none counts; a well-formed call then runs.
#[test]
fn calls_repeating_a_key_or_with_a_bad_id_are_answered_and_never_reach_the_server() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let everything = parts.everything.display().to_string();
    let mut g = Gateway::start(&s.gateway_args(&[], &[&everything, "stdio"]));
    g.initialize();
    let call = |id: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
    };
    for (id, params, code, says) in [
        (
            "8",
            r#"{"name":"echo","name":"Bash","arguments":{}}"#,
            -32600,
            "duplicate key `name`",
        ),
        (
            "9",
            r#"{"name":"echo","arguments":{"message":"x1","message":"same"}}"#,
            -32600,
            "duplicate key `message`",
        ),
        (
            "10",
            r#"{"name":"echo","arguments":{"message":1e400}}"#,
            -32602,
            "number out of range",
        ),
        (
            "11",
            r#""x""#,
            -32602,
            "`params` must be an object, not a string",
        ),
    ] {
        g.send_raw(&call(id, params));
        let id: Value = serde_json::from_str(id).expect("id");
        let answer = g.answer(&id);
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{answer}");
    }
    for id in ["null", r#"{"a":1}"#, "1.5"] {
        g.send_raw(&call(
            id,
            r#"{"name":"echo","arguments":{"message":"bad-id"}}"#,
        ));
        // A number id is answered as sent; other kinds with id null.
        let sent: Value = serde_json::from_str(id).expect("id");
        let answer = g.answer(&if sent.is_number() { sent } else { Value::Null });
        assert_eq!(answer["error"]["code"], -32600, "{id}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("a string or an integer"), "{id}: {answer}");
    }
    let ok = g.call(20, "echo", json!({"message": "after"}));
    assert_eq!(text_of(&ok), "Echo: after", "{ok}");
    assert!(
        g.early.is_empty(),
        "the server answered a refused call: {:?}",
        g.early
    );
    // The commit follows the answer (the answer is written first).
    s.wait_for((1, 0), "only the well-formed call counts");
    drop(g.stdin.take());
    let (code, _) = g.end(Duration::from_secs(10));
    assert_eq!(code, Some(0));
}

/// Issue 29, reproduction 1, against the real server: a cancel sent with
/// each call in one write gave every call back (ledger `0 / 6`) while the
/// server ran them all. A cancelled call stays counted: the per-tool cap
/// and the budget hold, and no cancelled call's result reaches the client.
#[test]
fn a_cancel_right_after_the_call_never_gives_back_a_call_that_ran() {
    let Some(parts) = parts() else { return };
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_tool_calls = 6\nmax_result_bytes = 4096\n[tools]\nmax_calls = { \"get-sum\" = 3 }\n",
    );
    let everything = parts.everything.display().to_string();
    let mut g = Gateway::start(&s.gateway_args(&[], &[&everything, "stdio"]));
    g.initialize();
    for n in 1..=20u64 {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "get-sum", "arguments": {"a": n, "b": 1}}});
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": n}});
        g.send_raw(&format!("{call}\n{cancel}"));
    }
    // The calls over the cap are refused at once; a ping behind them all
    // is answered after the server has seen every call and cancel.
    let mut refused = 0;
    for n in 4..=20u64 {
        let answer = g.answer(&json!(n));
        assert_eq!(
            answer["result"]["_meta"]["budgetgate"]["reason"], "tool-cap",
            "{answer}"
        );
        refused += 1;
    }
    g.send(&json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}));
    g.answer(&json!("ping"));
    assert_eq!(refused, 17);
    assert!(
        g.early
            .iter()
            .all(|v| !(1..=3).any(|n| v["id"] == json!(n))),
        "a cancelled call's result reached the client: {:?}",
        g.early
    );
    drop(g.stdin.take());
    let (code, _) = g.end(Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert_eq!(s.tool_calls(), (3, 0), "the three calls that ran count");
}

/// A cancelled long call keeps its reservation (the server may have run
/// part of it); it counts when the gateway ends.
#[test]
fn a_cancelled_long_call_keeps_its_reservation_and_counts_at_the_end() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n");
    let everything = parts.everything.display().to_string();
    let mut g = Gateway::start(&s.gateway_args(&[], &[&everything, "stdio"]));
    g.initialize();
    g.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "trigger-long-running-operation",
                   "arguments": {"duration": 3, "steps": 3}}}));
    s.wait_for((0, 1), "reserved while in flight");
    g.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "the user changed their mind"}}),
    );
    // The budget of one call is not free again.
    let refused = g.call(2, "echo", json!({"message": "after"}));
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"], "tool-budget",
        "{refused}"
    );
    assert_eq!(s.tool_calls(), (0, 1));
    // An operator sees what the call in flight holds (round 2, finding 6).
    let show = Command::new(bin())
        .args(["ledger", "show", "e2e", "--ledger"])
        .arg(format!("sqlite:{}", s.path("ledger.sqlite3").display()))
        .output()
        .expect("ledger show");
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("0 (+1 reserved) / 1"), "{shown}");
    drop(g.stdin.take());
    let (code, _) = g.end(Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert_eq!(s.tool_calls(), (1, 0));
}

/// Issue 29, reproduction 3, over stdio with real processes: a tool
/// slower than `--reservation-ttl` had its reservation expire, and another
/// gateway on the same budget then gave it back and ran a call past the
/// budget. The gateway running the slow tool renews its reservation.
#[test]
fn a_tool_slower_than_the_reservation_ttl_keeps_its_reservation() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n");
    let everything = parts.everything.display().to_string();
    let mut slow =
        Gateway::start(&s.gateway_args(&["--reservation-ttl", "1"], &[&everything, "stdio"]));
    slow.initialize();
    slow.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "trigger-long-running-operation",
                   "arguments": {"duration": 4, "steps": 2}}}));
    s.wait_for((0, 1), "reserved while in flight");
    // Past the TTL, twice over, while the slow call runs.
    std::thread::sleep(Duration::from_millis(2_500));
    let mut other =
        Gateway::start(&s.gateway_args(&["--reservation-ttl", "1"], &[&everything, "stdio"]));
    other.initialize();
    let refused = other.call(2, "echo", json!({"message": "meanwhile"}));
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"], "tool-budget",
        "a call ran while the slow one held the budget: {refused}"
    );
    let done = slow.answer(&json!(1));
    assert!(done["result"].is_object(), "{done}");
    s.wait_for((1, 0), "the slow call committed");
    drop(slow.stdin.take());
    drop(other.stdin.take());
    assert_eq!(slow.end(Duration::from_secs(10)).0, Some(0));
    assert_eq!(other.end(Duration::from_secs(10)).0, Some(0));
}

#[test]
fn a_server_crash_mid_call_answers_the_pending_call_and_ends_with_status_3() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let everything = parts.everything.display().to_string();
    let mut g = Gateway::start(&s.gateway_args(&[], &[&everything, "stdio"]));
    g.initialize();
    g.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "trigger-long-running-operation",
                   "arguments": {"duration": 10, "steps": 2}}}));
    s.wait_for((0, 1), "reserved while in flight");
    let pid = g.server_pid();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let answer = g.answer(&json!(7));
    // An error result the model reads: the call may have run, and counts.
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = text_of(&answer);
    assert!(text.contains("killed by signal 9"), "{text}");
    assert!(text.contains("may have run"), "{text}");
    let (code, err) = g.end(Duration::from_secs(10));
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(s.tool_calls(), (1, 0), "the call the server died on counts");
    assert!(
        err.contains("the MCP server was killed by signal 9"),
        "{err}"
    );
}

#[test]
fn a_100_mb_line_is_refused_without_being_held() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let everything = parts.everything.display().to_string();
    let mut g = Gateway::start(&s.gateway_args(&[], &[&everything, "stdio"]));
    g.initialize();
    {
        let stdin = g.stdin.as_mut().expect("stdin");
        stdin
            .write_all(br#"{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"echo","arguments":{"message":""#)
            .expect("write");
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..100 {
            stdin.write_all(&chunk).expect("write");
        }
        stdin.write_all(b"\"}}}\n").expect("write");
    }
    let refused = g.answer(&Value::Null);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("longer than 16 MiB"));
    g.send(&json!({"jsonrpc": "2.0", "id": 100, "method": "ping"}));
    assert!(g.answer(&json!(100))["result"].is_object());
    let status = std::fs::read_to_string(format!("/proc/{}/status", g.child.id())).expect("status");
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(
        peak_kib < 80 * 1024,
        "the gateway's peak memory was {peak_kib} KiB for a 100 MB line"
    );
    assert_eq!(s.tool_calls(), (0, 0), "nothing of the long line ran");
    drop(g.stdin.take());
    assert_eq!(g.end(Duration::from_secs(10)).0, Some(0));
}

#[test]
fn parallel_gateways_on_one_budget_never_exceed_it() {
    let Some(parts) = parts() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 6\n");
    let everything = parts.everything.display().to_string();
    let args = s.gateway_args(&[], &[&everything, "stdio"]);
    let handles: Vec<_> = (0..4)
        .map(|g| {
            let args = args.clone();
            std::thread::spawn(move || {
                let mut gw = Gateway::start(&args);
                gw.initialize();
                for i in 0..4u64 {
                    gw.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": format!("{g}-{i}")}}}));
                }
                let mut ran = 0;
                for i in 0..4u64 {
                    let a = gw.answer(&json!(i));
                    if a["result"]["isError"] != true {
                        ran += 1;
                    } else {
                        assert_eq!(a["result"]["_meta"]["budgetgate"]["reason"], "tool-budget");
                    }
                }
                drop(gw.stdin.take());
                assert_eq!(gw.end(Duration::from_secs(10)).0, Some(0));
                ran
            })
        })
        .collect();
    let ran: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("gateway"))
        .sum();
    assert_eq!(ran, 6, "16 calls on a budget of 6 through 4 gateways");
    assert_eq!(s.tool_calls(), (6, 0));
}

// ---- no npm package needed below: a shell stands in for the server.

#[test]
fn closing_stdin_stops_the_server_and_one_that_lingers_is_killed_with_what_it_started() {
    let s = Setup::new("");
    let started = Instant::now();
    // A shell that ignores SIGTERM and EOF, with a child of its own.
    let mut g = Gateway::start(&s.gateway_args(
        &["--shutdown-ms", "300"],
        &["sh", "-c", "trap '' TERM; sleep 30; true"],
    ));
    let server = g.server_pid();
    let grandchild = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children =
                std::fs::read_to_string(format!("/proc/{server}/task/{server}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children.split_whitespace().next() {
                break pid.to_owned();
            }
            assert!(Instant::now() < deadline, "the shell started no child");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    drop(g.stdin.take());
    let (code, err) = g.end(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("killed"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let gone = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|st| st.contains(") Z "))
            .unwrap_or(true)
    };
    assert!(gone(&server.to_string()), "the server is gone");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !gone(&grandchild) {
        assert!(
            Instant::now() < deadline,
            "the server's child {grandchild} outlived it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// MCP's stdio shutdown (issue 13: the client closing stdin shuts the
/// server down within a deadline): a client that writes its calls and
/// closes stdin at once (`printf … | budgetgate mcp -- server`) still gets
/// the answers the server gives while it shuts down, and they are counted;
/// a server that never answers is killed at the deadline, counted from
/// the client's close, and its call is counted, never given back.
#[test]
fn answers_given_while_the_server_shuts_down_reach_a_client_that_closed_stdin() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let server = python_server(&s, false);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let mut g = Gateway::start(&s.gateway_args(&[], &server));
    for id in 1..=2u64 {
        g.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"n": id}}}));
    }
    drop(g.stdin.take());
    for id in 1..=2u64 {
        let answer = g.answer(&json!(id));
        assert_eq!(text_of(&answer), format!(r#"{{"n": {id}}}"#), "{answer}");
    }
    let (code, err) = g.end(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(s.tool_calls(), (2, 0));

    // A server that reads nothing and answers nothing.
    let silent = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 5\n");
    let started = Instant::now();
    let mut g = Gateway::start(&silent.gateway_args(
        &["--shutdown-ms", "300"],
        &["sh", "-c", "trap '' TERM; sleep 30; true"],
    ));
    g.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"n": 1}}}));
    silent.wait_for((0, 1), "the call in flight");
    drop(g.stdin.take());
    let (code, err) = g.end(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("killed"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(silent.tool_calls(), (1, 0), "the unanswered call counts");
}

#[test]
fn a_server_that_exits_names_its_status_and_pending_requests_are_answered() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let mut g = Gateway::start(&s.gateway_args(&[], &["sh", "-c", "read line; exit 7"]));
    g.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "anything", "arguments": {}}}));
    let answer = g.answer(&json!(1));
    assert!(
        text_of(&answer).contains("exited with status 7"),
        "{answer}"
    );
    let (code, err) = g.end(Duration::from_secs(5));
    assert_eq!(code, Some(3));
    assert!(err.contains("exited with status 7"), "{err}");
    // The server read the call before it exited: it may have run.
    assert_eq!(s.tool_calls(), (1, 0));
}

/// A server that exits while a child of its own keeps its stdout open is
/// still seen to exit while the client keeps the gateway busy (a ping every
/// 10 ms, so it is never idle for long): the pending call is answered with
/// how the server ended, and the gateway ends with status 3.
#[test]
fn a_server_that_exits_is_seen_while_the_client_keeps_sending() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let mut g = Gateway::start(&s.gateway_args(&[], &["sh", "-c", "sleep 30 & read line; exit 7"]));
    g.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "anything", "arguments": {}}}));
    let sent = Instant::now();
    let mut stdin = g.stdin.take().expect("stdin");
    let mut ended = None;
    for n in 0..500 {
        let ping = json!({"jsonrpc": "2.0", "id": format!("p{n}"), "method": "ping"});
        if writeln!(stdin, "{ping}")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            break;
        }
        if let Some(status) = g.child.try_wait().expect("wait") {
            ended = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the gateway saw the server's exit only after {took:?} ({ended:?})"
    );
    let answer = g.answer(&json!(1));
    assert!(
        text_of(&answer).contains("exited with status 7"),
        "{answer}"
    );
    drop(stdin);
    let (code, err) = g.end(Duration::from_secs(5));
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("exited with status 7"), "{err}");
    assert_eq!(s.tool_calls(), (1, 0));
}

#[test]
fn a_budget_that_does_not_parse_refuses_to_start() {
    let s = Setup::new("[budget]\nmax_step = 3\n");
    let out = Command::new(bin())
        .args(&s.gateway_args(&[], &["sh", "-c", "exit 0"])[1..])
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fail closed"));
}

/// A tiny MCP server in Python (the system's python3): answers every
/// request with its arguments; with `flood`, also writes notifications of
/// 1 KiB as fast as its stdout takes them.
fn python_server(s: &Setup, flood: bool) -> Vec<String> {
    let script = s.path(if flood { "flood.py" } else { "echo.py" });
    std::fs::write(
        &script,
        format!(
            r#"import json, sys, threading
FLOOD = {flood}
def flood():
    note = json.dumps({{"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {{"level": "info", "data": "x" * 1024}}}}) + "\n"
    while True:
        sys.stdout.write(note)
if FLOOD:
    threading.Thread(target=flood, daemon=True).start()
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m:
        r = {{"content": [{{"type": "text", "text": json.dumps(m.get("params", {{}}).get("arguments"))}}]}}
        sys.stdout.write(json.dumps({{"jsonrpc": "2.0", "id": m["id"], "result": r}}) + "\n")
        sys.stdout.flush()
"#,
            flood = if flood { "True" } else { "False" }
        ),
    )
    .expect("script");
    vec!["python3".into(), script.display().to_string()]
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_server_flooding_notifications_does_not_grow_the_gateways_memory() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let server = python_server(&s, true);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let (go, held) = channel();
    let mut g = Gateway::start_held(&s.gateway_args(&[], &server), held);
    // The client reads nothing for a while: the flood must wait, not pile up.
    std::thread::sleep(Duration::from_millis(300));
    let early = rss_kib(g.child.id());
    std::thread::sleep(Duration::from_millis(1500));
    let late = rss_kib(g.child.id());
    assert!(
        late < 40 * 1024 && late < early + 8 * 1024,
        "the gateway's memory grew from {early} KiB to {late} KiB"
    );
    // It still answers, in order, once the client reads.
    go.send(()).expect("reader");
    let answer = g.call(1, "echo", json!({"n": 1}));
    assert_eq!(text_of(&answer), r#"{"n": 1}"#);
    drop(g.stdin.take());
    assert_eq!(g.end(Duration::from_secs(10)).0, Some(0));
}

#[test]
fn the_hook_and_a_gateway_draw_from_one_budget() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n");
    let state = s.path("state");
    // One call through the Claude Code hook on session "e2e" …
    let event = json!({"session_id": "e2e", "transcript_path": s.path("t.jsonl"),
        "cwd": s.dir.path(), "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1"});
    let mut hook = Command::new(bin())
        .args(["hook", "claude-code", "--budget"])
        .arg(s.path("budget.toml"))
        .arg("--state")
        .arg(&state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hook");
    hook.stdin
        .take()
        .expect("stdin")
        .write_all(event.to_string().as_bytes())
        .expect("event");
    assert!(hook.wait_with_output().expect("hook ends").status.success());
    // … and the gateway on the same ledger and session has one left.
    let server = python_server(&s, false);
    let mut args = s.gateway_args(&[], &server.iter().map(String::as_str).collect::<Vec<_>>());
    let at = args.iter().position(|a| a == "--ledger").expect("--ledger") + 1;
    args[at] = state.display().to_string();
    let mut g = Gateway::start(&args);
    assert!(g.call(1, "echo", json!({"n": 1}))["result"]["isError"] != true);
    let refused = g.call(2, "echo", json!({"n": 2}));
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"],
        "tool-budget"
    );
    assert!(text_of(&refused).contains("2 of 2 tool calls used"));
    drop(g.stdin.take());
    assert_eq!(g.end(Duration::from_secs(10)).0, Some(0));
}

#[test]
fn help_names_the_exit_statuses_and_a_shipped_budget() {
    let out = Command::new(bin())
        .args(["mcp", "--help"])
        .output()
        .expect("help");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit status: 0 the client closed stdin"),
        "{text}"
    );
    assert!(text.contains("3 the MCP server exited or crashed first"));
    assert!(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/mcp-budget.toml")
        .is_file());
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mcp-budget.toml"),
    )
    .expect("example");
    budgetgate::replay::parse_budget(&shipped).expect("the example budget parses");
    // No server command: a usage error.
    let out = Command::new(bin()).arg("mcp").output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

// ---- the Redis ledger: a redis-server of its own on loopback.

use common::redis::redis;

fn with_ledger(mut args: Vec<String>, ledger: &str) -> Vec<String> {
    let at = args.iter().position(|a| a == "--ledger").expect("--ledger") + 1;
    args[at] = ledger.to_owned();
    args
}

#[test]
fn parallel_gateways_on_one_redis_budget_never_exceed_it() {
    let Some(redis) = redis() else { return };
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_tool_calls = 6\n[tools]\nmax_calls = { capped = 2 }\n",
    );
    let server = python_server(&s, false);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let args = with_ledger(s.gateway_args(&[], &server), &redis.url);
    let handles: Vec<_> = (0..4)
        .map(|g| {
            let args = args.clone();
            std::thread::spawn(move || {
                let mut gw = Gateway::start(&args);
                for i in 0..4u64 {
                    let tool = if i == 0 { "capped" } else { "echo" };
                    gw.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": tool, "arguments": {"g": g, "i": i}}}));
                }
                let mut ran = Vec::new();
                for i in 0..4u64 {
                    let a = gw.answer(&json!(i));
                    if a["result"]["isError"] != true {
                        ran.push(i);
                    } else {
                        let reason = &a["result"]["_meta"]["budgetgate"]["reason"];
                        assert!(reason == "tool-budget" || reason == "tool-cap", "{a}");
                    }
                }
                drop(gw.stdin.take());
                assert_eq!(gw.end(Duration::from_secs(10)).0, Some(0));
                ran
            })
        })
        .collect();
    let ran: Vec<Vec<u64>> = handles
        .into_iter()
        .map(|h| h.join().expect("gateway"))
        .collect();
    let total: usize = ran.iter().map(Vec::len).sum();
    assert_eq!(
        total, 6,
        "16 calls on a budget of 6 through 4 gateways: {ran:?}"
    );
    let capped = ran.iter().flatten().filter(|&&i| i == 0).count();
    assert!(capped <= 2, "the cap of 2 held: {ran:?}");
    let mut store = budgetgate::ledger_redis::RedisStore::open(&redis.url, Duration::from_secs(5))
        .expect("client");
    let ledger = store
        .decide("e2e", |tx| {
            budgetgate::ledger::LedgerTx::ledger(tx, "e2e", "")
        })
        .expect("read")
        .expect("the session's ledger");
    use budgetgate_core::budget::Limit;
    assert_eq!(
        (
            ledger.used(Limit::ToolCalls),
            ledger.reserved(Limit::ToolCalls)
        ),
        (6, 0)
    );
}

/// SPEC E (reserve, then commit): a call answered after its reservation
/// expired, committed in the next decision's transaction while another
/// call is in flight, is counted once and never takes the other call's
/// reservation with it: on both ledgers the next call is refused on the
/// same figures (found by a hostile trial: Redis writes wait for `EXEC`,
/// so the transaction's own expiry check still saw the reservation its
/// commit had taken, and gave it back a second time).
#[test]
fn a_late_answer_committed_with_the_next_decision_counts_once_on_both_ledgers() {
    use budgetgate::gate::{ToolCall, Verdict};
    use budgetgate::mcp::{Backend, CallGate, LedgerGate};
    use budgetgate_core::budget::Limit;
    let Some(redis) = redis() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let budget = "[budget]\nmax_seconds = 100000\nmax_tool_calls = 2\nmax_repeats = 100\n[tools]\nmax_calls = { echo = 2 }\n";
    let backends: [(&str, Backend); 2] = [
        (
            "sqlite",
            Backend::Sqlite(
                budgetgate::ledger::Store::open(dir.path(), Duration::from_secs(5))
                    .expect("sqlite"),
            ),
        ),
        (
            "redis",
            Backend::Redis(
                budgetgate::ledger_redis::RedisStore::open(&redis.url, Duration::from_secs(5))
                    .expect("redis"),
            ),
        ),
    ];
    for (name, backend) in backends {
        let budget = budgetgate::replay::parse_budget(budget).expect("budget");
        let session = format!("late-{name}");
        let mut gate = LedgerGate::on(backend, budget, session.clone(), 2_000);
        let input = json!({});
        let call = |id: &'static str| ToolCall {
            name: "echo",
            input: &input,
            call_id: id,
            shown_id: id,
            id_scope: "on this connection",
            reused: false,
        };
        // A Redis ledger's time is its server's (issue 29): the time given
        // passes there for real.
        let pass = |ms: u64| {
            if name == "redis" {
                std::thread::sleep(Duration::from_millis(ms));
            }
        };
        const T0: u64 = 1_000_000;
        assert_eq!(gate.decide(&call("k1"), T0), Ok(Verdict::Run), "{name}");
        pass(1_000);
        assert_eq!(
            gate.decide(&call("k2"), T0 + 1_000),
            Ok(Verdict::Run),
            "{name}"
        );
        // k1 answered at T0 + 2 500, past its expiry (T0 + 2 000), k2 still
        // running: committed with k3's decision, which the budget refuses.
        pass(1_500);
        let ran = [("k1".to_owned(), "echo".to_owned())];
        let (failed, verdict) = gate.commit_then_decide(&ran, &call("k3"), T0 + 2_500);
        assert!(failed.is_empty(), "{name}: {failed:?}");
        match verdict {
            Ok(Verdict::Refuse(r)) => assert_eq!(r.reason, "tool-budget", "{name}"),
            other => panic!("{name}: k3 was not refused: {other:?}"),
        }
        let listed = if name == "sqlite" {
            budgetgate::ledger::Store::open(dir.path(), Duration::from_secs(5))
                .and_then(|s| s.list())
        } else {
            budgetgate::ledger_redis::RedisStore::open(&redis.url, Duration::from_secs(5))
                .and_then(|mut r| r.list())
        };
        let ledger = listed
            .expect("listed")
            .into_iter()
            .find(|l| l.session == session)
            .expect("the session")
            .ledger
            .expect("a record");
        assert_eq!(
            (
                ledger.used(Limit::ToolCalls),
                ledger.reserved(Limit::ToolCalls),
                ledger.tool_used("echo")
            ),
            (1, 1, 2),
            "{name}: k1 counted once, k2 still reserved, both in the cap"
        );
    }
}

/// A Redis ledger that cannot be reached is refused at start, on both
/// transports: exit 2, one line naming the URL, and no word of `appendonly`
/// (a server that never answered says nothing of its persistence).
#[test]
fn an_unreachable_redis_ledger_is_refused_at_start() {
    let url = "redis://127.0.0.1:1/0";
    let transports: [&[&str]; 2] = [
        &["--", "sh", "-c", "cat"],
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9/mcp",
        ],
    ];
    for transport in transports {
        let mut cmd = common::subcommand("mcp");
        cmd.args(["--terminal", "never", "--ledger", url])
            .args(transport)
            .write_stdin("")
            .timeout(Duration::from_secs(30));
        let line = common::one_line_error(&mut cmd, "mcp");
        assert!(line.contains(url), "{transport:?}: {line}");
        assert!(line.contains("cannot be reached"), "{transport:?}: {line}");
        assert!(!line.contains("appendonly"), "{transport:?}: {line}");
    }
}

/// A Redis ledger that goes away under a running gateway refuses every
/// gated call (`gate-error`, the URL in the text; fail closed), while
/// messages that are not gated still pass.
#[test]
fn a_redis_ledger_that_goes_away_refuses_calls() {
    let Some(redis) = redis() else { return };
    let url = redis.url.clone();
    let s = Setup::new("[budget]\nmax_seconds = 3600\n");
    let server = python_server(&s, false);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let args = with_ledger(s.gateway_args(&[], &server), &url);
    let mut g = Gateway::start(&args);
    let made = g.call(1, "echo", json!({"n": 1}));
    assert_ne!(made["result"]["isError"], true, "{made}");
    drop(redis);
    let refused = g.call(3, "echo", json!({"n": 3}));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"],
        "gate-error"
    );
    assert!(text_of(&refused).contains(&url), "{refused}");
    // Pass-through still works: only tool calls need the ledger.
    g.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    assert!(g.answer(&json!(2))["result"].is_object());
    drop(g.stdin.take());
    assert_eq!(g.end(Duration::from_secs(10)).0, Some(0));
}

#[test]
fn a_redis_decision_made_on_figures_another_writer_changed_is_made_again() {
    let Some(redis) = redis() else { return };
    use budgetgate::ledger::LedgerTx;
    let open = || {
        budgetgate::ledger_redis::RedisStore::open(&redis.url, Duration::from_secs(5))
            .expect("client")
    };
    let (mut a, mut b) = (open(), open());
    let mut runs = 0;
    // Insert-if-absent of a call id, as the gate does it.
    let take = |tx: &budgetgate::ledger_redis::RedisTx<'_>| -> Result<bool, budgetgate::ledger::StoreError> {
        let fresh = tx.call("race", "c1")?.is_none();
        if fresh {
            tx.put_call("race", "c1", 1, "{\"run\":true}")?;
        }
        Ok(fresh)
    };
    let first = a
        .decide("race", |tx| {
            runs += 1;
            let fresh = take(tx)?;
            if runs == 1 {
                // Another gateway takes the same id between the read and EXEC.
                let other = b.decide("race", |tx| take(tx));
                assert!(other.expect("b decides"));
            }
            Ok::<_, budgetgate::ledger::StoreError>(fresh)
        })
        .expect("a decides");
    assert_eq!(
        runs, 2,
        "the first EXEC was refused and the decision made again"
    );
    assert!(!first, "made again, a sees the id b took");
}

/// The command line: `--listen` with a command, or without `--upstream`,
/// is refused before anything starts (exit 2, the clash named), never
/// served on stdio; the server's command may follow the gateway's options
/// with or without `--`, its own options included (`-c` below is the
/// shell's, not the gateway's); an unknown option before it is refused.
#[test]
fn the_command_line_refuses_clashing_transports_and_takes_the_command_with_or_without_dashes() {
    let state = std::env::temp_dir().join(format!("bg-mcp-cli-{}", std::process::id()));
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("BUDGETGATE_STATE_DIR", &state)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let clash = run(&["mcp", "--listen", "18080", "--", "cat"]);
    assert_eq!(clash.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&clash.stderr).contains("cannot be used with"));
    let alone = run(&["mcp", "--listen", "18080"]);
    assert_eq!(alone.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert!(stderr.contains("--upstream <URL>"), "{stderr}");
    assert!(!stderr.contains("  <COMMAND>"), "{stderr}");
    let unknown = run(&["mcp", "--stat", "/tmp", "cat"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unexpected argument '--stat'"));
    // The client closes stdin at once: the server is stopped, exit 0.
    for args in [
        &["mcp", "sh", "-c", "cat"][..],
        &["mcp", "--", "sh", "-c", "cat"][..],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&state);
}

/// `--ledger` in a folder that does not exist is refused before the server
/// starts (exit 2, the folder named), for `sqlite:FILE` and a state folder
/// alike: a mistyped path never starts an empty budget (fail closed). A new
/// state folder in an existing one is made.
#[test]
fn a_ledger_in_a_folder_that_does_not_exist_is_refused() {
    let base = std::env::temp_dir().join(format!("bg-mcp-ledger-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let missing = base.join("no/such");
    for ledger in [
        format!("sqlite:{}", missing.join("l.sqlite3").display()),
        missing.join("state").display().to_string(),
    ] {
        let out = Command::new(bin())
            .args(["mcp", "--ledger", &ledger, "--", "sh", "-c", "cat"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ledger}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("does not exist"), "{stderr}");
    }
    assert!(!base.join("no").exists(), "nothing was created");
    let fresh = base.join("state");
    let out = Command::new(bin())
        .args([
            "mcp",
            "--ledger",
            &fresh.display().to_string(),
            "--",
            "sh",
            "-c",
            "cat",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fresh.join("ledger.sqlite3").exists());
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 13 (`--durability`): with `normal`, decisions are made and
/// counted as with `full`, and a gateway killed outright (SIGKILL, no
/// shutdown) leaves every answered call counted in the ledger: NORMAL
/// keeps what a crash of the process would lose. A Redis ledger with
/// `--durability normal` is refused (its durability is the server's), and
/// an unknown level is refused by the command line.
#[test]
fn a_gateway_with_normal_durability_keeps_its_decisions_when_killed() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n");
    let server = python_server(&s, false);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let args = s.gateway_args(&["--durability", "normal"], &server);
    let mut gw = Gateway::start(&args);
    for (id, ran) in [(1, true), (2, true), (3, false)] {
        let a = gw.call(id, "echo", json!({"message": format!("m{id}")}));
        assert_eq!(a["result"]["isError"] != true, ran, "call {id}: {a}");
    }
    gw.child.kill().expect("kill");
    let _ = gw.child.wait();
    assert_eq!(
        s.tool_calls(),
        (2, 0),
        "both answered calls are in the ledger"
    );

    for (extra, ledger, said) in [
        (
            vec!["--durability", "normal"],
            Some("redis://127.0.0.1:1/0"),
            "appendfsync",
        ),
        (vec!["--durability", "sometimes"], None, "sometimes"),
    ] {
        let mut args = s.gateway_args(&extra, &["sh", "-c", "cat"]);
        if let Some(url) = ledger {
            args = with_ledger(args, url);
        }
        let out = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
    }
}

// ---- issue 29: the Redis ledger against clock skew, foreign keys and a
// server that lost its data.

/// A gate on the Redis ledger at `url` for `session`: `budget` (TOML),
/// reservations expiring after `ttl_ms`.
fn redis_gate(url: &str, budget: &str, session: &str, ttl_ms: u64) -> budgetgate::mcp::LedgerGate {
    let budget = budgetgate::replay::parse_budget(budget).expect("budget");
    let store = budgetgate::ledger_redis::RedisStore::open(url, Duration::from_secs(5))
        .expect("redis client");
    budgetgate::mcp::LedgerGate::on(
        budgetgate::mcp::Backend::Redis(store),
        budget,
        session.to_owned(),
        ttl_ms,
    )
}

/// Decides a call of `echo` with id `id` (its input made of the id, so no
/// two calls repeat) at `now`.
fn decide_echo(
    gate: &mut budgetgate::mcp::LedgerGate,
    id: &str,
    now: u64,
) -> Result<budgetgate::gate::Verdict, String> {
    use budgetgate::mcp::CallGate;
    let input = json!({ "id": id });
    gate.decide(
        &budgetgate::gate::ToolCall {
            name: "echo",
            input: &input,
            call_id: id,
            shown_id: id,
            id_scope: "on this connection",
            reused: false,
        },
        now,
    )
}

/// Milliseconds since the Unix epoch by this machine's clock.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// The session's ledger in Redis: (tool calls used, reserved).
fn redis_tool_calls(url: &str, session: &str) -> (u64, u64) {
    use budgetgate_core::budget::Limit;
    let ledger = budgetgate::ledger_redis::RedisStore::open(url, Duration::from_secs(5))
        .and_then(|mut r| r.list())
        .expect("listed")
        .into_iter()
        .find(|l| l.session == session && l.agent.is_empty())
        .expect("the session")
        .ledger
        .expect("a record");
    (
        ledger.used(Limit::ToolCalls),
        ledger.reserved(Limit::ToolCalls),
    )
}

/// Issue 29 (clock skew): on Redis, time is the server's, not each
/// gateway's: a gateway whose clock is 61 s ahead of another's gets no
/// second `per_minute` window at once. With `per_minute = 3`, 3 calls
/// through one gateway and 3 through the other pass 3 in all.
#[test]
fn a_gateway_whose_clock_is_ahead_gets_no_second_rate_window_on_redis() {
    use budgetgate::gate::Verdict;
    let Some(redis) = redis() else { return };
    let budget = "[budget]\nmax_seconds = 100000\n[rate]\nper_minute = 3\n";
    let mut on_time = redis_gate(&redis.url, budget, "skew-rate", 600_000);
    let mut ahead = redis_gate(&redis.url, budget, "skew-rate", 600_000);
    let now = wall_ms();
    let mut ran = Vec::new();
    for i in 0..3u64 {
        let id = format!("on-time-{i}");
        if decide_echo(&mut on_time, &id, now + i) == Ok(Verdict::Run) {
            ran.push(id);
        }
    }
    for i in 0..3u64 {
        let id = format!("ahead-{i}");
        match decide_echo(&mut ahead, &id, now + 61_000 + i) {
            Ok(Verdict::Run) => ran.push(id),
            Ok(Verdict::Refuse(r)) => assert_eq!(r.reason, "rate-limit", "{id}: {r:?}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(ran.len(), 3, "per_minute = 3 across both gateways: {ran:?}");
}

/// Issue 29 (clock skew): a gateway whose clock is ahead by more than the
/// reservation TTL does not expire (and give back) another gateway's live
/// reservation: with `max_tool_calls = 1` and a call in flight, its call is
/// refused.
#[test]
fn a_gateway_whose_clock_is_ahead_expires_no_live_reservation_on_redis() {
    use budgetgate::gate::Verdict;
    let Some(redis) = redis() else { return };
    let budget = "[budget]\nmax_seconds = 100000\nmax_tool_calls = 1\n";
    let mut on_time = redis_gate(&redis.url, budget, "skew-ttl", 10_000);
    let mut ahead = redis_gate(&redis.url, budget, "skew-ttl", 10_000);
    let now = wall_ms();
    assert_eq!(decide_echo(&mut on_time, "k1", now), Ok(Verdict::Run));
    match decide_echo(&mut ahead, "k2", now + 30_000) {
        Ok(Verdict::Refuse(r)) => assert_eq!(r.reason, "tool-budget", "{r:?}"),
        other => panic!("k2 was let through while k1 is in flight: {other:?}"),
    }
    assert_eq!(redis_tool_calls(&redis.url, "skew-ttl"), (0, 1));
}

fn redis_conn(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a connection")
}

/// Every key of `session` with its `DUMP` (type and content, byte for byte).
fn session_state(conn: &mut redis::Connection, session: &str) -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("bg:{{{session}}}:*"))
        .query(conn)
        .expect("KEYS");
    names.sort();
    names
        .into_iter()
        .map(|k| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(conn).expect("DUMP");
            (k, dump)
        })
        .collect()
}

/// Issue 29 (partial transactions): a key of another type in a session
/// (another client's `SET bg:{S}:updated x`) makes each decision an error
/// that names the key, its type and the type expected, and nothing of the
/// session changes, byte for byte: no reservation left, nothing counted,
/// also when commits shared the transaction. Once the key is repaired, the
/// commit and the decision made again count once.
#[test]
fn a_wrong_typed_redis_key_refuses_and_leaves_the_session_unchanged() {
    use budgetgate::gate::Verdict;
    use budgetgate::mcp::CallGate;
    let Some(redis) = redis() else { return };
    let budget = "[budget]\nmax_seconds = 100000\nmax_tool_calls = 10\n";
    let mut gate = redis_gate(&redis.url, budget, "planted", 600_000);
    let now = wall_ms();
    assert_eq!(decide_echo(&mut gate, "k1", now), Ok(Verdict::Run));
    let mut conn = redis_conn(&redis.url);
    let _: () = redis::cmd("SET")
        .arg("bg:{planted}:updated")
        .arg("x")
        .query(&mut conn)
        .expect("SET");
    let before = session_state(&mut conn, "planted");

    let refused = decide_echo(&mut gate, "k2", now + 1);
    assert_eq!(
        session_state(&mut conn, "planted"),
        before,
        "k2 left nothing"
    );
    let e = refused.expect_err("a decision on a wrong-typed key is an error");
    assert!(
        e.contains("bg:{planted}:updated") && e.contains("string") && e.contains("hash"),
        "{e}"
    );

    let input = json!({"id": "k3"});
    let k3 = budgetgate::gate::ToolCall {
        name: "echo",
        input: &input,
        call_id: "k3",
        shown_id: "k3",
        id_scope: "on this connection",
        reused: false,
    };
    let ran = [("k1".to_owned(), "echo".to_owned())];
    let (failed, verdict) = gate.commit_then_decide(&ran, &k3, now + 2);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(verdict.is_err(), "{verdict:?}");
    assert_eq!(
        session_state(&mut conn, "planted"),
        before,
        "k1's commit and k3's decision left nothing"
    );

    let _: () = redis::cmd("DEL")
        .arg("bg:{planted}:updated")
        .query(&mut conn)
        .expect("DEL");
    assert_eq!(
        redis_tool_calls(&redis.url, "planted"),
        (0, 1),
        "k1 in flight"
    );
    let (failed, verdict) = gate.commit_then_decide(&ran, &k3, now + 3);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(verdict, Ok(Verdict::Run));
    assert_eq!(
        redis_tool_calls(&redis.url, "planted"),
        (1, 1),
        "k1 counted once, k3 reserved"
    );
}

/// Issue 29 (partial transactions): the log is the session's own key, so a
/// `bg:log` of another type (or another session's wrong-typed key) takes
/// no decision of a healthy session down: its refusals are made and logged,
/// and read back by `RedisStore::log` beside the old shared log's entries.
#[test]
fn a_planted_shared_log_or_another_sessions_key_leaves_a_healthy_session_alone() {
    use budgetgate::gate::Verdict;
    let Some(redis) = redis() else { return };
    let mut conn = redis_conn(&redis.url);
    for key in ["bg:log", "bg:{other}:updated"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("x")
            .query(&mut conn)
            .expect("SET");
    }
    let budget = "[budget]\nmax_seconds = 100000\nmax_tool_calls = 1\n";
    let mut healthy = redis_gate(&redis.url, budget, "healthy", 600_000);
    let now = wall_ms();
    assert_eq!(decide_echo(&mut healthy, "k1", now), Ok(Verdict::Run));
    match decide_echo(&mut healthy, "k2", now + 1) {
        Ok(Verdict::Refuse(r)) => assert_eq!(r.reason, "tool-budget", "{r:?}"),
        other => panic!("k2: {other:?}"),
    }
    let mut other = redis_gate(&redis.url, budget, "other", 600_000);
    let e = decide_echo(&mut other, "o1", now).expect_err("the other session fails closed");
    assert!(e.contains("bg:{other}:updated"), "{e}");
    let log = budgetgate::ledger_redis::RedisStore::open(&redis.url, Duration::from_secs(5))
        .and_then(|mut r| r.log())
        .expect("the log is read");
    assert!(
        log.iter().any(|(_, s, action, detail)| s == "healthy"
            && action == "deny"
            && detail.contains("k2")),
        "{log:?}"
    );
}

/// Issue 29 (a Redis without persistence restarted, or `FLUSHDB`): a
/// ledger that vanished under a running gateway is detected, and the next
/// call refused (gate-error naming the cause), never given a whole budget
/// again; a gateway started afterwards works. An operator's `ledger reset`
/// is no such loss: the ledger's epoch stays. The server has `appendonly
/// no`, and the gateway says so at start.
#[test]
fn a_flushed_redis_ledger_is_refused_until_the_gateway_restarts() {
    let Some(redis) = redis() else { return };
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n");
    let server = python_server(&s, false);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let args = with_ledger(s.gateway_args(&[], &server), &redis.url);
    let mut gw = Gateway::start(&args);
    for id in [1, 2] {
        let ran = gw.call(id, "echo", json!({ "n": id }));
        assert_ne!(ran["result"]["isError"], true, "{ran}");
    }
    let reset = Command::new(bin())
        .args(["ledger", "reset", "e2e", "--yes", "--ledger", &redis.url])
        .output()
        .expect("runs");
    assert_eq!(reset.status.code(), Some(0), "{reset:?}");
    let ran = gw.call(3, "echo", json!({"n": 3}));
    assert_ne!(ran["result"]["isError"], true, "after a reset: {ran}");
    // The whole budget is used (the third call is committed with the next
    // decision); the ledger is lost.
    let _: () = redis::cmd("FLUSHDB")
        .query(&mut redis_conn(&redis.url))
        .expect("FLUSHDB");
    let refused = gw.call(4, "echo", json!({"n": 4}));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"], "gate-error",
        "{refused}"
    );
    assert!(text_of(&refused).contains("vanished"), "{refused}");
    drop(gw.stdin.take());
    let (code, stderr) = gw.end(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("budgetgate mcp: warning: the Redis server at")
            && stderr.contains("appendonly no"),
        "{stderr}"
    );

    let mut fresh = Gateway::start(&args);
    let again = fresh.call(5, "echo", json!({"n": 5}));
    assert_ne!(again["result"]["isError"], true, "{again}");
    drop(fresh.stdin.take());
    assert_eq!(fresh.end(Duration::from_secs(10)).0, Some(0));
}

/// Issue 29: at start, a gateway on a Redis ledger asks the server whether
/// it persists every write (`CONFIG GET appendonly`): nothing is said when
/// it does, a warning when it does not, and a server that refuses
/// `CONFIG` is said to be unchecked.
#[test]
fn a_redis_gateway_warns_unless_the_server_has_appendonly_yes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().display().to_string();
    let cases: [(&[&str], Option<&str>); 3] = [
        (&["--appendonly", "yes", "--dir", &folder], None),
        (&[], Some("has appendonly no")),
        (
            &["--rename-command", "CONFIG", ""],
            Some("could not be checked"),
        ),
    ];
    for (extra, said) in cases {
        let Some(redis) = common::redis::redis_with(extra) else {
            return;
        };
        let out = Command::new(bin())
            .args(["mcp", "--terminal", "never", "--ledger", &redis.url])
            .args(["--", "sh", "-c", "cat"])
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {stderr}");
        match said {
            None => assert!(!stderr.contains("warning"), "{extra:?}: {stderr}"),
            Some(said) => assert!(
                stderr.contains("budgetgate mcp: warning:") && stderr.contains(said),
                "{extra:?}: {stderr}"
            ),
        }
    }
}

/// Issue 29, reproduction 2 on Redis: with Redis shut down while call 1's
/// answer came, its commit failed and was lost; restarted from its AOF,
/// the reservation then expired and was given back, so a budget of two
/// ran three. The failed commit is kept, calls are refused until it lands,
/// and after the restart the budget holds.
#[test]
fn a_commit_that_failed_while_redis_was_down_lands_after_its_restart() {
    use budgetgate::mcp::{Backend, LedgerGate, Out, Proxy};
    if redis().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("addr")
        .port();
    let start = || {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        common::redis::wait_for_port(port);
        child
    };
    let mut server = start();
    let url = format!("redis://127.0.0.1:{port}/0");
    let budget =
        budgetgate::replay::parse_budget("[budget]\nmax_seconds = 100000\nmax_tool_calls = 2\n")
            .expect("budget");
    let store =
        budgetgate::ledger_redis::RedisStore::open(&url, Duration::from_secs(2)).expect("redis");
    let gate = LedgerGate::on(Backend::Redis(store), budget, "down".into(), 2_000);
    let mut p = Proxy::new(gate, "c".into(), 4096, 60_000);
    let call = |n: u64| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "t", "arguments": {"n": n}}})
        .to_string()
    };
    let forwarded = |outs: &[Out]| outs.iter().filter(|o| matches!(o, Out::Server(_))).count();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis() as u64
    };
    assert_eq!(forwarded(&p.on_client(call(1).as_bytes(), now())), 1);
    // Redis shuts down (its AOF written) while call 1 runs.
    let _ = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "shutdown"])
        .status();
    let _ = server.wait();
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).to_string();
    p.on_server(answer.as_bytes(), now());
    assert_eq!(p.unsettled(), 1, "the failed commit is kept");
    let outs = p.on_client(call(2).as_bytes(), now());
    assert_eq!(forwarded(&outs), 0, "a call let through with a commit lost");
    // Restarted from its AOF, past the reservation's TTL.
    std::thread::sleep(Duration::from_millis(2_500));
    server = start();
    let mut ran = 0;
    for n in 3..=6 {
        ran += forwarded(&p.on_client(call(n).as_bytes(), now()));
    }
    assert_eq!(ran, 1, "one more call on a budget of two");
    assert_eq!(p.unsettled(), 0);
    drop(p);
    let _ = server.kill();
    let _ = server.wait();
}

/// Issue 29, reproduction 3 on Redis: a live gate renews its reservation
/// (in the server's time), so another gate on the session never takes it
/// for a dead one's; once renewal stops, it is spent, never given back.
#[test]
fn a_renewed_reservation_outlives_its_ttl_on_redis_and_is_spent_when_renewal_stops() {
    use budgetgate::gate::Verdict;
    use budgetgate::mcp::CallGate;
    let Some(redis) = redis() else { return };
    let budget = "[budget]\nmax_seconds = 100000\nmax_tool_calls = 1\n";
    let mut live = redis_gate(&redis.url, budget, "renew", 1_000);
    let mut other = redis_gate(&redis.url, budget, "renew", 1_000);
    assert_eq!(decide_echo(&mut live, "k1", 0), Ok(Verdict::Run));
    for n in 0..6 {
        std::thread::sleep(Duration::from_millis(400));
        live.renew(&["k1".to_owned()], 0).expect("renewed");
        let verdict = decide_echo(&mut other, &format!("o{n}"), 0);
        assert!(
            matches!(&verdict, Ok(Verdict::Refuse(r)) if r.reason == "tool-budget"),
            "another call ran while k1 was renewed: {verdict:?}"
        );
    }
    // Renewal stops (the gate died): past the TTL, k1 is spent.
    std::thread::sleep(Duration::from_millis(1_200));
    let verdict = decide_echo(&mut other, "o9", 0);
    assert!(
        matches!(&verdict, Ok(Verdict::Refuse(r)) if r.reason == "tool-budget"),
        "the expired reservation was given back: {verdict:?}"
    );
}

/// A newcomer's trial: a tool name the budget gives a rule of its own
/// (`needs_approval`, `max_calls`) that the server does not list applies
/// to nothing, so a misspelt one silently turned approval off. Once the
/// server's `tools/list` has been read to its last page, the gateway warns
/// once, naming each such name and its rule; names the server lists, on
/// any page, are not named.
#[test]
fn the_budgets_tool_names_the_server_does_not_list_are_warned_of() {
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"writefile\", \"write_file\", \"read_text_file\"]\n\
         max_calls = { read_txt_file = 1, read_text_file = 2, write_file = 0 }\n",
    );
    // A server of two pages: its second asked for first (a listing not
    // read from its start: nothing is concluded from it), then both in
    // order, then another listing (not warned again).
    let server = r#"read z; echo '{"jsonrpc":"2.0","id":0,"result":{"tools":[{"name":"read_text_file"}]}}'; read a; echo '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"write_file"}],"nextCursor":"p2"}}'; read b; echo '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"read_text_file"}]}}'; read c; echo '{"jsonrpc":"2.0","id":3,"result":{"tools":[]}}'; cat > /dev/null"#;
    let mut g = Gateway::start(&s.gateway_args(&[], &["sh", "-c", server]));
    let mut answers = Vec::new();
    for (id, cursor) in [(0, Some("p2")), (1, None), (2, Some("p2")), (3, None)] {
        let mut params = json!({});
        if let Some(c) = cursor {
            params["cursor"] = json!(c);
        }
        g.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}));
        answers.push(g.answer(&json!(id)).to_string());
    }
    // A call the budget refuses is said on stderr too, for an operator.
    // Its id is the client's, shown as text: no line break, no escape
    // sequence reaches the operator's terminal.
    let id = json!("4\n\u{1b}[2J");
    g.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "write_file", "arguments": {}}}));
    let refused = g.answer(&id).to_string();
    assert!(refused.contains("\"isError\":true"), "{refused}");
    // So is one refused for want of an approval (no one can be asked).
    g.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "read_text_file", "arguments": {}}}));
    let unasked = g.answer(&json!(5)).to_string();
    assert!(unasked.contains("approval-refused"), "{unasked}");
    drop(g.stdin.take());
    let (_, stderr) = g.end(Duration::from_secs(10));
    assert!(answers[2].contains("read_text_file"), "{answers:?}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("budgetgate mcp: refused "))
        .collect();
    assert_eq!(said.len(), 2, "{stderr}");
    assert!(
        said[1].starts_with("budgetgate mcp: refused read_text_file (approval-refused, mcp/"),
        "{stderr}"
    );
    assert!(
        said[0].starts_with("budgetgate mcp: refused write_file (tool-cap, mcp/")
            && said[0].ends_with(r#"/"4\n\u001b[2J")"#),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the budget names tools the server does not list"))
        .collect();
    assert_eq!(
        warned,
        ["budgetgate mcp: warning: the budget names tools the server does not list: \"writefile\" (needs_approval), \"read_txt_file\" (max_calls); a rule applies only to a tool of exactly that name (the server's tools/list)"],
        "{stderr}"
    );
}
