//! Approval over HTTP (`needs_approval`): a call's POST answered with a
//! stream that carries the gateway's question, the client's answers in
//! POSTs of their own handed to the task that asked, and the call's
//! outcome once the question is settled.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderMap;
use serde_json::value::RawValue;

use super::body::{sse_event, sse_reply};
use super::sessions::{waiter_key, Answer};
use super::upstream::deliver;
use super::{now, Gate, Gateway, Reply, Session, EVENT_QUEUE};
use crate::mcp::{normal_id, Asker, Message, Out, Proxy, Question};

/// Hands each answer to one of the gateway's questions in `body` (one
/// message or a batch) to the task that asked it: the client's JSON-RPC
/// response to the question, or its `notifications/cancelled` of the call
/// asked about. The rest of the body (the whole of it when nothing was
/// an answer), `None` when nothing is left.
pub(super) fn route_answers<'b>(
    gw: &Gateway,
    p: &Proxy<Gate>,
    body: &'b [u8],
) -> Option<Cow<'b, [u8]>> {
    let whole = Some(Cow::Borrowed(body));
    if p.next_deadline().is_none() {
        // No question awaits an answer: nothing to read here.
        return whole;
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return whole;
    };
    let batch = text.trim_start().starts_with('[');
    let items: Vec<&str> = if batch {
        match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) => items.iter().map(|i| i.get()).collect(),
            Err(_) => return whole,
        }
    } else {
        vec![text]
    };
    let Ok(mut waiters) = gw.waiters.lock() else {
        return whole;
    };
    let mut rest = Vec::new();
    for item in &items {
        let waiter = question_answered(p, item)
            .and_then(|eid| waiters.remove(&waiter_key(p.connection(), &eid)));
        match waiter {
            // The asker may just have given up (its deadline): the answer
            // is then not read, as after the deadline.
            Some(w) => drop(w.send(Answer::Client((*item).to_owned()))),
            None => rest.push(*item),
        }
    }
    if rest.len() == items.len() {
        return whole;
    }
    match rest.as_slice() {
        [] => None,
        [one] if !batch => Some(Cow::Owned(one.as_bytes().to_vec())),
        _ => Some(Cow::Owned(format!("[{}]", rest.join(",")).into_bytes())),
    }
}

/// The question a client message answers: its id when it is a JSON-RPC
/// 2.0 response (a result or an error) to one of the gateway's questions to
/// the client (not one asked at the terminal, which only the person there
/// answers), or the question about the call a `notifications/cancelled`
/// cancels. A message that is not a valid answer stays in the body, where
/// the proxy answers it as on stdio (`-32600`) and the question goes on.
fn question_answered(p: &Proxy<Gate>, text: &str) -> Option<String> {
    let msg: Message<'_> = serde_json::from_str(text).ok()?;
    if msg.jsonrpc.as_deref() != Some("2.0") {
        return None;
    }
    match msg.method.as_deref() {
        None if msg.result.is_some() || msg.error.is_some() => {
            Some(normal_id(msg.id?)).filter(|eid| p.asks(eid) == Some(Asker::Client))
        }
        None => None,
        Some("notifications/cancelled") if msg.id.is_none() => {
            let params: serde_json::Value = serde_json::from_str(msg.params?.get()).ok()?;
            let target = params.get("requestId")?.to_string();
            p.question_about(&target).map(str::to_owned)
        }
        Some(_) => None,
    }
}

/// A POST with calls that wait for a person (`needs_approval`): answered
/// with a stream that carries at once the questions (`elicitation/create`)
/// and whatever else the proxy answered here, then the answers to what was
/// forwarded, and each asked call's outcome once the client answers its
/// question in another POST (the call forwarded and its result relayed, or
/// its refusal), or its deadline passes (refused). The stream ends when
/// all of them are done.
pub(super) fn ask(
    gw: &Arc<Gateway>,
    proxy: &Session,
    connection: &str,
    headers: HeaderMap,
    local: Vec<String>,
    forward: Option<String>,
    (asked, questions): (Vec<(String, u64)>, Vec<Question>),
) -> Reply {
    let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    let mut answers = Vec::new();
    let mut waiters = gw.waiters.lock().ok();
    for (eid, deadline) in asked {
        // Kept before the question is sent, so that no answer can come
        // before its waiter. (Without the table, poisoned, the waiter is
        // dropped: the question expires at once, refused.)
        let (waiter, answer) = tokio::sync::oneshot::channel();
        let key = waiter_key(connection, &eid);
        if let Some(w) = waiters.as_mut() {
            w.insert(key.clone(), waiter);
        }
        answers.push((key, eid, deadline, answer));
    }
    drop(waiters);
    for q in questions {
        let key = waiter_key(connection, &q.eid);
        if !gw.ask_person(key.clone(), &q) {
            // Not asked: its waiter goes, and the question expires at once.
            if let Ok(mut w) = gw.waiters.lock() {
                w.remove(&key);
            }
        }
    }
    let (gw, proxy) = (Arc::clone(gw), Arc::clone(proxy));
    tokio::spawn(async move {
        let mut open = true;
        for t in &local {
            open = open && tx.send(sse_event(t)).await.is_ok();
        }
        for (key, eid, deadline, answer) in answers {
            let wait = Waiting {
                gw: Arc::clone(&gw),
                proxy: Arc::clone(&proxy),
                headers: headers.clone(),
                key,
                eid,
                deadline,
            };
            tokio::spawn(wait.outcome(answer, tx.clone()));
        }
        if let Some(forward) = forward {
            deliver(&gw, &headers, &proxy, forward, tx).await;
        }
    });
    sse_reply(200, rx)
}

/// A question awaiting its answer, and what its call needs once answered.
struct Waiting {
    gw: Arc<Gateway>,
    proxy: Session,
    /// The asking POST's headers (its session, protocol version and
    /// authorization), for forwarding the call once approved.
    headers: HeaderMap,
    key: String,
    eid: String,
    deadline: u64,
}

impl Waiting {
    /// Reads what came for the question (`None`: nothing, by the
    /// deadline): the proxy's outs, and whether the question is settled; a
    /// question still asked gets a new waiter in `answer`. `None` when the
    /// session's lock is poisoned.
    fn settle(
        &self,
        came: Option<Answer>,
        answer: &mut tokio::sync::oneshot::Receiver<Answer>,
    ) -> Option<(Vec<Out>, bool)> {
        let mut p = self.proxy.lock().ok()?;
        let came = came.or_else(|| {
            // Past the deadline no answer is handed over any more; one
            // handed over just before is still read.
            if let Ok(mut waiters) = self.gw.waiters.lock() {
                waiters.remove(&self.key);
            }
            answer.try_recv().ok()
        });
        let outs = match came {
            Some(Answer::Person(yes)) => p.on_person(&self.eid, yes, now()),
            Some(Answer::Client(text)) if p.asks(&self.eid).is_some() => {
                p.on_client(text.as_bytes(), now())
            }
            Some(Answer::Client(_)) => Vec::new(),
            None => p.expire(&self.eid, now()),
        };
        if p.asks(&self.eid).is_none() {
            return Some((outs, true));
        }
        // Still asked (what came did not answer it): wait on with a new
        // waiter until the deadline, which then refuses it.
        let (waiter, again) = tokio::sync::oneshot::channel();
        if let Ok(mut w) = self.gw.waiters.lock() {
            w.insert(self.key.clone(), waiter);
        }
        *answer = again;
        Some((outs, false))
    }

    /// Waits for the answer until the deadline, then writes the call's
    /// outcome into `tx`: the server's answer once approved, the refusal
    /// otherwise (`approval-refused`, the attempt counted), nothing once
    /// the call was cancelled (its reservation given back).
    async fn outcome(
        self,
        mut answer: tokio::sync::oneshot::Receiver<Answer>,
        tx: tokio::sync::mpsc::Sender<Bytes>,
    ) {
        let outs = loop {
            let wait = Duration::from_millis(self.deadline.saturating_sub(now()));
            let came = tokio::time::timeout(wait, &mut answer)
                .await
                .ok()
                .and_then(Result::ok);
            let Some((outs, done)) = self.settle(came, &mut answer) else {
                return;
            };
            if done {
                break outs;
            }
            for out in outs {
                if let Out::Client(t) = out {
                    let _ = tx.send(sse_event(&t)).await;
                }
            }
        };
        let mut open = true;
        for out in outs {
            match out {
                Out::Client(t) => open = open && tx.send(sse_event(&t)).await.is_ok(),
                Out::Server(line) => {
                    deliver(&self.gw, &self.headers, &self.proxy, line, tx.clone()).await;
                }
                Out::Withdraw { why, .. } => self.gw.withdraw_person(self.key.clone(), &why),
                Out::Ask(_) => {}
            }
        }
    }
}
