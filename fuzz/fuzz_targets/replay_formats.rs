//! `budgetgate replay`'s recording readers (`host/src/replay/read/`: format
//! detection, then Claude Code logs and stream-json, claude-trace, Messages
//! API exchanges, VCR cassettes in JSON or YAML, SWE-agent trajectories)
//! and the replay itself (`SPEC C`), on arbitrary bytes.
//!
//! Input: `FLAGS RECORDING`; `FLAGS` bit 0 picks the budget (the
//! reference's defaults, or a tight one with approval, a tool cap and a
//! tool-attempt budget).
//!
//! Checks:
//! * no panic; a refused recording has a reason;
//! * a session read is consistent: its tool-call count is the sum of its
//!   responses' calls;
//! * its report is consistent: one `per_turn` row per response, numbered in
//!   order; `tool_calls` is the sum of the rows' calls; calls executed (the
//!   approved ones included) ≤ calls recorded, and each count equals the
//!   rows' verdicts; responses reached ≤ responses, and each reached row
//!   comes before every row not reached; every refused call has a reason,
//!   and `refusals` counts exactly the refused calls by reason; a stop has a
//!   reason; the tokens the gate counted never exceed the recording's (when
//!   known per response); the status is one of the four words;
//! * the `--json` report is JSON with `schema_version` and the table
//!   renders.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use budgetgate::replay::{parse_budget, read_session, replay, ReplayBudget};
use libfuzzer_sys::fuzz_target;

const TIGHT: &str = r#"
[budget]
max_tool_calls = 2
max_repeats = 1
max_tokens = 500
max_model_calls = 3
[tools]
needs_approval = ["Write", "bash"]
approve = ["Write"]
max_calls = { Bash = 1 }
"#;

fn budgets() -> &'static [ReplayBudget; 2] {
    static B: OnceLock<[ReplayBudget; 2]> = OnceLock::new();
    B.get_or_init(|| {
        [
            ReplayBudget::default(),
            parse_budget(TIGHT).expect("tight budget"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let session = match read_session(text) {
        Ok(session) => session,
        Err(reason) => {
            assert!(!reason.trim().is_empty(), "refused without a reason");
            return;
        }
    };
    let calls: usize = session.turns.iter().map(|t| t.calls.len()).sum();
    assert_eq!(session.tool_calls(), calls);
    let budget = &budgets()[usize::from(flags & 1)];
    let report = match replay(&session, budget) {
        Ok(report) => report,
        Err(reason) => {
            assert!(!reason.trim().is_empty(), "replay failed without a reason");
            return;
        }
    };
    assert_eq!(report.turns, session.turns.len());
    assert_eq!(report.per_turn.len(), report.turns);
    let mut executed = 0;
    let mut approved = 0;
    let mut refused: BTreeMap<String, u32> = BTreeMap::new();
    let mut calls = 0;
    let mut reached = 0;
    let mut seen_unreached = false;
    for (i, turn) in report.per_turn.iter().enumerate() {
        assert_eq!(turn.turn, i, "rows out of order");
        if turn.reached {
            assert!(!seen_unreached, "turn {i} reached after one that was not");
            reached += 1;
        } else {
            seen_unreached = true;
        }
        for call in &turn.calls {
            calls += 1;
            match call.verdict {
                "execute" => executed += 1,
                "approved" => {
                    executed += 1;
                    approved += 1;
                }
                "refused" => {
                    let reason = call.reason.as_deref().unwrap_or_default();
                    assert!(
                        !reason.is_empty(),
                        "call {} refused without a reason",
                        call.id
                    );
                    *refused.entry(reason.to_owned()).or_default() += 1;
                }
                "not-reached" => {}
                other => panic!("verdict {other:?}"),
            }
        }
    }
    assert_eq!(report.tool_calls, calls);
    assert_eq!(report.executed, executed, "executed");
    assert_eq!(report.approved, approved, "approved");
    assert!(report.approved <= report.executed && report.executed <= report.tool_calls);
    assert_eq!(report.reached_turns, reached);
    assert!(report.reached_turns <= report.turns);
    assert_eq!(report.refusals, refused, "refusals by reason");
    if let Some(stopped) = &report.stopped {
        assert!(!stopped.reason.is_empty() && !stopped.detail.is_empty());
        if let Some(turn) = stopped.turn {
            assert!(
                turn <= report.turns,
                "stopped at turn {turn} of {}",
                report.turns
            );
        }
    }
    if report.usage_per_turn {
        assert!(
            report.gate_usage.total() <= report.usage.total(),
            "the gate counted {} tokens of a recording of {}",
            report.gate_usage.total(),
            report.usage.total()
        );
    }
    assert!(matches!(
        report.status,
        "running" | "complete" | "incomplete" | "error"
    ));
    let json = report.to_json().expect("the report encodes");
    let value: serde_json::Value = serde_json::from_str(&json).expect("the report is JSON");
    assert!(value["schema_version"].is_u64());
    let _ = report.to_table("recording");
});
