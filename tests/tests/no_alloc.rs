//! No heap: every public operation of the core allocates nothing (`SPEC D`:
//! "allocator-free"), measured on the host with a counting global allocator.
//!
//! The counter is `allocation_counter` (its `#[global_allocator]` counts per
//! thread, only inside `measure`), so the test harness's other threads never
//! disturb a measurement. `the_counter_sees_heap_allocations` proves that the
//! counter is installed and can fail: a `Vec`, a `Box` and a `format!` inside
//! the measured region are all seen.
//!
//! Inputs are built before each measured region; only the core call runs inside.

use std::hint::black_box;

use budgetgate_core::limits::MAX_TEXT_BYTES;
use budgetgate_core::pyjson::{encode, encoded_len, EncodeError};
use budgetgate_core::registry::{Param, ParamKind, ToolSpec};
use budgetgate_core::{
    run_trace_work, trace_work, Action, ActionRef, Identifier, Limits, Pending, Plan, Progress,
    Run, RunLimits, ScalarRef, Status, ToolSet, Verdict, WorkRow,
};

/// A tool signature to check arguments against.
const ADD: ToolSpec = ToolSpec {
    name: "add",
    description: "a + b",
    params: &[
        Param {
            key: "a",
            kind: ParamKind::Number,
            required: true,
        },
        Param {
            key: "b",
            kind: ParamKind::Number,
            required: true,
        },
    ],
    needs_approval: false,
};

/// Runs `f` and fails if it allocated on this thread.
fn no_heap<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let mut out = None;
    let info = allocation_counter::measure(|| out = Some(f()));
    assert_eq!(
        info.count_total, 0,
        "{what}: {} heap allocations ({} bytes)",
        info.count_total, info.bytes_total
    );
    out.expect("ran")
}

#[test]
fn the_counter_sees_heap_allocations() {
    let vec = allocation_counter::measure(|| {
        let v: Vec<u8> = Vec::with_capacity(black_box(16));
        black_box(v);
    });
    assert_eq!(
        vec.count_total, 1,
        "a Vec allocation inside the region is counted"
    );
    let boxed = allocation_counter::measure(|| {
        black_box(Box::new(black_box(7u64)));
    });
    assert_eq!(boxed.count_total, 1);
    let text = allocation_counter::measure(|| {
        black_box(format!("{}", black_box(12345)));
    });
    assert!(text.count_total >= 1);
    // And the helper really fails on it.
    let caught = std::panic::catch_unwind(|| no_heap("a Vec", || black_box(vec![1u8, 2, 3])));
    assert!(
        caught.is_err(),
        "no_heap must fail when the region allocates"
    );
}

fn tool_action(call_id: &str, args: &str) -> String {
    format!(r#"{{"kind":"tool","call_id":"{call_id}","name":"add","arguments":{{{args}}}}}"#)
}

#[test]
fn action_parse_allocates_nothing() {
    let long = "x".repeat(2000);
    let eight_long: Vec<String> = (0..8).map(|i| format!(r#""k{i}":"{long}""#)).collect();
    let escaped: Vec<String> = (0..8)
        .map(|i| format!(r#""k{i}":"\n{}\u00e9\"""#, "y".repeat(1997)))
        .collect();
    let valid = [
        tool_action("c1", r#""a":7,"b":8"#),
        tool_action(
            &"c".repeat(40),
            r#""x":-1e6,"y":1000000,"z":null,"w":true,"v":"é","u":-0"#,
        ),
        tool_action("c2", &eight_long.join(",")),
        format!(r#"{{"kind":"final","text":"{}"}}"#, "😀".repeat(2000)),
        format!(r#"{{"kind":"final","text":"{}"}}"#, "\\u00e9".repeat(2000)),
        r#" {"text":"\ud83d\ude00 \u2028","kind":"final"} "#.to_string(),
        tool_action("c3", &escaped.join(",")),
    ];
    let nine: Vec<String> = (0..9).map(|i| format!(r#""k{i}":{i}"#)).collect();
    let invalid = [
        tool_action("c4", &nine.join(",")),
        tool_action(&"c".repeat(41), ""),
        tool_action("c5", r#""x":1000001"#),
        tool_action("c6", r#""x":99999999999999999999"#),
        tool_action("c7", r#""x":1e400"#),
        tool_action("c8", r#""x":NaN"#),
        tool_action(
            "c9",
            &format!(r#""x":{}1{}"#, "[".repeat(5000), "]".repeat(5000)),
        ),
        tool_action("d1", r#""x":1,"x":2"#),
        format!(r#"{{"kind":"final","text":"{}"}}"#, "é".repeat(2001)),
        r#"{"kind":"final","text":" \u3000 "}"#.to_string(),
        r#"{"kind":"final","text":"\ud800"}"#.to_string(),
        r#"{"kind":"final","text":"x"} trailing"#.to_string(),
        "\u{feff}{}".to_string(),
        "[".repeat(100_000),
        String::new(),
    ];
    for text in &valid {
        let got = no_heap("Action::parse (valid)", || {
            Action::<MAX_TEXT_BYTES>::parse(text.as_bytes())
        });
        assert!(got.is_ok(), "{:.80}: {:?}", text, got.err());
        // The borrowed view, and everything read from it: decoding, owning,
        // encoding, comparing, checking against a tool signature.
        no_heap("ActionRef::parse and its readers (valid)", || {
            let view = ActionRef::parse(text.as_bytes()).expect("valid");
            let mut out = [0u8; 128 * 1024];
            encode(&view, &mut out).expect("encodes");
            assert!(view.to_action::<MAX_TEXT_BYTES>().is_ok());
            if let ActionRef::Tool(call) = &view {
                for (key, value) in call.arguments.iter() {
                    let mut name = heapless::String::<32>::new();
                    key.decode_into(&mut name).expect("a key fits");
                    assert!(call.arguments.get(&name).is_some());
                    if let ScalarRef::Str(s) = value {
                        let mut decoded = heapless::String::<8000>::new();
                        s.decode_into(&mut decoded).expect("fits");
                        assert_eq!(s.char_count(), decoded.chars().count());
                        assert!(s == decoded.as_str());
                    }
                }
                let _ = ADD.check(&call.arguments);
            }
        });
    }
    for text in &invalid {
        let got = no_heap("Action::parse (invalid)", || {
            Action::<MAX_TEXT_BYTES>::parse(text.as_bytes())
        });
        assert!(got.is_err(), "{:.80}", text);
        let got = no_heap("ActionRef::parse (invalid)", || {
            ActionRef::parse(text.as_bytes())
        });
        assert!(got.is_err(), "{:.80}", text);
    }
    let bad_utf8 = b"{\"kind\":\"final\",\"text\":\"\xff\"}";
    assert!(no_heap("Action::parse (bad UTF-8)", || {
        Action::<MAX_TEXT_BYTES>::parse(bad_utf8)
    })
    .is_err());
}

/// Decides `call`, which must be executed: the run's token for it.
fn execute(run: &mut Run, call: &Action) -> Pending {
    match run.decide(Some(call)) {
        Ok(Verdict::Execute { pending, .. }) => pending,
        _ => panic!("not executed"),
    }
}

/// The longest possible run: 32 decisions allowed, 16 tool attempts (the
/// most), each executed with a result at, over or around the 4096-byte edge,
/// then a final answer: 17 rounds, the most rounds a run can decide before a
/// stop (every round that does not stop is a tool attempt). A second run ends
/// on its decision budget, and a third on its tool budget.
#[test]
fn a_full_run_allocates_nothing() {
    let calls: Vec<Action> = (0..17)
        .map(|i| {
            Action::parse(tool_action(&format!("c{i}"), r#""a":7,"b":8"#).as_bytes())
                .expect("valid")
        })
        .collect();
    let unknown = Action::<MAX_TEXT_BYTES>::parse(
        br#"{"kind":"tool","call_id":"u1","name":"nope","arguments":{}}"#,
    )
    .expect("valid");
    let final_ =
        Action::<MAX_TEXT_BYTES>::parse(br#"{"kind":"final","text":"15"}"#).expect("valid");
    let at_edge = "x".repeat(4094);
    let over_edge = "é".repeat(2048);
    let value: serde_json::Value =
        serde_json::json!({"count": 15, "items": [1, 2.5, "é", null, true]});
    let mut tools = ToolSet::new();
    for name in ["add", "echo", "fail", "repeat", "nested", "t5", "t6", "t7"] {
        tools.try_add(name).expect("valid");
    }

    no_heap("a 17-round run", || {
        let mut run: Run = Run::new(RunLimits::new(32, 16).expect("in range"), tools.clone());
        for (i, call) in calls.iter().take(16).enumerate() {
            let Ok(Verdict::Execute {
                tool: 0, pending, ..
            }) = run.decide(Some(call))
            else {
                panic!("not executed");
            };
            let done = match i % 4 {
                0 => run.complete(pending, Some(at_edge.as_str())),
                1 => run.complete(pending, Some(over_edge.as_str())),
                2 => run.complete(pending, Some(&value)),
                _ => run.complete(pending, Some(&f64::NAN)),
            }
            .expect("awaiting");
            assert_eq!(done.progress, Progress::Continue);
        }
        assert!(matches!(
            run.decide(Some(&final_)),
            Ok(Verdict::Final { text }) if text.as_str() == "15"
        ));
        assert_eq!(run.trace().len(), 17);
        let units = [("add", 3u32)];
        assert_eq!(
            run_trace_work(run.trace(), 2, &units).map(|w| w.work_units),
            Ok(17 * 2 + 16 * 3)
        );
    });

    no_heap("a run to its decision budget", || {
        let mut run: Run = Run::new(RunLimits::new(16, 16).expect("in range"), tools.clone());
        for call in calls.iter().take(15) {
            let pending = execute(&mut run, call);
            run.complete(pending, None::<&u8>).expect("awaiting");
        }
        let v = run.decide(Some(&unknown)).expect("running");
        assert!(matches!(
            v,
            Verdict::UnknownTool {
                progress: Progress::Stopped(Status::DecisionBudget),
                ..
            }
        ));
    });

    no_heap("a run to its tool budget, then refused calls", || {
        let mut run: Run = Run::new(RunLimits::new(32, 1).expect("in range"), tools.clone());
        let pending = execute(&mut run, &calls[0]);
        run.complete(pending, Some(&15)).expect("awaiting");
        assert!(matches!(
            run.decide(Some(&calls[1])),
            Ok(Verdict::Stop {
                status: Status::ToolBudget,
                call: Some(_)
            })
        ));
        assert!(run.decide(Some(&calls[2])).is_err());
        let mut dup: Run = Run::new(RunLimits::DEFAULT, tools.clone());
        let pending = execute(&mut dup, &calls[0]);
        dup.complete(pending, Some(&1)).expect("awaiting");
        assert!(matches!(
            dup.decide(Some(&calls[0])),
            Ok(Verdict::Stop {
                status: Status::DuplicateCall,
                call: Some(_)
            })
        ));
        let mut bad: Run = Run::new(RunLimits::DEFAULT, tools.clone());
        assert!(matches!(
            bad.decide(None::<&Action<8>>),
            Ok(Verdict::Stop {
                status: Status::PolicyError,
                call: None
            })
        ));
    });
}

#[test]
fn encoding_at_the_4096_byte_edge_allocates_nothing() {
    let fits = "x".repeat(4094);
    let over = "x".repeat(4095);
    let wide = "é".repeat(2047);
    let escaped = "\u{1}".repeat(682); // 682 × 6 + 2 = 4094
    let value: serde_json::Value =
        serde_json::json!({"k": [fits.clone(), 1.5e-7, -0.0, 12345678901234567890u64]});
    no_heap("encoded_len", || {
        assert_eq!(encoded_len(fits.as_str(), 4096), Ok(4096));
        assert_eq!(encoded_len(over.as_str(), 4096), Err(EncodeError::TooLarge));
        assert_eq!(encoded_len(wide.as_str(), 4096), Ok(4096));
        assert_eq!(encoded_len(escaped.as_str(), 4096), Ok(4094));
        assert_eq!(encoded_len(&value, 4096), Err(EncodeError::TooLarge));
        assert!(encoded_len(&value, 8192).is_ok());
        assert_eq!(encoded_len(&f64::NAN, 4096), Err(EncodeError::NonFinite));
        assert_eq!(encoded_len(&(1e16, 1e-5, 1234567.0), 4096), Ok(23)); // [1e+16,1e-05,1234567.0]
    });
    no_heap("encode", || {
        let mut buf = [0u8; 4096];
        assert_eq!(encode(fits.as_str(), &mut buf), Ok(4096));
        assert_eq!(encode(over.as_str(), &mut buf), Err(EncodeError::TooLarge));
    });
}

#[test]
fn trace_work_allocates_nothing() {
    let names = ["add", "echo", "fail", "repeat", "nested", "t5", "t6", "t7"];
    let units: Vec<(&str, u32)> = names.iter().map(|n| (*n, 1000)).collect();
    no_heap("trace_work", || {
        let rows = (0..32).map(|i| {
            (
                i as i64,
                match i % 3 {
                    0 => WorkRow::Tool {
                        name: names[i % 8],
                        executed: true,
                    },
                    1 => WorkRow::Tool {
                        name: "unknown",
                        executed: false,
                    },
                    _ => WorkRow::Rejected,
                },
            )
        });
        assert_eq!(trace_work(rows, 1000, &units).map(|w| w.decisions), Ok(32));
        let too_many = (0..33).map(|i| (i as i64, WorkRow::Final));
        assert!(trace_work(too_many, 1, &units).is_err());
        let missing = [(
            0i64,
            WorkRow::Tool {
                name: "zz",
                executed: true,
            },
        )];
        assert!(trace_work(missing, 1, &units).is_err());
    });
}

#[test]
fn plans_and_limits_allocate_nothing() {
    let rows: Vec<String> = (0..32)
        .map(|i| {
            let parent = if i == 0 {
                "null".to_string()
            } else {
                format!(r#""s{}""#, i / 2)
            };
            format!(
                r#"{{"id":"s{i}","parent":{parent},"tokens":{},"output":{}}}"#,
                100 * i,
                10_000 - i
            )
        })
        .collect();
    let plan_text = format!("[{}]", rows.join(","));
    let limits_text = br#"{"steps":32,"tokens":30000,"output":320000,"depth":4,"fanout":2}"#;
    let bad_plans = [
        format!(
            "[{},{}]",
            rows.join(","),
            r#"{"id":"x","parent":null,"tokens":0,"output":0}"#
        ),
        r#"[{"id":"a","parent":"b","tokens":0,"output":0}]"#.to_string(),
        r#"[{"id":"a","parent":null,"tokens":1.0,"output":0}]"#.to_string(),
        r#"[{"id":"a","id":"a","parent":null,"tokens":0,"output":0}]"#.to_string(),
        format!(
            r#"[{{"id":"{}","parent":null,"tokens":0,"output":0}}]"#,
            "a".repeat(5000)
        ),
    ];
    let bad_limits: [&[u8]; 4] = [
        br#"{"steps":33,"tokens":0,"output":0,"depth":0,"fanout":0}"#,
        br#"{"steps":1,"tokens":0,"output":0,"depth":0}"#,
        br#"{"steps":1,"tokens":0,"output":0,"depth":0,"fanout":true}"#,
        br#"{"steps":1,"steps":1,"tokens":0,"output":0,"depth":0,"fanout":0}"#,
    ];
    no_heap(
        "Plan::parse, usage, bounded_workflow, Limits::parse",
        || {
            let plan: Plan = Plan::parse(plan_text.as_bytes()).expect("valid plan");
            assert_eq!(plan.usage().steps, 32);
            let limits = Limits::parse(limits_text).expect("valid limits");
            let w = plan.bounded_workflow(&limits);
            assert!(w.accepted > 0 && w.accepted < 32);
            let all = Limits::new(32, 320_000, 320_000, 32, 32).expect("in range");
            assert_eq!(plan.bounded_workflow(&all).accepted, 32);
            let mut built: Plan = Plan::new();
            built.try_push("a", None, 1, 1).expect("valid");
            assert!(built.try_push("b", Some("zz"), 1, 1).is_err());
            for bad in &bad_plans {
                assert!(Plan::<32>::parse(bad.as_bytes()).is_err());
            }
            for bad in bad_limits {
                assert!(Limits::parse(bad).is_err());
            }
        },
    );
}

#[test]
fn identifiers_and_tool_sets_allocate_nothing() {
    let forty = "a".repeat(40);
    no_heap("Identifier::new, ToolSet::try_add, RunLimits::new", || {
        assert!(Identifier::new(&forty).is_ok());
        assert!(Identifier::new("9a").is_err());
        let mut set = ToolSet::<8>::new();
        for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            set.try_add(name).expect("room");
        }
        assert!(set.try_add("i").is_err());
        assert!(RunLimits::new(0, 0).is_err());
    });
}
