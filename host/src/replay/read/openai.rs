//! OpenAI's Chat Completions and Responses APIs, as VCR cassettes record
//! them, mapped to the turn gate's model (`SPEC C`; the mapping is
//! documented in `docs/TURN-GATE.md`, "Formats"). Each reply becomes the
//! Messages API shape the rest of the reader takes: `content` blocks
//! (`text`, `tool_use`, `server_tool_use`), a `stop_reason` and a `usage`
//! with the four counted fields.
//!
//! Usage: OpenAI's input count includes its cached tokens, so the cached
//! ones become `cache_read_input_tokens` and the rest `input_tokens`; the
//! output count includes reasoning tokens. The total is what was billed,
//! `prompt_tokens + completion_tokens` (Chat) or `input_tokens +
//! output_tokens` (Responses).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use budgetgate_core::turn::TokenUsage;

use super::exchanges::UNREADABLE;
use crate::gate::usage::{openai_usage, OpenAiShape};
use crate::strict::value_from_str;

/// Whether a body is a Chat Completions reply (`object: chat.completion`,
/// or `choices` beside `usage`/`model`).
pub(super) fn is_chat_completion(body: &Value) -> bool {
    body.get("object").and_then(Value::as_str) == Some("chat.completion")
        || (body.get("choices").is_some_and(Value::is_array)
            && (body.get("usage").is_some() || body.get("model").is_some()))
}

/// Whether a body is a Responses API reply (`object: response`, or
/// `response.compaction` from `POST /v1/responses/compact`).
pub(super) fn is_response(body: &Value) -> bool {
    matches!(
        body.get("object").and_then(Value::as_str),
        Some("response" | "response.compaction")
    )
}

/// The usage of a Chat reply in the four counted fields.
fn chat_usage(usage: Option<&Value>) -> Result<Value, String> {
    usage_json(openai_usage(usage, OpenAiShape::Chat)?)
}

/// The usage of a Responses reply in the four counted fields.
fn responses_usage(usage: Option<&Value>) -> Result<Value, String> {
    usage_json(openai_usage(usage, OpenAiShape::Responses)?)
}

fn usage_json(usage: Option<TokenUsage>) -> Result<Value, String> {
    Ok(match usage {
        None => Value::Null,
        Some(u) => json!({
            "input_tokens": u.input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "output_tokens": u.output_tokens,
        }),
    })
}

/// A function call's arguments (a JSON string): the value, or the
/// unreadable marker (the call is then refused `invalid-arguments`).
fn arguments(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    match value_from_str(text) {
        Ok(v) => Ok(v),
        Err(e) if e.is_data() => Err(format!("function arguments: {e}")),
        Err(_) => Ok(Value::String(format!("{UNREADABLE}{text}"))),
    }
}

/// A call id the gate takes: the recorded one, or one made from the reply
/// and the call's place when the recording has none (some OpenAI-compatible
/// servers send none).
fn call_id(id: Option<&str>, reply: &str, at: usize) -> String {
    match id {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => {
            let base: String = reply
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .take(40)
                .collect();
            format!("{base}-call-{at}")
        }
    }
}

/// A Chat `finish_reason` as a stop reason: `tool_calls` (and the legacy
/// `function_call`) → `tool_use`, `length` → `max_tokens` (cut off, never
/// executed), `stop` → `end_turn` — or `tool_use` when the reply holds tool
/// calls (a forced `tool_choice` ends with `stop`), `content_filter` →
/// `refusal`; null → inferred from the blocks; any other as written.
fn chat_stop(reason: Option<&str>, has_calls: bool) -> Value {
    match reason {
        None => Value::Null,
        Some("tool_calls" | "function_call") => json!("tool_use"),
        Some("stop") if has_calls => json!("tool_use"),
        Some("stop") => json!("end_turn"),
        Some("length") => json!("max_tokens"),
        Some("content_filter") => json!("refusal"),
        Some(other) => json!(other),
    }
}

/// A Chat Completions reply as a Messages API message; `notes` gets what is
/// worth saying (several choices, `stop` with tool calls).
pub(super) fn chat_message(
    body: &Value,
    label: &str,
    notes: &mut Vec<String>,
) -> Result<Value, String> {
    let fallback = label.replace(' ', "-");
    let id = body.get("id").and_then(Value::as_str).unwrap_or(&fallback);
    let choices = body
        .get("choices")
        .and_then(Value::as_array)
        .ok_or("`choices` is not a list")?;
    if choices.len() > 1 {
        notes.push(format!(
            "{label}: {} choices; the first is the one the agent continues with (the usage covers all)",
            choices.len()
        ));
    }
    let choice = choices.first();
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    if let Some(text) = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
    {
        content.push(json!({"type": "text", "text": text}));
    }
    let calls = match message.and_then(|m| m.get("tool_calls")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls.clone(),
        Some(_) => return Err("`tool_calls` is not a list".into()),
    };
    for (at, call) in calls.iter().enumerate() {
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tool call {at} has no function name"))?;
        let args = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        content.push(json!({
            "type": "tool_use",
            "id": call_id(call.get("id").and_then(Value::as_str), id, at),
            "name": name,
            "input": arguments(args).map_err(|e| format!("tool call {at}: {e}"))?,
        }));
    }
    let reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    if reason == Some("stop") && !calls.is_empty() {
        notes.push(format!(
            "{label}: finish_reason `stop` with tool calls (a forced tool_choice): a tool turn"
        ));
    }
    Ok(json!({
        "id": id,
        "type": "message",
        "content": content,
        "stop_reason": chat_stop(reason, !calls.is_empty()),
        "usage": chat_usage(body.get("usage"))?,
    }))
}

/// Rebuilds a Chat Completions reply from its stream (`chat.completion.chunk`
/// events, then `[DONE]`): text and tool-call deltas joined by index, the
/// `finish_reason`, the usage chunk (`stream_options.include_usage`). With
/// no `finish_reason` the stream did not end: the reason it is cut off.
pub(super) fn chat_from_sse(text: &str) -> Result<(Value, Option<String>), String> {
    let mut id: Option<String> = None;
    let mut model = Value::Null;
    let mut content_text = String::new();
    let mut calls: BTreeMap<u64, (Option<String>, String, String)> = BTreeMap::new();
    let mut finish: Option<String> = None;
    let mut usage = Value::Null;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let chunk = match value_from_str(data.trim()) {
            Ok(chunk) => chunk,
            Err(e) if e.is_data() => return Err(format!("chunk: {e}")),
            Err(_) => continue, // `[DONE]`
        };
        if chunk.get("error").is_some() {
            return Ok((
                json!({"type": "error", "error": chunk["error"].clone()}),
                None,
            ));
        }
        if id.is_none() {
            id = chunk.get("id").and_then(Value::as_str).map(str::to_owned);
            model = chunk.get("model").cloned().unwrap_or(Value::Null);
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = u.clone();
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            })
        else {
            continue;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            finish = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            continue;
        };
        if let Some(piece) = delta.get("content").and_then(Value::as_str) {
            content_text.push_str(piece);
        }
        for (at, call) in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(at as u64);
            let entry = calls.entry(index).or_default();
            if let Some(call_id) = call.get("id").and_then(Value::as_str) {
                entry.0 = Some(call_id.to_owned());
            }
            let function = call.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                entry.1.push_str(name);
            }
            if let Some(args) = function
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str)
            {
                entry.2.push_str(args);
            }
        }
    }
    let id = id.ok_or("no chat.completion.chunk in the stream")?;
    let tool_calls: Vec<Value> = calls
        .into_values()
        .map(|(call_id, name, args)| {
            json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    if !content_text.is_empty() {
        message.insert("content".into(), json!(content_text));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    });
    let cut_off = finish
        .is_none()
        .then(|| "the stream ends without a finish_reason".to_owned());
    Ok((body, cut_off))
}

/// A Responses API reply as a Messages API message. `function_call` items
/// are tool calls (`call_id` is the id their results name); built-in tools
/// (`web_search_call`, `file_search_call`, `code_interpreter_call`, …) are
/// server tool uses. Stop: `incomplete` with `max_output_tokens` →
/// `max_tokens`; any function call → `tool_use`; `completed` → `end_turn`;
/// other statuses as written.
pub(super) fn responses_message(body: &Value) -> Result<Value, String> {
    let id = body.get("id").and_then(Value::as_str).unwrap_or("resp");
    if body.get("object").and_then(Value::as_str) == Some("response.compaction") {
        // A compaction (`/v1/responses/compact`) is a billed model call that
        // answers nothing: the run goes on, as after `pause_turn`. Its
        // output echoes the compacted input, so no call in it is read.
        return Ok(json!({
            "id": id,
            "type": "message",
            "content": [],
            "stop_reason": "pause_turn",
            "usage": responses_usage(body.get("usage"))?,
        }));
    }
    let output = match body.get("output") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("`output` is not a list".into()),
    };
    let mut content = Vec::new();
    let mut calls = 0;
    for (at, item) in output.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        content.push(json!({"type": "text", "text": text}));
                    }
                }
            }
            Some("function_call" | "custom_tool_call") => {
                calls += 1;
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("output item {at} (function_call) has no `name`"))?;
                let args = item
                    .get("arguments")
                    .or_else(|| item.get("input"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let call = item
                    .get("call_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str);
                content.push(json!({
                    "type": "tool_use",
                    "id": call_id(call, id, at),
                    "name": name,
                    "input": arguments(args).map_err(|e| format!("output item {at}: {e}"))?,
                }));
            }
            Some(kind) if kind.ends_with("_call") => {
                content.push(
                    json!({"type": "server_tool_use", "name": kind.trim_end_matches("_call")}),
                );
            }
            _ => {}
        }
    }
    let status = body.get("status").and_then(Value::as_str);
    let incomplete = body
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let stop = match (status, incomplete) {
        (Some("incomplete"), Some("max_output_tokens")) => json!("max_tokens"),
        (Some("incomplete"), Some("content_filter")) => json!("refusal"),
        (Some("incomplete"), other) => json!(format!("incomplete: {}", other.unwrap_or("unknown"))),
        _ if calls > 0 => json!("tool_use"),
        (Some("completed" | "complete") | None, _) => json!("end_turn"),
        (Some(other), _) => json!(other),
    };
    Ok(json!({
        "id": id,
        "type": "message",
        "content": content,
        "stop_reason": stop,
        "usage": responses_usage(body.get("usage"))?,
    }))
}

/// Rebuilds a Responses API reply from its stream: the `response` of the
/// closing event (`response.completed`, `response.incomplete`,
/// `response.failed`); without one the stream did not end: the items done
/// so far (`response.output_item.done`), cut off.
pub(super) fn responses_from_sse(text: &str) -> Result<(Value, Option<String>), String> {
    let mut last: Option<Value> = None;
    let mut items = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let event = match value_from_str(data.trim()) {
            Ok(event) => event,
            Err(e) if e.is_data() => return Err(format!("event: {e}")),
            Err(_) => continue,
        };
        match event.get("type").and_then(Value::as_str) {
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                return Ok((event.get("response").cloned().unwrap_or(Value::Null), None));
            }
            Some("error") => return Ok((json!({"type": "error", "error": event}), None)),
            Some("response.created" | "response.in_progress") => {
                last = event.get("response").cloned()
            }
            Some("response.output_item.done") => {
                if let Some(item) = event.get("item") {
                    items.push(item.clone());
                }
            }
            _ => {}
        }
    }
    let mut response = last
        .filter(Value::is_object)
        .ok_or("no response.created event with a response object in the stream")?;
    response["output"] = Value::Array(items);
    Ok((
        response,
        Some("the stream ends without response.completed".to_owned()),
    ))
}

/// What a request declares and answers, for any of the APIs: declared tool
/// names (`tools[].name`, `tools[].function.name`), the output cap
/// (`max_tokens`, `max_completion_tokens`, `max_output_tokens`), and the
/// call ids it sends results for (`role: tool` messages' `tool_call_id`,
/// `function_call_output` items' `call_id`).
pub(super) fn request_results(
    request: &Value,
    into: &mut std::collections::HashMap<String, super::Outcome>,
) {
    for key in ["messages", "input"] {
        for m in request
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if m.get("role").and_then(Value::as_str) == Some("tool") {
                if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
                    into.insert(
                        id.to_owned(),
                        super::result_outcome(m.get("content"), false),
                    );
                }
            }
            if m.get("type").and_then(Value::as_str) == Some("function_call_output") {
                if let Some(id) = m.get("call_id").and_then(Value::as_str) {
                    into.insert(id.to_owned(), super::result_outcome(m.get("output"), false));
                }
            }
        }
    }
}
