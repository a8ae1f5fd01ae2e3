//! The tool calls a model request's messages hold, with their results, for
//! loop detection (`[loops]`; the core's
//! [`completed`](budgetgate_core::engine::loops::completed)): a client
//! sends the whole conversation with each model call, so the proxy sees
//! every call the agent made and what it returned, one request late.
//!
//! Read per API: Messages `tool_use` blocks of `assistant` messages and
//! `tool_result` blocks (`content`, `is_error`) of `user` messages; Chat
//! `tool_calls` of `assistant` messages and `tool` messages (`content`; no
//! error flag); Responses `function_call` and `function_call_output` items
//! of `input`. A call's key and a result's digest are every front-end's
//! ([`crate::gate::loops`]). The latest turn is looked at only when the
//! request ends with tool results (the model asked to go on after its
//! calls); a request that ends with a person's message is a new start.

use budgetgate_core::engine::loops::Made;
use budgetgate_core::tools::ToolName;
use serde_json::Value;

use super::Api;
use crate::gate::loops::{call_key, outcome_of};

/// The calls of a request's history, oldest first, and the turn whose
/// calls the request brings the results of (`None`: it does not end with
/// tool results).
#[derive(Debug, Default)]
pub struct History {
    /// The calls, each with its result when the history has it.
    pub calls: Vec<Made>,
    /// The turn the trailing results answer.
    pub latest: Option<u32>,
}

/// Collects calls and results by their ids.
#[derive(Default)]
struct Builder {
    history: History,
    /// Each call's id and its index in `calls`.
    ids: Vec<(String, usize)>,
    /// The turn being read (the count of model turns with calls so far).
    turn: u32,
    /// Whether the current turn has had a call.
    turn_open: bool,
}

impl Builder {
    fn next_turn(&mut self) {
        if self.turn_open {
            self.turn += 1;
            self.turn_open = false;
        }
    }

    /// A call: one the engine could never have let through (a bad name,
    /// arguments too deep to compare) is left out.
    fn call(&mut self, id: &str, name: &str, input: &Value) {
        let (Ok(tool), Some(key)) = (ToolName::new(name), call_key(name, input)) else {
            return;
        };
        self.turn_open = true;
        self.ids.push((id.to_owned(), self.history.calls.len()));
        self.history.calls.push(Made {
            call: key,
            name: tool,
            outcome: None,
            turn: self.turn,
        });
    }

    /// The result of call `id`; one with no call (its call was left out,
    /// or lies before the history) is nothing.
    fn result(&mut self, id: &str, content: &Value, error: bool) {
        if let Some(&(_, at)) = self.ids.iter().rev().find(|(i, _)| i == id) {
            if let Some(made) = self.history.calls.get_mut(at) {
                made.outcome = Some(outcome_of(content, error));
            }
        }
    }

    /// The history, the latest turn looked at when `ends_with_results`.
    fn done(mut self, ends_with_results: bool) -> History {
        self.history.latest = ends_with_results
            .then(|| self.history.calls.last().map(|m| m.turn))
            .flatten();
        self.history
    }
}

/// A tool call's arguments as OpenAI sends them (JSON text): their value,
/// or the text itself when it is not JSON.
fn arguments_of(value: Option<&Value>) -> Value {
    match value {
        Some(Value::String(text)) => {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Object(serde_json::Map::new()),
    }
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The history of request `body` of `api`; `Err` when the body is not
/// JSON (the caller refuses: a call whose history cannot be read is not
/// let through under `[loops]`).
pub fn tool_history(api: Api, body: &[u8]) -> Result<History, String> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the request's messages cannot be read for loop detection ({e})"))?;
    let none = Vec::new();
    let mut b = Builder::default();
    match api {
        Api::Messages => {
            let messages = value
                .get("messages")
                .and_then(Value::as_array)
                .unwrap_or(&none);
            let mut ends_with_results = false;
            for message in messages {
                let blocks = message
                    .get("content")
                    .and_then(Value::as_array)
                    .unwrap_or(&none);
                match text(message, "role") {
                    "assistant" => {
                        b.next_turn();
                        for block in blocks.iter().filter(|k| text(k, "type") == "tool_use") {
                            let input = block.get("input").unwrap_or(&Value::Null);
                            b.call(text(block, "id"), text(block, "name"), input);
                        }
                        ends_with_results = false;
                    }
                    _ => {
                        ends_with_results = false;
                        for block in blocks.iter().filter(|k| text(k, "type") == "tool_result") {
                            let content = block.get("content").unwrap_or(&Value::Null);
                            let error =
                                block.get("is_error").and_then(Value::as_bool) == Some(true);
                            b.result(text(block, "tool_use_id"), content, error);
                            ends_with_results = true;
                        }
                    }
                }
            }
            Ok(b.done(ends_with_results))
        }
        Api::Chat => {
            let messages = value
                .get("messages")
                .and_then(Value::as_array)
                .unwrap_or(&none);
            let mut ends_with_results = false;
            for message in messages {
                ends_with_results = false;
                match text(message, "role") {
                    "assistant" => {
                        b.next_turn();
                        let calls = message
                            .get("tool_calls")
                            .and_then(Value::as_array)
                            .unwrap_or(&none);
                        for call in calls {
                            let function = call.get("function").unwrap_or(&Value::Null);
                            let input = arguments_of(function.get("arguments"));
                            b.call(text(call, "id"), text(function, "name"), &input);
                        }
                    }
                    "tool" => {
                        let content = message.get("content").unwrap_or(&Value::Null);
                        b.result(text(message, "tool_call_id"), content, false);
                        ends_with_results = true;
                    }
                    _ => {}
                }
            }
            Ok(b.done(ends_with_results))
        }
        Api::Responses => {
            let items = value
                .get("input")
                .and_then(Value::as_array)
                .unwrap_or(&none);
            let mut ends_with_results = false;
            let mut in_calls = false;
            for item in items {
                match text(item, "type") {
                    "function_call" => {
                        if !in_calls {
                            b.next_turn();
                            in_calls = true;
                        }
                        let input = arguments_of(item.get("arguments"));
                        b.call(text(item, "call_id"), text(item, "name"), &input);
                        ends_with_results = false;
                    }
                    "function_call_output" => {
                        in_calls = false;
                        let output = item.get("output").unwrap_or(&Value::Null);
                        b.result(text(item, "call_id"), output, false);
                        ends_with_results = true;
                    }
                    // A model's reasoning comes before its calls, in the same turn.
                    "reasoning" => {}
                    _ => {
                        in_calls = false;
                        ends_with_results = false;
                    }
                }
            }
            Ok(b.done(ends_with_results))
        }
    }
}
