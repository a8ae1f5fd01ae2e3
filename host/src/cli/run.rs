//! `budgetgate run`: a scripted agent run against the demo tools (`SPEC A2`),
//! with its trace work (`SPEC A3`).

use std::fmt::Write as _;

use budgetgate::driver::{Rejection, RunResult};
use budgetgate::eval::{EvalError, RunArgs as ScriptArgs};
use budgetgate::strict::StrictObject;
use budgetgate::tools::DemoKind;
use budgetgate_core::limits::{MAX_DECISIONS, MAX_TOOL_CALLS, MAX_WORK_UNITS};
use budgetgate_core::{
    run_trace_work, ActionError, InvalidAction, RejectReason, RunLimits, Status, TraceRow, Work,
};
use clap::value_parser;
use serde::Deserialize;

use super::{display_name, printable, read_input, shorten, table, write_stdout, Align};
use super::{InputError, Outcome};

/// Observations longer than this many characters are cut in the table.
const OBSERVATION_WIDTH: usize = 40;

/// The keys of a script file.
const SCRIPT_KEYS: [&str; 4] = ["script", "tools", "max_decisions", "max_tool_calls"];

/// Arguments of `budgetgate run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The script: {"script": [proposal, ...], "tools": {"name": "kind", ...},
    /// "max_decisions"?: N, "max_tool_calls"?: N} ("-" reads standard input).
    #[arg(value_name = "SCRIPT.json")]
    script: String,

    /// Most decision rounds, 1..=32 (overrides the file's max_decisions;
    /// default 8).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(1..=i64::from(MAX_DECISIONS)))]
    max_decisions: Option<u32>,

    /// Most tool attempts, 0..=16 (overrides the file's max_tool_calls;
    /// default 4).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_TOOL_CALLS)))]
    max_tool_calls: Option<u32>,

    /// Work units every decision costs, 0..=1000.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = value_parser!(u32).range(0..=i64::from(MAX_WORK_UNITS)))]
    decision_units: u32,

    /// Work units one execution of tool NAME costs, 0..=1000; repeat the
    /// option or separate with commas. A registered tool not named costs 1.
    #[arg(long, value_name = "NAME=COST", value_delimiter = ',', value_parser = tool_unit)]
    tool_units: Vec<(String, u32)>,

    /// Print the run_bounded_agent result object on one line (exactly what
    /// `budgetgate eval` answers as "ok") instead of the report.
    #[arg(long)]
    json: bool,
}

fn tool_unit(text: &str) -> Result<(String, u32), String> {
    let (name, cost) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=COST"))?;
    let cost = cost
        .parse::<u32>()
        .ok()
        .filter(|c| *c <= MAX_WORK_UNITS)
        .ok_or_else(|| format!("cost of `{name}` must be an integer 0..={MAX_WORK_UNITS}"))?;
    Ok((name.to_owned(), cost))
}

/// Runs `budgetgate run`.
pub fn main(args: &RunArgs) -> Outcome {
    match run(args) {
        Ok(outcome) => outcome,
        Err(e) => e.report("run"),
    }
}

fn detail(error: EvalError) -> String {
    match error {
        EvalError::InvalidInput(d) | EvalError::BadRequest(d) => d,
    }
}

fn run(args: &RunArgs) -> Result<Outcome, InputError> {
    let name = &display_name(&args.script);
    let bytes = read_input(&args.script)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| InputError::new(name, format!("not UTF-8: {e}")))?;
    let object: StrictObject = serde_json::from_str(text).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => {
                "a script file is a JSON object {\"script\": [...], \"tools\": {...}}"
            }
            _ => "not valid JSON",
        };
        InputError::new(name, format!("{what}: {e}"))
    })?;
    if let Some(key) = object.keys().find(|k| !SCRIPT_KEYS.contains(k)) {
        return Err(InputError::new(
            name,
            format!(
                "unexpected key `{}`; a script file has script, tools, and optionally max_decisions, max_tool_calls",
                printable(key)
            ),
        ));
    }
    if let Some(key) = ["script", "tools"]
        .into_iter()
        .find(|k| object.get(k).is_none())
    {
        return Err(InputError::new(name, format!("missing key `{key}`")));
    }
    let mut script =
        ScriptArgs::from_args(&object).map_err(|e| InputError::new(name, detail(e)))?;
    if args.max_decisions.is_some() || args.max_tool_calls.is_some() {
        let limits = RunLimits::new(
            args.max_decisions
                .unwrap_or(u32::from(script.limits.max_decisions())),
            args.max_tool_calls
                .unwrap_or(u32::from(script.limits.max_tool_calls())),
        );
        script.limits = limits.map_err(|e| InputError::new("options", e))?;
    }
    let mut costs: Vec<(&str, u32)> = script.tools.iter().map(|(n, _)| (n.as_str(), 1)).collect();
    for (index, (tool, cost)) in args.tool_units.iter().enumerate() {
        if args
            .tool_units
            .get(..index)
            .is_some_and(|before| before.iter().any(|(t, _)| t == tool))
        {
            return Err(InputError::new(
                "--tool-units",
                format!("`{}` is given twice", printable(tool)),
            ));
        }
        match costs.iter_mut().find(|(t, _)| t == tool) {
            Some(entry) => entry.1 = *cost,
            None => {
                return Err(InputError::new(
                    "--tool-units",
                    format!("`{}` is not a tool registered in {name}", printable(tool)),
                ))
            }
        }
    }
    let result = script.run().map_err(|e| InputError::new(name, detail(e)))?;
    let work = run_trace_work(&result.trace, args.decision_units, &costs)
        .map_err(|e| InputError::new(name, e))?;
    let outcome = match result.status {
        Status::Final => Outcome::Complete,
        _ => Outcome::Stopped,
    };
    let text = if args.json {
        let value = serde_json::to_value(&result).map_err(|e| InputError::new(name, e))?;
        format!("{value}\n")
    } else {
        report(name, &script, &result, &work, args.decision_units, &costs)
    };
    Ok(write_stdout("run", &text, outcome))
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

/// Why the run stopped, in a person's words, when it did not end with `final`:
/// from what the run kept of the rejected round ([`RunResult::rejection`]),
/// never by reading the proposal again.
fn why(script: &ScriptArgs, result: &RunResult) -> Option<String> {
    let limits = script.limits;
    match result.trace.last() {
        Some(TraceRow::Rejected { step, reason }) => {
            let raw = script.script.get(usize::from(*step));
            Some(match (reason, raw, &result.rejection) {
                (RejectReason::InvalidPolicyAction, None, _) => format!(
                    "step {step}: the script has no proposal left (it has {})",
                    script.script.len()
                ),
                (RejectReason::InvalidPolicyAction, Some(raw), Some(Rejection::Invalid(e))) => {
                    format!(
                        "step {step}: the proposal is not a valid action: {}{}",
                        e.error,
                        which_key(raw.get(), e)
                    )
                }
                (RejectReason::InvalidPolicyAction, Some(_), _) => {
                    format!("step {step}: the policy failed")
                }
                (RejectReason::DuplicateCallId, _, rejection) => format!(
                    "step {step}: call id {} was already used by an earlier tool attempt",
                    rejected_call(rejection).map_or("?".to_owned(), |(id, _)| format!("`{id}`"))
                ),
                _ => format!(
                    "step {step}: a tool call with no tool attempts left (max_tool_calls {})",
                    limits.max_tool_calls()
                ),
            })
        }
        _ if result.status == Status::DecisionBudget => Some(format!(
            "all {} decision rounds used without a final answer (max_decisions {})",
            result.trace.len(),
            limits.max_decisions()
        )),
        _ => None,
    }
}

/// The key an action error is about, as ` (key `k`)`, when the error names an
/// argument by its position or an unexpected key; empty otherwise. The key
/// is read where the error points ([`InvalidAction::offset`]: the opening
/// quote of the member at fault), not by reading the document again.
fn which_key(raw: &str, invalid: &InvalidAction) -> String {
    let about_a_key = matches!(
        invalid.error,
        ActionError::InvalidArgumentKey { .. }
            | ActionError::ArgumentNotScalar { .. }
            | ActionError::ArgumentTooLong { .. }
            | ActionError::ArgumentOutOfRange { .. }
            | ActionError::UnexpectedKey
    );
    let key = raw
        .get(invalid.offset..)
        .filter(|_| about_a_key)
        .and_then(|member| {
            String::deserialize(&mut serde_json::Deserializer::from_str(member)).ok()
        });
    key.map(|key| format!(" (key `{}`)", printable(&key)))
        .unwrap_or_default()
}

/// The call id and tool name of a tool call the run refused uncounted.
fn rejected_call(rejection: &Option<Rejection>) -> Option<(&str, &str)> {
    match rejection {
        Some(Rejection::Call { call_id, name }) => Some((call_id, name)),
        _ => None,
    }
}

fn report(
    name: &str,
    script: &ScriptArgs,
    result: &RunResult,
    work: &Work,
    decision_units: u32,
    costs: &[(&str, u32)],
) -> String {
    let mut out = String::new();
    let tools: Vec<String> = script
        .tools
        .iter()
        .map(|(tool, kind)| {
            let kind = DemoKind::NAMES
                .into_iter()
                .find(|n| DemoKind::parse(n) == Some(*kind))
                .unwrap_or("?");
            if tool == kind {
                tool.clone()
            } else {
                format!("{tool} ({kind})")
            }
        })
        .collect();
    let tools = if tools.is_empty() {
        "none".to_owned()
    } else {
        tools.join(", ")
    };
    let proposals = match script.script.len() {
        1 => "1 proposal".to_owned(),
        n => format!("{n} proposals"),
    };
    let _ = writeln!(out, "Run {name}: {proposals}; tools: {tools}\n");

    let mut observations = result.observations.iter();
    let dash = || "-".to_owned();
    let rows: Vec<Vec<String>> = result
        .trace
        .iter()
        .map(|row| match row {
            TraceRow::Tool {
                step,
                call_id,
                name,
                executed,
                ok,
            } => {
                // Every tool row has exactly one observation, in order.
                let observation = observations.next().map_or_else(dash, |o| {
                    shorten(&printable(&o.data.to_string()), OBSERVATION_WIDTH)
                });
                vec![
                    step.to_string(),
                    "tool".to_owned(),
                    call_id.to_string(),
                    name.to_string(),
                    yes_no(*executed),
                    yes_no(*ok),
                    observation,
                ]
            }
            TraceRow::Final { step } => {
                vec![
                    step.to_string(),
                    "final".to_owned(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ]
            }
            TraceRow::Rejected { step, reason } => {
                // A rejected round stops the run: it is the last row, and
                // the run kept what it refused.
                let (call, tool) = match rejected_call(&result.rejection) {
                    Some((call_id, name)) => (call_id.to_owned(), name.to_owned()),
                    None => (dash(), dash()),
                };
                vec![
                    step.to_string(),
                    format!("rejected: {}", reason.as_str()),
                    call,
                    tool,
                    dash(),
                    dash(),
                    dash(),
                ]
            }
        })
        .collect();
    out.push_str(&table(
        &[
            ("step", Align::Right),
            ("decision", Align::Left),
            ("call id", Align::Left),
            ("tool", Align::Left),
            ("executed", Align::Left),
            ("ok", Align::Left),
            ("observation", Align::Left),
        ],
        &rows,
    ));
    out.push('\n');

    let answer = result.answer.as_ref().map_or("none".to_owned(), |a| {
        printable(&serde_json::Value::from(a.as_str()).to_string())
    });
    let mut breakdown = vec![format!("{}×{decision_units} for decisions", work.decisions)];
    for (tool, cost) in costs {
        let runs = result
            .trace
            .iter()
            .filter(|r| matches!(r, TraceRow::Tool { name, executed: true, .. } if name.as_str() == *tool))
            .count();
        if runs > 0 {
            breakdown.push(format!("{runs}×{cost} for {tool}"));
        }
    }
    let mut facts = vec![
        ("status", result.status.as_str().to_owned()),
        ("answer", answer),
        (
            "decisions",
            format!(
                "{} of at most {}",
                work.decisions,
                script.limits.max_decisions()
            ),
        ),
        (
            "tool attempts",
            format!(
                "{} of at most {}",
                result.tool_attempts,
                script.limits.max_tool_calls()
            ),
        ),
        ("executions", work.executed_tools.to_string()),
        (
            "work units",
            format!("{} = {}", work.work_units, breakdown.join(" + ")),
        ),
    ];
    if let Some(why) = why(script, result) {
        facts.insert(1, ("why", why));
    }
    let width = facts.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in facts {
        let _ = writeln!(out, "  {key:<width$}  {value}");
    }
    out
}
