//! Amazon Bedrock Converse and Google Gemini `generateContent`, as VCR
//! cassettes record them, mapped to the turn gate's model (`SPEC C`; the
//! mapping is documented in `docs/TURN-GATE.md`). Each reply becomes the
//! Messages API shape the rest of the reader takes, as in `openai.rs`.

use serde_json::{json, Value};

use crate::strict::value_from_str;

/// Whether a body is a Bedrock Converse reply (`output.message` beside
/// `stopReason`).
pub(super) fn is_converse(body: &Value) -> bool {
    body.get("output").and_then(|o| o.get("message")).is_some() && body.get("stopReason").is_some()
}

/// Whether a body is a Gemini `generateContent` reply (`candidates` or
/// `usageMetadata`), or a JSON array of them (`streamGenerateContent`
/// without `alt=sse`).
pub(super) fn is_gemini(body: &Value) -> bool {
    match body {
        Value::Array(items) => !items.is_empty() && items.iter().all(is_gemini),
        _ => body.get("candidates").is_some() || body.get("usageMetadata").is_some(),
    }
}

fn count(v: Option<&Value>, key: &str) -> Result<u64, String> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("usage `{key}` is not a non-negative integer")),
    }
}

/// A Bedrock Converse reply as a Messages API message. Usage: `inputTokens`
/// (cache reads and writes apart, as Anthropic counts them: `totalTokens`
/// is the sum of the four), `outputTokens`, `cacheReadInputTokens`,
/// `cacheWriteInputTokens`. `stopReason` is the Messages API's own words
/// (`tool_use`, `end_turn`, `max_tokens`, …); `guardrail_intervened` and
/// `content_filtered` end the run with that reason.
pub(super) fn converse_message(body: &Value) -> Result<Value, String> {
    let mut content = Vec::new();
    let blocks = body["output"]["message"]
        .get("content")
        .and_then(Value::as_array)
        .ok_or("output.message.content is not a list")?;
    for (at, block) in blocks.iter().enumerate() {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            content.push(json!({"type": "text", "text": text}));
        }
        if let Some(call) = block.get("toolUse") {
            let field = |key: &str| {
                call.get(key)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("content block {at} (toolUse) has no `{key}`"))
            };
            content.push(json!({
                "type": "tool_use",
                "id": field("toolUseId")?,
                "name": field("name")?,
                "input": call.get("input").cloned().unwrap_or(Value::Null),
            }));
        }
    }
    let usage = body.get("usage");
    let get = |key: &str| count(usage.and_then(|u| u.get(key)), key);
    Ok(json!({
        "id": body.get("ResponseMetadata").and_then(|m| m.get("RequestId")).cloned().unwrap_or(Value::Null),
        "type": "message",
        "content": content,
        "stop_reason": body.get("stopReason").cloned().unwrap_or(Value::Null),
        "usage": if usage.is_some_and(|u| !u.is_null()) {
            json!({
                "input_tokens": get("inputTokens")?,
                "output_tokens": get("outputTokens")?,
                "cache_read_input_tokens": get("cacheReadInputTokens")?,
                "cache_creation_input_tokens": get("cacheWriteInputTokens")?,
            })
        } else {
            Value::Null
        },
    }))
}

/// A Gemini reply (one `GenerateContentResponse`, or the chunks of a
/// stream, joined) as a Messages API message. Calls: `functionCall` parts
/// (`name`, `args`; Gemini often gives no id: `PREFIX-call-N`, `prefix`
/// naming the exchange so that ids stay unique over the run). Usage:
/// `promptTokenCount` includes `cachedContentTokenCount` (→ cache reads);
/// `toolUsePromptTokenCount` is input too; `candidatesTokenCount` plus
/// `thoughtsTokenCount` is output: the total is `totalTokenCount`. Stop:
/// `MAX_TOKENS` → `max_tokens` (never executed); `STOP` → `tool_use` when a
/// function call is in the reply, else `end_turn`; `SAFETY`, `RECITATION`,
/// `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII` → `refusal`; other reasons
/// lower-cased.
pub(super) fn gemini_message(chunks: &[Value], prefix: &str) -> Result<Value, String> {
    let mut content = Vec::new();
    let mut calls = 0usize;
    let mut finish: Option<String> = None;
    let mut usage: Option<&Value> = None;
    let mut id = Value::Null;
    for chunk in chunks {
        if let Some(u) = chunk.get("usageMetadata").filter(|u| !u.is_null()) {
            usage = Some(u);
        }
        if id.is_null() {
            id = chunk.get("responseId").cloned().unwrap_or(Value::Null);
        }
        let Some(candidate) = chunk
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            continue;
        };
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            finish = Some(reason.to_owned());
        }
        let parts = candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                content.push(json!({"type": "text", "text": text}));
            }
            if let Some(call) = part.get("functionCall") {
                let name = call
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("a functionCall part has no `name`")?;
                let call_id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|i| !i.is_empty())
                    .map_or_else(|| format!("{prefix}-call-{calls}"), str::to_owned);
                content.push(json!({
                    "type": "tool_use",
                    "id": call_id,
                    "name": name,
                    "input": call.get("args").cloned().unwrap_or_else(|| json!({})),
                }));
                calls += 1;
            }
        }
    }
    let stop = match finish.as_deref() {
        None => Value::Null,
        Some("MAX_TOKENS") => json!("max_tokens"),
        Some("STOP") if calls > 0 => json!("tool_use"),
        Some("STOP") => json!("end_turn"),
        Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => {
            json!("refusal")
        }
        Some(other) => json!(other.to_ascii_lowercase()),
    };
    let usage = match usage {
        None => Value::Null,
        Some(u) => {
            let get = |key: &str| count(u.get(key), key);
            let prompt = get("promptTokenCount")?;
            let cached = get("cachedContentTokenCount")?.min(prompt);
            json!({
                "input_tokens": (prompt - cached).saturating_add(get("toolUsePromptTokenCount")?),
                "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": 0,
                "output_tokens": get("candidatesTokenCount")?.saturating_add(get("thoughtsTokenCount")?),
            })
        }
    };
    Ok(
        json!({"id": id, "type": "message", "content": content, "stop_reason": stop, "usage": usage}),
    )
}

/// The chunks of a Gemini event stream (`streamGenerateContent?alt=sse`):
/// each `data:` line is one `GenerateContentResponse`. With no
/// `finishReason` anywhere the stream did not end: the reason it is cut off.
pub(super) fn gemini_from_sse(text: &str) -> Result<(Vec<Value>, Option<String>), String> {
    let mut chunks = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        match value_from_str(data.trim()) {
            Ok(chunk) => chunks.push(chunk),
            Err(e) if e.is_data() => return Err(format!("chunk: {e}")),
            Err(_) => {}
        }
    }
    let finished = chunks.iter().any(|c| {
        c.get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c.get("finishReason"))
            .is_some_and(|r| !r.is_null())
    });
    Ok((
        chunks,
        (!finished).then(|| "the stream ends without a finishReason".to_owned()),
    ))
}

/// What a Converse or Gemini request declares and answers: declared tool
/// names (`toolConfig.tools[].toolSpec.name`; `tools[].functionDeclarations[].name`,
/// also spelt `function_declarations`) and Converse results
/// (`toolResult.toolUseId`, `status: error`). Gemini results name the
/// function, not the call, so they are not matched.
pub(super) fn request_facts(
    request: &Value,
    declared: &mut Vec<String>,
    results: &mut std::collections::HashMap<String, super::Outcome>,
) -> bool {
    let mut any = false;
    let converse_tools = request
        .get("toolConfig")
        .and_then(|t| t.get("tools"))
        .and_then(Value::as_array);
    for tool in converse_tools.into_iter().flatten() {
        any = true;
        if let Some(name) = tool
            .get("toolSpec")
            .and_then(|s| s.get("name"))
            .and_then(Value::as_str)
        {
            declared.push(name.to_owned());
        }
    }
    let gemini_tools = match request.get("tools") {
        Some(Value::Array(tools)) => tools.clone(),
        Some(tool @ Value::Object(_)) => vec![tool.clone()],
        _ => Vec::new(),
    };
    for tool in &gemini_tools {
        let functions = tool
            .get("functionDeclarations")
            .or_else(|| tool.get("function_declarations"))
            .and_then(Value::as_array);
        for f in functions.into_iter().flatten() {
            any = true;
            if let Some(name) = f.get("name").and_then(Value::as_str) {
                declared.push(name.to_owned());
            }
        }
    }
    for m in request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for block in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(result) = block.get("toolResult") {
                if let Some(id) = result.get("toolUseId").and_then(Value::as_str) {
                    let error = result.get("status").and_then(Value::as_str) == Some("error");
                    results.insert(
                        id.to_owned(),
                        super::result_outcome(result.get("content"), error),
                    );
                }
            }
        }
    }
    any
}
