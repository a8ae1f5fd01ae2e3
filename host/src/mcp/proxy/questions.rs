//! Approval: the answers to the gateway's questions, from the client or
//! the person at the terminal, and their deadlines.

#[allow(unused_imports)]
use super::*;

impl<G: CallGate> Proxy<G> {
    pub(super) fn approval_answer(
        &mut self,
        approval: Approval,
        result: Option<&RawValue>,
        error: bool,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let action = result
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
            .and_then(|r| r.get("action").and_then(Value::as_str).map(str::to_owned));
        match action.as_deref() {
            Some("accept" | "decline" | "cancel") => {
                self.approval_action(approval, action.as_deref(), now, out);
            }
            Some(other) => {
                let answer = format!(
                    "the client answered {}, not accept",
                    Value::from(shortened(other, 40))
                );
                self.refuse_approval(approval, &answer, now, out);
            }
            None if error => self.approval_action(approval, None, now, out),
            None => self.refuse_approval(
                approval,
                "the client's answer had no `action` of accept, decline or cancel",
                now,
                out,
            ),
        }
    }

    /// The person at the terminal answered the question `eid`: `approved`
    /// forwards its call, otherwise it is refused (`approval-refused`).
    /// Nothing when that question is not asked there (any more).
    pub fn on_person(&mut self, eid: &str, approved: bool, now: u64) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        if self.asks(eid) == Some(Asker::Terminal) {
            if let Some(approval) = self.approvals.remove(eid) {
                let action = if approved { "accept" } else { "decline" };
                self.approval_action(approval, Some(action), now, &mut out);
            }
        }
        out
    }

    pub(super) fn approval_action(
        &mut self,
        approval: Approval,
        action: Option<&str>,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        let answer = match action {
            Some("accept") => Answer::Approve,
            _ => Answer::Refuse,
        };
        let why = match approval.question.answer(answer, now) {
            Some(Decision::Approved) => {
                let call = self.loop_key_of_request(&approval.line);
                out.push(Out::Server(approval.line));
                self.pending.insert(
                    approval.id,
                    Pending::Call {
                        key: approval.key,
                        tool: approval.tool,
                        cancelled: false,
                        generation: approval.generation,
                        approved: None,
                        call,
                    },
                );
                return;
            }
            // An accept read at or after the deadline, before the tick that
            // would have withdrawn the question, never runs the call.
            Some(Decision::TimedOut) => self.no_answer_in_time(),
            _ => match action {
                Some("decline") if approval.by == Asker::Terminal => {
                    "the person at the gateway's terminal declined it"
                }
                Some("decline") => "the person declined it",
                Some("cancel") => "the person dismissed the request",
                _ => "the client could not ask",
            }
            .to_owned(),
        };
        self.refuse_approval(approval, &why, now, out);
    }

    pub(super) fn refuse_approval(
        &mut self,
        approval: Approval,
        answer: &str,
        now: u64,
        out: &mut Vec<Out>,
    ) {
        // It never runs: forgotten from the loop window.
        let call = self.loop_key_of_request(&approval.line);
        self.did_not_run(call);
        let refusal = Refusal::approval_refused(&approval.tool, answer);
        self.refuse_reserved(
            &approval.id,
            &approval.key,
            &approval.tool,
            &refusal,
            answer,
            approval.generation,
            now,
            out,
        );
    }

    /// Refuses the calls whose approval is past its deadline, and renews
    /// the reservations held ([`Self::renew_held`]).
    pub fn on_tick(&mut self, now: u64) -> Vec<Out> {
        self.renew_held(now);
        self.expire_own_retries(now);
        let mut out = Vec::new();
        let late: Vec<String> = self
            .approvals
            .iter()
            .filter(|(_, a)| a.question.expired(now).is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for eid in late {
            out.extend(self.expire(&eid, now));
        }
        out
    }

    /// The question `eid` had no answer in time: withdrawn from the client
    /// (`notifications/cancelled`) and its call refused (`approval-refused`;
    /// the attempt counts). Nothing when it is no longer asked.
    pub fn expire(&mut self, eid: &str, now: u64) -> Vec<Out> {
        self.settle(now);
        let answer = self.no_answer_in_time();
        self.refuse_question(eid, "no answer in time", &answer, now)
    }

    /// Why a question past its deadline refuses its call.
    pub(super) fn no_answer_in_time(&self) -> String {
        format!(
            "no answer came within {} s",
            self.approval_timeout_ms.div_ceil(1000)
        )
    }

    /// The question `eid` cannot be answered any more: withdrawn
    /// (`withdrawn` says why to whoever was asked) and its call refused
    /// (`approval-refused`, "… and `answer`"; the attempt counts). Nothing
    /// when it is no longer asked.
    pub fn refuse_question(
        &mut self,
        eid: &str,
        withdrawn_why: &str,
        answer: &str,
        now: u64,
    ) -> Vec<Out> {
        self.settle(now);
        let mut out = Vec::new();
        if let Some(approval) = self.approvals.remove(eid) {
            out.push(withdrawn(eid, approval.by, withdrawn_why));
            self.refuse_approval(approval, answer, now, &mut out);
        }
        out
    }
}
