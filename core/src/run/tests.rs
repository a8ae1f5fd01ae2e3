//! Tests of the bounded run (`SPEC A2`).

use super::*;
use crate::action::{Action, ActionRef, ToolCall};
use crate::ident::Identifier;
use crate::registry::Param;
use crate::tools::ToolRule;

fn action(json: &str) -> Action<256> {
    Action::parse(json.as_bytes()).unwrap()
}

fn add(id: &str) -> Action<256> {
    action(&format!(
        r#"{{"kind":"tool","call_id":"{id}","name":"add","arguments":{{"a":7,"b":8}}}}"#
    ))
}

fn tools() -> ToolSet {
    let mut t = ToolSet::new();
    t.try_add("add").unwrap();
    t
}

/// Decides `proposal`, which must be a call to execute: its token.
fn execute(run: &mut Run, proposal: &Action<256>) -> Pending {
    let verdict = run.decide(Some(proposal));
    assert_eq!(verdict.as_ref().map(Verdict::status), Ok(None));
    match verdict {
        Ok(Verdict::Execute { pending, .. }) => pending,
        other => panic!("not executed: {other:?}"),
    }
}

fn call_of(proposal: &Action<256>) -> &ToolCall<256> {
    match proposal {
        Action::Tool(call) => call,
        Action::Final { .. } => panic!("not a call"),
    }
}

#[test]
fn seed_example_repeat_policy_stops_on_tool_budget() {
    let mut run: Run = Run::new(RunLimits::new(3, 1).unwrap(), tools());
    let first = add("c0");
    let pending = execute(&mut run, &first);
    assert_eq!(pending.step(), 0);
    assert_eq!(
        run.complete(pending, Some(&15)).unwrap().progress,
        Progress::Continue
    );
    let second = add("c1");
    assert_eq!(
        run.decide(Some(&second)),
        Ok(Verdict::Stop {
            status: Status::ToolBudget,
            call: Some(call_of(&second))
        })
    );
    assert_eq!(run.trace().len(), 2);
    assert_eq!(run.tool_attempts(), 1);
    assert_eq!(
        run.decide(Some(&add("c2"))),
        Err(RunError::Stopped(Status::ToolBudget))
    );
}

/// `SPEC A2` step 5 (issue 11, decisions carry the call): the verdict
/// to execute hands back the proposal's own call, borrowed, with the
/// tool's index and a token for the round.
#[test]
fn execute_hands_back_the_call_of_the_proposal() {
    let mut set = ToolSet::new();
    set.try_add("sub").unwrap();
    set.try_add("add").unwrap();
    let mut run: Run = Run::new(RunLimits::DEFAULT, set);
    let json = br#"{"kind":"tool","call_id":"c9","name":"add","arguments":{"a":7}}"#;
    let proposal = ActionRef::parse(json).unwrap();
    let Ok(Verdict::Execute {
        tool,
        call,
        pending,
    }) = run.decide(Some(&proposal))
    else {
        panic!("not executed")
    };
    assert_eq!(tool, 1);
    assert!(core::ptr::eq(
        call,
        match &proposal {
            ActionRef::Tool(c) => c,
            ActionRef::Final { .. } => unreachable!(),
        }
    ));
    assert_eq!(call.call_id.as_str(), "c9");
    assert_eq!(pending, Pending { step: 0 });
    assert_eq!(run.refuse(pending), Ok(Progress::Continue));
}

#[test]
fn seed_example_one_decision_is_decision_budget() {
    let mut run: Run = Run::new(RunLimits::new(1, 4).unwrap(), tools());
    let pending = execute(&mut run, &add("c1"));
    let done = run.complete(pending, Some(&15)).unwrap();
    assert_eq!(done.progress, Progress::Stopped(Status::DecisionBudget));
    assert_eq!(done.data, ObservationData::Result { bytes: 2 });
    assert_eq!(done.data.word(), None);
    assert_eq!(run.status(), Some(Status::DecisionBudget));
}

#[test]
fn duplicate_call_id_is_checked_before_tool_budget() {
    let mut run: Run = Run::new(RunLimits::new(4, 1).unwrap(), tools());
    let pending = execute(&mut run, &add("c1"));
    let done = run.complete(pending, None::<&i32>).unwrap();
    assert_eq!(done.data.word(), Some("tool-error"));
    let again = add("c1");
    let verdict = run.decide(Some(&again));
    assert_eq!(
        verdict,
        Ok(Verdict::Stop {
            status: Status::DuplicateCall,
            call: Some(call_of(&again))
        })
    );
    assert_eq!(verdict.unwrap().status(), Some(Status::DuplicateCall));
    assert_eq!(
        run.trace().last(),
        Some(&TraceRow::Rejected {
            step: 1,
            reason: RejectReason::DuplicateCallId
        })
    );
}

/// `SPEC A2` step 2: a final answer stops the run, and the verdict
/// hands back its text.
#[test]
fn final_stops_even_with_no_tool_attempts_left() {
    let mut run: Run = Run::new(RunLimits::new(2, 0).unwrap(), tools());
    let fin = action(r#"{"kind":"final","text":"done"}"#);
    let verdict = run.decide(Some(&fin)).unwrap();
    assert_eq!(verdict.status(), Some(Status::Final));
    let Verdict::Final { text } = verdict else {
        panic!("not final")
    };
    assert_eq!(text.as_str(), "done");
    assert_eq!(run.status(), Some(Status::Final));
    assert_eq!(run.trace(), &[TraceRow::Final { step: 0 }]);
}

#[test]
fn zero_tool_budget_refuses_the_first_tool_action() {
    let mut run: Run = Run::new(RunLimits::new(2, 0).unwrap(), tools());
    let call = add("c1");
    assert_eq!(
        run.decide(Some(&call)),
        Ok(Verdict::Stop {
            status: Status::ToolBudget,
            call: Some(call_of(&call))
        })
    );
    assert_eq!(run.tool_attempts(), 0);
}

#[test]
fn unknown_tool_counts_an_attempt_without_executing() {
    let mut run: Run = Run::new(RunLimits::new(2, 4).unwrap(), ToolSet::new());
    let call = add("c1");
    let verdict = run.decide(Some(&call));
    assert_eq!(
        verdict,
        Ok(Verdict::UnknownTool {
            call: call_of(&call),
            progress: Progress::Continue
        })
    );
    assert_eq!(verdict.unwrap().status(), None);
    assert_eq!(run.tool_attempts(), 1);
    assert!(matches!(
        run.trace()[0],
        TraceRow::Tool {
            executed: false,
            ok: false,
            ..
        }
    ));
    assert!(!run.awaiting_outcome());
    assert_eq!(run.restored_pending(), None);
    let last = add("c2");
    let verdict = run.decide(Some(&last)).unwrap();
    assert_eq!(verdict.status(), Some(Status::DecisionBudget));
}

#[test]
fn policy_error_is_recorded_and_stops() {
    let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
    assert_eq!(
        run.decide(None::<&Action<8>>),
        Ok(Verdict::Stop {
            status: Status::PolicyError,
            call: None
        })
    );
    assert_eq!(
        run.trace(),
        &[TraceRow::Rejected {
            step: 0,
            reason: RejectReason::InvalidPolicyAction
        }]
    );
}

#[test]
fn oversize_result_is_a_tool_error_but_executed() {
    let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
    let pending = execute(&mut run, &add("c1"));
    let at_edge = "x".repeat(4094);
    assert_eq!(
        run.complete(pending, Some(at_edge.as_str())).unwrap().data,
        ObservationData::Result { bytes: 4096 }
    );
    let pending = execute(&mut run, &add("c2"));
    let over = "x".repeat(4095);
    assert_eq!(
        run.complete(pending, Some(over.as_str())).unwrap().data,
        ObservationData::ToolError
    );
    assert!(matches!(
        run.trace()[1],
        TraceRow::Tool {
            executed: true,
            ok: false,
            ..
        }
    ));
    let pending = execute(&mut run, &add("c3"));
    assert_eq!(
        run.complete(pending, Some(&f64::NAN)).unwrap().data,
        ObservationData::ToolError
    );
}

#[test]
fn a_refused_call_is_counted_but_recorded_as_not_executed() {
    let mut run: Run = Run::new(RunLimits::new(2, 4).unwrap(), tools());
    let pending = execute(&mut run, &add("c1"));
    assert_eq!(run.refuse(pending), Ok(Progress::Continue));
    assert_eq!(run.tool_attempts(), 1);
    assert!(matches!(
        run.trace()[0],
        TraceRow::Tool {
            executed: false,
            ok: false,
            ..
        }
    ));
    let pending = execute(&mut run, &add("c2"));
    assert_eq!(
        run.refuse(pending),
        Ok(Progress::Stopped(Status::DecisionBudget))
    );
}

/// Issue 11: a token ends only the call it was made for; one of another
/// run changes nothing and is named for what it is.
#[test]
fn a_token_of_another_run_is_refused_and_changes_nothing() {
    let mut a: Run = Run::new(RunLimits::DEFAULT, tools());
    let mut b: Run = Run::new(RunLimits::DEFAULT, tools());
    let foreign = execute(&mut a, &add("a1"));
    // b awaits no outcome at all.
    assert_eq!(
        b.complete(Pending { step: 0 }, Some(&1)),
        Err(RunError::NoPendingCall)
    );
    assert_eq!(b.refuse(Pending { step: 0 }), Err(RunError::NoPendingCall));
    // b awaits the outcome of another round.
    let own = execute(&mut b, &add("b1"));
    b.complete(own, Some(&1)).unwrap();
    let own = execute(&mut b, &add("b2"));
    assert_eq!(b.complete(foreign, Some(&1)), Err(RunError::NoPendingCall));
    assert!(b.awaiting_outcome());
    assert_eq!(b.trace().len(), 2);
    assert_eq!(b.restored_pending(), Some(Pending { step: 1 }));
    assert_eq!(b.complete(own, Some(&1)).unwrap().data.word(), None);
    // A stopped run says so.
    let fin = action(r#"{"kind":"final","text":"done"}"#);
    b.decide(Some(&fin)).unwrap();
    assert_eq!(
        b.complete(Pending { step: 2 }, Some(&1)),
        Err(RunError::Stopped(Status::Final))
    );
    let stray = a.restored_pending().unwrap();
    assert_eq!(stray.step(), 0);
    assert_eq!(a.refuse(stray), Ok(Progress::Continue));
    assert_eq!(a.restored_pending(), None);
}

#[test]
fn out_of_order_calls_are_errors() {
    let mut run: Run = Run::new(RunLimits::DEFAULT, tools());
    let _pending = execute(&mut run, &add("c1"));
    assert_eq!(run.decide(Some(&add("c2"))), Err(RunError::AwaitingOutcome));
}

#[test]
fn limits_boundaries() {
    assert!(RunLimits::new(1, 0).is_ok());
    assert!(RunLimits::new(32, 16).is_ok());
    assert_eq!(RunLimits::new(0, 0), Err(RunLimitsError::MaxDecisions));
    assert_eq!(RunLimits::new(33, 0), Err(RunLimitsError::MaxDecisions));
    assert_eq!(RunLimits::new(1, 17), Err(RunLimitsError::MaxToolCalls));
}

#[test]
fn tool_set_boundaries() {
    let mut set = ToolSet::<8>::new();
    for i in 0..8 {
        assert_eq!(set.try_add(&format!("t{i}")), Ok(i));
    }
    assert_eq!(set.try_add("t9"), Err(ToolSetError::Full));
    let mut set = ToolSet::<8>::new();
    set.try_add("a").unwrap();
    assert_eq!(set.try_add("a"), Err(ToolSetError::Duplicate));
    assert!(matches!(
        set.try_add("1a"),
        Err(ToolSetError::InvalidName(_))
    ));
}

/// Issue 11 (one tool table), `SPEC A2`: a run's tools are entries of
/// the one table, registered under A1's stricter names (the table
/// itself takes `[A-Za-z0-9_-]{1,64}`): a leading digit or a 41st
/// character is refused, and refused as the table refuses nothing; the
/// run's table has every registered tool at its index with rule `run`,
/// a spec's approval and signature, no rule for others and no cap.
#[test]
fn a_tool_set_keeps_a1_names_on_the_one_table() {
    use crate::registry::{ParamKind, ToolSpec};
    let mut set = ToolSet::<4>::new();
    let long = "x".repeat(41);
    for name in ["0abc", "-a", long.as_str()] {
        assert!(crate::tools::ToolName::new(name).is_ok(), "{name:?}");
        assert!(
            matches!(set.try_add(name), Err(ToolSetError::InvalidName(_))),
            "{name:?}"
        );
    }
    assert!(set.table().is_empty());
    assert_eq!(set.try_add(&"x".repeat(40)), Ok(0));
    const P: &[Param] = &[Param {
        key: "on",
        kind: ParamKind::Bool,
        required: true,
    }];
    let spec = ToolSpec {
        name: "valve",
        description: "",
        params: P,
        needs_approval: true,
    };
    assert_eq!(set.try_add_spec(&spec), Ok(1));
    assert_eq!(set.try_add_spec(&spec), Err(ToolSetError::Duplicate));
    let run: Run<32, 4> = Run::new(RunLimits::DEFAULT, set);
    let tools = run.tools();
    assert_eq!(tools.others(), ToolRule::Unknown);
    assert_eq!(
        tools.get(0).map(|e| (e.rule(), e.signature())),
        Some((ToolRule::Run, None))
    );
    let valve = tools.get(1).unwrap();
    assert_eq!(
        (valve.rule(), valve.signature(), valve.cap()),
        (ToolRule::NeedsApproval, Some(P), None)
    );
    assert_eq!(tools.caps().count(), 0);
}

/// `SPEC A2`: every status and rejection reason is spelled as the
/// contract spells it (the words of `--json` traces and the device's
/// replies), and the run's errors say what went wrong. Found by
/// cargo-mutants (the whole-core run, shard 2/4).
#[test]
fn statuses_reasons_and_errors_are_spelled_as_the_contract_and_say_why() {
    for (status, said) in [
        (Status::Final, "final"),
        (Status::PolicyError, "policy-error"),
        (Status::DuplicateCall, "duplicate-call"),
        (Status::ToolBudget, "tool-budget"),
        (Status::DecisionBudget, "decision-budget"),
    ] {
        assert_eq!((status.as_str(), status.to_string().as_str()), (said, said));
    }
    for (reason, said) in [
        (RejectReason::InvalidPolicyAction, "invalid-policy-action"),
        (RejectReason::DuplicateCallId, "duplicate-call-id"),
        (RejectReason::ToolBudget, "tool-budget"),
    ] {
        assert_eq!(reason.as_str(), said);
    }
    assert_eq!(
        ToolSetError::Duplicate.to_string(),
        "tool name registered twice"
    );
    assert_eq!(ToolSetError::Full.to_string(), "more than 8 tools");
    let invalid = ToolSet::<8>::new().try_add("1a").unwrap_err();
    assert!(invalid.to_string().starts_with("tool name "), "{invalid}");
    assert!(
        invalid.to_string().contains(Identifier::PATTERN),
        "{invalid}"
    );
    assert_eq!(
        RunError::Stopped(Status::Final).to_string(),
        "the run has stopped (final)"
    );
    assert_eq!(
        RunError::AwaitingOutcome.to_string(),
        "a tool outcome is awaited before the next decision"
    );
    assert_eq!(
        RunError::NoPendingCall.to_string(),
        "this run awaits no such tool call"
    );
}

/// `SPEC A2`: the run's budgets are checked when they are made, and a
/// budget out of range is refused with the range it must be in (what
/// `budgetgate run` and the device console print). Found by
/// cargo-mutants (a rerun over the whole-core shard 1/4's functions).
#[test]
fn budgets_out_of_range_are_refused_with_their_range() {
    assert_eq!(RunLimits::new(0, 4), Err(RunLimitsError::MaxDecisions));
    assert_eq!(RunLimits::new(33, 4), Err(RunLimitsError::MaxDecisions));
    assert_eq!(RunLimits::new(8, 17), Err(RunLimitsError::MaxToolCalls));
    assert!(RunLimits::new(32, 16).is_ok() && RunLimits::new(1, 0).is_ok());
    assert_eq!(
        RunLimitsError::MaxDecisions.to_string(),
        "max_decisions must be an integer 1..=32"
    );
    assert_eq!(
        RunLimitsError::MaxToolCalls.to_string(),
        "max_tool_calls must be an integer 0..=16"
    );
}

#[test]
fn thirty_two_rounds_fill_the_trace_exactly() {
    let mut run: Run = Run::new(RunLimits::new(32, 16).unwrap(), ToolSet::new());
    for i in 0..16 {
        let proposal = add(&format!("c{i}"));
        let v = run.decide(Some(&proposal)).unwrap();
        assert!(matches!(
            v,
            Verdict::UnknownTool {
                progress: Progress::Continue,
                ..
            }
        ));
    }
    // 16 attempts used: every later tool round is refused with tool-budget.
    let proposal = add("cx");
    assert_eq!(
        run.decide(Some(&proposal)).map(|v| v.status()),
        Ok(Some(Status::ToolBudget))
    );
    assert_eq!(run.trace().len(), 17);
}
