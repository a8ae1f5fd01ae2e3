//! Replays the recorded sessions in `../shared/data/transcripts/` (beside the
//! checkout; never copied into the repository) and checks the counts their
//! `SOURCES.md` states. Skips, with a note, only when the directory is absent.

use std::path::PathBuf;

use budgetgate::replay::{parse_budget, read_session, replay, ReplayBudget, Report};

fn transcripts() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "note: {} is absent; the shared transcripts are not replayed",
            dir.display()
        );
        None
    }
}

fn file(dir: &PathBuf, prefix: &str) -> String {
    let entry = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no transcript {prefix}* in {}", dir.display()));
    std::fs::read_to_string(&entry).unwrap()
}

fn run(text: &str, budget: &ReplayBudget) -> Report {
    let session = read_session(text).expect("the recording reads");
    let report = replay(&session, budget).expect("the replay runs");
    println!("{}", report.to_table("(shared transcript)"));
    report
}

fn count(report: &Report, reason: &str) -> u32 {
    report.refusals.get(reason).copied().unwrap_or(0)
}

#[test]
fn every_shared_transcript_replays_without_error() {
    let Some(dir) = transcripts() else { return };
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let report = replay(
            &read_session(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            &ReplayBudget::default(),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(report.turns > 0, "{}", path.display());
        // Real recordings use each call id once and only valid tool names:
        // the run-wide id rule and the name grammar refuse nothing in them.
        for reason in ["duplicate-call-id", "invalid-name", "call-id-capacity"] {
            assert_eq!(count(&report, reason), 0, "{}: {reason}", path.display());
        }
        seen += 1;
    }
    assert!(
        seen >= 4,
        "expected the four shared transcripts, found {seen}"
    );
}

#[test]
fn claude_code_log_counts_each_response_once() {
    let Some(dir) = transcripts() else { return };
    let report = run(&file(&dir, "02_"), &ReplayBudget::default());
    assert_eq!(report.format, "claude-code-jsonl");
    // SOURCES.md: 11 distinct API responses and 25 tool_use calls.
    assert_eq!(report.turns, 11);
    assert_eq!(report.tool_calls, 25);
    let mut names = std::collections::BTreeMap::new();
    for call in report.per_turn.iter().flat_map(|t| &t.calls) {
        *names.entry(call.name.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [("Bash", 1), ("Glob", 3), ("Grep", 3), ("Read", 18)]
    );
    // 9 of the 11 responses hold more than one tool_use; the largest holds 5.
    let sizes: Vec<usize> = report.per_turn.iter().map(|t| t.calls.len()).collect();
    assert_eq!(sizes.iter().filter(|&&n| n > 1).count(), 9);
    assert_eq!(sizes.iter().max(), Some(&5));
    // stop_reason is null on every line: all inferred.
    assert!(report.per_turn.iter().all(|t| t.stop_reason_inferred));
    assert_eq!(report.per_turn[10].stop_reason, "end_turn");
    // Cache tokens: 18,050 written on the first call.
    let first = report.per_turn[0].usage.unwrap();
    assert_eq!(first.cache_creation_input_tokens, 18_050);
    assert_eq!(first.cache_read_input_tokens, 0);
    // Each response's usage once: the real cost sums 11 usages, not 36 lines.
    let sum: u64 = report
        .per_turn
        .iter()
        .map(|t| t.usage.unwrap().total())
        .sum();
    assert_eq!(report.usage.total(), sum);
    // Cache reads push the total past 150 000 after six calls: the default
    // budget stops the session before the seventh (turn 6).
    let stopped = report.stopped.as_ref().expect("the token budget stops it");
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(6), "tokens"));
    assert_eq!(report.reached_turns, 6);
    assert!(report.refusals.is_empty());
    // The sixth call ended past the limit: overshot by 21 781 before the stop.
    let overshoot = report.overshoot.as_ref().expect("overshot after the fact");
    assert_eq!(
        (overshoot.used, overshoot.max, overshoot.by),
        (171_781, 150_000, 21_781)
    );
    // With room enough, all 25 calls run and the run completes.
    let roomy = parse_budget("[budget]\nmax_tokens = 1000000\nmax_seconds = 3600").unwrap();
    let report = run(&file(&dir, "02_"), &roomy);
    assert_eq!(report.stopped, None);
    assert_eq!((report.executed, report.status), (25, "complete"));
}

#[test]
fn parallel_tool_calls_cassette() {
    let Some(dir) = transcripts() else { return };
    let report = run(&file(&dir, "03_"), &ReplayBudget::default());
    assert_eq!(report.format, "vcr-cassette");
    // SOURCES.md: 2 calls; call 1 has 4 parallel tool_use, call 2 end_turn.
    assert_eq!((report.turns, report.tool_calls), (2, 4));
    assert_eq!(report.per_turn[0].calls.len(), 4);
    assert_eq!(report.per_turn[0].stop_reason, "tool_use");
    assert_eq!(report.per_turn[1].stop_reason, "end_turn");
    assert_eq!((report.executed, report.status), (4, "complete"));
    assert_eq!(report.stopped, None);
    assert_eq!(report.usage.total(), 423 + 202 + 771 + 77);
    assert!(report.per_turn[0].calls.iter().all(|c| c.recorded == "ok"));
    // Same tool, different input: no repeats even at max_repeats = 1.
    let strict = parse_budget("[budget]\nmax_repeats = 1").unwrap();
    assert!(run(&file(&dir, "03_"), &strict).refusals.is_empty());
    // Two tool attempts left for four parallel calls: the first two run,
    // the other two are refused, in order.
    let two = parse_budget("[budget]\nmax_tool_calls = 2").unwrap();
    let report = run(&file(&dir, "03_"), &two);
    let verdicts: Vec<&str> = report.per_turn[0].calls.iter().map(|c| c.verdict).collect();
    assert_eq!(verdicts, ["execute", "execute", "refused", "refused"]);
    assert_eq!(count(&report, "tool-budget"), 2);
    // Approval needed and refused by default.
    let approval = parse_budget("[tools]\nneeds_approval = [\"retrieve_entity_info\"]").unwrap();
    let report = run(&file(&dir, "03_"), &approval);
    assert_eq!(count(&report, "approval-refused"), 4);
    assert_eq!(report.executed, 0);
}

#[test]
fn max_tokens_cassette() {
    let Some(dir) = transcripts() else { return };
    let report = run(&file(&dir, "04_"), &ReplayBudget::default());
    assert_eq!(report.format, "vcr-cassette");
    // SOURCES.md: 2 calls, both max_tokens, no tool calls.
    assert_eq!((report.turns, report.tool_calls), (2, 0));
    assert!(report
        .per_turn
        .iter()
        .all(|t| t.stop_reason == "max_tokens"));
    assert!(report
        .per_turn
        .iter()
        .all(|t| t.usage.unwrap().output_tokens == 10));
    // The first max_tokens ends the run with status error.
    let stopped = report.stopped.as_ref().unwrap();
    assert_eq!(
        (stopped.turn, stopped.reason.as_str()),
        (Some(0), "max_tokens")
    );
    assert_eq!(report.status, "error");
    assert_eq!(report.reached_turns, 1);
}

#[test]
fn swe_agent_trajectory() {
    let Some(dir) = transcripts() else { return };
    let report = run(&file(&dir, "05_"), &ReplayBudget::default());
    assert_eq!(report.format, "swe-agent-traj");
    // SOURCES.md: 12 steps; usage only as totals (122,612 sent, 1,369 received).
    assert_eq!((report.turns, report.tool_calls), (12, 12));
    assert!(!report.usage_per_turn);
    assert_eq!(report.usage.input_tokens, 122_612);
    assert_eq!(report.usage.output_tokens, 1_369);
    // Steps 6 and 7 are identical: twice is within the default 2 repeats.
    assert_eq!(report.stopped, None);
    assert!(report.refusals.is_empty());
    assert_eq!(report.executed, 12);
    // exit_status `submitted`: the agent finished with its last step.
    assert_eq!(report.status, "complete");
    // With max_repeats = 1, step 7 (the second identical edit) and step 9
    // (`python reproduce_bug.py` again, first at step 2) are refused.
    let once = parse_budget("[budget]\nmax_repeats = 1").unwrap();
    let report = run(&file(&dir, "05_"), &once);
    let refused: Vec<usize> = report
        .per_turn
        .iter()
        .filter(|t| t.calls.iter().any(|c| c.verdict == "refused"))
        .map(|t| t.turn)
        .collect();
    assert_eq!(refused, [7, 9]);
    assert_eq!(count(&report, "repeat"), 2);
    // Ten steps allowed: stopped before step 10.
    let ten = parse_budget("[budget]\nmax_model_calls = 10").unwrap();
    let report = run(&file(&dir, "05_"), &ten);
    let stopped = report.stopped.unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (Some(10), "steps"));
    // A token limit below the run total stops it at a turn that cannot be told.
    let tight = parse_budget("[budget]\nmax_tokens = 100000").unwrap();
    let stopped = run(&file(&dir, "05_"), &tight).stopped.unwrap();
    assert_eq!((stopped.turn, stopped.reason.as_str()), (None, "tokens"));
}
