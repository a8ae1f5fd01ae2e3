//! `budgetgate hook claude-code` through the real binary, as Claude Code runs
//! it: one process per event, the event on stdin (`SPEC C`, `SPEC E`):
//! every event shape, each refusal, real process concurrency on one ledger,
//! processes killed mid-decision, fail-closed errors, transcripts counted as
//! replay counts them, and the command line `hook install` writes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

mod common;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

/// A temporary folder with a ledger, a budget and a transcript path.
use common::Setup;

impl Setup {
    fn transcript(&self) -> String {
        self.path("session.jsonl").display().to_string()
    }
    fn event(&self, name: &str, extra: Value) -> Value {
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
    fn pre(&self, tool: &str, input: Value, id: &str) -> Value {
        self.event(
            "PreToolUse",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id}),
        )
    }
    fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(["hook", "claude-code", "--budget"])
            .arg(self.path("budget.toml"))
            .arg("--state")
            .arg(self.path("state"));
        cmd
    }
    fn spawn(&self, event: &Value) -> Child {
        self.spawn_with(&[], event)
    }
    /// The hook with extra options (`--deadline-ms`).
    fn spawn_with(&self, options: &[&str], event: &Value) -> Child {
        let mut child = self
            .command()
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hook starts");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(event.to_string().as_bytes())
            .expect("event written");
        child
    }
    fn run(&self, event: &Value) -> Output {
        self.spawn(event).wait_with_output().expect("hook ends")
    }
    fn run_with(&self, options: &[&str], event: &Value) -> Output {
        self.spawn_with(options, event)
            .wait_with_output()
            .expect("hook ends")
    }
    fn ledger(&self) -> Vec<Value> {
        let out = Command::new(bin())
            .args(["ledger", "list", "--json", "--state"])
            .arg(self.path("state"))
            .output()
            .expect("ledger list");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout)
            .expect("UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }
    fn used(&self, limit: &str) -> u64 {
        self.ledger()
            .iter()
            .find(|l| l["agent"].is_null())
            .map_or(0, |l| l["limits"][limit]["used"].as_u64().expect("used"))
    }
}

/// The decision in a hook's output: "none" for no decision.
fn decision(out: &Output) -> String {
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

const BUDGET: &str = r#"
[budget]
max_tool_calls = 5
max_repeats = 1
max_tokens = 1000
max_seconds = 3600
[tools]
needs_approval = ["Write"]
max_calls = { Bash = 2 }
"#;

#[test]
fn every_event_shape_is_read_and_within_budget_nothing_is_decided() {
    let s = Setup::new(BUDGET);
    let shapes = [
        s.pre("Read", json!({"file_path": "/x"}), "toolu_01"),
        s.event(
            "PostToolUse",
            json!({"tool_name": "Read", "tool_input": {"file_path": "/x"}, "tool_response": {"ok": true}, "tool_use_id": "toolu_01"}),
        ),
        s.event(
            "PostToolUseFailure",
            json!({"tool_name": "Read", "tool_input": {}, "tool_use_id": "toolu_01", "error": "boom"}),
        ),
        s.event("UserPromptSubmit", json!({"prompt": "hello"})),
        s.event("Stop", json!({"stop_hook_active": false})),
        s.event("SubagentStop", json!({"stop_hook_active": false, "agent_id": "a1", "agent_type": "Explore"})),
        s.event("SessionStart", json!({"source": "startup"})),
        s.event("SessionEnd", json!({"reason": "exit"})),
        s.event("Notification", json!({"message": "hi", "some_future_field": [1, 2]})),
    ];
    for event in &shapes {
        let out = s.run(event);
        assert_eq!(decision(&out), "none", "{event}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{event}");
    }
    assert_eq!(s.used("tool_calls"), 1);
}

#[test]
fn missing_required_fields_are_refused_fail_closed() {
    let s = Setup::new(BUDGET);
    for (event, missing) in [
        (s.pre("Read", json!({}), "t1"), "tool_use_id"),
        (s.pre("Read", json!({}), "t1"), "tool_input"),
        (s.pre("Read", json!({}), "t1"), "tool_name"),
        (s.pre("Read", json!({}), "t1"), "session_id"),
        (s.pre("Read", json!({}), "t1"), "transcript_path"),
    ] {
        let mut event = event;
        event.as_object_mut().unwrap().remove(missing);
        let out = s.run(&event);
        assert_eq!(out.status.code(), Some(2), "{missing}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("missing required field `{missing}`")),
            "{stderr}"
        );
        assert!(stderr.contains("refused (fail closed)"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    // Not JSON, a duplicate key, a field missing: an event that cannot be
    // read is refused blocking (exit 2), whatever its name claims (a
    // duplicate `hook_event_name` must not pick the lenient answer).
    let out = s.command().stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let mut stop = s.event("Stop", json!({}));
    stop.as_object_mut().unwrap().remove("cwd");
    assert_eq!(s.run(&stop).status.code(), Some(2));
    // A readable event other than PreToolUse and UserPromptSubmit that
    // cannot be decided exits 1 (exit 2 on Stop would make Claude keep working).
    std::fs::write(s.path("budget.toml"), "[budget]\nmax_stepz = 1\n").unwrap();
    let out = s.run(&s.event("Stop", json!({})));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    std::fs::write(s.path("budget.toml"), BUDGET).unwrap();
    let dup = r#"{"session_id":"s1","session_id":"s2","transcript_path":"/t","cwd":"/","hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{},"tool_use_id":"x"}"#;
    let mut child = s
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dup.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate key `session_id`"));
}

#[test]
fn each_rule_denies_with_a_reason_the_model_can_act_on() {
    let s = Setup::new(BUDGET);
    let d = |event: Value| decision(&s.run(&event));
    assert_eq!(d(s.pre("Bash", json!({"command": "ls"}), "t1")), "none");
    // The same call again: max_repeats 1.
    let repeat = d(s.pre("Bash", json!({"command": "ls"}), "t2"));
    assert!(
        repeat.starts_with("deny: budgetgate refused this call (repeat)"),
        "{repeat}"
    );
    assert!(repeat.contains("Change approach"), "{repeat}");
    // Keys in another order are the same call.
    assert_eq!(d(s.pre("Grep", json!({"a": 1, "b": 2}), "t3")), "none");
    assert!(d(s.pre("Grep", json!({"b": 2, "a": 1}), "t4")).contains("(repeat)"));
    // A reused tool_use_id, whatever it was decided.
    let dup = d(s.pre("Read", json!({"p": 1}), "t1"));
    assert!(
        dup.contains("(duplicate-call-id)") && dup.contains("\"t1\""),
        "{dup}"
    );
    // Names outside the grammar never run, never match a rule loosely.
    for name in ["Bash ", "", "Ba\u{0}sh", "Bash\u{200b}"] {
        let text = d(s.pre(name, json!({}), &format!("n{}", name.len())));
        assert!(text.contains("(invalid-name)"), "{name:?}: {text}");
    }
    // Approval: ask, never allow.
    let ask = d(s.pre("Write", json!({"p": 1}), "t5"));
    assert!(ask.starts_with("ask: ") && ask.contains("Write"), "{ask}");
    // Per-tool cap: Bash at most 2.
    assert_eq!(d(s.pre("Bash", json!({"command": "pwd"}), "t6")), "none");
    let cap = d(s.pre("Bash", json!({"command": "id"}), "t7"));
    assert!(
        cap.contains("(tool-cap)") && cap.contains("at most 2"),
        "{cap}"
    );
    // 5 attempts: Bash, Grep, Write, Bash, and one more.
    assert_eq!(d(s.pre("Read", json!({"p": 2}), "t8")), "none");
    let over = d(s.pre("Read", json!({"p": 3}), "t9"));
    assert!(
        over.contains("(tool-budget)") && over.contains("5 of 5"),
        "{over}"
    );
    assert_eq!(s.used("tool_calls"), 5);
}

/// Claude Code runs the hooks of parallel tool calls at the same time: 16
/// processes deciding at once on a budget of 5 give exactly 5 calls through.
#[test]
fn concurrent_hook_processes_never_exceed_the_tool_budget() {
    let s = Setup::new(BUDGET);
    // The ledger exists before the race (as after SessionStart).
    decision(&s.run(&s.event("SessionStart", json!({"source": "startup"}))));
    let children: Vec<Child> = (0..16)
        .map(|i| {
            s.spawn(&s.pre(
                "Read",
                json!({"file_path": format!("/f{i}")}),
                &format!("c{i}"),
            ))
        })
        .collect();
    let decisions: Vec<String> = children
        .into_iter()
        .map(|c| decision(&c.wait_with_output().expect("ends")))
        .collect();
    let through = decisions.iter().filter(|d| *d == "none").count();
    assert_eq!(through, 5, "{decisions:#?}");
    assert!(decisions
        .iter()
        .filter(|d| *d != "none")
        .all(|d| d.contains("(tool-budget)")));
    assert_eq!(s.used("tool_calls"), 5);
}

/// A process killed at any point of a decision leaves the ledger as before
/// or after it: it always decodes, and the count of attempts is never lower
/// than the attempts answered and never higher than those plus the killed.
#[test]
fn a_hook_killed_mid_decision_leaves_the_ledger_before_or_after() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_repeats = 1000\n");
    decision(&s.run(&s.event("SessionStart", json!({}))));
    let (mut answered, mut killed) = (0u64, 0u64);
    let mut previous = 0;
    for i in 0..40u64 {
        let mut child = s.spawn(&s.pre("Read", json!({"n": i}), &format!("k{i}")));
        // Spread the kills over the process's life (start-up, SQLite, commit).
        std::thread::sleep(Duration::from_micros((i * 397) % 6000));
        let _ = child.kill();
        let out = child.wait_with_output().expect("ends");
        if out.status.code() == Some(0) {
            assert_eq!(decision(&out), "none");
            answered += 1;
        } else {
            killed += 1;
        }
        let used = s.used("tool_calls");
        assert!(
            used >= previous,
            "a restart gave budget back: {used} < {previous}"
        );
        assert!(
            used <= previous + 1,
            "one decision counted twice: {used} > {previous} + 1"
        );
        previous = used;
    }
    let used = s.used("tool_calls");
    assert!(
        used >= answered && used <= answered + killed,
        "{used} vs {answered} + {killed}"
    );
    // And the ledger still decides.
    assert_eq!(
        decision(&s.run(&s.pre("Read", json!({"n": "after"}), "after"))),
        "none"
    );
    assert_eq!(s.used("tool_calls"), used + 1);
}

#[test]
fn a_corrupt_ledger_record_refuses_every_call() {
    let s = Setup::new(BUDGET);
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "t1"))), "none");
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    let mut record: Vec<u8> = db
        .query_row("SELECT record FROM ledgers", [], |r| r.get(0))
        .unwrap();
    record[40] ^= 0x10;
    db.execute("UPDATE ledgers SET record = ?1", [&record])
        .unwrap();
    drop(db);
    let out = s.run(&s.pre("Read", json!({"x": 1}), "t2"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("checksum") && stderr.contains("fail closed"),
        "{stderr}"
    );
    // `ledger list` shows it as unreadable, exit 1.
    let out = Command::new(bin())
        .args(["ledger", "list", "--state"])
        .arg(s.path("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unreadable: "));
}

/// The ledger's lock held past the deadline (another process stuck in a
/// decision): refused within the deadline, never allowed.
#[test]
fn a_lock_not_had_before_the_deadline_is_refused() {
    let s = Setup::new(BUDGET);
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "t1"))), "none");
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = s.run_with(
        &["--deadline-ms", "300"],
        &s.pre("Read", json!({"y": 1}), "t2"),
    );
    db.execute_batch("ROLLBACK").unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fail closed"), "{stderr}");
    assert!(
        stderr.contains("locked") || stderr.contains("deadline"),
        "{stderr}"
    );
    assert_eq!(s.used("tool_calls"), 1);
}

fn assistant_line(message_id: &str, request: &str, usage: Value, blocks: Value) -> String {
    json!({"type": "assistant", "requestId": request, "timestamp": "2026-12-01T10:00:00Z",
           "message": {"id": message_id, "type": "message", "role": "assistant",
                       "model": "claude-haiku-4-5-20251001", "content": blocks,
                       "stop_reason": null, "usage": usage}})
    .to_string()
}

fn append(path: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// Tokens are read from the transcript's new lines: lines of one response
/// (same message and request id) are counted once with their largest usage,
/// `usage.iterations` is billed on top, a line still being written waits,
/// and once the budget is spent the next call is denied and Stop ends it.
#[test]
fn tokens_from_the_transcript_stop_the_session() {
    let s = Setup::new(BUDGET);
    let t = s.transcript();
    let usage = json!({"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 0});
    append(
        &t,
        &assistant_line(
            "m1",
            "r1",
            usage.clone(),
            json!([{"type": "text", "text": "hi"}]),
        ),
    );
    append(
        &t,
        &assistant_line(
            "m1",
            "r1",
            json!({"input_tokens": 100, "output_tokens": 50}),
            json!([{"type": "tool_use", "id": "u1", "name": "Read", "input": {}}]),
        ),
    );
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "u1"))), "none");
    assert_eq!(s.used("tokens"), 350);
    assert_eq!(s.used("model_calls"), 1);
    // A half-written line is not counted yet.
    let mut f = std::fs::OpenOptions::new().append(true).open(&t).unwrap();
    let partial = assistant_line(
        "m2",
        "r2",
        json!({"input_tokens": 400, "output_tokens": 10, "iterations": [{"input_tokens": 0, "cache_creation_input_tokens": 300}]}),
        json!([]),
    );
    f.write_all(&partial.as_bytes()[..20]).unwrap();
    drop(f);
    assert_eq!(
        decision(&s.run(&s.event(
            "PostToolUse",
            json!({"tool_name": "Read", "tool_input": {}, "tool_response": "", "tool_use_id": "u1"})
        ))),
        "none"
    );
    assert_eq!(s.used("tokens"), 350);
    let mut f = std::fs::OpenOptions::new().append(true).open(&t).unwrap();
    f.write_all(&partial.as_bytes()[20..]).unwrap();
    f.write_all(b"\n").unwrap();
    drop(f);
    // 350 + 410 + 300 (iterations) = 1060 >= 1000: spent.
    let denied = decision(&s.run(&s.pre("Read", json!({"p": 1}), "u2")));
    assert!(
        denied.contains("(budget-exhausted)")
            && denied.contains("tokens budget exhausted (1060 of 1000 tokens)"),
        "{denied}"
    );
    assert_eq!(s.used("model_calls"), 2);
    let out = s.run(&s.event("Stop", json!({"stop_hook_active": false})));
    assert_eq!(decision(&out), "stop");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("stopReason") && text.contains("tokens budget exhausted"),
        "{text}"
    );
    assert_eq!(
        decision(&s.run(&s.event("UserPromptSubmit", json!({"prompt": "more"})))),
        "stop"
    );
}

#[test]
fn a_cost_budget_counts_priced_models_and_refuses_unpriced_ones() {
    let s = Setup::new(
        "[budget]\nmax_cost_usd = 0.001\nmax_seconds = 3600\n[prices.claude-haiku-4-5]\ninput = 1.0\noutput = 5.0\n",
    );
    let t = s.transcript();
    append(
        &t,
        &assistant_line(
            "m1",
            "r1",
            json!({"input_tokens": 500, "output_tokens": 20}),
            json!([]),
        ),
    );
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "u1"))), "none");
    assert_eq!(s.used("cost_micro_usd"), 600);
    append(
        &t,
        &assistant_line(
            "m2",
            "r2",
            json!({"input_tokens": 400, "output_tokens": 0}),
            json!([]),
        ),
    );
    let denied = decision(&s.run(&s.pre("Read", json!({"a": 1}), "u2")));
    assert!(
        denied.contains("cost_micro_usd budget exhausted (1000 of 1000"),
        "{denied}"
    );
    // Another session with a model that has no price: refused, not free.
    let s2 = Setup::new("[budget]\nmax_cost_usd = 5\nmax_seconds = 3600\n[prices.claude-opus-4-5]\ninput = 5.0\noutput = 25.0\n");
    append(
        &s2.transcript(),
        &assistant_line(
            "m1",
            "r1",
            json!({"input_tokens": 1, "output_tokens": 1}),
            json!([]),
        ),
    );
    let denied = decision(&s2.run(&s2.pre("Read", json!({}), "u1")));
    assert!(
        denied.contains("has no price") && denied.contains("never counts a call as free"),
        "{denied}"
    );
    // Both say what to add; the session's end does not claim a limit is
    // spent (none is: the cost cannot be counted).
    assert!(denied.contains("add [prices."), "{denied}");
    let out = s2.run(&s2.event("Stop", json!({"stop_hook_active": false})));
    assert_eq!(decision(&out), "stop");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("add [prices."), "{text}");
    assert!(!text.contains("budget is spent"), "{text}");
}

#[test]
fn a_subagent_has_its_own_budget_inside_the_sessions() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 10\n[subagent]\nmax_tool_calls = 1\nmax_tokens = 100\n");
    let sub = |id: &str, n: u64| {
        let mut e = s.pre("Read", json!({"n": n}), id);
        e["agent_id"] = json!("a1");
        e["agent_type"] = json!("Explore");
        e
    };
    assert_eq!(decision(&s.run(&sub("x1", 1))), "none");
    assert!(decision(&s.run(&sub("x2", 2))).contains("(tool-budget)"));
    // The session itself still has room.
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "m1"))), "none");
    // The sub-agent's transcript counts toward it and toward the session.
    let dir = s.path("session").join("subagents");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent-a2.jsonl").display().to_string();
    append(
        &file,
        &assistant_line(
            "m9",
            "r9",
            json!({"input_tokens": 150, "output_tokens": 0}),
            json!([]),
        ),
    );
    let mut e = s.pre("Read", json!({"n": 3}), "y1");
    e["agent_id"] = json!("a2");
    let denied = decision(&s.run(&e));
    assert!(
        denied.contains("sub-agent tokens budget exhausted (150 of 100"),
        "{denied}"
    );
    assert_eq!(s.used("tokens"), 150);
}

/// `hook install` writes a command line that Claude Code runs as it is
/// (`sh -c`); it decides; `hook uninstall` gives back the settings before.
#[test]
fn the_installed_command_line_runs_and_uninstall_restores_the_settings() {
    let s = Setup::new(BUDGET);
    let settings = s.path("project/.claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let before = json!({"permissions": {"allow": ["Read"]}, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}});
    std::fs::write(&settings, serde_json::to_string_pretty(&before).unwrap()).unwrap();
    let install = |extra: &[&str]| {
        Command::new(bin())
            .args(["hook", "install", "--settings"])
            .arg(&settings)
            .arg("--budget")
            .arg(s.path("budget.toml"))
            .arg("--state")
            .arg(s.path("state"))
            .args(extra)
            .output()
            .unwrap()
    };
    let dry = install(&["--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    let diff = String::from_utf8_lossy(&dry.stdout);
    assert!(
        diff.contains("+") && diff.contains("hook claude-code"),
        "{diff}"
    );
    let now: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(now, before, "dry run wrote");
    assert_eq!(install(&[]).status.code(), Some(0));
    assert_eq!(install(&[]).status.code(), Some(0));
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(after["permissions"], before["permissions"]);
    assert_eq!(after["hooks"]["Stop"].as_array().unwrap().len(), 2);
    assert!(s
        .path("project/.claude/settings.json.budgetgate-backup")
        .exists());
    let command = after["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(after["hooks"]["PreToolUse"][0]["matcher"], "*");
    // Run it exactly as written, through the shell.
    let run = |event: &Value| {
        let mut child = Command::new("sh")
            .args(["-c", &command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(event.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    assert_eq!(
        decision(&run(&s.pre("Write", json!({"p": 1}), "w1")))
            .split(':')
            .next(),
        Some("ask")
    );
    // The same call again gets the same answer; another call under its id is refused.
    assert!(decision(&run(&s.pre("Write", json!({"p": 1}), "w1"))).starts_with("ask"));
    assert!(decision(&run(&s.pre("Write", json!({"p": 2}), "w1"))).contains("(duplicate-call-id)"));
    let out = Command::new(bin())
        .args(["hook", "uninstall", "--settings"])
        .arg(&settings)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let restored: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(restored, before);
}

/// The real Claude Code sub-agent log in `../shared/data` (when present),
/// driven line by line: each tool_use gets its PreToolUse once the lines
/// before it are in the transcript. With a token budget the real session
/// passes, `replay` stops it before response k+1 (the check before each
/// model call); the hook denies the calls of response k, the one that spent
/// the budget (their results could only go back in the refused call k+1),
/// having counted exactly the tokens replay counted to that point.
#[test]
fn a_real_session_log_is_stopped_where_replay_stops_it() {
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/transcripts/02_claude-code_spotter_subagent_agent-a93ccab.jsonl");
    let Ok(text) = std::fs::read_to_string(&real) else {
        eprintln!("{} not present: skipped", real.display());
        return;
    };
    let budget = "[budget]\nmax_tokens = 100000\nmax_seconds = 100000000\nmax_model_calls = 1000\nmax_repeats = 100\n";
    let s = Setup::new(budget);
    // Where replay stops it, with the same budget.
    let replay = Command::new(bin())
        .args(["replay", "--json", "--budget"])
        .arg(s.path("budget.toml"))
        .arg(&real)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&replay.stdout).expect("replay JSON");
    let stopped_turn = report["stopped"]["turn"].as_u64().expect("replay stops it") as usize;
    let t = s.transcript();
    let mut first_denied_turn = None;
    let mut responses: Vec<String> = Vec::new();
    for line in text.lines() {
        append(&t, line);
        let value: Value = serde_json::from_str(line).unwrap();
        if value["type"] != "assistant" {
            continue;
        }
        let id = value["message"]["id"].as_str().unwrap().to_owned();
        if responses.last() != Some(&id) {
            responses.push(id);
        }
        for block in value["message"]["content"].as_array().unwrap() {
            if block["type"] != "tool_use" {
                continue;
            }
            let mut event = s.pre(
                block["name"].as_str().unwrap(),
                block["input"].clone(),
                block["id"].as_str().unwrap(),
            );
            event["agent_id"] = value["agentId"].clone();
            let d = decision(&s.run(&event));
            if d != "none" && first_denied_turn.is_none() {
                assert!(d.contains("tokens budget exhausted"), "{d}");
                first_denied_turn = Some(responses.len() - 1);
                let replayed = report["stopped"]["detail"].as_str().unwrap();
                assert!(
                    replayed.contains(&format!("({} of 100000)", s.used("tokens"))),
                    "{replayed} vs {}",
                    s.used("tokens")
                );
            }
        }
    }
    assert_eq!(
        first_denied_turn.map(|k| k + 1),
        Some(stopped_turn),
        "replay: {}",
        report["stopped"]
    );
}

/// A transcript longer than one event may read (a hook installed into a
/// long session) is counted over several events: the first calls are
/// denied while the backlog is read, its progress is kept, and once caught
/// up the count is exact.
#[test]
fn a_long_transcript_backlog_is_counted_over_several_events() {
    let s = Setup::new(BUDGET);
    let t = s.transcript();
    {
        let mut f = std::fs::File::create(&t).unwrap();
        let filler =
            json!({"type": "user", "message": {"role": "user", "content": "x".repeat(1 << 20)}})
                .to_string();
        for _ in 0..70 {
            writeln!(f, "{filler}").unwrap();
        }
    }
    append(
        &t,
        &assistant_line(
            "m1",
            "r1",
            json!({"input_tokens": 7, "output_tokens": 3}),
            json!([]),
        ),
    );
    // A deadline roomy enough for a debug build on a busy machine.
    let run = |event: &Value| s.run_with(&["--deadline-ms", "30000"], event);
    let first = decision(&run(&s.pre("Read", json!({}), "b1")));
    assert!(first.contains("(transcript-backlog)"), "{first}");
    assert_eq!(s.used("tokens"), 0);
    assert_eq!(
        decision(&run(&s.pre("Read", json!({"n": 2}), "b2"))),
        "none"
    );
    assert_eq!(s.used("tokens"), 10);
    assert_eq!(s.used("model_calls"), 1);
}

/// What the model or a tool wrote into a transcript line (nesting deeper
/// than any strict reader allows, a lone surrogate escape, which
/// `JSON.stringify` writes) never stops the count: only the counted fields
/// are read strictly. Found by the hostile trial (the session used to be
/// refused for good).
#[test]
fn a_deep_or_lone_surrogate_tool_input_in_the_transcript_is_counted() {
    let s = Setup::new(BUDGET);
    let deep = "[".repeat(5_000) + &"]".repeat(5_000);
    let line = format!(
        r#"{{"type":"assistant","requestId":"r1","message":{{"id":"m1","model":"claude-sonnet-4-5","content":[{{"type":"tool_use","id":"toolu_x","name":"Bash","input":{{"command":"echo \ud83d","x":{deep}}}}}],"usage":{{"input_tokens":5,"output_tokens":5}}}}}}"#
    );
    append(&s.transcript(), &line);
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "u1"))), "none");
    assert_eq!(s.used("tokens"), 10);
    // The counted figures stay strict: a usage field given twice refuses.
    append(
        &s.transcript(),
        r#"{"type":"assistant","requestId":"r2","message":{"id":"m2","usage":{"input_tokens":1,"input_tokens":999999}}}"#,
    );
    let out = s.run(&s.pre("Read", json!({"a": 1}), "u2"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate key `input_tokens`"));
}

/// `usage.iterations` lists every sampling pass of a request, the message's
/// own included: the compaction pass is added to the top level, the
/// message pass (which the top level already is) is not.
#[test]
fn a_compaction_iteration_is_billed_once() {
    let s = Setup::new(BUDGET);
    let usage = json!({"input_tokens": 23, "output_tokens": 1, "iterations": [
        {"type": "compaction", "input_tokens": 180, "output_tokens": 3},
        {"type": "message", "input_tokens": 23, "output_tokens": 1}]});
    append(
        &s.transcript(),
        &assistant_line("m1", "r1", usage, json!([])),
    );
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "u1"))), "none");
    assert_eq!(s.used("tokens"), 23 + 1 + 180 + 3);
}

/// The same call seen twice (the hook installed at user and project level,
/// or a retry) gets the answer it got the first time and is counted once;
/// another call under its id is refused. Found by the hostile trial.
#[test]
fn the_same_call_seen_twice_gets_one_answer_and_counts_once() {
    let s = Setup::new(BUDGET);
    decision(&s.run(&s.event("SessionStart", json!({}))));
    let event = s.pre("Read", json!({"file_path": "/x"}), "toolu_same");
    let (a, b) = (s.spawn(&event), s.spawn(&event));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(decision(&a), "none");
    assert_eq!(decision(&b), "none");
    assert_eq!(s.used("tool_calls"), 1);
    let other = decision(&s.run(&s.pre("Read", json!({"file_path": "/y"}), "toolu_same")));
    assert!(other.contains("(duplicate-call-id)"), "{other}");
}

/// A spent budget denies the call and also ends the agent loop
/// (`continue: false`), so a model that keeps proposing tools cannot keep
/// spending. Found by the hostile trial.
#[test]
fn a_spent_budget_also_stops_the_agent_loop() {
    let s = Setup::new(BUDGET);
    append(
        &s.transcript(),
        &assistant_line("m1", "r1", json!({"input_tokens": 1000}), json!([])),
    );
    let d = decision(&s.run(&s.pre("Read", json!({}), "u1")));
    assert!(
        d.contains("(budget-exhausted)") && d.ends_with("[continue: false]"),
        "{d}"
    );
    // Other refusals leave the loop running: the model can answer.
    let s = Setup::new("[budget]\nmax_seconds = 3600\nmax_tool_calls = 0\n");
    let d = decision(&s.run(&s.pre("Read", json!({}), "u1")));
    assert!(
        d.contains("(tool-budget)") && !d.ends_with("[continue: false]"),
        "{d}"
    );
}

/// `ledger reset` forgives what was used without counting the transcript
/// again; a ledger removed by hand (or by a tool) while the session's other
/// state stays is refused until an operator resets it, and `ledger list` and
/// `show` name it with the reason.
#[test]
fn reset_forgives_usage_and_a_removed_ledger_is_refused() {
    let s = Setup::new(BUDGET);
    append(
        &s.transcript(),
        &assistant_line("m1", "r1", json!({"input_tokens": 1000}), json!([])),
    );
    assert!(decision(&s.run(&s.pre("Read", json!({}), "u1"))).contains("(budget-exhausted)"));
    let reset = |s: &Setup| {
        Command::new(bin())
            .args(["ledger", "reset", "s1", "--yes", "--state"])
            .arg(s.path("state"))
            .output()
            .unwrap()
    };
    assert_eq!(reset(&s).status.code(), Some(0));
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "u2"))), "none");
    assert_eq!(s.used("tokens"), 0, "the transcript was counted again");
    // The ledger row removed behind the gate's back: refused, not a fresh budget.
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    db.execute("DELETE FROM ledgers WHERE session = 's1'", [])
        .unwrap();
    drop(db);
    let out = s.run(&s.pre("Read", json!({"a": 1}), "u3"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lost its ledger"),
        "{out:?}"
    );
    // The operator can find it: listed and shown with the reason (exit 1).
    for cmd in [
        &["ledger", "list", "--state"][..],
        &["ledger", "show", "s1", "--state"],
    ] {
        let out = Command::new(bin())
            .args(cmd)
            .arg(s.path("state"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {text}");
        assert!(
            text.contains("s1") && text.contains("no ledger record"),
            "{text}"
        );
    }
    assert_eq!(reset(&s).status.code(), Some(0));
    assert_eq!(
        decision(&s.run(&s.pre("Read", json!({"a": 1}), "u3"))),
        "none"
    );
}

/// A sub-agent over its own limit has its calls denied but does not end the
/// session. Found by the hostile trial.
#[test]
fn a_subagent_over_its_own_limit_does_not_stop_the_session() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[subagent]\nmax_tokens = 100\n");
    let dir = s.path("session").join("subagents");
    std::fs::create_dir_all(&dir).unwrap();
    append(
        &dir.join("agent-B.jsonl").display().to_string(),
        &assistant_line("m9", "r9", json!({"input_tokens": 150}), json!([])),
    );
    let mut call = s.pre("Read", json!({}), "y1");
    call["agent_id"] = json!("B");
    let d = decision(&s.run(&call));
    assert!(
        d.contains("sub-agent tokens budget exhausted") && !d.ends_with("[continue: false]"),
        "{d}"
    );
    let mut stop = s.event("SubagentStop", json!({"stop_hook_active": false}));
    stop["agent_id"] = json!("B");
    assert_eq!(decision(&s.run(&stop)), "none");
}

/// The caps are the budget file's as it is now: a cap removed is lifted,
/// and replacing every cap never overflows the ledger's table. Found by the
/// hostile trial.
#[test]
fn caps_follow_the_budget_file_when_it_changes() {
    let s = Setup::new("[budget]\nmax_seconds = 3600\n[tools]\nmax_calls = { Bash = 1 }\n");
    assert_eq!(
        decision(&s.run(&s.pre("Bash", json!({"c": 1}), "c1"))),
        "none"
    );
    assert!(decision(&s.run(&s.pre("Bash", json!({"c": 2}), "c2"))).contains("(tool-cap)"));
    let eight = "[budget]\nmax_seconds = 3600\n[tools]\nmax_calls = { a = 1, b = 1, c = 1, d = 1, e = 1, f = 1, g = 1, h = 1 }\n";
    std::fs::write(s.path("budget.toml"), eight).unwrap();
    assert_eq!(
        decision(&s.run(&s.pre("Bash", json!({"c": 3}), "c3"))),
        "none"
    );
    assert_eq!(decision(&s.run(&s.pre("a", json!({}), "c4"))), "none");
    assert!(decision(&s.run(&s.pre("a", json!({"x": 1}), "c5"))).contains("(tool-cap)"));
}

/// A FIFO where the transcript should be (a tool can make one) is refused
/// at once, never waited on while the ledger's lock is held. Found by the
/// hostile trial.
#[test]
fn a_fifo_as_transcript_is_refused_without_waiting() {
    let s = Setup::new(BUDGET);
    let made = Command::new("mkfifo").arg(s.transcript()).status();
    if !made.is_ok_and(|st| st.success()) {
        eprintln!("no mkfifo here: skipped");
        return;
    }
    let out = s.run(&s.pre("Read", json!({}), "f1"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
        "{out:?}"
    );
}

/// Processes that open a ledger file that does not exist yet, all at once
/// (the first hooks of a new state folder, gateways started together), all
/// decide: the race to switch the new file to WAL used to refuse one of
/// them now and then ("database is locked"). Found by CI.
#[test]
fn processes_opening_a_new_ledger_at_once_all_decide() {
    for round in 0..6 {
        let s = Setup::new(BUDGET);
        let children: Vec<Child> = (0..8)
            .map(|i| s.spawn(&s.pre("Read", json!({"i": i}), &format!("r{round}-{i}"))))
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("ends");
            assert_eq!(out.status.code(), Some(0), "round {round}: {out:?}");
        }
    }
}

/// `ledger list`'s table: a row per limit in use and per tool cap, the time
/// and cost rows labelled in the units they are shown in (seconds,
/// dollars), and every bar in the same column, however long a tool's name.
#[test]
fn the_ledger_table_labels_its_units_and_lines_up_its_bars() {
    let s = Setup::new(
        "[budget]\nmax_seconds = 3600\nmax_cost_usd = 5\n[prices.claude-opus-4-5]\ninput = 5.0\noutput = 25.0\n[tools]\nmax_calls = { a_rather_long_tool_name = 2 }\n",
    );
    assert_eq!(
        decision(&s.run(&s.pre("a_rather_long_tool_name", json!({}), "t1"))),
        "none"
    );
    let out = Command::new(bin())
        .args(["ledger", "list", "--state"])
        .arg(s.path("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("    ")).collect();
    let labels: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    assert!(
        labels.contains(&"time") && labels.contains(&"cost"),
        "{text}"
    );
    assert!(
        !text.contains("time_ms") && !text.contains("cost_micro_usd"),
        "{text}"
    );
    assert!(text.contains("a_rather_long_tool_name calls"), "{text}");
    // Characters, not bytes: the bars are multi-byte.
    let column = |r: &str, of: &[char]| r.chars().position(|c| of.contains(&c));
    let bar_at: Vec<usize> = rows.iter().filter_map(|r| column(r, &['█', '░'])).collect();
    assert!(bar_at.len() >= 3, "{text}");
    assert!(bar_at.windows(2).all(|w| w[0] == w[1]), "{text}");
    let slash_at: Vec<usize> = rows.iter().filter_map(|r| column(r, &['/'])).collect();
    assert_eq!(slash_at.len(), rows.len(), "{text}");
    assert!(slash_at.windows(2).all(|w| w[0] == w[1]), "{text}");
}

/// The budget of the loop tests: repeats counted loosely, `[loops]` tight.
const LOOPS: &str = "[budget]\nmax_tool_calls = 100\nmax_repeats = 100\n[loops]\nsame_outcome = 3\nsame_error = 2\nping_pong_cycles = 2\n";

impl Setup {
    /// `PostToolUse` of a call that returned `response`.
    fn post(&self, tool: &str, input: Value, id: &str, response: Value) -> Value {
        self.event(
            "PostToolUse",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id,
                   "tool_response": response}),
        )
    }
    /// `PostToolUseFailure` of a call that failed with `error`.
    fn failed(&self, tool: &str, input: Value, id: &str, error: &str) -> Value {
        self.event(
            "PostToolUseFailure",
            json!({"tool_name": tool, "tool_input": input, "tool_use_id": id,
                   "error": error, "is_interrupt": false}),
        )
    }
    /// `PreToolUse` then, if it was not denied, `PostToolUse` with
    /// `response`: the decision.
    fn call(&self, tool: &str, input: Value, id: &str, response: Value) -> String {
        let d = decision(&self.run(&self.pre(tool, input.clone(), id)));
        if d == "none" {
            assert_eq!(
                decision(&self.run(&self.post(tool, input, id, response))),
                "none"
            );
        }
        d
    }
}

/// `[loops]` in the hook (issue 32): `PostToolUse` reports each result, and
/// the call that would complete a pattern of unchanged results is denied
/// `no-progress`, at its threshold and not before, each hook event a
/// process of its own (the window is in the ledger).
#[test]
fn a_session_that_makes_no_progress_is_denied_at_each_patterns_threshold() {
    let s = Setup::new(LOOPS);
    let status = json!({"command": "gh run view 42"});
    let pending = json!({"stdout": "in_progress", "stderr": "", "interrupted": false});
    // same_outcome = 3: two calls returned the same, the third is denied.
    assert_eq!(
        s.call("Bash", status.clone(), "a1", pending.clone()),
        "none"
    );
    assert_eq!(
        s.call("Bash", status.clone(), "a2", pending.clone()),
        "none"
    );
    let third = s.call("Bash", status.clone(), "a3", pending.clone());
    assert!(
        third.starts_with("deny: budgetgate refused this call (no-progress)"),
        "{third}"
    );
    assert!(third.contains("Bash") && third.contains("3"), "{third}");
    // A changed result starts the count again (another command).
    let list = json!({"command": "ls"});
    assert_eq!(
        s.call("Bash", list.clone(), "b1", json!({"stdout": "a"})),
        "none"
    );
    assert_eq!(
        s.call("Bash", list.clone(), "b2", json!({"stdout": "a b"})),
        "none"
    );
    assert_eq!(
        s.call("Bash", list.clone(), "b3", json!({"stdout": "a b"})),
        "none"
    );
    assert!(s
        .call("Bash", list, "b4", json!({}))
        .contains("(no-progress)"));

    // same_error = 2: one failure, then the same call is denied.
    let make = json!({"command": "make"});
    assert_eq!(decision(&s.run(&s.pre("Bash", make.clone(), "c1"))), "none");
    assert_eq!(
        decision(&s.run(&s.failed("Bash", make.clone(), "c1", "exit 2: no rule"))),
        "none"
    );
    let again = decision(&s.run(&s.pre("Bash", make.clone(), "c2")));
    assert!(again.contains("(no-progress)"), "{again}");
    assert!(again.contains("error"), "{again}");

    // ping_pong_cycles = 2: A B A, then B would make two whole cycles.
    let grep = json!({"pattern": "fn main"});
    let view = json!({"file_path": "/src/a.rs"});
    let none = json!({"content": "", "numFiles": 0});
    let file = json!({"type": "text", "file": {"content": "x"}});
    assert_eq!(s.call("Grep", grep.clone(), "d1", none.clone()), "none");
    assert_eq!(s.call("Read", view.clone(), "d2", file.clone()), "none");
    assert_eq!(s.call("Grep", grep.clone(), "d3", none.clone()), "none");
    let pong = s.call("Read", view, "d4", file);
    assert!(
        pong.contains("(no-progress)") && pong.contains("Grep"),
        "{pong}"
    );
}

/// A call still running (no `PostToolUse` yet) is never matched, and
/// without `[loops]` results are not even kept.
#[test]
fn results_not_reported_match_nothing_and_loops_are_off_without_the_table() {
    let s = Setup::new(LOOPS);
    let status = json!({"command": "status"});
    for id in ["a1", "a2", "a3", "a4"] {
        assert_eq!(decision(&s.run(&s.pre("Bash", status.clone(), id))), "none");
    }
    let off = Setup::new("[budget]\nmax_tool_calls = 100\nmax_repeats = 100\n");
    for id in ["a1", "a2", "a3", "a4"] {
        assert_eq!(
            off.call("Bash", status.clone(), id, json!({"stdout": "x"})),
            "none"
        );
    }
}

/// A loop window that does not read back (torn, edited) denies every call
/// of the session (fail closed) until `ledger reset`, which clears it.
#[test]
fn a_corrupt_loop_window_refuses_until_reset() {
    let s = Setup::new(LOOPS);
    let status = json!({"command": "status"});
    assert_eq!(s.call("Bash", status.clone(), "a1", json!("x")), "none");
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    let mut record: Vec<u8> = db
        .query_row("SELECT record FROM loop_windows", [], |r| r.get(0))
        .unwrap();
    record[5] ^= 0x10;
    db.execute("UPDATE loop_windows SET record = ?1", [&record])
        .unwrap();
    drop(db);
    let out = s.run(&s.pre("Read", json!({}), "t2"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("loop window") && stderr.contains("checksum"),
        "{stderr}"
    );
    let out = Command::new(bin())
        .args(["ledger", "reset", "s1", "--yes", "--state"])
        .arg(s.path("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(decision(&s.run(&s.pre("Read", json!({}), "t3"))), "none");
}

/// A ledger written by the build before loop detection (schema version 2)
/// is opened and upgraded in place: its ledgers kept, the window's table
/// added.
#[test]
fn a_version_2_ledger_is_upgraded_with_its_figures_kept() {
    let s = Setup::new(LOOPS);
    assert_eq!(
        s.call("Bash", json!({"command": "a"}), "a1", json!("x")),
        "none"
    );
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    db.execute_batch("DROP TABLE loop_windows; PRAGMA user_version = 2;")
        .unwrap();
    drop(db);
    assert_eq!(s.used("tool_calls"), 1);
    for id in ["a2", "a3"] {
        assert_eq!(
            s.call("Bash", json!({"command": "b"}), id, json!("y")),
            "none"
        );
    }
    assert!(s
        .call("Bash", json!({"command": "b"}), "a4", json!("y"))
        .contains("(no-progress)"));
    assert_eq!(s.used("tool_calls"), 3);
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 3);
}

/// Each sub-agent has its own loop window (issue 32): four sub-agents
/// started at once, each reading the same file once with the same result,
/// make no loop; one agent reading it three times does. A `PostToolUse`
/// without `tool_response` reports nothing (its call matches nothing).
#[test]
fn each_subagent_has_its_own_loop_window_and_a_missing_result_reports_nothing() {
    let s = Setup::new(LOOPS);
    let read = json!({"file_path": "/repo/CLAUDE.md"});
    let text = json!({"type": "text", "file": {"content": "rules"}});
    let with_agent = |mut event: Value, agent: &str| {
        event["agent_id"] = json!(agent);
        event
    };
    for agent in ["a1", "a2", "a3", "a4"] {
        let id = format!("r-{agent}");
        let pre = with_agent(s.pre("Read", read.clone(), &id), agent);
        assert_eq!(decision(&s.run(&pre)), "none", "{agent}");
        let post = with_agent(s.post("Read", read.clone(), &id, text.clone()), agent);
        assert_eq!(decision(&s.run(&post)), "none");
    }
    // The session's own calls have their own window too.
    assert_eq!(s.call("Read", read.clone(), "main-1", text.clone()), "none");
    for n in 2..=3 {
        let id = format!("r-a1-{n}");
        let pre = with_agent(s.pre("Read", read.clone(), &id), "a1");
        let d = decision(&s.run(&pre));
        if n < 3 {
            assert_eq!(d, "none");
            let post = with_agent(s.post("Read", read.clone(), &id, text.clone()), "a1");
            assert_eq!(decision(&s.run(&post)), "none");
        } else {
            assert!(d.contains("(no-progress)"), "{d}");
        }
    }
    // No tool_response: nothing reported, so nothing matched.
    let poll = json!({"command": "status"});
    for id in ["p1", "p2", "p3", "p4"] {
        assert_eq!(decision(&s.run(&s.pre("Bash", poll.clone(), id))), "none");
        let post = s.event(
            "PostToolUse",
            json!({"tool_name": "Bash", "tool_input": poll, "tool_use_id": id}),
        );
        assert_eq!(decision(&s.run(&post)), "none");
    }
}
