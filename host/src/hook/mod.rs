//! `budgetgate hook claude-code`: the budget gate as a Claude Code hook
//! (`SPEC C`, `SPEC E`; `docs/CLAUDE-CODE.md`).
//!
//! Claude Code starts the command once per hook event, with the event's
//! JSON on stdin. Every event first reads what is new in the session's
//! transcript (and its sub-agents' transcripts) since the last event and
//! counts the model calls, tokens and cost in it; then, for `PreToolUse`,
//! the call is decided against the session's ledger, in this order:
//!
//! 1. a tool name outside `[A-Za-z0-9_-]{1,64}` → deny (`invalid-name`);
//! 2. a `tool_use_id` seen earlier in the session → deny (`duplicate-call-id`);
//! 3. a limit checked before each model call already reached — model calls,
//!    tokens, time, cost (a tool's result must go back to the model in a
//!    call that would be refused), or a model without a price in cost mode
//!    → deny (`budget-exhausted`);
//! 4. the same tool with the same canonical arguments more than
//!    `max_repeats` times → deny (`repeat`);
//! 5. no tool attempts left → deny (`tool-budget`); the tool's own cap
//!    reached → deny (`tool-cap`);
//! 6. the attempt is counted; a tool in `needs_approval` → `ask`; otherwise
//!    **no decision**: Claude Code's own permission rules still apply. The
//!    gate never answers `allow`.
//!
//! A sub-agent's call (`agent_id`) is checked against the session's ledger
//! and its own (`[subagent]` limits), and counted in both.
//!
//! With `[loops]` in the budget, `PostToolUse` and `PostToolUseFailure`
//! report what each call returned (`tool_response`, or the failure's
//! `error`) to the session's loop window, and a `PreToolUse` that would
//! complete a pattern of calls whose results do not change is denied
//! `no-progress` (after `repeat`, before `tool-budget`).
//!
//! `UserPromptSubmit`, `Stop` and `SubagentStop` end the session
//! (`continue: false` with a `stopReason`) once a before-call limit is
//! reached. Every decision is one SQLite transaction (see
//! [`crate::store`]), so concurrent hook processes never exceed a budget
//! and a killed process leaves the ledger as before its decision.
//!
//! Fail closed: an unreadable budget, a corrupt ledger, a lock not had in
//! time, an internal error or the command's own deadline (default 2 s)
//! denies a `PreToolUse` (exit 2, the reason on stderr, which Claude Code
//! shows the model) and blocks a `UserPromptSubmit`; on the other events,
//! where exit 2 would make Claude keep working, it exits 1 (a non-blocking
//! error shown to the user).

mod absorb;

use budgetgate_core::engine;
use serde_json::{json, Value};

use self::absorb::{absorb, first_shown, REUSED};
use crate::gate::budget_file::ReplayBudget;
use crate::gate::{self, GateError, Ledgers};
use crate::store::{LedgerTx, StoreError};

/// Longest transcript line read (a longer one is an error: the gate cannot
/// count what it cannot read).
pub const MAX_TRANSCRIPT_LINE: usize = 32 << 20;

/// Most transcript bytes one event reads (about 0.3 s): a longer backlog (a
/// hook installed into a long session) is read over several events, each
/// committing its progress, and tool calls are denied until it is caught up.
pub const MAX_READ_PER_EVENT: u64 = 2 * MAX_TRANSCRIPT_LINE as u64;

/// Largest hook event read from stdin.
pub const MAX_EVENT_BYTES: u64 = 16 << 20;

/// Default deadline of one hook call, in milliseconds: well under Claude
/// Code's hook timeout, since a hook that times out does not block the tool.
pub const DEFAULT_DEADLINE_MS: u64 = 2_000;

/// A hook event, parsed: the common fields and the event's own.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent {
    /// `session_id`.
    pub session_id: String,
    /// `transcript_path`.
    pub transcript_path: String,
    /// `hook_event_name`.
    pub name: String,
    /// `agent_id`, for a sub-agent's event.
    pub agent_id: Option<String>,
    /// `PreToolUse`: the call.
    pub call: Option<ToolUse>,
    /// `PostToolUse` / `PostToolUseFailure`: the call that ran and what it
    /// returned (loop detection's outcome, `[loops]`).
    pub result: Option<ToolResult>,
}

/// A call that ran, as `PostToolUse` (`tool_response`) or
/// `PostToolUseFailure` (`error`) tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// `tool_name`.
    pub name: String,
    /// `tool_input`.
    pub input: Value,
    /// What it returned, as loop detection compares it; `None` when the
    /// event carries no result (nothing is reported).
    pub outcome: Option<engine::Outcome>,
}

/// The tool call of a `PreToolUse` event.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// `tool_name`, as sent (checked against the grammar when decided).
    pub name: String,
    /// `tool_input`.
    pub input: Value,
    /// `tool_use_id`.
    pub id: String,
}

/// What the hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No decision: Claude Code's own rules decide.
    Pass,
    /// `permissionDecision: "deny"` with this reason (`PreToolUse`).
    Deny {
        /// The contract's reason word.
        reason: String,
        /// The text the model reads.
        text: String,
        /// Also `continue: false`: the budget is spent, so the agent loop
        /// stops here instead of calling the model again.
        stop: bool,
    },
    /// `permissionDecision: "ask"` with this reason (`PreToolUse`).
    Ask(String),
    /// `continue: false` with this `stopReason`.
    Stop(String),
}

impl Answer {
    /// The JSON printed on stdout, if any.
    pub fn to_json(&self, event: &str) -> Option<Value> {
        match self {
            Self::Pass => None,
            Self::Deny { text, stop, .. } => {
                let mut answer = json!({"hookSpecificOutput": {
                    "hookEventName": event, "permissionDecision": "deny",
                    "permissionDecisionReason": text}});
                if *stop {
                    answer["continue"] = Value::Bool(false);
                    answer["stopReason"] = Value::from(text.as_str());
                }
                Some(answer)
            }
            Self::Ask(text) => Some(json!({"hookSpecificOutput": {
                "hookEventName": event, "permissionDecision": "ask",
                "permissionDecisionReason": text}})),
            Self::Stop(text) => Some(json!({"continue": false, "stopReason": text})),
        }
    }
}

/// Why the hook could not decide; it refuses (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The event on stdin is not a hook event.
    #[error("hook event: {0}")]
    Event(String),
    /// The budget cannot be applied (a cap's tool name, too many caps).
    #[error("budget {0}")]
    Budget(String),
    /// The budget file cannot be read; the text names it (`budget file
    /// PATH: …`, as [`read_budget_file`](crate::gate::budget_file::read_budget_file)
    /// words it).
    #[error("{0}")]
    BudgetFile(String),
    /// The ledger named (`--ledger`, `--state`) cannot be used; the text
    /// names the option and its value.
    #[error("{0}")]
    Ledger(String),
    /// The ledger.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The decision.
    #[error(transparent)]
    Gate(GateError),
    /// A transcript could not be read.
    #[error("transcript {path}: {detail}")]
    Transcript {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

impl From<GateError> for HookError {
    fn from(e: GateError) -> Self {
        match e {
            GateError::Store(e) => Self::Store(e),
            GateError::Budget(e) => Self::Budget(e),
            GateError::Input(e) => Self::Event(e),
        }
    }
}

fn field<'a>(
    object: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<&'a Value, HookError> {
    object
        .get(key)
        .ok_or_else(|| HookError::Event(format!("missing required field `{key}`")))
}

fn string_field(object: &serde_json::Map<String, Value>, key: &str) -> Result<String, HookError> {
    field(object, key)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HookError::Event(format!("`{key}` is not a string")))
}

/// Most characters of a session or agent id.
const MAX_ID_CHARS: usize = 256;

fn checked_id(key: &str, id: String) -> Result<String, HookError> {
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
        return Err(HookError::Event(format!(
            "`{key}` must be 1 to {MAX_ID_CHARS} characters without control characters"
        )));
    }
    Ok(id)
}

impl HookEvent {
    /// Reads one hook event. Unknown fields are ignored; a missing common
    /// field (`session_id`, `transcript_path`, `cwd`, `hook_event_name`) or,
    /// for `PreToolUse`, a missing `tool_name`, `tool_input` or
    /// `tool_use_id` is an error, as is a duplicate key.
    pub fn parse(text: &str) -> Result<Self, HookError> {
        // A lone surrogate escape, which `JSON.stringify` writes (a text
        // cut inside a pair), is read as U+FFFD, as in the transcript.
        let text = crate::strict::without_lone_surrogates(text);
        let value: Value = crate::strict::value_from_str(&text).map_err(|e| {
            HookError::Event(if text.trim().is_empty() {
                "not a JSON object: stdin is empty".into()
            } else if e.is_data() || e.to_string().starts_with("recursion limit") {
                // A duplicate key or a nesting too deep: the reader's words
                // name it (and where it is).
                e.to_string()
            } else {
                format!(
                    "not a JSON object: stdin is not JSON at line {}, column {}",
                    e.line(),
                    e.column()
                )
            })
        })?;
        let Value::Object(object) = value else {
            return Err(HookError::Event("not a JSON object".into()));
        };
        let session_id = checked_id("session_id", string_field(&object, "session_id")?)?;
        let transcript_path = string_field(&object, "transcript_path")?;
        string_field(&object, "cwd")?;
        let name = string_field(&object, "hook_event_name")?;
        let agent_id = match object.get("agent_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(checked_id("agent_id", id.clone())?),
            Some(_) => return Err(HookError::Event("`agent_id` is not a string".into())),
        };
        let call = if name == "PreToolUse" {
            let input = field(&object, "tool_input")?.clone();
            if !input.is_object() {
                return Err(HookError::Event("`tool_input` is not an object".into()));
            }
            Some(ToolUse {
                name: string_field(&object, "tool_name")?,
                input,
                id: string_field(&object, "tool_use_id")?,
            })
        } else {
            None
        };
        // Claude Code sends `tool_response` after a call that succeeded,
        // `error` (a text) after one that failed. Neither is required: an
        // event without them reports nothing, and never fails the hook.
        let result = match name.as_str() {
            "PostToolUse" | "PostToolUseFailure" => {
                let failed = name == "PostToolUseFailure";
                let returned = object.get(if failed { "error" } else { "tool_response" });
                match (object.get("tool_name"), object.get("tool_input")) {
                    (Some(Value::String(tool)), Some(input)) => Some(ToolResult {
                        name: tool.clone(),
                        input: input.clone(),
                        outcome: returned.map(|r| crate::gate::loops::outcome_of(r, failed)),
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(Self {
            session_id,
            transcript_path,
            name,
            agent_id,
            call,
            result,
        })
    }
}

pub use crate::gate::clock::now_ms;

/// Decides one event against the ledger in `tx` (see the module docs for
/// the order). Changes are committed with the transaction. `ledger_options`:
/// how `budgetgate ledger` is pointed at this ledger (` --state DIR`, or
/// empty for the default one), for the command a spent session's stop
/// suggests.
pub fn decide(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    budget: &ReplayBudget,
    now: u64,
    ledger_options: &str,
) -> Result<Answer, HookError> {
    let session = &event.session_id;
    let tools = budget.tool_table().map_err(GateError::Budget)?;
    let mut ledgers = Ledgers::load(tx, session, budget, &tools, now)?;
    if let Some(agent) = &event.agent_id {
        ledgers.agent(tx, session, agent, budget, now)?;
    }
    let backlog = absorb(tx, event, budget, &mut ledgers, now)?;
    ledgers.session.observe_time(now);
    for (_, ledger) in &mut ledgers.agents {
        ledger.observe_time(now);
    }
    let answer = match (&event.call, event.name.as_str()) {
        // Not counted up to date: the gate cannot decide yet (fail closed),
        // but the progress made is kept, so a later call can be decided.
        (Some(_), _) if backlog > 0 => Answer::Deny {
            reason: "transcript-backlog".to_owned(),
            stop: false,
            text: format!(
                "budgetgate refused this call (transcript-backlog): the session's transcript still has {:.1} MB to count before a call can be decided; not executed. Retry the call.",
                backlog as f64 / 1e6
            ),
        },
        (Some(call), _) => decide_call(tx, event, call, budget, &mut ledgers, now)?,
        // Only the session's own budget ends the session: a sub-agent over
        // its own limit has its calls denied, and its stop is its own.
        (None, "UserPromptSubmit" | "Stop" | "SubagentStop") => {
            match gate::exhausted(tx, session, None, &mut ledgers)? {
                Some((detail, Some(_))) => Answer::Stop(format!(
                    "budgetgate: {detail}; the session's budget is spent (see `budgetgate ledger show{ledger_options} {}{}`)",
                    // An id that begins with `-` is not taken for an option.
                    if session.starts_with('-') { "-- " } else { "" },
                    crate::term::terminal_safe(&crate::hook_install::shell_quote(session))
                )),
                // No limit is spent: a model's cost cannot be counted.
                Some((detail, None)) => Answer::Stop(format!("budgetgate: {detail}")),
                None => Answer::Pass,
            }
        }
        (None, "PostToolUse" | "PostToolUseFailure") => {
            if let (Some(ran), true) = (&event.result, budget.loops.is_on()) {
                let agent = event.agent_id.as_deref().unwrap_or("");
                if let (Some(call), Some(outcome)) =
                    (gate::loops::call_key(&ran.name, &ran.input), ran.outcome)
                {
                    gate::loops::report_tool_outcome(tx, session, agent, call, Some(outcome))?;
                }
            }
            Answer::Pass
        }
        (None, _) => Answer::Pass,
    };
    ledgers.store(tx, session, now)?;
    if let Answer::Deny { reason, .. } = &answer {
        let call = event.call.as_ref().map_or("", |c| c.id.as_str());
        tx.log(now, session, "deny", &format!("{call}: {reason}"))?;
    }
    Ok(answer)
}

fn decide_call(
    tx: &(impl LedgerTx + ?Sized),
    event: &HookEvent,
    call: &ToolUse,
    budget: &ReplayBudget,
    ledgers: &mut Ledgers<'_>,
    now: u64,
) -> Result<Answer, HookError> {
    let shown_id = format!("the tool_use_id {}", Value::from(call.id.as_str()));
    let reused = tx
        .transcript_call(&event.session_id, &first_shown(&call.id))?
        .as_deref()
        == Some(REUSED);
    let call = gate::ToolCall {
        name: &call.name,
        input: &call.input,
        call_id: &call.id,
        shown_id: &shown_id,
        id_scope: "in this session",
        reused,
    };
    let cx = gate::Context {
        session: &event.session_id,
        agent: event.agent_id.as_deref(),
        budget,
        now,
    };
    Ok(
        match gate::decide_tool_call(tx, &cx, ledgers, &call, gate::Counting::Record)? {
            gate::Verdict::Refuse(refusal) => Answer::Deny {
                reason: refusal.reason.to_owned(),
                stop: refusal.ends_session,
                text: refusal.text,
            },
            gate::Verdict::Ask(text) => Answer::Ask(text),
            gate::Verdict::Run => Answer::Pass,
        },
    )
}
