//! Property: trace work (`SPEC A3`) agrees with an independent model of the
//! seed's `trace_work`, at the core (`trace_work` over typed rows) and through
//! `budgetgate eval` (JSON rows with wrong types, gaps, missing costs, more than
//! 32 rows, out-of-range units).
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

// Shared with the core's own property tests (core/tests/), which
// cargo-mutants runs against every core mutant.
#[path = "../../core/tests/prop_common/mod.rs"]
mod prop_common;

use budgetgate::eval::{handle, EvalError};
use budgetgate_core::{trace_work, Work, WorkRow};
use prop_common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

const NAMES: [&str; 6] = ["add", "echo", "t-1", "x", "é", ""];

// ---------------------------------------------------------------------------
// Core level: typed rows.

#[derive(Debug, Clone)]
enum Row {
    Final,
    Rejected,
    Tool { name: usize, executed: bool },
}

/// The seed's loop, for rows that are already well-typed.
fn model_typed(
    rows: &[(i64, Row)],
    decision_units: u32,
    costs: &[(usize, u32)],
) -> Result<(u32, u32, u32), ()> {
    if rows.len() > 32
        || decision_units > 1000
        || costs.len() > 8
        || costs.iter().any(|(_, c)| *c > 1000)
    {
        return Err(());
    }
    let (mut decisions, mut calls, mut units) = (0, 0, 0);
    for (i, (step, row)) in rows.iter().enumerate() {
        if *step != i as i64 {
            return Err(());
        }
        decisions += 1;
        units += decision_units;
        if let Row::Tool {
            name,
            executed: true,
        } = row
        {
            let cost = costs.iter().find(|(n, _)| n == name).ok_or(())?.1;
            calls += 1;
            units += cost;
        }
    }
    Ok((decisions, calls, units))
}

/// Rows with their steps, `decision_units`, and `(name index, cost)` entries.
type TypedCase = (Vec<(i64, Row)>, u32, Vec<(usize, u32)>);

fn typed_case() -> impl Strategy<Value = TypedCase> {
    let row = prop_oneof![
        1 => Just(Row::Final),
        1 => Just(Row::Rejected),
        4 => (0usize..NAMES.len(), any::<bool>()).prop_map(|(name, executed)| Row::Tool { name, executed }),
    ];
    let rows = prop_oneof![
        8 => prop::collection::vec(row.clone(), 0..=32),
        1 => prop::collection::vec(row, 30..=34),
    ]
    .prop_flat_map(|rows| {
        let n = rows.len();
        // Mostly consecutive steps; sometimes one row is off by a little.
        (
            Just(rows),
            prop::option::weighted(0.1, (0..n.max(1), -2i64..=2)),
        )
    })
    .prop_map(|(rows, off)| {
        rows.into_iter()
            .enumerate()
            .map(|(i, r)| {
                let step = match off {
                    Some((at, d)) if at == i => i as i64 + d,
                    _ => i as i64,
                };
                (step, r)
            })
            .collect::<Vec<_>>()
    });
    let costs = prop::sample::subsequence((0..NAMES.len()).collect::<Vec<_>>(), 0..=NAMES.len())
        .prop_flat_map(|names| {
            let n = names.len();
            (
                Just(names),
                prop::collection::vec(prop_oneof![10 => 0u32..=1000, 1 => 1001u32..=1002], n),
            )
        })
        .prop_map(|(names, costs)| names.into_iter().zip(costs).collect::<Vec<_>>());
    (
        rows,
        prop_oneof![10 => 0u32..=1000, 1 => 1001u32..=1100],
        costs,
    )
}

// ---------------------------------------------------------------------------
// Eval level: JSON rows of any shape, read by the model as Python would.

/// The seed's `trace_work`, over what `json.loads` gives.
fn model_json(trace: &MV, decision_units: &MV, tool_units: &MV) -> Result<Value, ()> {
    let MV::Arr(rows) = trace else { return Err(()) };
    let du = decision_units
        .as_int()
        .filter(|v| (0..=1000).contains(v))
        .ok_or(())?;
    let MV::Obj(units) = tool_units else {
        return Err(());
    };
    if rows.len() > 32 || units.len() > 8 {
        return Err(());
    }
    if units
        .iter()
        .any(|(_, v)| !v.as_int().is_some_and(|c| (0..=1000).contains(&c)))
    {
        return Err(());
    }
    let (mut decisions, mut calls, mut total) = (0i128, 0i128, 0i128);
    for (i, row) in rows.iter().enumerate() {
        let MV::Obj(_) = row else { return Err(()) };
        if row.get("step").and_then(MV::as_int) != Some(i as i128) {
            return Err(());
        }
        let kind = match row.get("kind") {
            Some(MV::Str(k)) if ["tool", "final", "rejected"].contains(&k.as_str()) => k.as_str(),
            _ => return Err(()),
        };
        decisions += 1;
        total += du;
        if kind == "tool" {
            let (Some(MV::Bool(executed)), Some(MV::Str(name))) =
                (row.get("executed"), row.get("name"))
            else {
                return Err(());
            };
            if *executed {
                let cost = units
                    .iter()
                    .find(|(k, _)| k == name)
                    .and_then(|(_, v)| v.as_int())
                    .ok_or(())?;
                calls += 1;
                total += cost;
            }
        }
    }
    Ok(
        json!({"decisions": decisions as i64, "executed_tools": calls as i64, "work_units": total as i64}),
    )
}

fn int_like() -> impl Strategy<Value = J> {
    prop_oneof![
        6 => (0i64..=3).prop_map(J::int),
        1 => prop::sample::select(vec!["-0", "0.0", "1e0", "-1", "99999999999999999999"]).prop_map(|s| J::Num(s.into())),
        1 => Just(J::Bool(false)),
        1 => Just(J::Null),
        1 => Just(J::s("0")),
    ]
}

fn json_row(i: usize) -> impl Strategy<Value = J> {
    let step = prop_oneof![30 => Just(J::int(i as i64)), 1 => int_like()];
    let kind = prop_oneof![
        12 => Just(J::s("tool")),
        3 => Just(J::s("final")),
        3 => Just(J::s("rejected")),
        1 => prop::sample::select(vec![J::s("Tool"), J::s(""), J::int(1), J::Null]),
    ];
    let name = prop_oneof![30 => prop::sample::select(NAMES.to_vec()).prop_map(J::s), 1 => Just(J::int(1))];
    let executed = prop_oneof![40 => any::<bool>().prop_map(J::Bool), 1 => Just(J::int(1)), 1 => Just(J::Null)];
    (
        step,
        kind,
        prop::option::weighted(0.98, name),
        prop::option::weighted(0.98, executed),
        any::<bool>(),
    )
        .prop_map(|(step, kind, name, executed, extra)| {
            let mut m = vec![("step", step), ("kind", kind)];
            if let Some(n) = name {
                m.push(("name", n));
            }
            if let Some(e) = executed {
                m.push(("executed", e));
            }
            if extra {
                m.push(("ok", J::Bool(true)));
            }
            J::obj(m)
        })
}

fn json_case() -> impl Strategy<Value = (J, J, J)> {
    let trace = prop_oneof![
        10 => (0usize..=6).prop_flat_map(|n| (0..n).map(json_row).collect::<Vec<_>>()).prop_map(J::Arr),
        2 => (30usize..=33).prop_flat_map(|n| (0..n).map(json_row).collect::<Vec<_>>()).prop_map(J::Arr),
        1 => prop::sample::select(vec![J::Null, J::obj(vec![]), J::Arr(vec![J::int(0)])]),
    ];
    let decision_units = prop_oneof![
        8 => (0i64..=1000).prop_map(J::int),
        1 => prop::sample::select(vec!["1000", "1001", "-1", "2.0", "-0"]).prop_map(|s| J::Num(s.into())),
        1 => Just(J::Bool(true)),
    ];
    let cost = prop_oneof![
        30 => (0i64..=1000).prop_map(J::int),
        1 => prop::sample::select(vec![J::int(1001), J::int(-1), J::Num("3.0".into()), J::Bool(true), J::Null]),
    ];
    let tool_units = prop_oneof![
        10 => prop_oneof![Just(NAMES.to_vec()), prop::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len())]
            .prop_flat_map(move |names| {
                let n = names.len();
                (Just(names), prop::collection::vec(cost.clone(), n))
            })
            .prop_map(|(names, costs)| J::obj(names.into_iter().zip(costs).collect())),
        1 => (0usize..=1).prop_map(|extra| J::obj((0..8 + extra).map(|i| (["a","b","c","d","e","f","g","h","i"][i], J::int(1))).collect())),
        1 => Just(J::Arr(vec![])),
    ];
    (trace, decision_units, tool_units)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn core_trace_work_matches_the_model((rows, du, costs) in typed_case()) {
        let named: Vec<(&str, u32)> = costs.iter().map(|(n, c)| (NAMES[*n], *c)).collect();
        let got = trace_work(
            rows.iter().map(|(step, r)| {
                (*step, match r {
                    Row::Final => WorkRow::Final,
                    Row::Rejected => WorkRow::Rejected,
                    Row::Tool { name, executed } => WorkRow::Tool { name: NAMES[*name], executed: *executed },
                })
            }),
            du,
            &named,
        );
        let want = model_typed(&rows, du, &costs);
        match (got, want) {
            (Ok(Work { decisions, executed_tools, work_units }), Ok(w)) => {
                prop_assert_eq!((decisions, executed_tools, work_units), w);
                // The formula, stated once more: W = D·c + Σ t_i.
                let sum: u32 = rows.iter().filter_map(|(_, r)| match r {
                    Row::Tool { name, executed: true } => costs.iter().find(|(n, _)| n == name).map(|(_, c)| *c),
                    _ => None,
                }).sum();
                prop_assert_eq!(work_units, decisions * du + sum);
            }
            (Err(_), Err(())) => {}
            (g, w) => prop_assert!(false, "core {:?}, model {:?}", g, w),
        }
    }

    #[test]
    fn eval_trace_work_matches_the_model((trace, du, units) in json_case()) {
        let request = J::obj(vec![
            ("fn", J::s("trace_work")),
            ("args", J::obj(vec![("trace", trace.clone()), ("decision_units", du.clone()), ("tool_units", units.clone())])),
        ]);
        let line = render(&request);
        let want = model_json(
            &decode_value(&trace).expect("valid JSON"),
            &decode_value(&du).expect("valid JSON"),
            &decode_value(&units).expect("valid JSON"),
        );
        match (handle(line.as_bytes()), want) {
            (Ok(got), Ok(want)) => prop_assert_eq!(got, want),
            (Err(EvalError::InvalidInput(_)), Err(())) => {}
            (got, want) => prop_assert!(false, "eval {:?}, model {:?} for {}", got, want, line),
        }
    }
}

/// Both generators reach valid and invalid inputs in useful proportions.
#[test]
fn generators_reach_both_sides() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (typed, json) = (typed_case(), json_case());
    let (mut typed_ok, mut json_ok, mut json_paid) = (0, 0, 0);
    for _ in 0..400 {
        let (rows, du, costs) = typed.new_tree(&mut runner).expect("tree").current();
        typed_ok += usize::from(model_typed(&rows, du, &costs).is_ok());
        let (t, d, u) = json.new_tree(&mut runner).expect("tree").current();
        let m = model_json(
            &decode_value(&t).unwrap(),
            &decode_value(&d).unwrap(),
            &decode_value(&u).unwrap(),
        );
        if let Ok(v) = m {
            json_ok += 1;
            json_paid += usize::from(v["executed_tools"].as_i64() > Some(0));
        }
    }
    assert!(
        (60..340).contains(&typed_ok),
        "typed valid {typed_ok} of 400"
    );
    assert!(
        (40..340).contains(&json_ok) && json_paid > 10,
        "json valid {json_ok}, with executed tools {json_paid}"
    );
}
