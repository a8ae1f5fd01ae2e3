//! The `budgetgate` command.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Gate what an AI agent may do: validate its proposals and enforce the
/// budgets of its run, exactly as the budgetgate core decides them.
#[derive(Parser)]
#[command(name = "budgetgate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer JSON Lines requests on stdin, one JSON line per request on stdout.
    ///
    /// A request is {"fn": NAME, "args": {...}}; the answer is {"ok": RESULT},
    /// {"error": "invalid-input", "detail": TEXT} or
    /// {"error": "bad-request", "detail": TEXT}. A bad line never stops the stream.
    ///
    /// Functions: validate_agent_action {value}, run_bounded_agent {script, tools,
    /// max_decisions?, max_tool_calls?}, trace_work {trace, decision_units,
    /// tool_units}, aggregate_usage {plan}, bounded_workflow {plan, limits}.
    ///
    /// Example:
    ///   echo '{"fn":"aggregate_usage","args":{"plan":[]}}' | budgetgate eval
    ///   {"ok":{"steps":0,"tokens":0,"output":0,"max_depth":0,"max_fanout":0}}
    Eval,
}

fn eval() -> ExitCode {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) => {
                eprintln!("budgetgate eval: reading stdin: {e}");
                return ExitCode::from(2);
            }
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let answer = budgetgate::eval::answer_line(body);
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::from(2);
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Eval => eval(),
    }
}
