//! Benchmarks of the host-side hot paths (see docs/BENCHMARKS.md).
//!
//! `cargo bench -p budgetgate --bench hot_paths` runs them all with the
//! settings below (1 s warm-up, 2 s measurement, 30 samples); criterion's own
//! flags override them (`-- --measurement-time 5`), and a name filter picks
//! some (`-- validate/typical`).
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use budgetgate::driver::{run_bounded_agent, Observation, Proposal, Tool};
use budgetgate::tools::DemoKind;
use budgetgate_core::limits::MAX_TEXT_BYTES;
use budgetgate_core::pyjson::encoded_len;
use budgetgate_core::{Action, ActionRef, Limits, Plan, Run, RunLimits, ToolSet, Verdict};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

/// A typical tool action, 113 bytes.
const TYPICAL: &[u8] = br#"{"kind":"tool","call_id":"call-0001","name":"move_arm","arguments":{"joint":3,"angle":-12.5,"speed":0.8,"unit":"deg"}}"#;

fn action_with(args: usize, unit: &str, chars: usize) -> String {
    let value = unit.repeat(chars);
    let body: Vec<String> = (0..args)
        .map(|i| format!(r#""arg{i}":"{value}""#))
        .collect();
    format!(
        r#"{{"kind":"tool","call_id":"c1","name":"echo","arguments":{{{}}}}}"#,
        body.join(",")
    )
}

/// Validation is [`ActionRef::parse`]: the whole of `SPEC A1`, with the
/// strings left in the document. [`Action::parse`] adds an owned copy.
fn validate(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate");
    g.throughput(Throughput::Elements(1));
    assert!(ActionRef::parse(TYPICAL).is_ok());
    g.bench_function("typical_113B", |b| {
        b.iter(|| ActionRef::parse(black_box(TYPICAL)))
    });
    // Worst case by the contract: 8 arguments of 2000 characters with escapes
    // (`\n`, `\"`, `\u00e9`), 38.5 KB.
    let escaped = action_with(8, "ab\\n\\\"\\u00e9", 400);
    let worst_raw = action_with(8, "😀", 2000);
    assert!(ActionRef::parse(escaped.as_bytes()).is_ok());
    assert!(ActionRef::parse(worst_raw.as_bytes()).is_ok());
    g.bench_function(format!("worst_escaped_{}B", escaped.len()), |b| {
        b.iter(|| ActionRef::parse(black_box(escaped.as_bytes())))
    });
    // The largest valid action without escapes: 8 × 2000 four-byte characters.
    g.bench_function(format!("worst_raw_{}B", worst_raw.len()), |b| {
        b.iter(|| ActionRef::parse(black_box(worst_raw.as_bytes())))
    });
    g.finish();

    // Validation plus an owned copy: with the default capacity the copy is a
    // 64 KB value, with the 256-byte capacity a 2.6 KB one.
    let mut g = c.benchmark_group("validate_owned");
    g.throughput(Throughput::Elements(1));
    assert!(Action::<MAX_TEXT_BYTES>::parse(TYPICAL).is_ok());
    g.bench_function("typical_113B", |b| {
        b.iter(|| Action::<MAX_TEXT_BYTES>::parse(black_box(TYPICAL)))
    });
    g.bench_function("typical_113B_cap256", |b| {
        b.iter(|| Action::<256>::parse(black_box(TYPICAL)))
    });
    g.bench_function(format!("worst_escaped_{}B", escaped.len()), |b| {
        b.iter(|| Action::<MAX_TEXT_BYTES>::parse(black_box(escaped.as_bytes())))
    });
    g.finish();

    // Size sweep: one to eight arguments of 4-byte characters, 100 B to 64 KiB.
    let mut g = c.benchmark_group("validate_sweep");
    for (args, chars) in [
        (1, 12),
        (1, 100),
        (1, 250),
        (1, 1000),
        (2, 2000),
        (4, 2000),
        (8, 2000),
    ] {
        let doc = action_with(args, "😀", chars);
        assert!(ActionRef::parse(doc.as_bytes()).is_ok());
        g.throughput(Throughput::Bytes(doc.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(doc.len()), &doc, |b, doc| {
            b.iter(|| ActionRef::parse(black_box(doc.as_bytes())))
        });
    }
    g.finish();
}

/// The longest run the contract allows: up to 32 decisions and 16 tool
/// attempts with the demo tools, then a final answer (17 rounds: every round
/// that does not stop is a tool attempt, so no run decides more).
fn full_run(c: &mut Criterion) {
    let mut script: Vec<String> = (0..16)
        .map(|i| {
            let (name, args) = match i % 4 {
                0 => ("add", json!({"a": i, "b": 8})),
                1 => (
                    "echo",
                    json!({"text": "é".repeat(100), "n": 1.5, "ok": true}),
                ),
                2 => ("repeat", json!({"s": "x", "n": 4094})), // a result of exactly 4096 bytes
                _ => ("nested", json!({})),
            };
            json!({"kind": "tool", "call_id": format!("c{i}"), "name": name, "arguments": args})
                .to_string()
        })
        .collect();
    script.push(r#"{"kind":"final","text":"done"}"#.to_string());
    let limits = RunLimits::new(32, 16).expect("in range");
    let mut g = c.benchmark_group("run");
    g.throughput(Throughput::Elements(1));
    g.bench_function("host_driver_17_rounds_demo_tools", |b| {
        b.iter(|| {
            let tools: Vec<(String, Tool)> = ["add", "echo", "repeat", "nested"]
                .iter()
                .map(|n| (n.to_string(), DemoKind::parse(n).expect("demo").tool()))
                .collect();
            let mut next = 0;
            let policy = |_: &[Observation]| -> Proposal {
                next += 1;
                Ok(script[next - 1].clone())
            };
            let result = run_bounded_agent(policy, tools, limits).expect("runs");
            assert_eq!(result.trace.len(), 17);
            result
        })
    });
    // The core's share: the same 17 rounds on the sans-IO run, actions and
    // results prepared beforehand.
    let actions: Vec<Action> = script
        .iter()
        .map(|s| Action::parse(s.as_bytes()).expect("valid"))
        .collect();
    let results: Vec<Value> = (0..16)
        .map(|i| match i % 4 {
            0 => json!(i + 8),
            1 => json!({"text": "é".repeat(100), "n": 1.5, "ok": true}),
            2 => json!("x".repeat(4094)),
            _ => json!({"count": 15, "items": [1, 2.5, "é", null, true]}),
        })
        .collect();
    let mut tools = ToolSet::new();
    for n in ["add", "echo", "repeat", "nested"] {
        tools.try_add(n).expect("valid");
    }
    g.bench_function("core_run_17_rounds", |b| {
        b.iter(|| {
            let mut run: Run = Run::new(limits, tools.clone());
            for (action, result) in actions.iter().zip(&results) {
                let Ok(Verdict::Execute { pending, .. }) = run.decide(Some(action)) else {
                    panic!("not executed");
                };
                run.complete(pending, Some(result)).expect("awaiting");
            }
            run.decide(actions.last()).expect("final");
            black_box(run.trace().len())
        })
    });
    g.finish();
}

fn plan(c: &mut Criterion) {
    let rows: Vec<String> = (0..32)
        .map(|i| {
            let parent = if i == 0 {
                "null".into()
            } else {
                format!(r#""step-{}""#, (i - 1) / 3)
            };
            format!(
                r#"{{"id":"step-{i}","parent":{parent},"tokens":{},"output":{}}}"#,
                250 + i * 7,
                40 + i
            )
        })
        .collect();
    let plan_text = format!("[{}]", rows.join(","));
    let limits_text = br#"{"steps":32,"tokens":320000,"output":320000,"depth":32,"fanout":32}"#;
    let parsed: Plan = Plan::parse(plan_text.as_bytes()).expect("valid");
    let limits = Limits::parse(limits_text).expect("valid");
    assert_eq!(parsed.bounded_workflow(&limits).accepted, 32);
    let mut g = c.benchmark_group("plan");
    g.throughput(Throughput::Elements(1));
    g.bench_function(
        format!("parse_and_workflow_32_rows_{}B", plan_text.len()),
        |b| {
            b.iter(|| {
                let plan: Plan = Plan::parse(black_box(plan_text.as_bytes())).expect("valid");
                let limits = Limits::parse(black_box(limits_text)).expect("valid");
                plan.bounded_workflow(&limits)
            })
        },
    );
    g.bench_function("workflow_only_32_rows", |b| {
        b.iter(|| black_box(&parsed).bounded_workflow(black_box(&limits)))
    });
    g.finish();
}

fn result_edge(c: &mut Criterion) {
    let flat = Value::from("x".repeat(4094));
    // A nested result of exactly 4096 bytes: 100 objects, then padding.
    let mut items: Vec<Value> = (0..100)
        .map(|i| json!({"id": i, "ok": i % 2 == 0, "v": 1.5 * f64::from(i), "s": "é"}))
        .collect();
    let so_far = encoded_len(&Value::from(items.clone()), usize::MAX).expect("encodes");
    items.push(Value::from("p".repeat(4096 - so_far - 3)));
    let nested = Value::from(items);
    assert_eq!(encoded_len(&flat, 4096), Ok(4096));
    assert_eq!(encoded_len(&nested, 4096), Ok(4096));
    let mut g = c.benchmark_group("result_4096");
    g.throughput(Throughput::Bytes(4096));
    g.bench_function("encoded_len_string", |b| {
        b.iter(|| encoded_len(black_box(&flat), 4096))
    });
    g.bench_function("encoded_len_nested", |b| {
        b.iter(|| encoded_len(black_box(&nested), 4096))
    });
    g.finish();
}

/// `budgetgate replay` on a Claude Code session log of about 8 MB: the
/// sample log `examples/replay/claude-code.jsonl` repeated, each copy with
/// its own message, request and call ids (so every response is a response of
/// its own), read and decided from the text (`replay_text`).
fn replay_claude_code(c: &mut Criterion) {
    let sample = include_str!("../../examples/replay/claude-code.jsonl");
    let mut text = String::new();
    let mut copy = 0;
    while text.len() < 8 << 20 {
        let tagged = sample
            .replace("msg_ex_", &format!("msg_{copy}_"))
            .replace("req_ex_", &format!("req_{copy}_"))
            .replace("toolu_ex_", &format!("toolu_{copy}_"));
        text.push_str(&tagged);
        copy += 1;
    }
    let budget = budgetgate::replay::ReplayBudget::default();
    assert!(budgetgate::replay::replay_text(&text, &budget).is_ok());
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(10);
    g.bench_function("claude_code_8MB", |b| {
        b.iter(|| budgetgate::replay::replay_text(black_box(&text), &budget))
    });
    g.finish();
}

/// Loop detection (`[loops]`, issue 32): the engine's look at a full
/// window of 32 calls before a call (no pattern found: every step looked
/// at; a pattern found), and the window's record written and read back (the
/// hook and the gateway keep it in the ledger between decisions).
fn loops(c: &mut Criterion) {
    use budgetgate_core::engine::loops::{detect, LoopRules, Outcome, Window};
    use budgetgate_core::turn::{ArgsFingerprint, ToolName};
    let fp = |name: &str, i: usize| {
        let args = format!(r#"{{"path":"src/file{i}.rs"}}"#);
        ArgsFingerprint::of_json(args.as_bytes(), &mut [0u8; 64])
            .expect("args")
            .with_name(name)
    };
    let rules = LoopRules {
        same_outcome: Some(4),
        same_error: Some(3),
        ping_pong_cycles: Some(3),
        same_answer: None,
    };
    // 32 different calls, each with a result: nothing repeats.
    let mut varied: Window = Window::new();
    // Two calls taken in turn with unchanged results: a cycle.
    let mut cycling: Window = Window::new();
    for i in 0..32 {
        let name = ToolName::new("Read").expect("name");
        varied.push(fp("Read", i), name.clone());
        varied.report(fp("Read", i), Outcome::of(format!("{i}").as_bytes(), false));
        cycling.push(fp("Read", i % 2), name);
        cycling.report(fp("Read", i % 2), Outcome::of(b"same", false));
    }
    let next = fp("Read", 99);
    assert!(detect(varied.steps(), &rules, next).is_none());
    assert!(detect(cycling.steps(), &rules, fp("Read", 0)).is_some());
    let mut g = c.benchmark_group("loops");
    g.bench_function("detect_32_calls_none_found", |b| {
        b.iter(|| detect(black_box(varied.steps()), &rules, black_box(next)))
    });
    let again = fp("Read", 0);
    g.bench_function("detect_32_calls_pattern_found", |b| {
        b.iter(|| detect(black_box(cycling.steps()), &rules, black_box(again)))
    });
    let mut buf = vec![0u8; Window::<32>::RECORD_MAX];
    g.bench_function("record_32_calls_write_and_read", |b| {
        b.iter(|| {
            let n = black_box(&varied).write_record(&mut buf).expect("fits");
            Window::<32>::read_record(black_box(&buf[..n])).expect("reads")
        })
    });
    g.finish();
}

/// The model proxy's two ledger transactions per call (issue 31): a call
/// let through (its reservation stored) and its response counted, on a
/// SQLite ledger with `--durability normal` and `full`, and in memory (the
/// decision without the store). What the proxy adds to a call beyond its
/// HTTP relay.
fn model_gate(c: &mut Criterion) {
    use budgetgate::gate::backend::{open_ledger, Backend};
    use budgetgate::gate::budget_file::parse_budget;
    use budgetgate::gate::model_gate::{Admission, ModelCall, ModelGate, Outcome};
    use budgetgate::store::{Durability, MemoryStore};
    use budgetgate_core::turn::TokenUsage;
    let budget =
        parse_budget("[budget]\nmax_model_calls = 1000000000\nmax_tokens = 1000000000000\n")
            .expect("budget");
    let dir = tempfile::tempdir().expect("dir");
    let mut g = c.benchmark_group("model_gate");
    for (name, durability) in [
        ("memory", None),
        ("sqlite_normal", Some(Durability::Normal)),
        ("sqlite_full", Some(Durability::Full)),
    ] {
        let backend = match durability {
            None => Backend::Memory(MemoryStore::new()),
            Some(d) => {
                let url = format!(
                    "sqlite:{}",
                    dir.path().join(format!("{name}.sqlite3")).display()
                );
                open_ledger(Some(&url), Duration::from_secs(5), d).expect("ledger")
            }
        };
        let gate = ModelGate::new(backend, budget.clone(), 600_000);
        let call = ModelCall {
            model: "claude-bench",
            max_output: Some(1024),
            input_bound: 5_000,
            can_set_max_output: true,
            choices: 1,
        };
        let usage = TokenUsage {
            input_tokens: 10,
            output_tokens: 5,
            ..TokenUsage::ZERO
        };
        let mut n = 0u64;
        g.bench_function(format!("admit_and_finish_{name}"), |b| {
            b.iter(|| {
                n += 1;
                let key = format!("k{n}");
                match gate.admit("bench", &key, &call, 1_000).expect("decides") {
                    Admission::Go(t) => gate
                        .finish(&t, Outcome::Billed(usage), 1_000)
                        .expect("counts"),
                    Admission::Stop(s) => panic!("{s:?}"),
                }
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = validate, full_run, plan, result_edge, replay_claude_code, loops, model_gate
}
criterion_main!(benches);
