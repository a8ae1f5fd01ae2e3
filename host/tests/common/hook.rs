//! The Claude Code hook's test helpers: the hook run as Claude Code runs it
//! (one process per event, the event on stdin), its answers, the ledger it
//! keeps, and transcript lines written as Claude Code writes them.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::{json, Value};

use super::Setup;

/// The hook tests' usual budget: five tool calls, one repeat, 1 000 tokens,
/// an hour, `Write` asked, `Bash` capped at two.
pub const BUDGET: &str = r#"
[budget]
max_tool_calls = 5
max_repeats = 1
max_tokens = 1000
max_seconds = 3600
[tools]
needs_approval = ["Write"]
max_calls = { Bash = 2 }
"#;

/// The `budgetgate` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

/// The hook's session `s1`, its transcript `session.jsonl` and its ledger
/// in the folder's `state`.
impl Setup {
    pub fn transcript(&self) -> String {
        self.path("session.jsonl").display().to_string()
    }
    pub fn event(&self, name: &str, extra: Value) -> Value {
        let mut event = json!({
            "session_id": "s1",
            "transcript_path": self.transcript(),
            "cwd": self.dir.path(),
            "permission_mode": "default",
            "hook_event_name": name,
        });
        for (k, v) in extra.as_object().expect("object") {
            event[k] = v.clone();
        }
        event
    }
    pub fn pre(&self, tool: &str, input: Value, id: &str) -> Value {
        self.event(
            "PreToolUse",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id}),
        )
    }
    /// Makes the hook and `ledger` use the ledger at `url` (`--ledger`)
    /// instead of the folder's `state`.
    pub fn use_ledger(&self, url: &str) {
        std::fs::write(self.path("ledger.url"), url).expect("ledger URL");
    }
    /// `--ledger URL` or `--state FOLDER`, as [`Self::use_ledger`] chose.
    fn ledger_args(&self) -> Vec<std::ffi::OsString> {
        match std::fs::read_to_string(self.path("ledger.url")) {
            Ok(url) => vec!["--ledger".into(), url.into()],
            Err(_) => vec!["--state".into(), self.path("state").into()],
        }
    }
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(["hook", "claude-code", "--budget"])
            .arg(self.path("budget.toml"))
            .args(self.ledger_args());
        cmd
    }
    pub fn spawn(&self, event: &Value) -> Child {
        self.spawn_with(&[], event)
    }
    /// The hook with extra options (`--deadline-ms`).
    pub fn spawn_with(&self, options: &[&str], event: &Value) -> Child {
        self.spawn_text(options, &event.to_string())
    }
    /// The hook with extra options on an event given as its text.
    fn spawn_text(&self, options: &[&str], event: &str) -> Child {
        let mut child = self
            .command()
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hook starts");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(event.as_bytes()).expect("event written");
        child
    }
    /// The hook on an event given as its text (which a `Value` cannot
    /// spell: a lone surrogate escape).
    pub fn run_text(&self, event: &str) -> Output {
        self.spawn_text(&[], event)
            .wait_with_output()
            .expect("hook ends")
    }
    pub fn run(&self, event: &Value) -> Output {
        self.spawn(event).wait_with_output().expect("hook ends")
    }
    pub fn run_with(&self, options: &[&str], event: &Value) -> Output {
        self.spawn_with(options, event)
            .wait_with_output()
            .expect("hook ends")
    }
    pub fn ledger(&self) -> Vec<Value> {
        let out = Command::new(bin())
            .args(["ledger", "list", "--json"])
            .args(self.ledger_args())
            .output()
            .expect("ledger list");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout)
            .expect("UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }
    pub fn used(&self, limit: &str) -> u64 {
        self.ledger()
            .iter()
            .find(|l| l["agent"].is_null())
            .map_or(0, |l| l["limits"][limit]["used"].as_u64().expect("used"))
    }
}

/// The decision in a hook's output: "none" for no decision.
pub fn decision(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("\"allow\""), "never allow: {text}");
    if text.trim().is_empty() {
        return "none".into();
    }
    let value: Value = serde_json::from_str(text.trim()).expect("one JSON answer");
    let d = &value["hookSpecificOutput"];
    if d.is_null() {
        assert_eq!(value["continue"], false, "{value}");
        return "stop".into();
    }
    assert_eq!(d["hookEventName"], "PreToolUse");
    let stop = if value["continue"] == false {
        // A spent budget also ends the agent loop, with the same reason.
        assert_eq!(value["stopReason"], d["permissionDecisionReason"]);
        " [continue: false]"
    } else {
        ""
    };
    format!(
        "{}: {}{stop}",
        d["permissionDecision"].as_str().expect("decision"),
        d["permissionDecisionReason"].as_str().expect("reason")
    )
}

pub fn assistant_line(message_id: &str, request: &str, usage: Value, blocks: Value) -> String {
    json!({"type": "assistant", "requestId": request, "timestamp": "2026-12-01T10:00:00Z",
           "message": {"id": message_id, "type": "message", "role": "assistant",
                       "model": "claude-haiku-4-5-20251001", "content": blocks,
                       "stop_reason": null, "usage": usage}})
    .to_string()
}

pub fn append(path: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}
