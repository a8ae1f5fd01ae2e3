//! `budgetgate hook claude-code` through the real binary, as Claude Code runs
//! it: one process per event, the event on stdin (`SPEC C`, `SPEC E`):
//! every event shape, each refusal, real process concurrency on one ledger,
//! processes killed mid-decision, fail-closed errors, transcripts counted as
//! replay counts them, and the command line `hook install` writes.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

mod common;

use common::hook::{append, assistant_line, bin, decision, BUDGET};
use common::Setup;

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
    db.execute_batch(
        "DROP TABLE loop_windows; ALTER TABLE transcripts DROP COLUMN open;
         DROP TABLE transcript_calls; PRAGMA user_version = 2;",
    )
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
    assert_eq!(version, 4);
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

/// A budget file the hook cannot read is named once, as the other
/// front-ends name it (`budget file PATH: …`), never `budget budget file`.
#[test]
fn a_budget_file_that_cannot_be_read_is_named_once() {
    let s = Setup::new(BUDGET);
    std::fs::remove_file(s.path("budget.toml")).unwrap();
    let out = s.run(&s.pre("Read", json!({}), "t1"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = format!(
        "budgetgate hook: budget file {}: ",
        s.path("budget.toml").display()
    );
    assert!(stderr.starts_with(&named), "{stderr}");
    assert!(!stderr.contains("budget budget"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// A `--ledger` this build does not read is named once, with the forms it
/// reads (`--ledger URL: not a ledger …`, not `ledger URL: --ledger URL: …`).
#[test]
fn a_ledger_url_the_hook_does_not_read_is_named_once() {
    let s = Setup::new(BUDGET);
    s.use_ledger("postgres://x/y");
    let out = s.run(&s.pre("Read", json!({}), "t1"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .starts_with("budgetgate hook: --ledger postgres://x/y: not a ledger this build reads"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("postgres://x/y").count(), 1, "{stderr}");
}

/// A mistyped ledger path never starts an empty budget: a `--ledger`
/// (state folder or `sqlite:FILE`) or `--state` in a folder that does not
/// exist is refused with one line naming it, and nothing is created; the
/// default state folder (none named) is created with the folders it is in.
#[test]
fn a_ledger_in_a_folder_that_does_not_exist_is_refused_and_not_created() {
    let s = Setup::new(BUDGET);
    let missing = s.path("no-such-folder");
    let state = missing.join("state");
    let file = missing.join("ledger.sqlite3");
    let event = s.pre("Read", json!({}), "t1").to_string();
    let install = |options: &[&str]| {
        Command::new(bin())
            .args(["hook", "install", "--settings"])
            .arg(s.path("settings.json"))
            .args(options)
            .output()
            .unwrap()
    };
    let hook = |options: &[std::ffi::OsString], env: Option<&std::path::Path>| {
        let mut cmd = Command::new(bin());
        cmd.args(["hook", "claude-code", "--budget"])
            .arg(s.path("budget.toml"))
            .args(options)
            .env_remove("BUDGETGATE_STATE_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = env {
            cmd.env("BUDGETGATE_STATE_DIR", dir);
        }
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(event.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    for (option, value) in [
        ("--ledger", state.display().to_string()),
        ("--ledger", format!("sqlite:{}", file.display())),
        ("--state", state.display().to_string()),
    ] {
        let out = hook(&[option.into(), value.clone().into()], None);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "budgetgate hook: {option} {value}: the folder {} does not exist",
                missing.display()
            )),
            "{stderr}"
        );
        assert!(!missing.exists(), "{option} {value} created {missing:?}");
        // `hook install` refuses it too, writing nothing: installed, the
        // hook would refuse every tool call with it.
        let settings = s.path("settings.json");
        let budget = s.path("budget.toml").display().to_string();
        let out = install(&["--budget", &budget, option, &value]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "install {option} {value}: {out:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(&format!(
                "budgetgate hook install: {option} {value}: the folder {} does not exist",
                missing.display()
            )),
            "{stderr}"
        );
        assert!(!settings.exists() && !missing.exists(), "install wrote");
    }
    // A file where the folder should be: said so, not "does not exist"
    // (a hostile trial), by the hook and by its install.
    let file = s.path("a-file");
    std::fs::write(&file, "").unwrap();
    for (option, value, said) in [
        (
            "--state",
            file.display().to_string(),
            file.display().to_string(),
        ),
        (
            "--ledger",
            file.join("state").display().to_string(),
            file.display().to_string(),
        ),
    ] {
        let out = hook(&[option.into(), value.clone().into()], None);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(&format!(
                "budgetgate hook: {option} {value}: {said} is not a folder"
            )),
            "{stderr}"
        );
        let out = install(&[option, &value]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "install {option} {value}: {out:?}"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not a folder"));
    }
    // The default location, several folders deep, is made.
    let default = s.path("xdg/deeper/budgetgate");
    let out = hook(&[], Some(&default));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(default.join("ledger.sqlite3").is_file());
}

/// An event that is not JSON is said to be no JSON object, with where its
/// text stops being JSON (or that stdin was empty), not in the JSON
/// parser's words; it is refused blocking (exit 2) as before.
#[test]
fn an_event_that_is_not_json_is_said_to_be_no_json_object() {
    let s = Setup::new(BUDGET);
    for (text, said) in [
        ("not json", "stdin is not JSON at line 1, column 2"),
        (
            "{\"session_id\": \"s1\",\n oops}",
            "stdin is not JSON at line 2, column 2",
        ),
        ("", "stdin is empty"),
        (" \n", "stdin is empty"),
    ] {
        let out = s.run_text(text);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.trim_end(),
            format!(
                "budgetgate hook: hook event: not a JSON object: {said}; refused (fail closed)"
            ),
            "{text:?}"
        );
    }
}

/// `ledger show` cannot know a tool's cap: the ledger keeps the calls
/// counted under it, the cap is the budget file's (`[tools] max_calls`),
/// and the row says so rather than standing where a figure would.
#[test]
fn ledger_show_says_a_caps_figure_is_not_in_the_ledger() {
    let s = Setup::new(BUDGET);
    assert_eq!(decision(&s.run(&s.pre("Bash", json!({}), "t1"))), "none");
    let show = |extra: &[&str]| {
        let out = Command::new(bin())
            .args(["ledger", "show", "s1", "--state"])
            .arg(s.path("state"))
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let row = |text: &str, tool: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{tool} calls")))
            .unwrap_or_else(|| panic!("{text}"))
            .trim_end()
            .to_owned()
    };
    let (code, text, err) = show(&[]);
    assert_eq!(code, Some(0), "{err}");
    let bash = row(&text, "Bash");
    assert!(
        bash.ends_with(
            "1 / cap not kept in the ledger (the budget file's [tools] max_calls; --budget FILE shows it)"
        ),
        "{bash}"
    );
    // With the budget file the session ran under, the cap's figure and its
    // bar, and a capped tool not called yet.
    let budget = s.path("budget.toml").display().to_string();
    std::fs::write(
        &budget,
        BUDGET.replace(
            "max_calls = { Bash = 2 }",
            "max_calls = { Bash = 2, Write = 3 }",
        ),
    )
    .unwrap();
    let (code, text, err) = show(&["--budget", &budget]);
    assert_eq!(code, Some(0), "{err}");
    let bash = row(&text, "Bash");
    assert!(bash.ends_with(" 1 / 2"), "{bash}");
    assert!(bash.contains("██████████░░░░░░░░░░"), "{bash}");
    assert!(row(&text, "Write").ends_with(" 0 / 3"), "{text}");
    let (code, json_text, err) = show(&["--budget", &budget, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let line: serde_json::Value = serde_json::from_str(json_text.trim()).unwrap();
    assert_eq!(
        line["caps"],
        json!({"Bash": {"used": 1, "max": 2}, "Write": {"used": 0, "max": 3}})
    );
    let (_, json_text, _) = show(&["--json"]);
    let line: serde_json::Value = serde_json::from_str(json_text.trim()).unwrap();
    assert_eq!(line["caps"], json!({"Bash": {"used": 1, "max": null}}));
    // A budget file that cannot be read is named, and nothing is shown.
    let (code, text, err) = show(&["--budget", "/nonexistent/budget.toml"]);
    assert_eq!((code, text.as_str()), (Some(2), ""));
    assert!(
        err.starts_with("budgetgate ledger: budget file /nonexistent/budget.toml: "),
        "{err}"
    );
}

/// A hostile trial: the ledger command a spent session's stop suggests
/// took a session id beginning with `-` for an option (`--help` printed the
/// help). It now puts `--` before such an id, and runs as shown; an id
/// that holds a character a terminal acts on is shown as text.
#[test]
fn the_suggested_ledger_command_takes_an_id_that_looks_like_an_option() {
    let s = Setup::new("[budget]\nmax_model_calls = 0\n");
    for session in ["--help", "-x"] {
        let mut stop = s.event("Stop", json!({"stop_hook_active": false}));
        stop["session_id"] = json!(session);
        let out = s.run(&stop);
        assert_eq!(decision(&out), "stop", "{out:?}");
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        let reason = answer["stopReason"].as_str().unwrap();
        let state = s.path("state").display().to_string();
        let suggested = format!("budgetgate ledger show --state {state} -- {session}");
        assert!(reason.contains(&format!("`{suggested}`")), "{reason}");
        let words: Vec<&str> = suggested.split(' ').collect();
        let shown = Command::new(bin()).args(&words[1..]).output().unwrap();
        assert_eq!(shown.status.code(), Some(0), "{shown:?}");
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(text.starts_with(&format!("session {session}\n")), "{text}");
    }
}
