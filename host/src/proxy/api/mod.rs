//! The model APIs the proxy gates, read as little as a decision needs: which
//! API a request is for, its model, its most output tokens, whether it
//! streams, a sound bound of its input; the usage its answer reports; and
//! a refusal in each provider's own error shape.

pub mod history;
mod members;

use members::member_spans;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::gate::usage::{billed_usage, openai_usage, OpenAiShape};
use budgetgate_core::turn::TokenUsage;

/// A model API the proxy gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic's Messages API (`POST /v1/messages`).
    Messages,
    /// OpenAI's Chat Completions (`POST /v1/chat/completions`).
    Chat,
    /// OpenAI's Responses (`POST /v1/responses`).
    Responses,
}

impl Api {
    /// The API a `POST` to `path` (its query left out; the path the
    /// upstream gets, its own prefix included) is a model call of, by how
    /// it ends (`…/v1/messages`, `…/chat/completions` under any prefix: an
    /// upstream given as `https://host/v1`, a client's base URL without
    /// `/v1`, a gateway's `/openai/deployments/NAME/…`); `None`: not a
    /// model call (passed through ungated, as `/v1/messages/count_tokens`
    /// is), or one written another way ([`Self::loosely`] finds it: a path
    /// that is not as it cleans up).
    pub fn of_path(path: &str) -> Option<Self> {
        let path = path.trim_end_matches('/');
        if cleaned(path) != path {
            return None;
        }
        Self::by_tail(path)
    }

    /// The API whose path `path` ends with.
    fn by_tail(path: &str) -> Option<Self> {
        let path = path.trim_end_matches('/');
        [Self::Messages, Self::Chat, Self::Responses]
            .into_iter()
            .find(|api| path.ends_with(api.tail()))
    }

    /// How its path ends.
    const fn tail(self) -> &'static str {
        match self {
            Self::Messages => "/messages",
            Self::Chat => "/chat/completions",
            Self::Responses => "/responses",
        }
    }

    /// The API's path.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Messages => "/v1/messages",
            Self::Chat => "/v1/chat/completions",
            Self::Responses => "/v1/responses",
        }
    }

    /// The API a path names once cleaned up as a URL library or a server
    /// might: percent-escapes decoded, letters in lower case, empty and
    /// `.` segments dropped, `..` taking the segment before.
    pub fn loosely(path: &str) -> Option<Self> {
        Self::by_tail(&cleaned(path))
    }

    /// The billed endpoints the proxy cannot gate (it cannot read or
    /// bound their usage before they run), by how their path ends under
    /// any prefix: message batches, OpenAI's batches, the legacy
    /// completions, the Responses API's other `POST`s
    /// (`/v1/responses/compact`, …), the Assistants' and evals' runs,
    /// images, audio, realtime sessions and fine-tuning jobs. A `POST` to
    /// one, as its path cleans up ([`Self::loosely`]), is refused, never
    /// passed through: a budget that could be spent around would not be
    /// one. The answer names the endpoint.
    pub fn ungated_billed(path: &str) -> Option<String> {
        let path = cleaned(path);
        let ends = |tails: &[&str]| tails.iter().any(|t| path.ends_with(t));
        let billed = ends(&[
            "/batches",
            "/complete",
            "/completions",
            "/runs",
            "/images/generations",
            "/images/edits",
            "/images/variations",
            "/audio/speech",
            "/audio/transcriptions",
            "/audio/translations",
            "/fine_tuning/jobs",
            "/submit_tool_outputs",
        ]) && !path.ends_with("/chat/completions")
            || path.contains("/realtime/")
            || path.ends_with("/realtime")
            || path
                .rsplit_once("/responses/")
                .is_some_and(|(_, rest)| rest != "input_tokens" && !rest.ends_with("/cancel"));
        billed.then_some(path)
    }
}

/// A path cleaned up as a URL library or a server might: percent-escapes
/// decoded, letters in lower case, empty and `.` segments dropped, `..`
/// taking the segment before; in each segment, what follows a `;` (a
/// matrix parameter), a `.json` ending, and surrounding blanks and NULs
/// left out.
fn cleaned(path: &str) -> String {
    {
        let mut bytes = Vec::with_capacity(path.len());
        let mut rest = path.as_bytes();
        while let Some((&b, after)) = rest.split_first() {
            let hex = |c: &u8| char::from(*c).to_digit(16);
            let escaped = match after {
                [h, l, tail @ ..] if b == b'%' => {
                    hex(h).zip(hex(l)).map(|(h, l)| (h * 16 + l, tail))
                }
                _ => None,
            };
            match escaped.and_then(|(value, tail)| Some((u8::try_from(value).ok()?, tail))) {
                Some((value, tail)) => {
                    bytes.push(value);
                    rest = tail;
                }
                None => {
                    bytes.push(b);
                    rest = after;
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
        let mut segments: Vec<&str> = Vec::new();
        for segment in text.split(['/', '\\']) {
            let segment = segment.split(';').next().unwrap_or_default();
            let segment = segment.strip_suffix(".json").unwrap_or(segment);
            match segment.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\0') {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                s => segments.push(s),
            }
        }
        format!("/{}", segments.join("/"))
    }
}

impl Api {
    /// The field that bounds the reply's tokens, as the API names it.
    pub const fn max_field(self) -> &'static str {
        match self {
            Self::Messages => "max_tokens",
            Self::Chat => "max_completion_tokens",
            Self::Responses => "max_output_tokens",
        }
    }
}

/// Tokens a provider may bill beyond the request's own bytes: the system
/// prompt it adds for tool use (Anthropic: a few hundred tokens) with room
/// to spare.
pub const INPUT_OVERHEAD_TOKENS: u64 = 4_096;

/// Tokens counted for each image or document block, whose base64 bytes
/// can be fewer than its tokens (Anthropic bills an image up to about
/// 1 600 tokens, a PDF page up to about 3 000 with its image).
pub const MEDIA_TOKENS: u64 = 3_000;

/// What a model call is, as far as the gate needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRequest {
    /// The API.
    pub api: Api,
    /// The model asked for.
    pub model: String,
    /// The most output tokens the request allows (`max_tokens`,
    /// `max_completion_tokens` or `max_output_tokens`), if it says.
    pub max_output: Option<u64>,
    /// Whether the answer is streamed (server-sent events).
    pub stream: bool,
    /// Chat Completions only: the client asked for the final usage chunk
    /// (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Tokens the input cannot be billed above: every byte of the body as
    /// one token (no tokenizer makes a token of less than a byte of text),
    /// plus [`INPUT_OVERHEAD_TOKENS`], plus [`MEDIA_TOKENS`] per image or
    /// document block.
    pub input_bound: u64,
    /// Chat Completions' `n`: how many replies, each up to
    /// [`Self::max_output`] (1 elsewhere).
    pub choices: u64,
}

impl ModelRequest {
    /// The most tokens the call can be billed: its input bound plus its
    /// most output tokens (each of its replies'); `None` when the request
    /// sets no bound on its output.
    pub fn worst_case(&self) -> Option<u64> {
        self.max_output.map(|out| {
            self.input_bound
                .saturating_add(out.saturating_mul(self.choices))
        })
    }
}

/// The top-level members a decision reads. Read in one pass: a member
/// given twice is refused (which value would the provider take?), and so
/// is a key that differs from one of these only in case (`MAX_TOKENS`:
/// some JSON readers, Go's among them, match keys ignoring case, and would
/// take a bound the proxy never saw).
#[derive(Default)]
struct Fields {
    model: Option<Value>,
    max_tokens: Option<Value>,
    max_completion_tokens: Option<Value>,
    max_output_tokens: Option<Value>,
    stream: Option<Value>,
    stream_options: Option<Value>,
    n: Option<Value>,
}

impl Fields {
    const KEYS: [&'static str; 7] = [
        "model",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "stream",
        "stream_options",
        "n",
    ];

    fn slot(&mut self, key: &str) -> Option<&mut Option<Value>> {
        Some(match key {
            "model" => &mut self.model,
            "max_tokens" => &mut self.max_tokens,
            "max_completion_tokens" => &mut self.max_completion_tokens,
            "max_output_tokens" => &mut self.max_output_tokens,
            "stream" => &mut self.stream,
            "stream_options" => &mut self.stream_options,
            "n" => &mut self.n,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut fields = Fields::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match fields.slot(&key) {
                        Some(slot) if slot.is_some() => {
                            return Err(A::Error::custom(format!("`{key}` is given twice")))
                        }
                        Some(slot) => *slot = Some(map.next_value()?),
                        None => {
                            if let Some(k) = Fields::KEYS.iter().find(|k| folds_to(&key, k)) {
                                return Err(A::Error::custom(format!(
                                    "`{}` differs from `{k}` only in case",
                                    crate::term::terminal_safe(&key)
                                )));
                            }
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }
        d.deserialize_map(Object)
    }
}

/// Whether `key` matches `target` (lower-case ASCII) as a reader that
/// ignores case matches keys: ASCII letters in either case, and the two
/// other characters Unicode folds to an ASCII letter, the Kelvin sign
/// (`K`, to `k`) and the long s (`ſ`, to `s`), as Go's JSON reader folds
/// them.
fn folds_to(key: &str, target: &str) -> bool {
    key.chars()
        .map(|c| match c {
            '\u{212A}' => 'k',
            '\u{17F}' => 's',
            c => c.to_ascii_lowercase(),
        })
        .eq(target.chars())
}

/// Reads the fields of a model call's JSON body; `Err` names the field
/// that is missing or of the wrong type (the call is refused, never sent).
pub fn read_request(api: Api, body: &[u8]) -> Result<ModelRequest, String> {
    let fields: Fields = serde_json::from_slice(body)
        .map_err(|e| format!("the request body cannot be read ({e})"))?;
    let model = match fields.model {
        Some(Value::String(m)) if !m.is_empty() => m,
        Some(_) => return Err("`model` is not a non-empty string".into()),
        None => return Err("the request names no `model`".into()),
    };
    let count = |v: Option<Value>, name: &str| -> Result<Option<u64>, String> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("`{name}` is not a non-negative integer")),
        }
    };
    // A bound of 0 allows no reply: refused, as a provider would (never
    // read as "no bound" by one and as 0 by the proxy).
    let bound = |v: Option<Value>, name: &str| -> Result<Option<u64>, String> {
        match count(v, name)? {
            Some(0) => Err(format!("`{name}` is 0: it allows no reply")),
            n => Ok(n),
        }
    };
    let max_output = match api {
        Api::Messages => bound(fields.max_tokens, "max_tokens")?,
        // Both, when both are given: the larger (an upstream may take
        // either).
        Api::Chat => {
            let newer = bound(fields.max_completion_tokens, "max_completion_tokens")?;
            let older = bound(fields.max_tokens, "max_tokens")?;
            newer.max(older)
        }
        Api::Responses => bound(fields.max_output_tokens, "max_output_tokens")?,
    };
    // Chat's `n`: that many replies, each up to the bound, all billed.
    let choices = match api {
        Api::Chat => bound(fields.n, "n")?.unwrap_or(1),
        _ => 1,
    };
    let stream = match fields.stream {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err("`stream` is not true or false".into()),
    };
    let include_usage = fields
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ModelRequest {
        api,
        model,
        max_output,
        stream,
        include_usage,
        input_bound: input_bound(body),
        choices,
    })
}

/// The input bound of [`ModelRequest::input_bound`].
pub fn input_bound(body: &[u8]) -> u64 {
    let media: usize = [
        &b"\"image\""[..],
        b"\"image_url\"",
        b"\"input_image\"",
        b"\"document\"",
        b"\"input_file\"",
        b"\"file\"",
    ]
    .iter()
    .map(|word| memchr::memmem::find_iter(body, word).count())
    .sum::<usize>()
    // A letter written as an escape (`\u0064ocument`) hides a word from
    // the count above; no JSON writer escapes a letter, so each one counts
    // as a media block (sound, and free for every body a client writes).
    .saturating_add(escaped_letters(body));
    (body.len() as u64)
        .saturating_add(INPUT_OVERHEAD_TOKENS)
        .saturating_add(MEDIA_TOKENS.saturating_mul(media as u64))
}

/// How many `\u00XX` escapes in `body` stand for an ASCII letter.
fn escaped_letters(body: &[u8]) -> usize {
    memchr::memmem::find_iter(body, b"\\u00")
        .filter(|&at| {
            // An escape only when its backslash is not itself escaped.
            let before = body[..at].iter().rev().take_while(|&&b| b == b'\\').count();
            if before % 2 == 1 {
                return false;
            }
            let hex = body
                .get(at + 4..at + 6)
                .and_then(|h| std::str::from_utf8(h).ok());
            hex.and_then(|h| u8::from_str_radix(h, 16).ok())
                .is_some_and(|c| c.is_ascii_alphabetic())
        })
        .count()
}

/// The most bytes [`with_include_usage`] adds:
/// `"stream_options":{"include_usage":true},`. The input bound of a
/// streamed Chat call that did not ask for usage counts them too.
pub const USAGE_OPTION_BYTES: u64 = 40;

/// `body` (a streamed Chat Completions request) asking for the final usage
/// chunk: `stream_options.include_usage` set to `true` in place (the
/// member's value replaced, or the member added first in its object, or
/// `stream_options` itself added or replaced when it is not an object);
/// every other byte stays as it came, so what the upstream bills is what
/// the input bound counted. `None`: the body is not a JSON object.
pub fn with_include_usage(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let options = member_spans(text, &["stream_options"])?;
    let (at, len, insert) = match options.first() {
        None => {
            let open = text.find('{')? + 1;
            (
                open,
                0,
                member_text(text, open, "\"stream_options\":{\"include_usage\":true}"),
            )
        }
        Some(span) if span.starts_with('{') => {
            let start = offset_of(text, span);
            match member_spans(span, &["include_usage"])?.first() {
                Some(flag) => (offset_of(text, flag), flag.len(), "true".to_owned()),
                None => (start + 1, 0, member_text(span, 1, "\"include_usage\":true")),
            }
        }
        Some(span) => (
            offset_of(text, span),
            span.len(),
            "{\"include_usage\":true}".to_owned(),
        ),
    };
    Some(splice(body, [(at, len, insert.as_str())]))
}

/// `member` to insert at `open` (just after an object's `{` in `text`),
/// with the comma that separates it from the members after it.
fn member_text(text: &str, open: usize, member: &str) -> String {
    let empty = text[open..].trim_start().starts_with('}');
    if empty {
        member.to_owned()
    } else {
        format!("{member},")
    }
}

/// Where `span`, a slice of `text`, starts in it.
fn offset_of(text: &str, span: &str) -> usize {
    span.as_ptr() as usize - text.as_ptr() as usize
}

/// The most bytes [`with_max_output`] adds to a request that sets no reply
/// bound: `"max_completion_tokens":18446744073709551615,`. The input bound
/// of such a request counts them too, so that the call sent is never
/// billed above its reservation.
pub const MAX_FIELD_BYTES: u64 = 45;

/// The fields that bound the reply's tokens in a request of `api`.
fn max_fields(api: Api) -> &'static [&'static str] {
    match api {
        Api::Messages => &["max_tokens"],
        Api::Chat => &["max_completion_tokens", "max_tokens"],
        Api::Responses => &["max_output_tokens"],
    }
}

/// `body` with its reply bound set to `max`: each of the API's bound
/// fields the request has (`null` included) gets `max` in place of its
/// value, or, when it has none, [`Api::max_field`] is added first; every
/// other byte stays as it came. `None`: the body is not a JSON object.
pub fn with_max_output(api: Api, body: &[u8], max: u64) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let spans = member_spans(text, max_fields(api))?;
    let number = max.to_string();
    if spans.is_empty() {
        // After the object's `{`: the new member, then a comma when others
        // follow.
        let open = text.find('{')? + 1;
        let member = member_text(text, open, &format!("\"{}\":{number}", api.max_field()));
        return Some(splice(body, [(open, 0, member.as_str())]));
    }
    // The values as they lie in the body, in order.
    Some(splice(
        body,
        spans
            .iter()
            .map(|span| (offset_of(text, span), span.len(), number.as_str())),
    ))
}

/// `body` with each of `edits` (`(at, len, text)`: the `len` bytes at `at`
/// replaced by `text`; in order, not overlapping) made, and every other
/// byte as it came.
fn splice<'t>(body: &[u8], edits: impl IntoIterator<Item = (usize, usize, &'t str)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut done = 0;
    for (at, len, text) in edits {
        out.extend_from_slice(&body[done..at]);
        out.extend_from_slice(text.as_bytes());
        done = at + len;
    }
    out.extend_from_slice(&body[done..]);
    out
}

/// The usage a whole (not streamed) answer of `api` reports; `None` when
/// it reports none.
pub fn answer_usage(api: Api, body: &[u8]) -> Result<Option<TokenUsage>, String> {
    // Only the usage is built (a repeated key: its last value, as a JSON
    // reader takes it); the rest of the answer is read past.
    let answer: &serde_json::value::RawValue = serde_json::from_slice(body)
        .map_err(|e| format!("the upstream's answer is not JSON ({e})"))?;
    let usage = match members::members(answer).usage {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| format!("the upstream's usage cannot be read ({e})"))?,
        None => Value::Null,
    };
    usage_in(api, &json!({ "usage": usage }))
}

fn usage_in(api: Api, answer: &Value) -> Result<Option<TokenUsage>, String> {
    let usage = answer.get("usage").filter(|u| !u.is_null());
    match api {
        Api::Messages => usage.map(|u| billed_usage(u).map(|(t, _)| t)).transpose(),
        Api::Chat => openai_usage(usage, OpenAiShape::Chat),
        Api::Responses => openai_usage(usage, OpenAiShape::Responses),
    }
}

/// The usage of a streamed answer, read event by event: each field the
/// largest reported (Anthropic's `message_delta` repeats the counts so
/// far; OpenAI reports once, at the end).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamUsage {
    /// The usage so far; `None` until an event reports one.
    pub usage: Option<TokenUsage>,
    /// The stream reported its end (Anthropic `message_stop`, OpenAI
    /// `[DONE]` or `response.completed`).
    pub ended: bool,
}

/// What the proxy does with one event of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventUse {
    /// Relayed to the client.
    Relay,
    /// Kept from the client: the usage chunk the proxy asked for.
    Withhold,
}

impl StreamUsage {
    /// Reads one event's data; `hide_usage_chunk`: the client did not ask
    /// for Chat's usage chunk (the proxy did), so it is withheld.
    pub fn read_event(&mut self, api: Api, data: &str, hide_usage_chunk: bool) -> EventUse {
        if data == "[DONE]" {
            self.ended = true;
            return EventUse::Relay;
        }
        if !may_report(api, data.as_bytes()) {
            return EventUse::Relay;
        }
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            return EventUse::Relay;
        };
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        let reported = match (api, kind) {
            (Api::Messages, "message_start") => value
                .get("message")
                .and_then(|m| usage_in(Api::Messages, m).ok())
                .flatten(),
            (Api::Messages, "message_delta") => usage_in(Api::Messages, &value).ok().flatten(),
            (Api::Messages, "message_stop") => {
                self.ended = true;
                None
            }
            (Api::Responses, "response.completed" | "response.incomplete" | "response.failed") => {
                self.ended = true;
                value
                    .get("response")
                    .and_then(|r| usage_in(Api::Responses, r).ok())
                    .flatten()
            }
            (Api::Chat, _) => usage_in(Api::Chat, &value).ok().flatten(),
            _ => None,
        };
        let Some(u) = reported else {
            return EventUse::Relay;
        };
        let o = self.usage.unwrap_or(TokenUsage::ZERO);
        self.usage = Some(TokenUsage {
            input_tokens: o.input_tokens.max(u.input_tokens),
            output_tokens: o.output_tokens.max(u.output_tokens),
            cache_read_input_tokens: o.cache_read_input_tokens.max(u.cache_read_input_tokens),
            cache_creation_input_tokens: o
                .cache_creation_input_tokens
                .max(u.cache_creation_input_tokens),
        });
        let usage_only = value
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty);
        if api == Api::Chat && hide_usage_chunk && usage_only {
            EventUse::Withhold
        } else {
            EventUse::Relay
        }
    }
}

/// Whether an event's data can report usage or the stream's end, looked
/// at without reading it as JSON (most events of a long answer are text
/// deltas, read here at the stream's pace): a usage is a `"usage"` key
/// that is not `null` (Chat's chunks each carry `"usage": null` when usage
/// was asked for), an end is Anthropic's `message_stop` or a Responses
/// `response.completed`, `.incomplete` or `.failed`. A text can hold these
/// words too: then the event is read as JSON and found to report nothing,
/// as before. (A key written with escapes, `"\u0075sage"`, is not seen:
/// no provider writes one, and an upstream is trusted with its usage.)
fn may_report(api: Api, data: &[u8]) -> bool {
    use memchr::memmem;
    let usage = memmem::find_iter(data, b"\"usage\"").any(|at| {
        let after = &data[at + 7..];
        // A key is followed by its colon; a string value `"usage"` is not.
        after
            .trim_ascii_start()
            .strip_prefix(b":")
            .is_some_and(|value| !value.trim_ascii_start().starts_with(b"null"))
    });
    usage
        || match api {
            Api::Messages => memmem::find(data, b"\"message_stop\"").is_some(),
            Api::Responses => [
                &b"\"response.completed\""[..],
                b"\"response.incomplete\"",
                b"\"response.failed\"",
            ]
            .iter()
            .any(|word| memmem::find(data, word).is_some()),
            Api::Chat => false,
        }
}

/// Why the proxy answers a call itself, in the providers' error kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The budget does not allow the call: `402`, Anthropic's
    /// `billing_error` (a kind Claude Code and the official SDKs end on at
    /// once, without sending the call again).
    Budget,
    /// The request cannot be read: `400`, `invalid_request_error`.
    Invalid,
    /// The request's body is over the bound: `413`
    /// (`request_too_large`, Anthropic's own type for it).
    TooLarge,
    /// From a page of another origin, or to another host: `403`.
    Forbidden,
    /// The upstream failed: `502`, `api_error`.
    Upstream,
    /// The ledger could not decide: `503`, `api_error` (fail closed).
    Unavailable,
    /// Too many request bytes held at once: `503`, `overloaded_error`,
    /// to be sent again shortly (the SDKs do, with backoff).
    Busy,
}

impl Refused {
    /// The HTTP status.
    pub const fn status(self) -> u16 {
        match self {
            Self::Budget => 402,
            Self::Invalid => 400,
            Self::TooLarge => 413,
            Self::Forbidden => 403,
            Self::Upstream => 502,
            Self::Unavailable | Self::Busy => 503,
        }
    }

    /// The error's `type` in Anthropic's shape.
    pub const fn anthropic_type(self) -> &'static str {
        match self {
            Self::Budget => "billing_error",
            Self::Invalid => "invalid_request_error",
            Self::TooLarge => "request_too_large",
            Self::Forbidden => "permission_error",
            Self::Upstream | Self::Unavailable => "api_error",
            Self::Busy => "overloaded_error",
        }
    }

    /// The error's `type` in OpenAI's shape.
    pub const fn openai_type(self) -> &'static str {
        match self {
            Self::Budget => "budget_exceeded",
            Self::Invalid | Self::TooLarge => "invalid_request_error",
            Self::Forbidden => "permission_error",
            Self::Upstream | Self::Unavailable | Self::Busy => "server_error",
        }
    }
}

/// The proxy's own answer in `api`'s error shape: `kind` gives its type,
/// `code` the contract's word (OpenAI's `code`), `message` what the agent
/// reads.
pub fn refusal_body(api: Api, kind: Refused, code: &str, message: &str) -> Bytes {
    let body = match api {
        Api::Messages => json!({
            "type": "error",
            "error": {"type": kind.anthropic_type(), "message": message},
        }),
        Api::Chat | Api::Responses => json!({
            "error": {
                "message": message,
                "type": kind.openai_type(),
                "param": null,
                "code": code,
            },
        }),
    };
    Bytes::from(body.to_string())
}

#[cfg(test)]
mod tests;
