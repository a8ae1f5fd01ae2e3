//! The MCP gateway's message handling (`host/src/mcp.rs`: [`Proxy`] and
//! [`Lines`], `SPEC C`, `SPEC E`) on arbitrary bytes.
//!
//! Input: `SCRIPT STREAM`. `SCRIPT` (one byte) picks the gate's verdicts in
//! turn: run, refuse, ask, or fail. `STREAM` is cut into lines by the
//! gateway's own reader (`Lines`, with a small `MAX_LINE` of 256 bytes,
//! fed in chunks of 1 to 16 bytes); a line starting `\x01` is a server
//! line whose answers are committed at once (`on_server`, as over HTTP),
//! `\x03` one whose answers are left unsettled (`on_server_unsettled`, as
//! over stdio: committed by the next decision's transaction or an explicit
//! settle), `\x04` settles (the stdio loop's timer), `\x02` moves the
//! clock past every approval deadline (and renews what is held), `\x05`
//! takes the ledger down or brings it back (commits fail while it is
//! down), `\x06ID` / `\x07ID` say request ID will get no answer (it may
//! have reached the server / it never did: a timeout, a broken stream, a
//! refused connection), anything else is a client line. A line over the
//! limit is also read as an over-long server answer (its id, when one can
//! be read). At the end the ledger comes back and the client goes away.
//!
//! The seed corpus (`fuzz/seed-corpus.py`) also holds MCP 2026-07-28
//! (stateless) lines: `server/discover`, calls whose `_meta` carries the
//! protocol version and client capabilities (asked about by an
//! `InputRequiredResult` when the gate says ask), a retry with
//! `inputResponses` and a forged `requestState`, and a server's own
//! `InputRequiredResult` with its retry; the checks below hold for them.
//!
//! The gate is a model written here that, like the ledger's, refuses a call
//! id it has seen (`duplicate-call-id`) and keeps each reservation.
//!
//! Checks:
//! * no panic; the reader hands on exactly the stream's lines, however
//!   the stream is cut into chunks (joined with `\n` they give the stream
//!   back, none over its limit, an over-long one reported as such);
//! * a client line is either forwarded byte-identical (a batch: its
//!   members, each byte-identical), answered, or gated; never forwarded
//!   partly or changed: whatever reaches the server is JSON and is the line
//!   (or members of it, or an earlier line held for an approval);
//! * a line that is not UTF-8 is answered `-32700` with id `null`; a line
//!   that is not JSON, or not a JSON-RPC 2.0 message, is answered `-32700`
//!   or `-32600` and not forwarded, with its `id` kept when it is readable
//!   (a strict JSON object with a string or number `id`);
//! * a `tools/call` the gate refuses, fails on or asks about is never
//!   forwarded with it; one the gate lets run is forwarded byte-identical;
//! * every message to the client is a JSON-RPC 2.0 object; a refusal is a
//!   `CallToolResult` with `isError: true` and a reason in
//!   `_meta.budgetgate.reason`;
//! * every reservation ends at most once (committed or given back) and,
//!   once the client is gone and the proxy has nothing in flight, every
//!   reservation has ended;
//! * a call forwarded to the server is given back only on a server line
//!   (its JSON-RPC error) or when it never reached the server (`\x07`):
//!   never on a client's cancel, a tick, an over-long answer or a lost one;
//! * a commit that fails is kept, and no call is let through while one is
//!   kept; only live reservations are renewed.
#![no_main]

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use budgetgate::gate::{Refusal, ToolCall, Verdict};
use budgetgate::mcp::{CallGate, Line, Lines, Out, Proxy, Ran, INVALID_REQUEST, PARSE_ERROR};
use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use serde_json::Value;

const MAX: usize = 256;

#[derive(Default)]
struct ModelGate {
    script: u8,
    decided: usize,
    /// Every call id decided (the real ledger remembers them).
    seen: Vec<String>,
    /// Reservation key → ended.
    reserved: HashMap<String, bool>,
    /// The verdict of the last decision: 0 run, 1 refuse, 2 ask, 3 error.
    last: Option<u8>,
    /// Commits fail (the ledger is down).
    down: bool,
    /// Keys of calls forwarded to the server (the harness fills it).
    forwarded: Rc<RefCell<HashSet<String>>>,
    /// A forwarded call may be given back now (a server line, or a request
    /// that never reached the server).
    may_give_back: bool,
    /// Calls counted after their error ([`CallGate::count_unreserved`]).
    late: HashSet<String>,
}

impl ModelGate {
    fn end(&mut self, key: &str, how: &str) {
        match self.reserved.get_mut(key) {
            Some(ended @ false) => *ended = true,
            Some(true) => panic!("reservation {key} ended twice ({how})"),
            None => panic!("{how} of {key}, never reserved"),
        }
    }
}

impl CallGate for ModelGate {
    fn decide(&mut self, call: &ToolCall<'_>, _now: u64) -> Result<Verdict, String> {
        assert!(
            call.input.is_object(),
            "arguments that are not an object reached the gate"
        );
        let pick = (self.script >> (2 * (self.decided % 4))) & 3;
        self.decided += 1;
        if self.seen.iter().any(|s| s == call.call_id) {
            self.last = Some(1);
            return Ok(Verdict::Refuse(Refusal::worded(
                "duplicate-call-id",
                "seen before",
                "Not executed.",
                "",
            )));
        }
        self.seen.push(call.call_id.to_owned());
        self.last = Some(pick);
        match pick {
            0 | 2 => {
                self.reserved.insert(call.call_id.to_owned(), false);
                Ok(if pick == 0 {
                    Verdict::Run
                } else {
                    Verdict::Ask("needs approval".into())
                })
            }
            1 => Ok(Verdict::Refuse(Refusal::worded(
                "tool-budget",
                "no attempts left",
                "Not executed.",
                "",
            ))),
            _ => Err("the ledger is down".into()),
        }
    }
    fn commit(&mut self, key: &str, _tool: &str, _now: u64) -> Result<(), String> {
        if self.down {
            return Err("the ledger is down".into());
        }
        self.end(key, "commit");
        Ok(())
    }
    fn roll_back(&mut self, key: &str, _now: u64) -> Result<(), String> {
        assert!(
            self.may_give_back || !self.forwarded.borrow().contains(key),
            "{key} reached the server and was given back without its answer saying it did not run"
        );
        self.end(key, "roll back");
        Ok(())
    }
    fn count_unreserved(&mut self, key: &str, _tool: &str, _now: u64) -> Result<(), String> {
        // Only a call given back before (on the server's error) is counted
        // again this way, once its result comes after all.
        assert_eq!(
            self.reserved.get(key),
            Some(&true),
            "{key} counted without a reservation, yet it was never given back"
        );
        assert!(
            self.late.insert(key.to_owned()),
            "{key} counted twice after its error"
        );
        Ok(())
    }
    fn renew(&mut self, keys: &[String], _now: u64) -> Result<(), String> {
        for key in keys {
            assert_eq!(
                self.reserved.get(key),
                Some(&false),
                "renewed {key}, which is not a live reservation"
            );
        }
        Ok(())
    }
    fn renew_every_ms(&self) -> Option<u64> {
        Some(5_000)
    }
    fn denied(&self, tool: &str) -> bool {
        tool == "denied"
    }
}

fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

fn check_client(text: &str) -> Value {
    let v: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("to the client, not JSON ({e}): {text}"));
    assert_eq!(v["jsonrpc"], "2.0", "to the client: {text}");
    if let Some(result) = v.get("result") {
        if result.get("isError") == Some(&Value::Bool(true)) {
            if let Some(meta) = result.get("_meta") {
                let reason = meta["budgetgate"]["reason"].as_str().unwrap_or_default();
                assert!(!reason.is_empty(), "a refusal without a reason: {text}");
                assert!(result["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| !t.is_empty()));
            }
        }
    }
    if let Some(error) = v.get("error") {
        assert!(error["code"].is_i64(), "error without a code: {text}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&script, stream)) = data.split_first() else {
        return;
    };
    // The gateway's own line reader, with a small limit, fed the stream as
    // its pipe might deliver it: in chunks of 1 to 16 bytes (from the
    // script byte), and whole; both give the same lines.
    let read = |size: usize| {
        let mut lines = Lines::new(MAX);
        for chunk in stream.chunks(size) {
            lines.feed(chunk);
        }
        lines.finish();
        std::iter::from_fn(move || lines.take_line()).collect::<Vec<Line>>()
    };
    let events = read(1 + usize::from(script >> 4));
    assert_eq!(
        events,
        read(stream.len().max(1)),
        "the chunks changed the lines"
    );
    let expected: Vec<&[u8]> = {
        let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
        if stream.last() == Some(&b'\n') || stream.is_empty() {
            lines.pop();
        }
        lines
    };
    assert_eq!(events.len(), expected.len(), "one line each");
    for (event, line) in events.iter().zip(&expected) {
        match event {
            Line::Text(got) => {
                assert!(line.len() <= MAX, "a line over the limit was handed on");
                assert_eq!(got.as_slice(), *line, "a line changed");
            }
            Line::TooLong(_) => assert!(line.len() > MAX, "a short line reported too long"),
        }
    }

    let forwarded = Rc::new(RefCell::new(HashSet::new()));
    let gate = ModelGate {
        script,
        forwarded: Rc::clone(&forwarded),
        ..ModelGate::default()
    };
    let mut proxy = Proxy::new(gate, "c1".into(), 64, 1_000);
    let mut now = 1_000u64;
    let mut held: Vec<String> = Vec::new();
    let mut down = false;
    // The call keys in what reached the server.
    let note_forwarded = |outs: &[Out]| {
        for out in outs {
            if let Out::Server(text) = out {
                let items: Vec<Value> = match serde_json::from_str::<Value>(text) {
                    Ok(Value::Array(items)) => items,
                    Ok(v) => vec![v],
                    Err(_) => Vec::new(),
                };
                for v in items {
                    if v["method"] == "tools/call" {
                        if let Some(id) = v.get("id") {
                            forwarded.borrow_mut().insert(format!("mcp/c1/{id}"));
                        }
                    }
                }
            }
        }
    };
    for event in &events {
        now += 1;
        let line = match event {
            Line::Text(line) => line,
            Line::TooLong(id) => {
                for out in proxy.on_client_too_long() {
                    let Out::Client(text) = out else {
                        panic!("a too-long line reached the server")
                    };
                    assert_eq!(check_client(&text)["error"]["code"], INVALID_REQUEST);
                }
                // Read as an over-long answer from the server: its call
                // counts (never given back) and is answered.
                let awaited = id.as_deref().is_some_and(|id| proxy.awaits(id));
                let outs = proxy.on_server_too_long(id.as_deref(), now);
                if let Some(id) = id.as_deref().filter(|_| awaited) {
                    assert!(!proxy.awaits(id), "an over-long answer left {id} awaited");
                }
                for out in outs {
                    let Out::Client(text) = out else {
                        panic!("an over-long answer wrote to the server")
                    };
                    check_client(&text);
                }
                continue;
            }
        };
        if line.first() == Some(&0x04) {
            proxy.settle(now);
            if !down {
                assert_eq!(proxy.unsettled(), 0, "settled, yet unsettled");
            }
            continue;
        }
        if line.first() == Some(&0x05) {
            down = !down;
            proxy.gate_mut().down = down;
            continue;
        }
        if let Some((&kind @ (0x06 | 0x07), id)) = line.split_first() {
            let Ok(id) = std::str::from_utf8(id) else {
                continue;
            };
            let ran = if kind == 0x06 { Ran::Maybe } else { Ran::No };
            proxy.gate_mut().may_give_back = ran == Ran::No;
            let outs = proxy.on_no_answer(id, ran, "did not answer", now);
            proxy.gate_mut().may_give_back = false;
            assert!(!proxy.awaits(id), "{id} still awaited after its answer was lost");
            for out in outs {
                let Out::Client(text) = out else {
                    panic!("a lost answer wrote to the server")
                };
                check_client(&text);
            }
            continue;
        }
        let server_line = match line.split_first() {
            Some((0x01, rest)) => Some((rest, true)),
            Some((0x03, rest)) => Some((rest, false)),
            _ => None,
        };
        if let Some((rest, settled)) = server_line {
            proxy.gate_mut().may_give_back = true;
            let outs = if settled {
                proxy.on_server(rest, now)
            } else {
                proxy.on_server_unsettled(rest, now)
            };
            proxy.gate_mut().may_give_back = false;
            if settled && !down {
                assert_eq!(proxy.unsettled(), 0, "on_server left calls unsettled");
            }
            for out in outs {
                match out {
                    Out::Client(text) => assert!(is_json(&text), "to the client, not JSON: {text}"),
                    Out::Server(text) => {
                        panic!("a server line was sent back to the server: {text}")
                    }
                    other => panic!("the terminal, which this proxy has not, was used: {other:?}"),
                }
            }
            continue;
        }
        if line.first() == Some(&0x02) {
            now += 10_000;
            for out in proxy.on_tick(now) {
                let Out::Client(text) = out else {
                    panic!("a tick wrote to the server")
                };
                check_client(&text);
            }
            continue;
        }
        let decided_before = proxy.gate().decided;
        let unsettled_before = proxy.unsettled();
        let outs = proxy.on_client(line, now);
        // A decision commits every answered call first (in its own
        // transaction where the gate can); nothing else a client sends
        // commits or adds any.
        let gated = proxy.gate().decided > decided_before;
        note_forwarded(&outs);
        if down {
            // Nothing is decided while a commit is kept.
            assert!(
                !gated || unsettled_before == 0,
                "decided with {unsettled_before} commit(s) kept"
            );
            assert!(
                proxy.unsettled() >= unsettled_before,
                "a failed commit was dropped"
            );
        } else {
            assert!(
                proxy.unsettled() == if gated { 0 } else { unsettled_before },
                "unsettled {unsettled_before} -> {} (decided: {gated})",
                proxy.unsettled()
            );
        }
        let Ok(text) = std::str::from_utf8(line) else {
            assert_eq!(outs.len(), 1, "{outs:?}");
            let Out::Client(answer) = &outs[0] else {
                panic!("not UTF-8, forwarded")
            };
            let v = check_client(answer);
            assert_eq!(v["error"]["code"], PARSE_ERROR);
            assert_eq!(v["id"], Value::Null);
            continue;
        };
        let text = text.trim_end_matches(['\n', '\r']);
        let batch = text.trim_start().starts_with('[');
        let verdict = proxy.gate().last;
        let mut forwarded_whole = false;
        for out in &outs {
            match out {
                Out::Server(s) => {
                    assert!(is_json(s), "forwarded, not JSON: {s}");
                    if s == text {
                        forwarded_whole = true;
                    } else if held.iter().any(|h| h == s) {
                        // An approved call, held since its line.
                    } else if batch {
                        let members: Vec<&RawValue> = serde_json::from_str(s).expect("a batch");
                        for m in members {
                            assert!(
                                text.contains(m.get()),
                                "batch member {} not in the line",
                                m.get()
                            );
                        }
                    } else {
                        panic!("forwarded {s:?} for the line {text:?}");
                    }
                }
                Out::Client(answer) => {
                    check_client(answer);
                }
                other => panic!("the terminal, which this proxy has not, was used: {other:?}"),
            }
        }
        if batch || text.trim().is_empty() {
            held.push(text.to_owned());
            if let Ok(members) = serde_json::from_str::<Vec<&RawValue>>(text) {
                held.extend(members.iter().map(|m| m.get().to_owned()));
            }
            continue;
        }
        held.push(text.to_owned());
        let strict = budgetgate::strict::value_from_str(text).ok();
        if forwarded_whole {
            assert!(
                is_json(text) && text.trim_start().starts_with('{'),
                "forwarded a line that is no JSON object: {text}"
            );
            if let Some(v) = &strict {
                assert_eq!(
                    v["jsonrpc"], "2.0",
                    "forwarded a line that is no JSON-RPC 2.0 message: {text}"
                );
            }
        }
        if !is_json(text) || strict.as_ref().is_some_and(|v| !v.is_object()) {
            assert_eq!(outs.len(), 1, "{text:?} → {outs:?}");
            let Out::Client(answer) = &outs[0] else {
                unreachable!()
            };
            let v = check_client(answer);
            let code = &v["error"]["code"];
            assert!(*code == PARSE_ERROR || *code == INVALID_REQUEST, "{answer}");
        }
        if let Some(Value::Object(o)) = &strict {
            let readable = o.get("id").filter(|id| id.is_string() || id.is_number());
            for out in &outs {
                if let Out::Client(answer) = out {
                    let v: Value = serde_json::from_str(answer).expect("JSON");
                    let code = &v["error"]["code"];
                    if *code == PARSE_ERROR || *code == INVALID_REQUEST {
                        if let Some(id) = readable {
                            assert_eq!(&v["id"], id, "the id was lost: {text} → {answer}");
                        }
                    }
                }
            }
        }
        if gated {
            match verdict {
                Some(0) => assert!(
                    forwarded_whole,
                    "a call the gate let run was not forwarded: {text}"
                ),
                _ => assert!(
                    !forwarded_whole,
                    "a call the gate did not let run was forwarded: {text}"
                ),
            }
        }
    }
    proxy.gate_mut().down = false;
    proxy.on_client_closed(now + 1);
    assert_eq!(proxy.unsettled(), 0, "a commit was left unmade");
    if proxy.in_flight() == 0 {
        for (key, ended) in &proxy.gate().reserved {
            assert!(*ended, "reservation {key} never ended");
        }
    }
});
