//! Property: plan usage and the bounded workflow (`SPEC B1`, `SPEC B2`) agree
//! with an independent model of the seed's `_plan`, `_limits`,
//! `aggregate_usage` and `bounded_workflow`, over random plans (with invalid
//! rows: bad or repeated ids, late or unknown parents, costs that are floats,
//! booleans or out of range, missing, extra and repeated keys, 33 rows) and
//! random limits.
//!
//! Invariants on every valid case: usage never exceeds a limit; accepted
//! steps are a prefix and their usage is that prefix's own usage; the stop
//! reason is the first limit, in contract order, that the next step breaks;
//! raising a limit never accepts fewer steps.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

// Shared with the core's own property tests (core/tests/), which
// cargo-mutants runs against every core mutant.
#[path = "../../core/tests/prop_common/mod.rs"]
mod prop_common;

use budgetgate::eval::{handle, EvalError};
use budgetgate_core::{LimitKey, Limits, Plan, StopReason, Usage};
use prop_common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

const KEYS: [&str; 5] = ["steps", "tokens", "output", "depth", "fanout"];

// ---------------------------------------------------------------------------
// The model

#[derive(Debug, Clone, PartialEq)]
struct MRow {
    id: String,
    parent: Option<String>,
    tokens: i128,
    output: i128,
    depth: i128,
}

/// `_record(row, keys)`: an object with exactly these keys.
fn record<'a>(v: &'a MV, keys: &[&str]) -> Result<&'a MV, ()> {
    let mut want: Vec<&str> = keys.to_vec();
    want.sort_unstable();
    (v.keys() == Some(want)).then_some(v).ok_or(())
}

/// The seed's `_plan`.
fn model_plan(v: &MV) -> Result<Vec<MRow>, ()> {
    let MV::Arr(items) = v else { return Err(()) };
    if items.len() > 32 {
        return Err(());
    }
    let mut rows: Vec<MRow> = Vec::new();
    for row in items {
        record(row, &["id", "parent", "tokens", "output"])?;
        let id = match row.get("id") {
            Some(MV::Str(s)) if is_plan_id(s) => s.clone(),
            _ => return Err(()),
        };
        let parent = match row.get("parent") {
            Some(MV::Null) => None,
            Some(MV::Str(s)) if is_plan_id(s) => Some(s.clone()),
            _ => return Err(()),
        };
        if rows.iter().any(|r| r.id == id) {
            return Err(());
        }
        let depth = match &parent {
            None => 1,
            Some(p) => rows.iter().find(|r| &r.id == p).ok_or(())?.depth + 1,
        };
        let cost = |k: &str| {
            row.get(k)
                .and_then(MV::as_int)
                .filter(|v| (0..=10_000).contains(v))
                .ok_or(())
        };
        let (tokens, output) = (cost("tokens")?, cost("output")?);
        rows.push(MRow {
            id,
            parent,
            tokens,
            output,
            depth,
        });
    }
    Ok(rows)
}

/// The seed's `_limits`, in the order steps, tokens, output, depth, fanout.
fn model_limits(v: &MV) -> Result<[i128; 5], ()> {
    record(v, &KEYS)?;
    let mut out = [0; 5];
    for (slot, key) in out.iter_mut().zip(KEYS) {
        let max = if matches!(key, "tokens" | "output") {
            320_000
        } else {
            32
        };
        *slot = v
            .get(key)
            .and_then(MV::as_int)
            .filter(|x| (0..=max).contains(x))
            .ok_or(())?;
    }
    Ok(out)
}

fn usage_json(u: [i128; 5]) -> Value {
    json!({"steps": u[0] as i64, "tokens": u[1] as i64, "output": u[2] as i64,
           "max_depth": u[3] as i64, "max_fanout": u[4] as i64})
}

/// The seed's `aggregate_usage`: `[steps, tokens, output, max_depth, max_fanout]`.
fn model_usage(rows: &[MRow]) -> [i128; 5] {
    let mut u = [0i128; 5];
    let mut children: Vec<(Option<String>, i128)> = Vec::new();
    for r in rows {
        let count = match children.iter_mut().find(|(p, _)| *p == r.parent) {
            Some((_, c)) => {
                *c += 1;
                *c
            }
            None => {
                children.push((r.parent.clone(), 1));
                1
            }
        };
        u = [
            u[0] + 1,
            u[1] + r.tokens,
            u[2] + r.output,
            u[3].max(r.depth),
            u[4].max(count),
        ];
    }
    u
}

#[derive(Debug, Clone, PartialEq)]
struct MWorkflow {
    accepted: usize,
    stopped: Option<usize>,
    reason: &'static str,
    usage: [i128; 5],
}

/// The seed's `bounded_workflow`.
fn model_workflow(rows: &[MRow], limits: [i128; 5]) -> MWorkflow {
    let mut used = [0i128; 5];
    let mut children: Vec<(Option<String>, i128)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let fanout = children
            .iter()
            .find(|(p, _)| *p == r.parent)
            .map_or(0, |(_, c)| *c)
            + 1;
        let next = [
            used[0] + 1,
            used[1] + r.tokens,
            used[2] + r.output,
            r.depth,
            fanout,
        ];
        if let Some(k) = (0..5).find(|&k| next[k] > limits[k]) {
            return MWorkflow {
                accepted: i,
                stopped: Some(i),
                reason: KEYS[k],
                usage: used,
            };
        }
        match children.iter_mut().find(|(p, _)| *p == r.parent) {
            Some((_, c)) => *c = fanout,
            None => children.push((r.parent.clone(), fanout)),
        }
        used = [
            next[0],
            next[1],
            next[2],
            used[3].max(r.depth),
            used[4].max(fanout),
        ];
    }
    MWorkflow {
        accepted: rows.len(),
        stopped: None,
        reason: "complete",
        usage: used,
    }
}

// ---------------------------------------------------------------------------
// Generators

#[derive(Debug, Clone)]
enum IdChoice {
    Fresh,
    Long(usize),
    Repeat(prop::sample::Index),
    Bad(&'static str),
}

#[derive(Debug, Clone)]
enum ParentChoice {
    Root,
    Earlier(prop::sample::Index),
    Unknown,
    Bad(J),
}

#[derive(Debug, Clone)]
enum RowMut {
    None,
    Drop(usize),
    Extra,
    Repeat(usize),
    NotObject,
}

#[derive(Debug, Clone)]
struct RowSpec {
    id: IdChoice,
    parent: ParentChoice,
    tokens: J,
    output: J,
    style: u64,
    mutation: RowMut,
}

fn cost() -> impl Strategy<Value = J> {
    prop_oneof![
        80 => (0i64..=600).prop_map(J::int),
        12 => (0i64..=10_000).prop_map(J::int),
        4 => Just(J::int(10_000)),
        1 => prop::sample::select(vec!["10001", "-1", "1.0", "0e0", "-0", "99999999999999999999"])
            .prop_map(|s| J::Num(s.to_string())),
        1 => prop::sample::select(vec![J::Bool(true), J::Null, J::s("1")]),
    ]
}

fn row_spec() -> impl Strategy<Value = RowSpec> {
    let id = prop_oneof![
        150 => Just(IdChoice::Fresh),
        8 => (30usize..=32).prop_map(IdChoice::Long),
        1 => Just(IdChoice::Long(33)),
        1 => any::<prop::sample::Index>().prop_map(IdChoice::Repeat),
        1 => prop::sample::select(vec!["A", "1a", "a_b", "", "-a", "é", "a b"]).prop_map(IdChoice::Bad),
    ];
    let parent = prop_oneof![
        30 => Just(ParentChoice::Root),
        60 => any::<prop::sample::Index>().prop_map(ParentChoice::Earlier),
        1 => Just(ParentChoice::Unknown),
        1 => prop::sample::select(vec![J::int(0), J::s("A"), J::Arr(vec![])]).prop_map(ParentChoice::Bad),
    ];
    let mutation = prop_oneof![
        300 => Just(RowMut::None),
        1 => (0usize..4).prop_map(RowMut::Drop),
        1 => Just(RowMut::Extra),
        1 => (0usize..4).prop_map(RowMut::Repeat),
        1 => Just(RowMut::NotObject),
    ];
    let style = prop_oneof![10 => Just(0u64), 1 => any::<u64>()];
    (id, parent, cost(), cost(), style, mutation).prop_map(
        |(id, parent, tokens, output, style, mutation)| RowSpec {
            id,
            parent,
            tokens,
            output,
            style,
            mutation,
        },
    )
}

fn build_plan(specs: &[RowSpec]) -> J {
    let mut ids: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let id = match &s.id {
            IdChoice::Fresh => format!("r{i}"),
            IdChoice::Long(n) => format!(
                "{}{i}",
                "l".repeat(n.saturating_sub(i.to_string().len()).max(1))
            ),
            IdChoice::Repeat(at) if !ids.is_empty() => ids[at.index(ids.len())].clone(),
            IdChoice::Repeat(_) => format!("r{i}"),
            IdChoice::Bad(b) => (*b).to_string(),
        };
        let parent = match &s.parent {
            ParentChoice::Root => J::Null,
            ParentChoice::Earlier(at) if !ids.is_empty() => {
                J::Str(JStr::styled(&ids[at.index(ids.len())], s.style))
            }
            ParentChoice::Earlier(_) => J::Null,
            ParentChoice::Unknown => J::s("zz-unknown"),
            ParentChoice::Bad(j) => j.clone(),
        };
        let mut members = vec![
            (
                JStr::styled("id", s.style >> 7),
                J::Str(JStr::styled(&id, s.style)),
            ),
            (JStr::plain("parent"), parent),
            (JStr::plain("tokens"), s.tokens.clone()),
            (JStr::plain("output"), s.output.clone()),
        ];
        ids.push(id);
        match s.mutation {
            RowMut::None => {}
            RowMut::Drop(k) => {
                members.remove(k);
            }
            RowMut::Extra => members.push((JStr::plain("note"), J::Null)),
            RowMut::Repeat(k) => {
                let m = members[k].clone();
                members.push(m);
            }
            RowMut::NotObject => {
                rows.push(J::Arr(vec![]));
                continue;
            }
        }
        rows.push(J::Obj(members));
    }
    J::Arr(rows)
}

fn plan() -> impl Strategy<Value = J> {
    prop_oneof![
        10 => prop::collection::vec(row_spec(), 0..=10),
        2 => prop::collection::vec(row_spec(), 28..=33),
    ]
    .prop_map(|specs| build_plan(&specs))
}

fn limit_value(key: &'static str) -> impl Strategy<Value = J> {
    let good = match key {
        "tokens" | "output" => prop_oneof![
            10 => (0i64..=3000).prop_map(J::int),
            3 => (0i64..=30_000).prop_map(J::int),
            1 => Just(J::int(320_000)),
        ]
        .boxed(),
        "steps" => {
            prop_oneof![10 => (0i64..=12).prop_map(J::int), 2 => (28i64..=32).prop_map(J::int)]
                .boxed()
        }
        _ => prop_oneof![10 => (0i64..=5).prop_map(J::int), 1 => Just(J::int(32))].boxed(),
    };
    let bad = match key {
        "tokens" | "output" => Just(J::int(320_001)).boxed(),
        _ => Just(J::int(33)).boxed(),
    };
    prop_oneof![
        60 => good,
        1 => bad,
        1 => prop::sample::select(vec![J::int(-1), J::Num("1.0".into()), J::Bool(true), J::Null, J::s("1")]),
    ]
}

fn limits() -> impl Strategy<Value = J> {
    let values = KEYS.map(limit_value);
    let mutation = prop_oneof![
        40 => Just(None),
        1 => (0usize..5).prop_map(|k| Some((k, 0u8))), // drop
        1 => (0usize..5).prop_map(|k| Some((k, 1u8))), // repeat
        1 => Just(Some((0, 2u8))),                     // extra key
    ];
    (
        values,
        mutation,
        any::<bool>(),
        prop_oneof![10 => Just(0u64), 1 => any::<u64>()],
    )
        .prop_map(|(values, m, reversed, style)| {
            let mut members: Vec<(JStr, J)> = KEYS
                .iter()
                .zip(values)
                .map(|(k, v)| (JStr::styled(k, style), v))
                .collect();
            match m {
                Some((k, 0)) => {
                    members.remove(k);
                }
                Some((k, 1)) => {
                    let m = members[k].clone();
                    members.push(m);
                }
                Some(_) => members.push((JStr::plain("width"), J::int(1))),
                None => {}
            }
            if reversed {
                members.reverse();
            }
            J::Obj(members)
        })
}

// ---------------------------------------------------------------------------
// Checks

fn core_usage(u: Usage) -> [i128; 5] {
    [u.steps, u.tokens, u.output, u.max_depth, u.max_fanout].map(i128::from)
}

fn check(plan_j: &J, limits_j: &J) -> Result<(), TestCaseError> {
    let plan_bytes = render(plan_j);
    let limits_bytes = render(limits_j);
    let want_plan = decode_value(plan_j).and_then(|v| model_plan(&v));
    let want_limits = decode_value(limits_j).and_then(|v| model_limits(&v));
    let got_plan = Plan::<32>::parse(plan_bytes.as_bytes());
    let got_limits = Limits::parse(limits_bytes.as_bytes());

    prop_assert_eq!(
        got_plan.is_ok(),
        want_plan.is_ok(),
        "plan {:?} vs model {:?}: {}",
        got_plan,
        want_plan,
        plan_bytes
    );
    prop_assert_eq!(
        got_limits.is_ok(),
        want_limits.is_ok(),
        "limits {:?}: {}",
        got_limits,
        limits_bytes
    );

    // Through `budgetgate eval`, the whole answer.
    let request = format!(
        r#"{{"fn":"bounded_workflow","args":{{"plan":{plan_bytes},"limits":{limits_bytes}}}}}"#
    );
    let answer = handle(request.as_bytes());

    let (Ok(plan), Ok(rows)) = (&got_plan, &want_plan) else {
        prop_assert!(
            matches!(answer, Err(EvalError::InvalidInput(_))),
            "{:?}",
            answer
        );
        return Ok(());
    };
    // SPEC B1.
    prop_assert_eq!(core_usage(plan.usage()), model_usage(rows));
    let (Ok(limits), Ok(bounds)) = (&got_limits, &want_limits) else {
        prop_assert!(
            matches!(answer, Err(EvalError::InvalidInput(_))),
            "{:?}",
            answer
        );
        return Ok(());
    };
    // SPEC B2.
    let w = plan.bounded_workflow(limits);
    let m = model_workflow(rows, *bounds);
    prop_assert_eq!(
        (
            w.accepted,
            w.stopped,
            w.reason.as_str(),
            core_usage(w.usage)
        ),
        (m.accepted, m.stopped, m.reason, m.usage)
    );
    let want_answer = json!({
        "accepted": rows[..m.accepted].iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        "stopped": m.stopped.map(|i| rows[i].id.clone()),
        "reason": m.reason,
        "usage": usage_json(m.usage),
    });
    prop_assert_eq!(answer.map_err(|e| format!("{e:?}")), Ok(want_answer));

    // Invariants.
    let limit = |k: LimitKey| i128::from(limits.get(k));
    let u = core_usage(w.usage);
    for (value, key) in u.iter().zip(LimitKey::ALL) {
        prop_assert!(*value <= limit(key), "{:?} over its limit", key);
    }
    prop_assert_eq!(w.accepted, w.stopped.unwrap_or(plan.rows().len()));
    let mut prefix = Plan::<32>::new();
    for r in &plan.rows()[..w.accepted] {
        let parent = r.parent().map(|p| plan.rows()[p].id().to_string());
        prefix
            .try_push(r.id(), parent.as_deref(), r.tokens(), r.output())
            .expect("a prefix stays valid");
    }
    prop_assert_eq!(
        prefix.usage(),
        w.usage,
        "usage covers the accepted prefix only"
    );
    match w.reason {
        StopReason::Complete => prop_assert_eq!(w.usage, plan.usage()),
        StopReason::Limit(key) => {
            // Stopped before the next step: it alone would break `key`; no earlier key breaks.
            let next = &model_workflow(&rows[..=w.accepted], [i128::MAX; 5]);
            let row = &rows[w.accepted];
            let fan = rows[..w.accepted]
                .iter()
                .filter(|r| r.parent == row.parent)
                .count() as i128
                + 1;
            let would = [next.usage[0], next.usage[1], next.usage[2], row.depth, fan];
            let k = LimitKey::ALL.iter().position(|x| *x == key).expect("a key");
            prop_assert!(would[k] > bounds[k]);
            for j in 0..k {
                prop_assert!(
                    would[j] <= bounds[j],
                    "an earlier key {} also breaks",
                    KEYS[j]
                );
            }
        }
    }
    // Raising one limit never accepts fewer steps.
    for key in LimitKey::ALL {
        let mut v = LimitKey::ALL.map(|k| limits.get(k));
        let i = key as usize;
        v[i] = (v[i] + 1 + v[i] / 2).min(key.max());
        let raised = Limits::new(v[0], v[1], v[2], v[3], v[4]).expect("in range");
        prop_assert!(plan.bounded_workflow(&raised).accepted >= w.accepted);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn plans_and_workflows_match_the_model(p in plan(), l in limits()) {
        check(&p, &l)?;
    }
}

/// The generators reach valid plans, every stop reason, and invalid inputs.
#[test]
fn generator_reaches_every_reason() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (p, l) = (plan(), limits());
    let mut reasons = std::collections::HashSet::new();
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..800 {
        let plan_j = p.new_tree(&mut runner).expect("tree").current();
        let limits_j = l.new_tree(&mut runner).expect("tree").current();
        match (
            decode_value(&plan_j).and_then(|v| model_plan(&v)),
            decode_value(&limits_j).and_then(|v| model_limits(&v)),
        ) {
            (Ok(rows), Ok(b)) => {
                valid += 1;
                reasons.insert(model_workflow(&rows, b).reason);
            }
            _ => invalid += 1,
        }
    }
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    assert!(
        valid > 250 && invalid > 80,
        "{valid} valid, {invalid} invalid"
    );
}

/// The seed's worked examples.
#[test]
fn seed_examples() {
    let row = |id: &str, parent: J, t: i64, o: i64| {
        J::obj(vec![
            ("id", J::s(id)),
            ("parent", parent),
            ("tokens", J::int(t)),
            ("output", J::int(o)),
        ])
    };
    let seed = J::Arr(vec![row("a", J::Null, 2, 1), row("b", J::s("a"), 3, 2)]);
    let lim = |s: i64, t: i64, o: i64, d: i64, f: i64| {
        J::obj(
            KEYS.iter()
                .copied()
                .zip([s, t, o, d, f].map(J::int))
                .collect(),
        )
    };
    let rows = model_plan(&decode_value(&seed).unwrap()).unwrap();
    assert_eq!(model_usage(&rows), [2, 5, 3, 2, 1]);
    let w = model_workflow(&rows, [4, 4, 10, 4, 4]);
    assert_eq!(
        (w.accepted, w.stopped, w.reason, w.usage[1]),
        (1, Some(1), "tokens", 2)
    );
    assert_eq!(model_workflow(&rows, [4, 5, 10, 4, 4]).reason, "complete");
    let z = J::Arr(vec![row("z", J::Null, 0, 0)]);
    let zr = model_plan(&decode_value(&z).unwrap()).unwrap();
    assert_eq!(model_workflow(&zr, [0; 5]).reason, "steps");
    assert_eq!(model_workflow(&[], [0; 5]).reason, "complete");
    for (p, l) in [
        (&seed, lim(4, 4, 10, 4, 4)),
        (&seed, lim(4, 5, 10, 4, 4)),
        (&z, lim(0, 0, 0, 0, 0)),
    ] {
        check(p, &l).expect("agrees");
    }
}

/// Found by `plans_and_workflows_match_the_model` (fixed in 9da87db): the
/// plan reader gave all escaped strings of a document one 200-byte scratch
/// buffer, so a valid plan whose ids were written with escapes was refused
/// once their total passed 200 bytes.
#[test]
fn escaped_plan_ids_are_measured_one_by_one() {
    let rows: Vec<String> = (0..7)
        .map(|i| format!(r#"{{"id":"\u0061{i:0>30}","parent":null,"tokens":0,"output":0}}"#))
        .collect();
    let plan = format!("[{}]", rows.join(","));
    let got = Plan::<32>::parse(plan.as_bytes());
    assert_eq!(got.map(|p| p.rows().len()), Ok(7));
}

/// Same bug for limits: a 16-byte scratch for all escaped keys together.
#[test]
fn escaped_limit_keys_are_read_one_by_one() {
    let got = Limits::parse(
        br#"{"\u0073teps":1,"\u0074okens":1,"\u006futput":1,"\u0064epth":1,"\u0066anout":1}"#,
    );
    assert!(got.is_ok(), "{got:?}");
}
