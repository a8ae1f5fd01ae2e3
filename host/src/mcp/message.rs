//! The JSON-RPC messages the proxy reads and writes, and the ids it keys
//! them by.

#[allow(unused_imports)]
use super::*;

/// A JSON-RPC message as the proxy reads it: the members it looks at,
/// borrowed from the line; every other member is checked as JSON and left
/// alone. A member given twice is refused.
#[derive(Deserialize)]
pub(crate) struct Message<'a> {
    pub(crate) jsonrpc: Option<String>,
    pub(crate) method: Option<String>,
    #[serde(borrow)]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) params: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

/// One message out of the proxy: a JSON text without its newline, or a
/// question for the person at the gateway's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// To the client (the gateway's stdout).
    Client(String),
    /// To the server (its stdin).
    Server(String),
    /// To the person at the terminal: a question to ask
    /// ([`crate::mcp::terminal`]); the answer comes back through
    /// [`Proxy::on_person`].
    Ask(Question),
    /// To the person at the terminal: the question `eid` is no longer
    /// asked (`why`: its deadline passed, its call was cancelled).
    Withdraw {
        /// The question's id.
        eid: String,
        /// Why, for the terminal.
        why: String,
    },
}

/// An approval question for the person at the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question's id (as a client's question would have: compact JSON).
    pub eid: String,
    /// What is asked, one line (the tool and its arguments, shortened; not
    /// yet escaped for a terminal).
    pub text: String,
    /// When it is no longer asked (the proxy's clock, milliseconds).
    pub deadline_ms: u64,
}

/// Who was asked about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The client, by `elicitation/create`.
    Client,
    /// The person at the gateway's terminal.
    Terminal,
}

pub(crate) fn error_line(id: &str, code: i64, message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{}}}}}"#,
        Value::from(message)
    )
}

/// The `CallToolResult` of a call the gateway answers itself, in the shape
/// of `generation` (a stateless request's result carries `resultType`).
pub(crate) fn refused_line(id: &str, refusal: &Refusal, generation: Generation) -> String {
    let mut meta = json!({"reason": refusal.reason});
    if let Some(limit) = &refusal.limit {
        meta["limit"] = json!(limit);
    }
    if let Some(used) = refusal.used {
        meta["used"] = json!(used);
    }
    if let Some(max) = refusal.max {
        meta["max"] = json!(max);
    }
    if let Some(ms) = refusal.retry_after_ms {
        meta["retry_after"] = json!(ms.div_ceil(1000).max(1));
    }
    let mut result = json!({
        "content": [{"type": "text", "text": refusal.text}],
        "isError": true,
        "_meta": {"budgetgate": meta},
    });
    if let Some(kind) = generation.complete() {
        result["resultType"] = json!(kind);
    }
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// Counts the bytes of a value's compact JSON, stopping past `limit`.
struct Counter {
    bytes: u64,
    limit: u64,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if self.bytes > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the compact JSON of `value` is over `limit` bytes (counted
/// without building it).
pub(crate) fn over_limit(value: &Value, limit: u64) -> bool {
    let mut counter = Counter { bytes: 0, limit };
    serde_json::to_writer(&mut counter, value).is_err()
}

/// A JSON-RPC id as the proxy keys it: its compact JSON, so that `"a"`
/// and `"\u0061"` are one id, and a number as a JavaScript or Python peer
/// reads it, so that `1`, `1.0` and `1e0` are one id too (a server that
/// reads them as one would otherwise answer one request with the answer
/// to another).
pub(crate) fn normal_id(raw: &RawValue) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(v) => id_key(&v),
        Err(_) => raw.get().to_owned(),
    }
}

/// [`normal_id`] of a read id.
pub(crate) fn id_key(v: &Value) -> String {
    let Value::Number(n) = v else {
        return v.to_string();
    };
    match n.as_f64() {
        // A double, as the peer holds it (integers past 2^53 round there;
        // -0 is 0), written one way whatever the spelling: 1, 1.0, 1e0 and
        // 10000000000000000000, 1e19 are one id each.
        Some(f) if f.is_finite() => {
            let f = if f == 0.0 { 0.0 } else { f };
            format!("{f}")
        }
        _ => n.to_string(),
    }
}

/// The largest integer id a JavaScript peer holds exactly (2^53).
pub(crate) const MAX_EXACT_ID: u64 = 1 << 53;

/// An id's compact JSON, read back: `None` when its value cannot be read
/// (a number beyond a 64-bit float), which the gateway's own answers then
/// give as `null`.
pub(crate) fn readable_id(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<Value>(raw.get())
        .ok()
        .map(|v| v.to_string())
}

/// Whether `e` is [`crate::strict::value_from_str`]'s refusal of a key
/// given twice.
pub(crate) fn is_duplicate(e: &serde_json::Error) -> bool {
    e.is_data() && e.to_string().starts_with("duplicate key ")
}

/// serde_json's error reading a value, with what it means when its own
/// words are obscure (a `\u` escape of half a surrogate pair ends in
/// "unexpected end of hex escape").
pub(crate) fn unreadable(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("hex escape") || text.contains("surrogate") {
        format!("a \\u escape that is not a whole character, such as a lone surrogate (\\ud800-\\udfff without its pair): {text}")
    } else if text.contains("number out of range") {
        format!("{text} (a number beyond the range of a 64-bit float)")
    } else {
        text
    }
}

/// What a JSON value is, for an error message.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => {
            "a number outside the 64-bit integers (a fraction, an exponent or too large)"
        }
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether the proxy reads the content of a client message (other than a
/// `tools/call`) to decide something: `initialize` (the elicitation
/// capability), `notifications/cancelled` (which reservation to give
/// back) and the answer to one of its own approval questions (`awaited`).
pub(crate) fn is_read(msg: &Message<'_>, awaited: impl Fn(&str) -> bool) -> bool {
    match msg.method.as_deref() {
        Some("initialize" | "notifications/cancelled") => true,
        Some(_) => false,
        None => msg.id.map(normal_id).is_some_and(|id| awaited(&id)),
    }
}

/// The question `eid`, asked of `by`, withdrawn (`why`): a
/// `notifications/cancelled` to the client, or word to the terminal.
pub(crate) fn withdrawn(eid: &str, by: Asker, why: &str) -> Out {
    match by {
        Asker::Client => Out::Client(format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{eid},"reason":"{why}"}}}}"#
        )),
        Asker::Terminal => Out::Withdraw {
            eid: eid.to_owned(),
            why: why.to_owned(),
        },
    }
}

/// At most `max` characters of `text`, cut on a character boundary.
pub(crate) fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
