//! Replays the hand-written sample sessions in `examples/replay/`, one per
//! format, and checks every decision the gate makes on them (`SPEC C`).

use budgetgate::replay::{
    fingerprint_value, parse_budget, read_session, replay, replay_text, ApprovePolicy,
    ReplayBudget, Report,
};

fn example(name: &str) -> String {
    let path = format!("{}/../examples/replay/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn budget_file() -> ReplayBudget {
    let path = format!("{}/../examples/budget.toml", env!("CARGO_MANIFEST_DIR"));
    parse_budget(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn verdicts(report: &Report, turn: usize) -> Vec<(String, &'static str, Option<String>)> {
    report.per_turn[turn]
        .calls
        .iter()
        .map(|c| (c.id.clone(), c.verdict, c.reason.clone()))
        .collect()
}

fn v(
    id: &str,
    verdict: &'static str,
    reason: Option<&str>,
) -> (String, &'static str, Option<String>) {
    (id.to_owned(), verdict, reason.map(str::to_owned))
}

#[test]
fn claude_code_sample() {
    let report = replay_text(&example("claude-code.jsonl"), &ReplayBudget::default()).unwrap();
    assert_eq!(report.format, "claude-code-jsonl");
    // Four responses over 13 assistant lines; the synthetic line is no call.
    assert_eq!((report.turns, report.tool_calls), (4, 5));
    // Usage per response once; output_tokens grows across lines (3, then 20).
    assert_eq!(report.per_turn[0].usage.unwrap().output_tokens, 20);
    assert_eq!(report.per_turn[0].usage.unwrap().total(), 2_032);
    // Missing cache fields count 0.
    assert_eq!(report.per_turn[3].usage.unwrap().total(), 45);
    assert_eq!(report.usage.total(), 2_032 + 2_183 + 2_276 + 45);
    assert_eq!(report.usage.cache_read_input_tokens, 4_150);
    // Null stop reasons inferred; the recorded end_turn kept.
    let stops: Vec<(&str, bool)> = report
        .per_turn
        .iter()
        .map(|t| (t.stop_reason.as_str(), t.stop_reason_inferred))
        .collect();
    assert_eq!(
        stops,
        [
            ("tool_use", true),
            ("tool_use", true),
            ("tool_use", true),
            ("end_turn", false)
        ]
    );
    // The third identical lookup (keys reordered) is refused; 42.0 is not 42.
    assert_eq!(
        verdicts(&report, 2),
        [
            v("toolu_ex_C1", "refused", Some("repeat")),
            v("toolu_ex_C2", "execute", None)
        ]
    );
    assert_eq!(report.refusals.get("repeat"), Some(&1));
    assert_eq!((report.status, report.stopped.clone()), ("complete", None));
    // The recorded results are kept: the refund failed.
    assert_eq!(report.per_turn[1].calls[1].recorded, "error");

    // With the example budget the refund needs approval; no one approves it.
    let report = replay_text(&example("claude-code.jsonl"), &budget_file()).unwrap();
    assert_eq!(
        verdicts(&report, 1),
        [
            v("toolu_ex_B1", "execute", None),
            v("toolu_ex_B2", "refused", Some("approval-refused"))
        ]
    );
    // Approved by the policy, it runs.
    let mut approving = budget_file();
    approving.approve = ApprovePolicy::parse("issue_refund").unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &approving).unwrap();
    assert_eq!(report.per_turn[1].calls[1].verdict, "approved");
    assert_eq!(report.approved, 1);
}

#[test]
fn claude_code_sample_time_and_token_limits() {
    // The last response is requested 5.3 s after the session began (the
    // last line before it): at the limit it is refused, 1 ms more lets it be.
    let at = parse_budget("[budget]\nmax_seconds = 5.3").unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &at).unwrap();
    let stopped = report.stopped.unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(3), "time"));
    let above = parse_budget("[budget]\nmax_seconds = 5.301").unwrap();
    assert_eq!(
        replay_text(&example("claude-code.jsonl"), &above)
            .unwrap()
            .stopped,
        None
    );
    // Exactly at the token limit after two responses: the third is refused.
    let exact = parse_budget("[budget]\nmax_tokens = 4215").unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &exact).unwrap();
    let stopped = report.stopped.unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(2), "tokens"));
    assert_eq!(report.gate_usage.total(), 4_215);
    // One token more and the third call happens (and overshoots: default mode).
    let above = parse_budget("[budget]\nmax_tokens = 4216").unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &above).unwrap();
    assert_eq!(report.stopped.unwrap().turn, Some(3));
    assert_eq!(report.gate_usage.total(), 4_215 + 2_276);
}

#[test]
fn anthropic_exchanges_sample() {
    let report = replay_text(
        &example("anthropic-exchanges.jsonl"),
        &ReplayBudget::default(),
    )
    .unwrap();
    assert_eq!(report.format, "anthropic-messages");
    assert_eq!((report.turns, report.tool_calls), (4, 5));
    // Null cache fields count 0.
    assert_eq!(report.per_turn[0].usage.unwrap().total(), 410);
    // Parallel calls run in order; the recorded error result is kept.
    assert_eq!(
        verdicts(&report, 0),
        [
            v("toolu_x1a", "execute", None),
            v("toolu_x1b", "execute", None)
        ]
    );
    assert_eq!(report.per_turn[0].calls[1].recorded, "error");
    // pause_turn: continue, nothing executed.
    assert_eq!(report.per_turn[1].stop_reason, "pause_turn");
    assert_eq!(report.per_turn[1].outcome, "continue");
    // A tool the requests never declared is unknown.
    assert_eq!(
        verdicts(&report, 2),
        [
            v("toolu_x3a", "execute", None),
            v("toolu_x3b", "refused", Some("unknown-tool"))
        ]
    );
    // max_tokens: the cut-off call is never executed and the run ends in error.
    assert_eq!(
        verdicts(&report, 3),
        [v("toolu_x4a", "refused", Some("cut-off"))]
    );
    let stopped = report.stopped.clone().unwrap();
    assert_eq!(
        (stopped.turn, stopped.reason.as_str()),
        (Some(3), "max_tokens")
    );
    assert_eq!(report.status, "error");
    assert_eq!(report.executed, 3);

    // Reserve mode: the worst case of each call is its input plus the
    // request's max_tokens (1024). With 1 500 tokens, after 410 used the
    // second call (420 input + 1024) passes 1 500: refused before it.
    let reserve = parse_budget("[budget]\nmax_tokens = 1500\ntoken_mode = \"reserve\"").unwrap();
    let report = replay_text(&example("anthropic-exchanges.jsonl"), &reserve).unwrap();
    let stopped = report.stopped.unwrap();
    assert_eq!(
        (stopped.turn, stopped.reason.as_str()),
        (Some(1), "token-reserve")
    );
    assert!(report.gate_usage.total() <= 1_500);
    // The default mode lets that call happen and ends above the limit.
    let after = parse_budget("[budget]\nmax_tokens = 1500").unwrap();
    let report = replay_text(&example("anthropic-exchanges.jsonl"), &after).unwrap();
    assert!(report.gate_usage.total() > 1_500);
}

#[test]
fn anthropic_exchanges_as_one_json_array() {
    let lines = example("anthropic-exchanges.jsonl");
    let array = format!("[{}]", lines.trim().lines().collect::<Vec<_>>().join(","));
    let from_array = replay_text(&array, &ReplayBudget::default()).unwrap();
    let from_lines = replay_text(&lines, &ReplayBudget::default()).unwrap();
    assert_eq!(from_array, from_lines);
}

#[test]
fn vcr_cassette_sample() {
    let report = replay_text(&example("vcr-cassette.yaml"), &ReplayBudget::default()).unwrap();
    assert_eq!(report.format, "vcr-cassette");
    assert_eq!((report.turns, report.tool_calls), (4, 4));
    // parsed_body, body as a string, body.string, and a streamed response.
    assert_eq!(
        report
            .per_turn
            .iter()
            .map(|t| t.usage.unwrap().total())
            .collect::<Vec<_>>(),
        [340, 450, 505, 545]
    );
    assert_eq!(
        verdicts(&report, 1),
        [
            v("toolu_v2a", "execute", None),
            v("toolu_v2b", "execute", None)
        ]
    );
    // The streamed call is the third {"query": "budget", "limit": 5}.
    assert_eq!(
        verdicts(&report, 2),
        [v("toolu_v3", "refused", Some("repeat"))]
    );
    assert_eq!((report.status, report.stopped.clone()), ("complete", None));
    // Date headers: the fourth request leaves 70 s after the first response.
    let minute = parse_budget("[budget]\nmax_seconds = 60").unwrap();
    let stopped = replay_text(&example("vcr-cassette.yaml"), &minute)
        .unwrap()
        .stopped
        .unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(3), "time"));
}

#[test]
fn swe_agent_sample() {
    let report = replay_text(&example("swe-agent.traj"), &ReplayBudget::default()).unwrap();
    assert_eq!(report.format, "swe-agent-traj");
    assert_eq!((report.turns, report.tool_calls), (6, 6));
    assert!(!report.usage_per_turn);
    assert_eq!(report.usage.total(), 5_300);
    // The third identical pytest run is refused.
    assert_eq!(
        verdicts(&report, 4),
        [v("step-4", "refused", Some("repeat"))]
    );
    // exit_status `submitted`, and the last step (the submit) ran: complete.
    assert_eq!(report.status, "complete");
    // Run totals only: a token limit below them stops at an unknown turn.
    let tight = parse_budget("[budget]\nmax_tokens = 5300").unwrap();
    let stopped = replay_text(&example("swe-agent.traj"), &tight)
        .unwrap()
        .stopped
        .unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (None, "tokens"));
    let roomy = parse_budget("[budget]\nmax_tokens = 5301").unwrap();
    assert_eq!(
        replay_text(&example("swe-agent.traj"), &roomy)
            .unwrap()
            .stopped,
        None
    );
}

#[test]
fn json_report_has_the_promised_fields() {
    let report = replay_text(&example("claude-code.jsonl"), &ReplayBudget::default()).unwrap();
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    for key in [
        "format",
        "turns",
        "tool_calls",
        "usage",
        "stopped",
        "refusals",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    let usage = &json["usage"];
    for key in [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "total",
    ] {
        assert!(usage[key].is_u64(), "usage.{key}");
    }
    assert_eq!(json["stopped"], serde_json::Value::Null);
    assert_eq!(json["refusals"], serde_json::json!({"repeat": 1}));
    let table = report.to_table("claude-code.jsonl");
    assert!(table.contains("format: Claude Code session log"));
    assert!(table.contains("refused (repeat)"));
}

#[test]
fn unrecognised_files_are_clear_errors() {
    let err = replay_text("{\"hello\": \"world\"}", &ReplayBudget::default()).unwrap_err();
    assert!(err.contains("not a recognised recording"), "{err}");
    let err = replay_text("- just\n- a list\n", &ReplayBudget::default()).unwrap_err();
    assert!(err.contains("not a recognised recording"), "{err}");
    assert!(read_session("").is_err());
    let err = replay_text("{\"trajectory\": 3}", &ReplayBudget::default()).unwrap_err();
    assert!(err.contains("trajectory"), "{err}");
}

#[test]
fn fingerprints_follow_json_dumps_sort_keys() {
    let fp = |s: &str| fingerprint_value(&serde_json::from_str(s).unwrap()).unwrap();
    assert_eq!(
        fp(r#"{"a":1,"b":[1,{"c":2,"d":3}]}"#),
        fp(r#"{"b":[1,{"d":3,"c":2}],"a":1}"#)
    );
    assert_ne!(fp(r#"{"a":1}"#), fp(r#"{"a":1.0}"#));
    assert_ne!(fp(r#"[1,2]"#), fp(r#"[2,1]"#));
    // The host's walk over a JSON tree agrees with the core's raw reader.
    let raw = r#"{"q":"é","n":[1,2.5,true,null]}"#;
    let core =
        budgetgate_core::turn::ArgsFingerprint::of_json(raw.as_bytes(), &mut [0u8; 64]).unwrap();
    assert_eq!(fp(raw), core);
    // `-0` is Python's integer 0: a repeat of `0`, as the core's raw reader
    // has it. serde_json reads `-0` as `-0.0`, so `-0.0` is taken as 0 too
    // (stricter than the reference, which keeps `-0.0` apart from `0`);
    // `0.0` stays a float, apart from `0`.
    let minus_zero = r#"{"a":-0}"#;
    let core =
        budgetgate_core::turn::ArgsFingerprint::of_json(minus_zero.as_bytes(), &mut [0u8; 64])
            .unwrap();
    assert_eq!(fp(minus_zero), core);
    assert_eq!(fp(minus_zero), fp(r#"{"a":0}"#));
    assert_eq!(fp(r#"{"a":-0.0}"#), fp(r#"{"a":0}"#));
    assert_ne!(fp(r#"{"a":0.0}"#), fp(r#"{"a":0}"#));
    let _ = replay(
        &read_session(&example("swe-agent.traj")).unwrap(),
        &ReplayBudget::default(),
    )
    .unwrap();
}

const PRICES: &str = r#"
[prices.claude-example-1]
input = 3.0
output = 15.0
cache_read = 0.3
cache_write = 3.75
"#;

/// `SPEC E` (cost budget), in replay: each response is priced by its
/// model from the budget's `[prices]` (rounded up to a micro-dollar), and the
/// run stops before the first call at or above `max_cost_usd`.
#[test]
fn replay_stops_where_the_cost_budget_is_spent() {
    let budget = parse_budget(&format!("[budget]\nmax_cost_usd = 0.009\n{PRICES}")).unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &budget).unwrap();
    // 7 836 µ$ after the first response, 9 398 after the second.
    let stopped = report.stopped.clone().expect("stopped on cost");
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(2), "cost"));
    assert_eq!(stopped.detail, "cost limit (9398 of 9000 micro-USD)");
    assert_eq!(report.gate_cost_micro_usd, Some(9_398));
    assert_eq!(report.status, "incomplete");
    assert_eq!(report.budget.max_cost_micro_usd, Some(9_000));
    // Without a limit the prices still give the whole session's cost.
    let report = replay_text(
        &example("claude-code.jsonl"),
        &parse_budget(PRICES).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (report.gate_cost_micro_usd, report.stopped),
        (Some(11_464), None)
    );
    // A limit above it is never reached; exactly at it stops nothing that ran.
    let budget = parse_budget(&format!("[budget]\nmax_cost_usd = 0.011464\n{PRICES}")).unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &budget).unwrap();
    assert_eq!(report.status, "complete");
}

/// `SPEC E` (cost budget): a model with no price is never counted as free:
/// in cost mode the run stops before the call after its first response.
#[test]
fn replay_stops_after_a_response_of_a_model_without_a_price() {
    let budget =
        parse_budget("[budget]\nmax_cost_usd = 100\n[prices.other-model]\ninput = 1\noutput = 1\n")
            .unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &budget).unwrap();
    let stopped = report.stopped.clone().expect("stopped: unpriced");
    assert_eq!(
        (stopped.turn, stopped.reason.as_str()),
        (Some(1), "unpriced-model")
    );
    assert_eq!(report.gate_cost_micro_usd, Some(0));
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("claude-example-1") && n.contains("never counts a call as free")));
    // The table never shows an unknown cost as a zero one.
    assert!(report
        .to_table("x")
        .contains("their cost is unknown, not zero"));
}

/// `SPEC E` (per-tool caps), in replay: `[tools] max_calls` refuses a
/// tool's calls past its cap (`tool-cap`), after repetition, and leaves
/// other tools alone.
#[test]
fn replay_refuses_calls_past_a_tool_cap() {
    let budget = parse_budget("[tools]\nmax_calls = { lookup_order = 2 }\n").unwrap();
    let report = replay_text(&example("claude-code.jsonl"), &budget).unwrap();
    assert_eq!(
        verdicts(&report, 2),
        [
            v("toolu_ex_C1", "refused", Some("repeat")),
            v("toolu_ex_C2", "refused", Some("tool-cap"))
        ]
    );
    assert_eq!(verdicts(&report, 1)[1], v("toolu_ex_B2", "execute", None));
    assert_eq!(report.refusals.get("tool-cap"), Some(&1));
    assert_eq!(report.budget.tool_caps.get("lookup_order"), Some(&2));
}
