//! `budgetgate plan`: a plan's usage and its bounded workflow (`SPEC B1`,
//! `SPEC B2`), shown the way a person checks a plan.

use std::fmt::Write as _;

use budgetgate_core::limits::{MAX_COST_LIMIT, MAX_SHAPE_LIMIT};
use budgetgate_core::{
    LimitKey, Limits, LimitsError, Plan, PlanError, RowRule, StopReason, Usage, Workflow,
};
use clap::value_parser;
use serde_json::json;
use serde_json::value::RawValue;

use super::{
    display_name, entry, object_entries, printable, read_input, shorten, syntax_position, table,
    write_stdout, Align,
};
use super::{InputError, Outcome};

/// Arguments of `budgetgate plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The plan: a JSON array of rows {"id", "parent", "tokens", "output"}
    /// ("-" reads standard input).
    #[arg(value_name = "PLAN")]
    file: String,

    /// Read the five limits from a JSON object with exactly the keys steps,
    /// tokens, output, depth, fanout. Cannot be combined with the single
    /// limit options.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["steps", "tokens", "output", "depth", "fanout"])]
    limits: Option<String>,

    /// Most steps accepted (0..=32; default 32).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_SHAPE_LIMIT)))]
    steps: Option<u32>,

    /// Most tokens summed over accepted steps (0..=320000; default 320000).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_COST_LIMIT)))]
    tokens: Option<u32>,

    /// Most output summed over accepted steps (0..=320000; default 320000).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_COST_LIMIT)))]
    output: Option<u32>,

    /// Deepest step accepted, a root being depth 1 (0..=32; default 32).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_SHAPE_LIMIT)))]
    depth: Option<u32>,

    /// Most accepted children of one parent; all roots share one parent
    /// (0..=32; default 32).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(0..=i64::from(MAX_SHAPE_LIMIT)))]
    fanout: Option<u32>,

    /// Print {"usage": ..., "workflow": ...} on one line instead of the report.
    #[arg(long)]
    json: bool,
}

/// Where the limits came from, for the report's headline.
enum LimitsSource {
    File(String),
    Options,
    Defaults,
}

/// Runs `budgetgate plan`.
pub fn main(args: &PlanArgs) -> Outcome {
    match plan(args) {
        Ok(outcome) => outcome,
        Err(e) => e.report("plan"),
    }
}

fn plan(args: &PlanArgs) -> Result<Outcome, InputError> {
    let name = &display_name(&args.file);
    if args.file == "-" && args.limits.as_deref() == Some("-") {
        return Err(InputError::new(
            name,
            "the plan and the limits cannot both be read from standard input",
        ));
    }
    let bytes = read_input(&args.file)?;
    let plan: Plan = Plan::parse(&bytes).map_err(|e| plan_error(name, &bytes, e))?;
    let (limits, source) = limits(args)?;
    let usage = plan.usage();
    let workflow = plan.bounded_workflow(&limits);
    let outcome = match workflow.reason {
        StopReason::Complete => Outcome::Complete,
        StopReason::Limit(_) => Outcome::Stopped,
    };
    let text = if args.json {
        format!(
            "{}\n",
            json!({"usage": usage, "workflow": plan.report(&workflow)})
        )
    } else {
        report(name, &plan, &limits, &source, &usage, &workflow)
    };
    Ok(write_stdout("plan", &text, outcome))
}

/// The core's error, with where a syntax error is and which row (by id) breaks
/// a rule, so a person can find it in the file.
fn plan_error(name: &str, bytes: &[u8], error: PlanError) -> InputError {
    let detail = error.to_string();
    match error {
        PlanError::Json(_) => InputError::new(name, format!("{detail}{}", syntax_position(bytes))),
        PlanError::Row { row, rule } => {
            // Read again without converting numbers, so that a row refused
            // for `1e400` is still named by its id.
            let entries = std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| serde_json::from_str::<Vec<&RawValue>>(text).ok())
                .and_then(|rows| rows.get(usize::from(row)).copied())
                .and_then(|row| object_entries(row.get()));
            let id = entries
                .as_deref()
                .and_then(|e| entry(e, "id"))
                .and_then(|id| serde_json::from_str::<String>(id).ok());
            let prefix = format!("row {row}: ");
            let mut rule_text = detail.strip_prefix(&prefix).unwrap_or(&detail).to_owned();
            if rule == RowRule::UnexpectedKey {
                let allowed = ["id", "parent", "tokens", "output"];
                if let Some(key) = entries
                    .iter()
                    .flatten()
                    .map(|(key, _)| key)
                    .find(|key| !allowed.contains(&key.as_str()))
                {
                    rule_text = format!(
                        "unexpected key `{}`; a row has exactly id, parent, tokens, output",
                        shorten(&printable(key), 40)
                    );
                }
            }
            match id {
                Some(id) => InputError::new(
                    name,
                    format!(
                        "row {row} (id {}): {rule_text}",
                        shorten(&printable(&serde_json::Value::from(id).to_string()), 40)
                    ),
                ),
                None => InputError::new(name, format!("row {row}: {rule_text}")),
            }
        }
        _ => InputError::new(name, detail),
    }
}

fn limits(args: &PlanArgs) -> Result<(Limits, LimitsSource), InputError> {
    if let Some(path) = &args.limits {
        let name = &display_name(path);
        let bytes = read_input(path)?;
        let limits = Limits::parse(&bytes).map_err(|e| {
            let position = match e {
                LimitsError::Json(_) => syntax_position(&bytes),
                _ => String::new(),
            };
            InputError::new(name, format!("{e}{position}"))
        })?;
        return Ok((limits, LimitsSource::File(name.to_owned())));
    }
    let given = [
        args.steps,
        args.tokens,
        args.output,
        args.depth,
        args.fanout,
    ];
    let source = if given.iter().any(Option::is_some) {
        LimitsSource::Options
    } else {
        LimitsSource::Defaults
    };
    let [steps, tokens, output, depth, fanout] = {
        let mut values = [0; 5];
        for ((value, given), key) in values.iter_mut().zip(given).zip(LimitKey::ALL) {
            *value = given.unwrap_or(key.max());
        }
        values
    };
    // The options' ranges are checked by clap already.
    let limits = Limits::new(steps, tokens, output, depth, fanout)
        .map_err(|e| InputError::new("options", e))?;
    Ok((limits, source))
}

fn usage_value(usage: &Usage, key: LimitKey) -> u32 {
    match key {
        LimitKey::Steps => usage.steps,
        LimitKey::Tokens => usage.tokens,
        LimitKey::Output => usage.output,
        LimitKey::Depth => usage.max_depth,
        LimitKey::Fanout => usage.max_fanout,
    }
}

/// The would-be value that stopped the workflow: `(limit, value, bound)`.
fn stop_detail(plan: &Plan, limits: &Limits, workflow: &Workflow) -> Option<(LimitKey, u32, u32)> {
    let StopReason::Limit(key) = workflow.reason else {
        return None;
    };
    let index = workflow.stopped?;
    let row = plan.rows().get(index)?;
    let before = plan.rows().get(..index)?;
    let used = &workflow.usage;
    let value = match key {
        LimitKey::Steps => used.steps + 1,
        LimitKey::Tokens => used.tokens + row.tokens(),
        LimitKey::Output => used.output + row.output(),
        LimitKey::Depth => row.depth(),
        // The accepted steps are exactly the rows before this one.
        LimitKey::Fanout => before.iter().filter(|r| r.parent() == row.parent()).count() as u32 + 1,
    };
    Some((key, value, limits.get(key)))
}

/// The steps in tree order, each with its label drawn with box characters.
fn tree(plan: &Plan) -> Vec<(usize, String)> {
    let rows = plan.rows();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    let mut roots = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        match row.parent().and_then(|p| children.get_mut(p)) {
            Some(siblings) => siblings.push(index),
            None => roots.push(index),
        }
    }
    fn walk(
        rows: &[budgetgate_core::PlanRow],
        children: &[Vec<usize>],
        index: usize,
        lead: Option<(&str, bool)>,
        out: &mut Vec<(usize, String)>,
    ) {
        let id = rows.get(index).map_or("", |r| r.id().as_str());
        let (label, next) = match lead {
            None => (id.to_owned(), String::new()),
            Some((lead, last)) => (
                format!("{lead}{}{id}", if last { "└─ " } else { "├─ " }),
                format!("{lead}{}", if last { "   " } else { "│  " }),
            ),
        };
        out.push((index, label));
        let mine = children.get(index).map_or(&[][..], Vec::as_slice);
        for (k, child) in mine.iter().enumerate() {
            walk(
                rows,
                children,
                *child,
                Some((&next, k + 1 == mine.len())),
                out,
            );
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for root in roots {
        walk(rows, &children, root, None, &mut out);
    }
    out
}

fn report(
    name: &str,
    plan: &Plan,
    limits: &Limits,
    source: &LimitsSource,
    usage: &Usage,
    workflow: &Workflow,
) -> String {
    let rows = plan.rows();
    let mut out = String::new();
    let steps = match rows.len() {
        1 => "1 step".to_owned(),
        n => format!("{n} steps"),
    };
    let from = match source {
        LimitsSource::File(file) => format!("limits from {file}"),
        LimitsSource::Options => "limits from the options (the others at their maximum)".to_owned(),
        LimitsSource::Defaults => {
            "no limits given: the contract maximums, which no valid plan exceeds".to_owned()
        }
    };
    let _ = writeln!(out, "Plan {name}: {steps}; {from}\n");

    let mut header = vec![("", Align::Left)];
    header.extend(LimitKey::ALL.iter().map(|k| (k.key(), Align::Right)));
    let line = |label: &str, value: &dyn Fn(LimitKey) -> u32| {
        let mut cells = vec![label.to_owned()];
        cells.extend(LimitKey::ALL.iter().map(|k| value(*k).to_string()));
        cells
    };
    out.push_str(&table(
        &header,
        &[
            line("limits", &|k| limits.get(k)),
            line("whole plan", &|k| usage_value(usage, k)),
            line("accepted", &|k| usage_value(&workflow.usage, k)),
        ],
    ));
    out.push('\n');

    let stop = stop_detail(plan, limits, workflow);
    if rows.is_empty() {
        out.push_str("  (the plan has no steps)\n\n");
    } else {
        let body: Vec<Vec<String>> = tree(plan)
            .into_iter()
            .filter_map(|(index, label)| {
                let row = rows.get(index)?;
                let parent = row
                    .parent()
                    .and_then(|p| rows.get(p))
                    .map_or("-".to_owned(), |p| p.id().to_string());
                let status = if index < workflow.accepted {
                    "accepted".to_owned()
                } else if Some(index) == workflow.stopped {
                    match stop {
                        Some((key, value, bound)) => {
                            format!("stopped here (limit: {} {value} > {bound})", key.key())
                        }
                        None => "stopped here".to_owned(),
                    }
                } else {
                    "not reached".to_owned()
                };
                Some(vec![
                    index.to_string(),
                    label,
                    parent,
                    row.tokens().to_string(),
                    row.output().to_string(),
                    status,
                ])
            })
            .collect();
        out.push_str(&table(
            &[
                ("row", Align::Right),
                ("step", Align::Left),
                ("parent", Align::Left),
                ("tokens", Align::Right),
                ("output", Align::Right),
                ("status", Align::Left),
            ],
            &body,
        ));
        out.push('\n');
    }

    let accepted = format!("{} of {steps} accepted", workflow.accepted);
    match (workflow.stopped.and_then(|i| Some((i, rows.get(i)?))), stop) {
        (Some((index, row)), Some((key, value, bound))) => {
            let _ = writeln!(
                out,
                "Stopped by the {} limit before step {} (row {}): {value} > {bound}; {accepted}.",
                key.key(),
                row.id(),
                index,
            );
            let over: Vec<String> = LimitKey::ALL
                .iter()
                .filter(|k| usage_value(usage, **k) > limits.get(**k))
                .map(|k| {
                    format!(
                        "{} {} (limit {})",
                        k.key(),
                        usage_value(usage, *k),
                        limits.get(*k)
                    )
                })
                .collect();
            if !over.is_empty() {
                let _ = writeln!(out, "The whole plan would need {}.", over.join(", "));
            }
        }
        _ => {
            let _ = writeln!(out, "Complete: {accepted}.");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_draws_nesting_in_depth_first_order() {
        let plan: Plan = Plan::parse(
            br#"[{"id":"a","parent":null,"tokens":0,"output":0},
                 {"id":"b","parent":"a","tokens":0,"output":0},
                 {"id":"c","parent":null,"tokens":0,"output":0},
                 {"id":"d","parent":"b","tokens":0,"output":0},
                 {"id":"e","parent":"a","tokens":0,"output":0}]"#,
        )
        .unwrap();
        let labels: Vec<(usize, String)> = tree(&plan);
        assert_eq!(
            labels,
            vec![
                (0, "a".to_owned()),
                (1, "├─ b".to_owned()),
                (3, "│  └─ d".to_owned()),
                (4, "└─ e".to_owned()),
                (2, "c".to_owned()),
            ]
        );
    }

    #[test]
    fn stop_detail_gives_the_would_be_value_of_each_limit() {
        let plan: Plan = Plan::parse(
            br#"[{"id":"a","parent":null,"tokens":2,"output":1},
                 {"id":"b","parent":"a","tokens":3,"output":2},
                 {"id":"c","parent":"a","tokens":0,"output":0}]"#,
        )
        .unwrap();
        let check = |limits: Limits, want: (LimitKey, u32, u32)| {
            let workflow = plan.bounded_workflow(&limits);
            assert_eq!(stop_detail(&plan, &limits, &workflow), Some(want));
        };
        check(
            Limits::new(4, 4, 10, 4, 4).unwrap(),
            (LimitKey::Tokens, 5, 4),
        );
        check(Limits::new(1, 9, 9, 9, 9).unwrap(), (LimitKey::Steps, 2, 1));
        check(
            Limits::new(9, 9, 2, 9, 9).unwrap(),
            (LimitKey::Output, 3, 2),
        );
        check(Limits::new(9, 9, 9, 1, 9).unwrap(), (LimitKey::Depth, 2, 1));
        check(
            Limits::new(9, 9, 9, 9, 1).unwrap(),
            (LimitKey::Fanout, 2, 1),
        );
        let complete = Limits::new(9, 9, 9, 9, 9).unwrap();
        let workflow = plan.bounded_workflow(&complete);
        assert_eq!(stop_detail(&plan, &complete, &workflow), None);
    }
}
