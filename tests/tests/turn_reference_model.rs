//! Property: the core's turn gate (`SPEC C`) decides like an independent
//! model of the seed's `Presupuesto` / `ejecutar_con_control` / `agente`,
//! over random runs: random usage (fields absent or null), stop reasons,
//! parallel tool calls with shuffled keys and `1` vs `1.0`, approvals, time
//! steps and limits.
//!
//! The model keeps the reference's own canonical form — the text of
//! `json.dumps(args, sort_keys=True)` — in a map, where the gate keeps
//! 128-bit fingerprints; any disagreement would show a fingerprint that
//! merges or splits calls the reference does not.
//!
//! Invariants on every case: each proposed call gets exactly one answer;
//! the run ends (or continues) with the model's status; a refused or
//! cut-off call is never executed.
//!
//! Cases: 256, or `PROPTEST_CASES`.

use std::collections::HashMap;

use budgetgate::replay::fingerprint_value;
use budgetgate_core::turn::{
    Admission, ApprovalAnswer, CallVerdict, ProposedCall, RefusalReason, RunStatus, StopReason,
    TokenUsage, ToolOutcome, ToolRule, ToolRules, TurnEnd, TurnGate, TurnLimits,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// `json.dumps(value, sort_keys=True)` for the values generated here.
fn dumps_sorted(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}: {}", Value::String(k.clone()), dumps_sorted(&map[k])))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(dumps_sorted)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // serde_json spells 1.0 as `1.0` and 1 as `1`, as Python does.
        other => other.to_string(),
    }
}

#[derive(Debug, Clone)]
struct Call {
    name: &'static str,
    args: Value,
    approve: bool,
    fails: bool,
}

#[derive(Debug, Clone)]
struct Turn {
    /// Each usage field: absent, null, or a count.
    usage: [Option<Option<u64>>; 4],
    stop: &'static str,
    calls: Vec<Call>,
    /// Milliseconds before the next model call.
    pause_ms: u64,
}

fn usage_of(turn: &Turn) -> (TokenUsage, Value) {
    let keys = [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ];
    let mut object = serde_json::Map::new();
    let mut counts = [0u64; 4];
    for (i, field) in turn.usage.iter().enumerate() {
        match field {
            None => {}
            Some(None) => {
                object.insert(keys[i].into(), Value::Null);
            }
            Some(Some(n)) => {
                object.insert(keys[i].into(), json!(n));
                counts[i] = *n;
            }
        }
    }
    let parsed = TokenUsage::parse(Value::Object(object.clone()).to_string().as_bytes()).unwrap();
    assert_eq!(
        [
            parsed.input_tokens,
            parsed.output_tokens,
            parsed.cache_read_input_tokens,
            parsed.cache_creation_input_tokens
        ],
        counts
    );
    (parsed, Value::Object(object))
}

fn arb_args() -> impl Strategy<Value = Value> {
    // Few distinct values, so repeats are common; key order shuffled.
    let value = prop_oneof![
        Just(json!(1)),
        Just(json!(1.0)),
        Just(json!("x")),
        Just(json!(true)),
        Just(json!([1, 2])),
    ];
    (value.clone(), value, any::<bool>(), any::<bool>()).prop_map(|(a, b, two, swap)| {
        let mut pairs = vec![("a", a)];
        if two {
            pairs.push(("b", b));
        }
        if swap {
            pairs.reverse();
        }
        let mut map = serde_json::Map::new();
        for (k, v) in pairs {
            map.insert(k.into(), v);
        }
        Value::Object(map)
    })
}

fn arb_call() -> impl Strategy<Value = Call> {
    (
        prop_oneof![Just("search"), Just("refund"), Just("nope")],
        arb_args(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(name, args, approve, fails)| Call {
            name,
            args,
            approve,
            fails,
        })
}

fn arb_turn() -> impl Strategy<Value = Turn> {
    let field = prop_oneof![
        Just(None),
        Just(Some(None)),
        (0u64..400).prop_map(|n| Some(Some(n)))
    ];
    (
        [field.clone(), field.clone(), field.clone(), field],
        prop_oneof![
            6 => Just("tool_use"),
            1 => Just("end_turn"),
            1 => Just("pause_turn"),
            1 => Just("max_tokens"),
            1 => Just("refusal"),
        ],
        prop::collection::vec(arb_call(), 0..4),
        0u64..400,
    )
        .prop_map(|(usage, stop, calls, pause_ms)| Turn {
            usage,
            stop,
            calls,
            pause_ms,
        })
}

fn arb_limits() -> impl Strategy<Value = TurnLimits> {
    (
        0u32..8,
        0u64..3000,
        0u64..3000,
        0u32..4,
        prop::option::of(0u32..8),
    )
        .prop_map(|(steps, tokens, millis, repeats, tool_calls)| TurnLimits {
            max_model_calls: steps,
            max_tokens: tokens,
            max_millis: millis,
            max_repeats: repeats,
            max_tool_calls: tool_calls,
            ..TurnLimits::DEFAULT
        })
}

/// What the model expects for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Run,
    Refused(RefusalReason),
}

/// The reference (`Presupuesto`, `ejecutar_con_control`, `agente`) plus the
/// gate's documented additions (tool-attempt budget, unknown tools).
struct Model {
    limits: TurnLimits,
    steps: u32,
    tokens: u64,
    seen: HashMap<(String, String), u32>,
    attempts: u32,
}

impl Model {
    /// `agotado()`: steps, tokens, time, each `>=`.
    fn exhausted(&self, elapsed: u64) -> bool {
        self.steps >= self.limits.max_model_calls
            || self.tokens >= self.limits.max_tokens
            || elapsed >= self.limits.max_millis
    }

    fn decide(&mut self, stop: &str, call: &Call) -> Expect {
        match stop {
            "tool_use" => {}
            "max_tokens" => return Expect::Refused(RefusalReason::CutOff),
            _ => return Expect::Refused(RefusalReason::NotToolTurn),
        }
        // repetida(): count first, then compare.
        let key = (call.name.to_owned(), dumps_sorted(&call.args));
        let count = self.seen.entry(key).or_insert(0);
        *count += 1;
        if *count > self.limits.max_repeats {
            return Expect::Refused(RefusalReason::Repeat);
        }
        if let Some(max) = self.limits.max_tool_calls {
            if self.attempts >= max {
                return Expect::Refused(RefusalReason::ToolBudget);
            }
        }
        self.attempts += 1;
        match call.name {
            "nope" => Expect::Refused(RefusalReason::UnknownTool),
            "refund" if !call.approve => Expect::Refused(RefusalReason::ApprovalRefused),
            _ => Expect::Run,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn gate_decides_like_the_reference(
        limits in arb_limits(),
        turns in prop::collection::vec(arb_turn(), 0..10),
    ) {
        let mut rules: ToolRules = ToolRules::new();
        rules.try_add("search", ToolRule::Run).unwrap();
        rules.try_add("refund", ToolRule::NeedsApproval).unwrap();
        let start = 5_000u64;
        let mut gate: TurnGate = TurnGate::new(limits, rules, start);
        let mut model = Model { limits, steps: 0, tokens: 0, seen: HashMap::new(), attempts: 0 };
        let mut now = start;
        let mut status = RunStatus::Running;
        for (t, turn) in turns.iter().enumerate() {
            let admission = gate.begin_call(now).unwrap();
            if model.exhausted(now - start) {
                prop_assert!(matches!(admission, Admission::Exhausted(_)), "turn {t}: {admission:?}");
                prop_assert!(matches!(gate.status(), RunStatus::Incomplete(_)));
                status = gate.status();
                // Closing leaves nothing unanswered (nothing is open here).
                let closing = gate.close(now).unwrap();
                prop_assert!(closing.unanswered().is_empty());
                break;
            }
            prop_assert_eq!(admission, Admission::Proceed { call: t as u32 });
            let (usage, _) = usage_of(turn);
            model.steps += 1;
            model.tokens += usage.total();
            gate.record(usage, StopReason::parse(turn.stop).unwrap()).unwrap();
            let mut answers: HashMap<String, u32> = HashMap::new();
            for (i, call) in turn.calls.iter().enumerate() {
                let id = format!("toolu_{t}_{i}");
                let expect = model.decide(turn.stop, call);
                let proposed = ProposedCall {
                    call_id: &id,
                    name: call.name,
                    arguments: fingerprint_value(&call.args),
                    input: b"",
                };
                let mut approver = |_: &ProposedCall<'_>| {
                    if call.approve { ApprovalAnswer::Approve } else { ApprovalAnswer::Refuse }
                };
                let verdict = gate.propose_with(&proposed, &mut approver).unwrap();
                match (&expect, verdict) {
                    (Expect::Run, CallVerdict::Execute) => {
                        let outcome = if call.fails { ToolOutcome::Error } else { ToolOutcome::Ok };
                        gate.report(&id, outcome).unwrap();
                        *answers.entry(id.clone()).or_default() += 1;
                    }
                    (Expect::Refused(want), CallVerdict::Refused(got)) => {
                        prop_assert_eq!(*want, got, "turn {} call {}", t, i);
                        prop_assert!(gate.refusal_result(&id).is_some());
                        prop_assert!(gate.report(&id, ToolOutcome::Ok).is_err(), "a refused call never runs");
                        *answers.entry(id.clone()).or_default() += 1;
                    }
                    (want, got) => prop_assert!(false, "turn {t} call {i}: model {want:?}, gate {got:?}"),
                }
            }
            prop_assert_eq!(gate.unanswered().count(), 0);
            prop_assert!(answers.values().all(|&n| n == 1));
            prop_assert_eq!(answers.len(), turn.calls.len());
            let end = gate.finish_turn().unwrap();
            match turn.stop {
                "tool_use" | "pause_turn" => prop_assert_eq!(end, TurnEnd::Continue),
                "end_turn" => {
                    prop_assert_eq!(end, TurnEnd::Complete);
                    status = RunStatus::Complete;
                    break;
                }
                other => {
                    prop_assert_eq!(end, TurnEnd::Stopped(StopReason::parse(other).unwrap()));
                    status = gate.status();
                    break;
                }
            }
            now += turn.pause_ms;
        }
        prop_assert_eq!(gate.status(), status);
        prop_assert_eq!(gate.steps(), model.steps);
        prop_assert_eq!(gate.usage().total(), model.tokens);
        prop_assert_eq!(gate.tool_attempts(), model.attempts);
        if let Some(max) = limits.max_tool_calls {
            prop_assert!(gate.tool_attempts() <= max);
        }
    }
}

#[test]
fn canonical_text_matches_python_json_dumps() {
    // Spot checks of the model's canonical form against what Python prints.
    assert_eq!(
        dumps_sorted(&json!({"b": 1, "a": 1.0})),
        r#"{"a": 1.0, "b": 1}"#
    );
    assert_eq!(
        dumps_sorted(&json!({"a": [1, "x", true, null]})),
        r#"{"a": [1, "x", true, null]}"#
    );
}
