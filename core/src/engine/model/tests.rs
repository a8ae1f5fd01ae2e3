//! The model-call side's tests: each limit on both sides of its boundary,
//! the order, the sub-agent, reserve mode, and the counting of a response.

use super::*;
use crate::engine::tests::{Broken, Mem};

fn session(max_calls: u64, max_tokens: u64) -> Mem {
    let mut m = Mem::new();
    m.session.set_max(Limit::ModelCalls, Some(max_calls));
    m.session.set_max(Limit::Tokens, Some(max_tokens));
    m
}

fn response(tokens: u64, cost: Option<u64>) -> Response<'static> {
    Response {
        model: "m",
        tokens,
        cost_micros: cost,
        new_call: true,
    }
}

fn stop(m: &mut Mem, now: u64, worst: Option<u64>) -> Option<ModelStop> {
    before_model_call(m, now, worst.map(WorstCase::tokens))
        .unwrap()
        .err()
}

fn admit(m: &mut Mem, worst: Option<u64>) -> Admitted {
    before_model_call(m, 0, worst.map(WorstCase::tokens))
        .unwrap()
        .unwrap()
}

#[test]
fn a_call_is_made_while_the_tokens_are_below_the_limit_and_not_at_it() {
    let mut m = session(10, 100);
    m.session.record(Limit::Tokens, 99);
    assert_eq!(stop(&mut m, 0, None), None);
    m.session.record(Limit::Tokens, 1);
    let s = stop(&mut m, 0, None).unwrap();
    assert_eq!(s.reason, ExhaustReason::Tokens);
    assert_eq!(s.whose, Whose::Session);
    assert_eq!((s.exceeded.used, s.exceeded.max), (100, 100));
    assert_eq!(
        s.detail().to_string(),
        "budgetgate: the session's budget is spent: 100 of 100 tokens used (tokens), so no \
         further model call is made; stop and report the work done so far"
    );
}

#[test]
fn the_limits_are_checked_in_the_ledgers_order_steps_first() {
    let mut m = session(2, 100);
    m.session.set_max(Limit::Millis, Some(50));
    m.session.set_max(Limit::CostMicros, Some(7));
    m.session.record(Limit::ModelCalls, 2);
    m.session.record(Limit::Tokens, 100);
    m.session.record(Limit::CostMicros, 7);
    assert_eq!(stop(&mut m, 60, None).unwrap().reason, ExhaustReason::Steps);
    m.session.set_max(Limit::ModelCalls, Some(3));
    assert_eq!(
        stop(&mut m, 60, None).unwrap().reason,
        ExhaustReason::Tokens
    );
    m.session.set_max(Limit::Tokens, Some(101));
    // Time is read at `now`: 49 ms in, not yet; 50 ms in, spent.
    assert_eq!(stop(&mut m, 49, None).unwrap().reason, ExhaustReason::Cost);
    assert_eq!(stop(&mut m, 50, None).unwrap().reason, ExhaustReason::Time);
    m.session.set_max(Limit::CostMicros, Some(8));
    assert_eq!(stop(&mut m, 49, None), None);
}

#[test]
fn tool_attempts_do_not_stop_a_model_call() {
    let mut m = session(10, 100);
    m.session.set_max(Limit::ToolCalls, Some(1));
    m.session.record(Limit::ToolCalls, 5);
    assert_eq!(stop(&mut m, 0, None), None);
}

#[test]
fn a_sub_agents_own_limit_stops_its_calls_after_the_sessions() {
    let mut m = session(10, 100);
    let mut agent = Ledger::new(0);
    agent.set_max(Limit::Tokens, Some(20));
    agent.record(Limit::Tokens, 20);
    m.agent = Some(agent);
    let s = stop(&mut m, 0, None).unwrap();
    assert_eq!(
        (s.reason, s.whose),
        (ExhaustReason::Tokens, Whose::SubAgent)
    );
    m.session.record(Limit::ModelCalls, 10);
    assert_eq!(stop(&mut m, 0, None).unwrap().whose, Whose::Session);
}

#[test]
fn a_model_without_a_price_stops_the_next_call_in_cost_mode_only() {
    let mut m = session(10, 1_000);
    count_response(&mut m, Admitted::AFTER_THE_FACT, &response(10, None)).unwrap();
    assert!(!m.unpriced, "no cost limit: nothing to remember");
    assert_eq!(stop(&mut m, 0, None), None);
    assert_eq!(m.asked_unpriced, 0, "asked only under a cost limit");

    m.session.set_max(Limit::CostMicros, Some(500));
    count_response(&mut m, Admitted::AFTER_THE_FACT, &response(10, Some(40))).unwrap();
    assert!(!m.unpriced);
    assert_eq!(stop(&mut m, 0, None), None);
    count_response(&mut m, Admitted::AFTER_THE_FACT, &response(10, None)).unwrap();
    assert!(m.unpriced);
    let s = stop(&mut m, 0, None).unwrap();
    assert_eq!(s.reason, ExhaustReason::Unpriced);
    assert_eq!((s.exceeded.used, s.exceeded.max), (40, 500));
    assert_eq!(
        s.detail().to_string(),
        "budgetgate: the session's cost budget (500 micro-USD) cannot count a model that has \
         no price, so no further model call is made (unpriced-model)"
    );
    // A front-end that knows the model names it, and the price to add.
    assert_eq!(
        s.detail_for("claude-\"x\"").to_string(),
        "budgetgate: model \"claude-\\\"x\\\"\" has no price in the budget, and the session's \
         cost budget (500 micro-USD) never counts a call as free, so it is not made: add \
         [prices.\"claude-\\\"x\\\"\"] (input, output, cache_read, cache_write: USD per million \
         tokens) to the budget file (unpriced-model)"
    );
}

#[test]
fn reserve_mode_lets_a_worst_case_that_fits_exactly_and_holds_it() {
    let mut m = session(10, 100);
    m.session.record(Limit::Tokens, 40);
    let held = admit(&mut m, Some(60));
    assert_eq!(m.session.reserved(Limit::Tokens), 60);
    // A second call in flight finds nothing left.
    let s = stop(&mut m, 0, Some(1)).unwrap();
    assert_eq!(
        s.reason,
        ExhaustReason::Tokens,
        "used and reserved reach the limit"
    );
    count_response(&mut m, held, &response(25, None)).unwrap();
    assert_eq!(m.session.reserved(Limit::Tokens), 0);
    assert_eq!(m.session.used(Limit::Tokens), 65);
    assert_eq!(m.session.used(Limit::ModelCalls), 1);
}

#[test]
fn reserve_mode_refuses_a_worst_case_one_past_what_is_left() {
    let mut m = session(10, 100);
    m.session.record(Limit::Tokens, 40);
    let s = stop(&mut m, 0, Some(61)).unwrap();
    assert_eq!(s.reason, ExhaustReason::TokenReserve);
    assert_eq!(
        (s.exceeded.used, s.exceeded.max, s.worst_case),
        (40, 100, 61)
    );
    assert_eq!(m.session.reserved(Limit::Tokens), 0, "nothing held");
    assert_eq!(
        s.detail().to_string(),
        "budgetgate: this model call could use up to 61 tokens, and the session's token \
         budget has 60 of 100 left, so it is not made (token-reserve)"
    );
    // The model named or not, the sentence of any other stop is the same.
    assert_eq!(s.detail_for("m").to_string(), s.detail().to_string());
    // A call with no output bound at all (none in the request, none in the
    // budget): said so, and how to give one, not a worst case of 2^64 - 1.
    let unbounded = WorstCase {
        input: 5,
        output: u64::MAX,
        min_output: None,
    };
    let s = before_model_call(&mut m, 0, Some(unbounded))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (s.reason, s.worst_case),
        (ExhaustReason::TokenReserve, u64::MAX)
    );
    assert_eq!(
        s.detail().to_string(),
        "budgetgate: this model call sets no output bound (max_tokens), and the budget sets \
         no reserve_max_tokens, so its worst case cannot be reserved in the session's token \
         budget (60 of 100 left) and it is not made: set max_tokens in the request, or \
         reserve_max_tokens in the budget file (token-reserve)"
    );
}

fn lowerable(input: u64, output: u64, min: u64) -> Option<WorstCase> {
    Some(WorstCase {
        input,
        output,
        min_output: Some(min),
    })
}

#[test]
fn a_worst_case_that_does_not_fit_is_lowered_to_what_is_left_down_to_its_minimum() {
    let mut m = session(10, 100);
    m.session.record(Limit::Tokens, 40);
    // 60 left, 20 of them the input's: 40 for the reply.
    let held = before_model_call(&mut m, 0, lowerable(20, 50, 40))
        .unwrap()
        .unwrap();
    assert_eq!(held.lowered_output, Some(40));
    assert_eq!(m.session.reserved(Limit::Tokens), 60, "all that was left");
    count_response(&mut m, held, &response(30, None)).unwrap();
    assert_eq!(m.session.used(Limit::Tokens), 70);

    // 30 left, 20 the input's: 10 is one short of the minimum of 11.
    let s = before_model_call(&mut m, 0, lowerable(20, 50, 11))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (s.reason, s.worst_case, s.exceeded.used),
        (ExhaustReason::TokenReserve, 70, 70),
        "refused with its whole worst case named"
    );
    assert_eq!(m.session.reserved(Limit::Tokens), 0, "nothing held");
    let held = before_model_call(&mut m, 0, lowerable(20, 50, 10))
        .unwrap()
        .unwrap();
    assert_eq!(held.lowered_output, Some(10), "at the minimum: lowered");
}

#[test]
fn a_worst_case_that_fits_or_is_not_lowerable_is_kept_as_it_came() {
    let mut m = session(10, 100);
    let held = before_model_call(&mut m, 0, lowerable(20, 80, 1))
        .unwrap()
        .unwrap();
    assert_eq!(held.lowered_output, None, "fits exactly: not lowered");
    release(&mut m, held);
    let held = before_model_call(&mut m, 0, lowerable(20, 50, 1))
        .unwrap()
        .unwrap();
    assert_eq!(
        (held.lowered_output, m.session.reserved(Limit::Tokens)),
        (None, 70),
        "room to spare: its own bound, never raised"
    );
    release(&mut m, held);
    let refused = before_model_call(
        &mut m,
        0,
        Some(WorstCase {
            input: 20,
            output: 81,
            min_output: None,
        }),
    )
    .unwrap();
    assert_eq!(refused.unwrap_err().reason, ExhaustReason::TokenReserve);
    // No reply at all is never a useful one, whatever the minimum says;
    // nor is a reply when the input alone does not fit.
    m.session.record(Limit::Tokens, 80);
    for worst in [lowerable(20, 5, 0), lowerable(21, 5, 0)] {
        let s = before_model_call(&mut m, 0, worst).unwrap().unwrap_err();
        assert_eq!(s.reason, ExhaustReason::TokenReserve);
    }
    // Without a token limit nothing is lowered.
    let mut free = Mem::new();
    let held = before_model_call(&mut free, 0, lowerable(20, 1_000, 1))
        .unwrap()
        .unwrap();
    assert_eq!(held.lowered_output, None);
}

#[test]
fn a_sub_agent_with_less_left_lowers_the_reply_to_its_own_room() {
    let mut m = session(10, 1_000);
    let mut agent = Ledger::new(0);
    agent.set_max(Limit::Tokens, Some(50));
    m.agent = Some(agent);
    let held = before_model_call(&mut m, 0, lowerable(10, 100, 5))
        .unwrap()
        .unwrap();
    assert_eq!(held.lowered_output, Some(40));
    assert_eq!(m.session.reserved(Limit::Tokens), 50);
    assert_eq!(m.agent.as_ref().unwrap().reserved(Limit::Tokens), 50);
}

#[test]
fn a_sub_agents_reservation_that_does_not_fit_holds_nothing_in_the_session() {
    let mut m = session(10, 1_000);
    let mut agent = Ledger::new(0);
    agent.set_max(Limit::Tokens, Some(50));
    m.agent = Some(agent);
    let s = stop(&mut m, 0, Some(51)).unwrap();
    assert_eq!(
        (s.reason, s.whose),
        (ExhaustReason::TokenReserve, Whose::SubAgent)
    );
    assert_eq!(m.session.reserved(Limit::Tokens), 0);
    let held = admit(&mut m, Some(50));
    assert_eq!(m.agent.as_ref().unwrap().reserved(Limit::Tokens), 50);
    count_response(&mut m, held, &response(70, None)).unwrap();
    // Usage above the reservation is counted all the same.
    assert_eq!(m.session.used(Limit::Tokens), 70);
    assert_eq!(m.agent.as_ref().unwrap().used(Limit::Tokens), 70);
    assert_eq!(m.agent.as_ref().unwrap().reserved(Limit::Tokens), 0);
}

#[test]
fn a_sub_agent_without_a_token_limit_counts_after_the_fact() {
    let mut m = session(10, 1_000);
    m.agent = Some(Ledger::new(0));
    let held = admit(&mut m, Some(50));
    assert_eq!(m.agent.as_ref().unwrap().reserved(Limit::Tokens), 0);
    count_response(&mut m, held, &response(30, Some(3))).unwrap();
    let agent = m.agent.as_ref().unwrap();
    assert_eq!(
        (
            agent.used(Limit::Tokens),
            agent.used(Limit::ModelCalls),
            agent.used(Limit::CostMicros)
        ),
        (30, 1, 3)
    );
}

#[test]
fn a_released_call_gives_its_reservation_back_and_counts_nothing() {
    let mut m = session(10, 100);
    let held = admit(&mut m, Some(100));
    release(&mut m, held);
    assert_eq!(m.session.reserved(Limit::Tokens), 0);
    assert_eq!(m.session.used(Limit::ModelCalls), 0);
    assert!(stop(&mut m, 0, Some(100)).is_none());
}

#[test]
fn a_response_seen_again_counts_its_tokens_but_not_another_call() {
    let mut m = session(10, 100);
    let again = Response {
        new_call: false,
        ..response(5, None)
    };
    count_response(&mut m, Admitted::AFTER_THE_FACT, &response(10, None)).unwrap();
    count_response(&mut m, Admitted::AFTER_THE_FACT, &again).unwrap();
    assert_eq!(m.session.used(Limit::ModelCalls), 1);
    assert_eq!(m.session.used(Limit::Tokens), 15);
}

#[test]
fn a_state_that_cannot_be_read_fails_the_decision() {
    let mut m = session(10, 100);
    m.session.set_max(Limit::CostMicros, Some(5));
    m.broken = true;
    let r = count_response(&mut m, Admitted::AFTER_THE_FACT, &response(1, None));
    assert_eq!(r, Err(Broken));
}

#[test]
fn the_turn_gates_walk_and_the_stores_walk_agree() {
    let mut m = session(3, 100);
    m.session.record(Limit::Tokens, 100);
    let in_memory = spent_in_memory(&m.session, 0, false);
    assert_eq!(in_memory, stop(&mut m, 0, None));
    assert_eq!(in_memory.map(|s| s.reason), Some(ExhaustReason::Tokens));
}

#[test]
fn calls_in_flight_hold_their_model_call_so_they_never_pass_the_limit_together() {
    let mut m = session(2, 1_000);
    let first = admit(&mut m, None);
    let second = admit(&mut m, None);
    let s = stop(&mut m, 0, None).unwrap();
    assert_eq!(
        (s.reason, s.exceeded.used, s.exceeded.max),
        (ExhaustReason::Steps, 2, 2)
    );
    // A call never billed gives its place back; a counted one keeps it.
    release(&mut m, first);
    count_response(&mut m, second, &response(10, None)).unwrap();
    assert_eq!(m.session.used(Limit::ModelCalls), 1);
    assert_eq!(m.session.reserved(Limit::ModelCalls), 0);
    let third = admit(&mut m, None);
    count_response(&mut m, third, &response(10, None)).unwrap();
    assert_eq!(m.session.used(Limit::ModelCalls), 2);
    assert_eq!(stop(&mut m, 0, None).unwrap().reason, ExhaustReason::Steps);
}
