//! VCR cassettes (`interactions[]`, as vcrpy and its kin record them) of
//! Anthropic, OpenAI, Bedrock or Gemini calls: each interaction's body read
//! (JSON, an event stream, `!!binary`), its endpoint told, its reply made a
//! Messages API message.

use serde_json::Value;

use super::exchanges::{
    api_error_note, build_from_exchanges, endpoint_of, is_api_error, is_message_value,
    is_token_count, message_from_sse, Endpoint, Exchange, ModelApi,
};
use super::is_message;
use super::time::parse_http_date_ms;
use super::{openai, providers};
use crate::replay::session::{Format, Session};
use crate::strict::value_from_str;

pub(super) fn read_vcr(cassette: &Value) -> Result<Session, String> {
    let interactions = cassette
        .get("interactions")
        .and_then(Value::as_array)
        .ok_or("`interactions` is not a list")?;
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut notes = Vec::new();
    let mut not_model: Vec<String> = Vec::new();
    for (index, interaction) in interactions.iter().enumerate() {
        let label = format!("interaction {index}");
        let request = interaction.get("request");
        let response = interaction
            .get("response")
            .ok_or_else(|| format!("{label}: no `response`"))?;
        let (endpoint, uri) = endpoint_of(request);
        // Not a model call, by its URI or by what came back: skipped with a
        // note. A body that reads as a model reply is counted wherever it
        // came from (a proxy, another path): never counted less than billed.
        let mut skip = |why: &str| {
            not_model.push(format!(
                "{index} ({}{why})",
                if uri.is_empty() {
                    "no URI".to_owned()
                } else {
                    uri.clone()
                }
            ));
        };
        let status = response
            .get("status")
            .and_then(|s| s.get("code"))
            .and_then(Value::as_u64);
        let body = match vcr_body(response) {
            Ok(body) => body,
            Err(_) if endpoint == Endpoint::Other => {
                skip(", a body that is not text");
                continue;
            }
            Err(e) => {
                return Err(match endpoint {
                    Endpoint::Model(api) => {
                        format!("{label}: {} ({uri}): response body: {e}", api.description())
                    }
                    _ => format!("{label}: response body: {e}"),
                })
            }
        };
        let request_body = match request {
            Some(r) => match vcr_body(r) {
                Ok(body) => body,
                Err(_) if endpoint == Endpoint::Other => None,
                Err(e) => return Err(format!("{label}: request body: {e}")),
            },
            None => None,
        };
        let Some(body) = body else {
            match endpoint {
                // A model call whose reply was not recorded: refused, never
                // counted as nothing.
                Endpoint::Model(api) => {
                    return Err(format!(
                        "{label}: {} ({uri}) with no response body",
                        api.description()
                    ))
                }
                Endpoint::Other => skip(", no body"),
                Endpoint::Unknown => notes.push(format!("{label}: no response body, skipped")),
            }
            continue;
        };
        let (body, streamed, cut_off) = match body {
            Body::Json(v) => (v, false, None),
            Body::Text(text)
                if text.contains("event: message_start") || text.contains("data: {") =>
            {
                let rebuilt = if text.contains("chat.completion.chunk") {
                    openai::chat_from_sse(&text)
                } else if text.contains("\"response.created\"") || text.contains("event: response.")
                {
                    openai::responses_from_sse(&text)
                } else if endpoint == Endpoint::Model(ModelApi::Gemini)
                    || (!text.contains("message_start") && text.contains("\"candidates\""))
                {
                    providers::gemini_from_sse(&text).and_then(|(chunks, cut_off)| {
                        Ok((
                            providers::gemini_message(&chunks, &label.replace(' ', "-"))?,
                            cut_off,
                        ))
                    })
                } else {
                    message_from_sse(&text)
                };
                match rebuilt {
                    Ok((body, cut_off)) => (body, true, cut_off),
                    Err(_) if endpoint == Endpoint::Other => {
                        skip(", an event stream of another kind");
                        continue;
                    }
                    Err(e) => return Err(format!("{label}: streamed response: {e}")),
                }
            }
            Body::Text(_) if endpoint == Endpoint::Other => {
                skip(", a body that is not JSON");
                continue;
            }
            Body::Text(_) => {
                return Err(match endpoint {
                    Endpoint::Model(api) => format!(
                    "{label}: {} ({uri}): the response body is neither JSON nor an event stream",
                    api.description()
                ),
                    _ => format!(
                    "{label}: the response body is neither JSON nor a Messages API event stream"
                ),
                })
            }
        };
        let openai_error = (openai::is_chat_completion(&body) || openai::is_response(&body))
            && (body.get("status").and_then(Value::as_str) == Some("failed"))
            || (body.get("error").is_some_and(Value::is_object) && !is_message_value(&body));
        if body.as_object().is_some_and(is_api_error)
            || openai_error
            || status.is_some_and(|c| c >= 400)
        {
            notes.push(api_error_note(&label, status, &body, streamed));
            continue;
        }
        // A Responses API reply fetched again (background mode polls
        // `GET /v1/responses/ID`, a stream resumed with `starting_after`) is
        // the same model call: its latest state replaces the earlier one.
        let same_response = openai::is_response(&body)
            .then(|| body.get("id").and_then(Value::as_str).map(str::to_owned))
            .flatten();
        let mut cut_off = cut_off;
        if let Some(status @ ("queued" | "in_progress")) =
            body.get("status").and_then(Value::as_str)
        {
            if cut_off.is_none() && openai::is_response(&body) {
                cut_off = Some(format!("the response is still {status}, not finished"));
            }
        }
        let body = if openai::is_chat_completion(&body) {
            let message = openai::chat_message(&body, &label, &mut notes)
                .map_err(|e| format!("{label}: OpenAI chat completion: {e}"))?;
            if message["usage"].is_null() {
                notes.push(format!("{label}: the reply records no usage (a stream without stream_options.include_usage?): counted as 0 tokens"));
            }
            message
        } else if providers::is_converse(&body) {
            providers::converse_message(&body)
                .map_err(|e| format!("{label}: Bedrock Converse reply: {e}"))?
        } else if providers::is_gemini(&body) {
            let chunks = match &body {
                Value::Array(items) => items.clone(),
                one => vec![one.clone()],
            };
            providers::gemini_message(&chunks, &label.replace(' ', "-"))
                .map_err(|e| format!("{label}: Gemini reply: {e}"))?
        } else if openai::is_response(&body) {
            let message = openai::responses_message(&body)
                .map_err(|e| format!("{label}: OpenAI response: {e}"))?;
            if message["usage"].is_null() {
                notes.push(format!(
                    "{label}: the reply records no usage: counted as 0 tokens"
                ));
            }
            message
        } else {
            body
        };
        if !body.as_object().is_some_and(is_message) {
            match endpoint {
                _ if is_token_count(&body) => {}
                Endpoint::Model(api @ ModelApi::AnthropicMessages) => {
                    return Err(format!(
                        "{label}: {} whose response is not an Anthropic Messages API message",
                        api.description()
                    ))
                }
                // A model call this version cannot read: refused, never
                // skipped (skipping would count less than was billed).
                Endpoint::Model(api) => {
                    return Err(format!(
                        "{label}: {} ({uri}) whose reply is not in a shape this version reads; refused rather than counted as nothing",
                        api.description()
                    ))
                }
                Endpoint::Other | Endpoint::Unknown => {}
            }
            // Said, so that spend outside the model calls read (embeddings,
            // a provider this version does not read) is never hidden.
            match reported_tokens(&body) {
                Some(n) if !is_token_count(&body) => {
                    skip(&format!(", its reply reports {n} tokens, not counted"))
                }
                _ => skip(""),
            }
            continue;
        }
        let time_ms = header(response, "date")
            .map_err(|e| format!("{label}: response: {e}"))?
            .and_then(|d| parse_http_date_ms(&d));
        if let Some(id) = &same_response {
            if let Some(earlier) = exchanges
                .iter_mut()
                .find(|e| e.response.get("id").and_then(Value::as_str) == Some(id.as_str()))
            {
                notes.push(format!(
                    "{label}: response {id} again (fetched or resumed): one model call, its latest state kept (from {})",
                    earlier.label
                ));
                earlier.response = body;
                earlier.cut_off = cut_off;
                earlier.time_ms = time_ms.or(earlier.time_ms);
                continue;
            }
        }
        exchanges.push(Exchange {
            label,
            request: request_body.and_then(|b| match b {
                Body::Json(v) => Some(v),
                Body::Text(_) => None,
            }),
            response: body,
            time_ms,
            request_ms: None,
            cut_off,
        });
    }
    if !not_model.is_empty() {
        notes.push(format!(
            "{} interaction(s) are not model calls (token counting, files, downloads, other services), skipped: {}",
            not_model.len(),
            not_model.join(", ")
        ));
    }
    build_from_exchanges(Format::VcrCassette, exchanges, notes)
}

/// The tokens a reply that is not read says it used: the numeric fields of
/// its `usage` (or Gemini's `usageMetadata`) whose name holds `token`, totals
/// left out, or Ollama's `prompt_eval_count + eval_count`. `None` when it
/// says none.
fn reported_tokens(body: &Value) -> Option<u64> {
    let usage = body.get("usage").or_else(|| body.get("usageMetadata"));
    let from_usage = usage.and_then(Value::as_object).map(|u| {
        u.iter()
            .filter(|(k, _)| k.contains("oken") && !k.contains("total"))
            .filter_map(|(_, v)| v.as_u64())
            .fold(0, u64::saturating_add)
    });
    let ollama = body
        .get("prompt_eval_count")
        .and_then(Value::as_u64)
        .map(|p| p.saturating_add(body.get("eval_count").and_then(Value::as_u64).unwrap_or(0)));
    from_usage.or(ollama).filter(|&n| n > 0)
}

enum Body {
    Json(Value),
    Text(String),
}

/// A VCR request or response body: `parsed_body`, or `body` as a JSON
/// string, or `body.string`.
fn vcr_body(part: &Value) -> Result<Option<Body>, String> {
    if let Some(parsed) = part.get("parsed_body") {
        if !parsed.is_null() {
            return Ok(Some(Body::Json(parsed.clone())));
        }
    }
    let raw = match part.get("body") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => match o.get("string") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => return Ok(None),
            Some(_) => return Err("`body.string` is not text".into()),
        },
        Some(other) => return Ok(Some(Body::Json(other.clone()))),
    };
    if raw.trim().is_empty() {
        return Ok(None);
    }
    // vcrpy writes a body that is not UTF-8 text as `!!binary` (base64),
    // gzip-compressed when the server sent `Content-Encoding: gzip`; the
    // YAML reader keeps the base64 text. Decoded only when the text is not
    // already JSON or an event stream, so a readable body is never changed.
    let raw = match value_from_str(&raw) {
        Ok(v) => return Ok(Some(Body::Json(v))),
        Err(e) if e.is_data() => return Err(e.to_string()),
        Err(_) if raw.contains("data:") => raw,
        Err(_) => match decode_binary(&raw)? {
            Some(text) => text,
            None => raw,
        },
    };
    Ok(Some(match value_from_str(&raw) {
        Ok(v) => Body::Json(v),
        Err(e) if e.is_data() => return Err(e.to_string()),
        Err(_) => Body::Text(raw),
    }))
}

/// Most bytes a compressed body may decompress to.
const MAX_BODY_BYTES: u64 = 64 << 20;

/// A `!!binary` body's text: base64, then gunzipped if it is gzip. `None`
/// when `raw` is not base64 (plain text, kept as it is); an error when the
/// bytes are not UTF-8 text (an image, a zip) or decompress past 64 MiB.
fn decode_binary(raw: &str) -> Result<Option<String>, String> {
    use base64::Engine as _;
    let compact: String = raw.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let is_base64 = !compact.is_empty()
        && compact.len().is_multiple_of(4)
        && compact
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if !is_base64 {
        return Ok(None);
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&compact) else {
        return Ok(None);
    };
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        crate::input::read_bounded(
            flate2::read::MultiGzDecoder::new(bytes.as_slice()),
            MAX_BODY_BYTES,
        )
        .map_err(|e| match e {
            crate::input::ReadError::TooLarge { .. } => format!(
                "a gzip body decompresses past {} MiB; refused",
                MAX_BODY_BYTES >> 20
            ),
            crate::input::ReadError::Io(e) => format!("a gzip body cannot be decompressed: {e}"),
        })?
    } else {
        bytes
    };
    String::from_utf8(bytes).map(Some).map_err(|e| {
        format!(
            "a binary body of {} bytes that is not text (not JSON nor an event stream)",
            e.as_bytes().len()
        )
    })
}

/// A header's value. Header names are case-insensitive, so `Date` and `date`
/// are one header given twice, as is a list of several values: refused (the
/// time limit is decided on it), never read as one of them.
fn header(part: &Value, name: &str) -> Result<Option<String>, String> {
    let Some(headers) = part.get("headers").and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut found = headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name));
    let Some((key, value)) = found.next() else {
        return Ok(None);
    };
    if let Some((other, _)) = found.next() {
        return Err(format!("header {name} given twice (`{key}` and `{other}`)"));
    }
    Ok(match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.len() > 1 => {
            return Err(format!("header `{key}` has {} values", items.len()))
        }
        Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_owned),
        _ => None,
    })
}
