//! Approval in the stateless protocol (MCP 2026-07-28): a call that needs
//! approval is answered with an `InputRequiredResult` (an elicitation
//! request and a sealed `requestState`, [`crate::mcp::request_state`]); the
//! client's retry with its answer is verified and forwarded, or refused.
//!
//! The call's reservation is taken by its decision, as for a question asked
//! by `elicitation/create`, and held (renewed) while the gateway awaits the
//! retry: an accepting retry forwards the call under it (committed or given
//! back as any forwarded call); a decline, a retry past the deadline, one
//! for other arguments, or no retry by the deadline counts the attempt
//! (`approval-refused`), as a refused question does; a client gone before
//! retrying (stdio closed, the gateway stopped) gives it back, the call
//! never having reached the server.

use super::client::gate_error;
#[allow(unused_imports)]
use super::*;
use crate::mcp::generation::{self, Generation};
use crate::mcp::request_state::{arguments_digest, Claims, Sealer, INPUT_KEY, PREFIX};
use std::sync::{Arc, Mutex};

/// A call whose approval was asked by `InputRequiredResult`, awaiting the
/// client's retry.
#[derive(Debug)]
pub(crate) struct Awaited {
    /// The reservation's key (the first request's).
    pub(crate) key: String,
    pub(crate) tool: String,
    /// The question and its deadline: the one approval state machine.
    question: approval::Question,
}

/// The approvals awaiting a retry, and the key their states are sealed
/// with: one per gateway process (shared by every Streamable HTTP
/// session, whose stateless requests each have a proxy of their own).
#[derive(Debug)]
pub struct AwaitedRetries {
    /// The sealer, or why none could be made (approval is then refused,
    /// fail closed).
    sealer: Result<Sealer, String>,
    next: u64,
    awaited: HashMap<u64, Awaited>,
    /// Approved calls whose server answered with an `InputRequiredResult`
    /// of its own, by the SHA-256 of the server's `requestState`: its
    /// retry (carrying that state) is not asked about again.
    follow_ups: HashMap<String, FollowUp>,
}

/// An approved call awaiting its retry for its server's own question.
#[derive(Debug)]
struct FollowUp {
    tool: String,
    arguments: String,
    binding: String,
    deadline_ms: u64,
}

/// The table of approvals awaiting a retry, as proxies share it.
pub type SharedRetries = Arc<Mutex<AwaitedRetries>>;

impl AwaitedRetries {
    /// An empty table with a fresh random key.
    pub fn new() -> Self {
        Self::with_sealer(Sealer::new())
    }

    /// An empty table sealing with `sealer`.
    pub fn with_sealer(sealer: Result<Sealer, String>) -> Self {
        Self {
            sealer,
            next: 0,
            awaited: HashMap::new(),
            follow_ups: HashMap::new(),
        }
    }

    /// An empty table to share.
    pub fn shared() -> SharedRetries {
        Arc::new(Mutex::new(Self::new()))
    }

    /// The reservations held for approvals awaiting their retry.
    pub fn held(&self) -> Vec<String> {
        self.awaited.values().map(|a| a.key.clone()).collect()
    }

    /// How many approvals await their retry.
    pub fn len(&self) -> usize {
        self.awaited.len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.awaited.is_empty()
    }

    /// The earliest deadline of an approval awaiting its retry.
    pub fn next_deadline(&self) -> Option<u64> {
        self.awaited
            .values()
            .map(|a| a.question.deadline_ms())
            .min()
    }

    /// Takes the approvals whose deadline has come (their calls are to be
    /// refused, the attempt counted).
    pub(crate) fn take_expired(&mut self, now: u64) -> Vec<Awaited> {
        let late: Vec<u64> = self
            .awaited
            .iter()
            .filter(|(_, a)| a.question.expired(now).is_some())
            .map(|(n, _)| *n)
            .collect();
        late.iter().filter_map(|n| self.awaited.remove(n)).collect()
    }

    /// Takes every approval (the client went away: given back).
    pub(crate) fn take_all(&mut self) -> Vec<Awaited> {
        self.awaited.drain().map(|(_, a)| a).collect()
    }
}

impl Default for AwaitedRetries {
    fn default() -> Self {
        Self::new()
    }
}

/// Takes the approvals of `retries` past their deadline and counts each
/// attempt on `gate` (`approval-refused`: no retry came in time). The
/// Streamable HTTP gateway runs this on its timer; a stdio proxy on its
/// tick. Returns those whose attempt could not be counted (key and tool).
pub fn expire_retries<G: CallGate>(
    retries: &SharedRetries,
    gate: &mut G,
    timeout_ms: u64,
    now: u64,
) -> Vec<(String, String)> {
    let late = match retries.lock() {
        Ok(mut r) => r.take_expired(now),
        Err(_) => return Vec::new(),
    };
    let mut uncounted = Vec::new();
    for a in late {
        let why = format!("no retry came within {} s", timeout_ms.div_ceil(1000));
        if let Err(e) = gate.refused(&a.key, &a.tool, "approval-refused", &why, now) {
            log::warn!("budgetgate mcp: counting {}: {e} (kept: counted again before the next decision; else its reservation is counted as spent when it expires)", a.key);
            uncounted.push((a.key, a.tool));
        }
    }
    uncounted
}

/// What the retry of a call carries for the gateway's question.
enum Retry<'a> {
    /// No answer to the gateway's question came with the state.
    Unanswered,
    /// The client's answer: its `action`, if it has one.
    Answered(Option<&'a str>),
}

impl<G: CallGate> Proxy<G> {
    /// Shares `retries` (the gateway's table of approvals awaiting a
    /// retry) and binds the states this proxy writes to `binding` (the
    /// session, for a Streamable HTTP gateway whose stateless requests
    /// each get a proxy of their own). A proxy that shares a table leaves
    /// its expiry and renewal to the gateway.
    pub fn share_retries(&mut self, retries: SharedRetries, binding: String) {
        self.retries = retries;
        self.owns_retries = false;
        self.binding = binding;
    }

    /// The reservations held for this proxy's own approvals awaiting a
    /// retry (none when the table is shared: its gateway renews them).
    pub(super) fn held_for_retries(&self) -> Vec<String> {
        if !self.owns_retries {
            return Vec::new();
        }
        self.retries.lock().map(|r| r.held()).unwrap_or_default()
    }

    /// The earliest deadline of this proxy's own approvals awaiting a retry.
    pub(super) fn retries_due(&self) -> Option<u64> {
        if !self.owns_retries {
            return None;
        }
        self.retries.lock().ok()?.next_deadline()
    }

    /// Refuses this proxy's own approvals past their deadline.
    pub(super) fn expire_own_retries(&mut self, now: u64) {
        if self.owns_retries {
            let retries = Arc::clone(&self.retries);
            // An attempt that could not be counted is kept with the answered
            // calls: counted again before the next decision, which waits
            // for it (fail closed).
            let uncounted = expire_retries(&retries, &mut self.gate, self.approval_timeout_ms, now);
            self.unsettled.extend(uncounted);
        }
    }

    /// Gives back this proxy's own approvals awaiting a retry (the client
    /// is gone: they never reached the server).
    pub(super) fn give_back_retries(&mut self, now: u64) {
        if !self.owns_retries {
            return;
        }
        let all = match self.retries.lock() {
            Ok(mut r) => r.take_all(),
            Err(_) => return,
        };
        for a in all {
            self.roll_back(&a.key, now);
        }
    }

    /// Asks approval of a stateless call (reserved under `key` by its
    /// decision) with an `InputRequiredResult`: an elicitation request and
    /// a sealed state bound to the tool, its arguments, this proxy's
    /// session and the deadline.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask_by_input_required(
        &mut self,
        id: &str,
        key: String,
        name: &str,
        arguments: &Value,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let question = approval::Question::asked(now, self.approval_timeout_ms);
        let sealed = match self.retries.lock() {
            Err(_) => Err("the table of approvals is poisoned".to_owned()),
            Ok(r) if r.awaited.len() >= MAX_PENDING => Err(format!(
                "more than {MAX_PENDING} approvals await their retry"
            )),
            Ok(mut r) => match &r.sealer {
                Err(e) => Err(e.clone()),
                Ok(sealer) => {
                    let nonce = r.next + 1;
                    let claims = Claims {
                        nonce,
                        tool: name.to_owned(),
                        arguments: arguments_digest(arguments),
                        binding: self.binding.clone(),
                        deadline_ms: question.deadline_ms(),
                    };
                    let state = sealer.seal(&claims);
                    r.next = nonce;
                    r.awaited.insert(
                        nonce,
                        Awaited {
                            key: key.clone(),
                            tool: name.to_owned(),
                            question,
                        },
                    );
                    Ok(state)
                }
            },
        };
        let state = match sealed {
            Ok(state) => state,
            Err(e) => {
                // Nothing was asked: the call never reaches the server.
                self.roll_back(&key, now);
                let refusal = gate_error(&e);
                out.push(Out::Client(refused_line(
                    id,
                    &refusal,
                    Generation::Stateless,
                )));
                return;
            }
        };
        if self.owns_retries {
            self.holding_from(now);
        }
        out.push(Out::Client(
            self.input_required_line(id, name, arguments, &state),
        ));
    }

    /// A stateless `tools/call` carrying one of the gateway's states
    /// (`state`, starting [`PREFIX`]): the retry of a call asked about. An
    /// accepting answer forwards the call, without the gateway's state and
    /// answer, under the reservation its first request took; anything else
    /// is refused with what was wrong (`approval-refused`), and counted
    /// when it ends a question the gateway held.
    pub(super) fn stateless_retry(
        &mut self,
        id: &str,
        params: &Value,
        text: &str,
        state: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let params = Some(params);
        let name = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let empty = json!({});
        let arguments = params
            .and_then(|p| p.get("arguments"))
            .filter(|a| !a.is_null())
            .unwrap_or(&empty);
        let refuse_unheld = |out: &mut Vec<Out>, why: &str| {
            let refusal = Refusal::approval_refused(name, why);
            out.push(Out::Client(refused_line(
                id,
                &refusal,
                Generation::Stateless,
            )));
        };
        let Ok(mut retries) = self.retries.lock() else {
            refuse_unheld(out, "the gateway's table of approvals is poisoned");
            return;
        };
        let claims = match retries.sealer.as_ref().map(|s| s.open(state)) {
            Ok(Ok(claims)) => claims,
            Ok(Err(e)) => {
                drop(retries);
                refuse_unheld(out, &format!("this retry was refused: {e}"));
                return;
            }
            Err(e) => {
                let e = e.clone();
                drop(retries);
                refuse_unheld(out, &e);
                return;
            }
        };
        if claims.binding != self.binding {
            // Another session's question: not this client's to end.
            drop(retries);
            refuse_unheld(
                out,
                "this retry's requestState was issued on another session",
            );
            return;
        }
        let Some(awaited) = retries.awaited.remove(&claims.nonce) else {
            drop(retries);
            // Its question ended: answered by an earlier retry, or its
            // deadline passed (refused and counted then).
            let why = if now >= claims.deadline_ms {
                format!(
                    "this retry came after the approval's deadline ({})",
                    self.no_answer_in_time()
                )
            } else {
                "this retry's requestState was already used".to_owned()
            };
            refuse_unheld(out, &why);
            return;
        };
        let answer = retry_answer(params);
        if matches!(answer, Retry::Unanswered) && awaited.question.expired(now).is_none() {
            // Asked again, with the same state: MCP's way to ask for what
            // a retry left out.
            let again = claims.nonce;
            retries.awaited.insert(again, awaited);
            drop(retries);
            out.push(Out::Client(
                self.input_required_line(id, name, arguments, state),
            ));
            return;
        }
        drop(retries);
        let why = if claims.tool != name || claims.arguments != arguments_digest(arguments) {
            Some(
                "this retry's tool or arguments are not the ones the approval was asked about"
                    .to_owned(),
            )
        } else {
            let action = match answer {
                Retry::Answered(action) => action,
                // Reached only past the deadline.
                Retry::Unanswered => {
                    return self.refuse_awaited(id, awaited, &self.no_answer_in_time(), now, out)
                }
            };
            let decided = awaited.question.answer(
                if action == Some("accept") {
                    Answer::Approve
                } else {
                    Answer::Refuse
                },
                now,
            );
            match decided {
                Some(Decision::Approved) => None,
                Some(Decision::TimedOut) | None => Some(self.no_answer_in_time()),
                Some(Decision::Refused) => Some(match action {
                    Some("decline") => "the person declined it".to_owned(),
                    Some("cancel") => "the person dismissed the request".to_owned(),
                    Some(other) => format!(
                        "the client answered {}, not accept",
                        Value::from(shortened(other, 40))
                    ),
                    None => "the client's answer had no `action` of accept, decline or cancel"
                        .to_owned(),
                }),
            }
        };
        if let Some(why) = why {
            return self.refuse_awaited(id, awaited, &why, now, out);
        }
        self.holding_from(now);
        let call = self.loop_key_of_request(text);
        self.pending.insert(
            id.to_owned(),
            Pending::Call {
                key: awaited.key,
                tool: awaited.tool,
                cancelled: false,
                generation: Generation::Stateless,
                approved: Some(claims.arguments),
                call,
            },
        );
        out.push(Out::Server(without_own_input(text)));
    }

    /// Refuses the retry `id` of the call `awaited` (`why`), counting the
    /// attempt.
    fn refuse_awaited(
        &mut self,
        id: &str,
        awaited: Awaited,
        why: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let refusal = Refusal::approval_refused(&awaited.tool, why);
        self.refuse_reserved(
            id,
            &awaited.key,
            &awaited.tool,
            &refusal,
            why,
            Generation::Stateless,
            now,
            out,
        );
    }

    /// An approved call (`tool`, arguments digest `arguments`) was answered
    /// by its server with an `InputRequiredResult` of its own whose
    /// `requestState` is `state`: its retry within the approval timeout
    /// needs no approval again (at most [`MAX_PENDING`] remembered; past
    /// that, or without a state to know the retry by, it is asked again).
    pub(super) fn approved_pending_input(
        &mut self,
        state: &str,
        tool: &str,
        arguments: String,
        now: u64,
    ) {
        let Ok(mut r) = self.retries.lock() else {
            return;
        };
        r.follow_ups.retain(|_, f| f.deadline_ms > now);
        if r.follow_ups.len() < MAX_PENDING {
            r.follow_ups.insert(
                state_digest(state),
                FollowUp {
                    tool: tool.to_owned(),
                    arguments,
                    binding: self.binding.clone(),
                    deadline_ms: now.saturating_add(self.approval_timeout_ms),
                },
            );
        }
    }

    /// Whether a stateless call needing approval is the retry, for its
    /// server's own question, of a call approved here (same server state,
    /// tool, arguments and session, before the deadline): used once.
    pub(super) fn approved_follow_up(
        &mut self,
        params: &Value,
        name: &str,
        arguments: &Value,
        now: u64,
    ) -> bool {
        let Some(state) = params.get("requestState").and_then(Value::as_str) else {
            return false;
        };
        let Ok(mut r) = self.retries.lock() else {
            return false;
        };
        let digest = state_digest(state);
        let Some(f) = r.follow_ups.get(&digest) else {
            return false;
        };
        let fits = f.tool == name
            && f.binding == self.binding
            && now < f.deadline_ms
            && f.arguments == arguments_digest(arguments);
        if fits {
            r.follow_ups.remove(&digest);
        }
        fits
    }

    /// The `InputRequiredResult` asking a person about call `name` with
    /// `arguments` (first, or again when the retry brought no answer).
    fn input_required_line(&self, id: &str, name: &str, arguments: &Value, state: &str) -> String {
        let shown = shortened(&arguments.to_string(), 400);
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {
                INPUT_KEY: {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": format!("budgetgate: the agent wants to call {name} with {shown}. Allow it?"),
                        "requestedSchema": {"type": "object", "properties": {}},
                    },
                },
            },
            "requestState": state,
        });
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
    }
}

/// The SHA-256 (hex) of a server's `requestState`, as follow-ups are kept.
fn state_digest(state: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(state.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state of a stateless call's retry, when it is one of the gateway's.
pub(super) fn own_state(params: &Value) -> Option<&str> {
    params
        .get("requestState")
        .and_then(Value::as_str)
        .filter(|s| s.starts_with(PREFIX))
}

/// Whether a stateless call asking approval may be asked by
/// `InputRequiredResult`: its client declared `elicitation` in the
/// request's `_meta`.
pub(super) fn can_elicit(params: &Value) -> bool {
    generation::declares(Some(params), "elicitation")
}

fn retry_answer(params: Option<&Value>) -> Retry<'_> {
    match params
        .and_then(|p| p.get("inputResponses"))
        .and_then(|r| r.get(INPUT_KEY))
    {
        None => Retry::Unanswered,
        Some(a) => Retry::Answered(a.get("action").and_then(Value::as_str)),
    }
}

/// The retry as the server is to see it: the gateway's `requestState` and
/// its answer in `inputResponses` taken out (the server never asked for
/// them; `inputResponses` goes when nothing else is left in it), every
/// other member as it came.
fn without_own_input(text: &str) -> String {
    // Read strictly before (`Proxy::client_call`): this cannot fail.
    let Ok(mut whole) = serde_json::from_str::<Value>(text) else {
        return text.to_owned();
    };
    if let Some(params) = whole.get_mut("params").and_then(Value::as_object_mut) {
        params.remove("requestState");
        let empty = match params
            .get_mut("inputResponses")
            .and_then(Value::as_object_mut)
        {
            Some(responses) => {
                responses.remove(INPUT_KEY);
                responses.is_empty()
            }
            None => false,
        };
        if empty {
            params.remove("inputResponses");
        }
    }
    whole.to_string()
}
