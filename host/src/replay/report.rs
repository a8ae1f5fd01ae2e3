//! The report of a replay, what the gate decided and what the session cost,
//! and its two forms: the JSON object `--json` writes and the table
//! `budgetgate replay` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use budgetgate_core::turn::{RefusalReason, TokenMode, TokenUsage};
use serde::Serialize;

use super::session::UsageIteration;
use super::terminal_safe;
use crate::gate::budget_report::fmt_usd;
pub use crate::gate::budget_report::BudgetReport;

/// Where the gate would have ended the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stopped {
    /// The response (counted from 0) before which the budget stopped the
    /// run, or whose stop reason ended it; `None` when only run totals are
    /// recorded and the turn cannot be told.
    pub turn: Option<usize>,
    /// `steps`, `tokens`, `time`, `cost`, `unpriced-model`, `token-reserve`, or the stop reason
    /// (`max_tokens`, `refusal`, …).
    pub reason: String,
    /// The reason in words.
    pub detail: String,
    /// Whether a budget of the gate stopped the run (else the recorded
    /// response's own stop reason ended it). Not in `--json`: `reason`
    /// says which.
    #[serde(skip)]
    pub by_budget: bool,
}

/// A budget passed by the run the gate let happen (`SPEC C`, after-the-fact
/// token mode): the gate checks tokens before each model call, so a call that
/// starts below the limit may end above it. The run was not stopped, or was
/// stopped only after the limit had already been passed; either way the
/// budget was exceeded, and `replay` exits 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overshoot {
    /// Which limit: `tokens` or `cost` (micro-dollars).
    pub limit: &'static str,
    /// What the gate counted up to where it stopped (or to the end).
    pub used: u64,
    /// The limit.
    pub max: u64,
    /// `used - max`.
    pub by: u64,
}

impl Overshoot {
    /// The overshoot of the tokens the gate counted, if they passed the limit.
    /// Only per-response usage can tell: with run totals the gate would have
    /// stopped at a turn the recording cannot tell, with what it counted by
    /// then unknown.
    pub(super) fn of_tokens(counted: TokenUsage, max: u64) -> Option<Self> {
        let used = counted.total();
        (used > max).then(|| Self {
            limit: "tokens",
            used,
            max,
            by: used - max,
        })
    }

    /// The overshoot of the cost the gate counted (micro-dollars), if a
    /// cost limit is set and it was passed.
    pub(super) fn of_cost(counted: u64, max: Option<u64>) -> Option<Self> {
        let max = max?;
        (counted > max).then(|| Self {
            limit: "cost",
            used: counted,
            max,
            by: counted - max,
        })
    }
}

/// Where loop detection (`[loops]`) first refused a call for no progress,
/// and what the recorded session spent after that response: what stopping
/// it there would have saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopStop {
    /// The response (counted from 0) whose call was refused, or (for
    /// `same_answer`) whose model call was.
    pub turn: usize,
    /// The call's id (`None`: the model call was refused).
    pub call_id: Option<String>,
    /// Its tool (`None`: the model call was refused).
    pub tool: Option<String>,
    /// The pattern: `same_outcome`, `same_error`, `ping_pong_cycles` or
    /// `same_answer`.
    pub pattern: &'static str,
    /// The refusal's sentence, as the model would have read it.
    pub detail: String,
    /// Model calls the gate let happen after that response.
    pub saved_model_calls: usize,
    /// Their tokens (`null` when usage is not recorded per response).
    pub saved_tokens: Option<u64>,
}

/// The decision on one recorded tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallReport {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// `execute`, `approved` (approval asked and granted), `refused`, or
    /// `not-reached`.
    pub verdict: &'static str,
    /// Why it was refused (`repeat`, `approval-refused`, …).
    pub reason: Option<String>,
    /// What the recording holds for it: `ok`, `error`, or `none`.
    pub recorded: &'static str,
}

/// One response of the recording and what the gate made of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnReport {
    /// Counted from 0.
    pub turn: usize,
    /// The message id, when recorded.
    pub message_id: Option<String>,
    /// The stop reason the gate used.
    pub stop_reason: String,
    /// Whether it was inferred (recorded as null or absent).
    pub stop_reason_inferred: bool,
    /// This response's usage (`None` when only run totals are recorded).
    pub usage: Option<TokenUsage>,
    /// The recording's cumulative usage up to this response.
    pub running_total: Option<TokenUsage>,
    /// Whether the gate let this model call happen.
    pub reached: bool,
    /// `continue`, `complete`, `error: REASON`, `stopped before this call`,
    /// or `not reached`.
    pub outcome: String,
    /// The tool calls, in order.
    pub calls: Vec<CallReport>,
    /// The entries of `usage.iterations` (compaction, advisor
    /// sub-inferences), each counted in `usage`: the billed total is the top
    /// level plus every iteration. Empty when the response has none.
    pub usage_iterations: Vec<UsageIteration>,
    /// Server tool uses (`server_tool_use` blocks: web search, code
    /// execution), by name: run by the API, counted toward `max_tool_calls`
    /// when `budget.count_server_tools` is `true`.
    pub server_tool_calls: Vec<String>,
    /// Why the reply is cut off although its recorded stop reason does not
    /// say so (a stream without `message_stop`): its calls never run, as for
    /// `max_tokens`. `null` otherwise.
    pub cut_off: Option<String>,
    /// The sub-agent that made this call (Claude Code
    /// `subagents/agent-ID.jsonl`), or `null` for the main agent.
    pub agent: Option<String>,
}

/// What one agent of the session made and cost (the main agent and each
/// sub-agent), when the recording has sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReport {
    /// The sub-agent (`agent-ID` of its log, or `Task ID` in stream-json
    /// output), or `null` for the main agent.
    pub agent: Option<String>,
    /// Its model responses.
    pub turns: usize,
    /// Its tool calls.
    pub tool_calls: usize,
    /// What its responses cost (part of the report's `usage`).
    pub usage: TokenUsage,
}

/// The result of a replay; `--json` prints it as one object. Its per-turn
/// rows are held (`Vec<TurnReport>`, what [`replay`](super::replay) gives),
/// or made when they are written ([`DecidedTurns`](super::DecidedTurns),
/// what [`decide`](super::decide) gives).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report<Rows = Vec<TurnReport>> {
    /// The version of this schema
    /// ([`REPORT_SCHEMA_VERSION`](super::REPORT_SCHEMA_VERSION)).
    pub schema_version: u32,
    /// The format detected.
    pub format: &'static str,
    /// The format in words.
    pub format_description: &'static str,
    /// Model responses, each counted once.
    pub turns: usize,
    /// Tool calls in all responses.
    pub tool_calls: usize,
    /// Server tool uses in all responses (run by the API; not in
    /// `tool_calls`).
    pub server_tool_calls: usize,
    /// What the whole recording really cost.
    pub usage: TokenUsage,
    /// Whether usage is recorded per response (`false`: run totals only,
    /// or none).
    pub usage_per_turn: bool,
    /// Whether the recording holds any usage (`false`: `usage` is zero
    /// because nothing is known, and the token limit is not checked).
    pub usage_known: bool,
    /// Where the gate would have ended the run, or `null`.
    pub stopped: Option<Stopped>,
    /// With `[loops]`: where a call was first refused for no progress, and
    /// what the session spent after it; `null` otherwise.
    pub no_progress: Option<LoopStop>,
    /// The budget the gated run passed, or `null`: e.g. one response of
    /// 200 001 tokens against 150 000 (after-the-fact mode checks before each
    /// call). Exit status 1 when set, even if `stopped` is `null`.
    pub overshoot: Option<Overshoot>,
    /// The gate's status after the replay: `running` (the recording ends
    /// mid-run), `complete` (also a SWE-agent trajectory `submitted` whose
    /// last step ran), `incomplete` or `error`.
    pub status: &'static str,
    /// Refused calls per reason (reasons with none are left out).
    pub refusals: BTreeMap<String, u32>,
    /// Calls the gate let run (approved ones included).
    pub executed: usize,
    /// Calls run after an approval.
    pub approved: usize,
    /// Responses the gate let happen.
    pub reached_turns: usize,
    /// Tokens the gate counted up to where it stopped.
    pub gate_usage: TokenUsage,
    /// What those responses cost by the budget's `[prices]`, in
    /// micro-dollars (responses of unpriced models not included), or `null`
    /// when the budget has no prices.
    pub gate_cost_micro_usd: Option<u64>,
    /// The limits used.
    pub budget: BudgetReport,
    /// Facts about how the recording was read.
    pub notes: Vec<String>,
    /// Per agent (main first, then each sub-agent in order of its first
    /// response), when the recording has sub-agents; empty otherwise.
    pub agents: Vec<AgentReport>,
    /// One entry per response.
    pub per_turn: Rows,
}

/// A report's per-turn rows, in order: held, or made one at a time.
pub trait TurnRows {
    /// How many rows (one per response).
    fn count(&self) -> usize;

    /// Calls `each` with every row in order; stops at its first error (or
    /// the first error reading a row back).
    fn try_for_each_row<E: From<std::io::Error>>(
        &self,
        each: impl FnMut(&TurnReport) -> Result<(), E>,
    ) -> Result<(), E>;
}

impl TurnRows for Vec<TurnReport> {
    fn count(&self) -> usize {
        self.len()
    }

    fn try_for_each_row<E: From<std::io::Error>>(
        &self,
        each: impl FnMut(&TurnReport) -> Result<(), E>,
    ) -> Result<(), E> {
        self.iter().try_for_each(each)
    }
}

impl<Rows: TurnRows + Serialize> Report<Rows> {
    /// The report as one line of JSON (what `--json` prints), with every
    /// character that is unsafe on a terminal escaped.
    pub fn to_json(&self) -> Result<String, String> {
        crate::term::to_safe_json(self)
    }

    /// [`to_json`](Self::to_json) and a newline, written to `out` as they
    /// are made (the rows are never all held as text).
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        crate::term::write_safe_json(self, &mut *out)?;
        out.write_all(b"\n")
    }

    /// Where the run stopped, in words: `at turn T` (before that call, or
    /// by that response's own stop reason), `before turn N, the call after
    /// the last response`, or `at an unknown turn` (run totals only).
    pub fn stop_place(&self, stopped: &Stopped) -> String {
        match stopped.turn {
            None => "at an unknown turn".to_owned(),
            Some(t) if t == self.per_turn.count() => {
                format!("before turn {t}, the call after the last response")
            }
            Some(t) => format!("at turn {t}"),
        }
    }

    /// The readable table `budgetgate replay` prints by default. Every text
    /// taken from the recording (and the file name) is shown through
    /// [`terminal_safe`].
    pub fn to_table(&self, file: &str) -> String {
        let mut out = Vec::new();
        // Writing to a `Vec` does not fail.
        let _ = self.write_table(file, &mut out);
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// [`to_table`](Self::to_table) written to `out` a row at a time.
    pub fn write_table(&self, file: &str, sink: &mut dyn Write) -> std::io::Result<()> {
        let safe = terminal_safe;
        let mut out = String::new();
        let b = &self.budget;
        let _ = writeln!(out, "replay of {}", safe(file));
        let _ = writeln!(out, "format: {} ({})", self.format_description, self.format);
        let _ = writeln!(
            out,
            "{}; approval needed for {}, approved: {}; known tools: {}",
            b.limits_line(),
            if b.needs_approval.is_empty() {
                "no tool".into()
            } else {
                safe(&b.needs_approval.join(",")).into_owned()
            },
            safe(&b.approve),
            safe(&b.known_tools),
        );
        if let Some(line) = b.cost_line() {
            let _ = writeln!(out, "{line}");
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {}", safe(note));
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:>4}  {:<14} {:>9} {:>7} {:>10} {:>11} {:>9} {:>9}  outcome",
            "turn",
            "stop_reason",
            "input",
            "output",
            "cache_read",
            "cache_write",
            "total",
            "running"
        );
        let stop_line = |out: &mut String, stop: &Stopped| {
            let _ = writeln!(
                out,
                "---- gate stops here: {} ({})",
                safe(&stop.reason),
                safe(&stop.detail)
            );
        };
        let mut inferred = false;
        self.per_turn.try_for_each_row(|row| {
            inferred |= row.stop_reason_inferred;
            if let Some(stop) = &self.stopped {
                if stop.turn == Some(row.turn) && !row.reached {
                    stop_line(&mut out, stop);
                }
            }
            let stop = format!(
                "{}{}",
                safe(&row.stop_reason),
                if row.stop_reason_inferred { "*" } else { "" }
            );
            let num = |v: Option<u64>| v.map_or("-".to_owned(), |n| n.to_string());
            let u = row.usage;
            let _ = writeln!(
                out,
                "{:>4}  {:<14} {:>9} {:>7} {:>10} {:>11} {:>9} {:>9}  {}",
                row.turn,
                stop,
                num(u.map(|u| u.input_tokens)),
                num(u.map(|u| u.output_tokens)),
                num(u.map(|u| u.cache_read_input_tokens)),
                num(u.map(|u| u.cache_creation_input_tokens)),
                num(u.map(|u| u.total())),
                num(row.running_total.map(|u| u.total())),
                safe(&row.outcome),
            );
            for call in &row.calls {
                let verdict = match &call.reason {
                    Some(reason) => format!("{} ({})", call.verdict, safe(reason)),
                    None => call.verdict.to_owned(),
                };
                // A name outside the grammar is shown quoted, so that
                // `"Bash "` or `""` cannot pass for `Bash` in the table.
                let name = if call.reason.as_deref() == Some(RefusalReason::InvalidName.as_str()) {
                    format!("{:?}", call.name)
                } else {
                    call.name.clone()
                };
                let _ = writeln!(
                    out,
                    "        {:<34} {:<22} {:<28} recorded: {}",
                    safe(&call.id),
                    safe(&name),
                    verdict,
                    call.recorded
                );
            }
            if !row.server_tool_calls.is_empty() {
                let _ = writeln!(
                    out,
                    "        server tools: {} ({} run by the API; {} max_tool_calls)",
                    safe(&row.server_tool_calls.join(", ")),
                    row.server_tool_calls.len(),
                    if self.budget.count_server_tools {
                        "counted toward"
                    } else {
                        "not counted toward"
                    }
                );
            }
            if !row.usage_iterations.is_empty() {
                let parts: Vec<String> = row
                    .usage_iterations
                    .iter()
                    .map(|i| format!("{} {}", safe(&i.kind), i.usage.total()))
                    .collect();
                let _ = writeln!(
                    out,
                    "        usage billed: top level + {} iteration(s): {}",
                    row.usage_iterations.len(),
                    parts.join(", ")
                );
            }
            if let Some(why) = &row.cut_off {
                let _ = writeln!(out, "        cut off: {} (its calls never run)", safe(why));
            }
            if let Some(agent) = &row.agent {
                let _ = writeln!(out, "        sub-agent: {}", safe(agent));
            }
            if let Some(stop) = &self.stopped {
                if stop.turn == Some(row.turn) && row.reached {
                    stop_line(&mut out, stop);
                }
            }
            sink.write_all(out.as_bytes())?;
            out.clear();
            Ok::<(), std::io::Error>(())
        })?;
        if let Some(stop) = &self.stopped {
            if stop.turn == Some(self.per_turn.count()) {
                stop_line(&mut out, stop);
            }
        }
        if inferred {
            let _ = writeln!(out, "(* stop_reason inferred: recorded as null or absent)");
        }
        let _ = writeln!(out);
        let u = &self.usage;
        let _ = writeln!(
            out,
            "recorded cost: {} responses, {} tool calls{}; tokens input {}, output {}, cache_read {}, cache_write {}, total {}{}",
            self.turns,
            self.tool_calls,
            if self.server_tool_calls > 0 {
                format!(" (and {} server tool uses)", self.server_tool_calls)
            } else {
                String::new()
            },
            u.input_tokens,
            u.output_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens,
            u.total(),
            if !self.usage_known {
                " (usage not recorded: unknown)"
            } else if self.usage_per_turn {
                ""
            } else {
                " (run totals only)"
            }
        );
        for a in &self.agents {
            let _ = writeln!(
                out,
                "  {}: {} responses, {} tool calls, {} tokens",
                a.agent
                    .as_deref()
                    .map_or("main agent".into(), |n| format!("sub-agent {}", safe(n))),
                a.turns,
                a.tool_calls,
                a.usage.total()
            );
        }
        let _ = writeln!(
            out,
            "gate: {} of {} responses allowed, {} calls executed ({} after approval), {} tokens counted; status {}",
            self.reached_turns,
            self.turns,
            self.executed,
            self.approved,
            self.gate_usage.total(),
            self.status
        );
        if let Some(cost) = self.gate_cost_micro_usd {
            let unpriced = self
                .notes
                .iter()
                .any(|n| n.starts_with("no price in the budget for model"));
            let _ = writeln!(
                out,
                "gate cost: {} by the budget's prices{}",
                fmt_usd(cost),
                if unpriced {
                    ", responses of models without a price not included (their cost is unknown, not zero; see the notes)"
                } else {
                    ""
                }
            );
        }
        match &self.stopped {
            Some(s) => {
                let at = self.stop_place(s);
                let _ = writeln!(
                    out,
                    "stopped: {at}: {} ({})",
                    safe(&s.reason),
                    safe(&s.detail)
                );
            }
            None if self.overshoot.is_some() => {
                let _ = writeln!(
                    out,
                    "stopped: no, the gate would not have stopped this session, but its budget was overshot"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "stopped: no, the budget would not have stopped this session"
                );
            }
        }
        if let Some(l) = &self.no_progress {
            let what = match (&l.call_id, &l.tool) {
                (Some(id), Some(tool)) => format!("call {} ({})", safe(id), safe(tool)),
                _ => "the model call".to_owned(),
            };
            let _ = writeln!(
                out,
                "no progress: at turn {}, {what}: {} ({}); stopping there would have saved {} model call(s){}",
                l.turn,
                l.pattern,
                safe(&l.detail),
                l.saved_model_calls,
                l.saved_tokens
                    .map_or(String::new(), |t| format!(" and {t} tokens")),
            );
        }
        if let Some(o) = &self.overshoot {
            let _ = writeln!(
                out,
                "overshot: {} budget by {} ({} of {}): {} mode checks the budget before each model call, and a call that starts below the limit can end above it{}",
                o.limit,
                o.by,
                o.used,
                o.max,
                self.budget.token_mode,
                if self.budget.token_mode == TokenMode::AfterTheFact.as_str() {
                    "; token_mode = \"reserve\" refuses such a call"
                } else {
                    " when its declared worst case is wrong"
                }
            );
        }
        if self.refusals.is_empty() {
            let _ = writeln!(out, "refusals: none");
        } else {
            let list: Vec<String> = self
                .refusals
                .iter()
                .map(|(k, v)| format!("{} {v}", safe(k)))
                .collect();
            let _ = writeln!(out, "refusals: {}", list.join(", "));
        }
        sink.write_all(out.as_bytes())
    }
}
