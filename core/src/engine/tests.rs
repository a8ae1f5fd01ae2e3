//! The engine's own tests: each check in its place in the one order, its
//! boundary on both sides, its figures and its sentence.

use super::*;
use crate::turn::ArgsFingerprint;
use heapless::{String as HString, Vec as HVec};

/// A session in memory, with every call the engine makes on it written down.
#[derive(Default)]
pub(super) struct Mem {
    pub(super) session: Ledger,
    pub(super) agent: Option<Ledger>,
    pub(super) ids: HVec<HString<16>, 16>,
    pub(super) id_room: usize,
    pub(super) repeats: HVec<(CallFingerprint, u64), 8>,
    pub(super) repeat_room: usize,
    pub(super) unpriced: bool,
    pub(super) asked_unpriced: u32,
    pub(super) rate: HVec<u64, 16>,
    pub(super) asked_rate: HVec<u64, 4>,
    /// Counts a call exactly one window old as still in it (a store less
    /// strict than the contract's "after").
    pub(super) inclusive: bool,
    /// Every method fails with this once set (a store that cannot be read).
    pub(super) broken: bool,
    /// The loop window, when the session keeps one.
    pub(super) window: Option<Window>,
}

impl Mem {
    pub(super) fn new() -> Self {
        Self {
            session: Ledger::new(0),
            id_room: 16,
            repeat_room: 8,
            ..Self::default()
        }
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new(0)
    }
}

#[derive(Debug, PartialEq)]
pub(super) struct Broken;

impl State for Mem {
    type Error = Broken;

    fn see_id(&mut self, id: &str) -> Result<Seen, Broken> {
        if self.broken {
            return Err(Broken);
        }
        if self.ids.iter().any(|i| i == id) {
            return Ok(Seen::Again);
        }
        if self.ids.len() >= self.id_room {
            return Ok(Seen::Full);
        }
        let _ = self.ids.push(HString::try_from(id).unwrap_or_default());
        Ok(Seen::New)
    }

    fn raise_repeat(&mut self, key: CallFingerprint) -> Result<Option<u64>, Broken> {
        if let Some((_, n)) = self.repeats.iter_mut().find(|(k, _)| *k == key) {
            *n += 1;
            return Ok(Some(*n));
        }
        if self.repeats.len() >= self.repeat_room {
            return Ok(None);
        }
        let _ = self.repeats.push((key, 1));
        Ok(Some(1))
    }

    fn ledgers(&mut self) -> Ledgers<'_> {
        Ledgers {
            session: &mut self.session,
            agent: self.agent.as_mut(),
        }
    }

    fn unpriced(&mut self) -> Result<bool, Broken> {
        self.asked_unpriced += 1;
        Ok(self.unpriced)
    }

    fn rate_calls_after(&mut self, since_ms: u64) -> Result<(u64, Option<u64>), Broken> {
        let _ = self.asked_rate.push(since_ms);
        let inclusive = self.inclusive;
        let after = self
            .rate
            .iter()
            .filter(move |&&t| t > since_ms || (inclusive && t == since_ms));
        Ok((after.clone().count() as u64, after.min().copied()))
    }

    fn add_rate_call(&mut self, now_ms: u64) -> Result<(), Broken> {
        let _ = self.rate.push(now_ms);
        Ok(())
    }

    fn loop_window(&mut self) -> Result<Option<&mut Window>, Broken> {
        if self.broken {
            return Err(Broken);
        }
        Ok(self.window.as_mut())
    }

    fn add_unpriced(&mut self, _model: &str) -> Result<(), Broken> {
        if self.broken {
            return Err(Broken);
        }
        self.unpriced = true;
        Ok(())
    }
}

fn fingerprint(name: &str, input: &str) -> CallFingerprint {
    let mut scratch = [0u8; 64];
    ArgsFingerprint::of_json(input.as_bytes(), &mut scratch)
        .map(|a| a.with_name(name))
        .unwrap_or_else(|_| ArgsFingerprint::from_u128(0).with_name(name))
}

fn call<'a>(name: &'a str, id: &'a str, input: &str, now_ms: u64) -> Call<'a> {
    Call {
        name,
        id,
        stop: None,
        fingerprint: Some(fingerprint(name, input)),
        now_ms,
    }
}

fn table() -> ToolTable {
    let mut t = ToolTable::new();
    let _ = t.try_add("read", ToolRule::Run);
    let _ = t.try_add("send", ToolRule::NeedsApproval);
    let _ = t.try_add_cap("send", 2);
    t
}

fn rules<'a>(tools: &'a ToolTable, rate: &'a [RateWindow]) -> Rules<'a> {
    Rules {
        max_repeats: 2,
        tools,
        rate,
        loops: LoopRules::OFF,
        budget_per_call: BudgetPerCall::All,
    }
}

fn decide_on(mem: &mut Mem, rules: &Rules<'_>, call: &Call<'_>) -> Decision {
    decide(mem, rules, call, Counting::Record).unwrap_or(Decision::Run)
}

fn reason(d: Decision) -> Option<RefusalReason> {
    d.refused()
}

/// Each check answers before the ones after it: a call that breaks every
/// rule is refused by the first in `CallCheck::ORDER`, then, the first
/// cured, by the next.
#[test]
fn the_first_check_in_the_one_order_answers() {
    let tools = table();
    let windows = [RateWindow {
        span: RateSpan::Minute,
        max: 0,
    }];
    let r = rules(&tools, &windows);
    assert_eq!(
        CallCheck::ORDER,
        [
            CallCheck::StopReason,
            CallCheck::Name,
            CallCheck::CallId,
            CallCheck::Arguments,
            CallCheck::Budget,
            CallCheck::Repeat,
            CallCheck::NoProgress,
            CallCheck::ToolBudget,
            CallCheck::ToolCap,
            CallCheck::Rate,
        ]
    );
    let mut mem = Mem::new();
    mem.session.set_max(Limit::ModelCalls, Some(0));
    mem.session.set_max(Limit::ToolCalls, Some(0));
    let _ = mem.ids.push(HString::try_from("c").unwrap_or_default());
    let mut c = call("bad name", "c", "{}", 5);
    c.stop = Some(StopReason::MaxTokens);
    c.fingerprint = None;
    let steps = [
        RefusalReason::CutOff,
        RefusalReason::InvalidName,
        RefusalReason::DuplicateCallId,
        RefusalReason::InvalidArguments,
        RefusalReason::BudgetExhausted,
    ];
    for (i, expected) in steps.into_iter().enumerate() {
        assert_eq!(
            reason(decide_on(&mut mem, &r, &c)),
            Some(expected),
            "step {i}"
        );
        match i {
            0 => c.stop = Some(StopReason::ToolUse),
            1 => c.name = "send",
            2 => c.id = "d",
            // The id was remembered when it was checked: a new one.
            3 => (c.id, c.fingerprint) = ("e", Some(fingerprint("send", "{}"))),
            _ => mem.session.set_max(Limit::ModelCalls, None),
        }
    }
    // Repeats: raised by every call that gets this far, refused or not,
    // so the third is over max_repeats 2.
    for (id, expected) in [
        ("f", RefusalReason::ToolBudget),
        ("g", RefusalReason::ToolBudget),
        ("h", RefusalReason::Repeat),
    ] {
        c.id = id;
        assert_eq!(reason(decide_on(&mut mem, &r, &c)), Some(expected), "{id}");
    }
    c.fingerprint = Some(fingerprint("send", "{\"n\": 1}"));
    c.id = "i";
    assert_eq!(
        reason(decide_on(&mut mem, &r, &c)),
        Some(RefusalReason::ToolBudget)
    );
    mem.session.set_max(Limit::ToolCalls, None);
    let _ = mem.session.try_count_tool("send", Some(2));
    let _ = mem.session.try_count_tool("send", Some(2));
    c.id = "j";
    assert_eq!(
        reason(decide_on(&mut mem, &r, &c)),
        Some(RefusalReason::ToolCap)
    );
    mem.session.release_tool("send");
    c.fingerprint = Some(fingerprint("send", "{\"n\": 3}"));
    c.id = "k";
    assert_eq!(
        reason(decide_on(&mut mem, &r, &c)),
        Some(RefusalReason::RateLimit)
    );
    c.fingerprint = Some(fingerprint("send", "{\"n\": 2}"));
    c.id = "l";
    let open = rules(&tools, &[]);
    assert_eq!(decide_on(&mut mem, &open, &c), Decision::Ask);
    assert_eq!(mem.session.used(Limit::ToolCalls), 1);
    assert_eq!(mem.session.tool_used("send"), 2);
}

#[test]
fn stateless_checks_come_first_and_need_no_state() {
    assert!(CallCheck::StopReason.is_stateless() && CallCheck::Name.is_stateless());
    let stateful = CallCheck::ORDER.into_iter().filter(|c| !c.is_stateless());
    assert_eq!(stateful.count(), 8);
    let mut c = call("read", "a", "{}", 0);
    assert_eq!(stateless(&c), None);
    c.stop = Some(StopReason::ToolUse);
    assert_eq!(stateless(&c), None);
    c.stop = Some(StopReason::EndTurn);
    assert_eq!(stateless(&c), Some(RefusalReason::NotToolTurn));
    c.name = "";
    assert_eq!(stateless(&c), Some(RefusalReason::NotToolTurn));
    c.stop = None;
    assert_eq!(stateless(&c), Some(RefusalReason::InvalidName));
    // Nothing is read: a broken state is not asked.
    let mut mem = Mem::new();
    mem.broken = true;
    let tools = table();
    let r = rules(&tools, &[]);
    assert_eq!(
        decide(&mut mem, &r, &c, Counting::Record).map(|d| d.refused()),
        Ok(Some(RefusalReason::InvalidName))
    );
    c.name = "read";
    assert_eq!(decide(&mut mem, &r, &c, Counting::Record), Err(Broken));
}

#[test]
fn an_id_seen_again_or_with_no_room_is_refused_and_a_new_one_remembered() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.id_room = 1;
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "a", "{}", 0)),
        Decision::Run
    );
    assert_eq!(
        reason(decide_on(&mut mem, &r, &call("read", "a", "{\"x\": 1}", 0))),
        Some(RefusalReason::DuplicateCallId)
    );
    assert_eq!(
        reason(decide_on(&mut mem, &r, &call("read", "b", "{\"x\": 2}", 0))),
        Some(RefusalReason::CallIdCapacity)
    );
    assert_eq!(mem.session.used(Limit::ToolCalls), 1);
}

/// `SPEC C`: the count is raised first, then compared with `>`: with
/// max_repeats 2 the third identical call is the first refused; a new
/// distinct call past the table's room is `repeat-capacity`.
#[test]
fn repeats_are_counted_first_then_compared_and_never_forgotten() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.repeat_room = 2;
    for (id, expected) in [("1", None), ("2", None), ("3", Some(RefusalReason::Repeat))] {
        assert_eq!(
            reason(decide_on(&mut mem, &r, &call("read", id, "{}", 0))),
            expected,
            "{id}"
        );
    }
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "4", "{}", 0)) else {
        panic!("refused")
    };
    assert_eq!(refusal.why, Why::Repeat { count: 4, max: 2 });
    assert_eq!(
        refusal.figures(),
        Some((LimitName::MaxRepeats, 4, 2)),
        "the count as raised"
    );
    assert_eq!(
        reason(decide_on(&mut mem, &r, &call("read", "5", "{\"b\": 1}", 0))),
        None
    );
    assert_eq!(
        reason(decide_on(&mut mem, &r, &call("read", "6", "{\"c\": 1}", 0))),
        Some(RefusalReason::RepeatCapacity)
    );
    // A call without a fingerprint never reaches the repetition count.
    let mut c = call("read", "7", "{}", 0);
    c.fingerprint = None;
    let mut cx = Mem::new();
    assert_eq!(
        apply(CallCheck::Repeat, &mut cx, &r, &c),
        Ok(Some(Refusal::plain(RefusalReason::InvalidArguments)))
    );
    assert!(cx.repeats.is_empty());
}

/// Tool attempts: used and reserved together against the maximum, the
/// session's first, then the sub-agent's; equality refuses.
#[test]
fn the_tool_budget_counts_what_is_reserved_and_the_sub_agents_own() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.session.set_max(Limit::ToolCalls, Some(2));
    let mut agent = Ledger::new(0);
    agent.set_max(Limit::ToolCalls, Some(1));
    mem.agent = Some(agent);
    assert_eq!(
        decide(&mut mem, &r, &call("read", "a", "{}", 0), Counting::Reserve),
        Ok(Decision::Run)
    );
    assert_eq!(mem.session.reserved(Limit::ToolCalls), 1);
    assert_eq!(mem.session.used(Limit::ToolCalls), 0);
    let agent_used = mem.agent.as_ref().map(|l| l.used(Limit::ToolCalls));
    assert_eq!(agent_used, Some(1), "a sub-agent counts at once");
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "b", "{\"b\": 1}", 0))
    else {
        panic!("refused")
    };
    assert_eq!(
        refusal.why,
        Why::ToolBudget {
            whose: Whose::SubAgent,
            used: 1,
            max: 1
        }
    );
    mem.agent = None;
    assert_eq!(
        decide(
            &mut mem,
            &r,
            &call("read", "c", "{\"c\": 1}", 0),
            Counting::Reserve
        ),
        Ok(Decision::Run)
    );
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "d", "{\"d\": 1}", 0))
    else {
        panic!("refused")
    };
    assert_eq!(
        refusal.why,
        Why::ToolBudget {
            whose: Whose::Session,
            used: 2,
            max: 2
        },
        "two reserved, none used: refused"
    );
    assert_eq!(
        refusal.figures(),
        Some((LimitName::Ledger(Limit::ToolCalls), 2, 2))
    );
    assert!(!refusal.ends_session());
}

#[test]
fn a_reserve_past_what_a_sum_can_hold_is_counted_at_once() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    let huge = mem.session.try_reserve(Limit::ToolCalls, u64::MAX);
    assert!(huge.is_ok());
    assert_eq!(
        decide(&mut mem, &r, &call("read", "a", "{}", 0), Counting::Reserve),
        Ok(Decision::Run)
    );
    assert_eq!(mem.session.used(Limit::ToolCalls), 1);
    assert_eq!(mem.session.reserved(Limit::ToolCalls), u64::MAX);
}

#[test]
fn a_tools_cap_is_the_sessions_and_counts_only_capped_tools() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.agent = Some(Ledger::new(0));
    for (id, input) in [("a", "{\"a\": 1}"), ("b", "{\"b\": 1}")] {
        assert_eq!(
            decide_on(&mut mem, &r, &call("send", id, input, 0)),
            Decision::Ask,
            "{id}"
        );
    }
    assert_eq!(mem.session.tool_used("send"), 2);
    assert_eq!(mem.agent.as_ref().map(|l| l.counts().len()), Some(0));
    let c = Call {
        fingerprint: Some(fingerprint("send", "{\"z\": 1}")),
        ..call("send", "c", "{}", 0)
    };
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &c) else {
        panic!("refused")
    };
    assert_eq!(refusal.why, Why::ToolCap(CapReached { used: 2, max: 2 }));
    assert_eq!(refusal.figures(), Some((LimitName::ToolCap, 2, 2)));
    let mut key: HString<32> = HString::new();
    let _ = core::fmt::write(
        &mut key,
        format_args!("{}", LimitName::ToolCap.key_for("send")),
    );
    assert_eq!(key, "max_calls.send");
    // An uncapped tool is counted in no tool count.
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "d", "{}", 0)),
        Decision::Run
    );
    assert_eq!(mem.session.counts().len(), 1);
}

#[test]
fn budget_exhausted_is_checked_per_call_only_where_the_rules_ask() {
    let tools = table();
    let mut r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.session.set_max(Limit::Tokens, Some(10));
    mem.session.record(Limit::Tokens, 9);
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "a", "{}", 0)),
        Decision::Run
    );
    mem.session.record(Limit::Tokens, 1);
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "b", "{}", 0)) else {
        panic!("refused")
    };
    let exceeded = Exceeded {
        limit: Limit::Tokens,
        used: 10,
        max: 10,
    };
    assert_eq!(
        refusal.why,
        Why::Exhausted {
            whose: Whose::Session,
            exceeded: Some(exceeded)
        }
    );
    assert!(refusal.ends_session());
    assert_eq!(
        refusal.figures(),
        Some((LimitName::Ledger(Limit::Tokens), 10, 10))
    );
    // A front-end that stops the session before its model calls checks a
    // sub-agent's limits only: the session's call runs.
    r.budget_per_call = BudgetPerCall::SubAgent;
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "c", "{}", 0)),
        Decision::Run
    );
    // A sub-agent's own limit: its calls only, in either mode.
    for mode in [BudgetPerCall::SubAgent, BudgetPerCall::All] {
        r.budget_per_call = mode;
        let mut mem = Mem::new();
        let mut agent = Ledger::new(0);
        agent.set_max(Limit::ModelCalls, Some(1));
        agent.record(Limit::ModelCalls, 1);
        mem.agent = Some(agent);
        let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "a", "{}", 0))
        else {
            panic!("refused")
        };
        assert!(matches!(
            refusal.why,
            Why::Exhausted {
                whose: Whose::SubAgent,
                ..
            }
        ));
        assert!(!refusal.ends_session());
        // One call below its limit: it runs.
        let mut mem = Mem::new();
        let mut agent = Ledger::new(0);
        agent.set_max(Limit::ModelCalls, Some(2));
        agent.record(Limit::ModelCalls, 1);
        mem.agent = Some(agent);
        assert_eq!(
            decide_on(&mut mem, &r, &call("read", "b", "{}", 0)),
            Decision::Run,
            "{mode:?}"
        );
    }
}

/// A model counted without a price matters under a cost limit only, and
/// is asked about only then.
#[test]
fn an_unpriced_model_exhausts_a_cost_budget_only() {
    let tools = table();
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.unpriced = true;
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "a", "{}", 0)),
        Decision::Run
    );
    assert_eq!(mem.asked_unpriced, 0);
    mem.session.set_max(Limit::CostMicros, Some(1_000));
    let Decision::Refused(refusal) = decide_on(&mut mem, &r, &call("read", "b", "{}", 0)) else {
        panic!("refused")
    };
    assert_eq!(
        refusal.why,
        Why::Exhausted {
            whose: Whose::Session,
            exceeded: None
        }
    );
    assert_eq!(refusal.figures(), None);
    assert!(refusal.ends_session());
    mem.unpriced = false;
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "c", "{}", 0)),
        Decision::Run
    );
}

/// Rate windows, shortest first: a window with `max` calls after
/// `now - span` is full; it reopens when its oldest call leaves it.
#[test]
fn a_full_rate_window_refuses_until_its_oldest_call_leaves_it() {
    let tools = table();
    let windows = [
        RateWindow {
            span: RateSpan::Minute,
            max: 2,
        },
        RateWindow {
            span: RateSpan::Hour,
            max: 3,
        },
    ];
    let r = rules(&tools, &windows);
    let mut mem = Mem::new();
    let input = |n: u32| -> HString<16> {
        let mut s = HString::new();
        let _ = core::fmt::write(&mut s, format_args!("{{\"n\": {n}}}"));
        s
    };
    let at = |mem: &mut Mem, id: &str, n: u32, now: u64| {
        let input = input(n);
        decide_on(mem, &r, &call("read", id, input.as_str(), now))
    };
    assert_eq!(at(&mut mem, "a", 1, 1_000), Decision::Run);
    assert_eq!(at(&mut mem, "b", 2, 2_000), Decision::Run);
    assert_eq!(mem.rate.as_slice(), [1_000, 2_000]);
    let Decision::Refused(refusal) = at(&mut mem, "c", 3, 30_000) else {
        panic!("refused")
    };
    assert_eq!(mem.asked_rate.last(), Some(&0), "since now minus a minute");
    assert_eq!(
        refusal.why,
        Why::Rate {
            window: windows[0],
            used: 2,
            retry_after_ms: 31_000
        }
    );
    assert_eq!(refusal.retry_after_ms(), Some(31_000));
    assert_eq!(
        refusal.figures(),
        Some((LimitName::Rate(RateSpan::Minute), 2, 2))
    );
    // 61 s after the first call: one left in the minute, but the hour has 3.
    assert_eq!(at(&mut mem, "d", 4, 61_001), Decision::Run);
    let Decision::Refused(refusal) = at(&mut mem, "e", 5, 62_500) else {
        panic!("refused")
    };
    assert_eq!(
        refusal.figures(),
        Some((LimitName::Rate(RateSpan::Hour), 3, 3))
    );
    assert_eq!(refusal.retry_after_ms(), Some(3_600_000 + 1_000 - 62_500));
    assert_eq!(refusal.reason, RefusalReason::RateLimit);
    // A window with no oldest call to go by reopens after its span; never
    // in 0 ms.
    let mut mem = Mem::new();
    let zero = [RateWindow {
        span: RateSpan::Day,
        max: 0,
    }];
    let r0 = rules(&tools, &zero);
    let Decision::Refused(refusal) = decide_on(&mut mem, &r0, &call("read", "a", "{}", 5)) else {
        panic!("refused")
    };
    assert_eq!(refusal.retry_after_ms(), Some(86_400_000));
    let mut mem = Mem::new();
    mem.inclusive = true;
    let _ = mem.rate.push(1_000);
    let one = [RateWindow {
        span: RateSpan::Minute,
        max: 1,
    }];
    let r1 = rules(&tools, &one);
    let Decision::Refused(refusal) = decide_on(&mut mem, &r1, &call("read", "a", "{}", 61_000))
    else {
        panic!("refused")
    };
    assert_eq!(refusal.retry_after_ms(), Some(1), "at least 1 ms");
    // No windows: the calls are not remembered for them.
    let mut mem = Mem::new();
    assert_eq!(
        decide_on(&mut mem, &rules(&tools, &[]), &call("read", "a", "{}", 5)),
        Decision::Run
    );
    assert!(mem.rate.is_empty() && mem.asked_rate.is_empty());
}

#[test]
fn the_tool_tables_rule_answers_a_call_that_passed() {
    let mut tools = table();
    tools.set_others(ToolRule::Unknown);
    let r = rules(&tools, &[]);
    let mut mem = Mem::new();
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "a", "{}", 0)),
        Decision::Run
    );
    assert_eq!(
        decide_on(&mut mem, &r, &call("send", "b", "{}", 0)),
        Decision::Ask
    );
    assert_eq!(
        reason(decide_on(&mut mem, &r, &call("other", "c", "{}", 0))),
        Some(RefusalReason::UnknownTool)
    );
    // An unknown tool's attempt counts (an attempt bounds executions).
    assert_eq!(mem.session.used(Limit::ToolCalls), 3);
    assert_eq!(Decision::Ask.refused(), None);
}

fn text(refusal: &Refusal, shown: &Shown<'_>) -> HString<400> {
    let mut s = HString::new();
    let _ = core::fmt::write(&mut s, format_args!("{}", refusal.detail(shown)));
    s
}

/// One set of words: each refusal's sentence, as the hook and the gateway
/// show it.
#[test]
fn each_refusal_says_why_with_its_figures() {
    let shown = Shown {
        name: "send",
        id: "the id \"x\"",
        id_scope: "on this connection",
        unpriced_model: Some("m\"1"),
    };
    let refused = |reason, why| Refusal { reason, why };
    let cases: [(Refusal, &str); 10] = [
        (
            refused(RefusalReason::InvalidName, Why::Plain),
            "the tool name \"send\" is outside [A-Za-z0-9_-]{1,64}",
        ),
        (
            refused(RefusalReason::DuplicateCallId, Why::Plain),
            "the id \"x\" was already used on this connection",
        ),
        (
            refused(
                RefusalReason::BudgetExhausted,
                Why::Exhausted {
                    whose: Whose::SubAgent,
                    exceeded: Some(Exceeded {
                        limit: Limit::ModelCalls,
                        used: 3,
                        max: 3,
                    }),
                },
            ),
            "sub-agent model_calls budget exhausted (3 of 3 model calls)",
        ),
        (
            refused(
                RefusalReason::BudgetExhausted,
                Why::Exhausted {
                    whose: Whose::Session,
                    exceeded: None,
                },
            ),
            "model \"m\\\"1\" has no price in the budget, and a cost budget never counts a call as free: add [prices.\"m\\\"1\"] (input, output, cache_read, cache_write: USD per million tokens) to the budget file",
        ),
        (
            refused(RefusalReason::Repeat, Why::Repeat { count: 3, max: 2 }),
            "the same send call with the same input was made 3 times (max_repeats 2)",
        ),
        (
            refused(
                RefusalReason::ToolBudget,
                Why::ToolBudget {
                    whose: Whose::Session,
                    used: 5,
                    max: 5,
                },
            ),
            "5 of 5 tool calls used",
        ),
        (
            refused(RefusalReason::ToolCap, Why::ToolCap(CapReached { used: 2, max: 2 })),
            "send may be called at most 2 times in this session (2 used)",
        ),
        (
            refused(
                RefusalReason::RateLimit,
                Why::Rate {
                    window: RateWindow {
                        span: RateSpan::Hour,
                        max: 4,
                    },
                    used: 4,
                    retry_after_ms: 1_001,
                },
            ),
            "4 tool calls in the last hour (per_hour 4); the window reopens in 2 s",
        ),
        (
            refused(
                RefusalReason::RateLimit,
                Why::Rate {
                    window: RateWindow {
                        span: RateSpan::Day,
                        max: 1,
                    },
                    used: 1,
                    retry_after_ms: 1,
                },
            ),
            "1 tool calls in the last day (per_day 1); the window reopens in 1 s",
        ),
        (refused(RefusalReason::CutOff, Why::Plain), "cut-off"),
    ];
    for (refusal, expected) in cases {
        assert_eq!(text(&refusal, &shown).as_str(), expected);
    }
    let no_model = Shown {
        unpriced_model: None,
        ..shown
    };
    let unpriced = refused(
        RefusalReason::BudgetExhausted,
        Why::Exhausted {
            whose: Whose::Session,
            exceeded: None,
        },
    );
    assert_eq!(
        text(&unpriced, &no_model).as_str(),
        "a model has no price in the budget, and a cost budget never counts a call as free"
    );
    let odd = Shown {
        name: "a \u{1}\n\t\r\u{8}\u{c}\\b\u{7f}",
        ..shown
    };
    assert_eq!(
        text(&refused(RefusalReason::InvalidName, Why::Plain), &odd).as_str(),
        "the tool name \"a \\u0001\\n\\t\\r\\b\\f\\\\b\u{7f}\" is outside [A-Za-z0-9_-]{1,64}"
    );
    let keys = [
        (LimitName::Ledger(Limit::Millis), "time_ms"),
        (LimitName::MaxRepeats, "max_repeats"),
        (LimitName::Rate(RateSpan::Day), "per_day"),
    ];
    for (name, expected) in keys {
        let mut key: HString<32> = HString::new();
        let _ = core::fmt::write(&mut key, format_args!("{}", name.key_for("t")));
        assert_eq!(key.as_str(), expected);
    }
    assert_eq!(
        [RateSpan::Minute, RateSpan::Hour, RateSpan::Day].map(RateSpan::millis),
        [60_000, 3_600_000, 86_400_000]
    );
    assert_eq!(Whose::Session.as_str(), "session");
    assert_eq!(LONGEST_RATE_WINDOW_MS, RateSpan::Day.millis());
}

/// A state that keeps only what every front-end must (ids, repeats, a
/// ledger): the trait's defaults remember no unpriced model and no rate
/// calls, so a cost limit never refuses for a price and a rate window only
/// ever refuses when its maximum is 0 (then for its whole span).
struct Least {
    ledger: Ledger,
}

impl State for Least {
    type Error = Broken;

    fn see_id(&mut self, _id: &str) -> Result<Seen, Broken> {
        Ok(Seen::New)
    }

    fn raise_repeat(&mut self, _key: CallFingerprint) -> Result<Option<u64>, Broken> {
        Ok(Some(1))
    }

    fn ledgers(&mut self) -> Ledgers<'_> {
        Ledgers {
            session: &mut self.ledger,
            agent: None,
        }
    }

    fn add_unpriced(&mut self, _model: &str) -> Result<(), Broken> {
        Ok(())
    }
}

#[test]
fn a_state_without_prices_or_rate_calls_takes_the_defaults() {
    let tools = table();
    let minute = [RateWindow {
        span: RateSpan::Minute,
        max: 1,
    }];
    let r = rules(&tools, &minute);
    let mut least = Least {
        ledger: Ledger::new(0),
    };
    least.ledger.set_max(Limit::CostMicros, Some(1_000));
    for id in ["a", "b"] {
        assert_eq!(
            decide(&mut least, &r, &call("read", id, "{}", 5), Counting::Record),
            Ok(Decision::Run),
            "{id}"
        );
    }
    let day = [RateWindow {
        span: RateSpan::Day,
        max: 0,
    }];
    let Ok(Decision::Refused(refusal)) = decide(
        &mut least,
        &rules(&tools, &day),
        &call("read", "c", "{}", 5),
        Counting::Record,
    ) else {
        panic!("refused")
    };
    assert_eq!(refusal.retry_after_ms(), Some(86_400_000));
    assert_eq!(
        refusal.figures(),
        Some((LimitName::Rate(RateSpan::Day), 0, 0))
    );
}

/// `[loops]` as an ordinary check: after `repeat`, before `tool-budget`;
/// its figures and its sentence; the outcome reported through the engine.
#[test]
fn a_call_that_repeats_a_result_without_progress_is_refused_no_progress() {
    let tools = table();
    let mut r = rules(&tools, &[]);
    r.max_repeats = 100;
    r.loops = LoopRules {
        same_outcome: Some(3),
        same_error: None,
        ping_pong_cycles: None,
        same_answer: None,
    };
    let mut mem = Mem::new();
    mem.window = Some(Window::new());
    for (i, id) in ["a", "b"].iter().enumerate() {
        assert_eq!(
            decide_on(&mut mem, &r, &call("read", id, "{}", i as u64)),
            Decision::Run
        );
        let reported = report_outcome(
            &mut mem,
            fingerprint("read", "{}"),
            Outcome::of(b"same", false),
        );
        assert_eq!(reported, Ok(true));
    }
    let d = decide_on(&mut mem, &r, &call("read", "c", "{}", 9));
    let Decision::Refused(refusal) = d else {
        panic!("{d:?}")
    };
    assert_eq!(refusal.reason, RefusalReason::NoProgress);
    assert_eq!(refusal.reason.as_str(), "no-progress");
    let (limit, used, max) = refusal.figures().expect("figures");
    assert_eq!(
        (limit.key_for("read").to_string(), used, max),
        ("same_outcome".into(), 3, 3)
    );
    let shown = Shown {
        name: "read",
        id: "c",
        id_scope: "",
        unpriced_model: None,
    };
    assert_eq!(
        refusal.detail(&shown).to_string(),
        "read has been called 2 times with this input and returned the same result each time; this would be call 3 (same_outcome 3)"
    );
    // Not counted: the window still holds two calls, the attempts two.
    assert_eq!(mem.window.as_ref().map(|w| w.steps().len()), Some(2));
    assert_eq!(mem.session.used(Limit::ToolCalls), 2);
    // Another input is another call.
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "d", "{\"f\":1}", 9)),
        Decision::Run
    );
}

#[test]
fn repeat_answers_before_no_progress_and_no_progress_before_the_tool_budget() {
    let tools = table();
    let mut r = rules(&tools, &[]);
    r.max_repeats = 2;
    r.loops = LoopRules {
        same_outcome: Some(3),
        same_error: None,
        ping_pong_cycles: None,
        same_answer: None,
    };
    let mut mem = Mem::new();
    mem.window = Some(Window::new());
    for id in ["a", "b"] {
        assert_eq!(
            decide_on(&mut mem, &r, &call("read", id, "{}", 1)),
            Decision::Run
        );
        let _ = report_outcome(
            &mut mem,
            fingerprint("read", "{}"),
            Outcome::of(b"x", false),
        );
    }
    // The third is both a repeat and no progress: `repeat` comes first.
    let d = decide_on(&mut mem, &r, &call("read", "c", "{}", 1));
    assert_eq!(reason(d), Some(RefusalReason::Repeat));
    r.max_repeats = 100;
    mem.session.set_max(Limit::ToolCalls, Some(2));
    let d = decide_on(&mut mem, &r, &call("read", "e", "{}", 1));
    assert_eq!(reason(d), Some(RefusalReason::NoProgress));
}

#[test]
fn loops_without_a_window_fail_closed_and_without_loops_no_window_is_asked() {
    let tools = table();
    let mut r = rules(&tools, &[]);
    let mut mem = Mem::new();
    mem.broken = false;
    assert_eq!(
        decide_on(&mut mem, &r, &call("read", "a", "{}", 1)),
        Decision::Run
    );
    r.loops.ping_pong_cycles = Some(3);
    let d = decide_on(&mut mem, &r, &call("read", "b", "{\"x\":1}", 1));
    assert_eq!(reason(d), Some(RefusalReason::NoProgress));
}

/// The sentence of each loop pattern names the calls: two in turn are
/// "A and B", three "A, B and C"; the counts are the calls before this one.
#[test]
fn each_loop_pattern_says_what_repeats() {
    let shown = Shown {
        name: "grep",
        id: "x",
        id_scope: "",
        unpriced_model: None,
    };
    let said = |pattern, times, others: [Option<&str>; 2]| {
        let refusal = Refusal {
            reason: RefusalReason::NoProgress,
            why: Why::NoProgress(NoProgress {
                pattern,
                times,
                max: 3,
                others: others.map(|o| o.map(loops::NameCopy::new)),
            }),
        };
        refusal.detail(&shown).to_string()
    };
    assert_eq!(
        said(Pattern::PingPong(2), 3, [Some("view"), None]),
        "grep and view have been called in turn for 2 whole cycles with unchanged results; this call would complete cycle 3 (ping_pong_cycles 3)"
    );
    assert_eq!(
        said(Pattern::PingPong(3), 4, [Some("view"), Some("ls")]),
        "grep, view and ls have been called in turn for 3 whole cycles with unchanged results; this call would complete cycle 4 (ping_pong_cycles 3)"
    );
    assert_eq!(
        said(Pattern::SameError, 3, [None, None]),
        "grep has been called 2 times with this input and failed with the same error each time; this would be try 3 (same_error 3)"
    );
    assert_eq!(
        said(Pattern::SameError, 2, [None, None]),
        "grep has been called 1 time with this input and failed with the same error each time; this would be try 2 (same_error 3)"
    );
    assert_eq!(
        said(Pattern::SameOutcome, 5, [None, None]),
        "grep has been called 4 times with this input and returned the same result each time; this would be call 5 (same_outcome 3)"
    );
    let found = NoProgress {
        pattern: Pattern::SameOutcome,
        times: 5,
        max: 3,
        others: [None, None],
    };
    assert_eq!(
        found.sentence("grep").to_string(),
        said(Pattern::SameOutcome, 5, [None, None])
    );
    assert_eq!(
        said(Pattern::SameAnswer, 3, [None, None]),
        "the model has given the same answer 3 times in a row with no tool call between (same_answer 3); another model call would ask for it again"
    );
    assert_eq!(
        said(Pattern::SameAnswer, 1, [None, None]),
        "the model has given the same answer 1 time in a row with no tool call between (same_answer 3); another model call would ask for it again"
    );
}
