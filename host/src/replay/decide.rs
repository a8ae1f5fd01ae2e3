//! The gate's walk over a recorded session (`SPEC C`): each response's
//! model call admitted or stopped by the budget, each of its tool calls
//! decided in order, and the report made of the decisions.

use std::collections::{BTreeMap, BTreeSet};

use budgetgate_core::budget::{Ledger, Limit};
use budgetgate_core::engine;
use budgetgate_core::engine::loops::Answers;
use budgetgate_core::turn::{
    Admission, Approver, CallVerdict, ProposeError, ProposedCall, RunStatus, StopReason, TokenMode,
    TokenUsage, ToolName, ToolOutcome, ToolRule, ToolRules, TurnEnd,
};

use super::budget::{self, ApprovePolicy, ReplayBudget};
use super::report::{AgentReport, BudgetReport, LoopStop, Overshoot, Report, Stopped};
use super::rows::{DecidedTurns, TurnOutcome, Verdict};
use super::session::{RecordedCall, RecordedTurn, Session, UsageGranularity};
use super::{spill_read_error, PolicyApprover, ReplayGate, REPLAY_TOOLS, REPORT_SCHEMA_VERSION};

mod loops;

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
    let mut walk = Walk::new(session, budget)?;
    for (index, turn) in session.each_turn().enumerate() {
        let turn = turn.map_err(spill_read_error)?;
        walk.turn(index, &turn)?;
    }
    Ok(walk.report())
}

/// The gate [`decide`] replays with: the budget's limits, its tool rules
/// ([`build_rules`]) and its per-tool caps; with the tools known, in words,
/// and the notes on rules that could not be added.
fn new_gate(
    session: &Session,
    budget: &ReplayBudget,
) -> Result<(Box<ReplayGate>, String, Vec<String>), String> {
    // Known to the budget file, not yet applied by replay: refusing is the
    // only honest answer (a cost budget must never count a call as free).
    let (rules, known_tools, notes) = build_rules(session, budget)?;
    let mut gate = Box::new(ReplayGate::new(budget.limits, rules, 0));
    gate.set_loops(budget.loops);
    for (name, max) in &budget.tool_caps {
        let tool = ToolName::new(name)
            .map_err(|e| format!("budget file: [tools] max_calls: {name:?}: {e}"))?;
        gate.try_add_cap(tool, *max)
            .map_err(|e| format!("budget file: [tools] max_calls: {name:?}: {e}"))?;
    }
    Ok((gate, known_tools, notes))
}

/// What [`decide`] keeps while it walks the session a response at a time:
/// the gate and its decisions, and what the report's head says of every
/// response, taken in the same walk (a spilled session is read back once to
/// decide, once to write).
struct Walk<'s, 'b> {
    session: &'s Session,
    budget: &'b ReplayBudget,
    gate: Box<ReplayGate>,
    /// Which tools are known, in words.
    known_tools: String,
    notes: Vec<String>,
    /// Models the budget has no price for.
    unpriced: BTreeSet<String>,
    /// `[subagent]`: each sub-agent's own counts, as the hook keeps them.
    agents: BTreeMap<String, Ledger<REPLAY_TOOLS>>,
    /// The sub-agents whose own limit a note already names.
    noted_agents: BTreeSet<String>,
    /// `[loops]`: each sub-agent's loop window, swapped into the gate for
    /// its calls.
    agent_windows: BTreeMap<String, Box<engine::Window>>,
    /// `[loops]` `same_answer`: the main agent's text answers in a row,
    /// and each sub-agent's.
    answers: Answers,
    agent_answers: BTreeMap<String, Answers>,
    stopped: Option<Stopped>,
    /// With `[loops]`: the first call refused for no progress.
    no_progress: Option<LoopStop>,
    decided: DecidedTurns<'s>,
    per_turn_usage: TokenUsage,
    tool_calls: usize,
    server_tool_calls: usize,
    last_time: Option<u64>,
    agent_rows: AgentRows,
    /// Refusals the gate does not count itself (a sub-agent's own limit,
    /// call ids it cannot take).
    extra_refusals: BTreeMap<String, u32>,
    executed: usize,
    approved: usize,
    reached_turns: usize,
    /// Responses that follow an `end_turn`.
    new_questions: usize,
    policy: PolicyApprover,
}

impl<'s, 'b> Walk<'s, 'b> {
    fn new(session: &'s Session, budget: &'b ReplayBudget) -> Result<Self, String> {
        let (gate, known_tools, notes) = new_gate(session, budget)?;
        Ok(Self {
            session,
            budget,
            gate,
            known_tools,
            notes,
            unpriced: BTreeSet::new(),
            agents: BTreeMap::new(),
            noted_agents: BTreeSet::new(),
            agent_windows: BTreeMap::new(),
            answers: Answers::new(),
            agent_answers: BTreeMap::new(),
            stopped: None,
            no_progress: None,
            decided: DecidedTurns {
                session,
                count: 0,
                last_calls: 0,
                outcomes: Vec::new(),
                calls: Vec::new(),
                reasons: Vec::new(),
                stopped_before: None,
            },
            per_turn_usage: TokenUsage::ZERO,
            tool_calls: 0,
            server_tool_calls: 0,
            last_time: None,
            agent_rows: AgentRows::default(),
            extra_refusals: BTreeMap::new(),
            executed: 0,
            approved: 0,
            reached_turns: 0,
            new_questions: 0,
            policy: PolicyApprover(budget.approve.clone()),
        })
    }

    /// The next response: counted in the report's head, and decided by the
    /// gate unless the run has already stopped.
    fn turn(&mut self, index: usize, turn: &RecordedTurn) -> Result<(), String> {
        self.decided.count = index + 1;
        self.decided.last_calls = turn.calls.len();
        if let Some(u) = turn.usage {
            self.per_turn_usage = self.per_turn_usage.saturating_add(u);
        }
        self.tool_calls += turn.calls.len();
        self.server_tool_calls += turn.server_calls.len();
        self.last_time = turn.requested_at_ms.or(self.last_time);
        self.agent_rows.add(turn);
        if self.stopped.is_none() {
            self.model_call(index, turn)?;
        }
        Ok(())
    }

    /// The budget check before the response's model call: stopped before
    /// it, or the response decided ([`Self::response`]).
    fn model_call(&mut self, index: usize, turn: &RecordedTurn) -> Result<(), String> {
        let (stop_text, _) = turn.effective_stop_reason();
        if self.gate.status() == RunStatus::Complete {
            self.gate.resume().map_err(|e| format!("internal: {e}"))?;
            self.new_questions += 1;
        }
        self.same_answer(index, turn.agent.as_deref());
        let now = turn.requested_at_ms.unwrap_or(0);
        let admission = match self.budget.limits.token_mode {
            TokenMode::Reserve => {
                let max_tokens = turn.max_tokens.or(self.budget.reserve_max_tokens).ok_or_else(|| {
                    format!("turn {index}: reserve mode needs the request's max_tokens, which the recording does not state; set reserve_max_tokens in the budget file")
                })?;
                let input = turn.usage.map_or(0, |u| u.input_total());
                self.gate
                    .begin_reserved_call(now, input.saturating_add(max_tokens))
            }
            TokenMode::AfterTheFact => self.gate.begin_call(now),
        }
        .map_err(|e| format!("internal: turn {index}: {e}"))?;
        match admission {
            Admission::Exhausted(e) => {
                self.stopped = Some(Stopped {
                    turn: Some(index),
                    reason: e.reason.as_str().to_owned(),
                    detail: e.to_string(),
                    by_budget: true,
                });
                self.decided.stopped_before = Some(index);
            }
            Admission::Proceed { .. } => self.response(index, turn, &stop_text)?,
        }
        Ok(())
    }

    /// A response the gate let happen: its usage and cost recorded, each of
    /// its calls decided in order, then the turn's end.
    fn response(
        &mut self,
        index: usize,
        turn: &RecordedTurn,
        stop_text: &str,
    ) -> Result<(), String> {
        self.reached_turns += 1;
        if let Some(l) = self.no_progress.as_mut() {
            l.saved_model_calls += 1;
            l.saved_tokens = match (l.saved_tokens, turn.usage) {
                (Some(t), Some(u)) => Some(t.saturating_add(u.total())),
                _ => None,
            };
        }
        let stop = StopReason::parse(stop_text)
            .map_err(|e| format!("turn {index}: stop reason {stop_text:?}: {e}"))?;
        let used = turn.usage.unwrap_or(TokenUsage::ZERO);
        self.record_usage(index, turn, stop, used)?;
        let sub = self.subagent_response(turn, used);
        // Each agent its own loop window (sub-agents call in parallel).
        self.swap_window(sub.as_deref());
        for call in &turn.calls {
            self.call(index, call, sub.as_deref())?;
        }
        self.swap_window(sub.as_deref());
        let outcome = self.finish_turn(index, turn)?;
        self.decided.outcomes.push(outcome);
        self.answers_of(turn.agent.as_deref()).record(turn.answer());
        Ok(())
    }

    /// Records the response's usage, priced by its model, and its server
    /// tool uses when the budget counts them.
    fn record_usage(
        &mut self,
        index: usize,
        turn: &RecordedTurn,
        stop: StopReason,
        used: TokenUsage,
    ) -> Result<(), String> {
        let budget = self.budget;
        // Priced by its model; with no price (or no model
        // recorded) the cost is unknown, which a cost budget
        // never counts as free: the run stops before the next call.
        let price = turn
            .model
            .as_deref()
            .and_then(|m| budget::price_of(&budget.prices, m));
        if price.is_none() && !budget.prices.is_empty() {
            self.unpriced.insert(
                turn.model
                    .clone()
                    .unwrap_or_else(|| "(not recorded)".into()),
            );
        }
        self.gate
            .record_priced(used, stop, price.map(|p| p.cost_micros(&used)))
            .map_err(|e| format!("internal: turn {index}: {e}"))?;
        if budget.count_server_tools && !turn.server_calls.is_empty() {
            // Run by the API while it answered: they take tool
            // attempts before the client calls are decided.
            let n = u32::try_from(turn.server_calls.len()).unwrap_or(u32::MAX);
            self.gate
                .count_server_calls(n)
                .map_err(|e| format!("internal: turn {index}: {e}"))?;
        }
        Ok(())
    }

    /// A sub-agent's own limits, as the hook applies them: its response is
    /// counted (the transcript holds it when its calls are decided); once one
    /// of them is reached, its calls are refused, and the session goes on.
    /// The sub-agent, if the response is one's.
    fn subagent_response(&mut self, turn: &RecordedTurn, used: TokenUsage) -> Option<String> {
        let budget = self.budget;
        turn.agent.as_ref().map(|a| {
            let ledger = self
                .agents
                .entry(a.clone())
                .or_insert_with(|| subagent_ledger(&budget.subagent));
            ledger.record(Limit::ModelCalls, 1);
            ledger.record(Limit::Tokens, used.total());
            a.clone()
        })
    }

    /// Notes, once per sub-agent, that the engine refused its call because
    /// the sub-agent spent its own budget (`[subagent]`).
    fn note_sub_agent_spent(&mut self, index: usize, sub: Option<&str>) {
        let Some(agent) = sub else {
            return;
        };
        let spent = self.gate.last_refusal().and_then(|r| match r.why {
            engine::Why::Exhausted {
                whose: engine::Whose::SubAgent,
                exceeded: Some(e),
            } => Some(e.to_string()),
            engine::Why::ToolBudget {
                whose: engine::Whose::SubAgent,
                used,
                max,
            } => Some(
                budgetgate_core::budget::Exceeded {
                    limit: Limit::ToolCalls,
                    used,
                    max,
                }
                .to_string(),
            ),
            _ => None,
        });
        if let Some(e) = spent {
            if self.noted_agents.insert(agent.to_owned()) {
                self.notes.push(format!(
                    "turn {index}: sub-agent {agent} reached its own {e} ([subagent]): its calls are refused from here; the session goes on"
                ));
            }
        }
    }

    /// Decides one call of a response the gate let happen (of sub-agent
    /// `sub`, if it is one's) and answers it with the recorded outcome.
    fn call(&mut self, index: usize, call: &RecordedCall, sub: Option<&str>) -> Result<(), String> {
        let proposed = ProposedCall {
            call_id: &call.id,
            name: &call.name,
            arguments: call.arguments.fingerprint(),
            input: b"",
        };
        let mut asked = false;
        let policy = &mut self.policy;
        let mut approver = |c: &ProposedCall<'_>| {
            asked = true;
            policy.answer(c)
        };
        // A sub-agent's call is checked against its own ledger too (the
        // engine's rule: its limits reached refuse its calls, and the
        // session goes on), and counted in it.
        let agent = sub.and_then(|a| self.agents.get_mut(a));
        let (verdict, reason) = match self.gate.propose_with_for(&proposed, &mut approver, agent) {
            Ok(CallVerdict::Execute) => {
                // A result recorded goes to the loop window too (`[loops]`);
                // a call without one is reported done, and matches nothing.
                let reported = match call.recorded {
                    Some(result) => self.gate.report_result(&call.id, result),
                    None => self.gate.report(&call.id, ToolOutcome::Ok),
                };
                reported.map_err(|e| format!("internal: turn {index}: {e}"))?;
                self.executed += 1;
                if asked {
                    self.approved += 1;
                    (Verdict::Approved, None)
                } else {
                    (Verdict::Execute, None)
                }
            }
            Ok(CallVerdict::Refused(r)) => {
                self.note_no_progress(index, call);
                self.note_sub_agent_spent(index, sub);
                (Verdict::Refused, Some(r.as_str()))
            }
            Ok(CallVerdict::NeedsApproval) => {
                return Err(format!("internal: turn {index}: approval left pending"))
            }
            Err(ProposeError::InvalidCallId(e)) => {
                *self
                    .extra_refusals
                    .entry("invalid-call-id".into())
                    .or_default() += 1;
                self.notes
                    .push(format!("turn {index}: call id {:?} {e}; refused", call.id));
                (Verdict::Refused, Some("invalid-call-id"))
            }
            Err(ProposeError::DuplicateCallId) => {
                *self
                    .extra_refusals
                    .entry("duplicate-call-id".into())
                    .or_default() += 1;
                self.notes.push(format!(
                    "turn {index}: call id {:?} appears more than once in the response; the later call ({}) is refused",
                    call.id, call.name
                ));
                (Verdict::Refused, Some("duplicate-call-id"))
            }
            Err(e) => return Err(format!("turn {index}: call {}: {e}", call.id)),
        };
        self.decided.push_call(verdict, reason);
        Ok(())
    }

    /// The end of a response the gate let happen: the run goes on, is
    /// complete, or its stop reason ends it.
    fn finish_turn(&mut self, index: usize, turn: &RecordedTurn) -> Result<TurnOutcome, String> {
        Ok(
            match self
                .gate
                .finish_turn()
                .map_err(|e| format!("internal: turn {index}: {e}"))?
            {
                TurnEnd::Continue => TurnOutcome::Continue,
                TurnEnd::Complete => TurnOutcome::Complete,
                TurnEnd::Stopped(reason) => {
                    self.stopped = Some(Stopped {
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
            },
        )
    }

    /// The gate's status once every response is decided; a run whose
    /// recording holds only run totals past the token limit is stopped at a
    /// turn it cannot tell.
    fn status(&mut self, count: usize) -> &'static str {
        let limits = self.budget.limits;
        let mut status = self.gate.status().as_str();
        if self.stopped.as_ref().is_some_and(|s| s.turn == Some(count)) {
            status = "incomplete";
        }
        if self.session.ends_complete && status == RunStatus::Running.as_str() {
            // The recording says the agent finished with its last response (a
            // trajectory `submitted`): complete, if the gate let that response
            // and every call in it run as recorded.
            if self.decided.last_ran() {
                status = RunStatus::Complete.as_str();
                self.notes.push("the recording says the run finished after its last response (exit_status submitted): status complete".into());
            } else {
                self.notes.push("the recording says the run finished after its last response (exit_status submitted), but the gate refused a call of it: status running".into());
            }
        }
        if let UsageGranularity::RunTotal(total) = self.session.usage {
            if self.stopped.is_none() && total.total() >= limits.max_tokens {
                // The gate would have stopped the run somewhere: not running,
                // not complete.
                status = "incomplete";
                self.stopped = Some(Stopped {
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
        status
    }

    /// Refused calls per reason: the gate's count and the others.
    fn refusals(&mut self) -> BTreeMap<String, u32> {
        let mut refusals: BTreeMap<String, u32> = self
            .gate
            .refusals()
            .iter()
            .map(|(r, n)| (r.as_str().to_owned(), n))
            .collect();
        for (k, v) in std::mem::take(&mut self.extra_refusals) {
            *refusals.entry(k).or_default() += v;
        }
        refusals
    }

    /// The notes on the budget itself: approvals of tools that need none,
    /// and models it has no price for.
    fn budget_notes(&mut self) {
        let budget = self.budget;
        if let ApprovePolicy::Tools(names) = &budget.approve {
            for name in names {
                if !budget.needs_approval.contains(name) {
                    self.notes.push(format!(
                        "approve names `{name}`, which is not in needs_approval: no effect"
                    ));
                }
            }
        }
    }

    /// The budget the gated run passed, if it did (per-response usage only).
    fn overshoot(&self) -> Option<Overshoot> {
        let limits = self.budget.limits;
        match self.session.usage {
            UsageGranularity::PerTurn => Overshoot::of_tokens(self.gate.usage(), limits.max_tokens)
                .or_else(|| Overshoot::of_cost(self.gate.cost_micros(), limits.max_cost_micros)),
            UsageGranularity::RunTotal(_) | UsageGranularity::Unknown => None,
        }
    }

    /// The note naming the models without a price, if any.
    fn unpriced_note(&mut self) {
        if !self.unpriced.is_empty() {
            let models: Vec<&str> = self.unpriced.iter().map(String::as_str).collect();
            let note = format!(
                "no price in the budget for model(s) {}: their cost is unknown{}",
                models.join(", "),
                if self.budget.limits.max_cost_micros.is_some() {
                    "; a cost budget never counts a call as free, so the run stops before the next call"
                } else {
                    " and not in gate_cost_micro_usd"
                }
            );
            self.notes.push(note);
        }
    }

    /// The report, once every response is walked.
    fn report(mut self) -> Report<DecidedTurns<'s>> {
        let (session, budget) = (self.session, self.budget);
        let count = self.decided.count;
        end_of_recording(
            session,
            count,
            self.last_time,
            &self.gate,
            &mut self.stopped,
            self.decided.last_reached(),
        );
        if self.new_questions > 0 {
            self.notes.push(format!(
                "{} response(s) follow an end_turn: each starts a new question on the same budget",
                self.new_questions
            ));
        }
        let recorded = match session.usage {
            UsageGranularity::PerTurn => self.per_turn_usage,
            UsageGranularity::RunTotal(_) | UsageGranularity::Unknown => session.recorded_usage(),
        };
        let status = self.status(count);
        let refusals = self.refusals();
        self.budget_notes();
        let overshoot = self.overshoot();
        self.unpriced_note();
        let mut all_notes = session.notes.clone();
        all_notes.extend(self.notes);
        Report {
            schema_version: REPORT_SCHEMA_VERSION,
            format: session.format.as_str(),
            format_description: session.format.description(),
            turns: count,
            tool_calls: self.tool_calls,
            server_tool_calls: self.server_tool_calls,
            usage: recorded,
            usage_per_turn: matches!(session.usage, UsageGranularity::PerTurn),
            usage_known: !matches!(session.usage, UsageGranularity::Unknown),
            stopped: self.stopped,
            no_progress: self.no_progress,
            overshoot,
            status,
            refusals,
            executed: self.executed,
            approved: self.approved,
            reached_turns: self.reached_turns,
            gate_usage: self.gate.usage(),
            gate_cost_micro_usd: (!budget.prices.is_empty()).then(|| self.gate.cost_micros()),
            budget: BudgetReport {
                known_tools: self.known_tools,
                ..BudgetReport::new(budget)
            },
            notes: all_notes,
            agents: self.agent_rows.reports(),
            per_turn: self.decided,
        }
    }
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
fn subagent_ledger(limits: &budget::SubagentLimits) -> Ledger<REPLAY_TOOLS> {
    let mut ledger: Ledger<REPLAY_TOOLS> = Ledger::new(0);
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
