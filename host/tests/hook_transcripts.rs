//! The Claude Code hook reads a session's transcript as `replay` reads a
//! session log (`SPEC E`: one rule book; issue 30, item 2): every line of
//! one response counted once, a response that reuses an earlier one's
//! `message.id` counted as its own model call, and, driven event by event
//! over every Claude Code log at hand, the same model calls and tokens as
//! `replay` counts.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

mod common;

use common::hook::{append, assistant_line, bin, decision, BUDGET};
use common::Setup;

/// A budget no log here reaches: only the counts are compared.
const ROOMY: &str = "[budget]\nmax_tokens = 1000000000\nmax_seconds = 100000000\nmax_model_calls = 1000000\nmax_repeats = 100000\nmax_tool_calls = 1000000\n";

/// `replay --json` of `log` under `budget` (in `s`'s folder).
fn replayed(s: &Setup, log: &Path) -> Value {
    let out = Command::new(bin())
        .args(["replay", "--json", "--budget"])
        .arg(s.path("budget.toml"))
        .arg(log)
        .output()
        .expect("replay runs");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("replay JSON of {}: {e}: {out:?}", log.display()))
}

/// Drives the hook over `log` as Claude Code would: each line appended to
/// the transcript in turn, a `PreToolUse` for each `tool_use` block the
/// first time its id is written, and a `Stop` at the end. Returns the
/// session's model calls and tokens as the hook's ledger counted them.
fn hook_counts(s: &Setup, text: &str) -> (u64, u64) {
    let t = s.transcript();
    let mut asked = std::collections::HashSet::new();
    for line in text.lines() {
        append(&t, line);
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if value["type"] != "assistant" {
            continue;
        }
        let Some(blocks) = value["message"]["content"].as_array() else {
            continue;
        };
        for block in blocks {
            let Some(id) = block["id"].as_str().filter(|_| block["type"] == "tool_use") else {
                continue;
            };
            if !asked.insert(id.to_owned()) {
                continue;
            }
            let event = s.pre(
                block["name"].as_str().unwrap_or("x"),
                block["input"].clone(),
                id,
            );
            let answer = decision(&s.run(&event));
            assert!(!answer.contains("exhausted"), "{id}: {answer}");
        }
    }
    assert_eq!(decision(&s.run(&s.event("Stop", json!({})))), "none");
    (s.used("model_calls"), s.used("tokens"))
}

/// A log of our own with what real logs hold: a response written over
/// several lines with its results between them (one model call), and two
/// responses that reuse an earlier `message.id` — one after a prompt the
/// user typed, one without a `requestId` after its results — each its own
/// model call.
fn reused_ids_log() -> String {
    let usage = |input: u64, output: u64| json!({"input_tokens": input, "output_tokens": output});
    let call =
        |id: &str| json!([{"type": "tool_use", "id": id, "name": "Read", "input": {"f": id}}]);
    let results = |id: &str| {
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "ok"}]}})
        .to_string()
    };
    let no_request = |id: &str, input, output, blocks: Value| {
        let mut line: Value =
            serde_json::from_str(&assistant_line(id, "", usage(input, output), blocks)).unwrap();
        line.as_object_mut().unwrap().remove("requestId");
        line.to_string()
    };
    let lines = [
        assistant_line("m1", "r1", usage(100, 5), call("t1")),
        results("t1"),
        // The same response's next block, after its result: one model call.
        assistant_line("m1", "r1", usage(100, 9), call("t2")),
        results("t2"),
        json!({"type": "user", "message": {"role": "user", "content": "go on"}}).to_string(),
        // The same ids after a prompt: another model call.
        assistant_line("m1", "r1", usage(100, 9), call("t3")),
        results("t3"),
        no_request("m2", 50, 1, call("t4")),
        results("t4"),
        // No requestId, after a result: another model call.
        no_request("m2", 50, 2, call("t5")),
        results("t5"),
        assistant_line(
            "m3",
            "r3",
            usage(10, 1),
            json!([{"type": "text", "text": "done"}]),
        ),
    ];
    as_logged(&lines).join("\n")
}

/// Every line with the session's id and its own uuid, as Claude Code
/// writes them.
fn as_logged(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .enumerate()
        .map(|(n, line)| {
            // Written into the line's text, which stays as it is spelled
            // (a byte-order mark before it too).
            let (mark, line) = match line.strip_prefix('\u{feff}') {
                Some(line) => ("\u{feff}", line),
                None => ("", line.as_str()),
            };
            let rest = line.strip_prefix('{').expect("an object");
            format!("{mark}{{\"sessionId\":\"s1\",\"uuid\":\"u{n}\",{rest}")
        })
        .collect()
}

/// The hook counts our own log with reused ids exactly as replay does:
/// four model calls and 109 + 109 + 51 + 52 + 11 tokens.
#[test]
fn a_response_reusing_an_earlier_message_id_is_counted_as_replay_counts_it() {
    let s = Setup::new(ROOMY);
    let text = reused_ids_log();
    let log = s.path("log.jsonl");
    std::fs::write(&log, &text).unwrap();
    let report = replayed(&s, &log);
    assert_eq!(report["turns"], 5, "{}", report["notes"]);
    assert_eq!(report["gate_usage"]["total"], 332);
    assert_eq!(hook_counts(&s, &text), (5, 332));
}

/// The same on a Redis ledger, against a real `redis-server`: the open
/// response is kept with the transcript's offset there too.
#[test]
fn a_response_reusing_an_earlier_message_id_is_counted_the_same_on_redis() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let s = Setup::new(ROOMY);
    s.use_ledger(&redis.url);
    assert_eq!(hook_counts(&s, &reused_ids_log()), (5, 332));
}

/// A whole log read in one event (a transaction that reads back what it
/// wrote: the lines of one response) counts as replay counts it, on
/// SQLite and on a real `redis-server`.
#[test]
fn a_log_read_in_one_event_counts_the_same_on_sqlite_and_redis() {
    let redis = common::redis::redis();
    for url in [None, redis.as_ref().map(|r| r.url.as_str())] {
        let s = Setup::new(ROOMY);
        if let Some(url) = url {
            s.use_ledger(url);
        }
        std::fs::write(s.transcript(), reused_ids_log() + "\n").unwrap();
        assert_eq!(decision(&s.run(&s.event("Stop", json!({})))), "none");
        assert_eq!(
            (s.used("model_calls"), s.used("tokens")),
            (5, 332),
            "{url:?}"
        );
    }
}

/// Every Claude Code log at hand — the shipped example and the real logs
/// in `../shared/data` when present — driven through the hook event by
/// event: the hook's ledger holds the model calls and tokens replay counts.
#[test]
fn every_claude_code_log_is_counted_by_the_hook_as_replay_counts_it() {
    let mut logs =
        vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/replay/claude-code.jsonl")];
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts");
    if let Ok(dir) = std::fs::read_dir(&shared) {
        let mut found: Vec<_> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.contains("claude-code") && name.ends_with(".jsonl")
            })
            .collect();
        found.sort();
        logs.extend(found);
    } else {
        eprintln!("{} not present: the example only", shared.display());
    }
    for log in logs {
        let s = Setup::new(ROOMY);
        let report = replayed(&s, &log);
        let text = std::fs::read_to_string(&log).unwrap();
        let counted = hook_counts(&s, &text);
        assert_eq!(
            counted,
            (
                report["turns"].as_u64().unwrap(),
                report["gate_usage"]["total"].as_u64().unwrap()
            ),
            "{}",
            log.display()
        );
    }
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
    // The command the stop suggests names this ledger, and works as shown
    // (before, it left out `--state`, and looked in the default ledger).
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let reason = answer["stopReason"].as_str().expect("stopReason");
    let suggested = reason
        .split_once("(see `")
        .and_then(|(_, rest)| rest.split_once("`)"))
        .map(|(command, _)| command)
        .unwrap_or_else(|| panic!("{reason}"));
    let state = s.path("state").display().to_string();
    assert_eq!(
        suggested,
        format!("budgetgate ledger show --state {state} s1")
    );
    let words: Vec<&str> = suggested.split(' ').collect();
    let shown = Command::new(bin()).args(&words[1..]).output().unwrap();
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    assert!(String::from_utf8_lossy(&shown.stdout).starts_with("session s1\n"));
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

/// A version 3 ledger (before the open response was kept with each
/// transcript's offset) is upgraded in place: what was counted stays
/// counted, the transcript is read on from where it was, and the next
/// response is counted once.
#[test]
fn a_version_3_ledger_is_upgraded_and_its_transcripts_read_on() {
    let s = Setup::new(ROOMY);
    let t = s.transcript();
    let usage = |n: u64| json!({"input_tokens": n, "output_tokens": 1});
    append(&t, &assistant_line("m1", "r1", usage(10), json!([])));
    assert_eq!(decision(&s.run(&s.event("Stop", json!({})))), "none");
    assert_eq!((s.used("model_calls"), s.used("tokens")), (1, 11));
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    db.execute_batch(
        "ALTER TABLE transcripts DROP COLUMN open; DROP TABLE transcript_calls;
         PRAGMA user_version = 3;",
    )
    .unwrap();
    drop(db);
    append(&t, &assistant_line("m2", "r2", usage(20), json!([])));
    assert_eq!(decision(&s.run(&s.event("Stop", json!({})))), "none");
    assert_eq!((s.used("model_calls"), s.used("tokens")), (2, 32));
    let db = rusqlite::Connection::open(s.path("state").join("ledger.sqlite3")).unwrap();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 4);
}

/// A log of our own: call `t1` in response `m1`, its block logged again on
/// a later line of `m1`, its result, then a response `m2` that reuses the
/// id `t1` for the same tool and input.
fn reused_call_id_log() -> Vec<String> {
    let usage = json!({"input_tokens": 10, "output_tokens": 1});
    let read = json!([{"type": "tool_use", "id": "t1", "name": "Read", "input": {"f": 1}}]);
    let lines = [
        assistant_line("m1", "r1", usage.clone(), read.clone()),
        assistant_line("m1", "r1", usage.clone(), read.clone()),
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}})
        .to_string(),
        assistant_line("m2", "r2", usage, read),
    ];
    as_logged(&lines)
}

/// The hook's answers to `PreToolUse` for `t1` after each assistant line
/// of [`reused_call_id_log`].
fn answers_to_reused_id(s: &Setup) -> Vec<String> {
    let t = s.transcript();
    let mut answers = Vec::new();
    for line in reused_call_id_log() {
        append(&t, &line);
        if line.contains("\"assistant\"") {
            answers.push(decision(&s.run(&s.pre("Read", json!({"f": 1}), "t1"))));
        }
    }
    answers
}

/// The same block asked about again — a retry, the block logged again on a
/// later line of its response — gets its first answer; the same id in a
/// later response is refused `duplicate-call-id` even with the same tool
/// and input, as replay refuses it (issue 30: never run a model's second
/// block with a reused id).
#[test]
fn a_call_id_reused_by_a_later_response_is_refused_as_replay_refuses_it() {
    let s = Setup::new(ROOMY);
    let answers = answers_to_reused_id(&s);
    assert_eq!(answers[..2], ["none", "none"], "{answers:?}");
    assert!(answers[2].contains("(duplicate-call-id)"), "{answers:?}");
    let log = s.path("log.jsonl");
    std::fs::write(&log, reused_call_id_log().join("\n")).unwrap();
    let report = replayed(&s, &log);
    assert_eq!(report["refusals"]["duplicate-call-id"], 1, "{report}");
    assert_eq!(report["turns"], 2, "{report}");
}

/// The same on a Redis ledger, against a real `redis-server`.
#[test]
fn a_call_id_reused_by_a_later_response_is_refused_on_redis_too() {
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let s = Setup::new(ROOMY);
    s.use_ledger(&redis.url);
    let answers = answers_to_reused_id(&s);
    assert_eq!(answers[..2], ["none", "none"], "{answers:?}");
    assert!(answers[2].contains("(duplicate-call-id)"), "{answers:?}");
}

/// `lines` (assistant and user lines as [`assistant_line`] and
/// [`results_line`] write them) as a log of the session, driven through
/// the hook event by event: it counts what replay counts.
fn assert_counted_as_replay_counts(what: &str, lines: &[String]) {
    assert_counted_as_replay_counts_in(&Setup::new(ROOMY), what, lines);
}

/// [`assert_counted_as_replay_counts`] in `s`'s folder.
fn assert_counted_as_replay_counts_in(s: &Setup, what: &str, lines: &[String]) {
    let text = as_logged(lines).join("\n");
    let log = s.path("log.jsonl");
    std::fs::write(&log, &text).unwrap();
    let report = replayed(s, &log);
    let expected = (
        report["turns"].as_u64().expect("turns"),
        report["gate_usage"]["total"].as_u64().expect("tokens"),
    );
    assert_eq!(hook_counts(s, &text), expected, "{what}: {text}");
}

/// A user line of `tool_result`s for `ids`.
fn results_line(ids: &[&str]) -> String {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "ok"}))
        .collect();
    json!({"type": "user", "message": {"role": "user", "content": blocks}}).to_string()
}

fn prompt_line() -> String {
    json!({"type": "user", "message": {"role": "user", "content": "go on"}}).to_string()
}

/// A block logged again by a later response of the same `message.id` is
/// that block again, not the later response's own call: its result does
/// not continue the later response (hostile trial of this change: the
/// hook counted 2 model calls where replay counted 3).
#[test]
fn a_block_logged_again_by_a_later_response_of_its_message_id_is_not_its_call() {
    let usage = json!({"input_tokens": 1000, "output_tokens": 1});
    let t1 = json!([{"type": "tool_use", "id": "t1", "name": "Read", "input": {"f": 1}}]);
    let a = |r: &str, blocks: &Value| assistant_line("m1", r, usage.clone(), blocks.clone());
    assert_counted_as_replay_counts(
        "after a prompt",
        &[
            a("r1", &t1),
            prompt_line(),
            a("r1", &t1),
            results_line(&["t1"]),
            a("r1", &json!([])),
        ],
    );
    let bare = |m: &str, blocks: &Value| {
        let mut v: Value =
            serde_json::from_str(&assistant_line(m, "", usage.clone(), blocks.clone())).unwrap();
        v.as_object_mut().unwrap().remove("requestId");
        v.to_string()
    };
    let t2 = json!([{"type": "tool_use", "id": "t2", "name": "Read", "input": {"f": 2}}]);
    // Found by the property test (prop_transcript.rs) in a CI run.
    assert_counted_as_replay_counts(
        "first without a requestId",
        &[
            bare("m0", &t2),
            bare("m0", &json!([])),
            assistant_line("m0", "r1", usage.clone(), t2.clone()),
            results_line(&["t2"]),
            assistant_line("m0", "r1", usage.clone(), json!([])),
        ],
    );
    // The id shown under another message.id between (a reused id), then
    // under the first again: logged again there.
    assert_counted_as_replay_counts(
        "reused between",
        &[
            bare("m1", &t2),
            bare("m0", &t2),
            assistant_line("m1", "r1", usage.clone(), t2.clone()),
            results_line(&["t2"]),
            assistant_line("m1", "r1", usage.clone(), json!([])),
        ],
    );
    assert_counted_as_replay_counts(
        "under another requestId",
        &[
            a("r1", &t1),
            results_line(&["t1"]),
            a("r2", &t1),
            results_line(&["t1"]),
            a("r2", &json!([])),
        ],
    );
}

/// A line whose keys or words are spelled with `\u` escapes is read as
/// JSON reads it, as replay reads it (hostile trial: `"\u0075sage"` went
/// uncounted).
#[test]
fn keys_and_words_spelled_with_escapes_are_counted_as_replay_counts_them() {
    let usage = json!({"input_tokens": 5000, "output_tokens": 16});
    let plain = || assistant_line("m1", "r1", usage.clone(), json!([]));
    let second = || assistant_line("m2", "r2", usage.clone(), json!([]));
    let spelled = |line: String, word: &str, escaped: &str| line.replacen(word, escaped, 1);
    for (what, lines) in [
        (
            "usage",
            vec![spelled(plain(), "\"usage\"", "\"\\u0075sage\"")],
        ),
        (
            "message",
            vec![
                plain(),
                spelled(second(), "\"message\"", "\"\\u006dessage\""),
            ],
        ),
        (
            "assistant",
            vec![
                plain(),
                spelled(second(), "\"assistant\"", "\"\\u0061ssistant\""),
            ],
        ),
        (
            "user",
            vec![
                plain(),
                spelled(prompt_line(), "\"user\"", "\"\\u0075ser\""),
                plain(),
            ],
        ),
        (
            "requestId",
            vec![
                plain(),
                spelled(
                    assistant_line("m1", "r2", usage.clone(), json!([])),
                    "\"requestId\"",
                    "\"request\\u0049d\"",
                ),
            ],
        ),
    ] {
        assert_counted_as_replay_counts(what, &lines);
    }
}

/// What replay refuses in a log the hook refuses too (fail closed: every
/// call is denied until the line is fixed), never counts past: a
/// `requestId` that is not a string, `type` given twice in two
/// spellings, and a response line of more than 4 096 `tool_use` blocks
/// (read at once, they would hold every decision past its deadline).
#[test]
fn a_line_replay_refuses_or_one_too_large_to_read_is_refused() {
    let usage = json!({"input_tokens": 10, "output_tokens": 1});
    let mut numeric: Value =
        serde_json::from_str(&assistant_line("m1", "r1", usage.clone(), json!([]))).unwrap();
    numeric["requestId"] = json!(1);
    let twice =
        results_line(&["t9"]).replacen("\"type\"", "\"\\u0074ype\":\"assistant\",\"type\"", 1);
    let blocks: Vec<Value> = (0..4097)
        .map(|n| json!({"type": "tool_use", "id": format!("t{n}"), "name": "Read", "input": {}}))
        .collect();
    let many = assistant_line("m1", "r1", usage, json!(blocks));
    for (what, line, replay_refuses) in [
        ("a numeric requestId", numeric.to_string(), true),
        ("type given twice", twice, true),
        ("4 097 tool_use blocks", many, false),
    ] {
        let s = Setup::new(ROOMY);
        let logged = as_logged(&[line]);
        append(&s.transcript(), &logged[0]);
        // Exit 2 with the reason on stderr: Claude Code blocks the call
        // and shows the reason.
        let out = s.run(&s.pre("Read", json!({}), "x1"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        assert!(
            stderr.contains("transcript") && stderr.contains("refused (fail closed)"),
            "{what}: {stderr}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("allow"));
        let log = s.path("log.jsonl");
        std::fs::write(&log, &logged[0]).unwrap();
        let out = Command::new(bin())
            .args(["replay", "--json"])
            .arg(&log)
            .output()
            .unwrap();
        assert_eq!(out.status.success(), !replay_refuses, "{what}: {out:?}");
    }
}

/// A sub-agent transcript whose file names no valid agent
/// (`subagents/agent-.jsonl`: an empty id would name the session's own
/// ledger, and each event's counts were written over with a stale copy)
/// refuses every call while it is there, and the session's counts stay
/// (second hostile trial of this session: the budget was never reached).
#[test]
fn a_subagent_file_that_names_no_agent_refuses_every_call() {
    let s = Setup::new(ROOMY);
    let usage = json!({"input_tokens": 300, "output_tokens": 0});
    append(
        &s.transcript(),
        &as_logged(&[assistant_line("m1", "r1", usage, json!([]))])[0],
    );
    assert_eq!(decision(&s.run(&s.event("Stop", json!({})))), "none");
    assert_eq!(s.used("tokens"), 300);
    let dir = s.path("session/subagents");
    std::fs::create_dir_all(&dir).unwrap();
    append(&dir.join("agent-.jsonl").display().to_string(), "{}");
    let out = s.run(&s.pre("Read", json!({}), "x1"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("no valid sub-agent id"), "{stderr}");
    assert_eq!((s.used("model_calls"), s.used("tokens")), (1, 300));
}

/// A block shown in the session's transcript and again, under the same
/// `message.id`, in a sub-agent's is a reused id there (replay reads each
/// log apart and refuses it), not that block logged again.
#[test]
fn a_call_id_shown_again_in_a_subagents_transcript_is_refused() {
    let s = Setup::new(ROOMY);
    let usage = json!({"input_tokens": 10, "output_tokens": 1});
    let t1 = json!([{"type": "tool_use", "id": "t1", "name": "Read", "input": {"f": 1}}]);
    append(
        &s.transcript(),
        &as_logged(&[assistant_line("m1", "r1", usage.clone(), t1.clone())])[0],
    );
    assert_eq!(
        decision(&s.run(&s.pre("Read", json!({"f": 1}), "t1"))),
        "none"
    );
    let dir = s.path("session/subagents");
    std::fs::create_dir_all(&dir).unwrap();
    append(
        &dir.join("agent-x1.jsonl").display().to_string(),
        &as_logged(&[assistant_line("m1", "r1", usage, t1)])[0],
    );
    let mut again = s.pre("Read", json!({"f": 1}), "t1");
    again["agent_id"] = json!("x1");
    let answer = decision(&s.run(&again));
    assert!(answer.contains("(duplicate-call-id)"), "{answer}");
}

/// A response whose ids were seen before gets a key of its own even when
/// a crafted `requestId` spells the key it would get: it never counts
/// against another response's stored usage.
#[test]
fn a_crafted_request_id_cannot_take_another_responses_key() {
    let usage = |n: u64| json!({"input_tokens": n, "output_tokens": 0});
    // The transcript assert_counted_as_replay_counts writes, and where its
    // fourth line starts: the third line's requestId spells the key the
    // fourth (m1/r1 seen again) would get there.
    let s = Setup::new(ROOMY);
    let path = s.transcript();
    let lines_with = |crafted: &str| {
        vec![
            assistant_line("m1", "r1", usage(1000), json!([])),
            prompt_line(),
            assistant_line("m1", crafted, usage(5000), json!([])),
            assistant_line("m1", "r1", usage(20), json!([])),
        ]
    };
    let mut at = 0;
    for _ in 0..4 {
        let logged = as_logged(&lines_with(&format!("r1@{path}:{at}")));
        at = logged[..3].iter().map(|l| l.len() + 1).sum();
    }
    let lines = lines_with(&format!("r1@{path}:{at}"));
    assert_counted_as_replay_counts_in(&s, "crafted", &lines);
}

/// Issue 30 (one reader): what `JSON.stringify` writes that a strict
/// reader refuses — a tool output cut in the middle of a surrogate pair, a
/// call's input nested past serde_json's 128 levels — is read by the one
/// line reader, so `replay` reads the log (it refused it before) and the
/// hook, driven event by event, counts what replay counts.
#[test]
fn a_log_with_lone_surrogates_and_deep_inputs_is_counted_as_replay_counts_it() {
    let deep = |leaf: &str| "[".repeat(300) + leaf + &"]".repeat(300);
    let usage = json!({"input_tokens": 10, "output_tokens": 3});
    let call = |id: &str, input: &str| {
        format!(r#"[{{"type":"tool_use","id":"{id}","name":"Bash","input":{input}}}]"#)
    };
    let line = |message: &str, request: &str, blocks: String| {
        assistant_line(message, request, usage.clone(), json!("BLOCKS"))
            .replace(r#""BLOCKS""#, &blocks)
    };
    let results = |id: &str, text: &str| {
        format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":"{text}"}}]}}}}"#
        )
    };
    let lines = vec![
        line("m1", "r1", call("t1", &format!(r#"{{"x":{}}}"#, deep("1")))),
        results("t1", r"cut here \ud83d"),
        line("m2", "r2", call("t2", r#"{"command":"echo \udc00"}"#)),
        results("t2", "ok"),
        // The same block logged again: one call.
        line("m2", "r2", call("t2", r#"{"command":"echo \udc00"}"#)),
        line("m3", "r3", call("t3", &format!(r#"{{"x":{}}}"#, deep("2")))),
    ];
    let s = Setup::new(ROOMY);
    let text = as_logged(&lines).join("\n");
    let log = s.path("log.jsonl");
    std::fs::write(&log, &text).unwrap();
    let report = replayed(&s, &log);
    assert_eq!(report["turns"], 3, "{report}");
    assert_eq!(report["gate_usage"]["total"], 39, "{report}");
    assert_counted_as_replay_counts("lone surrogates and deep inputs", &lines);
}

/// A block shown again under the same `message.id` with the same id but
/// another input is no block logged again: it is a reused id, refused
/// `duplicate-call-id` as replay refuses it, and the response's result
/// for it is its own, so the hook counts the model calls replay counts
/// (issue 30: the one reader gives the hook the blocks' inputs; it took
/// such a block as logged again before, and counted one model call more).
#[test]
fn a_block_of_a_known_id_with_another_input_is_a_reused_id_as_replay_reads_it() {
    let s = Setup::new(ROOMY);
    let usage = json!({"input_tokens": 10, "output_tokens": 1});
    let read =
        |f: u32| json!([{"type": "tool_use", "id": "t1", "name": "Read", "input": {"f": f}}]);
    let lines = vec![
        assistant_line("m1", "r1", usage.clone(), read(1)),
        results_line(&["t1"]),
        // The same message.id, another request: a new response, whose
        // block reuses t1 with another input.
        assistant_line("m1", "r2", usage.clone(), read(2)),
        results_line(&["t1"]),
        assistant_line("m1", "r2", usage.clone(), json!([])),
    ];
    let t = s.transcript();
    let mut answers = Vec::new();
    for line in as_logged(&lines) {
        append(&t, &line);
        if line.contains("\"assistant\"") {
            answers.push(decision(&s.run(&s.pre("Read", json!({"f": 2}), "t1"))));
        }
    }
    assert!(answers[1].contains("(duplicate-call-id)"), "{answers:?}");
    let log = s.path("log.jsonl");
    std::fs::write(&log, as_logged(&lines).join("\n")).unwrap();
    let report = replayed(&s, &log);
    assert_eq!(report["refusals"]["duplicate-call-id"], 1, "{report}");
    assert_eq!(report["turns"], 2, "{report}");
    assert_counted_as_replay_counts("a known id with another input", &lines);
}

/// An event holding what `JSON.stringify` writes for a text cut inside a
/// surrogate pair (a lone surrogate escape) is read, as the transcript is:
/// a `Stop` event is not blocked, and a call's input with one is decided
/// (hostile trial of issue 30's one reader: both exited 2).
#[test]
fn an_event_with_a_lone_surrogate_is_read() {
    let s = Setup::new(ROOMY);
    let event = s
        .pre("Read", json!({"f": "x"}), "u1")
        .to_string()
        .replace(r#""f":"x""#, r#""f":"x\ud83d""#);
    assert!(event.contains(r"\ud83d"), "{event}");
    let out = s.run_text(&event);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stop = event
        .replace(
            r#""hook_event_name":"PreToolUse""#,
            r#""hook_event_name":"Stop""#,
        )
        .replace(
            r#""tool_name":"Read""#,
            r#""last_assistant_message":"done \ud83d""#,
        );
    let out = s.run_text(&stop);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A transcript opening with a byte-order mark is read as replay reads it
/// (the hook refused every call), and a line ended by a form feed, which
/// is not JSON's whitespace, is refused by both (the hook counted it) —
/// hostile trial of issue 30's one reader. A lone surrogate in a key of a
/// log's first line is read by replay's format probe too (it refused the
/// log).
#[test]
fn a_byte_order_mark_a_form_feed_and_a_lone_surrogate_key_read_as_replay_reads_them() {
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    let call = |id: &str| json!([{"type": "tool_use", "id": id, "name": "Read", "input": {}}]);
    let bom = vec![
        format!(
            "\u{feff}{}",
            assistant_line("m1", "r1", usage.clone(), call("t1"))
        ),
        results_line(&["t1"]),
        assistant_line("m2", "r2", usage.clone(), call("t2")),
    ];
    assert_counted_as_replay_counts("a byte-order mark", &bom);
    let surrogate_key = vec![
        json!({"type": "user", "X": 1, "message": {"role": "user", "content": "hi"}})
            .to_string()
            .replace(r#""X""#, r#""x\ud83d""#),
        assistant_line("m1", "r1", usage.clone(), call("t1")),
        results_line(&["t1"]),
        assistant_line("m2", "r2", usage.clone(), call("t2")),
    ];
    assert!(surrogate_key[0].contains(r"\ud83d"));
    assert_counted_as_replay_counts("a lone surrogate in a key", &surrogate_key);

    let s = Setup::new(ROOMY);
    let fed = format!("{}\u{c}", assistant_line("m1", "r1", usage, call("t1")));
    append(&s.transcript(), &fed);
    let out = s.run(&s.pre("Read", json!({}), "t1"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let log = s.path("log.jsonl");
    std::fs::write(&log, format!("{fed}\n")).unwrap();
    let replayed = Command::new(bin())
        .args(["replay", "--json"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(replayed.status.code(), Some(2), "{replayed:?}");
}
