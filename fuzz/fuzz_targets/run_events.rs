//! Drives the core's `Run` with an arbitrary sequence of proposals and tool
//! outcomes, in any order (also out of order), derived from the bytes (`SPEC A2`).
//!
//! Invariants: never panics; trace rows <= max_decisions; tool attempts <=
//! max_tool_calls; steps consecutive from 0; one tool row per attempt; a call
//! in the wrong state is refused without changing anything; a stopped run
//! stays stopped.
#![no_main]

use budgetgate_core::{
    Action, Pending, Progress, Run, RunError, RunLimits, ToolSet, TraceRow, Verdict,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 10] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"];

#[derive(Debug, Arbitrary)]
enum Outcome {
    Fail,
    /// `unit` repeated `n` times (up to ~5000 bytes: around the 4096 edge).
    Text {
        unit: u8,
        n: u16,
    },
    Int(i64),
    Float(f64),
    Pair(u32, f64),
}

#[derive(Debug, Arbitrary)]
enum Event {
    /// The policy failed or proposed nothing valid.
    Invalid,
    Final,
    /// A tool action, call id `c{call % 24}`, name `NAMES[name % 10]`.
    Tool {
        call: u8,
        name: u8,
    },
    /// A proposal as raw JSON bytes (usually invalid).
    Raw(Vec<u8>),
    /// The outcome of the pending tool (refused if none is pending).
    Outcome(Outcome),
}

#[derive(Debug, Arbitrary)]
struct Input {
    max_decisions: u8,
    max_tool_calls: u8,
    tools: Vec<u8>,
    events: Vec<Event>,
}

const UNITS: [&str; 6] = ["x", "é", "😀", "\n", "\u{1}", "\""];

fn check(run: &Run, limits: RunLimits) {
    let trace = run.trace();
    assert!(trace.len() <= usize::from(limits.max_decisions()));
    assert!(run.tool_attempts() <= limits.max_tool_calls());
    for (i, row) in trace.iter().enumerate() {
        assert_eq!(usize::from(row.step()), i, "steps are consecutive");
    }
    let tool_rows = trace
        .iter()
        .filter(|r| matches!(r, TraceRow::Tool { .. }))
        .count();
    assert_eq!(
        tool_rows,
        usize::from(run.tool_attempts()),
        "one tool row per attempt"
    );
}

fuzz_target!(|input: Input| {
    let limits = match RunLimits::new(
        u32::from(input.max_decisions),
        u32::from(input.max_tool_calls),
    ) {
        Ok(l) => l,
        Err(_) => RunLimits::new(
            u32::from(input.max_decisions % 32) + 1,
            u32::from(input.max_tool_calls % 17),
        )
        .expect("in range"),
    };
    let mut tools = ToolSet::new();
    for t in input.tools.iter().take(12) {
        let _ = tools.try_add(NAMES[usize::from(*t) % NAMES.len()]);
    }
    let mut run: Run = Run::new(limits, tools);
    // The run's token for the call awaiting its outcome: without one, an
    // outcome cannot be reported at all (by type), so such events are skipped.
    let mut pending: Option<Pending> = None;
    for event in &input.events {
        let before = (run.trace().len(), run.tool_attempts(), run.status());
        if let Event::Outcome(o) = event {
            let Some(token) = pending.take() else {
                assert!(!run.awaiting_outcome());
                continue;
            };
            let done = match o {
                Outcome::Fail => run.complete(token, None::<&u8>),
                Outcome::Text { unit, n } => {
                    let s = UNITS[usize::from(*unit) % UNITS.len()].repeat(usize::from(*n) % 5000);
                    run.complete(token, Some(s.as_str()))
                }
                Outcome::Int(i) => run.complete(token, Some(i)),
                Outcome::Float(f) => run.complete(token, Some(f)),
                Outcome::Pair(a, b) => run.complete(token, Some(&(a, b))),
            };
            let c = done.expect("the run's own token is always accepted");
            if let Progress::Stopped(s) = c.progress {
                assert_eq!(run.status(), Some(s));
            }
            assert_eq!(run.trace().len(), before.0, "completing adds no row");
        } else {
            let parsed = match event {
                Event::Invalid => None,
                Event::Final => Action::<64>::parse(br#"{"kind":"final","text":"done"}"#).ok(),
                Event::Tool { call, name } => {
                    let text = format!(
                        r#"{{"kind":"tool","call_id":"c{}","name":"{}","arguments":{{"k":1}}}}"#,
                        call % 24,
                        NAMES[usize::from(*name) % NAMES.len()]
                    );
                    Action::<64>::parse(text.as_bytes()).ok()
                }
                Event::Raw(bytes) => Action::<64>::parse(bytes).ok(),
                Event::Outcome(_) => unreachable!(),
            };
            match run.decide(parsed.as_ref()) {
                Ok(verdict) => {
                    assert!(pending.is_none());
                    assert_eq!(run.trace().len(), before.0 + 1, "one row per decision");
                    assert_eq!(verdict.status(), run.status());
                    if let Verdict::Execute { pending: token, .. } = verdict {
                        pending = Some(token);
                    }
                }
                Err(RunError::AwaitingOutcome) => {
                    assert!(pending.is_some());
                    assert_eq!(
                        (run.trace().len(), run.tool_attempts(), run.status()),
                        before
                    );
                }
                Err(RunError::Stopped(s)) => assert_eq!(before.2, Some(s)),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        check(&run, limits);
    }
});
