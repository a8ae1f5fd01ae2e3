//! The gate's walk over a recorded session (`SPEC C`): each response's
//! model call admitted or stopped by the budget, each of its tool calls
//! decided in order, and the report made of the decisions.

use std::collections::{BTreeMap, BTreeSet};

use budgetgate_core::budget::{Ledger, Limit};
use budgetgate_core::turn::{
    Admission, Approver, CallVerdict, ProposeError, ProposedCall, RunStatus, StopReason, TokenMode,
    TokenUsage, ToolName, ToolOutcome, ToolRule, ToolRules, TurnEnd,
};
use budgetgate_core::word;

use super::budget::{self, ApprovePolicy, ReplayBudget};
use super::report::{AgentReport, BudgetReport, Overshoot, Report, Stopped};
use super::rows::{DecidedTurns, TurnOutcome, Verdict};
use super::session::{RecordedTurn, Session, UsageGranularity};
use super::{spill_read_error, PolicyApprover, ReplayGate, REPORT_SCHEMA_VERSION};

/// Replays a session through the gate, every row of the report held.
pub fn replay(session: &Session, budget: &ReplayBudget) -> Result<Report, String> {
    decide(session, budget)?.held()
}

/// Replays a session through the gate; the report's rows are made from the
/// session and the gate's decisions when they are written
/// ([`DecidedTurns`]), so that a long session is not held a second time as
/// rows. The same report as [`replay`]'s.
pub fn decide<'s>(
    session: &'s Session,
    budget: &ReplayBudget,
) -> Result<Report<DecidedTurns<'s>>, String> {
    // Known to the budget file, not yet applied by replay: refusing is the
    // only honest answer (a cost budget must never count a call as free).
    let (rules, known_tools, mut notes) = build_rules(session, budget)?;
    let limits = budget.limits;
    let mut gate = Box::new(ReplayGate::new(limits, rules, 0));
    for (name, max) in &budget.tool_caps {
        let tool = ToolName::new(name)
            .map_err(|e| format!("budget file: [tools] max_calls: {name:?}: {e}"))?;
        gate.try_add_cap(tool, *max)
            .map_err(|e| format!("budget file: [tools] max_calls: {name:?}: {e}"))?;
    }
    let mut unpriced: BTreeSet<String> = BTreeSet::new();
    // `[subagent]`: each sub-agent's own counts, as the hook keeps them.
    let mut agents: BTreeMap<String, Ledger> = BTreeMap::new();
    let mut noted_agents: BTreeSet<String> = BTreeSet::new();
    let mut stopped: Option<Stopped> = None;
    let mut decided = DecidedTurns {
        session,
        count: 0,
        last_calls: 0,
        outcomes: Vec::new(),
        calls: Vec::new(),
        reasons: Vec::new(),
        stopped_before: None,
    };
    // What the report's head says of every response, taken in the same
    // walk (a spilled session is read back once to decide, once to write).
    let mut per_turn_usage = TokenUsage::ZERO;
    let (mut tool_calls, mut server_tool_calls) = (0usize, 0usize);
    let mut last_time: Option<u64> = None;
    let mut agent_rows = AgentRows::default();
    let mut extra_refusals: BTreeMap<String, u32> = BTreeMap::new();
    let (mut executed, mut approved, mut reached_turns, mut new_questions) = (0, 0, 0, 0);
    let mut policy = PolicyApprover(budget.approve.clone());
    for (index, turn) in session.each_turn().enumerate() {
        let turn = turn.map_err(spill_read_error)?;
        let turn: &RecordedTurn = &turn;
        decided.count = index + 1;
        decided.last_calls = turn.calls.len();
        if let Some(u) = turn.usage {
            per_turn_usage = per_turn_usage.saturating_add(u);
        }
        tool_calls += turn.calls.len();
        server_tool_calls += turn.server_calls.len();
        last_time = turn.requested_at_ms.or(last_time);
        agent_rows.add(turn);
        if stopped.is_none() {
            let (stop_text, _) = turn.effective_stop_reason();
            if gate.status() == RunStatus::Complete {
                gate.resume().map_err(|e| format!("internal: {e}"))?;
                new_questions += 1;
            }
            let now = turn.requested_at_ms.unwrap_or(0);
            let admission = match limits.token_mode {
                TokenMode::Reserve => {
                    let max_tokens = turn.max_tokens.or(budget.reserve_max_tokens).ok_or_else(|| {
                        format!("turn {index}: reserve mode needs the request's max_tokens, which the recording does not state; set reserve_max_tokens in the budget file")
                    })?;
                    let input = turn.usage.map_or(0, |u| u.input_total());
                    gate.begin_reserved_call(now, input.saturating_add(max_tokens))
                }
                TokenMode::AfterTheFact => gate.begin_call(now),
            }
            .map_err(|e| format!("internal: turn {index}: {e}"))?;
            match admission {
                Admission::Exhausted(e) => {
                    stopped = Some(Stopped {
                        turn: Some(index),
                        reason: e.reason.as_str().to_owned(),
                        detail: e.to_string(),
                        by_budget: true,
                    });
                    decided.stopped_before = Some(index);
                }
                Admission::Proceed { .. } => {
                    reached_turns += 1;
                    let stop = StopReason::parse(&stop_text)
                        .map_err(|e| format!("turn {index}: stop reason {stop_text:?}: {e}"))?;
                    let used = turn.usage.unwrap_or(TokenUsage::ZERO);
                    // Priced by its model; with no price (or no model
                    // recorded) the cost is unknown, which a cost budget
                    // never counts as free: the run stops before the next call.
                    let price = turn
                        .model
                        .as_deref()
                        .and_then(|m| budget::price_of(&budget.prices, m));
                    if price.is_none() && !budget.prices.is_empty() {
                        unpriced.insert(
                            turn.model
                                .clone()
                                .unwrap_or_else(|| "(not recorded)".into()),
                        );
                    }
                    gate.record_priced(used, stop, price.map(|p| p.cost_micros(&used)))
                        .map_err(|e| format!("internal: turn {index}: {e}"))?;
                    if budget.count_server_tools && !turn.server_calls.is_empty() {
                        // Run by the API while it answered: they take tool
                        // attempts before the client calls are decided.
                        let n = u32::try_from(turn.server_calls.len()).unwrap_or(u32::MAX);
                        gate.count_server_calls(n)
                            .map_err(|e| format!("internal: turn {index}: {e}"))?;
                    }
                    // A sub-agent's own limits, as the hook applies them: its
                    // response is counted (the transcript holds it when its
                    // calls are decided); once one of them is reached, its
                    // calls are refused, and the session goes on.
                    let sub = turn.agent.as_ref().map(|a| {
                        let ledger = agents
                            .entry(a.clone())
                            .or_insert_with(|| subagent_ledger(&budget.subagent));
                        ledger.record(Limit::ModelCalls, 1);
                        ledger.record(Limit::Tokens, used.total());
                        a.clone()
                    });
                    for call in &turn.calls {
                        let own = sub.as_ref().and_then(|a| agents.get(a)).and_then(|l| {
                            l.first_exhausted(Limit::before_model_call)
                                .map(|e| ("budget-exhausted", e))
                                .or_else(|| {
                                    l.first_exhausted(|limit| limit == Limit::ToolCalls)
                                        .map(|e| (word::TOOL_BUDGET, e))
                                })
                        });
                        if let Some((word, e)) = own {
                            *extra_refusals.entry(word.into()).or_default() += 1;
                            decided.push_call(Verdict::Refused, Some(word));
                            let agent = sub.clone().unwrap_or_default();
                            if !noted_agents.contains(&agent) {
                                notes.push(format!(
                                    "turn {index}: sub-agent {agent} reached its own {e} ([subagent]): its calls are refused from here; the session goes on"
                                ));
                                noted_agents.insert(agent);
                            }
                            continue;
                        }
                        let attempts_before = gate.tool_attempts();
                        let proposed = ProposedCall {
                            call_id: &call.id,
                            name: &call.name,
                            arguments: call.arguments.fingerprint(),
                            input: b"",
                        };
                        let mut asked = false;
                        let mut approver = |c: &ProposedCall<'_>| {
                            asked = true;
                            policy.answer(c)
                        };
                        let (verdict, reason) = match gate.propose_with(&proposed, &mut approver) {
                            Ok(CallVerdict::Execute) => {
                                let outcome = if call.recorded_error == Some(true) {
                                    ToolOutcome::Error
                                } else {
                                    ToolOutcome::Ok
                                };
                                gate.report(&call.id, outcome)
                                    .map_err(|e| format!("internal: turn {index}: {e}"))?;
                                executed += 1;
                                if asked {
                                    approved += 1;
                                    (Verdict::Approved, None)
                                } else {
                                    (Verdict::Execute, None)
                                }
                            }
                            Ok(CallVerdict::Refused(r)) => (Verdict::Refused, Some(r.as_str())),
                            Ok(CallVerdict::NeedsApproval) => {
                                return Err(format!(
                                    "internal: turn {index}: approval left pending"
                                ))
                            }
                            Err(ProposeError::InvalidCallId(e)) => {
                                *extra_refusals.entry("invalid-call-id".into()).or_default() += 1;
                                notes.push(format!(
                                    "turn {index}: call id {:?} {e}; refused",
                                    call.id
                                ));
                                (Verdict::Refused, Some("invalid-call-id"))
                            }
                            Err(ProposeError::DuplicateCallId) => {
                                *extra_refusals
                                    .entry("duplicate-call-id".into())
                                    .or_default() += 1;
                                notes.push(format!(
                                    "turn {index}: call id {:?} appears more than once in the response; the later call ({}) is refused",
                                    call.id, call.name
                                ));
                                (Verdict::Refused, Some("duplicate-call-id"))
                            }
                            Err(e) => return Err(format!("turn {index}: call {}: {e}", call.id)),
                        };
                        // The attempt the gate counted is the sub-agent's too.
                        let counted = gate.tool_attempts().saturating_sub(attempts_before);
                        if let Some(ledger) = sub.as_ref().and_then(|a| agents.get_mut(a)) {
                            ledger.record(Limit::ToolCalls, u64::from(counted));
                        }
                        decided.push_call(verdict, reason);
                    }
                    let outcome = match gate
                        .finish_turn()
                        .map_err(|e| format!("internal: turn {index}: {e}"))?
                    {
                        TurnEnd::Continue => TurnOutcome::Continue,
                        TurnEnd::Complete => TurnOutcome::Complete,
                        TurnEnd::Stopped(reason) => {
                            stopped = Some(Stopped {
                                turn: Some(index),
                                reason: reason.as_str().to_owned(),
                                by_budget: false,
                                detail: match &turn.cut_off {
                                    Some(why) => format!(
                                        "{why}: the reply is cut off, its calls never run, and the run ends with status error as for max_tokens"
                                    ),
                                    None => format!(
                                        "the response stopped with {reason}: the run ends with status error"
                                    ),
                                },
                            });
                            TurnOutcome::Error(reason)
                        }
                    };
                    decided.outcomes.push(outcome);
                }
            }
        }
    }
    let count = decided.count;
    end_of_recording(
        session,
        count,
        last_time,
        &gate,
        &mut stopped,
        decided.last_reached(),
    );
    if new_questions > 0 {
        notes.push(format!(
            "{new_questions} response(s) follow an end_turn: each starts a new question on the same budget"
        ));
    }
    let recorded = match session.usage {
        UsageGranularity::PerTurn => per_turn_usage,
        UsageGranularity::RunTotal(_) | UsageGranularity::Unknown => session.recorded_usage(),
    };
    let mut status = gate.status().as_str();
    if stopped.as_ref().is_some_and(|s| s.turn == Some(count)) {
        status = "incomplete";
    }
    if session.ends_complete && status == RunStatus::Running.as_str() {
        // The recording says the agent finished with its last response (a
        // trajectory `submitted`): complete, if the gate let that response
        // and every call in it run as recorded.
        if decided.last_ran() {
            status = RunStatus::Complete.as_str();
            notes.push("the recording says the run finished after its last response (exit_status submitted): status complete".into());
        } else {
            notes.push("the recording says the run finished after its last response (exit_status submitted), but the gate refused a call of it: status running".into());
        }
    }
    if let UsageGranularity::RunTotal(total) = session.usage {
        if stopped.is_none() && total.total() >= limits.max_tokens {
            // The gate would have stopped the run somewhere: not running,
            // not complete.
            status = "incomplete";
            stopped = Some(Stopped {
                turn: None,
                reason: "tokens".into(),
                by_budget: true,
                detail: format!(
                    "token limit ({} of {}) reached at a turn the recording cannot tell (run totals only)",
                    total.total(),
                    limits.max_tokens
                ),
            });
        }
    }
    let mut refusals: BTreeMap<String, u32> = gate
        .refusals()
        .iter()
        .map(|(r, n)| (r.as_str().to_owned(), n))
        .collect();
    for (k, v) in extra_refusals {
        *refusals.entry(k).or_default() += v;
    }
    if let ApprovePolicy::Tools(names) = &budget.approve {
        for name in names {
            if !budget.needs_approval.contains(name) {
                notes.push(format!(
                    "approve names `{name}`, which is not in needs_approval: no effect"
                ));
            }
        }
    }
    let overshoot = match session.usage {
        UsageGranularity::PerTurn => Overshoot::of_tokens(gate.usage(), limits.max_tokens)
            .or_else(|| Overshoot::of_cost(gate.cost_micros(), limits.max_cost_micros)),
        UsageGranularity::RunTotal(_) | UsageGranularity::Unknown => None,
    };
    if !unpriced.is_empty() {
        let models: Vec<&str> = unpriced.iter().map(String::as_str).collect();
        notes.push(format!(
            "no price in the budget for model(s) {}: their cost is unknown{}",
            models.join(", "),
            if limits.max_cost_micros.is_some() {
                "; a cost budget never counts a call as free, so the run stops before the next call"
            } else {
                " and not in gate_cost_micro_usd"
            }
        ));
    }
    let mut all_notes = session.notes.clone();
    all_notes.extend(notes);
    Ok(Report {
        schema_version: REPORT_SCHEMA_VERSION,
        format: session.format.as_str(),
        format_description: session.format.description(),
        turns: count,
        tool_calls,
        server_tool_calls,
        usage: recorded,
        usage_per_turn: matches!(session.usage, UsageGranularity::PerTurn),
        usage_known: !matches!(session.usage, UsageGranularity::Unknown),
        stopped,
        overshoot,
        status,
        refusals,
        executed,
        approved,
        reached_turns,
        gate_usage: gate.usage(),
        gate_cost_micro_usd: (!budget.prices.is_empty()).then(|| gate.cost_micros()),
        budget: BudgetReport {
            max_model_calls: limits.max_model_calls,
            max_tokens: limits.max_tokens,
            max_millis: limits.max_millis,
            max_repeats: limits.max_repeats,
            max_tool_calls: limits.max_tool_calls,
            max_cost_micro_usd: limits.max_cost_micros,
            tool_caps: budget.tool_caps.iter().cloned().collect(),
            token_mode: limits.token_mode.as_str(),
            needs_approval: budget.needs_approval.clone(),
            approve: budget.approve.describe(),
            known_tools: known_tools.clone(),
            count_server_tools: budget.count_server_tools,
        },
        notes: all_notes,
        agents: agent_rows.reports(),
        per_turn: decided,
    })
}

fn build_rules(
    session: &Session,
    budget: &ReplayBudget,
) -> Result<(ToolRules<256>, String, Vec<String>), String> {
    let mut rules = ToolRules::<256>::new();
    let mut notes = Vec::new();
    let mut add = |rules: &mut ToolRules<256>,
                   name: &str,
                   rule: ToolRule,
                   strict: bool|
     -> Result<(), String> {
        if rules.iter().any(|(n, _)| n.as_str() == name) {
            return Ok(());
        }
        match rules.try_add(name, rule) {
            Ok(_) => Ok(()),
            Err(e) if strict => Err(format!("budget file: tool `{name}`: {e}")),
            Err(e) => {
                notes.push(format!(
                    "declared tool `{name}` cannot be listed ({e}); calls to it count as unknown"
                ));
                Ok(())
            }
        }
    };
    for name in &budget.needs_approval {
        add(&mut rules, name, ToolRule::NeedsApproval, true)?;
    }
    let known = if let Some(known) = &budget.known {
        for name in known {
            add(&mut rules, name, ToolRule::Run, true)?;
        }
        "listed in the budget file".to_owned()
    } else if let Some(declared) = &session.declared_tools {
        for name in declared {
            add(&mut rules, name, ToolRule::Run, false)?;
        }
        "declared by the recording's requests".to_owned()
    } else {
        rules.set_others(ToolRule::Run);
        "any (the recording declares none)".to_owned()
    };
    Ok((rules, known, notes))
}

/// A sub-agent's own ledger under `[subagent]`: model calls, tokens and
/// tool attempts, as the hook keeps it (`gate::apply_subagent`).
fn subagent_ledger(limits: &budget::SubagentLimits) -> Ledger {
    let mut ledger: Ledger = Ledger::new(0);
    ledger.set_max(Limit::ModelCalls, limits.max_model_calls.map(u64::from));
    ledger.set_max(Limit::Tokens, limits.max_tokens);
    ledger.set_max(Limit::ToolCalls, limits.max_tool_calls.map(u64::from));
    ledger
}

/// The per-agent summary, made a response at a time: the main agent first,
/// then each sub-agent in order of its first response.
struct AgentRows {
    rows: Vec<AgentReport>,
    /// Whether any response is a sub-agent's.
    any_subagent: bool,
}

impl Default for AgentRows {
    fn default() -> Self {
        Self {
            rows: vec![AgentReport {
                agent: None,
                turns: 0,
                tool_calls: 0,
                usage: TokenUsage::ZERO,
            }],
            any_subagent: false,
        }
    }
}

impl AgentRows {
    fn add(&mut self, turn: &RecordedTurn) {
        self.any_subagent |= turn.agent.is_some();
        let at = match self.rows.iter().position(|a| a.agent == turn.agent) {
            Some(at) => at,
            None => {
                self.rows.push(AgentReport {
                    agent: turn.agent.clone(),
                    turns: 0,
                    tool_calls: 0,
                    usage: TokenUsage::ZERO,
                });
                self.rows.len() - 1
            }
        };
        let agent = &mut self.rows[at];
        agent.turns += 1;
        agent.tool_calls += turn.calls.len();
        agent.usage = agent
            .usage
            .saturating_add(turn.usage.unwrap_or(TokenUsage::ZERO));
    }

    /// The rows, when any response is a sub-agent's; empty otherwise.
    fn reports(self) -> Vec<AgentReport> {
        if self.any_subagent {
            self.rows
        } else {
            Vec::new()
        }
    }
}

/// A recording that ends while the run goes on (after a `tool_use` or
/// `pause_turn` response) ends where the agent must call the model again —
/// to send the tool results back — and the gate checks the budget before
/// that call, as the reference's loop does (`SPEC C`, `SPEC E` "End of a
/// recording"). If the budget is spent there, the run stops before the call
/// one past the last response: `incomplete` with the reason. Time is taken
/// at the last response's request (the earliest the next call could leave).
/// `count` responses, the last time one was requested at `last_time`.
fn end_of_recording(
    session: &Session,
    count: usize,
    last_time: Option<u64>,
    gate: &ReplayGate,
    stopped: &mut Option<Stopped>,
    last_reached: bool,
) {
    // A trajectory that says its last step finished the run (`submitted`)
    // needs no further call.
    if stopped.is_some()
        || !last_reached
        || gate.status() != RunStatus::Running
        || session.ends_complete
    {
        return;
    }
    let now = last_time.unwrap_or(0);
    if let Some(e) = gate.check(now) {
        *stopped = Some(Stopped {
            turn: Some(count),
            reason: e.reason.as_str().to_owned(),
            by_budget: true,
            detail: format!(
                "{e}: the recording ends after a tool turn, and the next model call, which must send the tool results back, would be refused"
            ),
        });
    }
}
