//! `budgetgate replay` (`SPEC C`): its arguments ([`ReplayArgs`]) and its exit
//! statuses; the replay is the library's (`budgetgate::replay::replay_to`,
//! which the tests in `tests/` run with the same [`ReplayOptions`]).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use budgetgate::replay::{replay_to, Outcome, ReplayOptions};

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

impl ReplayArgs {
    /// What the library's replay is asked.
    fn options(&self) -> ReplayOptions {
        ReplayOptions {
            file: self.file.clone(),
            more: self.more.clone(),
            budget: self.budget.clone(),
            approve: self.approve.clone(),
            json: self.json,
            progress: std::io::stderr().is_terminal(),
        }
    }
}

/// The exit status of a replay that ended so: 0 the gate would not have
/// stopped the session and its budget held, 1 it would have (budget
/// exhausted, or a stop reason that ends the run) or the budget was
/// overshot, 2 the recording or the budget file cannot be read, or the
/// report cannot be written.
fn exit_status(outcome: Outcome) -> ExitCode {
    ExitCode::from(match outcome {
        Outcome::Held => 0,
        Outcome::Exceeded => 1,
        Outcome::Unreadable => 2,
    })
}

/// Runs `budgetgate replay`: the report on standard output, an error's one
/// line on standard error ([`exit_status`]).
pub fn command(args: &ReplayArgs) -> ExitCode {
    exit_status(replay_to(
        &args.options(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use budgetgate::replay::{read_session, replay, ReplayBudget, REPORT_SCHEMA_VERSION};
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

    /// The command's status, with the report and errors kept out of the
    /// test's output.
    fn run(args: &ReplayArgs) -> ExitCode {
        exit_status(replay_to(&args.options(), &mut Vec::new(), &mut Vec::new()))
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
}
