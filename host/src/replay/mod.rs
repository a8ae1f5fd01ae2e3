//! `budgetgate replay`: re-decides a recorded agent session turn by turn
//! through the core's turn gate (`SPEC C`).
//!
//! Where would the budget have stopped this agent, which calls would have
//! been refused, and what did the session really cost? The recording is read
//! in whichever supported format it is ([`Format`]), each model response is
//! counted once, and the gate decides every response as it would have live:
//! the budget check before each model call (steps, tokens, time, with the
//! recording's own timestamps where it has them), then each tool call in
//! order (repetition, tool-attempt budget, tool rule, approval). Executed
//! calls are answered with the outcome the recording holds.
//!
//! After the first point where the gate would have ended the run (budget
//! exhausted, or a stop reason other than `tool_use`, `pause_turn` or
//! `end_turn`), later responses are still counted in the real cost but not
//! decided ("not reached"). After an `end_turn`, a later response is a new
//! question on the same budget ([`TurnGate::resume`]).

mod approval;
mod batch;
pub(crate) mod budget;
mod read;
pub(crate) mod session;
mod spill;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use budgetgate_core::budget::{Ledger, Limit};
use budgetgate_core::turn::{
    Admission, Approver, ArgsFingerprint, CallVerdict, FingerprintBuilder, ProposeError,
    ProposedCall, RefusalReason, RunStatus, StopReason, TokenMode, TokenUsage, ToolName,
    ToolOutcome, ToolRule, ToolRules, TurnEnd, TurnGate,
};
use budgetgate_core::word;
use serde::Serialize;
use serde_json::Value;

pub use crate::term::terminal_safe;
pub use approval::{PolicyApprover, PromptApprover};
pub use budget::{parse_budget, ApprovePolicy, ReplayBudget};
pub use read::{
    read_large_claude_code, read_large_claude_code_spilled, read_session, MAX_YAML_ALIAS_WEIGHT,
    MAX_YAML_DEPTH,
};
pub use session::{
    Format, RecordedArguments, RecordedCall, RecordedTurn, Session, UsageGranularity,
    UsageIteration,
};
pub use spill::SpilledTurns;

/// The version of the `--json` report's schema (`schema_version`), raised
/// whenever a key changes meaning or goes away (new keys keep it).
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// Largest recording `replay` reads (bytes); a larger one is refused
/// before it is read whole.
pub const MAX_SESSION_BYTES: u64 = 256 << 20;

/// Largest budget file `replay` reads (bytes).
pub const MAX_BUDGET_BYTES: u64 = 1 << 20;

/// The gate the host replays with: roomier than the device's defaults
/// (256 calls per response, 4096 distinct calls, 256 named tools, 24 576
/// call ids per run: three quarters of 32 768 slots).
pub type ReplayGate = TurnGate<256, 4096, 256, { 1 << 15 }>;

/// Arguments of `budgetgate replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The recorded session: a Claude Code session log (.jsonl, with its
    /// subagents/agent-*.jsonl beside it), Claude Code stream-json output, a
    /// claude-trace log, Anthropic Messages API exchanges (.json/.jsonl), a
    /// VCR cassette (.yaml/.json, or gzipped .yaml.gz) of Anthropic or OpenAI
    /// calls, or a SWE-agent trajectory (.traj). The format is detected from
    /// the content. "-" reads standard input. At most 256 MiB (a Claude Code
    /// log of 16 MiB or more is read line by line, with no limit). A directory
    /// (e.g. ~/.claude/projects) replays every recording below it.
    #[arg(value_name = "FILE|DIR")]
    pub file: PathBuf,

    /// More recordings or directories. With several, or a directory, each
    /// recording is replayed on its own with the same budget, in parallel,
    /// and summed up in one table, worst first (--json: one object per line,
    /// with its `file`, and `error` instead of the report when it cannot be
    /// read); exit 2 if any cannot be read, else 1 if any was stopped or
    /// overshot. On a terminal, standard error shows a progress bar (bytes
    /// read, recordings done, rate, time left).
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,

    /// Budget file (TOML, see docs/TURN-GATE.md); without it, the reference's
    /// defaults: 15 model calls, 150000 tokens, 120 s, 2 repeats. "-" reads
    /// standard input. At most 1 MiB.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,

    /// The approver's answers for tools that need approval (listed in the
    /// budget file): all, none, or a comma-separated list of tool names.
    /// Overrides the budget file; default none.
    #[arg(long, value_name = "all|none|TOOL,...")]
    pub approve: Option<String>,

    /// Print one JSON object instead of the table (schema in
    /// docs/TURN-GATE.md). Keys: schema_version (2), format,
    /// format_description, turns, tool_calls, server_tool_calls, usage
    /// {input_tokens, output_tokens, cache_read_input_tokens,
    /// cache_creation_input_tokens, total}, usage_per_turn, usage_known,
    /// stopped {turn, reason, detail} or null, overshoot {limit, used, max,
    /// by} or null, status, refusals {reason: count}, executed, approved,
    /// reached_turns, gate_usage, gate_cost_micro_usd, budget, notes, agents [{agent, turns,
    /// tool_calls, usage}], per_turn [{turn, message_id, stop_reason,
    /// stop_reason_inferred, usage, running_total, reached, outcome, calls
    /// [{id, name, verdict, reason, recorded}], usage_iterations,
    /// server_tool_calls, cut_off, agent}].
    #[arg(long)]
    pub json: bool,
}

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
    fn of_tokens(counted: TokenUsage, max: u64) -> Option<Self> {
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
    fn of_cost(counted: u64, max: Option<u64>) -> Option<Self> {
        let max = max?;
        (counted > max).then(|| Self {
            limit: "cost",
            used: counted,
            max,
            by: counted - max,
        })
    }
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

/// The limits a replay ran with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    /// Most model calls.
    pub max_model_calls: u32,
    /// Most tokens.
    pub max_tokens: u64,
    /// Most wall time, in milliseconds.
    pub max_millis: u64,
    /// Most identical calls.
    pub max_repeats: u32,
    /// Most tool attempts, if limited.
    pub max_tool_calls: Option<u32>,
    /// Most cost in micro-dollars (`max_cost_usd`), if limited.
    pub max_cost_micro_usd: Option<u64>,
    /// Per-tool call caps (`[tools] max_calls`), tool name to most calls.
    pub tool_caps: BTreeMap<String, u32>,
    /// `after-the-fact` or `reserve`.
    pub token_mode: &'static str,
    /// Tools that need approval.
    pub needs_approval: Vec<String>,
    /// The approver's answers.
    pub approve: String,
    /// Which tools are known: `listed`, `declared by the recording`, or `any`.
    pub known_tools: String,
    /// Whether server tool uses count toward `max_tool_calls`.
    pub count_server_tools: bool,
}

/// The result of a replay; `--json` prints it as one object. Its per-turn
/// rows are held (`Vec<TurnReport>`, what [`replay`] gives), or made when
/// they are written ([`DecidedTurns`], what [`decide`] gives).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report<Rows = Vec<TurnReport>> {
    /// The version of this schema ([`REPORT_SCHEMA_VERSION`]).
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

/// What the gate made of a response it let happen (the outcome of its row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnOutcome {
    /// `continue`.
    Continue,
    /// `complete`.
    Complete,
    /// `error: REASON`: the stop reason ended the run.
    Error(StopReason),
}

/// The gate's decision on one call of a response it let happen: two bytes,
/// kept for every call the gate decided (issue 14, memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallDecision {
    verdict: Verdict,
    /// Why it was refused: its place in [`DecidedTurns::reasons`] plus one,
    /// or 0.
    reason: u8,
}

/// What the gate did with a call it decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Execute,
    Approved,
    Refused,
}

impl Verdict {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Execute => "execute",
            Self::Approved => "approved",
            Self::Refused => "refused",
        }
    }
}

/// A session's per-turn rows as the gate decided them, each made from the
/// recorded response and its decisions only when it is written: the rows of
/// a long session (its `--json` report is about 650 bytes a response) are
/// never all held. Only the responses the gate let happen, which come
/// first, have decisions; every later one is `not reached`.
#[derive(Debug, Clone)]
pub struct DecidedTurns<'s> {
    session: &'s Session,
    /// How many responses the session has.
    count: usize,
    /// How many calls its last response has.
    last_calls: usize,
    /// The outcome of each response the gate let happen: the first ones.
    outcomes: Vec<TurnOutcome>,
    /// The decision on each call of those responses, in order.
    calls: Vec<CallDecision>,
    /// The refusal reasons the decisions name.
    reasons: Vec<&'static str>,
    /// The response before which the budget stopped the run, if it did.
    stopped_before: Option<usize>,
}

impl DecidedTurns<'_> {
    /// Keeps the decision on the next call.
    fn push_call(&mut self, verdict: Verdict, reason: Option<&'static str>) {
        let reason = reason.map_or(0, |reason| {
            let at = self
                .reasons
                .iter()
                .position(|r| *r == reason)
                .unwrap_or_else(|| {
                    self.reasons.push(reason);
                    self.reasons.len() - 1
                });
            // Refusal reasons are a few dozen words.
            u8::try_from(at + 1).unwrap_or(u8::MAX)
        });
        self.calls.push(CallDecision { verdict, reason });
    }

    /// Whether the gate let the last response happen.
    fn last_reached(&self) -> bool {
        self.count > 0 && self.outcomes.len() == self.count
    }

    /// Whether the gate let the last response happen and ran every call of
    /// it.
    fn last_ran(&self) -> bool {
        self.last_reached()
            && self
                .calls
                .iter()
                .rev()
                .take(self.last_calls)
                .all(|c| matches!(c.verdict, Verdict::Execute | Verdict::Approved))
    }

    /// The rows, in order, each made when it is taken; an error reading a
    /// spilled response back ends them.
    pub fn rows(&self) -> impl Iterator<Item = std::io::Result<TurnReport>> + '_ {
        let mut running = TokenUsage::ZERO;
        let mut decided = self.calls.iter();
        self.session
            .each_turn()
            .enumerate()
            .map(move |(index, turn)| {
                let turn = turn?;
                if let Some(u) = turn.usage {
                    running = running.saturating_add(u);
                }
                let (stop_reason, stop_reason_inferred) = turn.effective_stop_reason();
                let report = |call: &RecordedCall, verdict, reason: Option<&str>| CallReport {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    verdict,
                    reason: reason.map(str::to_owned),
                    recorded: recorded_word(call),
                };
                let outcome = self.outcomes.get(index);
                let calls = match outcome {
                    // One decision per call, in order.
                    Some(_) => turn
                        .calls
                        .iter()
                        .zip(decided.by_ref())
                        .map(|(call, d)| {
                            let reason = usize::from(d.reason)
                                .checked_sub(1)
                                .and_then(|at| self.reasons.get(at).copied());
                            report(call, d.verdict.as_str(), reason)
                        })
                        .collect(),
                    None => turn
                        .calls
                        .iter()
                        .map(|call| report(call, "not-reached", None))
                        .collect(),
                };
                Ok(TurnReport {
                    turn: index,
                    message_id: turn.message_id.clone(),
                    stop_reason,
                    stop_reason_inferred,
                    usage: turn.usage,
                    running_total: turn.usage.map(|_| running),
                    reached: outcome.is_some(),
                    outcome: match outcome {
                        Some(TurnOutcome::Continue) => "continue".into(),
                        Some(TurnOutcome::Complete) => "complete".into(),
                        Some(TurnOutcome::Error(reason)) => format!("error: {reason}"),
                        None if self.stopped_before == Some(index) => {
                            "stopped before this call".into()
                        }
                        None => "not reached".into(),
                    },
                    calls,
                    usage_iterations: turn.iterations.clone(),
                    server_tool_calls: turn.server_calls.clone(),
                    cut_off: turn.cut_off.clone(),
                    agent: turn.agent.clone(),
                })
            })
    }
}

impl TurnRows for DecidedTurns<'_> {
    fn count(&self) -> usize {
        self.count
    }

    fn try_for_each_row<E: From<std::io::Error>>(
        &self,
        mut each: impl FnMut(&TurnReport) -> Result<(), E>,
    ) -> Result<(), E> {
        self.rows().try_for_each(|row| each(&row?))
    }
}

impl Serialize for DecidedTurns<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.count))?;
        for row in self.rows() {
            seq.serialize_element(&row.map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

impl<'s> Report<DecidedTurns<'s>> {
    /// The same report with every row made and held; an error reading a
    /// spilled response back is the error.
    pub fn held(self) -> Result<Report, String> {
        Ok(Report {
            per_turn: self
                .per_turn
                .rows()
                .collect::<std::io::Result<_>>()
                .map_err(spill_read_error)?,
            schema_version: self.schema_version,
            format: self.format,
            format_description: self.format_description,
            turns: self.turns,
            tool_calls: self.tool_calls,
            server_tool_calls: self.server_tool_calls,
            usage: self.usage,
            usage_per_turn: self.usage_per_turn,
            usage_known: self.usage_known,
            stopped: self.stopped,
            overshoot: self.overshoot,
            status: self.status,
            refusals: self.refusals,
            executed: self.executed,
            approved: self.approved,
            reached_turns: self.reached_turns,
            gate_usage: self.gate_usage,
            gate_cost_micro_usd: self.gate_cost_micro_usd,
            budget: self.budget,
            notes: self.notes,
            agents: self.agents,
        })
    }
}

fn spill_read_error(e: std::io::Error) -> String {
    format!("cannot read the responses back from their temporary file: {e}")
}

/// Micro-dollars as dollars for a person: `$2.500000`.
fn fmt_usd(micros: u64) -> String {
    format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// Fingerprints a JSON value's canonical form (`SPEC C`); `None` if it
/// nests deeper than 128 levels.
///
/// `serde_json` reads `-0` as the float `-0.0`, so the literal is lost:
/// Python reads `-0` as the integer 0 (`json.dumps` writes `0`, a repeat
/// of `0`) but `-0.0` and `-0e0` as the float `-0.0` (written `-0.0`, not a
/// repeat of `0`). A value `-0.0` is fingerprinted as the integer 0, so a
/// `-0` repeating `0` is counted as the reference counts it; a `-0.0`
/// after a `0` is then counted as a repeat too, which the reference would
/// not count: stricter, never looser.
pub fn fingerprint_value(value: &Value) -> Option<ArgsFingerprint> {
    fingerprint_walk(value, false).0
}

/// [`fingerprint_value`], with every float `-0.0` read as the float `0.0`
/// when `unsigned_zeros` (as `serde_json` compares them), otherwise as the
/// integer 0; also says whether a `-0.0` was met (before the walk ends,
/// when too deep).
pub(crate) fn fingerprint_walk(
    value: &Value,
    unsigned_zeros: bool,
) -> (Option<ArgsFingerprint>, bool) {
    fn walk(
        b: &mut FingerprintBuilder<128>,
        v: &Value,
        unsigned_zeros: bool,
        negative_zero: &mut bool,
    ) -> Option<()> {
        match v {
            Value::Null => b.null().ok(),
            Value::Bool(x) => b.bool(*x).ok(),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    b.i64(i).ok()
                } else if let Some(u) = n.as_u64() {
                    b.u64(u).ok()
                } else {
                    let x = n.as_f64()?;
                    if x == 0.0 && x.is_sign_negative() {
                        *negative_zero = true;
                        if unsigned_zeros {
                            return b.f64(0.0).ok();
                        }
                        // `-0` as Python reads it (see `fingerprint_value`).
                        return b.i64(0).ok();
                    }
                    b.f64(x).ok()
                }
            }
            Value::String(s) => b.str(s).ok(),
            Value::Array(items) => {
                b.begin_array().ok()?;
                for item in items {
                    walk(b, item, unsigned_zeros, negative_zero)?;
                }
                b.end_array().ok()
            }
            Value::Object(map) => {
                b.begin_object().ok()?;
                for (k, item) in map {
                    b.key(k).ok()?;
                    walk(b, item, unsigned_zeros, negative_zero)?;
                }
                b.end_object().ok()
            }
        }
    }
    let mut builder = FingerprintBuilder::<128>::new();
    let mut negative_zero = false;
    let fingerprint = walk(&mut builder, value, unsigned_zeros, &mut negative_zero)
        .and_then(|()| builder.finish().ok());
    (fingerprint, negative_zero)
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

/// The sub-agent logs Claude Code keeps beside a session log `S.jsonl`:
/// `S/subagents/agent-ID.jsonl`, by name, as `(agent-ID, path)`. Empty for
/// standard input or when there are none.
pub fn subagent_logs(main: &Path) -> Vec<(String, PathBuf)> {
    if main == Path::new("-") {
        return Vec::new();
    }
    let dir = main.with_extension("").join("subagents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let agent = name.strip_suffix(".jsonl")?;
            agent
                .starts_with("agent-")
                .then(|| (agent.to_owned(), e.path()))
        })
        .collect();
    found.sort();
    found
}

/// Reads a Claude Code session log's sub-agent logs ([`subagent_logs`])
/// into `session`; an unreadable one is an error naming its file.
fn add_subagents(main: &Path, session: &mut Session) -> Result<(), (String, String)> {
    if session.format != Format::ClaudeCode {
        return Ok(());
    }
    let logs = subagent_logs(main);
    if logs.is_empty() {
        return Ok(());
    }
    // Merged by time: every response held.
    session
        .hold_all()
        .map_err(|e| (input_name(main), spill_read_error(e)))?;
    let mut subs = Vec::new();
    for (agent, path) in logs {
        let name = input_name(&path);
        let mut sub = load_session(&path).map_err(|e| (name.clone(), e))?;
        sub.hold_all()
            .map_err(|e| (name.clone(), spill_read_error(e)))?;
        if sub.format != Format::ClaudeCode {
            return Err((
                name,
                format!(
                    "a sub-agent log read as {}, not a Claude Code session log",
                    sub.format.as_str()
                ),
            ));
        }
        subs.push((agent, sub));
    }
    session.merge_subagents(subs);
    Ok(())
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

fn recorded_word(call: &RecordedCall) -> &'static str {
    match call.recorded_error {
        Some(true) => "error",
        Some(false) => "ok",
        None => "none",
    }
}

/// Reads and replays `text` (a whole recording) with `budget`.
pub fn replay_text(text: &str, budget: &ReplayBudget) -> Result<Report, String> {
    let session = read_session(text)?;
    replay(&session, budget)
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
            "budget: {} model calls, {} tokens ({}), {} s, {} repeats, tool calls {}; approval needed for {}, approved: {}; known tools: {}",
            b.max_model_calls,
            b.max_tokens,
            b.token_mode,
            fmt_seconds(b.max_millis),
            b.max_repeats,
            b.max_tool_calls.map_or("unlimited".into(), |n| n.to_string()),
            if b.needs_approval.is_empty() { "no tool".into() } else { safe(&b.needs_approval.join(",")).into_owned() },
            safe(&b.approve),
            safe(&b.known_tools),
        );
        if b.max_cost_micro_usd.is_some() || !b.tool_caps.is_empty() {
            let caps: Vec<String> = b
                .tool_caps
                .iter()
                .map(|(tool, max)| format!("{} at most {max}", safe(tool)))
                .collect();
            let _ = writeln!(
                out,
                "budget: cost {}; per-tool caps: {}",
                b.max_cost_micro_usd.map_or("unlimited".into(), fmt_usd),
                if caps.is_empty() {
                    "none".into()
                } else {
                    caps.join(", ")
                },
            );
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

fn fmt_seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{:.3}", ms as f64 / 1000.0)
    }
}

/// The name an input path is reported under (`<stdin>` for `-`).
fn input_name(path: &Path) -> String {
    crate::input::display_name(path).into_owned()
}

/// Reads UTF-8 text of at most `limit` bytes from `reader`: reads at most
/// `limit + 1` bytes, so an endless input (`/dev/zero`) is refused without
/// being read whole. `what` names the kind of input in the error.
pub fn read_limited(reader: impl Read, limit: u64, what: &str) -> Result<String, String> {
    text_of(crate::input::read_bounded(reader, limit), what)
}

/// A gzip-compressed recording (a whole cassette as `.yaml.gz`, as
/// langchain keeps them; `1f 8b` at the start) decompressed, at most
/// [`MAX_SESSION_BYTES`] of it (a larger one is refused, so a gzip bomb is
/// never inflated whole); anything else as it is.
pub fn gunzipped(bytes: Vec<u8>) -> Result<Vec<u8>, crate::input::ReadError> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    crate::input::read_bounded(
        flate2::read::MultiGzDecoder::new(bytes.as_slice()),
        MAX_SESSION_BYTES,
    )
}

/// The read bytes as UTF-8 text, or the one-line reason they are not.
pub(crate) fn text_of(
    read: Result<Vec<u8>, crate::input::ReadError>,
    what: &str,
) -> Result<String, String> {
    let bytes = read.map_err(|e| match e {
        crate::input::ReadError::Io(e) => format!("cannot read: {e}"),
        crate::input::ReadError::TooLarge { limit } => format!(
            "larger than {} MiB, the limit for {what}; refused",
            limit >> 20
        ),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (an invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn load(args: &ReplayArgs) -> Result<(ReplayBudget, Session), (String, String)> {
    let file = input_name(&args.file);
    let stdin = Path::new("-");
    if args.file == stdin && args.budget.as_deref() == Some(stdin) {
        return Err((
            "--budget".to_owned(),
            "the recording and the budget cannot both come from standard input".to_owned(),
        ));
    }
    let budget = load_budget(args)?;
    let session = load_session(&args.file).map_err(|e| (file, e))?;
    Ok((budget, session))
}

/// Regular files of at least this many bytes that are Claude Code logs (or
/// stream-json output) are read line by line, never whole: the memory a
/// replay takes is then the responses it keeps, whatever the file's size.
pub const STREAM_FROM_BYTES: u64 = 16 << 20;

/// Reads the recording at `path` (`-`: standard input): whole, at most
/// [`MAX_SESSION_BYTES`] (a gzip-compressed one decompressed first), or, for
/// a regular file of [`STREAM_FROM_BYTES`] or more that is a Claude Code
/// log or stream-json output, line by line without holding it whole (no
/// size limit then).
fn load_session(path: &Path) -> Result<Session, String> {
    let large = path != Path::new("-")
        && std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= STREAM_FROM_BYTES);
    if large {
        if let Some(session) = read::read_large_claude_code_spilled(path)? {
            return Ok(session);
        }
    }
    let bytes = crate::input::read_path(path, MAX_SESSION_BYTES);
    let text = text_of(bytes.and_then(gunzipped), "a recording")?;
    read_session(&text)
}

/// The budget file (or the defaults) with `--approve` applied.
fn load_budget(args: &ReplayArgs) -> Result<ReplayBudget, (String, String)> {
    let mut budget = match &args.budget {
        // The one reader of budget files (the hook and the gateways read
        // theirs the same way).
        Some(path) => budget::read_budget(path, budget::StdinBudget::Allowed)?,
        None => ReplayBudget::default(),
    };
    if let Some(approve) = &args.approve {
        budget.approve = ApprovePolicy::parse_for(approve, &budget.needs_approval)
            .map_err(|e| ("--approve".to_owned(), e))?;
    }
    Ok(budget)
}

/// `replay DIR` or several files: see [`ReplayArgs::more`].
fn command_batch(args: &ReplayArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        ExitCode::from(2)
    };
    let mut paths = vec![args.file.clone()];
    paths.extend(args.more.iter().cloned());
    if paths.iter().any(|p| p == Path::new("-")) {
        return fail("-", "standard input cannot be one of several recordings");
    }
    let budget = match load_budget(args) {
        Ok(budget) => budget,
        Err((source, detail)) => return fail(&source, &detail),
    };
    let files = match batch::collect(&paths) {
        Ok(files) if files.is_empty() => {
            return fail(&input_name(&args.file), "no recordings found")
        }
        Ok(files) => files,
        Err((source, detail)) => return fail(&source, &detail),
    };
    match batch::run(&files, &budget, args.json, out).and_then(|status| {
        out.flush()?;
        Ok(status)
    }) {
        Ok(status) => ExitCode::from(status),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(0),
        Err(e) => fail("<stdout>", &format!("cannot write the report: {e}")),
    }
}

/// Runs `budgetgate replay`, printing to standard output. Exit status: 0
/// the gate would not have stopped the session and its budget held, 1 it
/// would have (budget exhausted, or a stop reason that ends the run) or the
/// budget was overshot ([`Report::overshoot`]), 2 the recording or the
/// budget file cannot be read, or the report cannot be written (one line on
/// stderr names the file and the problem).
pub fn command(args: &ReplayArgs) -> ExitCode {
    command_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr())
}

/// [`command`] writing the report to `out` and errors to `err`. A write
/// error on `out` is exit status 2 with one line on `err`, except a broken
/// pipe (`replay … | head`), which ends quietly with the status the replay
/// had.
pub fn command_to(args: &ReplayArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    if !args.more.is_empty() || args.file.is_dir() {
        return command_batch(args, out, err);
    }
    let file = input_name(&args.file);
    let mut fail = |source: &str, detail: &str| {
        let _ = writeln!(
            err,
            "budgetgate replay: {}: {}",
            terminal_safe(source),
            terminal_safe(&one_line(detail))
        );
        ExitCode::from(2)
    };
    let (budget, mut session) = match load(args) {
        Ok(loaded) => loaded,
        Err((source, detail)) => return fail(&source, &detail),
    };
    if let Err((source, detail)) = add_subagents(&args.file, &mut session) {
        return fail(&source, &detail);
    }
    let report = match decide(&session, &budget) {
        Ok(report) => report,
        Err(detail) => return fail(&file, &detail),
    };
    // Exit 1 when the budget was exceeded, stopped or not: a CI job that
    // asks "does this session fit the budget?" must not pass an overshoot.
    let exceeded = report.stopped.is_some() || report.overshoot.is_some();
    let status = ExitCode::from(u8::from(exceeded));
    // Written as it is made: the rows of a long session are never all held.
    let mut buffered = std::io::BufWriter::with_capacity(1 << 16, &mut *out);
    let written = if args.json {
        report.write_json(&mut buffered)
    } else {
        report.write_table(&file, &mut buffered)
    };
    match written.and_then(|()| buffered.flush()) {
        Ok(()) => status,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => status,
        Err(e) => fail("<stdout>", &format!("cannot write the report: {e}")),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        replay: ReplayArgs,
    }

    fn example(path: &str) -> String {
        format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"))
    }

    /// `command`, with the report and errors kept out of the test's output.
    fn run(args: &ReplayArgs) -> ExitCode {
        command_to(args, &mut Vec::new(), &mut Vec::new())
    }

    #[test]
    fn arguments_parse_and_exit_statuses() {
        let cli = Cli::try_parse_from([
            "replay",
            &example("replay/claude-code.jsonl"),
            "--budget",
            &example("budget.toml"),
            "--approve",
            "issue_refund,Bash",
            "--json",
        ])
        .unwrap();
        assert!(cli.replay.json);
        assert_eq!(cli.replay.approve.as_deref(), Some("issue_refund,Bash"));
        assert_eq!(run(&cli.replay), ExitCode::from(0));
        // The exchanges sample ends with max_tokens: the gate stops it.
        let stopped =
            Cli::try_parse_from(["replay", &example("replay/anthropic-exchanges.jsonl")]).unwrap();
        assert_eq!(run(&stopped.replay), ExitCode::from(1));
        // Unreadable inputs: exit 2.
        let missing = Cli::try_parse_from(["replay", "/nonexistent/session.jsonl"]).unwrap();
        assert_eq!(run(&missing.replay), ExitCode::from(2));
        let bad_budget = Cli::try_parse_from([
            "replay",
            &example("budget.toml"),
            "--budget",
            &example("replay/swe-agent.traj"),
        ])
        .unwrap();
        assert_eq!(run(&bad_budget.replay), ExitCode::from(2));
        let not_a_session = Cli::try_parse_from(["replay", &example("budget.toml")]).unwrap();
        assert_eq!(run(&not_a_session.replay), ExitCode::from(2));
        let bad_approve = Cli::try_parse_from([
            "replay",
            &example("replay/swe-agent.traj"),
            "--approve",
            ",",
        ])
        .unwrap();
        assert_eq!(run(&bad_approve.replay), ExitCode::from(2));
        assert!(Cli::try_parse_from(["replay"]).is_err());
    }

    /// Every key `--json` writes (top level, per turn, per call, budget,
    /// agents) is named in `--help` (top level and per turn) and in
    /// docs/TURN-GATE.md.
    #[test]
    fn every_json_key_is_in_the_help_and_the_docs() {
        use clap::CommandFactory;
        let text = std::fs::read_to_string(example("replay/claude-code.jsonl")).unwrap();
        let mut session = read_session(&text).unwrap();
        session.turns[0].agent = Some("agent-x".into());
        let report = replay(&session, &ReplayBudget::default()).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        let help = Cli::command().render_long_help().to_string();
        let help: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let docs = std::fs::read_to_string(format!(
            "{}/../docs/TURN-GATE.md",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        let per_turn = &json["per_turn"][0];
        let mut in_help = keys(&json);
        in_help.extend(keys(per_turn));
        in_help.extend(keys(&per_turn["calls"][0]));
        in_help.extend(keys(&json["agents"][0]));
        for key in &in_help {
            assert!(help.contains(key.as_str()), "--help does not name `{key}`");
        }
        let mut in_docs = in_help.clone();
        in_docs.extend(keys(&json["budget"]));
        for key in &in_docs {
            assert!(
                docs.contains(&format!("`{key}`")),
                "docs/TURN-GATE.md does not name `{key}`"
            );
        }
        assert_eq!(json["schema_version"], REPORT_SCHEMA_VERSION);
    }

    /// Issue 14 (memory): the report `replay` writes as it is made
    /// ([`decide`], rows made one at a time) is byte for byte the one held
    /// whole ([`replay`], [`Report::to_json`], [`Report::to_table`]): on
    /// every example, with a budget that stops a run before a call, one that
    /// lets every response happen, and approvals.
    #[test]
    fn the_report_written_as_it_is_made_is_the_one_held_whole() {
        let roomy = parse_budget(
            "[budget]\nmax_model_calls = 1000\nmax_tokens = 100000000\n[tools]\nneeds_approval = [\"issue_refund\"]\n",
        )
        .unwrap();
        let tight = parse_budget("[budget]\nmax_model_calls = 1\n").unwrap();
        let mut budgets = vec![ReplayBudget::default(), roomy, tight];
        let mut approving =
            parse_budget(&std::fs::read_to_string(example("budget.toml")).unwrap()).unwrap();
        approving.approve = ApprovePolicy::parse_for("all", &approving.needs_approval).unwrap();
        budgets.push(approving);
        let mut compared = 0;
        for file in [
            "replay/claude-code.jsonl",
            "replay/anthropic-exchanges.jsonl",
            "replay/swe-agent.traj",
            "replay/vcr-cassette.yaml",
        ] {
            let session = read_session(&std::fs::read_to_string(example(file)).unwrap()).unwrap();
            for budget in &budgets {
                let held = replay(&session, budget).unwrap();
                let made = decide(&session, budget).unwrap();
                let mut json = Vec::new();
                made.write_json(&mut json).unwrap();
                assert_eq!(
                    String::from_utf8(json).unwrap(),
                    held.to_json().unwrap() + "\n",
                    "{file}"
                );
                let mut table = Vec::new();
                made.write_table(file, &mut table).unwrap();
                assert_eq!(
                    String::from_utf8(table).unwrap(),
                    held.to_table(file),
                    "{file}"
                );
                assert_eq!(made.held().unwrap(), held);
                compared += 1;
            }
        }
        assert_eq!(compared, 16);
    }

    #[test]
    fn fingerprint_of_deep_values_is_none_past_128_levels() {
        let mut deep = Value::Null;
        for _ in 0..129 {
            deep = Value::Array(vec![deep]);
        }
        assert!(fingerprint_value(&deep).is_none());
        let mut ok = Value::Null;
        for _ in 0..128 {
            ok = Value::Array(vec![ok]);
        }
        assert!(fingerprint_value(&ok).is_some());
    }
}
