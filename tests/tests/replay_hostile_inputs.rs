//! Regression tests for `budgetgate replay` against hostile or broken
//! recordings and settings: each test is named after the behaviour it
//! protects (docs/TURN-GATE.md, `budgetgate replay`).

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use budgetgate::replay::{
    parse_budget, read_limited, read_session, replay_text, replay_to, terminal_safe, ApprovePolicy,
    Outcome, ReplayBudget, ReplayOptions, Report, MAX_BUDGET_BYTES,
};
use serde_json::{json, Value};

fn example(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../examples/replay/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn args(file: PathBuf) -> ReplayOptions {
    ReplayOptions {
        file,
        more: Vec::new(),
        budget: None,
        approve: None,
        json: false,
        progress: false,
    }
}

/// Runs `replay_to`, returning the status, stdout and stderr.
fn run(args: &ReplayOptions) -> (Outcome, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = replay_to(args, &mut out, &mut err);
    (
        status,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn temp_file(name: &str, text: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("budgetgate-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// ------------------------------------------------------------- 1. YAML bombs

/// The hostile tester's generator: `n` levels, each alias nine times.
fn billion_laughs(n: usize) -> String {
    let mut lines = vec![format!("l0: &l0 [\"lol\"{}]", ",\"lol\"".repeat(8))];
    for i in 1..n {
        let refs = vec![format!("*l{}", i - 1); 9].join(",");
        lines.push(format!("l{i}: &l{i} [{refs}]"));
    }
    lines.push(format!("interactions: [*l{}]", n - 1));
    lines.join("\n") + "\n"
}

#[test]
fn yaml_alias_bomb_is_refused_fast_in_little_memory() {
    let bomb = billion_laughs(9);
    assert!(bomb.len() < 500, "{}", bomb.len());
    let started = Instant::now();
    let mut result = None;
    let info = allocation_counter::measure(|| result = Some(read_session(&bomb)));
    let err = result.unwrap().unwrap_err();
    assert!(err.contains("alias"), "{err}");
    assert!(info.bytes_total > 0, "the counter is installed");
    assert!(
        info.bytes_max < 4 << 20,
        "peak heap {} bytes for a 452-byte file",
        info.bytes_max
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Through the command: exit 2 with one line.
    let (status, out, err) = run(&args(temp_file("bomb.yaml", bomb.as_bytes())));
    assert_eq!(status, Outcome::Unreadable);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("alias bomb"), "{err}");
}

#[test]
fn yaml_aliases_of_modest_size_still_load() {
    // PyYAML (vcrpy) writes &id001 / *id001 for an object used twice.
    let cassette = r#"interactions:
- request:
    body: '{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}'
    headers: &id001
      content-type: [application/json]
    method: POST
    uri: https://api.anthropic.com/v1/messages
  response:
    body: {string: '{"id":"m1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}'}
    headers: *id001
    status: {code: 200, message: OK}
version: 1
"#;
    let report = replay_text(cassette, &ReplayBudget::default()).unwrap();
    assert_eq!((report.format, report.turns), ("vcr-cassette", 1));
}

#[test]
fn yaml_nesting_is_bounded() {
    let deep = format!("interactions: {}{}\n", "[".repeat(200), "]".repeat(200));
    let err = read_session(&deep).unwrap_err();
    assert!(err.contains("deeper") || err.contains("recursion"), "{err}");
    let mut block = String::from("interactions:\n");
    for depth in 0..300 {
        block.push_str(&" ".repeat(depth + 1));
        block.push_str("- \n");
    }
    let err = read_session(&block).unwrap_err();
    assert!(err.contains("deeper than 128"), "{err}");
}

// -------------------------------------------------------------- 2. File size

/// A reader that counts what is taken from it.
struct Counting<R>(R, u64);

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1 += n as u64;
        Ok(n)
    }
}

#[test]
fn oversized_inputs_are_refused_without_reading_them_whole() {
    let mut endless = Counting(io::repeat(b' '), 0);
    let err = read_limited(&mut endless, 4 << 20, "a recording").unwrap_err();
    assert!(err.contains("larger than 4 MiB"), "{err}");
    assert_eq!(endless.1, (4 << 20) + 1);
    assert_eq!(read_limited(&b"ok"[..], 2, "x").unwrap(), "ok");
    assert!(read_limited(&b"\xff"[..], 2, "x")
        .unwrap_err()
        .contains("UTF-8"));
    // A budget of /dev/zero (endless) and one a byte too large: exit 2.
    let big = temp_file(
        "big-budget.toml",
        &vec![b'#'; MAX_BUDGET_BYTES as usize + 1],
    );
    for budget in [PathBuf::from("/dev/zero"), big.clone()] {
        if !budget.exists() {
            continue;
        }
        let mut a = args(example("claude-code.jsonl"));
        a.budget = Some(budget);
        let (status, _, err) = run(&a);
        assert_eq!(status, Outcome::Unreadable);
        assert!(err.contains("larger than 1 MiB"), "{err}");
    }
    let _ = std::fs::remove_file(big);
}

#[test]
fn stdin_cannot_be_both_the_recording_and_the_budget() {
    let mut a = args(PathBuf::from("-"));
    a.budget = Some(PathBuf::from("-"));
    let (status, _, err) = run(&a);
    assert_eq!(status, Outcome::Unreadable);
    assert!(err.contains("standard input"), "{err}");
}

// ------------------------------------------- 3. Claude Code response merging

/// The tester's log: `n` model calls sharing one message.id, each with its
/// own requestId and its result between them.
fn same_message_id_log(n: usize, request_ids: bool) -> String {
    let mut lines = vec![
        json!({"type":"user","uuid":"u","timestamp":"2026-01-05T10:00:00Z",
        "message":{"role":"user","content":"hi"}}),
    ];
    for i in 0..n {
        let mut assistant = json!({"type":"assistant","uuid":format!("a{i}"),
            "timestamp":"2026-01-05T10:00:01Z",
            "message":{"id":"msg_same","type":"message","role":"assistant",
                "content":[{"type":"tool_use","id":format!("toolu_{i}"),"name":"Read","input":{"i":i}}],
                "stop_reason":null,"usage":{"input_tokens":100000,"output_tokens":1}}});
        if request_ids {
            assistant["requestId"] = json!(format!("req_{i}"));
        }
        lines.push(assistant);
        lines.push(json!({"type":"user","uuid":format!("r{i}"),"timestamp":"2026-01-05T10:00:01Z",
            "message":{"role":"user","content":[{"tool_use_id":format!("toolu_{i}"),"type":"tool_result","content":"ok"}]}}));
    }
    jsonl(&lines)
}

#[test]
fn claude_code_lines_of_different_requests_are_separate_responses() {
    let log = same_message_id_log(20, true);
    let report = replay_text(&log, &ReplayBudget::default()).unwrap();
    assert_eq!(report.turns, 20);
    assert_eq!(report.usage.input_tokens, 2_000_000);
    let stopped = report.stopped.clone().unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(2), "tokens"));
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("reuse the message.id")));
    let (status, _, _) = run(&args(temp_file("sameid.jsonl", log.as_bytes())));
    assert_eq!(status, Outcome::Exceeded);
}

#[test]
fn claude_code_lines_without_request_id_never_merge_across_a_user_line() {
    let report = replay_text(&same_message_id_log(3, false), &ReplayBudget::default()).unwrap();
    assert_eq!(report.turns, 3);
}

#[test]
fn claude_code_lines_of_one_request_merge_across_their_own_results() {
    // As Claude Code writes a response with two calls: each block on its own
    // line, the first call's result between them, usage repeated.
    let line = |uuid: &str, block: Value| {
        json!({"type":"assistant","uuid":uuid,"requestId":"req_1","timestamp":"2026-01-05T10:00:01Z",
            "message":{"id":"msg_1","role":"assistant","content":[block],"stop_reason":null,
                "usage":{"input_tokens":10,"output_tokens":3}}})
    };
    let result = |uuid: &str, id: &str| {
        json!({"type":"user","uuid":uuid,"message":{"role":"user",
            "content":[{"type":"tool_result","tool_use_id":id,"content":"ok"}]}})
    };
    let prompt = json!({"type":"user","uuid":"p","message":{"role":"user","content":"go on"}});
    let a = line(
        "a1",
        json!({"type":"tool_use","id":"t1","name":"Read","input":{"f":1}}),
    );
    let b = line(
        "a2",
        json!({"type":"tool_use","id":"t2","name":"Read","input":{"f":2}}),
    );
    let merged = jsonl(&[a.clone(), result("r1", "t1"), b.clone(), result("r2", "t2")]);
    let report = replay_text(&merged, &ReplayBudget::default()).unwrap();
    assert_eq!((report.turns, report.tool_calls), (1, 2));
    assert_eq!(report.usage.total(), 13);
    // A user prompt between them, or a result of another call: two responses.
    for between in [prompt, result("r9", "t9")] {
        let split = jsonl(&[a.clone(), between, b.clone()]);
        let report = replay_text(&split, &ReplayBudget::default()).unwrap();
        assert_eq!(report.turns, 2);
    }
    // A line of another response between them: three responses.
    let mut other = b.clone();
    other["message"]["id"] = json!("msg_2");
    other["requestId"] = json!("req_2");
    let report = replay_text(&jsonl(&[a.clone(), other, b]), &ReplayBudget::default()).unwrap();
    assert_eq!(report.turns, 3);
}

// ------------------------------------------------ 4. Duplicate ids in a reply

#[test]
fn a_reused_call_id_in_one_response_is_refused_not_dropped() {
    let exchange = json!({"request":{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]},
        "response":{"id":"msg_1","type":"message","role":"assistant","content":[
            {"type":"tool_use","id":"t0","name":"safe_read","input":{}},
            {"type":"tool_use","id":"t0","name":"delete_everything","input":{"all":true}}],
            "stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}}});
    let budget = parse_budget("[tools]\nneeds_approval = [\"delete_everything\"]").unwrap();
    let report = replay_text(&exchange.to_string(), &budget).unwrap();
    assert_eq!(report.tool_calls, 2);
    let calls = &report.per_turn[0].calls;
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].verdict, calls[1].verdict), ("execute", "refused"));
    assert_eq!(calls[1].name, "delete_everything");
    assert_eq!(calls[1].reason.as_deref(), Some("duplicate-call-id"));
    assert_eq!(report.refusals.get("duplicate-call-id"), Some(&1));
    assert_eq!(report.executed, 1);
    assert!(report.to_table("x").contains("refused (duplicate-call-id)"));
}

// ------------------------------------------------------ 5. Terminal escapes

fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
            | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[test]
fn the_table_escapes_control_and_bidi_characters_from_the_recording() {
    let evil = "\u{1b}[2J\u{202e}\u{9b}1m\u{7f}\nstopped: no";
    let first = json!({"id":"msg_1","type":"message","role":"assistant","content":[
        {"type":"tool_use","id":format!("t{evil}"),"name":format!("rd{evil}"),"input":{}},
        {"type":"tool_use","id":"t2","name":format!("ok{evil}"),"input":{}}],
        "stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}});
    let second = json!({"id":"msg_2","type":"message","role":"assistant","content":[],
        "stop_reason":"x\u{1b}[2J\u{202e}\u{85}","usage":{"input_tokens":10,"output_tokens":5}});
    let text = jsonl(&[first, second]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    let file = temp_file("evil\u{1b}[31m.jsonl", text.as_bytes());
    let table = report.to_table(&file.display().to_string());
    assert!(!table.chars().any(unsafe_char), "{table:?}");
    // The recording's newline cannot forge a line of the table.
    assert!(
        !table.lines().any(|l| l.starts_with("stopped: no")),
        "{table}"
    );
    assert!(table.contains("\\u{1b}[2J\\u{202e}\\u{9b}1m\\u{7f}\\u{a}"));
    let stops: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("gate stops here") || l.starts_with("stopped:"))
        .collect();
    assert_eq!(stops.len(), 2);
    assert!(stops
        .iter()
        .all(|l| l.contains("x\\u{1b}[2J\\u{202e}\\u{85}")));
    // The JSON escapes them too, and still reads back the same.
    let line = report.to_json().unwrap();
    assert!(!line.chars().any(unsafe_char), "{line}");
    let back: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(back, serde_json::to_value(&report).unwrap());
    // Through the command, to the table and to the one-line error.
    let (status, out, _) = run(&args(file.clone()));
    assert_eq!(status, Outcome::Exceeded);
    assert!(!out.chars().any(unsafe_char));
    let mut json_args = args(file);
    json_args.json = true;
    let (_, out, _) = run(&json_args);
    assert!(!out.chars().any(unsafe_char));
    assert_eq!(terminal_safe("plain"), "plain");
    let bad = temp_file("evil-\u{1b}]0;x\u{7}.toml", b"nonsense");
    let mut a = args(example("claude-code.jsonl"));
    a.budget = Some(bad);
    let (status, _, err) = run(&a);
    assert_eq!(status, Outcome::Unreadable);
    assert_eq!(err.lines().count(), 1);
    assert!(!err.chars().any(unsafe_char), "{err:?}");
}

// ------------------------------------------------- 6. Non-string stop_reason

#[test]
fn a_stop_reason_that_is_not_a_string_or_null_is_an_error_naming_the_turn() {
    let message = |stop: Value| {
        json!({"id":"m","type":"message","role":"assistant","content":[],"stop_reason":stop,
            "usage":{"input_tokens":1,"output_tokens":1}})
    };
    let ok = message(json!("end_turn"));
    let text = jsonl(&[ok.clone(), message(json!(5))]);
    let err = replay_text(&text, &ReplayBudget::default()).unwrap_err();
    assert!(err.contains("line 2 (response 1)"), "{err}");
    assert!(err.contains("stop_reason is 5"), "{err}");
    for bad in [json!(true), json!({"a": 1}), json!(["end_turn"])] {
        assert!(replay_text(&message(bad).to_string(), &ReplayBudget::default()).is_err());
    }
    // Claude Code: on the first line of a response and on a later one.
    let line = |uuid: &str, stop: Value| {
        json!({"type":"assistant","uuid":uuid,"requestId":"r","message":{"id":"m1","role":"assistant",
            "content":[{"type":"text","text":"x"}],"stop_reason":stop,"usage":{"input_tokens":1}}})
    };
    let err = replay_text(&jsonl(&[line("a", json!(5))]), &ReplayBudget::default()).unwrap_err();
    assert!(err.contains("line 1 (response 0)"), "{err}");
    let err = replay_text(
        &jsonl(&[line("a", Value::Null), line("b", json!(5))]),
        &ReplayBudget::default(),
    )
    .unwrap_err();
    assert!(err.contains("line 2 (response 0)"), "{err}");
}

// --------------------------------------------------------------- 7. SWE-agent

fn trajectory(info: Option<Value>) -> String {
    let mut traj =
        json!({"trajectory":[{"action":"ls","response":"a"},{"action":"cat x","response":"b"}]});
    if let Some(info) = info {
        traj["info"] = info;
    }
    traj.to_string()
}

#[test]
fn swe_agent_usage_of_the_wrong_type_is_an_error_naming_the_field() {
    for (stats, field) in [
        (
            json!({"tokens_sent":"lots","tokens_received":300}),
            "tokens_sent",
        ),
        (
            json!({"tokens_sent":1,"tokens_received":-3}),
            "tokens_received",
        ),
        (
            json!({"tokens_sent":1,"tokens_received":1,"api_calls":1.5}),
            "api_calls",
        ),
    ] {
        let err = replay_text(
            &trajectory(Some(json!({ "model_stats": stats }))),
            &ReplayBudget::default(),
        )
        .unwrap_err();
        assert!(err.contains(&format!("info.model_stats.{field}")), "{err}");
    }
    let err = replay_text(
        &trajectory(Some(json!({"model_stats": 3}))),
        &ReplayBudget::default(),
    )
    .unwrap_err();
    assert!(err.contains("info.model_stats is 3"), "{err}");
}

#[test]
fn swe_agent_without_usage_says_usage_is_unknown() {
    for info in [None, Some(json!({"exit_status":"submitted"}))] {
        let report = replay_text(&trajectory(info), &ReplayBudget::default()).unwrap();
        assert!(!report.usage_known);
        assert_eq!(report.usage.total(), 0);
        assert!(
            report.notes.iter().any(|n| n.contains("usage unknown")),
            "{:?}",
            report.notes
        );
        // The token limit cannot be checked against unknown usage.
        let one = parse_budget("[budget]\nmax_tokens = 1").unwrap();
        let report = replay_text(&trajectory(None), &one).unwrap();
        assert_eq!(report.stopped, None);
    }
    let report = replay_text(
        &trajectory(Some(
            json!({"model_stats":{"tokens_sent":7,"tokens_received":1}}),
        )),
        &ReplayBudget::default(),
    )
    .unwrap();
    assert!(report.usage_known);
}

#[test]
fn run_totals_over_the_token_budget_make_the_status_incomplete() {
    let tight = parse_budget("[budget]\nmax_tokens = 100").unwrap();
    let report = replay_text(
        &trajectory(Some(
            json!({"model_stats":{"tokens_sent":200,"tokens_received":1}}),
        )),
        &tight,
    )
    .unwrap();
    let stopped = report.stopped.clone().unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (None, "tokens"));
    assert_eq!(report.status, "incomplete");
}

// ------------------------------------------------ 8. Streamed error responses

#[test]
fn a_stream_ending_in_an_error_event_is_an_api_error_not_an_end_turn() {
    let ok = r#"{"id":"m0","type":"message","role":"assistant","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}"#;
    let stream = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let cassette = json!({"interactions":[
        {"request":{"body":"{}"},"response":{"status":{"code":200},"body":{"string":ok}}},
        {"request":{"body":"{}"},"response":{"status":{"code":200},"body":{"string":stream}}}]});
    let report = replay_text(&cassette.to_string(), &ReplayBudget::default()).unwrap();
    assert_eq!(report.turns, 1);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("interaction 1: API error response")
                && n.contains("overloaded_error")),
        "{:?}",
        report.notes
    );
    // Exchanges: an error response is skipped the same way.
    let exchanges = jsonl(&[
        json!({"request":{"messages":[]},"response":serde_json::from_str::<Value>(ok).unwrap()}),
        json!({"request":{"messages":[]},"response":{"type":"error","error":{"type":"overloaded_error"}}}),
    ]);
    let report = replay_text(&exchanges, &ReplayBudget::default()).unwrap();
    assert_eq!(report.turns, 1);
    assert!(report.notes.iter().any(|n| n.contains("line 2: API error")));
    // A response that is not a message at all is an error, not an end_turn.
    let odd = json!({"request":{"messages":[]},"response":{"body":"?"}}).to_string();
    assert!(replay_text(&odd, &ReplayBudget::default()).is_err());
}

// ----------------------------------------------------- 9. Approval settings

#[test]
fn approval_settings_refuse_typos_empty_entries_and_invalid_names() {
    for (approve, expect) in [
        ("issue_refund,,x y", "entry 2 of the list is empty"),
        ("issue_refund,x y", "\"x y\" is not a tool name"),
        ("al", "did you mean all?"),
        ("some", "did you mean all or none?"),
    ] {
        let mut a = args(example("claude-code.jsonl"));
        a.approve = Some(approve.into());
        let (status, _, err) = run(&a);
        assert_eq!(status, Outcome::Unreadable, "{approve}");
        assert!(err.starts_with("budgetgate replay: --approve: "), "{err}");
        assert!(err.contains(expect), "{approve}: {err}");
    }
    for word in ["All", "NONE"] {
        let mut a = args(example("claude-code.jsonl"));
        a.approve = Some(word.into());
        assert_eq!(run(&a).0, Outcome::Held, "{word}");
    }
    for toml in [
        "[tools]\napprove = \"al\"",
        "[tools]\napprove = \"some\"",
        "[tools]\napprove = [\"x y\"]",
        "[tools]\napprove = [\"\"]",
    ] {
        assert!(parse_budget(toml).is_err(), "{toml}");
    }
    assert_eq!(
        parse_budget("[tools]\napprove = \"All\"").unwrap().approve,
        ApprovePolicy::All
    );
    // A tool listed for approval that needs none is noted.
    let budget = ReplayBudget {
        approve: ApprovePolicy::parse("Read").unwrap(),
        ..ReplayBudget::default()
    };
    let text = std::fs::read_to_string(example("claude-code.jsonl")).unwrap();
    let report = replay_text(&text, &budget).unwrap();
    assert!(report.notes.iter().any(|n| n.contains("no effect")));
}

// ------------------------------------------------------------ 10. Smaller

#[test]
fn a_truncated_last_line_is_skipped_with_a_note_in_both_jsonl_formats() {
    for name in ["claude-code.jsonl", "anthropic-exchanges.jsonl"] {
        let whole = std::fs::read_to_string(example(name)).unwrap();
        let full: Report = replay_text(&whole, &ReplayBudget::default()).unwrap();
        let cut = &whole.trim_end()[..whole.trim_end().len() - 10];
        let report = replay_text(cut, &ReplayBudget::default()).unwrap();
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("the last, is not complete JSON")),
            "{name}: {:?}",
            report.notes
        );
        assert!(report.turns <= full.turns);
        // Only the last line, and only when it merely stops early.
        let broken_inside = whole.replacen('{', "{oops", 2);
        assert!(replay_text(&broken_inside, &ReplayBudget::default()).is_err());
        let garbage_last = format!("{}\n{{\"a\": ]\n", whole.trim_end());
        assert!(replay_text(&garbage_last, &ReplayBudget::default()).is_err());
    }
}

#[test]
fn unreadable_claude_code_timestamps_are_noted() {
    let line = |uuid: &str, time: Value| {
        json!({"type":"assistant","uuid":uuid,"requestId":uuid,"timestamp":time,
            "message":{"id":uuid,"role":"assistant","content":[{"type":"text","text":"x"}],
                "stop_reason":"end_turn","usage":{"input_tokens":1}}})
    };
    let text = jsonl(&[
        line("a", json!("2026-01-05T10:00:00Z")),
        line("b", json!("yesterday")),
        line("c", json!(12)),
    ]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("2 lines have a timestamp that cannot be read")),
        "{:?}",
        report.notes
    );
}

#[test]
fn max_seconds_below_a_millisecond_or_out_of_range_is_refused() {
    let err = parse_budget("[budget]\nmax_seconds = 0.0001").unwrap_err();
    assert!(err.contains("below one millisecond"), "{err}");
    let err = parse_budget("[budget]\nmax_seconds = 1e300").unwrap_err();
    assert!(err.contains("from 0 to 1e15 seconds"), "{err}");
    assert_eq!(
        parse_budget("[budget]\nmax_seconds = 0.001")
            .unwrap()
            .limits
            .max_millis,
        1
    );
}

// ------------------------------------------------------ 11. Write failures

/// A writer failing with `kind` after accepting `room` bytes.
struct Failing {
    room: usize,
    kind: io::ErrorKind,
}

impl Write for Failing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::Error::new(self.kind, "test"));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_errors_exit_2_and_a_broken_pipe_ends_quietly_with_the_status() {
    for (file, status) in [
        ("claude-code.jsonl", Outcome::Held),
        ("anthropic-exchanges.jsonl", Outcome::Exceeded),
    ] {
        for json in [false, true] {
            let mut a = args(example(file));
            a.json = json;
            let mut err = Vec::new();
            let mut pipe = Failing {
                room: 20,
                kind: io::ErrorKind::BrokenPipe,
            };
            assert_eq!(replay_to(&a, &mut pipe, &mut err), status);
            assert!(err.is_empty());
            let mut full = Failing {
                room: 0,
                kind: io::ErrorKind::StorageFull,
            };
            assert_eq!(replay_to(&a, &mut full, &mut err), Outcome::Unreadable);
            let err = String::from_utf8(err).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with("budgetgate replay: <stdout>: cannot write"),
                "{err}"
            );
        }
    }
}

// ------------------------------------------- 12. Names outside the grammar

#[test]
fn a_name_outside_the_grammar_is_never_executed() {
    // The trial's response: `Bash` needs approval; four look-alikes.
    let names = ["Bash", "Bash ", "", "Ba\u{0}sh", "Bash\u{200b}"];
    let blocks: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"type":"tool_use","id":format!("t{i}"),"name":n,"input":{}}))
        .collect();
    let message = json!({"id":"m","type":"message","role":"assistant","content":blocks,
        "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}});
    let text = jsonl(&[message]);
    for approve in ["none", "all", "Bash"] {
        let budget = parse_budget(&format!(
            "[tools]\nneeds_approval = [\"Bash\"]\napprove = \"{approve}\""
        ))
        .unwrap();
        let report = replay_text(&text, &budget).unwrap();
        let calls = &report.per_turn[0].calls;
        for call in &calls[1..] {
            assert_eq!(
                (call.verdict, call.reason.as_deref()),
                ("refused", Some("invalid-name")),
                "{:?}",
                call.name
            );
        }
        assert_eq!(report.refusals.get("invalid-name"), Some(&4));
        let bash_ran = usize::from(approve != "none");
        assert_eq!(report.executed, bash_ran, "approve = {approve}");
        assert_eq!(report.approved, bash_ran);
        // The table shows the names quoted and escaped: none passes for Bash.
        let table = report.to_table("n.jsonl");
        for shown in [r#""Bash ""#, r#""""#, r#""Ba\0sh""#, r#""Bash\u{200b}""#] {
            assert!(table.contains(shown), "{shown} in {table}");
        }
        assert!(!table.contains('\u{200b}') && !table.contains('\0'));
    }
    // Also when the requests declare the tools: never matched to `Bash`.
    let exchange = json!({"request":{"model":"m","max_tokens":10,"messages":[],
        "tools":[{"name":"Bash","input_schema":{}}]},"response":{"id":"m","type":"message","role":"assistant",
        "content":[{"type":"tool_use","id":"t1","name":"Bash ","input":{}}],
        "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}});
    let report = replay_text(&exchange.to_string(), &ReplayBudget::default()).unwrap();
    assert_eq!(report.refusals.get("invalid-name"), Some(&1));
    assert_eq!(report.executed, 0);
}

// ------------------------------------------- 13. Call ids over the whole run

#[test]
fn a_call_id_used_again_in_a_later_response_is_refused() {
    // The trial's recording, as a JSON file: `t1` in two responses.
    let text = r#"[{"request":{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]},"response":{"id":"r1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"valve_open","input":{"x":1}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}}},
 {"request":{"model":"m","max_tokens":100,"messages":[]},"response":{"id":"r2","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"valve_open","input":{"x":2}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}}}]"#;
    let report = replay_text(text, &ReplayBudget::default()).unwrap();
    let verdicts: Vec<(&str, Option<&str>)> = report
        .per_turn
        .iter()
        .flat_map(|t| &t.calls)
        .map(|c| (c.verdict, c.reason.as_deref()))
        .collect();
    assert_eq!(
        verdicts,
        [("execute", None), ("refused", Some("duplicate-call-id"))]
    );
    assert_eq!(report.executed, 1);
    assert_eq!(report.refusals.get("duplicate-call-id"), Some(&1));
    let (status, out, _) = run(&args(temp_file("dup.json", text.as_bytes())));
    assert_eq!(status, Outcome::Held);
    assert!(out.contains("refused (duplicate-call-id)"), "{out}");
    // Also across an end_turn (a new question on the same budget).
    let message = |id: &str, stop: &str, call: &str| {
        json!({"id":id,"type":"message","role":"assistant","content":[
            {"type":"tool_use","id":call,"name":"Read","input":{}}],
            "stop_reason":stop,"usage":{"input_tokens":1,"output_tokens":1}})
    };
    let text = jsonl(&[
        message("r1", "tool_use", "t1"),
        json!({"id":"r2","type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}),
        message("r3", "tool_use", "t1"),
    ]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    assert_eq!(
        report.per_turn[2].calls[0].reason.as_deref(),
        Some("duplicate-call-id")
    );
    assert_eq!(report.executed, 1);
}

#[test]
fn a_claude_code_block_logged_again_is_one_call_not_a_reused_id() {
    // One response over three lines; the second line repeats the first block.
    let line = |uuid: &str, block: Value| {
        json!({"type":"assistant","uuid":uuid,"requestId":"req_1","timestamp":"2026-01-05T10:00:01Z",
            "message":{"id":"msg_1","role":"assistant","content":[block],"stop_reason":null,
                "usage":{"input_tokens":10,"output_tokens":3}}})
    };
    let t1 = json!({"type":"tool_use","id":"t1","name":"Read","input":{"f":1}});
    let t2 = json!({"type":"tool_use","id":"t2","name":"Read","input":{"f":2}});
    let text = jsonl(&[line("a", t1.clone()), line("b", t1.clone()), line("c", t2)]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    assert_eq!(
        (report.turns, report.tool_calls, report.executed),
        (1, 2, 2)
    );
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
    assert!(report.notes.iter().any(|n| n.contains("logged again")));
    // The same id with other input is not the same block: refused.
    let mut forged = t1.clone();
    forged["input"] = json!({"f": "/etc/shadow"});
    let text = jsonl(&[line("a", t1), line("b", forged)]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    assert_eq!(report.refusals.get("duplicate-call-id"), Some(&1));
    assert_eq!(report.executed, 1);
}

/// Issue 14 (memory): a block logged again is told from a reused call id
/// by comparing the kept fingerprints, exactly as comparing the inputs did:
/// `-0.0` and `0.0` (and `-0`, which serde_json reads as `-0.0`) are the
/// same input, `1` and `1.0` are not (`duplicate-call-id`); in a Claude
/// Code log a string input is arguments like any other, even one that
/// starts like the exchanges' mark for unreadable arguments, and runs.
#[test]
fn a_block_logged_again_is_told_by_its_kept_fingerprint_as_by_its_input() {
    let line = |uuid: &str, input: &str| {
        format!(
            r#"{{"type":"assistant","uuid":"{uuid}","requestId":"req_1","timestamp":"2026-01-05T10:00:01Z","message":{{"id":"msg_1","role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"Read","input":{input}}}],"stop_reason":null,"usage":{{"input_tokens":10,"output_tokens":3}}}}}}"#
        )
    };
    let read = |a: &str, b: &str| {
        let text = format!("{}\n{}\n", line("a", a), line("b", b));
        replay_text(&text, &ReplayBudget::default()).unwrap()
    };
    for (a, b) in [
        (r#"{"x":-0.0}"#, r#"{"x":0.0}"#),
        (r#"{"x":-0}"#, r#"{"x":0.0}"#),
        (r#"{"x":1,"y":2}"#, r#"{"y":2,"x":1}"#),
    ] {
        let report = read(a, b);
        assert_eq!((report.tool_calls, report.executed), (1, 1), "{a} {b}");
        assert!(report.notes.iter().any(|n| n.contains("logged again")));
    }
    let report = read(r#"{"x":1}"#, r#"{"x":1.0}"#);
    assert_eq!(report.tool_calls, 2);
    assert_eq!(report.refusals.get("duplicate-call-id"), Some(&1));
    let marked = r#""\u0000unreadable-arguments:{""#;
    let report = read(marked, marked);
    assert_eq!((report.tool_calls, report.executed), (1, 1));
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
}

// --------------------------------------------------- 14. Duplicate JSON keys

#[test]
fn a_duplicate_key_anywhere_in_a_recording_is_refused_naming_line_and_key() {
    let budget = ReplayBudget::default();
    let message = r#"{"id":"m","type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"input_tokens":999999,"output_tokens":1}}"#;
    // JSON Lines: the trial's usage, on the second line.
    let ok = message.replace(r#""input_tokens":999999,"#, "");
    let err = replay_text(&format!("{ok}\n{message}\n"), &budget).unwrap_err();
    assert!(
        err.starts_with("line 2: duplicate key `input_tokens`"),
        "{err}"
    );
    // The first line, a one-line document.
    let err = replay_text(message, &budget).unwrap_err();
    assert!(
        err.contains("duplicate key `input_tokens` at line 1"),
        "{err}"
    );
    // Ids, names, inputs, stop reasons, message ids: anywhere at any depth.
    for (dup, key) in [
        (
            r#""stop_reason":"tool_use","stop_reason":"end_turn""#,
            "stop_reason",
        ),
        (r#""id":"m","id":"m2""#, "id"),
        (
            r#""content":[{"type":"tool_use","id":"t","name":"Read","name":"Bash","input":{}}]"#,
            "name",
        ),
        (
            r#""content":[{"type":"tool_use","id":"t","name":"Bash","input":{"c":"ls","c":"rm -rf /"}}]"#,
            "c",
        ),
    ] {
        let mut text =
            format!(r#"{{"type":"message","role":"assistant","usage":{{"input_tokens":1}},{dup}"#);
        for (k, v) in [("content", "[]"), ("stop_reason", r#""tool_use""#)] {
            if !dup.contains(&format!("\"{k}\"")) {
                text.push_str(&format!(r#","{k}":{v}"#));
            }
        }
        text.push('}');
        let err = replay_text(&text, &budget).unwrap_err();
        assert!(
            err.contains(&format!("duplicate key `{key}`")),
            "{text}: {err}"
        );
    }
    // A JSON file of several lines: the error gives the line.
    let pretty = format!("[\n{{\"request\": {{\"messages\": []}},\n\"response\": {message}}}\n]");
    let err = replay_text(&pretty, &budget).unwrap_err();
    assert!(
        err.contains("duplicate key `input_tokens` at line 3"),
        "{err}"
    );
    // A Claude Code line.
    let line = json!({"type":"assistant","uuid":"a","requestId":"r","message":{"id":"m1","role":"assistant",
        "content":[],"stop_reason":null,"usage":{"input_tokens":1}}})
    .to_string()
    .replace(r#""input_tokens":1"#, r#""input_tokens":1,"input_tokens":2"#);
    let err = replay_text(&line, &budget).unwrap_err();
    assert!(err.contains("duplicate key `input_tokens`"), "{err}");
    // A cassette's JSON body, in JSON and in YAML.
    let cassette = json!({"interactions":[{"request":{"body":"{}"},
        "response":{"status":{"code":200},"body":{"string":message}}}]})
    .to_string();
    let err = replay_text(&cassette, &budget).unwrap_err();
    assert!(
        err.starts_with("interaction 0: response body: duplicate key `input_tokens`"),
        "{err}"
    );
    let yaml = format!(
        "interactions:\n- request: {{body: '{{}}'}}\n  response:\n    status: {{code: 200}}\n    body: {{string: '{message}'}}\n"
    );
    let err = replay_text(&yaml, &budget).unwrap_err();
    assert!(err.contains("duplicate key `input_tokens`"), "{err}");
    // A YAML mapping with the key twice (or `1` and `"1"`, one JSON key).
    for usage in [
        "{input_tokens: 1, input_tokens: 999999}",
        "{input_tokens: 1, '1': 2, 1: 3}",
    ] {
        let yaml = format!(
            "interactions:\n- response:\n    status: {{code: 200}}\n    parsed_body: {{type: message, content: [], stop_reason: end_turn, usage: {usage}}}\n"
        );
        let err = replay_text(&yaml, &budget).unwrap_err();
        assert!(err.contains("duplicate key"), "{usage}: {err}");
    }
    // A streamed body: an event, and the arguments the deltas build.
    let start = r#"data: {"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","content":[],"stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}}}"#;
    for event in [
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5,"output_tokens":1}}"#,
        concat!(
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1,\"a\":2}"}}"#
        ),
    ] {
        let stream = format!("event: x\n{start}\n\n{event}\n\n");
        let cassette = json!({"interactions":[{"request":{"body":"{}"},
            "response":{"status":{"code":200},"body":{"string":stream}}}]});
        let err = replay_text(&cassette.to_string(), &budget).unwrap_err();
        assert!(
            err.starts_with("interaction 0: streamed response: "),
            "{err}"
        );
        assert!(err.contains("duplicate key"), "{err}");
    }
    // Through the command: exit 2, one line naming the file, line and key.
    let (status, _, err) = run(&args(temp_file(
        "dup-key.jsonl",
        format!("{message}\n").as_bytes(),
    )));
    assert_eq!(status, Outcome::Unreadable);
    assert_eq!(err.lines().count(), 1);
    assert!(
        err.contains("dup-key.jsonl: ") && err.contains("`input_tokens`"),
        "{err}"
    );
}

// ------------------------------------------------ 15. Overshoot is reported

#[test]
fn a_budget_overshot_by_one_response_is_reported_and_exits_1() {
    let message = json!({"id":"m","type":"message","role":"assistant",
        "content":[{"type":"text","text":"done"}],"stop_reason":"end_turn",
        "usage":{"input_tokens":200_000,"output_tokens":1}});
    let text = jsonl(&[message]);
    let report = replay_text(&text, &ReplayBudget::default()).unwrap();
    // The gate let the call happen (after the fact, as the reference does)...
    assert_eq!((report.stopped.clone(), report.status), (None, "complete"));
    // ...and says the budget was overshot, and by how much.
    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(
        json["overshoot"],
        json!({"limit":"tokens","used":200_001,"max":150_000,"by":50_001})
    );
    let table = report.to_table("big.jsonl");
    assert!(
        !table.contains("the budget would not have stopped this session"),
        "{table}"
    );
    assert!(
        table.contains("overshot: tokens budget by 50001 (200001 of 150000)"),
        "{table}"
    );
    let (status, _, _) = run(&args(temp_file("big.jsonl", text.as_bytes())));
    assert_eq!(status, Outcome::Exceeded);
    // At the limit exactly, or below it: no overshoot, exit 0.
    for (total, limit) in [(150_000u64, 150_000u64), (10, 11)] {
        let message = json!({"id":"m","type":"message","role":"assistant","content":[],
            "stop_reason":"end_turn","usage":{"input_tokens":total}});
        let budget = parse_budget(&format!("[budget]\nmax_tokens = {limit}")).unwrap();
        let report = replay_text(&message.to_string(), &budget).unwrap();
        assert_eq!(report.overshoot, None);
        assert!(report.to_json().unwrap().contains(r#""overshoot":null"#));
    }
    // Reserve mode refuses the call instead: stopped, nothing overshot.
    let reserve =
        parse_budget("[budget]\ntoken_mode = \"reserve\"\nreserve_max_tokens = 100").unwrap();
    let report = replay_text(&text, &reserve).unwrap();
    assert_eq!(report.overshoot, None);
    assert_eq!(report.stopped.unwrap().reason, "token-reserve");
}

// ------------------------------------------ 16. SWE-agent submitted, approve

#[test]
fn a_submitted_swe_agent_trajectory_is_complete_not_running() {
    let submitted = trajectory(Some(json!({"exit_status":"submitted",
        "model_stats":{"tokens_sent":7,"tokens_received":1}})));
    let report = replay_text(&submitted, &ReplayBudget::default()).unwrap();
    assert_eq!((report.status, report.stopped.clone()), ("complete", None));
    // SWE-agent's own limit (autosubmitted), or no status: the run did not
    // finish on its own, so it is not complete.
    for info in [
        json!({"exit_status":"submitted (exit_cost)"}),
        json!({"exit_status":"exit_context"}),
        json!({}),
    ] {
        let report =
            replay_text(&trajectory(Some(info.clone())), &ReplayBudget::default()).unwrap();
        assert_eq!(report.status, "running", "{info}");
    }
    // Submitted, but the gate refuses the last step: not complete.
    let one = parse_budget("[tools]\nneeds_approval = [\"cat\"]").unwrap();
    let report = replay_text(&submitted, &one).unwrap();
    assert_eq!(report.status, "running");
    // An exit_status that is not a string is an error naming it.
    let err = replay_text(
        &trajectory(Some(json!({"exit_status":3}))),
        &ReplayBudget::default(),
    )
    .unwrap_err();
    assert!(err.contains("info.exit_status is 3"), "{err}");
}

#[test]
fn all_or_none_cannot_be_combined_with_tool_names() {
    for approve in ["all,Bash", "Bash,none"] {
        let mut a = args(example("claude-code.jsonl"));
        a.approve = Some(approve.into());
        let (status, _, err) = run(&a);
        assert_eq!(status, Outcome::Unreadable, "{approve}");
        assert!(err.starts_with("budgetgate replay: --approve: "), "{err}");
        assert!(err.contains("cannot be combined with tool names"), "{err}");
        assert!(!err.contains("did you mean"), "{err}");
    }
}

#[test]
fn replay_errors_name_the_line_or_interaction_and_the_key() {
    let budget = ReplayBudget::default();
    let message = |content: Value| {
        json!({"id":"m","type":"message","role":"assistant","content":content,
            "stop_reason":"tool_use","usage":{"input_tokens":1}})
    };
    let ok = message(json!([]));
    for (content, expect) in [
        (
            json!([{"type":"text","text":"x"},{"type":"tool_use","id":7,"name":"Read","input":{}}]),
            "line 2 (response 1): content block 1 (tool_use): `id` is 7, not a string",
        ),
        (
            json!([{"type":"tool_use","id":"t","input":{}}]),
            "line 2 (response 1): content block 0 (tool_use) has no `name`",
        ),
        (
            json!({"type":"tool_use","id":"t","name":"Bash","input":{}}),
            "line 2 (response 1): `content` is {",
        ),
    ] {
        let err = replay_text(&jsonl(&[ok.clone(), message(content)]), &budget).unwrap_err();
        assert!(err.starts_with(expect), "{err}");
    }
    let exchange = json!({"request":{"messages":[],"max_tokens":"lots"},"response":ok});
    let err = replay_text(&exchange.to_string(), &budget).unwrap_err();
    assert!(err.contains("`max_tokens` is \"lots\""), "{err}");
    let yaml = "interactions:\n- response:\n    status: {code: 200}\n    parsed_body: {type: message, content: [], stop_reason: end_turn, usage: {input_tokens: .nan}}\n";
    let err = replay_text(yaml, &budget).unwrap_err();
    assert!(
        err.starts_with("interactions[0].response.parsed_body.usage.input_tokens: YAML number"),
        "{err}"
    );
}

// ------------------------------------------ 17. The trial's hostile inputs

#[test]
fn json_nested_100_000_deep_is_refused_without_overflowing_the_stack() {
    let budget = ReplayBudget::default();
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_object = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
    for (text, expect) in [
        (deep_array, "the JSON nests deeper than 128 levels"),
        // An object is read as JSON Lines too (a Claude Code log's call
        // input may be deeper than one document's limit): refused there,
        // naming the line.
        (
            deep_object.clone(),
            "line 1: the JSON nests deeper than 128 levels",
        ),
        (
            format!("{deep_object}\n{deep_object}\n"),
            "line 1: the JSON nests deeper than 128 levels (at line 1",
        ),
    ] {
        let started = Instant::now();
        let err = replay_text(&text, &budget).unwrap_err();
        assert!(err.starts_with(expect), "{}", &err[..err.len().min(200)]);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // Deep arguments inside a valid message: refused the same way.
    let message = format!(
        r#"{{"id":"m","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"t","name":"f","input":{}1{}}}],"stop_reason":"tool_use","usage":{{}}}}"#,
        r#"{"a":"#.repeat(100_000),
        "}".repeat(100_000)
    );
    assert!(replay_text(&message, &budget)
        .unwrap_err()
        .contains("deeper than 128"));
}

#[test]
fn a_100_mb_line_is_read_in_bounded_time() {
    // Below the 256 MiB limit: replayed, not refused, in a few seconds.
    let text = "x".repeat(100_000_000);
    let line = format!(
        r#"{{"id":"m","type":"message","role":"assistant","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":1}}}}"#
    );
    drop(text);
    let started = Instant::now();
    let report = replay_text(&line, &ReplayBudget::default()).unwrap();
    assert_eq!((report.turns, report.status), (1, "complete"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // A 100 MB line that is not JSON: one short error line.
    let garbage = format!("{{\"type\":{}", "!".repeat(100_000_000));
    let err = replay_text(&garbage, &ReplayBudget::default()).unwrap_err();
    assert!(err.len() < 400, "{}", err.len());
}

#[test]
fn invalid_utf8_nul_bytes_and_a_bom_are_handled() {
    let message = json!({"id":"m","type":"message","role":"assistant","content":[],
        "stop_reason":"end_turn","usage":{"input_tokens":3}})
    .to_string();
    // Invalid UTF-8: exit 2, the offset named.
    let mut bytes = message.clone().into_bytes();
    bytes.insert(10, 0xff);
    let (status, out, err) = run(&args(temp_file("bad-utf8.jsonl", &bytes)));
    assert_eq!(status, Outcome::Unreadable);
    assert!(out.is_empty());
    assert!(
        err.contains("not UTF-8 text (an invalid byte at offset 10)"),
        "{err}"
    );
    // A raw NUL byte, in a value or between lines: exit 2, one escaped line.
    for text in [
        message.replacen("\"m\"", "\"m\0\"", 1),
        format!("{message}\n\0\n"),
        message.replacen(':', ":\0", 1),
    ] {
        let (status, _, err) = run(&args(temp_file("nul.jsonl", text.as_bytes())));
        assert_eq!(status, Outcome::Unreadable, "{text:?}");
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(!err.contains('\0'), "{err:?}");
    }
    // A NUL escaped in a name is read, and refused by the name grammar.
    let escaped = json!({"id":"m","type":"message","role":"assistant","content":[
        {"type":"tool_use","id":"t","name":"Ba\u{0}sh","input":{}}],
        "stop_reason":"tool_use","usage":{"input_tokens":3}});
    let report = replay_text(&escaped.to_string(), &ReplayBudget::default()).unwrap();
    assert_eq!(report.refusals.get("invalid-name"), Some(&1));
    // A byte-order mark at the start is skipped: the same replay.
    let plain = replay_text(&message, &ReplayBudget::default()).unwrap();
    let with_bom = replay_text(&format!("\u{feff}{message}"), &ReplayBudget::default()).unwrap();
    assert_eq!(plain, with_bom);
    let (status, _, _) = run(&args(temp_file(
        "bom.jsonl",
        format!("\u{feff}{message}").as_bytes(),
    )));
    assert_eq!(status, Outcome::Held);
    // Elsewhere it is not whitespace: an error naming the line.
    let err = replay_text(
        &format!("{message}\n\u{feff}{message}\n"),
        &ReplayBudget::default(),
    )
    .unwrap_err();
    assert!(err.starts_with("line 2: "), "{err}");
}

#[test]
fn absurd_toml_budgets_are_refused_naming_line_and_column() {
    for (toml, expect) in [
        (
            "[budget]\nmax_tokens = 99999999999999999999",
            "line 2, column 14",
        ),
        ("[budget]\nmax_tokens = -1", "line 2, column 14"),
        (
            "[budget]\nmax_model_calls = 4294967296",
            "line 2, column 19",
        ),
        ("[budget]\nmax_model_calls = 1e400", "line 2, column 19"),
        ("[budget]\nmax_seconds = 1e400", "line 2"),
        ("[budget]\nmax_tokens = \"lots\"", "line 2, column 14"),
        ("[budget]\nmax_tool_calls = true", "line 2, column 18"),
        ("[budget]\nmax_repeats = 1.5", "line 2, column 15"),
        ("[budget]\ntoken_mode = 3", "line 2"),
        ("[tools]\nneeds_approval = \"Bash\"", "line 2, column 18"),
        ("budget = 3", "line 1"),
        ("[budget]\n[budget]", "line 2"),
        ("[budget]\nmax_tokens = 1\nmax_tokens = 2", "line 3"),
    ] {
        let err = parse_budget(toml).unwrap_err();
        assert!(err.contains(expect), "{toml}: {err}");
    }
    // Deep nesting (arrays, inline tables, dotted keys): refused at the TOML
    // reader's limit, fast, and the error does not quote the 200 KB line.
    for deep in [
        format!(
            "[budget]\nmax_tokens = {}{}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
        format!("a = {}1{}", "{b = ".repeat(100_000), "}".repeat(100_000)),
        format!("{} = 1", vec!["a"; 100_000].join(".")),
    ] {
        let started = Instant::now();
        let err = parse_budget(&deep).unwrap_err();
        assert!(err.len() < 200, "{}", &err[..200]);
        assert!(started.elapsed() < Duration::from_secs(5));
        let mut a = args(example("claude-code.jsonl"));
        a.budget = Some(temp_file("deep.toml", deep.as_bytes()));
        let (status, _, err) = run(&a);
        assert_eq!(status, Outcome::Unreadable);
        assert!(err.len() < 300, "{}", err.len());
    }
}

#[test]
fn a_cassette_header_given_twice_is_refused() {
    let body = r#"{"id":"m","type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1}}"#;
    for headers in [
        json!({"Date":["Mon, 05 Jan 2026 10:00:00 GMT"],"date":["Mon, 05 Jan 2026 11:00:00 GMT"]}),
        json!({"date":["Mon, 05 Jan 2026 10:00:00 GMT","Mon, 05 Jan 2026 11:00:00 GMT"]}),
    ] {
        let cassette = json!({"interactions":[{"request":{"body":"{}"},
            "response":{"status":{"code":200},"headers":headers,"body":{"string":body}}}]});
        let err = replay_text(&cassette.to_string(), &ReplayBudget::default()).unwrap_err();
        assert!(err.starts_with("interaction 0: response: header"), "{err}");
    }
}

/// A FIFO never stalls a replay (fail fast): named as the recording, as the
/// budget, or met in a directory walk (where it is one unreadable row and the
/// others are replayed), it is refused without being opened, since opening
/// one waits for a writer forever.
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = std::env::temp_dir().join(format!("budgetgate-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("stuck.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::copy(example("claude-code.jsonl"), dir.join("good.jsonl")).unwrap();
    let (status, _, err) = run(&args(fifo.clone()));
    assert_eq!(status, Outcome::Unreadable);
    assert!(err.contains("stuck.jsonl") && err.contains("FIFO"), "{err}");
    let mut with_budget = args(example("claude-code.jsonl"));
    with_budget.budget = Some(fifo.clone());
    let (status, _, err) = run(&with_budget);
    assert_eq!(status, Outcome::Unreadable);
    assert!(err.contains("FIFO"), "{err}");
    let (status, out, _) = run(&args(dir.clone()));
    assert_eq!(
        status,
        Outcome::Unreadable,
        "one unreadable recording: exit 2"
    );
    assert!(
        out.contains("unreadable") && out.contains("good.jsonl"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The summary table of several recordings says where each stopped as its
/// own report does (`at turn 3`: the response's own `max_tokens`, not
/// "before turn 3", and said to be the response's, not the budget's
/// `max_tokens`), shows an overshoot even when the run also stopped, and
/// keeps an unreadable file's row short.
#[test]
fn the_summary_table_says_where_a_run_stopped_as_its_report_does() {
    let junk = temp_file("not-a-recording.json", br#"{"hello": 1}"#);
    let mut a = args(example("anthropic-exchanges.jsonl"));
    a.more = vec![example("claude-code.jsonl"), junk];
    let (_, out, _) = run(&a);
    // An unreadable file's row gives the first clause of the reason only.
    let bad = out.lines().find(|l| l.contains("not-a-recording")).unwrap();
    assert!(
        bad.contains("unreadable: not a recognised recording"),
        "{bad}"
    );
    assert!(!bad.contains("expected"), "{bad}");
    let row = out
        .lines()
        .find(|l| l.contains("anthropic-exchanges.jsonl"))
        .unwrap();
    assert!(
        row.contains("ended at turn 3: the response's stop_reason max_tokens"),
        "{row}"
    );
    let budget = temp_file(
        "cost-overshoot.toml",
        b"[budget]\nmax_cost_usd = 0.01\n[prices.claude-example-1]\ninput = 3\noutput = 15\ncache_read = 0.3\ncache_write = 3.75\n",
    );
    let mut a = args(example("claude-code.jsonl"));
    a.more = vec![example("claude-code.jsonl")];
    a.budget = Some(budget);
    let (_, out, _) = run(&a);
    let row = out.lines().nth(1).unwrap();
    assert!(
        row.contains("stopped at turn 3: cost, overshot cost by"),
        "{row}"
    );
}
