//! The bounded run with a policy and tools as closures (`SPEC A2`), built on
//! the core's sans-IO [`Run`] state machine.

use std::panic::{catch_unwind, AssertUnwindSafe};

use budgetgate_core::{
    word, ActionRef, ArgumentsRef, InvalidAction, ObservationData, Run, RunLimits, Status, ToolSet,
    ToolSetError, TraceRow, Verdict,
};
use serde::Serialize;
use serde_json::Value;

/// The arguments a tool receives: validated scalars (`SPEC A1`), borrowed
/// from the proposal's text (no copy of the 64 KiB owned form).
pub type Args<'a> = ArgumentsRef<'a>;

/// A registered tool: takes the validated arguments, returns a JSON value or
/// fails. A panic inside it is caught and counts as a failure.
pub type Tool<'t> = Box<dyn for<'a> FnMut(&Args<'a>) -> Result<Value, String> + 't>;

/// What the host really got back from one tool attempt (`SPEC A2`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    /// The attempt's call id.
    pub call_id: String,
    /// The tool name proposed.
    pub name: String,
    /// Whether `data` is the tool's result.
    pub ok: bool,
    /// The result, or [`word::UNKNOWN_TOOL`] / [`word::TOOL_ERROR`].
    pub data: Value,
}

/// The result of a bounded run, shaped as the reference's dictionary (`SPEC A2`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// How the run ended.
    pub status: Status,
    /// The final text when `status` is `final`, otherwise `None`.
    pub answer: Option<String>,
    /// One per tool attempt, in order.
    pub observations: Vec<Observation>,
    /// One row per decision round.
    pub trace: Vec<TraceRow>,
    /// Tool attempts counted.
    pub tool_attempts: u8,
    /// Why the round that stopped the run was rejected, when one was
    /// (`rejected` is the trace's last row): kept for explaining the stop,
    /// never part of the result's JSON (the reference's dictionary has no
    /// such key).
    #[serde(skip)]
    pub rejection: Option<Rejection>,
}

/// What was wrong with the proposal of a rejected round, as the run saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The policy failed, with its message (`invalid-policy-action`).
    PolicyFailed(String),
    /// The proposal is not a valid action: which rule, and at which byte of
    /// its text (`invalid-policy-action`).
    Invalid(InvalidAction),
    /// A tool call refused before it was counted (`duplicate-call-id`,
    /// `tool-budget`).
    Call {
        /// The call id proposed.
        call_id: String,
        /// The tool name proposed.
        name: String,
    },
}

/// Why a run cannot start (an error before anything runs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// A tool name is invalid, repeated, or there are more than 8.
    #[error("tool `{name}`: {reason}")]
    Tool {
        /// The offending name.
        name: String,
        /// The rule it breaks.
        reason: ToolSetError,
    },
}

/// A proposal as the policy hands it over: JSON text (owned or borrowed),
/// or a failure.
pub type Proposal<T = String> = Result<T, String>;

/// Runs the bounded loop (`SPEC A2`). `policy` sees the observations so far
/// (read-only) and returns a proposal as JSON text (its bytes: `String`,
/// `&str` or `&[u8]`; the core checks the encoding), or fails. Tools are called
/// by registered name.
pub fn run_bounded_agent<'t, T: AsRef<[u8]>>(
    policy: impl FnMut(&[Observation]) -> Proposal<T>,
    tools: Vec<(String, Tool<'t>)>,
    limits: RunLimits,
) -> Result<RunResult, SetupError> {
    let (names, mut callables): (Vec<String>, Vec<Tool<'t>>) = tools.into_iter().unzip();
    run_with_tools(
        policy,
        names.iter().map(String::as_str),
        |tool, args| match callables.get_mut(tool) {
            Some(f) => f(args),
            None => Err("no such tool".into()),
        },
        limits,
    )
}

/// [`run_bounded_agent`] with the tools given as their names, in order, and
/// one function that calls tool `i` (its index in `names`): no closure per
/// tool. A panic inside `call` is caught and counts as a failure.
pub fn run_with_tools<'n, T: AsRef<[u8]>>(
    mut policy: impl FnMut(&[Observation]) -> Proposal<T>,
    names: impl IntoIterator<Item = &'n str>,
    mut call: impl FnMut(usize, &Args<'_>) -> Result<Value, String>,
    limits: RunLimits,
) -> Result<RunResult, SetupError> {
    let mut set = ToolSet::new();
    for name in names {
        set.try_add(name).map_err(|reason| SetupError::Tool {
            name: name.to_owned(),
            reason,
        })?;
    }
    let mut run: Run = Run::new(limits, set);
    let mut observations: Vec<Observation> = Vec::new();
    let mut answer = None;
    let mut rejection = None;
    while run.status().is_none() {
        let proposal = catch_unwind(AssertUnwindSafe(|| policy(&observations)))
            .unwrap_or_else(|_| Err("policy panicked".into()));
        let action = match &proposal {
            Ok(text) => ActionRef::validate(text.as_ref()).map_err(Rejection::Invalid),
            Err(message) => Err(Rejection::PolicyFailed(message.clone())),
        };
        let Ok(verdict) = run.decide(action.as_ref().ok()) else {
            break;
        };
        let observe = |call_id: &str, name: &str, ok: bool, data: Value| Observation {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            ok,
            data,
        };
        match verdict {
            Verdict::Final { text } => answer = Some(text.chars().collect()),
            Verdict::Stop { call: Some(c), .. } => {
                rejection = Some(Rejection::Call {
                    call_id: c.call_id.to_string(),
                    name: c.name.to_string(),
                });
            }
            Verdict::Stop { call: None, .. } => rejection = action.as_ref().err().cloned(),
            Verdict::UnknownTool { call: c, .. } => {
                observations.push(observe(
                    &c.call_id,
                    &c.name,
                    false,
                    Value::from(word::UNKNOWN_TOOL),
                ));
            }
            Verdict::Execute {
                tool,
                call: proposed,
                pending,
            } => {
                let outcome = catch_unwind(AssertUnwindSafe(|| call(tool, &proposed.arguments)))
                    .unwrap_or_else(|_| Err("tool panicked".into()));
                let done = run.complete(pending, outcome.as_ref().ok());
                let observation = match (done, outcome) {
                    (Ok(c), Ok(value)) if matches!(c.data, ObservationData::Result { .. }) => {
                        observe(&proposed.call_id, &proposed.name, true, value)
                    }
                    _ => observe(
                        &proposed.call_id,
                        &proposed.name,
                        false,
                        Value::from(word::TOOL_ERROR),
                    ),
                };
                observations.push(observation);
            }
        }
    }
    Ok(RunResult {
        status: run.status().unwrap_or(Status::PolicyError),
        answer,
        observations,
        trace: run.trace().to_vec(),
        tool_attempts: run.tool_attempts(),
        rejection,
    })
}
