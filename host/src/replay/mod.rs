//! `budgetgate replay`: re-decides a recorded agent session turn by turn
//! through the core's turn gate (`SPEC C`).
//!
//! Where would the budget have stopped this agent, which calls would have
//! been refused, and what did the session really cost? The recording is read
//! in whichever supported format it is ([`Format`]), each model response is
//! counted once, and the gate decides every response as it would have live:
//! the budget check before each model call (steps, tokens, time, with the
//! recording's own timestamps where it has them), then each tool call in
//! order (repetition, tool-attempt budget, tool rule, approval). Executed
//! calls are answered with the outcome the recording holds.
//!
//! After the first point where the gate would have ended the run (budget
//! exhausted, or a stop reason other than `tool_use`, `pause_turn` or
//! `end_turn`), later responses are still counted in the real cost but not
//! decided ("not reached"). After an `end_turn`, a later response is a new
//! question on the same budget ([`TurnGate::resume`]).

mod approval;
mod batch;
/// The budget file, read by every front-end (`crate::gate::budget_file`;
/// kept at this path while callers move).
pub use crate::gate::budget_file as budget;
pub use crate::gate::fingerprint::fingerprint_value;
pub(crate) use crate::gate::fingerprint::fingerprint_walk;
mod decide;
mod load;
mod read;
mod report;
mod rows;
pub(crate) mod session;
mod spill;

use std::io::Write;
use std::path::{Path, PathBuf};

use budgetgate_core::turn::TurnGate;

use crate::text::one_line;

pub use crate::term::terminal_safe;
pub use approval::{PolicyApprover, PromptApprover};
pub use budget::{parse_budget, ApprovePolicy, ReplayBudget};
pub use decide::{decide, replay};
use load::{add_subagents, load, load_budget, load_session};
pub use load::{gunzipped, read_limited, subagent_logs, STREAM_FROM_BYTES};
pub use read::{
    read_large_claude_code, read_large_claude_code_spilled, read_session, MAX_YAML_ALIAS_WEIGHT,
    MAX_YAML_DEPTH,
};
pub use report::{
    AgentReport, BudgetReport, CallReport, Overshoot, Report, Stopped, TurnReport, TurnRows,
};
pub use rows::DecidedTurns;
pub use session::{
    Format, RecordedArguments, RecordedCall, RecordedTurn, Session, UsageGranularity,
    UsageIteration,
};
pub use spill::SpilledTurns;

/// The version of the `--json` report's schema (`schema_version`), raised
/// whenever a key changes meaning or goes away (new keys keep it).
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// Largest recording `replay` reads (bytes); a larger one is refused
/// before it is read whole.
pub const MAX_SESSION_BYTES: u64 = 256 << 20;

pub use crate::gate::budget_file::MAX_BUDGET_BYTES;

/// The gate the host replays with: roomier than the device's defaults
/// (256 calls per response, 4096 distinct calls, 256 named tools, 24 576
/// call ids per run: three quarters of 32 768 slots).
pub type ReplayGate = TurnGate<256, 4096, REPLAY_TOOLS, { 1 << 15 }>;

/// The tools a replay's ledgers count calls of (the session's, and each
/// sub-agent's, which the engine checks with it).
pub const REPLAY_TOOLS: usize = 256;

/// What `budgetgate replay` is asked (the command's arguments,
/// `host/src/cli/replay.rs`, say each in full).
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// The recording, or a folder of them; `-` reads standard input.
    pub file: PathBuf,
    /// More recordings or folders: each replayed on its own with the same
    /// budget, summed up in one table (or one JSON object per line).
    pub more: Vec<PathBuf>,
    /// The budget file; the reference's defaults without one.
    pub budget: Option<PathBuf>,
    /// The approver's answers: all, none, or a comma-separated list of
    /// tool names (overrides the budget file's).
    pub approve: Option<String>,
    /// One JSON object (`docs/TURN-GATE.md`) instead of the table.
    pub json: bool,
    /// Draw a batch's progress bar on standard error (the command asks for
    /// it when standard error is a terminal).
    pub progress: bool,
}

/// How a replay ended, for the command's exit status; a batch ends as its
/// worst recording (the order of the variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The gate would not have stopped the session(s), and the budget held.
    Held,
    /// The gate would have stopped a session (budget exhausted, or a stop
    /// reason that ends the run), or a budget was overshot
    /// ([`Report::overshoot`]).
    Exceeded,
    /// A recording or the budget file cannot be read, or the report cannot
    /// be written (one line on the error stream names the file and the
    /// problem).
    Unreadable,
}

fn spill_read_error(e: std::io::Error) -> String {
    format!("cannot read the responses back from their temporary file: {e}")
}

/// Reads and replays `text` (a whole recording) with `budget`.
pub fn replay_text(text: &str, budget: &ReplayBudget) -> Result<Report, String> {
    let session = read_session(text)?;
    replay(&session, budget)
}

/// The name an input path is reported under (`<stdin>` for `-`).
fn input_name(path: &Path) -> String {
    crate::input::display_name(path).into_owned()
}

/// `replay DIR` or several files: see [`ReplayOptions::more`].
fn replay_batch(args: &ReplayOptions, out: &mut dyn Write, err: &mut dyn Write) -> Outcome {
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        Outcome::Unreadable
    };
    let mut paths = vec![args.file.clone()];
    paths.extend(args.more.iter().cloned());
    if paths.iter().any(|p| p == Path::new("-")) {
        return fail("-", "standard input cannot be one of several recordings");
    }
    let budget = match load_budget(args) {
        Ok(budget) => budget,
        Err((source, detail)) => return fail(&source, &detail),
    };
    let files = match batch::collect(&paths) {
        Ok(files) if files.is_empty() => {
            return fail(&input_name(&args.file), "no recordings found")
        }
        Ok(files) => files,
        Err((source, detail)) => return fail(&source, &detail),
    };
    match batch::run(&files, &budget, args.json, args.progress, out).and_then(|status| {
        out.flush()?;
        Ok(status)
    }) {
        Ok(outcome) => outcome,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Outcome::Held,
        Err(e) => fail("<stdout>", &format!("cannot write the report: {e}")),
    }
}

/// Runs `budgetgate replay` as `args` asks: the report (table or JSON) to
/// `out`, an error's one line to `err`. A write error on `out` is
/// [`Outcome::Unreadable`] with one line on `err`, except a broken pipe
/// (`replay … | head`), which ends quietly with the outcome the replay had.
pub fn replay_to(args: &ReplayOptions, out: &mut dyn Write, err: &mut dyn Write) -> Outcome {
    if !args.more.is_empty() || args.file.is_dir() {
        return replay_batch(args, out, err);
    }
    let file = input_name(&args.file);
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        Outcome::Unreadable
    };
    let (budget, mut session) = match load(args) {
        Ok(loaded) => loaded,
        Err((source, detail)) => return fail(&source, &detail),
    };
    if let Err((source, detail)) = add_subagents(&args.file, &mut session) {
        return fail(&source, &detail);
    }
    let report = match decide(&session, &budget) {
        Ok(report) => report,
        Err(detail) => return fail(&file, &detail),
    };
    // Exit 1 when the budget was exceeded, stopped or not: a CI job that
    // asks "does this session fit the budget?" must not pass an overshoot.
    let exceeded = report.stopped.is_some() || report.overshoot.is_some();
    let status = if exceeded {
        Outcome::Exceeded
    } else {
        Outcome::Held
    };
    // Written as it is made: the rows of a long session are never all held.
    let mut buffered = std::io::BufWriter::with_capacity(1 << 16, &mut *out);
    let written = if args.json {
        report.write_json(&mut buffered)
    } else {
        report.write_table(&file, &mut buffered)
    };
    match written.and_then(|()| buffered.flush()) {
        Ok(()) => status,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => status,
        Err(e) => fail("<stdout>", &format!("cannot write the report: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn example(path: &str) -> String {
        format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))
    }

    /// Issue 14 (memory): the report `replay` writes as it is made
    /// ([`decide`], rows made one at a time) is byte for byte the one held
    /// whole ([`replay`], [`Report::to_json`], [`Report::to_table`]): on
    /// every example, with a budget that stops a run before a call, one that
    /// lets every response happen, and approvals.
    #[test]
    fn the_report_written_as_it_is_made_is_the_one_held_whole() {
        let roomy = parse_budget(
            "[budget]\nmax_model_calls = 1000\nmax_tokens = 100000000\n[tools]\nneeds_approval = [\"issue_refund\"]\n",
        )
        .unwrap();
        let tight = parse_budget("[budget]\nmax_model_calls = 1\n").unwrap();
        let mut budgets = vec![ReplayBudget::default(), roomy, tight];
        let mut approving =
            parse_budget(&std::fs::read_to_string(example("budget.toml")).unwrap()).unwrap();
        approving.approve = ApprovePolicy::parse_for("all", &approving.needs_approval).unwrap();
        budgets.push(approving);
        let mut compared = 0;
        for file in [
            "replay/claude-code.jsonl",
            "replay/anthropic-exchanges.jsonl",
            "replay/swe-agent.traj",
            "replay/vcr-cassette.yaml",
        ] {
            let session = read_session(&std::fs::read_to_string(example(file)).unwrap()).unwrap();
            for budget in &budgets {
                let held = replay(&session, budget).unwrap();
                let made = decide(&session, budget).unwrap();
                let mut json = Vec::new();
                made.write_json(&mut json).unwrap();
                assert_eq!(
                    String::from_utf8(json).unwrap(),
                    held.to_json().unwrap() + "\n",
                    "{file}"
                );
                let mut table = Vec::new();
                made.write_table(file, &mut table).unwrap();
                assert_eq!(
                    String::from_utf8(table).unwrap(),
                    held.to_table(file),
                    "{file}"
                );
                assert_eq!(made.held().unwrap(), held);
                compared += 1;
            }
        }
        assert_eq!(compared, 16);
    }

    #[test]
    fn fingerprint_of_deep_values_is_none_past_128_levels() {
        let mut deep = Value::Null;
        for _ in 0..129 {
            deep = Value::Array(vec![deep]);
        }
        assert!(fingerprint_value(&deep).is_none());
        let mut ok = Value::Null;
        for _ in 0..128 {
            ok = Value::Array(vec![ok]);
        }
        assert!(fingerprint_value(&ok).is_some());
    }
}
