//! What the server sends: answers to calls (committed, bounded, withheld),
//! answers that never come, and the end of either side.

#[allow(unused_imports)]
use super::*;

/// Whether a result is an `InputRequiredResult` (`resultType`
/// `"input_required"`, read strictly: a member given twice is not one).
fn asks_input(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "resultType")]
        result_type: Option<String>,
    }
    serde_json::from_str::<Kind>(result.get())
        .is_ok_and(|k| k.result_type.as_deref() == Some("input_required"))
}

/// The `requestState` of a server's `InputRequiredResult`.
fn server_state(result: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct State {
        #[serde(rename = "requestState")]
        request_state: Option<String>,
    }
    serde_json::from_str::<State>(result.get())
        .ok()?
        .request_state
}

impl<G: CallGate> Proxy<G> {
    /// A line from the server: the calls it answers are committed before
    /// this returns.
    pub fn on_server(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let out = self.on_server_unsettled(line, now);
        self.settle(now);
        out
    }

    /// A line from the server, whose answers to calls are committed by the
    /// next decision's transaction, [`Self::settle`] or another entry point
    /// (not [`Self::on_client`] or this): the transport writes the answer
    /// to the client first, so the commit's transaction (with
    /// `--durability full`, its fsync) is not in the call's round trip, and
    /// while calls follow each other each costs one transaction. A crash
    /// between the two leaves the call reserved, as a crash while the
    /// server ran it does: the stdio transport settles within
    /// [`SETTLE_WAIT`] of the answer.
    pub fn on_server_unsettled(&mut self, line: &[u8], now: u64) -> Vec<Out> {
        let Ok(text) = std::str::from_utf8(line) else {
            log::warn!("budgetgate mcp: the server sent a line that is not UTF-8 (dropped)");
            return Vec::new();
        };
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return Vec::new();
        }
        if text.trim_start().starts_with('[') {
            let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
                log::warn!("budgetgate mcp: the server sent a line that is not JSON (dropped)");
                return Vec::new();
            };
            let mut changed = false;
            let parts: Vec<String> = items
                .iter()
                .filter_map(|item| match self.server_one(item.get(), now) {
                    Reply::Same => Some(item.get().to_owned()),
                    Reply::Instead(new) => {
                        changed = true;
                        Some(new)
                    }
                    Reply::Drop => {
                        changed = true;
                        None
                    }
                })
                .collect();
            if !changed {
                return vec![Out::Client(text.to_owned())];
            }
            if parts.is_empty() {
                return Vec::new();
            }
            return vec![Out::Client(format!("[{}]", parts.join(",")))];
        }
        match serde_json::from_str::<Message<'_>>(text) {
            Err(e) => {
                log::warn!("budgetgate mcp: the server sent a line that is not a JSON-RPC message ({e}; dropped)");
                Vec::new()
            }
            Ok(msg) => match self.server_message(text, &msg, now) {
                Reply::Same => vec![Out::Client(text.to_owned())],
                Reply::Instead(new) => vec![Out::Client(new)],
                Reply::Drop => Vec::new(),
            },
        }
    }

    /// Reads one message from the server.
    pub(super) fn server_one(&mut self, text: &str, now: u64) -> Reply {
        match serde_json::from_str::<Message<'_>>(text) {
            Ok(msg) => self.server_message(text, &msg, now),
            // As a line that is not a JSON-RPC message: dropped.
            Err(e) => {
                log::warn!("budgetgate mcp: the server sent a batch member that is not a JSON-RPC message ({e}; dropped)");
                Reply::Drop
            }
        }
    }

    pub(super) fn server_message(&mut self, text: &str, msg: &Message<'_>, now: u64) -> Reply {
        if msg.method.is_some() {
            return Reply::Same;
        }
        let Some(id) = msg.id else {
            return Reply::Same;
        };
        let id = normal_id(id);
        let id = id.as_str();
        let Some(pending) = self.pending.remove(id) else {
            return self.unawaited_answer(id, text, msg, now);
        };
        match pending {
            Pending::Other => Reply::Same,
            Pending::Call {
                key,
                tool,
                cancelled,
                generation,
                approved,
                call,
            } => {
                if says_not_run(text, msg) {
                    // A JSON-RPC error from the server for this request:
                    // the call did not run. The only answer that gives a
                    // call back (`SPEC E`).
                    self.roll_back(&key, now);
                    self.did_not_run(call);
                    self.close(id, &key, &tool, false);
                    return if cancelled { Reply::Drop } else { Reply::Same };
                }
                let result = msg.result.filter(|r| r.get().trim_start().starts_with('{'));
                if generation == Generation::Stateless
                    && msg.error.is_none()
                    && result.is_some_and(asks_input)
                {
                    // The server's own `InputRequiredResult`: the request
                    // ended without running the tool, and its retry is a
                    // request of its own, decided and counted then. Given
                    // back, and passed on untouched.
                    self.roll_back(&key, now);
                    self.did_not_run(call);
                    self.close(id, &key, &tool, false);
                    if let (Some(arguments), Some(state)) =
                        (approved, result.and_then(server_state))
                    {
                        self.approved_pending_input(&state, &tool, arguments, now);
                    }
                    return if cancelled { Reply::Drop } else { Reply::Same };
                }
                // Any other result counts, whatever it holds: the call ran.
                self.unsettled.push((key, tool.clone()));
                // What it returned, for loop detection (a result that
                // cannot be read is not reported: its call matches nothing).
                if let Some(call) = call {
                    if let Some(value) = result
                        .filter(|_| msg.error.is_none())
                        .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                    {
                        self.outcomes
                            .push((call, Some(gate::loops::mcp_outcome(&value))));
                    }
                }
                if cancelled {
                    // The client cancelled it: it ignores an answer (MCP's
                    // cancellation), so none is passed on, whatever size.
                    return Reply::Drop;
                }
                let mut refusal = Refusal::worded(word::TOOL_ERROR, "", "", "");
                let Some(result) = result.filter(|_| msg.error.is_none()) else {
                    // No result object, or an error beside one: not an
                    // answer the gate can read, yet not one that says the
                    // call did not run. Counted, withheld (fail closed).
                    refusal.text = format!(
                        "budgetgate withheld this answer (tool-error): the server's answer for {tool} is not a JSON-RPC result or error it can read, so it was not passed on. The call may have run, so it counts against the budget."
                    );
                    return Reply::Instead(refused_line(id, &refusal, generation));
                };
                match crate::strict::value_from_str(result.get()) {
                    Ok(value) if !over_limit(&value, self.max_result_bytes) => return Reply::Same,
                    Ok(_) => {
                        refusal.text = format!(
                            "budgetgate withheld this result (tool-error): {tool} ran, but its result is over the budget's bound of {} bytes of compact JSON (max_result_bytes), so it was not passed on. Ask for less at a time (a smaller range, a filter, a summary).",
                            self.max_result_bytes
                        );
                        refusal.limit = Some("max_result_bytes".into());
                        refusal.max = Some(self.max_result_bytes);
                    }
                    // Its size cannot be told (a key given twice, a number
                    // out of range): withheld, fail closed.
                    Err(e) => {
                        refusal.text = format!(
                            "budgetgate withheld this result (tool-error): {tool} ran, but its result could not be read ({e}), so its size could not be checked and it was not passed on."
                        );
                    }
                }
                Reply::Instead(refused_line(id, &refusal, generation))
            }
            Pending::List { first } => {
                let mut value: Value = match crate::strict::value_from_str(text) {
                    Ok(v) => v,
                    // Which tools it lists cannot be told: withheld.
                    Err(e) => {
                        return Reply::Instead(error_line(
                            id,
                            GATEWAY_ERROR,
                            &format!("budgetgate: the server's tools/list answer could not be read ({e}); withheld"),
                        ))
                    }
                };
                if let Some(result) = value.get("result") {
                    self.check_named_tools(result, first);
                }
                let Some(tools) = value
                    .get_mut("result")
                    .and_then(|r| r.get_mut("tools"))
                    .and_then(Value::as_array_mut)
                else {
                    return Reply::Same;
                };
                let before = tools.len();
                tools.retain(|t| {
                    !t.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| self.gate.denied(n))
                });
                if tools.len() == before {
                    Reply::Same
                } else {
                    Reply::Instead(value.to_string())
                }
            }
        }
    }

    /// Notes the tools a `tools/list` page (`result`) lists; at its last
    /// page (no `nextCursor`), warns once of every tool the budget names
    /// (an approval to ask, a cap) that the server did not list: a
    /// misspelt name applies to nothing, and nothing else would say so.
    fn check_named_tools(&mut self, result: &Value, first: bool) {
        // A listing is whole only when read from its first page.
        match (&self.names, first) {
            (NameCheck::Done, _) | (NameCheck::Waiting, false) => return,
            (_, true) => self.names = NameCheck::Reading(Default::default()),
            (NameCheck::Reading(_), false) => {}
        }
        let NameCheck::Reading(listed) = &mut self.names else {
            return;
        };
        // Only the budget's own names are kept (a server's pages, however
        // many, hold no more memory than the budget file does).
        let named = self.gate.named_tools();
        let names = result.get("tools").and_then(Value::as_array);
        for tool in names.into_iter().flatten() {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                if named.iter().any(|(n, _)| n == name) {
                    listed.insert(name.to_owned());
                }
            }
        }
        if result.get("nextCursor").is_some_and(|c| !c.is_null()) {
            return;
        }
        let missing: Vec<String> = named
            .into_iter()
            .filter(|(name, _)| !listed.contains(name))
            .map(|(name, rule)| {
                format!(
                    "{} ({rule})",
                    crate::term::terminal_safe(&format!("{name:?}"))
                )
            })
            .collect();
        self.names = NameCheck::Done;
        if !missing.is_empty() {
            log::warn!(
                "budgetgate mcp: warning: the budget names tools the server does not list: {}; a rule applies only to a tool of exactly that name (the server's tools/list)",
                missing.join(", ")
            );
        }
    }

    /// An answer from the server to an id no request awaits (a second
    /// answer, or one to a call it had answered with an error): never
    /// passed on (the client awaits nothing under that id, and its size
    /// was never checked). A result for a call that was given back on the
    /// server's error means the call ran after all: counted now.
    pub(super) fn unawaited_answer(
        &mut self,
        id: &str,
        text: &str,
        msg: &Message<'_>,
        now: u64,
    ) -> Reply {
        if !says_not_run(text, msg) {
            if let Some(at) = self.closed.iter().position(|c| c.id == id && !c.counted) {
                if let Some(c) = self.closed.get_mut(at) {
                    c.counted = true;
                    let (key, tool) = (c.key.clone(), c.tool.clone());
                    self.count_late(&key, &tool, now);
                }
            }
        }
        log::warn!(
            "budgetgate mcp: the server answered {}, which no request awaits (dropped)",
            crate::term::terminal_safe(id)
        );
        Reply::Drop
    }

    /// The server's answer to request `id` (compact JSON; `None` when it
    /// could not be read) was over [`MAX_LINE`] and skipped unread. A call
    /// it answers ran: counted, and answered with a withheld result (the
    /// bound of `max_result_bytes` applies to it as to any result). An
    /// answer whose id cannot be read leaves its call reserved, counted at
    /// the latest when the gateway ends.
    pub fn on_server_too_long(&mut self, id: Option<&str>, now: u64) -> Vec<Out> {
        let why = format!("answered with a message longer than {} MiB", MAX_LINE >> 20);
        let Some(id) = id.filter(|id| self.pending.contains_key(*id)) else {
            log::warn!("budgetgate mcp: the server sent a message longer than {} MiB whose id is not one awaited (dropped)", MAX_LINE >> 20);
            return Vec::new();
        };
        let out = self.no_answer(id, Ran::Maybe, &why, now);
        self.settle(now);
        out
    }

    /// Request `id` (compact JSON) will get no answer from the server
    /// (`why`: what happened, as "the upstream MCP server WHY" reads):
    /// answered here. A call is counted unless it is known not to have run
    /// (`ran`: [`Ran::No`] only when the request never reached the server);
    /// a counted call's answer says it may have run. Nothing when `id` is
    /// not awaited.
    pub fn on_no_answer(&mut self, id: &str, ran: Ran, why: &str, now: u64) -> Vec<Out> {
        let out = self.no_answer(id, ran, why, now);
        self.settle(now);
        out
    }

    pub(super) fn no_answer(&mut self, id: &str, ran: Ran, why: &str, now: u64) -> Vec<Out> {
        let Some(pending) = self.pending.remove(id) else {
            return Vec::new();
        };
        let Pending::Call {
            key,
            tool,
            cancelled,
            generation,
            call,
            ..
        } = pending
        else {
            let message = format!("budgetgate: the MCP server {why}");
            return vec![Out::Client(error_line(id, GATEWAY_ERROR, &message))];
        };
        match ran {
            Ran::No => {
                self.roll_back(&key, now);
                self.did_not_run(call);
            }
            Ran::Maybe => {
                // Its answer may still come (a stream resumed, a slow
                // server): its id stays taken.
                self.close(id, &key, &tool, true);
                self.unsettled.push((key, tool.clone()));
            }
        }
        if cancelled {
            return Vec::new();
        }
        match ran {
            Ran::No => {
                let message = format!(
                    "budgetgate: the MCP server {why}; {tool} did not run and is not counted"
                );
                vec![Out::Client(error_line(id, GATEWAY_ERROR, &message))]
            }
            Ran::Maybe => {
                let mut refusal = Refusal::worded(word::TOOL_ERROR, "", "", "");
                refusal.text = format!(
                    "budgetgate (tool-error): the MCP server {why}, so {tool}'s result is not known. It may have run, so it counts against the budget; check its effect before calling it again."
                );
                vec![Out::Client(refused_line(id, &refusal, generation))]
            }
        }
    }

    /// The server is gone (`why`): every request awaiting it or an
    /// approver is answered. Calls it was sent may have run before it went:
    /// counted ([`Self::on_no_answer`]); calls awaiting approval never
    /// reached it: given back.
    pub fn on_server_exit(&mut self, why: &str, now: u64) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        let why = format!("{why} before answering");
        let message = format!("budgetgate: the MCP server {why}");
        let mut ids: Vec<String> = self.pending.keys().cloned().collect();
        ids.sort();
        for id in ids {
            out.extend(self.no_answer(&id, Ran::Maybe, &why, now));
        }
        self.settle(now);
        let approvals: Vec<Approval> = self.approvals.drain().map(|(_, a)| a).collect();
        for a in approvals {
            self.roll_back(&a.key, now);
            out.push(Out::Client(error_line(&a.id, GATEWAY_ERROR, &message)));
        }
        // Approvals awaiting a retry would be forwarded to a server that is
        // gone: given back (their requests were answered already).
        self.give_back_retries(now);
        out
    }

    /// Whether a request the proxy forwarded awaits the server's answer.
    pub fn awaits_server(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The client is gone. Calls the server was running may have run
    /// (the server is stopped next, not asked): they count, cancelled or
    /// not. Calls still awaiting approval never reached it: given back.
    pub fn on_client_closed(&mut self, now: u64) {
        self.settle(now);
        let running: Vec<(String, String)> = self
            .pending
            .drain()
            .filter_map(|(_, p)| match p {
                Pending::Call { key, tool, .. } => Some((key, tool)),
                _ => None,
            })
            .collect();
        for (key, tool) in running {
            self.commit(&key, &tool, now);
        }
        let asked: Vec<String> = self.approvals.drain().map(|(_, a)| a.key).collect();
        for key in asked {
            self.roll_back(&key, now);
        }
        self.give_back_retries(now);
    }
}
