//! The tool calls a model request's messages hold, with their results, for
//! loop detection (`[loops]`; the core's
//! [`completed`](budgetgate_core::engine::loops::completed)): a client
//! sends the whole conversation with each model call, so the proxy sees
//! every call the agent made and what it returned, one request late; and
//! the model's text answers (`same_answer`, [`Answers`]).
//!
//! Read per API: Messages `tool_use` blocks of `assistant` messages and
//! `tool_result` blocks (`content`, `is_error`) of `user` messages; Chat
//! `tool_calls` of `assistant` messages and `tool` messages (`content`; no
//! error flag); Responses `function_call` / `custom_tool_call` and their
//! `…_output` items of `input`. Consecutive `assistant` messages are one
//! response (as the Messages API reads them). The latest turn is looked at
//! only when the request ends with tool results (the model asked to go on
//! after its calls); a request that ends with a person's message is a new
//! start.
//!
//! A call's key is its tool and a digest of its input's JSON structure, a
//! result's outcome the digest every front-end takes of a result
//! ([`DigestSeed`]): both read from the text without building it, so a
//! request's memory stays what its bytes are. (The key is the proxy's own:
//! calls are compared only with the same request's calls. Unlike the
//! repetition rule's fingerprint it tells key orders apart; a client
//! sends a call back as it stored it.) Below 64 levels a part of an input
//! or result is digested as one marker, so any depth is read; one that
//! cannot be read at all refuses the request (fail closed).

use std::collections::{HashMap, VecDeque};

use budgetgate_core::engine::loops::{Answers, Made, Outcome, LOOP_WINDOW};
use budgetgate_core::tools::ToolName;
use budgetgate_core::turn::ArgsFingerprint;
use serde::de::DeserializeSeed;
use serde_json::value::RawValue;

use super::members::{each, members, text, text_of};
use super::Api;
use crate::gate::digest::{digest_value, DigestSeed, TextDigest};

/// Calls kept of a history: the latest ones, four windows' worth. The
/// window remembers the last [`LOOP_WINDOW`] calls, so what came before
/// these cannot change what a latest turn of up to 96 calls completed (a
/// larger one has its first calls looked at without all the calls before
/// them). A request of 64 MiB holds a million tiny calls; what is kept of
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
    /// The request ends with a person's message other than the one the
    /// latest answer followed: a new start, which `same_answer` does not
    /// hold against (the same prompt again, as an agent loop's "continue",
    /// is no new start).
    pub new_prompt: bool,
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
    /// The turn of the latest call, kept or not.
    last_call_turn: Option<u32>,
    /// The model's answers so far.
    answers: Answers,
    /// The response being read: its text so far, and whether it made a
    /// call.
    response: Option<(String, bool)>,
    /// The digest of the latest person's message, and of the one the
    /// latest answer followed.
    prompt: Option<u64>,
    answered_prompt: Option<u64>,
    /// Whether the last message read is a person's.
    ends_with_prompt: bool,
    /// The first input or result that could not be read.
    unreadable: Option<String>,
}

impl Builder {
    fn next_turn(&mut self) {
        if self.turn_open {
            self.turn = self.turn.saturating_add(1);
            self.turn_open = false;
        }
    }

    /// A call of the current turn; one the engine could never have let
    /// through (a name outside the grammar) is left out, its turn counted.
    fn call(&mut self, id: &str, name: &str, key: Result<ArgsFingerprint, String>) {
        self.turn_open = true;
        self.last_call_turn = Some(self.turn);
        let key = match key {
            Ok(key) => key,
            Err(e) => {
                self.unreadable
                    .get_or_insert(format!("the input of call {id:?} ({e})"));
                return;
            }
        };
        let Ok(tool) = ToolName::new(name) else {
            return;
        };
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
            call: key.with_name(name),
            name: tool,
            outcome: None,
            turn: self.turn,
        };
        self.calls.push_back((id.to_owned(), made));
    }

    /// The response being read (one begun if none is): its text so far,
    /// and whether it made a call.
    fn response(&mut self) -> &mut (String, bool) {
        self.response.get_or_insert_with(Default::default)
    }

    /// The end of the response being read, if one is: an answer when it
    /// made no tool call, its text (text blocks joined) digested as replay
    /// digests a recorded answer ([`TextDigest`]).
    fn end_response(&mut self) {
        if let Some((said, calls)) = self.response.take() {
            let answer = (!calls).then(|| TextDigest::of(&said).get());
            self.answers.record(answer);
            self.answered_prompt = self.prompt;
        }
    }

    /// A person's message (a message of the user's that holds no tool
    /// result), after any response.
    fn prompt(&mut self, text: &str) {
        self.end_response();
        self.prompt = Some(TextDigest::of(text).get());
        self.ends_with_prompt = true;
    }

    /// The result of call `id`; one with no call (its call was left out,
    /// dropped, or lies before the history) is nothing.
    fn result(&mut self, id: &str, content: Option<&RawValue>, error: bool) {
        let digest = match content {
            None => digest_value(&serde_json::Value::Null),
            Some(raw) => {
                match DigestSeed.deserialize(&mut serde_json::Deserializer::from_str(raw.get())) {
                    Ok(d) => d,
                    Err(e) => {
                        self.unreadable
                            .get_or_insert(format!("the result of call {id:?} ({e})"));
                        return;
                    }
                }
            }
        };
        if let Some(&at) = self.ids.get(id) {
            let kept = at
                .checked_sub(self.dropped)
                .and_then(|i| self.calls.get_mut(i));
            if let Some((_, made)) = kept {
                made.outcome = Some(Outcome { digest, error });
            }
        }
    }

    /// The history, the latest turn looked at when `ends_with_results`.
    fn done(mut self, ends_with_results: bool) -> Result<History, String> {
        self.end_response();
        if let Some(e) = self.unreadable {
            return Err(format!("{e} cannot be read for loop detection"));
        }
        Ok(History {
            calls: self.calls.into_iter().map(|(_, m)| m).collect(),
            latest: self.last_call_turn.filter(|_| ends_with_results),
            answers: self.answers,
            new_prompt: self.ends_with_prompt && self.prompt != self.answered_prompt,
        })
    }
}

/// The key of an input given as JSON (`None`: no input, read as `null`).
fn input_key(raw: Option<&RawValue>) -> Result<ArgsFingerprint, String> {
    let digest = match raw {
        None => digest_value(&serde_json::Value::Null),
        Some(raw) => DigestSeed
            .deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
            .map_err(|e| e.to_string())?,
    };
    Ok(ArgsFingerprint::from_u128(u128::from(digest)))
}

/// The key of arguments as OpenAI sends them (JSON text): of the JSON the
/// text holds, or of the text itself when it is not JSON; `{}` when absent.
fn arguments_key(raw: Option<&RawValue>) -> Result<ArgsFingerprint, String> {
    let Some(raw) = raw else {
        let empty = serde_json::Value::Object(serde_json::Map::new());
        return Ok(ArgsFingerprint::from_u128(u128::from(digest_value(&empty))));
    };
    match serde_json::from_str::<std::borrow::Cow<'_, str>>(raw.get()) {
        Ok(text) => {
            let mut de = serde_json::Deserializer::from_str(&text);
            let digest = match DigestSeed
                .deserialize(&mut de)
                .and_then(|d| de.end().map(|()| d))
            {
                Ok(d) => d,
                Err(_) => digest_value(&serde_json::Value::String(text.into_owned())),
            };
            Ok(ArgsFingerprint::from_u128(u128::from(digest)))
        }
        Err(_) => input_key(Some(raw)),
    }
}

/// The history of request `body` of `api`; `Err` when the body is not
/// JSON, or holds an input or result that cannot be read (the caller
/// refuses: a call whose history cannot be read is not let through under
/// `[loops]`). Read one message or item at a time; what is kept is
/// bounded ([`KEPT_CALLS`]).
pub fn tool_history(api: Api, body: &[u8]) -> Result<History, String> {
    let top: &RawValue = serde_json::from_slice(body)
        .map_err(|e| format!("the request's messages cannot be read for loop detection ({e})"))?;
    let top = members(top);
    let mut b = Builder::default();
    let mut ends_with_results = false;
    match api {
        Api::Messages | Api::Chat => {
            let mut after_assistant = false;
            each(top.messages, |message| {
                let message = members(message);
                let role = text(message.role);
                ends_with_results = false;
                b.ends_with_prompt = false;
                if role != "assistant" {
                    b.end_response();
                    after_assistant = false;
                }
                match (api, role.as_ref()) {
                    (_, "assistant") => {
                        if !after_assistant {
                            b.next_turn();
                        }
                        after_assistant = true;
                        b.response().0.push_str(&text_of(message.content));
                        if api == Api::Chat {
                            each(message.tool_calls, |call| {
                                b.response().1 = true;
                                let call = members(call);
                                let function = call.function.map(members).unwrap_or_default();
                                let key = arguments_key(function.arguments);
                                b.call(&text(call.id), &text(function.name), key);
                            });
                        } else {
                            each(message.content, |block| {
                                let block = members(block);
                                if text(block.kind) == "tool_use" {
                                    b.response().1 = true;
                                    let key = input_key(block.input);
                                    b.call(&text(block.id), &text(block.name), key);
                                }
                            });
                        }
                    }
                    (Api::Chat, "tool") => {
                        b.result(&text(message.tool_call_id), message.content, false);
                        ends_with_results = true;
                    }
                    (Api::Messages, _) => {
                        each(message.content, |block| {
                            let block = members(block);
                            if text(block.kind) == "tool_result" {
                                let error = block.is_error.is_some_and(|e| e.get() == "true");
                                b.result(&text(block.tool_use_id), block.content, error);
                                ends_with_results = true;
                            }
                        });
                        if role == "user" && !ends_with_results {
                            b.prompt(&text_of(message.content));
                        }
                    }
                    (Api::Chat, "user") => b.prompt(&text_of(message.content)),
                    _ => {}
                }
            });
        }
        Api::Responses => {
            // A model response is the run of its output items (reasoning,
            // assistant messages, calls) between other items.
            each(top.input, |item| {
                let item = members(item);
                b.ends_with_prompt = false;
                let kind = text(item.kind);
                let assistant = text(item.role) == "assistant";
                match kind.as_ref() {
                    "function_call" | "custom_tool_call" => {
                        if !b.response().1 {
                            b.next_turn();
                            b.response().1 = true;
                        }
                        let key = if kind == "function_call" {
                            arguments_key(item.arguments)
                        } else {
                            input_key(item.input)
                        };
                        b.call(&text(item.call_id), &text(item.name), key);
                        ends_with_results = false;
                    }
                    // A model's reasoning comes before its calls, in the same turn.
                    "reasoning" => {
                        b.response();
                    }
                    "message" | "" if assistant => {
                        b.response().0.push_str(&text_of(item.content));
                        ends_with_results = false;
                    }
                    "function_call_output" | "custom_tool_call_output" => {
                        b.end_response();
                        b.result(&text(item.call_id), item.output, false);
                        ends_with_results = true;
                    }
                    "message" | "" if text(item.role) == "user" => {
                        b.prompt(&text_of(item.content));
                        ends_with_results = false;
                    }
                    _ => {
                        b.end_response();
                        ends_with_results = false;
                    }
                }
            });
        }
    }
    b.done(ends_with_results)
}
