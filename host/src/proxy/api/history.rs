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

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;

use budgetgate_core::engine::loops::{Answers, Made, Outcome, LOOP_WINDOW};
use budgetgate_core::tools::ToolName;
use serde::de::{DeserializeSeed, Deserializer as _, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::Api;
use crate::gate::digest::{digest_value, DigestSeed, TextDigest};
use crate::gate::loops::call_key;

/// Calls kept of a history: the latest ones, four windows' worth. The
/// window remembers the last [`LOOP_WINDOW`] calls, so what came before
/// these cannot change what the latest turn completed, unless that turn
/// alone made more calls than this (then its first ones are not looked
/// at). A request of 64 MiB holds a million tiny calls; what is kept of
/// them is bounded here, and the request is read one message at a time.
pub const KEPT_CALLS: usize = 4 * LOOP_WINDOW;

/// The calls of a request's history, oldest first (at most
/// [`KEPT_CALLS`], the latest), and the turn whose calls the request
/// brings the results of (`None`: it does not end with tool results).
#[derive(Debug, Default)]
pub struct History {
    /// The calls, each with its result when the history has it.
    pub calls: Vec<Made>,
    /// The turn the trailing results answer.
    pub latest: Option<u32>,
    /// The model's text answers, each response recorded in order
    /// (`same_answer`).
    pub answers: Answers,
}

/// Collects calls and results by their ids.
#[derive(Default)]
struct Builder {
    /// The latest calls, each with its id.
    calls: VecDeque<(String, Made)>,
    /// How many calls were dropped from the front of `calls`.
    dropped: usize,
    /// Each kept call's id and its place counted from the history's first
    /// call (a reused id: the later call, as a result answers the latest).
    ids: HashMap<String, usize>,
    /// The turn being read (the count of model turns with calls so far).
    turn: u32,
    /// Whether the current turn has had a call.
    turn_open: bool,
    /// The model's answers so far.
    answers: Answers,
}

impl Builder {
    fn next_turn(&mut self) {
        if self.turn_open {
            self.turn = self.turn.saturating_add(1);
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
        if self.calls.len() == KEPT_CALLS {
            if let Some((old, _)) = self.calls.pop_front() {
                if self.ids.get(&old) == Some(&self.dropped) {
                    self.ids.remove(&old);
                }
            }
            self.dropped += 1;
        }
        self.ids
            .insert(id.to_owned(), self.dropped + self.calls.len());
        let made = Made {
            call: key,
            name: tool,
            outcome: None,
            turn: self.turn,
        };
        self.calls.push_back((id.to_owned(), made));
    }

    /// A model response: its text (text blocks joined), and whether it
    /// made a tool call (then it is no answer). The text is digested as
    /// replay digests a recorded answer ([`TextDigest`]).
    fn response(&mut self, text: &str, calls: bool) {
        let answer = (!calls).then(|| TextDigest::of(text).get());
        self.answers.record(answer);
    }

    /// The result of call `id`; one with no call (its call was left out,
    /// dropped, or lies before the history) is nothing.
    fn result(&mut self, id: &str, outcome: Outcome) {
        if let Some(&at) = self.ids.get(id) {
            let kept = at
                .checked_sub(self.dropped)
                .and_then(|i| self.calls.get_mut(i));
            if let Some((_, made)) = kept {
                made.outcome = Some(outcome);
            }
        }
    }

    /// The history, the latest turn looked at when `ends_with_results`.
    fn done(self, ends_with_results: bool) -> History {
        let latest = ends_with_results
            .then(|| self.calls.back().map(|(_, m)| m.turn))
            .flatten();
        History {
            calls: self.calls.into_iter().map(|(_, m)| m).collect(),
            latest,
            answers: self.answers,
        }
    }
}

/// A member's text: `""` when it is absent or not a string.
fn text(raw: Option<&RawValue>) -> Cow<'_, str> {
    raw.and_then(|r| serde_json::from_str::<Cow<'_, str>>(r.get()).ok())
        .unwrap_or_default()
}

/// A value, built (a tool call's input: small, and compared canonically);
/// `null` when absent.
fn value(raw: Option<&RawValue>) -> Value {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or(Value::Null)
}

/// A tool call's arguments as OpenAI sends them (JSON text): their value,
/// or the text itself when it is not JSON; `{}` when absent.
fn arguments_of(raw: Option<&RawValue>) -> Value {
    match raw {
        None => Value::Object(serde_json::Map::new()),
        Some(r) => match serde_json::from_str::<Cow<'_, str>>(r.get()) {
            Ok(text) => serde_json::from_str(&text).unwrap_or(Value::String(text.into_owned())),
            Err(_) => value(Some(r)),
        },
    }
}

/// A result's outcome: the digest every front-end takes of it
/// ([`DigestSeed`], read without being built), `null` when absent.
fn outcome(raw: Option<&RawValue>, error: bool) -> Outcome {
    let digest = raw
        .and_then(|r| {
            DigestSeed
                .deserialize(&mut serde_json::Deserializer::from_str(r.get()))
                .ok()
        })
        .unwrap_or_else(|| digest_value(&Value::Null));
    Outcome { digest, error }
}

/// The text of a message's `content`: a string, or the `text` of its
/// text parts (`text`, `output_text`) joined.
fn text_of(content: Option<&RawValue>) -> String {
    let Some(raw) = content else {
        return String::new();
    };
    if let Ok(text) = serde_json::from_str::<Cow<'_, str>>(raw.get()) {
        return text.into_owned();
    }
    let mut out = String::new();
    each(Some(raw), |part| {
        let part = members(part);
        if matches!(text(part.kind).as_ref(), "text" | "output_text") {
            out.push_str(&text(part.text));
        }
    });
    out
}

/// Calls `each` with every element of `raw` when it is an array, holding
/// one at a time (nothing when it is absent or not an array).
fn each<'a>(raw: Option<&'a RawValue>, each: impl FnMut(&'a RawValue)) {
    struct Each<F>(F);
    impl<'de, F: FnMut(&'de RawValue)> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                (self.0)(item);
            }
            Ok(())
        }
    }
    if let Some(raw) = raw {
        let _ = serde_json::Deserializer::from_str(raw.get()).deserialize_seq(Each(each));
    }
}

/// The members of an object this reader looks at, each as it came (a
/// member of another type, or an element that is not an object, reads as
/// absent: the reader is as lenient as the providers').
#[derive(Deserialize, Default)]
struct Members<'a> {
    #[serde(borrow)]
    role: Option<&'a RawValue>,
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(borrow)]
    is_error: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_call_id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

fn members(raw: &RawValue) -> Members<'_> {
    serde_json::from_str(raw.get()).unwrap_or_default()
}

/// The history of request `body` of `api`; `Err` when the body is not
/// JSON (the caller refuses: a call whose history cannot be read is not
/// let through under `[loops]`). Read one message or item at a time; what
/// is kept is bounded ([`KEPT_CALLS`]).
pub fn tool_history(api: Api, body: &[u8]) -> Result<History, String> {
    let top: &RawValue = serde_json::from_slice(body)
        .map_err(|e| format!("the request's messages cannot be read for loop detection ({e})"))?;
    let top = members(top);
    let mut b = Builder::default();
    let mut ends_with_results = false;
    match api {
        Api::Messages => each(top.messages, |message| {
            let message = members(message);
            let assistant = text(message.role) == "assistant";
            if assistant {
                b.next_turn();
            }
            ends_with_results = false;
            let mut calls = false;
            each(message.content, |block| {
                let block = members(block);
                match (assistant, text(block.kind).as_ref()) {
                    (true, "tool_use") => {
                        calls = true;
                        b.call(&text(block.id), &text(block.name), &value(block.input));
                    }
                    (false, "tool_result") => {
                        let error = block.is_error.is_some_and(|e| e.get() == "true");
                        b.result(&text(block.tool_use_id), outcome(block.content, error));
                        ends_with_results = true;
                    }
                    _ => {}
                }
            });
            if assistant {
                b.response(&text_of(message.content), calls);
            }
        }),
        Api::Chat => each(top.messages, |message| {
            let message = members(message);
            ends_with_results = false;
            match text(message.role).as_ref() {
                "assistant" => {
                    b.next_turn();
                    let mut calls = false;
                    each(message.tool_calls, |call| {
                        calls = true;
                        let call = members(call);
                        let function = call.function.map(members).unwrap_or_default();
                        let input = arguments_of(function.arguments);
                        b.call(&text(call.id), &text(function.name), &input);
                    });
                    b.response(&text_of(message.content), calls);
                }
                "tool" => {
                    b.result(&text(message.tool_call_id), outcome(message.content, false));
                    ends_with_results = true;
                }
                _ => {}
            }
        }),
        Api::Responses => {
            // A model response is the run of its output items (reasoning,
            // assistant messages, function calls) between other items.
            let mut response: Option<(String, bool)> = None;
            let end = |b: &mut Builder, response: &mut Option<(String, bool)>| {
                if let Some((said, calls)) = response.take() {
                    b.response(&said, calls);
                }
            };
            each(top.input, |item| {
                let item = members(item);
                let kind = text(item.kind);
                let assistant = text(item.role) == "assistant";
                match kind.as_ref() {
                    "function_call" => {
                        let (_, calls) = response.get_or_insert_with(Default::default);
                        if !*calls {
                            b.next_turn();
                            *calls = true;
                        }
                        let input = arguments_of(item.arguments);
                        b.call(&text(item.call_id), &text(item.name), &input);
                        ends_with_results = false;
                    }
                    // A model's reasoning comes before its calls, in the same turn.
                    "reasoning" => {
                        response.get_or_insert_with(Default::default);
                    }
                    "message" | "" if assistant => {
                        let (said, _) = response.get_or_insert_with(Default::default);
                        said.push_str(&text_of(item.content));
                        ends_with_results = false;
                    }
                    "function_call_output" => {
                        end(&mut b, &mut response);
                        b.result(&text(item.call_id), outcome(item.output, false));
                        ends_with_results = true;
                    }
                    _ => {
                        end(&mut b, &mut response);
                        ends_with_results = false;
                    }
                }
            });
            end(&mut b, &mut response);
        }
    }
    Ok(b.done(ends_with_results))
}
