//! claude-trace logs: one request/response pair of Claude Code's own API
//! traffic per line.

use serde_json::Value;

use super::exchanges::{
    api_error_note, build_from_exchanges, endpoint_of, is_api_error, is_message_value,
    is_token_count, message_from_sse, Endpoint, Exchange,
};
use crate::replay::session::{Format, Session};
use crate::strict::value_from_str;

/// Whether a JSON Lines value is a claude-trace pair: `{request: {url, …},
/// response: {status_code, …} | null, logged_at}`.
pub(super) fn is_trace_pair(value: &Value) -> bool {
    value
        .get("request")
        .is_some_and(|r| r.get("url").is_some() && r.get("body").is_some())
        && value
            .get("response")
            .is_some_and(|r| r.is_null() || r.get("status_code").is_some())
}

/// A claude-trace timestamp (Unix seconds, fractional) in milliseconds.
fn trace_ms(part: Option<&Value>) -> Option<u64> {
    let seconds = part?.get("timestamp")?.as_f64()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64)
}

/// claude-trace logs (`.claude-trace/log-*.jsonl`, the usual capture of
/// Claude Code's own API traffic): one request/response pair per line, the
/// response body as JSON (`body`) or as the raw event stream (`body_raw`).
/// Calls that are not model calls (token counting, `--include-all-requests`
/// extras) are skipped with a note; a request without a response (orphaned:
/// the log ended first) is noted and not counted.
pub(super) fn read_claude_trace(lines: Vec<(usize, Value)>) -> Result<Session, String> {
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut notes = Vec::new();
    let mut not_model = Vec::new();
    for (line_no, pair) in lines {
        let label = format!("line {line_no}");
        if !is_trace_pair(&pair) {
            return Err(format!("{label}: not a claude-trace request/response pair"));
        }
        let request = &pair["request"];
        let (endpoint, uri) = endpoint_of(Some(request));
        let response = &pair["response"];
        if response.is_null() {
            notes.push(format!(
                "{label}: {uri}: no response recorded (orphaned request): not counted"
            ));
            continue;
        }
        let status = response.get("status_code").and_then(Value::as_u64);
        let (body, streamed, cut_off) = match (response.get("body"), response.get("body_raw")) {
            (Some(body), _) if body.is_object() => (body.clone(), false, None),
            (_, Some(Value::String(raw))) if raw.contains("data:") => match message_from_sse(raw) {
                Ok((body, cut_off)) => (body, true, cut_off),
                Err(e) if endpoint == Endpoint::Other => {
                    not_model.push(format!("{line_no} ({uri}, {e})"));
                    continue;
                }
                Err(e) => return Err(format!("{label}: streamed response: {e}")),
            },
            (_, Some(Value::String(raw))) => match value_from_str(raw) {
                Ok(body) => (body, false, None),
                Err(e) if e.is_data() => return Err(format!("{label}: {e}")),
                Err(_) if endpoint == Endpoint::Other => {
                    not_model.push(format!("{line_no} ({uri})"));
                    continue;
                }
                Err(_) => {
                    return Err(format!(
                        "{label}: the response body is neither JSON nor a Messages API event stream"
                    ))
                }
            },
            _ if endpoint == Endpoint::Other => {
                not_model.push(format!("{line_no} ({uri})"));
                continue;
            }
            _ => return Err(format!("{label}: the response has no body")),
        };
        if body.as_object().is_some_and(is_api_error) || status.is_some_and(|c| c >= 400) {
            notes.push(api_error_note(&label, status, &body, streamed));
            continue;
        }
        if !is_message_value(&body) {
            if matches!(endpoint, Endpoint::Model(_)) && !is_token_count(&body) {
                return Err(format!(
                    "{label}: {uri}: the response is not an Anthropic Messages API message"
                ));
            }
            not_model.push(format!("{line_no} ({uri})"));
            continue;
        }
        exchanges.push(Exchange {
            label,
            request: request.get("body").filter(|b| b.is_object()).cloned(),
            response: body,
            time_ms: trace_ms(Some(response)),
            request_ms: trace_ms(Some(request)),
            cut_off,
        });
    }
    if !not_model.is_empty() {
        notes.push(format!(
            "{} request(s) are not model calls (token counting, other endpoints), skipped: lines {}",
            not_model.len(),
            not_model.join(", ")
        ));
    }
    build_from_exchanges(Format::ClaudeTrace, exchanges, notes)
}
