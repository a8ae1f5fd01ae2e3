//! What the client sends: requests, `tools/call` decided by the gate,
//! cancellations, answers to the gateway's questions.

use super::input_required;
#[allow(unused_imports)]
use super::*;
use crate::mcp::request_state;

impl<G: CallGate> Proxy<G> {
    /// A line from the client. Answered calls not yet settled stay so,
    /// unless a `tools/call` commits them with its decision.
    pub fn on_client(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let mut out = Vec::new();
        let Ok(text) = std::str::from_utf8(line) else {
            out.push(Out::Client(error_line(
                "null",
                PARSE_ERROR,
                "Parse error: not UTF-8",
            )));
            return out;
        };
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return out;
        }
        if text.trim_start().starts_with('[') {
            let items: Vec<&RawValue> = match serde_json::from_str(text) {
                Ok(items) => items,
                Err(e) => {
                    out.push(Out::Client(error_line(
                        "null",
                        PARSE_ERROR,
                        &format!("Parse error: {e}"),
                    )));
                    return out;
                }
            };
            if items.is_empty() {
                out.push(Out::Client(error_line(
                    "null",
                    INVALID_REQUEST,
                    "Invalid Request: an empty batch",
                )));
                return out;
            }
            let mut forward = Vec::new();
            for item in items {
                let raw = item.get();
                if self.client_one(raw, now, &mut out) {
                    forward.push(raw);
                }
            }
            if !forward.is_empty() {
                out.push(Out::Server(format!("[{}]", forward.join(","))));
            }
        } else if self.client_one(text, now, &mut out) {
            out.push(Out::Server(text.to_owned()));
        }
        out
    }

    /// The client sent a line longer than [`MAX_LINE`] (skipped).
    pub fn on_client_too_long(&mut self) -> Vec<Out> {
        vec![Out::Client(error_line(
            "null",
            INVALID_REQUEST,
            &format!(
                "Invalid Request: a message longer than {} MiB was refused",
                MAX_LINE >> 20
            ),
        ))]
    }

    /// Reads one message from the client; `true`: forward its text.
    pub(super) fn client_one(&mut self, text: &str, now: u64, out: &mut Vec<Out>) -> bool {
        let msg: Message<'_> = match serde_json::from_str(text) {
            Ok(msg) => msg,
            Err(e) => {
                let (code, what) = if e.is_data() {
                    (INVALID_REQUEST, "Invalid Request")
                } else {
                    (PARSE_ERROR, "Parse error")
                };
                // The id, when the line is a JSON object without a
                // duplicate member (which id would be meant?).
                let id = crate::strict::value_from_str(text)
                    .ok()
                    .and_then(|v| {
                        v.get("id")
                            .filter(|id| id.is_string() || id.is_number())
                            .map(Value::to_string)
                    })
                    .unwrap_or_else(|| "null".into());
                out.push(Out::Client(error_line(&id, code, &format!("{what}: {e}"))));
                return false;
            }
        };
        // The id as the proxy keys it ([`normal_id`], read once), and as
        // the gateway's own answers carry it: an id whose value cannot be
        // read is answered as no id, JSON-RPC's null when the id cannot be
        // detected, not a line the client may not parse.
        let readable = msg.id.and_then(readable_id);
        let key = msg.id.map(normal_id);
        let id = key.as_deref();
        let reply_id = readable.as_deref().unwrap_or("null");
        if msg.jsonrpc.as_deref() != Some("2.0") {
            out.push(Out::Client(error_line(
                reply_id,
                INVALID_REQUEST,
                "Invalid Request: `jsonrpc` must be \"2.0\"",
            )));
            return false;
        }
        if msg.method.as_deref() == Some("tools/call") {
            return self.client_call(text, msg.params, now, out);
        }
        if is_read(&msg, |eid| self.approvals.contains_key(eid)) {
            // The gateway reads this message's content to decide: a key
            // given twice would let it read one value and the other side
            // another (`docs/MCP.md`, "Transparency and faults").
            if let Err(e) = crate::strict::value_from_str(text) {
                if is_duplicate(&e) {
                    if msg.method.is_none() {
                        if let Some(approval) = id.and_then(|eid| self.approvals.remove(eid)) {
                            let answer = format!("the client's answer could not be read ({e})");
                            self.refuse_approval(approval, &answer, now, out);
                        }
                    } else {
                        out.push(Out::Client(error_line(
                            reply_id,
                            INVALID_REQUEST,
                            &format!("Invalid Request: {e}: a message the gateway reads must not repeat a key (refused, not forwarded)"),
                        )));
                    }
                    return false;
                }
            }
        }
        match (msg.method.as_deref(), id) {
            (Some(method), Some(id)) => {
                // An id still awaited would replace the request it names
                // here: a call's reservation would then never be committed
                // (the server's answer read as another request's) and the
                // ledger would give back an attempt that ran. MCP forbids
                // reusing an id within a session; refused, not forwarded.
                // (A `tools/call` reusing one is the gate's: `duplicate-call-id`.)
                if method != "tools/call"
                    && (self.pending.contains_key(id)
                        || self.is_closed(id)
                        || self.approvals.values().any(|a| a.id == id))
                {
                    out.push(Out::Client(error_line(
                        reply_id,
                        INVALID_REQUEST,
                        &format!("Invalid Request: the id {id} is already used by a request awaiting its answer, or by a call whose answer may still come"),
                    )));
                    return false;
                }
                if self.in_flight() >= MAX_PENDING {
                    out.push(Out::Client(error_line(
                        reply_id,
                        GATEWAY_ERROR,
                        &format!("budgetgate: more than {MAX_PENDING} requests in flight"),
                    )));
                    return false;
                }
                match method {
                    "initialize" => {
                        self.elicitation = msg
                            .params
                            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                            .is_some_and(|p| p["capabilities"].get("elicitation").is_some());
                        self.pending.insert(id.to_owned(), Pending::Other);
                    }
                    "tools/list" => {
                        let first = msg
                            .params
                            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                            .is_none_or(|p| p.get("cursor").is_none_or(Value::is_null));
                        self.pending.insert(id.to_owned(), Pending::List { first });
                    }
                    _ => {
                        self.pending.insert(id.to_owned(), Pending::Other);
                    }
                }
                true
            }
            (Some("notifications/cancelled"), None) => {
                let target = msg
                    .params
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p.get("requestId").map(id_key));
                if let Some(target) = target {
                    return self.cancel(&target, now, out);
                }
                true
            }
            (Some(_), None) => true,
            (None, Some(id)) if msg.result.is_some() || msg.error.is_some() => {
                if self.asks(id) == Some(Asker::Terminal) {
                    // Only the person at the terminal answers a question
                    // asked there; the agent's client cannot.
                    log::warn!("budgetgate mcp: the client answered {id}, a question asked at the terminal (dropped)");
                    return false;
                }
                if let Some(approval) = self.approvals.remove(id) {
                    // Both a result and an error (JSON-RPC forbids it) is
                    // not an accept.
                    let result = if msg.error.is_some() {
                        None
                    } else {
                        msg.result
                    };
                    self.approval_answer(approval, result, msg.error.is_some(), now, out);
                    return false;
                }
                // A late answer to a question already withdrawn is the
                // gateway's: the server never asked it.
                !self.asked_once(id)
            }
            _ => {
                out.push(Out::Client(error_line(
                    reply_id,
                    INVALID_REQUEST,
                    "Invalid Request: neither a request, a notification nor a response",
                )));
                false
            }
        }
    }

    /// A client's `notifications/cancelled` for request `target`; `true`:
    /// forward it (the server saw the request). A call still awaiting its
    /// approval is dropped, and its question withdrawn from the client.
    pub(super) fn cancel(&mut self, target: &str, now: u64, out: &mut Vec<Out>) -> bool {
        let waiting = self
            .approvals
            .iter()
            .find(|(_, a)| a.id == target)
            .map(|(k, _)| k.clone());
        if let Some(eid) = waiting {
            if let Some(a) = self.approvals.remove(&eid) {
                self.roll_back(&a.key, now);
                out.push(withdrawn(&eid, a.by, "the call was cancelled"));
            }
            return false;
        }
        // A forwarded call may have run whatever the client says now: it
        // stays reserved until the server answers (its result counted and
        // withheld, an error given back) or the gateway ends (counted).
        if let Some(Pending::Call { cancelled, .. }) = self.pending.get_mut(target) {
            *cancelled = true;
        }
        true
    }

    pub(super) fn roll_back(&mut self, key: &str, now: u64) {
        if let Err(e) = self.gate.roll_back(key, now) {
            log::warn!("budgetgate mcp: rolling back {key}: {e}");
        }
    }

    /// Commits a call that ran; one that fails is kept in `unsettled`,
    /// made again before the next decision.
    pub(super) fn commit(&mut self, key: &str, tool: &str, now: u64) {
        if let Err(e) = self.gate.commit(key, tool, now) {
            log::warn!("budgetgate mcp: committing {key}: {e} (kept: committed again before the next decision, which waits for it)");
            self.unsettled.push((key.to_owned(), tool.to_owned()));
        }
    }

    /// Counts a reserved call whose approval was refused, logging why
    /// (`why`: [`CallGate::refused`]), and answers the client with `refusal`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refuse_reserved(
        &mut self,
        id: &str,
        key: &str,
        tool: &str,
        refusal: &Refusal,
        why: &str,
        generation: Generation,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        said_refused(tool, refusal, key);
        if let Err(e) = self.gate.refused(key, tool, refusal.reason, why, now) {
            log::warn!("budgetgate mcp: committing {key}: {e} (kept: committed again before the next decision, which waits for it)");
            self.unsettled.push((key.to_owned(), tool.to_owned()));
        }
        out.push(Out::Client(refused_line(id, refusal, generation)));
    }

    /// Reads a client's `tools/call` (one message, `jsonrpc` checked)
    /// strictly, then decides it; `true`: forward its text now. Refused
    /// without being forwarded (fail closed), each answered with the rule
    /// it breaks: a key given twice anywhere in it (`-32600`: the gate and
    /// the server could read different calls), an id that is `null` or
    /// not a string or an integer (`-32600`, with the id when it is a
    /// number, else `null`), a number out of
    /// range or a lone surrogate (`-32602` when in `params`), `params`
    /// that is not an object with a string `name` or non-object
    /// `arguments` (`-32602`). Without an id (a notification, which
    /// cannot be answered) it is dropped.
    pub(super) fn client_call(
        &mut self,
        text: &str,
        raw_params: Option<&RawValue>,
        now: u64,
        out: &mut Vec<Out>,
    ) -> bool {
        let refuse = |out: &mut Vec<Out>, id: &str, code: i64, message: String| {
            out.push(Out::Client(error_line(id, code, &message)));
            false
        };
        let top: crate::strict::StrictObject = match serde_json::from_str(text) {
            Ok(top) => top,
            Err(e) => {
                return refuse(
                    out,
                    "null",
                    INVALID_REQUEST,
                    format!("Invalid Request: {e}: a tools/call must not repeat a key (refused, not forwarded)"),
                )
            }
        };
        let Some(raw_id) = top.get("id") else {
            // A call that cannot be answered cannot be gated: dropped.
            log::warn!("budgetgate mcp: a tools/call without an id was dropped (not forwarded)");
            return false;
        };
        let id = match crate::strict::value_from_str(raw_id.get()) {
            Ok(v @ Value::String(_)) => v.to_string(),
            Ok(Value::Number(n))
                if n.as_i64().is_some_and(|i| i.unsigned_abs() <= MAX_EXACT_ID)
                    || n.as_u64().is_some_and(|u| u <= MAX_EXACT_ID) =>
            {
                n.to_string()
            }
            Ok(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                return refuse(
                    out,
                    raw_id.get(),
                    INVALID_REQUEST,
                    format!("Invalid Request: a tools/call id past 2^53 ({n}) is not told apart from its neighbours by a JavaScript peer (refused, not forwarded)"),
                )
            }
            Ok(v) => {
                // A number is an id JSON-RPC knows (MCP wants an integer):
                // answered with it as sent, so the client can match the
                // refusal to its request; other kinds are no id at all.
                let answer_id = if v.is_number() { raw_id.get() } else { "null" };
                return refuse(
                    out,
                    answer_id,
                    INVALID_REQUEST,
                    format!(
                        "Invalid Request: a tools/call id must be a string or an integer, not {} (refused, not forwarded)",
                        kind(&v)
                    ),
                )
            }
            Err(e) => {
                return refuse(
                    out,
                    "null",
                    INVALID_REQUEST,
                    format!("Invalid Request: a tools/call id must be a string or an integer ({}; refused, not forwarded)", unreadable(&e)),
                )
            }
        };
        // A request still awaiting its answer under this id (not a call:
        // a call's id again is the gate's `duplicate-call-id`) would take
        // the call's answer, or give it the request's error.
        if matches!(self.pending.get(&id), Some(p) if !matches!(p, Pending::Call { .. }))
            || self.approvals.values().any(|a| a.id == id)
        {
            return refuse(
                out,
                &id,
                INVALID_REQUEST,
                format!("Invalid Request: the id {id} is already used by a request awaiting its answer (refused, not forwarded)"),
            );
        }
        if self.in_flight() >= MAX_PENDING {
            return refuse(
                out,
                &id,
                GATEWAY_ERROR,
                format!("budgetgate: more than {MAX_PENDING} requests in flight"),
            );
        }
        let whole = match crate::strict::value_from_str(text) {
            Ok(v) => v,
            Err(e) if is_duplicate(&e) => {
                return refuse(
                    out,
                    &id,
                    INVALID_REQUEST,
                    format!("Invalid Request: {e}: a tools/call must not repeat a key (refused, not forwarded)"),
                )
            }
            Err(e) => {
                let in_params =
                    raw_params.is_some_and(|p| crate::strict::value_from_str(p.get()).is_err());
                let (code, what) = if in_params {
                    (INVALID_PARAMS, "Invalid params")
                } else {
                    (INVALID_REQUEST, "Invalid Request")
                };
                return refuse(out, &id, code, format!("{what}: {}", unreadable(&e)));
            }
        };
        let params = match whole.get("params") {
            Some(p @ Value::Object(_)) => p,
            None => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call needs `params`, an object with a string `name`"
                        .into(),
                )
            }
            Some(p) => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: tools/call `params` must be an object, not {}",
                        kind(p)
                    ),
                )
            }
        };
        match params.get("name") {
            Some(Value::String(_)) => {}
            None => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call needs a string `name`".into(),
                )
            }
            Some(n) => {
                return refuse(
                    out,
                    &id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: tools/call `name` must be a string, not {}",
                        kind(n)
                    ),
                )
            }
        }
        self.gate_call(&id, params, text, now, out)
    }

    /// Decides a `tools/call` whose `params` is an object with a string
    /// `name`; `true`: forward it now.
    pub(super) fn gate_call(
        &mut self,
        id: &str,
        params: &Value,
        text: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) -> bool {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            out.push(Out::Client(error_line(
                id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs a string `name`",
            )));
            return false;
        };
        let empty = json!({});
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(a @ Value::Object(_)) => a,
            Some(_) => {
                out.push(Out::Client(error_line(
                    id,
                    INVALID_PARAMS,
                    "Invalid params: tools/call `arguments` must be an object",
                )));
                return false;
            }
        };
        let generation = Generation::of_params(Some(params));
        if generation == Generation::Stateless {
            if let Some(state) = input_required::own_state(params) {
                // The retry of a call asked about: no new decision, the
                // first request's reservation holds it.
                self.stateless_retry(id, params, text, state, now, out);
                return false;
            }
        }
        let key = format!("mcp/{}/{id}", self.connection);
        let shown_id = format!("the request id {id}");
        let call = ToolCall {
            name,
            input: arguments,
            call_id: &key,
            shown_id: &shown_id,
            // The key holds the connection: a client numbers its requests
            // afresh on each connection.
            id_scope: "on this connection",
            reused: false,
        };
        // Calls that ran after their error are counted first; none is let
        // through while one is not (fail closed).
        for (key, tool) in std::mem::take(&mut self.late) {
            self.count_late(&key, &tool, now);
        }
        if let Some((key, _)) = self.late.first() {
            let e = format!("an earlier call, {key}, ran and its count could not be recorded yet");
            out.push(Out::Client(refused_line(id, &gate_error(&e), generation)));
            return false;
        }
        // So are the results loop detection has not been told yet.
        self.report_outcomes(now);
        if !self.outcomes.is_empty() {
            let e = "an earlier call's result could not be reported to loop detection yet";
            out.push(Out::Client(refused_line(id, &gate_error(e), generation)));
            return false;
        }
        let ran = std::mem::take(&mut self.unsettled);
        let (failed, verdict) = self.gate.commit_then_decide(&ran, &call, now);
        for f in failed {
            log::warn!(
                "budgetgate mcp: committing {}: {} (kept: committed again before the next decision)",
                f.key, f.error
            );
            self.unsettled.push((f.key, f.tool));
        }
        let verdict = match verdict {
            Ok(v) => v,
            Err(e) => {
                out.push(Out::Client(refused_line(id, &gate_error(&e), generation)));
                return false;
            }
        };
        match verdict {
            Verdict::Refuse(refusal) => {
                said_refused(name, &refusal, &key);
                out.push(Out::Client(refused_line(id, &refusal, generation)));
                false
            }
            Verdict::Run => {
                self.holding_from(now);
                self.pending.insert(
                    id.to_owned(),
                    Pending::Call {
                        key,
                        tool: name.to_owned(),
                        cancelled: false,
                        generation,
                        approved: None,
                        call: self.loop_key(name, arguments),
                    },
                );
                true
            }
            // The retry of a call approved here, which its server asked
            // for input: already approved, not asked again.
            Verdict::Ask(_)
                if generation == Generation::Stateless
                    && self.approved_follow_up(params, name, arguments, now) =>
            {
                self.holding_from(now);
                self.pending.insert(
                    id.to_owned(),
                    Pending::Call {
                        key,
                        tool: name.to_owned(),
                        cancelled: false,
                        generation,
                        approved: Some(request_state::arguments_digest(arguments)),
                        call: self.loop_key(name, arguments),
                    },
                );
                true
            }
            Verdict::Ask(_)
                if generation == Generation::Stateless && input_required::can_elicit(params) =>
            {
                self.ask_by_input_required(id, key, name, arguments, now, out);
                false
            }
            // A stateless request is never asked by `elicitation/create`
            // (servers no longer send requests of their own in 2026-07-28).
            Verdict::Ask(_)
                if self.cannot_ask.is_some()
                    || !((self.elicitation && generation == Generation::Handshake)
                        || self.terminal) =>
            {
                // The attempt counts, as a refused approval does.
                let why = self.cannot_ask.clone().unwrap_or_else(|| {
                    "this client cannot ask one: it did not declare the elicitation capability (and the gateway asks no one at a terminal: none is attached, or --terminal never)"
                        .into()
                });
                let refusal = Refusal::worded(
                    "approval-refused",
                    &format!(
                        "{name} needs a person's approval (needs_approval in the budget), and {why}"
                    ),
                    "Not executed. Do not repeat this call; tell the user it needs their approval.",
                    "",
                );
                self.refuse_reserved(id, &key, name, &refusal, &why, generation, now, out);
                false
            }
            Verdict::Ask(_) => {
                self.next_approval += 1;
                let eid = self.question_id(self.next_approval);
                let shown = shortened(&arguments.to_string(), 400);
                let message =
                    format!("budgetgate: the agent wants to call {name} with {shown}. Allow it?");
                let question = approval::Question::asked(now, self.approval_timeout_ms);
                let deadline_ms = question.deadline_ms();
                let by = if self.elicitation && generation == Generation::Handshake {
                    let request = json!({
                        "message": message,
                        "requestedSchema": {"type": "object", "properties": {}},
                    });
                    out.push(Out::Client(format!(
                        r#"{{"jsonrpc":"2.0","id":{eid},"method":"elicitation/create","params":{request}}}"#
                    )));
                    Asker::Client
                } else {
                    out.push(Out::Ask(Question {
                        eid: eid.clone(),
                        text: message,
                        deadline_ms,
                    }));
                    Asker::Terminal
                };
                self.holding_from(now);
                self.approvals.insert(
                    eid,
                    Approval {
                        id: id.to_owned(),
                        key,
                        tool: name.to_owned(),
                        line: text.to_owned(),
                        question,
                        by,
                        generation,
                    },
                );
                false
            }
        }
    }
}

/// A refused call of `tool`, said where the gateway runs too: an operator
/// sees a session being refused, not only the model. The key holds the
/// client's request id: shown as text.
fn said_refused(tool: &str, refusal: &Refusal, key: &str) {
    log::info!(
        "budgetgate mcp: refused {} ({}, {})",
        crate::term::terminal_safe(tool),
        refusal.reason,
        crate::term::terminal_safe(key)
    );
}

/// The refusal of a call the gate could not decide (`why`): fail closed.
pub(super) fn gate_error(why: &str) -> Refusal {
    log::warn!(
        "budgetgate mcp: the budget could not be checked ({}); the call is refused (fail closed)",
        crate::term::terminal_safe(why)
    );
    Refusal::worded(
        "gate-error",
        &format!("the budget could not be checked ({why})"),
        "Not executed (the gate fails closed). Tell the user the budget gate is not working.",
        "",
    )
}
