//! One store (issue 30): `budgetgate hook claude-code --ledger redis://…`
//! decides on a Redis ledger as it does on SQLite, against a real
//! `redis-server`: the same events, transcript and budget give the same
//! answers and the same ledger on both.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

const BUDGET: &str = "[budget]\nmax_model_calls = 5\nmax_tokens = 100000\nmax_seconds = 3600\nmax_tool_calls = 5\nmax_repeats = 1\n[tools]\nmax_calls = { Bash = 2 }\n";

fn assistant_line(message_id: &str, request: &str, tokens: u64, id: &str) -> String {
    json!({"type": "assistant", "requestId": request, "timestamp": "2026-12-01T10:00:00Z",
           "message": {"id": message_id, "type": "message", "role": "assistant",
                       "model": "claude-haiku-4-5-20251001",
                       "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {}}],
                       "stop_reason": null,
                       "usage": {"input_tokens": tokens, "output_tokens": 10}}})
    .to_string()
}

/// Runs `budgetgate hook claude-code` on `event` with the budget in `dir`
/// and `ledger` (a `--ledger` URL): its decision and reason.
fn hook(dir: &std::path::Path, ledger: &str, event: &Value) -> String {
    let mut child = Command::new(bin())
        .args(["hook", "claude-code", "--budget"])
        .arg(dir.join("budget.toml"))
        .args(["--ledger", ledger])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(event.to_string().as_bytes())
        .expect("event");
    let out = child.wait_with_output().expect("hook ends");
    assert_eq!(out.status.code(), Some(0), "{ledger}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!text.contains("\"allow\""), "never allow: {text}");
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let d = &v["hookSpecificOutput"];
    format!(
        "{} {}",
        d["permissionDecision"].as_str().unwrap_or("none"),
        d["permissionDecisionReason"].as_str().unwrap_or("")
    )
}

/// Runs the scenario with `ledger` (a `--ledger` URL); the hook's answers
/// in order, and `ledger list --json` of the session.
fn scenario(dir: &std::path::Path, ledger: &str) -> (Vec<String>, Value) {
    std::fs::write(dir.join("budget.toml"), BUDGET).expect("budget");
    let transcript = dir.join("session.jsonl");
    let _ = std::fs::remove_file(&transcript);
    let event = |tool: &str, input: Value, id: &str| {
        json!({"session_id": "shared", "transcript_path": transcript,
               "cwd": dir, "permission_mode": "default",
               "hook_event_name": "PreToolUse",
               "tool_name": tool, "tool_input": input, "tool_use_id": id})
    };
    let steps: Vec<(Option<String>, Value)> = vec![
        (
            Some(assistant_line("m1", "r1", 100, "t1")),
            event("Bash", json!({"command": "ls"}), "t1"),
        ),
        (None, event("Bash", json!({"command": "ls"}), "t1")),
        (
            Some(assistant_line("m2", "r2", 200, "t2")),
            event("Bash", json!({"command": "ls"}), "t2"),
        ),
        (None, event("Read", json!({"file_path": "/x"}), "t3")),
        (None, event("Bash", json!({"command": "pwd"}), "t4")),
        (
            Some(assistant_line("m3", "r3", 300, "t5")),
            event("Bash", json!({"command": "id"}), "t5"),
        ),
        (None, event("bad name", json!({}), "t6")),
    ];
    let mut answers = Vec::new();
    for (line, ev) in steps {
        if let Some(line) = line {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&transcript)
                .expect("transcript");
            writeln!(f, "{line}").expect("write");
        }
        answers.push(hook(dir, ledger, &ev));
    }
    let out = Command::new(bin())
        .args(["ledger", "list", "--json", "--ledger", ledger])
        .output()
        .expect("ledger list");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let listed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let mut session = listed
        .into_iter()
        .find(|l| l["session"] == "shared" && l["agent"].is_null())
        .expect("the session's ledger");
    // Wall-clock figures differ from run to run.
    session["updated_ms"] = Value::Null;
    session["limits"]["time_ms"]["used"] = Value::Null;
    (answers, session)
}

#[test]
fn the_hook_decides_on_redis_as_it_does_on_sqlite() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let a = tempfile::tempdir().expect("dir");
    let b = tempfile::tempdir().expect("dir");
    let sqlite = format!("sqlite:{}", a.path().join("ledger.sqlite3").display());
    let (on_sqlite, ledger_sqlite) = scenario(a.path(), &sqlite);
    let (on_redis, ledger_redis) = scenario(b.path(), &redis.url);
    // The scenario reaches the rules it means to: a repeat, the tool cap,
    // a duplicate id, an invalid name.
    let all = on_sqlite.join("\n");
    for word in ["(repeat)", "(tool-cap)", "(invalid-name)"] {
        assert!(all.contains(word), "{word} not reached:\n{all}");
    }
    assert_eq!(on_redis, on_sqlite);
    assert_eq!(ledger_redis["limits"], ledger_sqlite["limits"]);
    assert_eq!(ledger_redis["caps"], ledger_sqlite["caps"]);
    assert_eq!(ledger_sqlite["limits"]["model_calls"]["used"], 3);
    assert_eq!(ledger_sqlite["limits"]["tokens"]["used"], 630);
}

/// `[loops]` on Redis (issue 32): the loop window is kept beside the ledger
/// and read back by each hook process, so a loop is denied at the same call
/// on both stores.
#[test]
fn loops_are_denied_on_redis_as_on_sqlite() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let run = |dir: &std::path::Path, ledger: &str| {
        std::fs::write(
            dir.join("budget.toml"),
            "[budget]\nmax_repeats = 100\n[loops]\nsame_outcome = 3\n",
        )
        .expect("budget");
        let event = |name: &str, id: &str| {
            json!({"session_id": "looping", "transcript_path": dir.join("t.jsonl"),
                   "cwd": dir, "hook_event_name": name, "tool_name": "Bash",
                   "tool_input": {"command": "status"}, "tool_use_id": id,
                   "tool_response": {"stdout": "pending"}})
        };
        let mut answers = Vec::new();
        for id in ["a", "b", "c"] {
            answers.push(hook(dir, ledger, &event("PreToolUse", id)));
            answers.push(hook(dir, ledger, &event("PostToolUse", id)));
        }
        answers
    };
    let a = tempfile::tempdir().expect("dir");
    let b = tempfile::tempdir().expect("dir");
    let sqlite = format!("sqlite:{}", a.path().join("ledger.sqlite3").display());
    let on_sqlite = run(a.path(), &sqlite);
    assert!(on_sqlite[4].contains("(no-progress)"), "{on_sqlite:?}");
    assert!(on_sqlite[..4].iter().all(|a| a == "none "), "{on_sqlite:?}");
    assert_eq!(run(b.path(), &redis.url), on_sqlite);
}

/// `hook install --ledger redis://…` asks the server first (`PING`), as
/// the gateways do at start: one that cannot be reached, or that takes the
/// connection and never answers, is refused and nothing is written
/// (installed, the hook would refuse every tool call); one that answers
/// is written into the command line.
#[test]
fn install_asks_the_redis_server_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = dir.path().join("settings.json");
    let install = |url: &str| {
        Command::new(bin())
            .args(["hook", "install", "--settings"])
            .arg(&settings)
            .args(["--ledger", url])
            .output()
            .expect("install runs")
    };
    // Nothing listens on port 1.
    let out = install("redis://127.0.0.1:1/0");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--ledger redis://127.0.0.1:1/0: ")
            && stderr.contains("cannot be reached")
            && stderr.contains("the hook would refuse every tool call"),
        "{stderr}"
    );
    assert!(!settings.exists(), "install wrote");
    // Something that takes the connection (the kernel does, from the
    // listen queue) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}/0", silent.local_addr().expect("addr"));
    let out = install(&url);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&url) && stderr.contains("did not answer within 5 s"),
        "{stderr}"
    );
    assert!(!settings.exists(), "install wrote");
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let out = install(&redis.url);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let written = std::fs::read_to_string(&settings).expect("settings written");
    assert!(
        written.contains(&format!("--ledger {}", redis.url)),
        "{written}"
    );
}
