//! The turn gate's tests (`SPEC C`).

use super::*;

type Gate = TurnGate<4, 8, 4>;

fn fp(json: &str) -> Option<ArgsFingerprint> {
    ArgsFingerprint::of_json(json.as_bytes(), &mut [0u8; 128]).ok()
}

fn call<'a>(id: &'a str, name: &'a str, args: &'a str) -> ProposedCall<'a> {
    ProposedCall {
        call_id: id,
        name,
        arguments: fp(args),
        input: args.as_bytes(),
    }
}

fn rules() -> ToolRules<4> {
    let mut r = ToolRules::new();
    r.try_add("search", ToolRule::Run).unwrap();
    r.try_add("refund", ToolRule::NeedsApproval).unwrap();
    r
}

fn usage(total: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: total,
        ..TokenUsage::ZERO
    }
}

fn gate(limits: TurnLimits) -> Gate {
    Gate::new(limits, rules(), 1_000)
}

/// Begins a call at `now` and records a `tool_use` response of `tokens`.
fn tool_turn(g: &mut Gate, now: u64, tokens: u64) {
    assert!(matches!(g.begin_call(now), Ok(Admission::Proceed { .. })));
    g.record(usage(tokens), StopReason::ToolUse).unwrap();
}

#[test]
fn defaults_are_the_reference_defaults() {
    let l = TurnLimits::DEFAULT;
    assert_eq!(
        (l.max_model_calls, l.max_tokens, l.max_millis, l.max_repeats),
        (15, 150_000, 120_000, 2)
    );
    assert_eq!(l.max_tool_calls, None);
    assert_eq!(l.token_mode, TokenMode::AfterTheFact);
}

#[test]
fn step_limit_reached_exactly_stops_before_the_next_call() {
    let mut g = gate(TurnLimits {
        max_model_calls: 2,
        ..TurnLimits::DEFAULT
    });
    for now in [1_000, 1_001] {
        tool_turn(&mut g, now, 1);
        assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    }
    let Ok(Admission::Exhausted(e)) = g.begin_call(1_002) else {
        panic!("third call must be refused")
    };
    assert_eq!(e.reason, ExhaustReason::Steps);
    assert_eq!(e.to_string(), "step limit (2)");
    assert!(matches!(g.status(), RunStatus::Incomplete(_)));
    assert_eq!(
        g.begin_call(1_003),
        Err(AdmitError::NotReady(GatePhase::Finished))
    );
}

#[test]
fn token_limit_uses_greater_or_equal() {
    let limits = TurnLimits {
        max_tokens: 100,
        ..TurnLimits::DEFAULT
    };
    // One token below: the next call is allowed.
    let mut g = gate(limits);
    tool_turn(&mut g, 1_000, 99);
    g.finish_turn().unwrap();
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    // Exactly at the limit: refused.
    let mut g = gate(limits);
    tool_turn(&mut g, 1_000, 100);
    g.finish_turn().unwrap();
    let Ok(Admission::Exhausted(e)) = g.begin_call(1_000) else {
        panic!("at the limit")
    };
    assert_eq!(e.reason, ExhaustReason::Tokens);
    assert_eq!(e.usage.total(), 100);
}

#[test]
fn time_limit_uses_greater_or_equal_and_is_checked_after_tokens() {
    let limits = TurnLimits {
        max_millis: 500,
        max_tokens: 10,
        ..TurnLimits::DEFAULT
    };
    let g = gate(limits);
    assert_eq!(g.check(1_499), None);
    assert_eq!(g.check(1_500).map(|e| e.reason), Some(ExhaustReason::Time));
    // A clock that goes back counts as no time.
    assert_eq!(g.check(10), None);
    assert_eq!(g.check_time(1_499), None);
    assert_eq!(
        g.check_time(1_500).map(|e| (e.reason, e.elapsed_ms)),
        Some((ExhaustReason::Time, 500))
    );
    let mut g = gate(limits);
    tool_turn(&mut g, 1_000, 10);
    g.finish_turn().unwrap();
    // Both tokens and time are reached: tokens is reported, as in agotado().
    assert_eq!(
        g.check(5_000).map(|e| e.reason),
        Some(ExhaustReason::Tokens)
    );
    // Mid-turn, only time matters: the tokens limit waits for the next call.
    assert_eq!(g.check_time(1_400), None);
}

#[test]
fn default_mode_overshoots_by_one_call_reserve_mode_refuses() {
    let limits = TurnLimits {
        max_tokens: 1_000,
        ..TurnLimits::DEFAULT
    };
    // Default: 900 used, the next call is allowed and ends at 1 400.
    let mut g = gate(limits);
    tool_turn(&mut g, 1_000, 900);
    g.finish_turn().unwrap();
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record(usage(500), StopReason::EndTurn).unwrap();
    assert_eq!(g.usage().total(), 1_400);

    // Reserve: the same call declares its worst case (input 400 + max_tokens 100).
    let mut g = gate(TurnLimits {
        token_mode: TokenMode::Reserve,
        ..limits
    });
    assert_eq!(g.begin_call(1_000), Err(AdmitError::ReservationRequired));
    assert!(matches!(
        g.begin_reserved_call(1_000, 1_000),
        Ok(Admission::Proceed { .. })
    ));
    g.record(usage(900), StopReason::ToolUse).unwrap();
    g.finish_turn().unwrap();
    // 900 + 100 = 1 000 fits exactly; 900 + 101 does not.
    let mut fits = g.clone();
    assert!(matches!(
        fits.begin_reserved_call(1_000, 100),
        Ok(Admission::Proceed { .. })
    ));
    let Ok(Admission::Exhausted(e)) = g.begin_reserved_call(1_000, 101) else {
        panic!("worst case passes the limit")
    };
    assert_eq!(e.reason, ExhaustReason::TokenReserve);
    assert_eq!(e.worst_case, 101);
    assert!(g.usage().total() <= 1_000);
}

#[test]
fn reservation_overrun_is_recorded_not_hidden() {
    let mut g = gate(TurnLimits {
        token_mode: TokenMode::Reserve,
        ..TurnLimits::DEFAULT
    });
    g.begin_reserved_call(1_000, 50).unwrap();
    let r = g.record(usage(70), StopReason::EndTurn).unwrap();
    assert_eq!(r.over_reservation, 20);
    assert_eq!(r.usage.total(), 70);
}

/// `SPEC E` (cost budget): the cost of each response is counted in the
/// ledger and checked with `>=` before the next call, after time.
#[test]
fn cost_limit_stops_before_the_next_call_at_or_above_it() {
    let limits = TurnLimits {
        max_cost_micros: Some(1_000),
        ..TurnLimits::DEFAULT
    };
    let mut g = gate(limits);
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record_priced(usage(10), StopReason::ToolUse, Some(999))
        .unwrap();
    g.finish_turn().unwrap();
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record_priced(usage(10), StopReason::ToolUse, Some(1))
        .unwrap();
    g.finish_turn().unwrap();
    assert_eq!(g.cost_micros(), 1_000);
    let Ok(Admission::Exhausted(e)) = g.begin_call(1_000) else {
        panic!("at the cost limit")
    };
    assert_eq!(
        (e.reason, e.cost_micros, e.limit),
        (ExhaustReason::Cost, 1_000, 1_000)
    );
    assert_eq!(e.reason.as_str(), "cost");
    // Tokens are reported first when both are reached, as in agotado().
    let mut g = gate(TurnLimits {
        max_tokens: 10,
        ..limits
    });
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record_priced(usage(10), StopReason::ToolUse, Some(5_000))
        .unwrap();
    g.finish_turn().unwrap();
    assert_eq!(
        g.check(1_000).map(|e| e.reason),
        Some(ExhaustReason::Tokens)
    );
}

/// `SPEC E` (cost budget): a response without a price never counts as
/// free: with a cost limit it stops the run before the next call;
/// without one it changes nothing.
#[test]
fn an_unpriced_response_stops_a_run_that_has_a_cost_limit() {
    let mut g = gate(TurnLimits {
        max_cost_micros: Some(1_000_000),
        ..TurnLimits::DEFAULT
    });
    tool_turn(&mut g, 1_000, 10);
    g.finish_turn().unwrap();
    let Ok(Admission::Exhausted(e)) = g.begin_call(1_000) else {
        panic!("an unpriced response under a cost limit")
    };
    assert_eq!(e.reason.as_str(), "unpriced-model");
    assert!(e.to_string().contains("never counts a call as free"));
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 10);
    g.finish_turn().unwrap();
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
}

/// `SPEC E` (per-tool caps): a tool's own cap refuses `tool-cap` past
/// it (equality allowed), after repetition and the tool-attempt budget,
/// and a capped-out call is not an attempt; other tools go on.
#[test]
fn a_tool_cap_refuses_past_it_and_leaves_other_tools_alone() {
    let mut g = gate(TurnLimits {
        max_tool_calls: Some(3),
        ..TurnLimits::DEFAULT
    });
    g.try_add_cap(ToolName::new("search").unwrap(), 1).unwrap();
    assert!(g.try_add_cap(ToolName::new("search").unwrap(), 2).is_err());
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", r#"{"q":1}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("a", ToolOutcome::Ok).unwrap();
    assert_eq!(
        g.propose(&call("b", "search", r#"{"q":2}"#)),
        Ok(CallVerdict::Refused(RefusalReason::ToolCap))
    );
    assert_eq!(g.tool_attempts(), 1);
    assert_eq!(
        g.propose(&call("c", "refund", r#"{"n":1}"#)),
        Ok(CallVerdict::NeedsApproval)
    );
    g.approve("c", false).unwrap();
    assert_eq!(g.tool_attempts(), 2);
    assert_eq!(g.refusals().get(RefusalReason::ToolCap), 1);
    assert_eq!(g.ledger().counts()[0].used(), 1);
    assert_eq!(g.rules().cap("search"), Some(1));
}

/// `SPEC C` reserve mode on the ledger: the worst case is held while the
/// call is in flight and committed with the real usage.
#[test]
fn a_reservation_is_held_in_flight_and_committed_with_the_real_usage() {
    let mut g = gate(TurnLimits {
        token_mode: TokenMode::Reserve,
        max_tokens: 1_000,
        ..TurnLimits::DEFAULT
    });
    g.begin_reserved_call(1_000, 600).unwrap();
    assert_eq!(g.ledger().reserved(crate::budget::Limit::Tokens), 600);
    g.record(usage(200), StopReason::ToolUse).unwrap();
    assert_eq!(g.ledger().reserved(crate::budget::Limit::Tokens), 0);
    assert_eq!(g.ledger().used(crate::budget::Limit::Tokens), 200);
    assert_eq!(g.remaining_tokens(), 800);
}

#[test]
fn third_identical_call_is_refused_whatever_the_key_order() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("c1", "search", r#"{"q":"x","n":1}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("c1", ToolOutcome::Ok).unwrap();
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("c2", "search", r#"{"n":1,"q":"x"}"#)),
        Ok(CallVerdict::Execute)
    );
    // 1.0 is not 1: a different call, allowed.
    assert_eq!(
        g.propose(&call("c3", "search", r#"{"n":1.0,"q":"x"}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("c2", ToolOutcome::Ok).unwrap();
    g.report("c3", ToolOutcome::Ok).unwrap();
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("c4", "search", r#"{ "q" : "x", "n" : 1 }"#)),
        Ok(CallVerdict::Refused(RefusalReason::Repeat))
    );
    // Refused calls are answered already; finishing needs nothing more.
    assert_eq!(
        g.refusal_result("c4").map(|r| r.content),
        Some(RefusalReason::Repeat.message())
    );
    assert_eq!(
        g.report("c4", ToolOutcome::Ok),
        Err(ReportError::AlreadyAnswered)
    );
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert_eq!(g.refusals().get(RefusalReason::Repeat), 1);
    // The same arguments under another tool name are another call.
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("c5", "refund", r#"{"q":"x","n":1}"#)),
        Ok(CallVerdict::NeedsApproval)
    );
}

#[test]
fn refused_approval_is_answered_and_never_executed() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    let refund = call("r1", "refund", r#"{"order":7}"#);
    assert_eq!(g.propose(&refund), Ok(CallVerdict::NeedsApproval));
    // Not approved yet: no result may be reported, and the turn cannot end.
    assert_eq!(
        g.report("r1", ToolOutcome::Ok),
        Err(ReportError::AwaitingApproval)
    );
    assert_eq!(g.finish_turn(), Err(FinishError::Unanswered(1)));
    assert_eq!(
        g.approve("r1", false),
        Ok(CallVerdict::Refused(RefusalReason::ApprovalRefused))
    );
    assert_eq!(
        g.report("r1", ToolOutcome::Ok),
        Err(ReportError::AlreadyAnswered)
    );
    assert_eq!(
        g.approve("r1", true),
        Err(ApprovalError::NotAwaitingApproval)
    );
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    // With an approver answering at once.
    tool_turn(&mut g, 1_000, 1);
    let mut yes = |_: &ProposedCall<'_>| ApprovalAnswer::Approve;
    assert_eq!(
        g.propose_with(&call("r2", "refund", r#"{"order":8}"#), &mut yes),
        Ok(CallVerdict::Execute)
    );
    let mut no = |c: &ProposedCall<'_>| {
        assert_eq!(c.input, br#"{"order":9}"#);
        ApprovalAnswer::Refuse
    };
    assert_eq!(
        g.propose_with(&call("r3", "refund", r#"{"order":9}"#), &mut no),
        Ok(CallVerdict::Refused(RefusalReason::ApprovalRefused))
    );
    let mut later = |_: &ProposedCall<'_>| ApprovalAnswer::Later;
    assert_eq!(
        g.propose_with(&call("r4", "search", "{}"), &mut later),
        Ok(CallVerdict::Execute)
    );
}

#[test]
fn max_tokens_turn_never_executes_its_tool_call() {
    let mut g = gate(TurnLimits::DEFAULT);
    g.begin_call(1_000).unwrap();
    g.record(usage(10), StopReason::MaxTokens).unwrap();
    // The arguments were cut off mid-way; even readable ones never run.
    let cut = ProposedCall {
        call_id: "t1",
        name: "search",
        arguments: None,
        input: br#"{"q":"unfinis"#,
    };
    assert_eq!(
        g.propose(&cut),
        Ok(CallVerdict::Refused(RefusalReason::CutOff))
    );
    assert_eq!(
        g.propose(&call("t2", "search", r#"{"q":"x"}"#)),
        Ok(CallVerdict::Refused(RefusalReason::CutOff))
    );
    assert_eq!(
        g.report("t1", ToolOutcome::Ok),
        Err(ReportError::AlreadyAnswered)
    );
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Stopped(StopReason::MaxTokens)));
    assert_eq!(g.status(), RunStatus::Error(StopReason::MaxTokens));
    assert_eq!(g.tool_attempts(), 0);
    // A new question on the same budget (e.g. with a larger max_tokens).
    g.resume().unwrap();
    assert_eq!(g.begin_call(1_000), Ok(Admission::Proceed { call: 1 }));
}

#[test]
fn pause_turn_continues_without_running_anything() {
    let mut g = gate(TurnLimits::DEFAULT);
    g.begin_call(1_000).unwrap();
    g.record(usage(10), StopReason::PauseTurn).unwrap();
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert_eq!(g.status(), RunStatus::Running);
    assert_eq!(g.steps(), 1);
    // A client tool call in a paused turn is not run either.
    g.begin_call(1_000).unwrap();
    g.record(usage(10), StopReason::PauseTurn).unwrap();
    assert_eq!(
        g.propose(&call("p1", "search", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::NotToolTurn))
    );
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
}

#[test]
fn other_stop_reasons_end_with_an_error_status() {
    for reason in [
        "refusal",
        "stop_sequence",
        "model_context_window_exceeded",
        "brand_new_reason",
    ] {
        let mut g = gate(TurnLimits::DEFAULT);
        g.begin_call(1_000).unwrap();
        let stop = StopReason::parse(reason).unwrap();
        g.record(usage(1), stop).unwrap();
        assert_eq!(g.finish_turn(), Ok(TurnEnd::Stopped(stop)));
        assert_eq!(g.status(), RunStatus::Error(stop));
        assert_eq!(g.status().to_string(), format!("error: {reason}"));
    }
}

#[test]
fn two_parallel_calls_with_one_tool_attempt_left() {
    let mut g = gate(TurnLimits {
        max_tool_calls: Some(2),
        ..TurnLimits::DEFAULT
    });
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", r#"{"q":1}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("a", ToolOutcome::Ok).unwrap();
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    // One attempt left, two calls: the first in order gets it.
    assert_eq!(
        g.propose(&call("b", "search", r#"{"q":2}"#)),
        Ok(CallVerdict::Execute)
    );
    assert_eq!(
        g.propose(&call("c", "search", r#"{"q":3}"#)),
        Ok(CallVerdict::Refused(RefusalReason::ToolBudget))
    );
    assert_eq!(g.tool_attempts(), 2);
    assert_eq!(g.finish_turn(), Err(FinishError::Unanswered(1)));
    assert_eq!(
        g.unanswered()
            .map(|c| c.as_str())
            .collect::<std::vec::Vec<_>>(),
        ["b"]
    );
    g.report("b", ToolOutcome::Error).unwrap();
    assert_eq!(g.tool_errors(), 1);
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
}

/// `SPEC C`: the gate counts the executed calls that failed (whose
/// result is `Error: …`): each call reported failed, and no call
/// reported as having run well.
#[test]
fn only_calls_reported_failed_count_as_tool_errors() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    for (id, args) in [
        ("a", r#"{"q":1}"#),
        ("b", r#"{"q":2}"#),
        ("c", r#"{"q":3}"#),
    ] {
        assert_eq!(
            g.propose(&call(id, "search", args)),
            Ok(CallVerdict::Execute)
        );
    }
    assert_eq!(g.tool_errors(), 0);
    g.report("a", ToolOutcome::Ok).unwrap();
    assert_eq!(g.tool_errors(), 0);
    g.report("b", ToolOutcome::Error).unwrap();
    assert_eq!(g.tool_errors(), 1);
    g.report("c", ToolOutcome::Error).unwrap();
    assert_eq!(g.tool_errors(), 2);
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert_eq!(g.tool_errors(), 2, "counted over the run, not per turn");
}

/// `SPEC C`: the stop reason of a response is known while its turn is
/// open, whatever it is, and only then: not before a response, not while
/// a model call is in flight, not once the turn has ended.
#[test]
fn the_stop_reason_is_known_while_its_turn_is_open() {
    let mut g = gate(TurnLimits::DEFAULT);
    assert_eq!(g.stop_reason(), None);
    g.begin_call(1_000).unwrap();
    assert_eq!(g.stop_reason(), None);
    g.record(usage(1), StopReason::ToolUse).unwrap();
    assert_eq!(g.stop_reason(), Some(StopReason::ToolUse));
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert_eq!(g.stop_reason(), None);
    g.begin_call(1_000).unwrap();
    let other = StopReason::parse("brand_new_reason").unwrap();
    g.record(usage(1), other).unwrap();
    assert_eq!(g.stop_reason(), Some(other));
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Stopped(other)));
    assert_eq!(g.stop_reason(), None);
}

/// `SPEC C`: each refused call of a response is answered with the error
/// result of its own refusal, under its own id; a call that was not
/// refused (running, awaiting the approver) or never proposed has no
/// such result, until the approver says no.
#[test]
fn each_refused_call_is_answered_with_its_own_refusal() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", "{}")),
        Ok(CallVerdict::Execute)
    );
    assert_eq!(
        g.propose(&call("b", "delete_all", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::UnknownTool))
    );
    let unreadable = ProposedCall {
        arguments: None,
        ..call("c", "search", "{")
    };
    assert_eq!(
        g.propose(&unreadable),
        Ok(CallVerdict::Refused(RefusalReason::InvalidArguments))
    );
    assert_eq!(
        g.propose(&call("d", "refund", "{}")),
        Ok(CallVerdict::NeedsApproval)
    );
    for (id, reason) in [
        ("b", RefusalReason::UnknownTool),
        ("c", RefusalReason::InvalidArguments),
    ] {
        assert_eq!(
            g.refusal_result(id),
            Some(ErrorResult {
                call_id: id,
                content: reason.message()
            }),
            "{id}"
        );
    }
    for id in ["a", "d", "zzz"] {
        assert_eq!(g.refusal_result(id), None, "{id}");
    }
    g.approve("d", false).unwrap();
    assert_eq!(
        g.refusal_result("d"),
        Some(ErrorResult {
            call_id: "d",
            content: RefusalReason::ApprovalRefused.message()
        })
    );
}

#[test]
fn server_tool_uses_take_tool_attempts_only_when_counted() {
    let mut g = gate(TurnLimits {
        max_tool_calls: Some(2),
        ..TurnLimits::DEFAULT
    });
    // Outside a turn: a typed error, nothing counted.
    assert!(g.count_server_calls(1).is_err());
    assert_eq!(g.tool_attempts(), 0);
    tool_turn(&mut g, 1_000, 1);
    g.count_server_calls(1).unwrap();
    assert_eq!(
        g.propose(&call("a", "search", r#"{"q":1}"#)),
        Ok(CallVerdict::Execute)
    );
    // Two attempts used (one server, one client): the next is refused.
    assert_eq!(
        g.propose(&call("b", "search", r#"{"q":2}"#)),
        Ok(CallVerdict::Refused(RefusalReason::ToolBudget))
    );
    g.report("a", ToolOutcome::Ok).unwrap();
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert!(g.count_server_calls(1).is_err());
}

#[test]
fn results_for_unknown_or_answered_ids_are_rejected() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", "{}")),
        Ok(CallVerdict::Execute)
    );
    assert_eq!(
        g.report("zzz", ToolOutcome::Ok),
        Err(ReportError::UnknownCallId)
    );
    g.report("a", ToolOutcome::Ok).unwrap();
    assert_eq!(
        g.report("a", ToolOutcome::Ok),
        Err(ReportError::AlreadyAnswered)
    );
    assert_eq!(g.approve("zzz", true), Err(ApprovalError::UnknownCallId));
    assert_eq!(
        g.propose(&call("a", "search", r#"{"x":1}"#)),
        Err(ProposeError::DuplicateCallId)
    );
    assert_eq!(
        g.propose(&call("bad id", "search", "{}")),
        Err(ProposeError::InvalidCallId(NameError::BadCharacter))
    );
    g.finish_turn().unwrap();
    // The previous response's id is unknown once the next response is recorded.
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.report("a", ToolOutcome::Ok),
        Err(ReportError::UnknownCallId)
    );
}

#[test]
fn unknown_tools_and_unreadable_arguments_are_refused() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "delete_all", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::UnknownTool))
    );
    assert_eq!(
        g.tool_attempts(),
        1,
        "an unknown tool still counts an attempt"
    );
    let bad = ProposedCall {
        call_id: "b",
        name: "search",
        arguments: None,
        input: b"{",
    };
    assert_eq!(
        g.propose(&bad),
        Ok(CallVerdict::Refused(RefusalReason::InvalidArguments))
    );
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
}

#[test]
fn a_name_outside_the_grammar_is_never_executed() {
    // Every other name runs (the rule for others), and `refund` needs
    // approval: a look-alike of `refund` must neither run nor be asked.
    let mut rules = rules();
    rules.set_others(ToolRule::Run);
    let mut g = TurnGate::<16, 8, 4>::new(
        TurnLimits {
            max_tool_calls: Some(10),
            ..TurnLimits::DEFAULT
        },
        rules,
        1_000,
    );
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record(usage(1), StopReason::ToolUse).unwrap();
    let long = "r".repeat(65);
    let names = [
        "refund ",
        "",
        "ref\0und",
        "refund\u{200b}",
        " refund",
        "réfund",
        long.as_str(),
    ];
    let mut asked = false;
    let mut approver = |_: &ProposedCall<'_>| {
        asked = true;
        ApprovalAnswer::Approve
    };
    for (i, name) in names.iter().enumerate() {
        let id = format!("n{i}");
        assert_eq!(
            g.propose_with(&call(&id, name, "{}"), &mut approver),
            Ok(CallVerdict::Refused(RefusalReason::InvalidName)),
            "{name:?}"
        );
        assert_eq!(
            g.refusal_result(&id).map(|r| r.content),
            Some(RefusalReason::InvalidName.message())
        );
    }
    assert!(!asked, "the approver is never asked about an invalid name");
    // Neither an attempt nor a repetition was counted.
    assert_eq!(g.tool_attempts(), 0);
    assert_eq!(
        g.refusals().get(RefusalReason::InvalidName),
        names.len() as u32
    );
    // The exact name still goes to its rule; 64 characters are allowed.
    assert_eq!(
        g.propose(&call("ok1", "refund", "{}")),
        Ok(CallVerdict::NeedsApproval)
    );
    assert_eq!(
        g.propose(&call("ok2", &"r".repeat(64), "{}")),
        Ok(CallVerdict::Execute)
    );
}

#[test]
fn a_call_id_of_an_earlier_response_is_refused_and_answered() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("t1", "search", r#"{"x":1}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("t1", ToolOutcome::Ok).unwrap();
    // Refused ids are remembered too.
    assert_eq!(
        g.propose(&call("t2", "delete_all", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::UnknownTool))
    );
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    for id in ["t1", "t2"] {
        assert_eq!(
            g.propose(&call(id, "search", r#"{"x":2}"#)),
            Ok(CallVerdict::Refused(RefusalReason::DuplicateCallId)),
            "{id}"
        );
        // Answered, with a text the model can act on; it never runs.
        assert_eq!(
            g.refusal_result(id).map(|r| r.content),
            Some(RefusalReason::DuplicateCallId.message())
        );
        assert_eq!(
            g.report(id, ToolOutcome::Ok),
            Err(ReportError::AlreadyAnswered)
        );
    }
    // Not an attempt, not a repetition: a fresh id with the same call runs.
    assert_eq!(g.tool_attempts(), 2);
    assert_eq!(
        g.propose(&call("t3", "search", r#"{"x":2}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("t3", ToolOutcome::Ok).unwrap();
    assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
    assert_eq!(g.refusals().get(RefusalReason::DuplicateCallId), 2);
    // Also across a new question on the same budget, and in a cut-off turn.
    g.begin_call(1_000).unwrap();
    g.record(usage(1), StopReason::EndTurn).unwrap();
    g.finish_turn().unwrap();
    g.resume().unwrap();
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("t3", "search", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::DuplicateCallId))
    );
}

/// Issue 30: the turn gate and the hook disagreed on a malformed name
/// with a reused id (`duplicate-call-id` here, `invalid-name` in the
/// hook). Every front-end checks the name first (`SPEC E`, one check
/// order); the id is still remembered.
#[test]
fn a_malformed_name_on_a_reused_id_is_invalid_name_as_in_every_front_end() {
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("t1", "search", r#"{"x":1}"#)),
        Ok(CallVerdict::Execute)
    );
    // The same id again in this response, with a bad name: answered
    // invalid-name (untracked), not an error.
    assert_eq!(
        g.propose(&call("t1", "bad name", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::InvalidName))
    );
    // With a good name it stays the caller's error.
    assert_eq!(
        g.propose(&call("t1", "search", "{}")),
        Err(ProposeError::DuplicateCallId)
    );
    g.report("t1", ToolOutcome::Ok).unwrap();
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    // An id of an earlier response with a bad name: invalid-name.
    assert_eq!(
        g.propose(&call("t1", "no/such", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::InvalidName))
    );
    // A new id with a bad name is remembered all the same.
    assert_eq!(
        g.propose(&call("t2", "a b", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::InvalidName))
    );
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("t2", "search", r#"{"x":2}"#)),
        Ok(CallVerdict::Refused(RefusalReason::DuplicateCallId))
    );
    assert_eq!(g.refusals().get(RefusalReason::InvalidName), 3);
}

#[test]
fn a_full_call_id_table_refuses_new_ids_and_never_forgets_one() {
    // 8 id slots: 6 ids fit, then every new id is refused.
    let mut g = TurnGate::<16, 16, 4, 8>::new(TurnLimits::DEFAULT, rules(), 1_000);
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record(usage(1), StopReason::ToolUse).unwrap();
    for i in 0..6 {
        let id = format!("c{i}");
        let args = format!(r#"{{"q":{i}}}"#);
        assert_eq!(
            g.propose(&call(&id, "search", &args)),
            Ok(CallVerdict::Execute)
        );
        g.report(&id, ToolOutcome::Ok).unwrap();
    }
    assert_eq!(
        g.propose(&call("c6", "search", r#"{"q":6}"#)),
        Ok(CallVerdict::Refused(RefusalReason::CallIdCapacity))
    );
    g.finish_turn().unwrap();
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Proceed { .. })));
    g.record(usage(1), StopReason::ToolUse).unwrap();
    // Old ids stay refused as reused, new ones as over capacity.
    assert_eq!(
        g.propose(&call("c0", "search", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::DuplicateCallId))
    );
    assert_eq!(
        g.propose(&call("c6", "search", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::CallIdCapacity))
    );
    assert_eq!(g.tool_attempts(), 6);
}

#[test]
fn closing_after_exhaustion_leaves_no_call_unanswered() {
    let mut g = gate(TurnLimits {
        max_millis: 1_000,
        ..TurnLimits::DEFAULT
    });
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", r#"{"q":1}"#)),
        Ok(CallVerdict::Execute)
    );
    assert_eq!(
        g.propose(&call("b", "refund", r#"{"q":1}"#)),
        Ok(CallVerdict::NeedsApproval)
    );
    assert_eq!(
        g.propose(&call("c", "search", r#"{"q":2}"#)),
        Ok(CallVerdict::Execute)
    );
    g.report("a", ToolOutcome::Ok).unwrap();
    // Time runs out while b awaits approval and c has not run.
    assert_eq!(g.check(2_000).map(|e| e.reason), Some(ExhaustReason::Time));
    let closing = g.close(2_000).unwrap();
    let ids: std::vec::Vec<_> = closing.unanswered().iter().map(|c| c.as_str()).collect();
    assert_eq!(ids, ["b", "c"]);
    assert!(matches!(
        closing.status(),
        RunStatus::Incomplete(Exhaustion {
            reason: ExhaustReason::Time,
            ..
        })
    ));
    assert_eq!(g.unanswered().count(), 0);
    assert_eq!(
        g.report("c", ToolOutcome::Ok),
        Err(ReportError::AlreadyAnswered)
    );
    assert_eq!(g.refusals().get(RefusalReason::BudgetExhausted), 2);
    assert_eq!(g.resume(), Err(ResumeError::Exhausted));
    let message = serde_json_core_free_encode(&closing);
    assert!(message.starts_with(
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","is_error":true,"content":"Budget exhausted, not executed."},"#
    ));
    assert!(message.ends_with(&format!(
        r#"{{"type":"text","text":"{}"}}]}}"#,
        Closing::<4>::SUMMARY_REQUEST
    )));
}

#[test]
fn closing_is_refused_mid_call_and_after_completion() {
    let mut g = gate(TurnLimits::DEFAULT);
    g.begin_call(1_000).unwrap();
    assert_eq!(g.close(1_000), Err(CloseError::AwaitingResponse));
    g.record(usage(1), StopReason::EndTurn).unwrap();
    g.finish_turn().unwrap();
    assert_eq!(g.close(1_000), Err(CloseError::Complete));
    // Closing between turns with no limit reached says so.
    let mut g = gate(TurnLimits::DEFAULT);
    let closing = g.close(1_000).unwrap();
    assert!(closing.unanswered().is_empty());
    assert!(matches!(
        g.status(),
        RunStatus::Incomplete(Exhaustion {
            reason: ExhaustReason::Closed,
            ..
        })
    ));
}

#[test]
fn capacities_refuse_rather_than_forget() {
    // 4 calls per response, 8 distinct calls remembered.
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 1);
    for i in 0..4 {
        let id = format!("c{i}");
        let args = format!(r#"{{"q":{i}}}"#);
        assert_eq!(
            g.propose(&call(&id, "search", &args)),
            Ok(CallVerdict::Execute)
        );
        g.report(&id, ToolOutcome::Ok).unwrap();
    }
    assert_eq!(
        g.propose(&call("c4", "search", r#"{"q":4}"#)),
        Ok(CallVerdict::Refused(RefusalReason::TurnCapacity))
    );
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    for i in 4..8 {
        let id = format!("d{i}");
        let args = format!(r#"{{"q":{i}}}"#);
        assert_eq!(
            g.propose(&call(&id, "search", &args)),
            Ok(CallVerdict::Execute)
        );
        g.report(&id, ToolOutcome::Ok).unwrap();
    }
    g.finish_turn().unwrap();
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("e", "search", r#"{"q":99}"#)),
        Ok(CallVerdict::Refused(RefusalReason::RepeatCapacity))
    );
    // A known call is still counted normally.
    assert_eq!(
        g.propose(&call("f", "search", r#"{"q":0}"#)),
        Ok(CallVerdict::Execute)
    );
}

#[test]
fn out_of_order_calls_are_typed_errors() {
    let mut g = gate(TurnLimits::DEFAULT);
    assert_eq!(
        g.record(usage(1), StopReason::EndTurn),
        Err(RecordError::NotAwaitingResponse(GatePhase::Ready))
    );
    assert_eq!(
        g.propose(&call("a", "search", "{}")),
        Err(ProposeError::NotInTurn(GatePhase::Ready))
    );
    assert_eq!(
        g.finish_turn(),
        Err(FinishError::NotInTurn(GatePhase::Ready))
    );
    g.begin_call(1_000).unwrap();
    assert_eq!(
        g.begin_call(1_000),
        Err(AdmitError::NotReady(GatePhase::AwaitingResponse))
    );
    g.record(usage(1), StopReason::ToolUse).unwrap();
    g.propose(&call("a", "search", "{}")).unwrap();
    assert_eq!(
        g.begin_call(1_000),
        Err(AdmitError::NotReady(GatePhase::InTurn))
    );
    assert_eq!(g.resume(), Err(ResumeError::NotFinished(GatePhase::InTurn)));
}

#[test]
fn zero_repeats_refuses_every_call_and_zero_steps_every_model_call() {
    let mut g = gate(TurnLimits {
        max_repeats: 0,
        ..TurnLimits::DEFAULT
    });
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(
        g.propose(&call("a", "search", "{}")),
        Ok(CallVerdict::Refused(RefusalReason::Repeat))
    );
    let mut g = gate(TurnLimits {
        max_model_calls: 0,
        ..TurnLimits::DEFAULT
    });
    assert!(matches!(g.begin_call(1_000), Ok(Admission::Exhausted(_))));
}

/// A tiny JSON writer for the closing message, via the core's encoder.
fn serde_json_core_free_encode<T: serde::Serialize>(value: &T) -> std::string::String {
    let mut buf = [0u8; 1024];
    let n = crate::pyjson::encode(value, &mut buf).unwrap();
    std::string::String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn gate_size_is_modest() {
    let size = core::mem::size_of::<TurnGate>();
    println!("TurnGate = {size} B");
    // About 5.5 KiB before loop detection; its window of 32 calls
    // (fingerprint, tool name, outcome) and each tracked call's fingerprint
    // take about 4.5 KiB more.
    assert!(size <= 10 * 1024 + 512, "TurnGate grew to {size} bytes");
}

/// `[loops]` in the turn gate (issue 32): with `set_loops`, a call whose
/// earlier copies all returned the same result (`report_result`) is refused
/// `no-progress` at its threshold; without it, or with a changed result,
/// nothing is; a call reported with `report` (no result) matches nothing.
#[test]
fn loops_refuse_a_call_whose_results_do_not_change() {
    let limits = TurnLimits {
        max_repeats: 100,
        ..TurnLimits::DEFAULT
    };
    use crate::engine;
    let same = engine::loops::Outcome::of(b"pending", false);
    let run = |loops: engine::LoopRules, results: [engine::loops::Outcome; 2]| {
        let mut g = gate(limits);
        g.set_loops(loops);
        let mut verdicts = std::vec::Vec::new();
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            tool_turn(&mut g, 1_000 + i as u64, 1);
            let v = g.propose(&call(id, "search", r#"{"q":1}"#)).unwrap();
            if v == CallVerdict::Execute {
                g.report_result(id, results[i.min(1)]).unwrap();
            }
            verdicts.push(v);
            assert_eq!(g.finish_turn(), Ok(TurnEnd::Continue));
        }
        verdicts
    };
    let on = engine::LoopRules {
        same_outcome: Some(3),
        ..engine::LoopRules::OFF
    };
    let refused = CallVerdict::Refused(RefusalReason::NoProgress);
    let go = CallVerdict::Execute;
    assert_eq!(run(on, [same, same]), [go, go, refused]);
    assert_eq!(run(engine::LoopRules::OFF, [same, same]), [go, go, go]);
    let changed = engine::loops::Outcome::of(b"done", false);
    assert_eq!(run(on, [changed, same]), [go, go, go]);
    // An error result counts as the run's tool error too.
    let mut g = gate(limits);
    g.set_loops(on);
    tool_turn(&mut g, 1_000, 1);
    assert_eq!(g.propose(&call("e", "search", "{}")), Ok(go));
    g.report_result("e", engine::loops::Outcome::of(b"boom", true))
        .unwrap();
    assert_eq!(g.tool_errors(), 1);
    assert_eq!(
        g.report_result("e", same),
        Err(ReportError::AlreadyAnswered)
    );
}

/// Issue 30 (one rule book): a sub-agent's call is decided by the engine
/// with the sub-agent's own ledger: past its own limits, its calls are
/// refused `budget-exhausted` (after the name and id checks, in the
/// engine's one order), under them they run and count in it; the
/// session's calls are not affected.
#[test]
fn a_sub_agents_call_is_checked_against_its_own_ledger_in_the_engines_order() {
    use crate::budget::{Ledger, Limit};
    let mut g = gate(TurnLimits::DEFAULT);
    tool_turn(&mut g, 1_000, 10);
    let mut spent: Ledger<4> = Ledger::new(0);
    spent.set_max(Limit::Tokens, Some(100));
    spent.record(Limit::Tokens, 100);
    assert_eq!(
        g.propose_for(&call("a", "search", "{}"), Some(&mut spent)),
        Ok(CallVerdict::Refused(RefusalReason::BudgetExhausted))
    );
    assert_eq!(
        g.propose_for(&call("b", "bad name", "{}"), Some(&mut spent)),
        Ok(CallVerdict::Refused(RefusalReason::InvalidName)),
        "the name first, as in every front-end"
    );
    assert_eq!(spent.used(Limit::ToolCalls), 0, "nothing counted");
    let mut fresh: Ledger<4> = Ledger::new(0);
    fresh.set_max(Limit::Tokens, Some(100));
    fresh.record(Limit::Tokens, 99);
    assert_eq!(
        g.propose_for(&call("c", "search", r#"{"q":1}"#), Some(&mut fresh)),
        Ok(CallVerdict::Execute)
    );
    assert_eq!(fresh.used(Limit::ToolCalls), 1, "its attempt counts in it");
    // Its own tool calls: none left.
    let mut no_tools: Ledger<4> = Ledger::new(0);
    no_tools.set_max(Limit::ToolCalls, Some(0));
    assert_eq!(
        g.propose_for(&call("e", "search", r#"{"q":3}"#), Some(&mut no_tools)),
        Ok(CallVerdict::Refused(RefusalReason::ToolBudget))
    );
}
