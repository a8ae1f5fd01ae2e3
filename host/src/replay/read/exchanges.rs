//! Anthropic Messages API exchanges (`{request, response}` JSON or JSON
//! Lines), and what the HTTP recordings (claude-trace logs, VCR cassettes)
//! share with them: the endpoint a request names, API errors, the Messages
//! API event stream rebuilt, and the session built from the exchanges.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::message::{apply_results, collect_results, exchange_input, turn_from_message};
use super::{brief, brief_text, is_exchange, is_message, is_request, without_position};
use super::{openai, providers};
use crate::replay::session::{Format, Session, UsageGranularity};
use crate::strict::value_from_str;

/// One exchange: the request body (if any), the response body, the
/// response's time (if any).
pub(super) struct Exchange {
    /// Where it is in the file, for messages (`line 3`, `interaction 2`).
    pub(super) label: String,
    pub(super) request: Option<Value>,
    pub(super) response: Value,
    pub(super) time_ms: Option<u64>,
    /// When the request was sent, where the recording says (claude-trace).
    pub(super) request_ms: Option<u64>,
    /// Why the reply is cut off (a stream without `message_stop`).
    pub(super) cut_off: Option<String>,
}

/// An API error object (`{"type": "error", "error": {…}}`): no model turn.
pub(super) fn is_api_error(o: &Map<String, Value>) -> bool {
    o.get("type").and_then(Value::as_str) == Some("error")
}

/// The note for an API error response skipped.
pub(super) fn api_error_note(
    label: &str,
    status: Option<u64>,
    body: &Value,
    streamed: bool,
) -> String {
    let kind = body
        .get("error")
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .map_or(String::new(), |k| format!(", {k}"));
    format!(
        "{label}: API error response (status {}{kind}{}), skipped: no model turn",
        status.map_or("unknown".into(), |c| c.to_string()),
        if streamed {
            ", an error event in the stream"
        } else {
            ""
        }
    )
}

/// Exchanges from JSON objects, each with a label for messages (`line 3`,
/// `item 2`).
pub(super) fn read_exchanges(values: Vec<(String, Value)>) -> Result<Session, String> {
    let mut exchanges = Vec::new();
    let mut notes = Vec::new();
    let mut pending_request: Option<Value> = None;
    for (label, value) in values {
        let Some(object) = value.as_object() else {
            return Err(format!("{label}: not a JSON object"));
        };
        let (request, response) = if is_exchange(object) {
            (
                object.get("request").cloned(),
                object.get("response").cloned().unwrap_or(Value::Null),
            )
        } else if is_message(object) || is_api_error(object) {
            (pending_request.take(), value)
        } else if is_request(object) {
            pending_request = Some(value);
            continue;
        } else {
            return Err(format!(
                "{label}: neither a request, a response nor a {{request, response}} pair"
            ));
        };
        match response.as_object() {
            Some(r) if is_api_error(r) => {
                notes.push(api_error_note(&label, None, &response, false));
                continue;
            }
            Some(r) if is_message(r) => {}
            _ if is_token_count(&response) => {
                notes.push(format!(
                    "{label}: a token count (count_tokens), not a model call: skipped"
                ));
                continue;
            }
            _ => {
                return Err(format!(
                    "{label}: the response is not an Anthropic Messages API message (no type \"message\", nor content and stop_reason)"
                ))
            }
        }
        exchanges.push(Exchange {
            label,
            request,
            response,
            time_ms: None,
            request_ms: None,
            cut_off: None,
        });
    }
    build_from_exchanges(Format::AnthropicExchanges, exchanges, notes)
}

/// What a request's URI says the exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// A model call, by the API's own path.
    Model(ModelApi),
    /// Anything else: token counting (`/v1/messages/count_tokens`), the
    /// Files API, model lists, image downloads, other services.
    Other,
    /// No URI recorded: the bodies decide.
    Unknown,
}

/// The endpoint a VCR request names (`uri`, or `url`), with the URI shown
/// in notes.
pub(super) fn endpoint_of(request: Option<&Value>) -> (Endpoint, String) {
    let Some(uri) = request
        .and_then(|r| r.get("uri").or_else(|| r.get("url")))
        .and_then(Value::as_str)
    else {
        return (Endpoint::Unknown, String::new());
    };
    let method = request
        .and_then(|r| r.get("method"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let path = uri
        .split(['?', '#'])
        .next()
        .unwrap_or(uri)
        .trim_end_matches('/');
    // The path without the host, which says what the call was.
    let local = path.split_once("://").map_or(path, |(_, rest)| {
        rest.find('/').map_or("/", |at| &rest[at..])
    });
    let local: String = if local.chars().count() > 60 {
        local.chars().take(59).chain(['…']).collect()
    } else {
        local.to_owned()
    };
    let shown = format!("{method} {local}").trim().to_owned();
    (
        ModelApi::of_path(path).map_or(Endpoint::Other, Endpoint::Model),
        shown,
    )
}

/// The model APIs a recorded URI can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModelApi {
    /// Anthropic Messages (`…/v1/messages`).
    AnthropicMessages,
    /// OpenAI Chat Completions (`…/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`…/responses`).
    OpenAiResponses,
    /// Amazon Bedrock Converse (`…/model/ID/converse`, `converse-stream`).
    BedrockConverse,
    /// Amazon Bedrock InvokeModel (`…/model/ID/invoke`): the provider's own
    /// body (an Anthropic model answers with a Messages API message).
    BedrockInvoke,
    /// Google Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl ModelApi {
    fn of_path(path: &str) -> Option<Self> {
        let last = path.rsplit('/').next().unwrap_or(path);
        Some(if path.ends_with("/messages") {
            Self::AnthropicMessages
        } else if path.ends_with("/chat/completions") {
            Self::OpenAiChat
        } else if path.ends_with("/responses") {
            Self::OpenAiResponses
        } else if path.contains("/model/") && (last == "converse" || last == "converse-stream") {
            Self::BedrockConverse
        } else if path.contains("/model/")
            && (last == "invoke" || last == "invoke-with-response-stream")
        {
            Self::BedrockInvoke
        } else if last.ends_with(":generateContent") || last.ends_with(":streamGenerateContent") {
            Self::Gemini
        } else {
            return None;
        })
    }

    /// The API in words, for refusals.
    pub(super) const fn description(self) -> &'static str {
        match self {
            Self::AnthropicMessages => "an Anthropic Messages API call",
            Self::OpenAiChat => "an OpenAI Chat Completions call",
            Self::OpenAiResponses => "an OpenAI Responses API call",
            Self::BedrockConverse => "an Amazon Bedrock Converse call",
            Self::BedrockInvoke => "an Amazon Bedrock InvokeModel call",
            Self::Gemini => "a Google Gemini generateContent call",
        }
    }
}

pub(super) fn is_message_value(body: &Value) -> bool {
    body.as_object().is_some_and(is_message)
}

/// A token-counting reply (`/v1/messages/count_tokens`: `{"input_tokens":
/// N}` and nothing a message has): no model call, nothing generated.
pub(super) fn is_token_count(body: &Value) -> bool {
    body.as_object().is_some_and(|o| {
        o.contains_key("input_tokens")
            && !o.contains_key("content")
            && !o.contains_key("usage")
            && !o.contains_key("choices")
    })
}

/// Rebuilds a message from a Messages API server-sent event stream, with
/// why it is cut off if the stream never reached `message_stop` (a dropped
/// connection: whatever its last blocks say, the reply did not end).
pub(super) fn message_from_sse(text: &str) -> Result<(Value, Option<String>), String> {
    let mut message: Option<Value> = None;
    let mut stopped = false;
    let mut delta = false;
    let mut partial_inputs: HashMap<usize, String> = HashMap::new();
    let mut blocks: Vec<Value> = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let event = match value_from_str(data.trim()) {
            Ok(event) => event,
            Err(e) if e.is_data() => {
                return Err(format!(
                    "event {}: {}",
                    brief_text(data.trim()),
                    without_position(&e)
                ))
            }
            // Not JSON (`[DONE]`, a comment): not an event of the Messages API.
            Err(_) => continue,
        };
        match event.get("type").and_then(Value::as_str) {
            // The stream failed (`overloaded_error`, …): an error response,
            // whatever came before it.
            Some("error") => return Ok((event, None)),
            Some("message_stop") => stopped = true,
            Some("message_start") => match event.get("message") {
                Some(m @ Value::Object(_)) => message = Some(m.clone()),
                _ => return Err("message_start without a message object".into()),
            },
            Some("content_block_start") => {
                let index = block_index(&event)?;
                let block = event.get("content_block").cloned().unwrap_or(Value::Null);
                if blocks.len() <= index {
                    blocks.resize(index + 1, Value::Null);
                }
                blocks[index] = block;
            }
            Some("content_block_delta") => {
                let index = block_index(&event)?;
                let delta = event.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if let Some(block) = blocks.get_mut(index) {
                            let text = block
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned()
                                + piece;
                            if let Some(o) = block.as_object_mut() {
                                o.insert("text".into(), Value::String(text));
                            }
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("partial_json"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        partial_inputs.entry(index).or_default().push_str(piece);
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                delta = true;
                let message = message
                    .as_mut()
                    .ok_or("message_delta before message_start")?;
                if let Some(reason) = event.get("delta").and_then(|d| d.get("stop_reason")) {
                    message["stop_reason"] = reason.clone();
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    if !message.get("usage").is_some_and(Value::is_object) {
                        message["usage"] = Value::Object(Map::new());
                    }
                    for (k, v) in usage {
                        if !v.is_null() {
                            message["usage"][k] = v.clone();
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let mut message = message.ok_or("no message_start event")?;
    for (index, block) in blocks.iter_mut().enumerate() {
        if block.get("type").and_then(Value::as_str) == Some("tool_use") {
            if let Some(json) = partial_inputs.get(&index) {
                // A stream cut off mid-way leaves unreadable arguments: kept
                // as a marker so the call is never taken as complete.
                block["input"] = match value_from_str(json) {
                    Ok(input) => input,
                    Err(e) if e.is_data() => {
                        return Err(format!(
                            "the streamed arguments of content block {index}: {}",
                            without_position(&e)
                        ))
                    }
                    Err(_) => Value::String(format!("{UNREADABLE}{json}")),
                };
            }
        }
    }
    message["content"] = Value::Array(blocks);
    let cut_off = (!stopped).then(|| {
        if delta {
            "the event stream ends without message_stop".to_owned()
        } else {
            "the event stream ends without message_delta or message_stop".to_owned()
        }
    });
    Ok((message, cut_off))
}

/// Most content blocks one streamed message may index.
const MAX_STREAM_BLOCKS: u64 = 4096;

/// A stream event's block `index` (0 when absent), at most
/// [`MAX_STREAM_BLOCKS`]: a huge index would otherwise allocate that many
/// blocks.
fn block_index(event: &Value) -> Result<usize, String> {
    let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
    if index >= MAX_STREAM_BLOCKS {
        return Err(format!(
            "content block index {index} in the stream; at most {MAX_STREAM_BLOCKS} blocks are read"
        ));
    }
    Ok(index as usize)
}

/// Prefix marking arguments that could not be read (streams cut off).
pub const UNREADABLE: &str = "\u{0}unreadable-arguments:";

pub(super) fn build_from_exchanges(
    format: Format,
    exchanges: Vec<Exchange>,
    mut notes: Vec<String>,
) -> Result<Session, String> {
    let mut turns = Vec::new();
    let mut results = HashMap::new();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    let mut any_declared = false;
    let start = exchanges.iter().find_map(|e| e.time_ms);
    let request_start = exchanges.iter().find_map(|e| e.request_ms);
    let mut previous_time: Option<u64> = None;
    for (index, exchange) in exchanges.into_iter().enumerate() {
        let mut turn = turn_from_message(&exchange.response, exchange_input)
            .map_err(|e| format!("{} (response {index}): {e}", exchange.label))?;
        if let Some(request) = &exchange.request {
            if turn.model.is_none() {
                turn.model = request
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            let cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
                .into_iter()
                .find_map(|k| request.get(k).filter(|v| !v.is_null()))
                .or_else(|| {
                    request
                        .get("inferenceConfig")
                        .and_then(|c| c.get("maxTokens"))
                        .or_else(|| {
                            request
                                .get("generationConfig")
                                .and_then(|c| c.get("maxOutputTokens"))
                        })
                        .filter(|v| !v.is_null())
                });
            turn.max_tokens = match cap {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    format!(
                        "{} (request {index}): `max_tokens` is {}, not a non-negative integer",
                        exchange.label,
                        brief(v)
                    )
                })?),
            };
            if let Some(tools) = request.get("tools").and_then(Value::as_array) {
                any_declared = true;
                declared.extend(
                    tools
                        .iter()
                        .filter_map(|t| {
                            t.get("name")
                                .or_else(|| t.get("function").and_then(|f| f.get("name")))
                                .and_then(Value::as_str)
                        })
                        .map(str::to_owned),
                );
            }
            if let Some(messages) = request.get("messages").and_then(Value::as_array) {
                for m in messages {
                    collect_results(m.get("content"), &mut results);
                }
            }
            openai::request_results(request, &mut results);
            let mut names = Vec::new();
            if providers::request_facts(request, &mut names, &mut results) {
                any_declared = true;
            }
            declared.extend(names);
        }
        // The request left when the recording says (counted from the
        // first model call), else after the previous response arrived.
        turn.requested_at_ms = match (request_start, exchange.request_ms, start, previous_time) {
            (Some(first), Some(at), _, _) => Some(at.saturating_sub(first)),
            (_, _, Some(s), Some(p)) => Some(p.saturating_sub(s)),
            (_, _, Some(_), None) => Some(0),
            _ => None,
        };
        if exchange.time_ms.is_some() {
            previous_time = exchange.time_ms;
        }
        if let Some(why) = &exchange.cut_off {
            notes.push(format!(
                "{}: {why}: cut off, its calls are never executed (as for max_tokens)",
                exchange.label
            ));
            turn.cut_off = Some(why.clone());
        }
        turns.push(turn);
    }
    if turns.is_empty() {
        let mut err = "no model responses in the recording".to_owned();
        for note in &notes {
            err.push_str("; ");
            err.push_str(note);
        }
        return Err(err);
    }
    apply_results(&mut turns, &results);
    let unanswered = turns
        .iter()
        .take(turns.len().saturating_sub(1))
        .flat_map(|t| &t.calls)
        .filter(|c| c.recorded.is_none())
        .count();
    if unanswered > 0 {
        notes.push(format!(
            "{unanswered} tool calls have no tool_result in a later request"
        ));
    }
    if request_start.is_some() {
        notes.push("times from the requests' timestamps, counted from the first model call".into());
    } else if start.is_some() {
        notes.push("times from the responses' Date headers (1 s resolution): a request is taken to leave when the previous response arrived".into());
    } else {
        notes.push("no timestamps: the time limit is not checked".into());
    }
    Ok(Session {
        spilled: None,
        format,
        turns,
        usage: UsageGranularity::PerTurn,
        declared_tools: any_declared.then(|| declared.into_iter().collect()),
        ends_complete: false,
        notes,
        time_origin_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_stream_is_rebuilt_and_cut_arguments_are_unreadable() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":5}}\n\n";
        let (message, cut_off) = message_from_sse(stream).unwrap();
        assert!(cut_off.is_some(), "no message_stop");
        assert_eq!(message["stop_reason"], "max_tokens");
        assert_eq!(message["usage"]["output_tokens"], 5);
        let input = message["content"][0]["input"].as_str().unwrap();
        assert!(input.starts_with(UNREADABLE));
    }
}
