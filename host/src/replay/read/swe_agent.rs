//! SWE-agent trajectories (`.traj`): each step one tool call, usage as run
//! totals.

use crate::gate::digest::TextDigest;
use budgetgate_core::engine::loops::Outcome;
use budgetgate_core::turn::TokenUsage;
use serde_json::Value;

use super::brief;
use crate::replay::session::{
    Format, RecordedArguments, RecordedCall, RecordedTurn, Session, UsageGranularity,
};
use crate::strict::value_from_str;

pub(super) fn read_traj(traj: &Value) -> Result<Session, String> {
    let steps = traj
        .get("trajectory")
        .and_then(Value::as_array)
        .ok_or("`trajectory` is not a list")?;
    let mut turns = Vec::new();
    let function_calls = history_function_calls(traj);
    let mut next_call = 0;
    let mut named = 0usize;
    for (index, step) in steps.iter().enumerate() {
        let action = step
            .get("action")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("step {index}: `action` is not a string"))?;
        // SWE-agent 1.x with function calling: the history's assistant
        // message of this step (the same action, in order) names the tool.
        let function = function_calls[next_call..]
            .iter()
            .position(|f| f.action == action)
            .map(|at| {
                let found = &function_calls[next_call + at];
                next_call += at + 1;
                found
            });
        let calls = if action.trim().is_empty() && function.is_none() {
            Vec::new()
        } else if let Some(f) = function {
            named += 1;
            vec![RecordedCall {
                // `step-N` as for any step: SWE-agent runs one action per
                // step and never matches results by id (its demonstrations
                // reuse ids), so the recorded id decides nothing.
                id: format!("step-{index}"),
                name: f.name.clone(),
                arguments: match &f.arguments {
                    Some(arguments) => RecordedArguments::of_value(arguments),
                    None => RecordedArguments::of_value(&serde_json::json!({ "command": action })),
                },
                recorded: Some(observed(step)),
            }]
        } else {
            vec![RecordedCall {
                id: format!("step-{index}"),
                name: command_name(action),
                arguments: RecordedArguments::of_value(&serde_json::json!({ "command": action })),
                recorded: Some(observed(step)),
            }]
        };
        let said = step.get("response").and_then(Value::as_str).unwrap_or("");
        turns.push(RecordedTurn {
            message_id: None,
            stop_reason: None,
            usage: None,
            text_chars: said.chars().count(),
            text_digest: TextDigest::of(said),
            calls,
            ..RecordedTurn::default()
        });
    }
    if turns.is_empty() {
        return Err("a SWE-agent trajectory with no steps".into());
    }
    let info = match traj.get("info") {
        None | Some(Value::Null) => None,
        Some(Value::Object(info)) => Some(info),
        Some(other) => return Err(format!("`info` is {}, not an object", brief(other))),
    };
    let stats = match info.and_then(|i| i.get("model_stats")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(stats)) => Some(stats),
        Some(other) => {
            return Err(format!(
                "info.model_stats is {}, not an object",
                brief(other)
            ))
        }
    };
    let count = |key: &str| -> Result<Option<u64>, String> {
        match stats.and_then(|s| s.get(key)) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                format!(
                    "info.model_stats.{key} is {}, not a non-negative integer",
                    brief(v)
                )
            }),
        }
    };
    let (sent, received) = (count("tokens_sent")?, count("tokens_received")?);
    let api_calls = count("api_calls")?;
    let mut notes = vec![
        if sent.is_none() && received.is_none() {
            format!("{} steps", turns.len())
        } else {
            format!(
                "{} steps; usage is recorded only as run totals (tokens_sent → input_tokens, tokens_received → output_tokens)",
                turns.len()
            )
        },
        if named == 0 {
            "each step's action is one tool call named by its first word, with the whole action as {\"command\": …}; no stop reasons recorded (a step with an action is a tool turn)".into()
        } else {
            format!(
                "{named} of {} steps named by the function call the history records (history[].tool_calls[].function.name, with its arguments){}; no stop reasons recorded (a step with an action is a tool turn)",
                turns.len(),
                if named < turns.len() { ", the others by the action's first word" } else { "" }
            )
        },
        "no timestamps: the time limit is not checked".into(),
    ];
    let usage = match (sent, received) {
        (None, None) => {
            notes.push(format!(
                "usage unknown: {} holds no tokens_sent or tokens_received; the cost shows 0 and the token limit is not checked",
                if info.is_none() { "the trajectory has no `info`, so it" } else { "info.model_stats" }
            ));
            UsageGranularity::Unknown
        }
        (sent, received) => {
            for (key, value) in [("tokens_sent", sent), ("tokens_received", received)] {
                if value.is_none() {
                    notes.push(format!("info.model_stats.{key} is missing: counted as 0"));
                }
            }
            UsageGranularity::RunTotal(TokenUsage {
                input_tokens: sent.unwrap_or(0),
                output_tokens: received.unwrap_or(0),
                ..TokenUsage::ZERO
            })
        }
    };
    if let Some(calls) = api_calls {
        if calls != turns.len() as u64 {
            notes.push(format!(
                "model_stats.api_calls is {calls}, the trajectory has {} steps",
                turns.len()
            ));
        }
    }
    let exit_status = match info.and_then(|i| i.get("exit_status")) {
        None | Some(Value::Null) => None,
        Some(Value::String(status)) => Some(status.as_str()),
        Some(other) => {
            return Err(format!(
                "info.exit_status is {}, not a string",
                brief(other)
            ))
        }
    };
    if let Some(status) = exit_status {
        notes.push(format!("exit_status: {status}"));
    }
    Ok(Session {
        spilled: None,
        format: Format::SweAgentTraj,
        turns,
        usage,
        declared_tools: None,
        // Only a plain `submitted`: `submitted (exit_cost)` and the like
        // were submitted by SWE-agent when its own limit stopped the agent.
        ends_complete: exit_status == Some("submitted"),
        notes,
        time_origin_ms: None,
    })
}

/// A function call of a SWE-agent 1.x history message.
struct FunctionCall {
    /// The assistant message's `action`, which the trajectory step repeats.
    action: String,
    /// `tool_calls[0].function.name`.
    name: String,
    /// `tool_calls[0].function.arguments`, parsed (`None`: not JSON).
    arguments: Option<Value>,
}

/// The function calls of a trajectory's history, in order: each assistant
/// message with an `action` and a `tool_calls[0].function.name`.
fn history_function_calls(traj: &Value) -> Vec<FunctionCall> {
    let Some(history) = traj.get("history").and_then(Value::as_array) else {
        return Vec::new();
    };
    history
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| {
            let action = m.get("action").and_then(Value::as_str)?;
            let call = m.get("tool_calls")?.as_array()?.first()?;
            let function = call.get("function")?;
            let name = function.get("name").and_then(Value::as_str)?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => value_from_str(text).ok(),
                Some(object @ Value::Object(_)) => Some(object.clone()),
                _ => None,
            };
            Some(FunctionCall {
                action: action.to_owned(),
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

/// The first word of a command, restricted to `[A-Za-z0-9_-]`, or `command`.
/// A path, quotes or a leading backslash name the same program (`/bin/rm`,
/// `\rm`, `'rm'` are `rm`), so they are taken off first: otherwise
/// `needs_approval = ["rm"]` would miss them (`/bin/rm` used to read `binrm`).
fn command_name(action: &str) -> String {
    let first = action.split_whitespace().next().unwrap_or("");
    let unquoted = first.trim_matches(|c| c == '\'' || c == '"');
    let program = unquoted.rsplit('/').next().unwrap_or(unquoted);
    let word: String = program
        .trim_start_matches('\\')
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    if word.is_empty() {
        "command".into()
    } else {
        word
    }
}

/// What a step's action returned, as loop detection compares it: its
/// `observation` (a text; none recorded is an empty one). A trajectory
/// records no error flag: every observation is a result.
fn observed(step: &Value) -> Outcome {
    let text = step
        .get("observation")
        .and_then(Value::as_str)
        .unwrap_or("");
    Outcome::of(text.as_bytes(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names() {
        assert_eq!(command_name("python reproduce_bug.py\n"), "python");
        assert_eq!(command_name("edit 287:295\nfoo"), "edit");
        assert_eq!(command_name("   "), "command");
        assert_eq!(command_name("./run.sh"), "runsh");
        for rm in [
            "/bin/rm -rf /",
            "\\rm -rf /",
            "'rm' -rf",
            "\"/usr/bin/rm\" x",
        ] {
            assert_eq!(command_name(rm), "rm", "{rm}");
        }
    }
}
