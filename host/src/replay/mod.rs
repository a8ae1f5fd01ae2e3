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
use std::process::ExitCode;

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

/// Arguments of `budgetgate replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The recorded session: a Claude Code session log (.jsonl, with its
    /// subagents/agent-*.jsonl beside it), Claude Code stream-json output, a
    /// claude-trace log, Anthropic Messages API exchanges (.json/.jsonl), a
    /// VCR cassette (.yaml/.json, or gzipped .yaml.gz) of Anthropic or OpenAI
    /// calls, or a SWE-agent trajectory (.traj). The format is detected from
    /// the content. "-" reads standard input. At most 256 MiB (a Claude Code
    /// log of 16 MiB or more is read line by line, with no limit). A directory
    /// (e.g. ~/.claude/projects) replays every recording below it.
    #[arg(value_name = "FILE|DIR")]
    pub file: PathBuf,

    /// More recordings or directories. With several, or a directory, each
    /// recording is replayed on its own with the same budget, in parallel,
    /// and summed up in one table, worst first (--json: one object per line,
    /// with its `file`, and `error` instead of the report when it cannot be
    /// read); exit 2 if any cannot be read, else 1 if any was stopped or
    /// overshot. On a terminal, standard error shows a progress bar (bytes
    /// read, recordings done, rate, time left).
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,

    /// Budget file (TOML, see docs/TURN-GATE.md); without it, the reference's
    /// defaults: 15 model calls, 150000 tokens, 120 s, 2 repeats. "-" reads
    /// standard input. At most 1 MiB.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,

    /// The approver's answers for tools that need approval (listed in the
    /// budget file): all, none, or a comma-separated list of tool names.
    /// Overrides the budget file; default none.
    #[arg(long, value_name = "all|none|TOOL,...")]
    pub approve: Option<String>,

    /// Print one JSON object instead of the table (schema in
    /// docs/TURN-GATE.md). Keys: schema_version (2), format,
    /// format_description, turns, tool_calls, server_tool_calls, usage
    /// {input_tokens, output_tokens, cache_read_input_tokens,
    /// cache_creation_input_tokens, total}, usage_per_turn, usage_known,
    /// stopped {turn, reason, detail} or null, no_progress {turn, call_id,
    /// tool, pattern, detail, saved_model_calls, saved_tokens} or null
    /// (`[loops]`), overshoot {limit, used, max, by} or null, status, refusals {reason: count}, executed, approved,
    /// reached_turns, gate_usage, gate_cost_micro_usd, budget, notes, agents [{agent, turns,
    /// tool_calls, usage}], per_turn [{turn, message_id, stop_reason,
    /// stop_reason_inferred, usage, running_total, reached, outcome, calls
    /// [{id, name, verdict, reason, recorded}], usage_iterations,
    /// server_tool_calls, cut_off, agent}].
    #[arg(long)]
    pub json: bool,
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

/// `replay DIR` or several files: see [`ReplayArgs::more`].
fn command_batch(args: &ReplayArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        ExitCode::from(2)
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
    match batch::run(&files, &budget, args.json, out).and_then(|status| {
        out.flush()?;
        Ok(status)
    }) {
        Ok(status) => ExitCode::from(status),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(0),
        Err(e) => fail("<stdout>", &format!("cannot write the report: {e}")),
    }
}

/// Runs `budgetgate replay`, printing to standard output. Exit status: 0
/// the gate would not have stopped the session and its budget held, 1 it
/// would have (budget exhausted, or a stop reason that ends the run) or the
/// budget was overshot ([`Report::overshoot`]), 2 the recording or the
/// budget file cannot be read, or the report cannot be written (one line on
/// stderr names the file and the problem).
pub fn command(args: &ReplayArgs) -> ExitCode {
    command_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr())
}

/// [`command`] writing the report to `out` and errors to `err`. A write
/// error on `out` is exit status 2 with one line on `err`, except a broken
/// pipe (`replay … | head`), which ends quietly with the status the replay
/// had.
pub fn command_to(args: &ReplayArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    if !args.more.is_empty() || args.file.is_dir() {
        return command_batch(args, out, err);
    }
    let file = input_name(&args.file);
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        ExitCode::from(2)
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
    let status = ExitCode::from(u8::from(exceeded));
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
    use clap::Parser;
    use serde_json::Value;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        replay: ReplayArgs,
    }

    fn example(path: &str) -> String {
        format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))
    }

    /// `command`, with the report and errors kept out of the test's output.
    fn run(args: &ReplayArgs) -> ExitCode {
        command_to(args, &mut Vec::new(), &mut Vec::new())
    }

    #[test]
    fn arguments_parse_and_exit_statuses() {
        let cli = Cli::try_parse_from([
            "replay",
            &example("replay/claude-code.jsonl"),
            "--budget",
            &example("budget.toml"),
            "--approve",
            "issue_refund,Bash",
            "--json",
        ])
        .unwrap();
        assert!(cli.replay.json);
        assert_eq!(cli.replay.approve.as_deref(), Some("issue_refund,Bash"));
        assert_eq!(run(&cli.replay), ExitCode::from(0));
        // The exchanges sample ends with max_tokens: the gate stops it.
        let stopped =
            Cli::try_parse_from(["replay", &example("replay/anthropic-exchanges.jsonl")]).unwrap();
        assert_eq!(run(&stopped.replay), ExitCode::from(1));
        // Unreadable inputs: exit 2.
        let missing = Cli::try_parse_from(["replay", "/nonexistent/session.jsonl"]).unwrap();
        assert_eq!(run(&missing.replay), ExitCode::from(2));
        let bad_budget = Cli::try_parse_from([
            "replay",
            &example("budget.toml"),
            "--budget",
            &example("replay/swe-agent.traj"),
        ])
        .unwrap();
        assert_eq!(run(&bad_budget.replay), ExitCode::from(2));
        let not_a_session = Cli::try_parse_from(["replay", &example("budget.toml")]).unwrap();
        assert_eq!(run(&not_a_session.replay), ExitCode::from(2));
        let bad_approve = Cli::try_parse_from([
            "replay",
            &example("replay/swe-agent.traj"),
            "--approve",
            ",",
        ])
        .unwrap();
        assert_eq!(run(&bad_approve.replay), ExitCode::from(2));
        assert!(Cli::try_parse_from(["replay"]).is_err());
    }

    /// Every key `--json` writes (top level, per turn, per call, budget,
    /// agents) is named in `--help` (top level and per turn) and in
    /// docs/TURN-GATE.md.
    #[test]
    fn every_json_key_is_in_the_help_and_the_docs() {
        use clap::CommandFactory;
        let text = std::fs::read_to_string(example("replay/claude-code.jsonl")).unwrap();
        let mut session = read_session(&text).unwrap();
        session.turns[0].agent = Some("agent-x".into());
        let report = replay(&session, &ReplayBudget::default()).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        let help = Cli::command().render_long_help().to_string();
        let help: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let docs = std::fs::read_to_string(format!(
            "{}/../docs/TURN-GATE.md",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        let per_turn = &json["per_turn"][0];
        let mut in_help = keys(&json);
        in_help.extend(keys(per_turn));
        in_help.extend(keys(&per_turn["calls"][0]));
        in_help.extend(keys(&json["agents"][0]));
        for key in &in_help {
            assert!(help.contains(key.as_str()), "--help does not name `{key}`");
        }
        let mut in_docs = in_help.clone();
        in_docs.extend(keys(&json["budget"]));
        for key in &in_docs {
            assert!(
                docs.contains(&format!("`{key}`")),
                "docs/TURN-GATE.md does not name `{key}`"
            );
        }
        assert_eq!(json["schema_version"], REPORT_SCHEMA_VERSION);
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
