//! The turn gate (`SPEC C`) driven as a host drives it: a scripted model
//! answers with Messages API responses (JSON), the driver keeps the message
//! history as the API would see it, runs tools, asks an approver, and sends
//! the gate's error results for refused calls. After every scenario the
//! history is checked the way the API checks it: every `tool_use` is
//! answered by exactly one `tool_result` in the next user message, and no
//! result answers an id that was never proposed.

use std::collections::HashMap;

use budgetgate_core::turn::{
    Admission, ApprovalAnswer, ArgsFingerprint, CallVerdict, Closing, ExhaustReason, ProposedCall,
    RefusalReason, RunStatus, StopReason, TokenMode, TokenUsage, ToolOutcome, ToolRule, ToolRules,
    TurnEnd, TurnGate, TurnLimits, TOOL_ERROR_PREFIX,
};
use serde_json::{json, Value};

/// What happened in one scripted run.
struct Outcome {
    status: RunStatus,
    messages: Vec<Value>,
    executed: Vec<String>,
    /// The `tool_choice` of the closing call, if the run closed.
    closing_tool_choice: Option<Value>,
}

fn response(stop: &str, usage: Value, blocks: Value) -> Value {
    json!({"type": "message", "role": "assistant", "content": blocks, "stop_reason": stop, "usage": usage})
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// Runs `script` through the gate. `clock` gives the instant of each check
/// (before every model call and before every tool execution).
fn run(
    limits: TurnLimits,
    script: Vec<Value>,
    approve: impl Fn(&str) -> bool,
    mut clock: impl FnMut() -> u64,
    reservation: impl Fn(&Value) -> u64,
) -> Outcome {
    let mut rules: ToolRules = ToolRules::new();
    rules.try_add("search", ToolRule::Run).unwrap();
    rules.try_add("fragile", ToolRule::Run).unwrap();
    rules.try_add("refund", ToolRule::NeedsApproval).unwrap();
    let mut gate: TurnGate = TurnGate::new(limits, rules, clock());
    let mut messages = vec![json!({"role": "user", "content": "Refund order 7 if it was lost."})];
    let mut executed = Vec::new();
    let mut script = script.into_iter();
    loop {
        let now = clock();
        let admission = match limits.token_mode {
            TokenMode::Reserve => {
                let next = script.clone().next().expect("a scripted response");
                gate.begin_reserved_call(now, reservation(&next))
            }
            TokenMode::AfterTheFact => gate.begin_call(now),
        }
        .unwrap();
        if let Admission::Exhausted(_) = admission {
            let closing = gate.close(now).unwrap();
            messages.push(serde_json::to_value(&closing).unwrap());
            return Outcome {
                status: gate.status(),
                messages,
                executed,
                closing_tool_choice: Some(
                    serde_json::from_str(Closing::<16>::TOOL_CHOICE).unwrap(),
                ),
            };
        }
        let reply = script.next().expect("a scripted response");
        let usage = TokenUsage::parse(reply["usage"].to_string().as_bytes()).unwrap();
        let stop = StopReason::parse(reply["stop_reason"].as_str().unwrap()).unwrap();
        gate.record(usage, stop).unwrap();
        messages.push(json!({"role": "assistant", "content": reply["content"]}));
        let mut results = Vec::new();
        let calls: Vec<&Value> = reply["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .collect();
        for block in &calls {
            let id = block["id"].as_str().unwrap();
            let name = block["name"].as_str().unwrap();
            let input = block["input"].to_string();
            let call = ProposedCall {
                call_id: id,
                name,
                arguments: ArgsFingerprint::of_json(input.as_bytes(), &mut [0u8; 256]).ok(),
                input: input.as_bytes(),
            };
            let mut approver = |c: &ProposedCall<'_>| {
                if approve(c.name) {
                    ApprovalAnswer::Approve
                } else {
                    ApprovalAnswer::Refuse
                }
            };
            match gate.propose_with(&call, &mut approver).unwrap() {
                CallVerdict::Execute => {
                    // The host also bounds time between executions.
                    if gate.check_time(clock()).is_some() {
                        continue; // left open: the closing answers it
                    }
                    executed.push(id.to_owned());
                    let (outcome, content) = if name == "fragile" {
                        (ToolOutcome::Error, format!("{TOOL_ERROR_PREFIX}disk full"))
                    } else {
                        (ToolOutcome::Ok, format!("result of {id}"))
                    };
                    gate.report(id, outcome).unwrap();
                    results.push(json!({"type": "tool_result", "tool_use_id": id,
                        "is_error": outcome == ToolOutcome::Error, "content": content}));
                }
                CallVerdict::Refused(_) => {
                    let answer = gate.refusal_result(id).unwrap();
                    results.push(serde_json::to_value(answer).unwrap());
                }
                CallVerdict::NeedsApproval => unreachable!("the approver answers at once"),
            }
        }
        if gate.unanswered().next().is_some() {
            // Time ran out mid-turn: the closing message carries the results
            // already gathered, then the gate's answers, then the request.
            let closing = gate.close(clock()).unwrap();
            let mut message = serde_json::to_value(&closing).unwrap();
            let content = message["content"].as_array_mut().unwrap();
            for (i, r) in results.into_iter().enumerate() {
                content.insert(i, r);
            }
            messages.push(message);
            return Outcome {
                status: gate.status(),
                messages,
                executed,
                closing_tool_choice: Some(
                    serde_json::from_str(Closing::<16>::TOOL_CHOICE).unwrap(),
                ),
            };
        }
        let end = gate.finish_turn().unwrap();
        if !results.is_empty() {
            messages.push(json!({"role": "user", "content": results}));
        }
        match end {
            TurnEnd::Continue => continue,
            TurnEnd::Complete | TurnEnd::Stopped(_) => {
                return Outcome {
                    status: gate.status(),
                    messages,
                    executed,
                    closing_tool_choice: None,
                }
            }
        }
    }
}

/// The API's rule: each assistant `tool_use` answered exactly once, in the
/// next user message; no result for an id never proposed.
fn check_history(messages: &[Value]) {
    for (i, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        let ids: Vec<&str> = message["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        if ids.is_empty() {
            continue;
        }
        let next = messages.get(i + 1).expect("tool_use must be answered");
        assert_eq!(next["role"], "user");
        let mut answered: HashMap<&str, usize> = HashMap::new();
        for block in next["content"].as_array().unwrap() {
            if block["type"] == "tool_result" {
                *answered
                    .entry(block["tool_use_id"].as_str().unwrap())
                    .or_default() += 1;
            }
        }
        for id in &ids {
            assert_eq!(answered.get(id), Some(&1), "call {id} answered once");
        }
        assert_eq!(
            answered.len(),
            ids.len(),
            "a result for an id never proposed"
        );
    }
}

fn results_of(messages: &[Value]) -> HashMap<String, Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| (b["tool_use_id"].as_str().unwrap().to_owned(), b.clone()))
        .collect()
}

#[test]
fn lesson_flow_repeat_approval_and_exception() {
    let script = vec![
        response(
            "tool_use",
            json!({"input_tokens": 100, "output_tokens": 20}),
            json!([tool_use(
                "t1",
                "search",
                json!({"order": 7, "field": "status"})
            )]),
        ),
        response(
            "tool_use",
            json!({"input_tokens": 150, "output_tokens": 20, "cache_read_input_tokens": null}),
            json!([
                tool_use("t2", "search", json!({"field": "status", "order": 7})),
                tool_use("t3", "refund", json!({"order": 7})),
                tool_use("t4", "fragile", json!({})),
            ]),
        ),
        response(
            "tool_use",
            json!({"input_tokens": 200, "output_tokens": 20, "cache_creation_input_tokens": 50}),
            json!([
                tool_use("t5", "search", json!({"order": 7, "field": "status"})),
                tool_use("t6", "search", json!({"order": 7.0, "field": "status"})),
            ]),
        ),
        response(
            "end_turn",
            json!({"input_tokens": 250, "output_tokens": 30}),
            json!([{"type": "text", "text": "Order 7 is lost; I could not refund it."}]),
        ),
    ];
    let out = run(TurnLimits::DEFAULT, script, |_| false, || 0, |_| 0);
    check_history(&out.messages);
    assert_eq!(out.status, RunStatus::Complete);
    assert_eq!(out.executed, ["t1", "t2", "t4", "t6"]);
    let results = results_of(&out.messages);
    assert_eq!(
        results["t3"]["content"],
        RefusalReason::ApprovalRefused.message()
    );
    assert_eq!(results["t3"]["is_error"], true);
    assert_eq!(results["t4"]["content"], "Error: disk full");
    assert_eq!(results["t5"]["content"], RefusalReason::Repeat.message());
    assert_eq!(results["t6"]["is_error"], false);

    // Approved, the refund runs.
    let script_again = vec![
        response(
            "tool_use",
            json!({"input_tokens": 1, "output_tokens": 1}),
            json!([tool_use("r1", "refund", json!({"order": 7}))]),
        ),
        response(
            "end_turn",
            json!({"input_tokens": 1, "output_tokens": 1}),
            json!([]),
        ),
    ];
    let out = run(
        TurnLimits::DEFAULT,
        script_again,
        |name| name == "refund",
        || 0,
        |_| 0,
    );
    assert_eq!(out.executed, ["r1"]);
}

fn searches(n: usize, tokens: u64) -> Vec<Value> {
    (0..n)
        .map(|i| {
            response(
                "tool_use",
                json!({"input_tokens": tokens, "output_tokens": 0}),
                json!([tool_use(&format!("s{i}"), "search", json!({"page": i}))]),
            )
        })
        .collect()
}

#[test]
fn exhaustion_closes_with_a_summary_request_and_no_tools() {
    let limits = TurnLimits {
        max_tokens: 300,
        ..TurnLimits::DEFAULT
    };
    let out = run(limits, searches(5, 100), |_| true, || 0, |_| 0);
    check_history(&out.messages);
    let RunStatus::Incomplete(e) = out.status else {
        panic!("incomplete expected, got {:?}", out.status)
    };
    assert_eq!(e.reason, ExhaustReason::Tokens);
    assert_eq!(e.usage.total(), 300);
    assert_eq!(e.steps, 3);
    // Everything gathered so far is kept: three calls ran.
    assert_eq!(out.executed, ["s0", "s1", "s2"]);
    let last = out.messages.last().unwrap();
    assert_eq!(last["content"].as_array().unwrap().len(), 1);
    assert_eq!(last["content"][0]["text"], Closing::<16>::SUMMARY_REQUEST);
    assert_eq!(out.closing_tool_choice, Some(json!({"type": "none"})));
}

#[test]
fn time_running_out_mid_turn_answers_the_calls_not_run() {
    let script = vec![response(
        "tool_use",
        json!({"input_tokens": 10, "output_tokens": 5}),
        json!([
            tool_use("a", "search", json!({"q": 1})),
            tool_use("b", "search", json!({"q": 2})),
            tool_use("c", "search", json!({"q": 3})),
        ]),
    )];
    // The clock: start 0, before the call 0, before a 500, before b 1500, …
    let mut ticks = [0u64, 0, 500, 1_500, 1_600, 1_700].into_iter();
    let limits = TurnLimits {
        max_millis: 1_000,
        ..TurnLimits::DEFAULT
    };
    let out = run(
        limits,
        script,
        |_| true,
        move || ticks.next().unwrap_or(9_999),
        |_| 0,
    );
    check_history(&out.messages);
    assert_eq!(out.executed, ["a"]);
    let results = results_of(&out.messages);
    assert_eq!(results["b"]["content"], "Budget exhausted, not executed.");
    assert_eq!(results["c"]["content"], "Budget exhausted, not executed.");
    // Results first, then the summary request, in the same message.
    let closing = out.messages.last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(closing.len(), 4);
    assert_eq!(closing[3]["type"], "text");
    assert!(matches!(
        out.status,
        RunStatus::Incomplete(e) if e.reason == ExhaustReason::Time
    ));
}

#[test]
fn max_tokens_cut_off_tool_call_is_answered_never_run() {
    let script = vec![response(
        "max_tokens",
        json!({"input_tokens": 10, "output_tokens": 4096}),
        json!([
            {"type": "text", "text": "Refunding now"},
            tool_use("cut", "refund", json!({"order": 7})),
        ]),
    )];
    let out = run(TurnLimits::DEFAULT, script, |_| true, || 0, |_| 0);
    check_history(&out.messages);
    assert!(out.executed.is_empty());
    assert_eq!(out.status, RunStatus::Error(StopReason::MaxTokens));
    assert_eq!(
        results_of(&out.messages)["cut"]["content"],
        RefusalReason::CutOff.message()
    );
}

#[test]
fn pause_turn_then_answer() {
    let script = vec![
        response(
            "pause_turn",
            json!({"input_tokens": 10, "output_tokens": 1}),
            json!([]),
        ),
        response(
            "end_turn",
            json!({"input_tokens": 10, "output_tokens": 1}),
            json!([]),
        ),
    ];
    let out = run(TurnLimits::DEFAULT, script, |_| true, || 0, |_| 0);
    assert_eq!(out.status, RunStatus::Complete);
    assert!(out.executed.is_empty());
}

#[test]
fn default_mode_overshoots_reserve_mode_never_does() {
    // 4 calls of up to 100 input + 150 output each; the limit is 500.
    let script = || {
        (0..4)
            .map(|i| {
                response(
                    "tool_use",
                    json!({"input_tokens": 100, "output_tokens": 150}),
                    json!([tool_use(&format!("p{i}"), "search", json!({"page": i}))]),
                )
            })
            .collect::<Vec<_>>()
    };
    let limits = TurnLimits {
        max_tokens: 500,
        ..TurnLimits::DEFAULT
    };
    let after = run(limits, script(), |_| true, || 0, |_| 0);
    let RunStatus::Incomplete(e) = after.status else {
        panic!()
    };
    assert_eq!(e.usage.total(), 500, "250 + 250 reaches the limit exactly");
    let limits = TurnLimits {
        max_tokens: 400,
        ..limits
    };
    let after = run(limits, script(), |_| true, || 0, |_| 0);
    let RunStatus::Incomplete(e) = after.status else {
        panic!()
    };
    assert_eq!(
        e.usage.total(),
        500,
        "default mode: the second call ends past 400"
    );

    // Reserve mode, same limit: the worst case is the known input (100) plus
    // max_tokens (150); the second call's 250 more would pass 400.
    let reserve = TurnLimits {
        token_mode: TokenMode::Reserve,
        ..limits
    };
    let out = run(reserve, script(), |_| true, || 0, |_| 250);
    check_history(&out.messages);
    let RunStatus::Incomplete(e) = out.status else {
        panic!()
    };
    assert_eq!(e.reason, ExhaustReason::TokenReserve);
    assert_eq!(e.usage.total(), 250, "reserve mode: never past 400");
    assert_eq!(out.executed, ["p0"]);
    // A worst case that fits exactly is allowed.
    let exact = TurnLimits {
        max_tokens: 500,
        ..reserve
    };
    let out = run(exact, script(), |_| true, || 0, |_| 250);
    let RunStatus::Incomplete(e) = out.status else {
        panic!()
    };
    assert_eq!((e.reason, e.usage.total()), (ExhaustReason::Tokens, 500));
}
