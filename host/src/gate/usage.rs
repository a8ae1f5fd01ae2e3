//! What a model response was billed, read from the shapes the providers
//! answer in (`SPEC C`: input, output, cache reads and cache writes): the
//! one reading of usage that replay, the hook and the model proxy count by.

use budgetgate_core::turn::TokenUsage;
use serde_json::Value;

use crate::strict::field;

/// One entry of a response's `usage.iterations` (compaction, advisor and
/// other sub-inferences billed within one request).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UsageIteration {
    /// The iteration's `type` (`compaction`, `message`, …), or `unknown`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its usage, the four counted fields.
    pub usage: TokenUsage,
}

/// The usage billed for one response: the top level plus every entry of
/// `usage.iterations` but the message's own sampling passes (`"type":
/// "message"`), which the top level already is — compaction and advisor
/// sub-inferences are billed there and nowhere else (Anthropic's compaction
/// guide; in recorded cassettes the top level equals the sum of the
/// `message` iterations). The one rule replay and `budgetgate hook` count
/// by. Returns the total and every iteration. An `iterations` that is neither a list nor null, or an entry
/// that is not a usage object, is an error naming it.
pub fn billed_usage(value: &Value) -> Result<(TokenUsage, Vec<UsageIteration>), String> {
    let mut total = usage_from_value(value)?;
    let mut iterations = Vec::new();
    match field(value, "iterations") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (at, item) in items.iter().enumerate() {
                let usage =
                    usage_from_value(item).map_err(|e| format!("usage.iterations[{at}]: {e}"))?;
                let kind = field(item, "type")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                if kind != "message" {
                    total = total.saturating_add(usage);
                }
                iterations.push(UsageIteration {
                    kind: kind.to_owned(),
                    usage,
                });
            }
        }
        Some(_) => return Err("usage `iterations` is neither a list nor null".into()),
    }
    Ok((total, iterations))
}

/// Reads a usage object leniently from a JSON value: the four counted
/// fields, absent or null counting 0 (`SPEC C`). A field that is not a
/// non-negative integer is an error naming it.
pub fn usage_from_value(value: &Value) -> Result<TokenUsage, String> {
    if !value.is_object() {
        return Err("usage is not an object".into());
    }
    let mut usage = TokenUsage::ZERO;
    for (key, slot) in [
        ("input_tokens", &mut usage.input_tokens),
        ("output_tokens", &mut usage.output_tokens),
        (
            "cache_read_input_tokens",
            &mut usage.cache_read_input_tokens,
        ),
        (
            "cache_creation_input_tokens",
            &mut usage.cache_creation_input_tokens,
        ),
    ] {
        match field(value, key) {
            None | Some(Value::Null) => {}
            Some(v) => {
                *slot = v
                    .as_u64()
                    .ok_or_else(|| format!("usage `{key}` is not a non-negative integer"))?
            }
        }
    }
    Ok(usage)
}

/// The usage of an OpenAI reply (Chat Completions: `prompt_tokens`,
/// `completion_tokens`, `prompt_tokens_details`; Responses: `input_tokens`,
/// `output_tokens`, `input_tokens_details`) in the four counted fields.
/// OpenAI's input count includes its cached tokens, so the cached ones are
/// `cache_read_input_tokens` and the rest `input_tokens`; the output count
/// includes reasoning tokens. `None`: no usage (absent or null).
pub fn openai_usage(
    usage: Option<&Value>,
    shape: OpenAiShape,
) -> Result<Option<TokenUsage>, String> {
    let (input, output, details) = match shape {
        OpenAiShape::Chat => (
            "prompt_tokens",
            "completion_tokens",
            "prompt_tokens_details",
        ),
        OpenAiShape::Responses => ("input_tokens", "output_tokens", "input_tokens_details"),
    };
    let Some(usage) = usage.filter(|u| !u.is_null()) else {
        return Ok(None);
    };
    let count = |v: Option<&Value>, key: &str| -> Result<u64, String> {
        match v {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("usage `{key}` is not a non-negative integer")),
        }
    };
    let prompt = count(usage.get(input), input)?;
    let cached = count(
        usage.get(details).and_then(|d| d.get("cached_tokens")),
        "cached_tokens",
    )?;
    Ok(Some(TokenUsage {
        input_tokens: prompt.saturating_sub(cached),
        cache_read_input_tokens: cached.min(prompt),
        cache_creation_input_tokens: 0,
        output_tokens: count(usage.get(output), output)?,
    }))
}

/// Which OpenAI API a usage object comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiShape {
    /// Chat Completions.
    Chat,
    /// Responses.
    Responses,
}
