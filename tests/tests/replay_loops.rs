//! Loop detection (`[loops]`, issue 32) on the constructed sessions of
//! `tests/loops/` (our own text, in the shapes of the real recordings
//! measured in docs/LOOPS.md): at the recommended thresholds each loop is
//! refused at the turn docs/LOOPS.md and tests/loops/README.md give, and
//! no progressing session is refused.

use std::path::PathBuf;

use budgetgate::replay::{parse_budget, replay_text};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("loops")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The recommended `[loops]`, with limits loose enough that only loop
/// detection refuses.
const LOOPS: &str = "[budget]\nmax_model_calls = 100000\nmax_tokens = 10000000000\nmax_seconds = 100000000\nmax_repeats = 100000\n[loops]\n";

#[test]
fn each_constructed_session_is_refused_where_its_loop_is_and_progress_never() {
    let budget = parse_budget(LOOPS).expect("budget");
    for (name, expected) in [
        ("swe-same-failing-test.traj", Some(("same_outcome", 4))),
        // Each edit between the same check is news: missed, as by
        // OpenHands' rules (docs/LOOPS.md, "Not applied").
        ("swe-edit-run-unchanged.traj", None),
        ("swe-debug-then-fixed.traj", None),
        ("swe-progress-same-command.traj", None),
        (
            "cc-grep-read-alternating.jsonl",
            Some(("ping_pong_cycles", 5)),
        ),
        ("cc-same-error.jsonl", Some(("same_error", 2))),
    ] {
        let report = replay_text(&fixture(name), &budget).unwrap_or_else(|e| panic!("{name}: {e}"));
        let found = report.no_progress.as_ref().map(|s| (s.pattern, s.turn));
        assert_eq!(found, expected, "{name}");
        // Without the table, nothing is refused for no progress.
        let off = parse_budget(&LOOPS.replace("[loops]\n", "")).expect("budget");
        let report = replay_text(&fixture(name), &off).expect("replays");
        assert!(
            report.no_progress.is_none() && !report.refusals.contains_key("no-progress"),
            "{name}"
        );
    }
}
