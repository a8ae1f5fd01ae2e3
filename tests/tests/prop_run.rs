//! Property: the bounded run (`SPEC A2`) and its trace work (`SPEC A3`)
//! agree with an independent model of the seed's `run_bounded_agent`, both
//! for the core's sans-IO `Run` and for the host's closure driver, over random
//! scripts of proposals, random tool sets and random budgets.
//!
//! Invariants checked on every case: trace rows <= max_decisions; tool
//! attempts <= max_tool_calls; steps consecutive from 0; every tool attempt
//! has exactly one observation; a stopped run refuses further rounds; the
//! work units equal `D·c + Σ t_i`.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

// Shared with the core's own property tests (core/tests/), which
// cargo-mutants runs against every core mutant.
#[path = "../../core/tests/prop_common/mod.rs"]
mod prop_common;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use budgetgate::driver::{run_bounded_agent, Args, Observation, Proposal, Tool};
use budgetgate_core::{
    run_trace_work, Action, ObservationData, Progress, Run, RunError, RunLimits, ScalarRef, Status,
    ToolSet, Verdict,
};
use prop_common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Tool names the scripts use; a run registers a subset of them.
const NAMES: [&str; 10] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"];

/// What a registered tool hands back.
#[derive(Debug, Clone)]
enum Outcome {
    /// The tool fails.
    Fail,
    /// `unit` repeated `n` times, as a JSON string (sizes around 4096 bytes).
    Text(&'static str, usize),
    /// A small nested value.
    Nested,
    Int(i64),
    Float(f64),
    /// NaN (core level only: a JSON value cannot hold it).
    Nan,
}

impl Outcome {
    fn value(&self) -> Option<Value> {
        match self {
            Outcome::Fail | Outcome::Nan => None,
            Outcome::Text(unit, n) => Some(Value::from(unit.repeat(*n))),
            Outcome::Nested => Some(json!({"count": 15, "items": [1, 2.5, "é", null, true]})),
            Outcome::Int(i) => Some(Value::from(*i)),
            Outcome::Float(f) => Some(Value::from(*f)),
        }
    }
}

/// One scripted proposal.
#[derive(Debug, Clone)]
enum Step {
    /// The policy fails or proposes something that does not validate; the
    /// text is what the host policy returns (`None`: the policy errors).
    Invalid(Option<&'static str>),
    Final(String),
    /// A tool action with call id `c{call}` naming `NAMES[name]`.
    Tool {
        call: usize,
        name: usize,
        outcome: Outcome,
    },
}

#[derive(Debug, Clone)]
struct Case {
    tools: Vec<usize>,
    max_decisions: u32,
    max_tool_calls: u32,
    script: Vec<Step>,
    decision_units: u32,
    costs: Vec<u32>,
}

// ---------------------------------------------------------------------------
// The model: the seed's run_bounded_agent, line by line.

#[derive(Debug, Clone, PartialEq)]
struct ModelRun {
    status: &'static str,
    answer: Option<String>,
    /// `(call_id, name, ok, data)`; data is `None` for a tool result.
    observations: Vec<Value>,
    trace: Vec<Value>,
    tool_attempts: usize,
    /// Observations the policy had seen before each of its calls.
    seen_by_policy: Vec<usize>,
    /// Bytes of each accepted result, in order (for the core's verdicts).
    result_bytes: Vec<Option<usize>>,
}

fn result_json(outcome: &Outcome) -> Option<String> {
    outcome.value().map(|v| py_dumps(&v))
}

fn model_run(case: &Case) -> ModelRun {
    let mut m = ModelRun {
        status: "decision-budget",
        answer: None,
        observations: Vec::new(),
        trace: Vec::new(),
        tool_attempts: 0,
        seen_by_policy: Vec::new(),
        result_bytes: Vec::new(),
    };
    let mut seen: HashSet<usize> = HashSet::new();
    for step in 0..case.max_decisions as usize {
        m.seen_by_policy.push(m.observations.len());
        match case.script.get(step) {
            None | Some(Step::Invalid(_)) => {
                m.trace.push(
                    json!({"step": step, "kind": "rejected", "reason": "invalid-policy-action"}),
                );
                m.status = "policy-error";
                return m;
            }
            Some(Step::Final(text)) => {
                m.trace.push(json!({"step": step, "kind": "final"}));
                m.status = "final";
                m.answer = Some(text.clone());
                return m;
            }
            Some(Step::Tool {
                call,
                name,
                outcome,
            }) => {
                if seen.contains(call) {
                    m.trace.push(
                        json!({"step": step, "kind": "rejected", "reason": "duplicate-call-id"}),
                    );
                    m.status = "duplicate-call";
                    return m;
                }
                if m.tool_attempts >= case.max_tool_calls as usize {
                    m.trace
                        .push(json!({"step": step, "kind": "rejected", "reason": "tool-budget"}));
                    m.status = "tool-budget";
                    return m;
                }
                seen.insert(*call);
                m.tool_attempts += 1;
                let (call_id, tool) = (format!("c{call}"), NAMES[*name]);
                let executed = case.tools.contains(name);
                let (ok, data) = if !executed {
                    (false, Value::from("unknown-tool"))
                } else {
                    match result_json(outcome) {
                        Some(encoded) if encoded.len() <= 4096 => {
                            m.result_bytes.push(Some(encoded.len()));
                            (true, outcome.value().unwrap_or(Value::Null))
                        }
                        _ => {
                            m.result_bytes.push(None);
                            (false, Value::from("tool-error"))
                        }
                    }
                };
                m.observations
                    .push(json!({"call_id": call_id, "name": tool, "ok": ok, "data": data}));
                m.trace.push(
                    json!({"step": step, "kind": "tool", "call_id": call_id, "name": tool,
                    "executed": executed, "ok": ok}),
                );
            }
        }
    }
    m
}

/// `W = D·c + Σ t_i` over the model's trace.
fn model_work(case: &Case, trace: &[Value]) -> (u32, u32, u32) {
    let mut executed = 0;
    let mut units = 0;
    for row in trace {
        units += case.decision_units;
        if row["kind"] == "tool" && row["executed"] == true {
            let name = row["name"].as_str().unwrap_or_default();
            let index = case
                .tools
                .iter()
                .position(|t| NAMES[*t] == name)
                .expect("registered");
            executed += 1;
            units += case.costs[index];
        }
    }
    (trace.len() as u32, executed, units)
}

// ---------------------------------------------------------------------------
// Generators

fn outcome(with_nan: bool) -> impl Strategy<Value = Outcome> {
    let text = prop::sample::select(vec!["x", "é", "€", "😀", "\n", "\u{1}", "\""])
        .prop_flat_map(|unit| {
            let width = py_str(unit).len() - 2;
            let centre = 4094 / width;
            (
                Just(unit),
                prop_oneof![0usize..8, centre.saturating_sub(2)..=centre + 2],
            )
        })
        .prop_map(|(u, n)| Outcome::Text(u, n));
    prop_oneof![
        2 => Just(Outcome::Fail),
        4 => text,
        1 => Just(Outcome::Nested),
        1 => any::<i64>().prop_map(Outcome::Int),
        1 => (-1e300f64..1e300).prop_map(Outcome::Float),
        if with_nan { 1 } else { 0 } => Just(Outcome::Nan),
    ]
}

fn step(with_nan: bool) -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => prop::sample::select(vec![
            None,
            Some("not json"),
            Some(r#"{"kind":"final","text":"  "}"#),
            Some(r#"{"kind":"tool","call_id":"1x","name":"t0","arguments":{}}"#),
            Some(r#"{"kind":"final","text":"a","extra":1}"#),
        ]).prop_map(Step::Invalid),
        2 => "\\PC{1,12}".prop_filter("not blank", |t| !py_blank(t)).prop_map(Step::Final),
        // Few distinct call ids, so duplicates happen.
        16 => (0usize..12, 0usize..NAMES.len(), outcome(with_nan))
            .prop_map(|(call, name, outcome)| Step::Tool { call, name, outcome }),
    ]
}

fn case(with_nan: bool) -> impl Strategy<Value = Case> {
    (
        prop::sample::subsequence((0..NAMES.len()).collect::<Vec<_>>(), 0..=8).prop_shuffle(),
        prop_oneof![1u32..=8, 1u32..=32, Just(32u32)],
        prop_oneof![0u32..=4, 0u32..=16, Just(16u32)],
        prop::collection::vec(step(with_nan), 0..34),
        0u32..=1000,
        prop::collection::vec(0u32..=1000, 8),
    )
        .prop_map(
            |(tools, max_decisions, max_tool_calls, script, decision_units, costs)| Case {
                tools,
                max_decisions,
                max_tool_calls,
                script,
                decision_units,
                costs,
            },
        )
}

fn proposal_text(step: &Step, index: usize) -> Proposal {
    match step {
        Step::Invalid(None) => Err("the policy failed".into()),
        Step::Invalid(Some(text)) => Ok((*text).to_string()),
        Step::Final(text) => Ok(json!({"kind": "final", "text": text}).to_string()),
        Step::Tool { call, name, .. } => Ok(json!({"kind": "tool", "call_id": format!("c{call}"),
            "name": NAMES[*name], "arguments": {"i": index}})
        .to_string()),
    }
}

// ---------------------------------------------------------------------------
// Drivers

/// Drives the core's `Run` directly and checks each verdict as it comes.
fn check_core(case: &Case) -> Result<(), TestCaseError> {
    let model = model_run(case);
    let mut set = ToolSet::new();
    for t in &case.tools {
        set.try_add(NAMES[*t]).expect("valid, distinct, at most 8");
    }
    let limits = RunLimits::new(case.max_decisions, case.max_tool_calls).expect("in range");
    let mut run: Run = Run::new(limits, set);
    let mut results = Vec::new();
    let mut index = 0;
    while run.status().is_none() {
        let step = case.script.get(index);
        let action = match step {
            None | Some(Step::Invalid(_)) => None,
            Some(s) => Some(
                Action::<64>::parse(proposal_text(s, index).expect("text").as_bytes())
                    .expect("scripted actions are valid"),
            ),
        };
        let verdict = run.decide(action.as_ref()).expect("awaiting a proposal");
        match (verdict, step) {
            (
                Verdict::Execute {
                    tool,
                    call,
                    pending,
                },
                Some(Step::Tool { name, outcome, .. }),
            ) => {
                prop_assert_eq!(case.tools[tool], *name, "the named tool is executed");
                prop_assert_eq!(call.name.as_str(), NAMES[*name], "the proposal's own call");
                prop_assert_eq!(pending.step(), index as u8);
                prop_assert_eq!(run.decide(action.as_ref()), Err(RunError::AwaitingOutcome));
                let done = match (outcome, outcome.value()) {
                    (Outcome::Nan, _) => run.complete(pending, Some(&f64::NAN)),
                    (_, Some(v)) => run.complete(pending, Some(&v)),
                    (_, None) => run.complete(pending, None::<&Value>),
                }
                .expect("awaiting an outcome");
                results.push(match done.data {
                    ObservationData::Result { bytes } => Some(bytes),
                    ObservationData::ToolError => None,
                });
                if done.progress != Progress::Continue {
                    prop_assert_eq!(done.progress, Progress::Stopped(Status::DecisionBudget));
                }
            }
            (Verdict::UnknownTool { call, .. }, Some(Step::Tool { name, .. })) => {
                prop_assert!(!case.tools.contains(name));
                prop_assert_eq!(call.name.as_str(), NAMES[*name], "the proposal's own call");
                // No token: completing the call is impossible by type.
                prop_assert!(!run.awaiting_outcome());
            }
            (Verdict::Final { .. } | Verdict::Stop { .. }, _) => {}
            (v, s) => prop_assert!(false, "verdict {:?} for step {:?}", v, s),
        }
        // Invariants after every round.
        prop_assert!(run.trace().len() <= case.max_decisions as usize);
        prop_assert!(usize::from(run.tool_attempts()) <= case.max_tool_calls as usize);
        for (i, row) in run.trace().iter().enumerate() {
            prop_assert_eq!(usize::from(row.step()), i);
        }
        index += 1;
    }
    let status = run.status().expect("stopped");
    prop_assert_eq!(status.as_str(), model.status);
    prop_assert_eq!(
        serde_json::to_value(run.trace()).expect("trace"),
        Value::from(model.trace.clone())
    );
    prop_assert_eq!(usize::from(run.tool_attempts()), model.tool_attempts);
    prop_assert_eq!(&results, &model.result_bytes);
    // One observation per attempt: every attempt left exactly one tool row.
    let tool_rows = model.trace.iter().filter(|r| r["kind"] == "tool").count();
    prop_assert_eq!(tool_rows, usize::from(run.tool_attempts()));
    // A stopped run refuses further rounds.
    prop_assert_eq!(
        run.decide(None::<&Action<8>>),
        Err(RunError::Stopped(status))
    );
    // Trace work of the run's own trace is the formula.
    let names: Vec<&str> = case.tools.iter().map(|t| NAMES[*t]).collect();
    let costs: Vec<(&str, u32)> = names
        .iter()
        .copied()
        .zip(case.costs.iter().copied())
        .collect();
    let work = run_trace_work(run.trace(), case.decision_units, &costs).expect("valid trace");
    prop_assert_eq!(
        (work.decisions, work.executed_tools, work.work_units),
        model_work(case, &model.trace)
    );
    Ok(())
}

/// Runs the host driver with closures and compares the whole result.
fn check_host(case: &Case) -> Result<(), TestCaseError> {
    let model = model_run(case);
    let outcomes: Rc<Vec<Step>> = Rc::new(case.script.clone());
    let tools: Vec<(String, Tool)> = case
        .tools
        .iter()
        .map(|t| {
            let outcomes = Rc::clone(&outcomes);
            let tool: Tool = Box::new(move |args: &Args| {
                let Some(ScalarRef::Int(i)) = args.get("i") else {
                    return Err("no index".into());
                };
                match outcomes.get(i as usize) {
                    Some(Step::Tool { outcome, .. }) => {
                        outcome.value().ok_or_else(|| "failed".into())
                    }
                    _ => Err("no outcome".into()),
                }
            });
            (NAMES[*t].to_string(), tool)
        })
        .collect();
    let seen = RefCell::new(Vec::new());
    let mut next = 0;
    let policy = |observations: &[Observation]| {
        seen.borrow_mut().push(observations.len());
        let proposal = match case.script.get(next) {
            Some(step) => proposal_text(step, next),
            None => Err("script used up".into()),
        };
        next += 1;
        proposal
    };
    let limits = RunLimits::new(case.max_decisions, case.max_tool_calls).expect("in range");
    let result = run_bounded_agent(policy, tools, limits).expect("valid tools");
    let got = serde_json::to_value(&result).expect("result");
    let want = json!({
        "status": model.status,
        "answer": model.answer,
        "observations": model.observations,
        "trace": model.trace,
        "tool_attempts": model.tool_attempts,
    });
    prop_assert_eq!(got, want);
    prop_assert_eq!(seen.into_inner(), model.seen_by_policy);
    prop_assert_eq!(result.observations.len(), usize::from(result.tool_attempts));
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn core_run_matches_the_model(c in case(true)) {
        check_core(&c)?;
    }

    #[test]
    fn host_driver_matches_the_model(c in case(false)) {
        check_host(&c)?;
    }
}

/// The generator reaches every status, and results on both sides of 4096.
#[test]
fn generator_reaches_every_status() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = case(true);
    let mut statuses = HashSet::new();
    let (mut fits, mut over) = (0, 0);
    for _ in 0..600 {
        let m = model_run(&strategy.new_tree(&mut runner).expect("tree").current());
        statuses.insert(m.status);
        for b in m.result_bytes {
            match b {
                Some(n) if n > 4000 => fits += 1,
                None => over += 1,
                _ => {}
            }
        }
    }
    assert_eq!(statuses.len(), 5, "{statuses:?}");
    assert!(
        fits > 10 && over > 10,
        "{fits} near-edge results fit, {over} refused"
    );
}

/// The seed's worked examples, through the model and the core alike.
#[test]
fn seed_examples() {
    let add = |call| Step::Tool {
        call,
        name: 0,
        outcome: Outcome::Int(15),
    };
    let base = Case {
        tools: vec![0],
        max_decisions: 8,
        max_tool_calls: 4,
        script: vec![add(1), Step::Final("15".into())],
        decision_units: 2,
        costs: vec![3; 8],
    };
    let m = model_run(&base);
    assert_eq!(
        (
            m.status,
            m.answer.as_deref(),
            m.trace.len(),
            m.tool_attempts
        ),
        ("final", Some("15"), 2, 1)
    );
    assert_eq!(model_work(&base, &m.trace), (2, 1, 7));
    let fresh = Case {
        max_decisions: 3,
        max_tool_calls: 1,
        script: vec![add(0), add(1), add(2)],
        ..base.clone()
    };
    let m = model_run(&fresh);
    assert_eq!(
        (m.status, m.trace.len(), m.tool_attempts),
        ("tool-budget", 2, 1)
    );
    let one = Case {
        max_decisions: 1,
        ..base.clone()
    };
    assert_eq!(model_run(&one).status, "decision-budget");
    for c in [base, fresh, one] {
        check_core(&c).expect("core");
        check_host(&c).expect("host");
    }
}
