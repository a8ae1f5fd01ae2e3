//! `Plan::parse`, `Limits::parse`, `Plan::usage` and `Plan::bounded_workflow`
//! on arbitrary bytes (`SPEC B`). The input is `PLAN \0 LIMITS`; each part is
//! also tried alone as the other kind of document.
//!
//! Invariants: never panics; usage never exceeds a limit; accepted steps are a
//! prefix, and their usage is that prefix's own usage; a complete workflow's
//! usage is the plan's usage; raising every limit to its maximum accepts at
//! least as many steps; the report encodes.
#![no_main]

use budgetgate_core::{pyjson, LimitKey, Limits, Plan, StopReason};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (plan_bytes, limits_bytes) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &data[..0]),
    };
    let _ = Limits::parse(plan_bytes);
    let _ = Plan::<32>::parse(limits_bytes);
    let Ok(plan) = Plan::<32>::parse(plan_bytes) else {
        return;
    };
    let usage = plan.usage();
    assert_eq!(usage.steps as usize, plan.rows().len());
    let Ok(limits) = Limits::parse(limits_bytes) else {
        return;
    };
    let w = plan.bounded_workflow(&limits);
    let u = w.usage;
    for (value, key) in [u.steps, u.tokens, u.output, u.max_depth, u.max_fanout]
        .into_iter()
        .zip(LimitKey::ALL)
    {
        assert!(value <= limits.get(key), "{key:?} over its limit");
    }
    assert_eq!(w.accepted, w.stopped.unwrap_or(plan.rows().len()));
    let mut prefix = Plan::<32>::new();
    for r in &plan.rows()[..w.accepted] {
        let parent = r.parent().map(|p| plan.rows()[p].id().as_str());
        prefix
            .try_push(r.id(), parent, r.tokens(), r.output())
            .expect("a prefix stays valid");
    }
    assert_eq!(prefix.usage(), w.usage);
    if w.reason == StopReason::Complete {
        assert_eq!(w.usage, usage);
    }
    let max = Limits::new(32, 320_000, 320_000, 32, 32).expect("in range");
    assert!(plan.bounded_workflow(&max).accepted >= w.accepted);
    let mut buf = [0u8; 8192];
    pyjson::encode(&plan.report(&w), &mut buf).expect("the report encodes");
});
