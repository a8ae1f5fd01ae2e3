//! The gateway's unit tests.

use super::*;
use std::io::{BufRead, BufReader};

/// What the gateway wrote to the client, one JSON value a line.
fn json_lines(out: &[u8]) -> Vec<Value> {
    out.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("JSON"))
        .collect()
}

struct Setup {
    dir: tempfile::TempDir,
}

/// A budget that asks before `send_mail`.
const SEND_MAIL_ASKS: &str =
    "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"send_mail\"]\n";

impl Setup {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
    fn gate(&self, budget: &str, ttl_ms: u64) -> LedgerGate {
        let store = Store::open(self.dir.path(), Duration::from_secs(5)).expect("ledger");
        let budget = crate::gate::budget_file::parse_budget(budget).expect("budget");
        LedgerGate::new(store, budget, "s".into(), ttl_ms)
    }
    /// A gate that waits at most `wait_ms` for the ledger's lock.
    fn gate_with_timeout(&self, budget: &str, ttl_ms: u64, wait_ms: u64) -> LedgerGate {
        let store = Store::open(self.dir.path(), Duration::from_millis(wait_ms)).expect("ledger");
        let budget = crate::gate::budget_file::parse_budget(budget).expect("budget");
        LedgerGate::new(store, budget, "s".into(), ttl_ms)
    }
    /// Another process's write transaction on the ledger, held while
    /// the returned connection lives.
    fn lock_ledger(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.dir.path().join(crate::store::FILE_NAME))
            .expect("open");
        c.execute_batch("BEGIN IMMEDIATE").expect("lock");
        c
    }
    fn proxy(&self, budget: &str) -> Proxy<LedgerGate> {
        let gate = self.gate(budget, 60_000);
        let max = gate.budget.max_result_bytes;
        Proxy::new(gate, "c1".into(), max, 1_000)
    }
    /// A proxy whose budget asks before `send_mail`, for a client
    /// that declared the elicitation capability.
    fn eliciting_proxy(&self) -> Proxy<LedgerGate> {
        let mut p = self.proxy(SEND_MAIL_ASKS);
        p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
        p
    }
    /// A proxy whose budget asks before `send_mail`, for a client
    /// without elicitation: the gateway's terminal is asked.
    fn terminal_proxy(&self) -> Proxy<LedgerGate> {
        let mut p = self.proxy(SEND_MAIL_ASKS);
        p.ask_on_terminal(true);
        p.on_client(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
            T0,
        );
        p
    }
    fn used(&self) -> (u64, u64) {
        let store = Store::open(self.dir.path(), Duration::from_secs(5)).expect("ledger");
        let l = store.list().expect("list");
        let Some(first) = l.first() else {
            return (0, 0);
        };
        let ledger = first.ledger.as_ref().expect("record");
        (
            ledger.used(budgetgate_core::budget::Limit::ToolCalls),
            ledger.reserved(budgetgate_core::budget::Limit::ToolCalls),
        )
    }
}

const T0: u64 = 1_000_000;
const BUDGET: &str = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";

fn call(id: u64, tool: &str, args: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
    .to_string()
    .into_bytes()
}

fn answer(id: u64, result: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
        .to_string()
        .into_bytes()
}

fn client(outs: &[Out]) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Client(l) => Some(serde_json::from_str(l).expect("JSON")),
            _ => None,
        })
        .collect()
}

fn server(outs: &[Out]) -> Vec<&str> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Server(l) => Some(l.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn what_is_not_gated_passes_through_unchanged_both_ways() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc": "2.0", "id": "p", "method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"x:/é"}}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"no/such/method","extra":[1,2.50]}"#,
        r#"{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}"#,
        r#"[{"jsonrpc":"2.0","id":11,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]"#,
    ] {
        let outs = p.on_client(line.as_bytes(), T0);
        assert_eq!(outs, [Out::Server(line.into())], "{line}");
    }
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
        r#"{"jsonrpc":"2.0","id":"srv-2","method":"sampling/createMessage","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":"srv-3","method":"elicitation/create","params":{}}"#,
        r#"{"result":{},"jsonrpc":"2.0","id":"p"}"#,
        r#"[{"jsonrpc":"2.0","id":11,"result":{}}]"#,
    ] {
        let outs = p.on_server(line.as_bytes(), T0);
        assert_eq!(outs, [Out::Client(line.into())], "{line}");
    }
    assert_eq!(p.in_flight(), 3, "initialize, 9 and 10 are still awaited");
}

#[test]
fn unreadable_lines_are_answered_and_never_forwarded() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    for (line, code, id) in [
        ("garbage", PARSE_ERROR, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            PARSE_ERROR,
            Value::Null,
        ),
        (r#"{"id":2,"method":"ping"}"#, INVALID_REQUEST, json!(2)),
        (
            r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
            INVALID_REQUEST,
            json!(3),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"id":5,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","id":6}"#, INVALID_REQUEST, json!(6)),
        // An id beyond a 64-bit float cannot be read back: null.
        (
            r#"{"jsonrpc":"1.0","id":8e888,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        (
            r#"{"id":-1e400,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":0.5e8888}"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        (r#"[]"#, INVALID_REQUEST, Value::Null),
        ("42", INVALID_REQUEST, Value::Null),
    ] {
        let outs = p.on_client(line.as_bytes(), T0);
        assert!(server(&outs).is_empty(), "{line}");
        let got = client(&outs);
        assert_eq!(got.len(), 1, "{line}");
        assert_eq!(got[0]["error"]["code"], code, "{line}: {}", got[0]);
        assert_eq!(got[0]["id"], id, "{line}");
    }
    // A request with such an id passes through as it is; one reusing
    // it while it is awaited is refused, answered with id null.
    let ping = br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#;
    assert_eq!(server(&p.on_client(ping, T0)).len(), 1);
    let outs = p.on_client(ping, T0);
    assert!(server(&outs).is_empty());
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    assert_eq!(client(&outs)[0]["id"], Value::Null);
    let outs = p.on_client(b"\xff\xfe{}", T0);
    assert_eq!(client(&outs)[0]["error"]["code"], PARSE_ERROR);
    let outs = p.on_client_too_long();
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    assert!(p.on_client(b"  \r\n", T0).is_empty());
}

/// `SPEC E` (fail closed): a `tools/call` holding a key twice, at any
/// depth, is refused `-32600` naming the key and never forwarded — the
/// gate would decide one reading (`Bash`) and the server could run the
/// other (`echo`); nothing is reserved.
#[test]
fn a_call_repeating_a_key_is_refused_and_never_forwarded() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    for (line, key) in [
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","name":"Bash","arguments":{}}}"#,
            "`name`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x1","m":"same"}}}"#,
            "`m`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"a":[{"k":1,"k":2}]}}}"#,
            "`k`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"},"_x":1,"_x":2}"#,
            "`_x`",
        ),
    ] {
        let outs = p.on_client(line.as_bytes(), T0);
        assert!(server(&outs).is_empty(), "{line}");
        let got = client(&outs);
        assert_eq!(got.len(), 1, "{line}");
        assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{line}");
        let message = got[0]["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("duplicate key {key}")),
            "{line}: {message}"
        );
        assert!(!p.awaits("8"), "{line}");
    }
    // In a batch, the repeated call alone is refused.
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","name":"Bash"}}]"#;
    let outs = p.on_client(batch.as_bytes(), T0);
    assert_eq!(
        server(&outs),
        [r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#]
    );
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    // The same call without the repeat is let through.
    let outs = p.on_client(&call(9, "echo", json!({"m": "x1"})), T0);
    assert_eq!(server(&outs).len(), 1);
    assert_eq!(s.used(), (0, 1), "only the well-formed call is reserved");
}

/// `SPEC E` (fail closed): the other client messages the gateway reads
/// to decide — `initialize` (the elicitation capability),
/// `notifications/cancelled` (which reservation to give back) and the
/// answer to its approval question — are refused, not acted on and not
/// forwarded, when they repeat a key.
#[test]
fn messages_the_gateway_reads_are_refused_when_they_repeat_a_key() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"capabilities":{"elicitation":{},"elicitation":null}}}"#;
    let outs = p.on_client(init.as_bytes(), T0);
    assert!(server(&outs).is_empty());
    assert_eq!(client(&outs)[0]["id"], "i");
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    assert!(!p.elicitation);
    // A call in flight keeps its reservation when the cancel naming it
    // is ambiguous (which request would the server cancel?).
    assert_eq!(
        server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
        1
    );
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"requestId":1}}"#;
    let outs = p.on_client(cancel.as_bytes(), T0);
    assert!(server(&outs).is_empty());
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    assert_eq!(s.used(), (0, 1));
    // An approval answer saying decline and accept at once refuses.
    let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"Bash\"]\n";
    let s = Setup::new();
    let mut p = s.proxy(budget);
    let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#;
    assert_eq!(server(&p.on_client(init, T0)).len(), 1);
    let outs = p.on_client(&call(3, "Bash", json!({"command": "ls"})), T0);
    let ask = client(&outs);
    assert_eq!(ask[0]["method"], "elicitation/create", "{ask:?}");
    let eid = ask[0]["id"].to_string();
    let reply = format!(
        r#"{{"jsonrpc":"2.0","id":{eid},"result":{{"action":"decline","action":"accept"}}}}"#
    );
    let outs = p.on_client(reply.as_bytes(), T0);
    assert!(
        server(&outs).is_empty(),
        "the call never reaches the server"
    );
    let got = client(&outs);
    assert_eq!(got[0]["id"], 3);
    assert_eq!(got[0]["result"]["isError"], true);
    assert_eq!(
        got[0]["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
}

/// A `tools/call` that is not readable is answered `-32602` naming
/// what is wrong — a number out of range, a lone surrogate, `params`
/// that is not an object, a `name` that is not a string — and never
/// forwarded (`SPEC E`, fail closed).
#[test]
fn unreadable_calls_are_answered_with_the_rule_they_break() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    for (params, says) in [
        (
            r#"{"name":"echo","arguments":{"m":1e400}}"#,
            "number out of range",
        ),
        (r#"{"name":"echo","arguments":{"m":"\ud800"}}"#, "surrogate"),
        (r#""x""#, "`params` must be an object, not a string"),
        (r#"[1]"#, "`params` must be an object, not an array"),
        (r#"{"name":7}"#, "`name` must be a string, not a number"),
        (r#"{"arguments":{}}"#, "needs a string `name`"),
        (
            r#"{"name":"echo","arguments":[]}"#,
            "`arguments` must be an object",
        ),
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{params}}}"#);
        let outs = p.on_client(line.as_bytes(), T0);
        assert!(server(&outs).is_empty(), "{line}");
        let got = client(&outs);
        assert_eq!(got[0]["id"], 4, "{line}");
        assert_eq!(got[0]["error"]["code"], INVALID_PARAMS, "{line}");
        let message = got[0]["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{line}: {message}");
    }
    let line = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#;
    let got = client(&p.on_client(line.as_bytes(), T0));
    assert!(got[0]["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("needs `params`"));
    assert_eq!(p.in_flight(), 0);
}

/// A `tools/call` whose id is `null` is answered `-32600` (id `null`)
/// instead of being dropped unanswered; one whose id is not a string or
/// an integer (an object, a float, a boolean, an array, a number out
/// of range) likewise, never forwarded (`SPEC E`, every call answered);
/// a number JSON-RPC reads (a float, an integer past 64 bits) is
/// answered with that id, as sent, so the client can match the answer
/// (found by the `mcp_lines` fuzz target's id rule).
#[test]
fn calls_with_a_null_or_non_integer_id_are_answered_and_never_forwarded() {
    let s = Setup::new();
    let mut p = s.proxy("[budget]\nmax_seconds = 3600\n");
    for (id, says) in [
        ("null", "not null"),
        (r#"{"a":1}"#, "not an object"),
        ("1.5", "not a number outside the 64-bit integers"),
        ("1e3", "(a fraction, an exponent or too large)"),
        ("18446744073709551616", "outside the 64-bit integers"),
        ("true", "not a boolean"),
        ("[1]", "not an array"),
        ("1e400", "number out of range"),
    ] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{}}}}}}"#
        );
        let outs = p.on_client(line.as_bytes(), T0);
        assert!(server(&outs).is_empty(), "{line}");
        let got = client(&outs);
        assert_eq!(got.len(), 1, "{line}");
        let sent: Value = serde_json::from_str(id).unwrap_or(Value::Null);
        let kept = if sent.is_number() { sent } else { Value::Null };
        assert_eq!(got[0]["id"], kept, "{line}");
        assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{line}");
        let message = got[0]["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("a string or an integer"),
            "{line}: {message}"
        );
        assert!(message.contains(says), "{line}: {message}");
    }
    assert_eq!(p.in_flight(), 0);
    // String and integer ids are let through, up to 2^53 (past it a
    // JavaScript server could not tell two ids apart: issue 29's
    // hostile trial; refused in a_call_may_not_take_the_id_of_…).
    for (n, id) in [r#""a""#, "-3", "9007199254740992"].iter().enumerate() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo{n}"}}}}"#
        );
        assert_eq!(server(&p.on_client(line.as_bytes(), T0)).len(), 1, "{line}");
        assert!(p.awaits(id), "{id}");
    }
}

/// `SPEC E` (fail closed), results: a call's result whose size cannot
/// be told (a key given twice, a number out of range) is withheld, the
/// call counted; a `tools/list` answer that cannot be read is withheld
/// (which tools it lists cannot be told).
#[test]
fn unreadable_results_are_withheld() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    assert_eq!(
        server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
        1
    );
    let result = br#"{"jsonrpc":"2.0","id":1,"result":{"content":"big","content":"x"}}"#;
    let got = client(&p.on_server(result, T0));
    assert_eq!(got[0]["id"], 1);
    assert_eq!(got[0]["result"]["isError"], true);
    let text = got[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("duplicate key `content`"), "{text}");
    assert_eq!(s.used(), (1, 0), "it ran: counted");
    let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    assert_eq!(server(&p.on_client(list, T0)).len(), 1);
    let answer = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"Bash","name":"echo"}]}}"#;
    let got = client(&p.on_server(answer, T0));
    assert_eq!(got[0]["error"]["code"], GATEWAY_ERROR, "{got:?}");
}

/// `SPEC E` (fail closed), `SPEC C` (every attempt counted): a request
/// (not a `tools/call`, which the gate refuses `duplicate-call-id`)
/// reusing the id of a call still in flight is refused `-32600` and not
/// forwarded, so the call's reservation is still committed when the
/// server answers (before, the second request replaced the call's entry
/// and the attempt was never counted; found while writing the
/// `mcp_lines` fuzz target, whose reservation check fails on it).
#[test]
fn a_request_reusing_the_id_of_a_call_in_flight_is_refused() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    assert_eq!(
        server(&p.on_client(&call(1, "echo", json!({})), T0)).len(),
        1
    );
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    ] {
        let outs = p.on_client(line.as_bytes(), T0);
        assert!(server(&outs).is_empty(), "forwarded {line}");
        let got = client(&outs);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["error"]["code"], INVALID_REQUEST, "{}", got[0]);
        assert_eq!(got[0]["id"], 1);
    }
    // A call reusing it is the gate's duplicate, as before.
    let outs = p.on_client(&call(1, "other", json!({"a": 1})), T0);
    assert!(server(&outs).is_empty());
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "duplicate-call-id"
    );
    assert_eq!(s.used(), (0, 1), "the first call is still reserved");
    p.on_server(&answer(1, json!({"content": []})), T0);
    assert_eq!(s.used(), (1, 0), "the call that ran is counted");
    // Once answered, the id may be used again.
    let outs = p.on_client(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, T0);
    assert_eq!(server(&outs).len(), 1);
}

#[test]
fn calls_are_reserved_then_committed_or_rolled_back() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    let outs = p.on_client(&call(1, "echo", json!({"m": 1})), T0);
    assert_eq!(server(&outs).len(), 1);
    assert_eq!(s.used(), (0, 1), "reserved while in flight");
    let outs = p.on_client(&call(2, "echo", json!({"m": 2})), T0);
    assert_eq!(server(&outs).len(), 1);
    // Both attempts are held: a third is refused before any answer.
    let outs = p.on_client(&call(3, "echo", json!({"m": 3})), T0);
    let refused = &client(&outs)[0];
    assert_eq!(refused["id"], 3);
    assert_eq!(refused["result"]["isError"], true);
    let meta = &refused["result"]["_meta"]["budgetgate"];
    assert_eq!(meta["reason"], "tool-budget");
    assert_eq!(
        (meta["used"].clone(), meta["max"].clone()),
        (json!(2), json!(2))
    );
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("budgetgate refused this call (tool-budget): 2 of 2 tool calls used."),
        "{text}"
    );
    // A result commits, a JSON-RPC error rolls back.
    let ok = answer(1, json!({"content": [{"type": "text", "text": "1"}]}));
    assert_eq!(
        p.on_server(&ok, T0),
        [Out::Client(String::from_utf8(ok.clone()).unwrap())]
    );
    let err = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}"#;
    assert_eq!(client(&p.on_server(err, T0))[0]["error"]["code"], -32602);
    assert_eq!(s.used(), (1, 0));
    // The rolled-back attempt is there again.
    let outs = p.on_client(&call(4, "echo", json!({"m": 4})), T0);
    assert_eq!(server(&outs).len(), 1);
    // A request id used before is refused, whatever was decided then.
    let outs = p.on_client(&call(3, "echo", json!({"m": 5})), T0);
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "duplicate-call-id"
    );
    // Ids are compared as JSON values, not as spelled.
    let failed = br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#;
    p.on_server(failed, T0);
    let spelled = br#"{"jsonrpc":"2.0","id":"\u0061","method":"tools/call","params":{"name":"echo","arguments":{"m":6}}}"#;
    assert_eq!(server(&p.on_client(spelled, T0)).len(), 1);
    let again = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"m":7}}}"#;
    let refused = &client(&p.on_client(again, T0))[0]["result"];
    assert_eq!(
        refused["_meta"]["budgetgate"]["reason"],
        "duplicate-call-id"
    );
    // Said to be unique where it is: on the connection.
    let text = refused["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("the request id \"a\" was already used on this connection"),
        "{text}"
    );
    let answered = br#"{"jsonrpc":"2.0","id":"a","result":{"content":[]}}"#;
    assert_eq!(client(&p.on_server(answered, T0)).len(), 1);
    assert_eq!(
        s.used(),
        (2, 0),
        "the answer to the id spelled another way committed it"
    );
}

/// SPEC E (reserve, then commit): the stdio transport writes an
/// answer before its commit; the call stays reserved (counted) until
/// the commit, which the next decision (in its own transaction), any
/// event but a client's message, an explicit settle or the proxy's end
/// makes, and never after a later decision.
#[test]
fn an_answer_written_first_is_committed_before_anything_else_happens() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(1, "echo", json!({"m": 1})), T0);
    let ok = answer(1, json!({"content": []}));
    assert_eq!(
        p.on_server_unsettled(&ok, T0),
        [Out::Client(String::from_utf8(ok.clone()).unwrap())]
    );
    assert_eq!(s.used(), (0, 1), "still reserved: counted, not committed");
    p.settle(T0);
    assert_eq!(s.used(), (1, 0), "settled");
    p.settle(T0);
    assert_eq!(s.used(), (1, 0), "settled once");
    // A message passed through leaves it reserved; the next decision
    // commits it first, in its own transaction, and sees the commit.
    p.on_client(&call(2, "echo", json!({"m": 2})), T0);
    p.on_server_unsettled(&answer(2, json!({"content": []})), T0);
    assert_eq!(s.used(), (1, 1));
    let ping = br#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
    assert_eq!(server(&p.on_client(ping, T0)).len(), 1);
    assert_eq!(
        (s.used(), p.unsettled()),
        ((1, 1), 1),
        "a ping settles nothing"
    );
    let outs = p.on_client(&call(3, "echo", json!({"m": 3})), T0);
    assert_eq!(p.unsettled(), 0);
    assert_eq!(s.used(), (2, 0), "committed before call 3 was decided");
    let meta = &client(&outs)[0]["result"]["_meta"]["budgetgate"];
    assert_eq!(
        (meta["reason"].clone(), meta["used"].clone()),
        (json!("tool-budget"), json!(2))
    );
    // A proxy that ends with an answer unsettled commits it.
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(1, "echo", json!({"m": 1})), T0);
    p.on_server_unsettled(&answer(1, json!({"content": []})), T0);
    drop(p);
    assert_eq!(s.used(), (1, 0), "committed when the proxy was dropped");
    // So do the transport's other events: the server's exit, the
    // client's close, the clock.
    for end in 0..3 {
        let s = Setup::new();
        let mut p = s.proxy(BUDGET);
        p.on_client(&call(1, "echo", json!({"m": 1})), T0);
        p.on_server_unsettled(&answer(1, json!({"content": []})), T0);
        match end {
            0 => drop(p.on_server_exit("exited", T0)),
            1 => p.on_client_closed(T0),
            _ => drop(p.on_tick(T0)),
        }
        assert_eq!(s.used(), (1, 0), "event {end}");
    }
}

#[test]
fn wall_time_since_the_sessions_first_call_ends_every_call() {
    let s = Setup::new();
    let mut p = s.proxy("[budget]\nmax_seconds = 1\n");
    assert_eq!(
        server(&p.on_client(&call(1, "t", json!({"i": 1})), T0)).len(),
        1
    );
    assert_eq!(
        server(&p.on_client(&call(2, "t", json!({"i": 2})), T0 + 999)).len(),
        1
    );
    let outs = p.on_client(&call(3, "t", json!({"i": 3})), T0 + 1_000);
    let refused = &client(&outs)[0]["result"];
    assert_eq!(refused["_meta"]["budgetgate"]["reason"], "budget-exhausted");
    assert_eq!(refused["_meta"]["budgetgate"]["limit"], "time_ms");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("session time_ms budget exhausted (1000 of 1000 ms)"),
        "{text}"
    );
    assert!(text.ends_with("do not retry."), "{text}");
}

/// Issue 29, reproduction 1: a cancel right after the call gave the
/// call back while the server ran it. A cancelled call stays reserved;
/// its result counts and is not passed on (the client ignores it),
/// whatever its size; only the server's JSON-RPC error gives it back.
#[test]
fn a_cancelled_call_still_counts_when_it_ran_and_its_result_is_not_passed_on() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 6\nmax_result_bytes = 4096\n[tools]\nmax_calls = { \"get-sum\" = 3 }\n";
    let mut p = s.proxy(budget);
    let cancel = |n: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{n},"reason":"user"}}}}"#
        )
    };
    // Each call and its cancel in one write, as the trial sent them.
    let mut ran = 0;
    for n in 1..=20u64 {
        let mut both = call(n, "get-sum", json!({"a": n, "b": 1}));
        both.push(b'\n');
        both.extend(cancel(n).as_bytes());
        let mut outs = Vec::new();
        for line in both.split(|b| *b == b'\n') {
            outs.extend(p.on_client(line, T0 + n));
        }
        if server(&outs).len() == 2 {
            ran += 1;
            // The server ignores the cancel and answers, 20 KB.
            let big = answer(
                n,
                json!({"content": [{"type": "text", "text": "x".repeat(20_000)}]}),
            );
            assert!(
                p.on_server(&big, T0 + n).is_empty(),
                "a cancelled call's result is not passed on"
            );
        } else {
            let refused = &client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"];
            assert_eq!(refused, "tool-cap", "call {n}");
        }
    }
    assert_eq!(ran, 3, "the per-tool cap holds");
    assert_eq!(s.used(), (3, 0));
    // A cancel the server answers with a JSON-RPC error: did not run.
    p.on_client(&call(30, "other", json!({})), T0 + 100);
    p.on_client(cancel(30).as_bytes(), T0 + 100);
    assert_eq!(s.used(), (3, 1));
    let error = br#"{"jsonrpc":"2.0","id":30,"error":{"code":-32800,"message":"cancelled"}}"#;
    assert!(p.on_server(error, T0 + 101).is_empty());
    assert_eq!(s.used(), (3, 0), "given back on the server's error");
    // A cancel whose call is never answered: counted when the gateway ends.
    p.on_client(&call(31, "other", json!({})), T0 + 200);
    p.on_client(cancel(31).as_bytes(), T0 + 200);
    p.on_client_closed(T0 + 300);
    assert_eq!(s.used(), (4, 0));
}

#[test]
fn approval_asks_the_client_by_elicitation_when_it_can() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"send_mail\"]\n";
    let mut p = s.proxy(budget);
    // Without the capability: refused, and the reason says why.
    p.on_client(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
        T0,
    );
    let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
    let text = client(&outs)[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("did not declare the elicitation capability"),
        "{text}"
    );
    assert!(server(&outs).is_empty());
    // With it: accept forwards the call unchanged, decline refuses it.
    p.on_client(br#"{"jsonrpc":"2.0","id":"i2","method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
    let line = call(2, "send_mail", json!({"to": "b"}));
    let outs = p.on_client(&line, T0);
    assert!(server(&outs).is_empty());
    let ask = &client(&outs)[0];
    assert_eq!(ask["method"], "elicitation/create");
    assert!(ask["params"]["message"]
        .as_str()
        .unwrap()
        .contains("send_mail"));
    let eid = ask["id"].clone();
    let accept =
        json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}});
    let outs = p.on_client(accept.to_string().as_bytes(), T0);
    assert_eq!(outs, [Out::Server(String::from_utf8(line).unwrap())]);
    let outs = p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
    let eid = client(&outs)[0]["id"].clone();
    let decline = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "decline"}});
    let outs = p.on_client(decline.to_string().as_bytes(), T0);
    let refused = &client(&outs)[0];
    assert_eq!(refused["id"], 3);
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
    // A call cancelled while its approval is asked: dropped, the question
    // withdrawn, nothing sent to the server.
    p.on_client(&call(5, "send_mail", json!({"to": "e"})), T0);
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
    let outs = p.on_client(cancel, T0);
    assert!(server(&outs).is_empty());
    assert_eq!(client(&outs)[0]["method"], "notifications/cancelled");
    assert!(p.asking().is_empty());
    // No answer within the deadline: refused, and the request withdrawn.
    p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0);
    assert_eq!(p.next_deadline(), Some(T0 + 1_000));
    assert!(p.on_tick(T0 + 999).is_empty());
    let outs = client(&p.on_tick(T0 + 1_000));
    assert_eq!(outs[0]["method"], "notifications/cancelled");
    assert_eq!(outs[1]["id"], 4);
    assert!(outs[1]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("no answer came within 1 s"));
    // The late answer to that withdrawn question is the gateway's own:
    // never forwarded, and it changes nothing.
    let late = json!({"jsonrpc": "2.0", "id": outs[0]["params"]["requestId"], "result": {"action": "accept"}});
    assert!(p
        .on_client(late.to_string().as_bytes(), T0 + 1_001)
        .is_empty());
    // An answer with an id the gateway never asked is the server's.
    for id in [
        json!("budgetgate-approval-99"),
        json!("budgetgate-approval-+1"),
        json!(1),
    ] {
        let other = json!({"jsonrpc": "2.0", "id": id, "result": {}});
        let outs = p.on_client(other.to_string().as_bytes(), T0 + 1_001);
        assert_eq!(server(&outs).len(), 1, "{id}");
    }
}

/// SPEC E (reserve, then commit): the calls that ran are committed
/// whatever becomes of the decision they were to share a transaction
/// with: a decision that fails (here a call nested too deeply to
/// compare, which no client line can bring) is refused, and the calls
/// before it still count, once.
#[test]
fn commits_made_with_a_decision_stand_when_the_decision_fails() {
    let s = Setup::new();
    let mut g = s.gate(BUDGET, 60_000);
    let input = json!({"m": 1});
    let plain = ToolCall {
        name: "echo",
        input: &input,
        call_id: "k1",
        shown_id: "the id k1",
        id_scope: "on this connection",
        reused: false,
    };
    assert_eq!(g.decide(&plain, T0), Ok(Verdict::Run));
    assert_eq!(s.used(), (0, 1));
    let mut deep = json!(0);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let deep = json!({ "d": deep });
    let too_deep = ToolCall {
        input: &deep,
        call_id: "k2",
        shown_id: "the id k2",
        ..plain
    };
    let ran = [("k1".to_owned(), "echo".to_owned())];
    let (failed, verdict) = g.commit_then_decide(&ran, &too_deep, T0);
    assert!(failed.is_empty(), "{failed:?}");
    assert!(verdict.unwrap_err().contains("nested too deeply"));
    assert_eq!(s.used(), (1, 0), "k1 committed once, k2 not reserved");
    // Folded with a decision that stands: one transaction, both kept.
    let again = ToolCall {
        call_id: "k3",
        shown_id: "the id k3",
        ..plain
    };
    assert_eq!(g.decide(&again, T0), Ok(Verdict::Run));
    let ran = [("k3".to_owned(), "echo".to_owned())];
    let next = ToolCall {
        call_id: "k4",
        shown_id: "the id k4",
        input: &json!({"m": 2}),
        ..plain
    };
    let (failed, verdict) = g.commit_then_decide(&ran, &next, T0);
    assert!(failed.is_empty());
    assert!(
        matches!(verdict, Ok(Verdict::Refuse(ref r)) if r.reason == "tool-budget"),
        "{verdict:?}"
    );
    assert_eq!(s.used(), (2, 0), "k3 committed before k4 was decided");
}

/// SPEC E, the ledger's log: a call whose approval is refused, by the
/// person, by the deadline, or because no one can be asked, counts as
/// an attempt and is logged as a refusal with the answer, so that
/// `budgetgate ledger show` lists it beside the budget's refusals.
#[test]
fn every_refused_approval_is_counted_and_logged_with_its_answer() {
    let s = Setup::new();
    let mut p = s.eliciting_proxy();
    let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
    let eid = client(&outs)[0]["id"].clone();
    let decline = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "decline"}});
    p.on_client(decline.to_string().as_bytes(), T0);
    p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0);
    p.on_tick(T0 + 1_000);
    let mut blind = s.proxy(SEND_MAIL_ASKS);
    blind.on_client(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#,
        T0,
    );
    blind.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
    assert_eq!(s.used(), (3, 0), "each refused approval counts once");
    let store = Store::open(s.dir.path(), Duration::from_secs(5)).expect("ledger");
    let log: Vec<(String, String)> = store
        .log()
        .expect("log")
        .into_iter()
        .map(|(_, _, action, detail)| (action, detail))
        .collect();
    assert_eq!(log.len(), 3, "{log:?}");
    for ((action, detail), (key, answer)) in log.iter().zip([
        ("mcp/c1/1", "the person declined it"),
        ("mcp/c1/2", "no answer came within 1 s"),
        ("mcp/c1/3", "did not declare the elicitation capability"),
    ]) {
        assert_eq!(action, "deny");
        assert!(
            detail.starts_with(&format!("{key}: approval-refused (")),
            "{detail}"
        );
        assert!(detail.contains(answer), "{detail}");
    }
}

/// SPEC C, the approval deadline (issue 11, one approval state
/// machine): an accept read at or after the question's deadline, before
/// the tick that would have withdrawn it, is refused as "no answer in
/// time" and never reaches the server, from the client and from the
/// terminal alike; one a millisecond before the deadline runs the call.
#[test]
fn an_accept_at_the_deadline_before_the_tick_never_runs_the_call() {
    let s = Setup::new();
    let mut p = s.eliciting_proxy();
    let accept = |eid: &Value| {
        json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}})
            .to_string()
    };
    let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
    let eid = client(&outs)[0]["id"].clone();
    let outs = p.on_client(accept(&eid).as_bytes(), T0 + 1_000);
    assert!(server(&outs).is_empty(), "{outs:?}");
    let refused = &client(&outs)[0];
    assert_eq!(refused["id"], 1);
    assert_eq!(
        refused["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
    assert!(refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("no answer came within 1 s"));
    assert!(p.asking().is_empty());
    // In time, by one millisecond: forwarded.
    let line = call(2, "send_mail", json!({"to": "b"}));
    let outs = p.on_client(&line, T0);
    let eid = client(&outs)[0]["id"].clone();
    assert_eq!(
        p.on_client(accept(&eid).as_bytes(), T0 + 999),
        [Out::Server(String::from_utf8(line).unwrap())]
    );
    // At the terminal: the same rule.
    let mut p = s.terminal_proxy();
    let outs = p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0);
    let [Out::Ask(q)] = outs.as_slice() else {
        panic!("{outs:?}")
    };
    let outs = p.on_person(&q.eid, true, T0 + 5_000);
    assert!(server(&outs).is_empty(), "{outs:?}");
    assert!(client(&outs)[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("no answer came within 1 s"));
}

/// Approval at the terminal (docs/MCP.md, "Approval"): a client
/// without the elicitation capability is not asked, the terminal is;
/// only the person there answers (the client's answer to that
/// question is dropped), and a question withdrawn is said so to the
/// terminal, not to the client.
#[test]
fn without_elicitation_the_terminal_is_asked_and_only_it_answers() {
    // The one question asked at the terminal.
    let asked = |outs: Vec<Out>| match outs.as_slice() {
        [Out::Ask(q)] => q.clone(),
        _ => panic!("{outs:?}"),
    };
    let s = Setup::new();
    let mut p = s.terminal_proxy();
    let line = call(1, "send_mail", json!({"to": "a"}));
    let q = asked(p.on_client(&line, T0));
    assert!(
        q.text
            .contains("wants to call send_mail with {\"to\":\"a\"}"),
        "{q:?}"
    );
    assert_eq!(q.deadline_ms, T0 + 1_000);
    let eid = q.eid.clone();
    assert_eq!(p.asks(&eid), Some(Asker::Terminal));
    // The client cannot answer it.
    let forged = json!({"jsonrpc": "2.0", "id": serde_json::from_str::<Value>(&eid).unwrap(), "result": {"action": "accept"}});
    assert!(p.on_client(forged.to_string().as_bytes(), T0).is_empty());
    assert_eq!(p.asks(&eid), Some(Asker::Terminal));
    assert!(p
        .on_person("\"budgetgate-approval-9\"", true, T0)
        .is_empty());
    assert_eq!(
        p.on_person(&eid, true, T0),
        [Out::Server(String::from_utf8(line).unwrap())]
    );
    assert!(p.on_person(&eid, true, T0).is_empty(), "answered once");
    // No: refused, with who said so.
    let q = asked(p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0));
    let refused = client(&p.on_person(&q.eid, false, T0));
    assert_eq!(refused[0]["id"], 2);
    assert!(refused[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("the person at the gateway's terminal declined it"));
    // Cancelled by the client, or past its deadline: withdrawn at the
    // terminal; only the deadline's refusal goes to the client.
    let q = asked(p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0));
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#;
    assert_eq!(
        p.on_client(cancel, T0),
        [Out::Withdraw {
            eid: q.eid.clone(),
            why: "the call was cancelled".into()
        }]
    );
    let q = asked(p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0));
    let outs = p.on_tick(T0 + 1_000);
    assert_eq!(
        outs[0],
        Out::Withdraw {
            eid: q.eid.clone(),
            why: "no answer in time".into()
        }
    );
    assert_eq!(client(&outs[1..])[0]["id"], 4);
    // Without a terminal either: refused, and the reason says both.
    p.ask_on_terminal(false);
    let outs = client(&p.on_client(&call(5, "send_mail", json!({"to": "e"})), T0));
    assert!(outs[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("none is attached, or --terminal never"));
    // 2, 4 and 5 count; 1 runs (reserved until the server answers); 3
    // was given back.
    assert_eq!(s.used(), (3, 1));
}

/// Approval (docs/MCP.md, "Approval"): a question's id cannot be
/// guessed, so a client cannot answer a question before it is sent; an
/// answer that is not a plain accept (an error beside the result, an
/// action the gateway does not know) refuses the call, saying what came.
#[test]
fn only_a_plain_accept_of_a_question_sent_runs_its_call() {
    let s = Setup::new();
    let mut p = s.eliciting_proxy();
    // Sent in one batch with the call: the guessed id answers nothing.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_mail","arguments":{}}},{"jsonrpc":"2.0","id":"budgetgate-approval-1","result":{"action":"accept"}}]"#;
    let outs = p.on_client(batch, T0);
    let ask = &client(&outs)[0];
    let eid = ask["id"].as_str().unwrap().to_owned();
    assert!(
        eid.starts_with("budgetgate-approval-1-") && eid.len() > 30,
        "{eid}"
    );
    assert!(
        !server(&outs).iter().any(|l| l.contains("tools/call")),
        "{outs:?}"
    );
    let both = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept"}, "error": {"code": 1, "message": "x"}});
    let refused = client(&p.on_client(both.to_string().as_bytes(), T0));
    assert_eq!(refused[0]["id"], 1);
    assert_eq!(
        refused[0]["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
    for (n, action, says) in [
        (2, json!("ACCEPT"), "answered \"ACCEPT\", not accept"),
        (3, json!(["accept"]), "had no `action`"),
    ] {
        let outs = p.on_client(&call(n, "send_mail", json!({ "n": n })), T0);
        let eid = client(&outs)[0]["id"].clone();
        let answer = json!({"jsonrpc": "2.0", "id": eid, "result": {"action": action}});
        let refused = client(&p.on_client(answer.to_string().as_bytes(), T0));
        let text = refused[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(says), "{text}");
    }
}

/// Over Streamable HTTP the asking transport says which question is
/// asked, about which call, and expires each on its own deadline.
#[test]
fn each_question_is_known_by_its_id_and_expires_on_its_own() {
    let s = Setup::new();
    let mut p = s.eliciting_proxy();
    let first =
        client(&p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0))[0]["id"].to_string();
    let second = client(&p.on_client(&call(2, "send_mail", json!({"to": "b"})), T0 + 500))[0]["id"]
        .to_string();
    let mut asking = p.asking();
    asking.sort();
    assert_eq!(
        asking,
        [(first.clone(), T0 + 1_000), (second.clone(), T0 + 1_500)]
    );
    assert_eq!(p.question_about("2"), Some(second.as_str()));
    assert_eq!(p.question_about("3"), None);
    assert_eq!(p.asks(&first), Some(Asker::Client));
    assert_eq!(p.asks("\"budgetgate-approval-3\""), None);
    // The second expires first when told to; the first is still asked.
    let outs = client(&p.expire(&second, T0 + 600));
    assert_eq!(outs[0]["params"]["requestId"].to_string(), second);
    assert_eq!(outs[1]["id"], 2);
    assert_eq!(
        outs[1]["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
    assert!(p.expire(&second, T0 + 600).is_empty());
    assert!(p.asks(&first).is_some());
    // A transport that cannot carry the question refuses with its reason.
    p.set_cannot_ask(Some("no stream".into()));
    let outs = client(&p.on_client(&call(3, "send_mail", json!({"to": "c"})), T0));
    assert!(outs[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("and no stream"));
    p.set_cannot_ask(None);
    let outs = client(&p.on_client(&call(4, "send_mail", json!({"to": "d"})), T0));
    assert_eq!(outs[0]["method"], "elicitation/create");
}

#[test]
fn results_over_the_bound_are_replaced_and_denied_tools_are_not_listed() {
    let s = Setup::new();
    let budget =
        "[budget]\nmax_seconds = 3600\nmax_result_bytes = 40\n[tools]\nmax_calls = { rm = 0 }\n";
    let mut p = s.proxy(budget);
    p.on_client(&call(1, "big", json!({})), T0);
    // 41 bytes of compact JSON, whatever the server's spacing.
    let result = json!({"content": [{"type": "text", "text": "ééééééééé"}]});
    assert!(result.to_string().len() > 40);
    let outs = client(&p.on_server(&answer(1, result), T0));
    let text = outs[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("over the budget's bound of 40 bytes"),
        "{text}"
    );
    assert_eq!(outs[0]["result"]["isError"], true);
    p.on_client(&call(2, "small", json!({})), T0);
    let small = answer(2, json!({"content": []}));
    assert_eq!(
        client(&p.on_server(&small, T0))[0]["result"],
        json!({"content": []})
    );
    p.on_client(br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#, T0);
    let list = answer(3, json!({"tools": [{"name": "ls"}, {"name": "rm"}]}));
    let outs = client(&p.on_server(&list, T0));
    assert_eq!(outs[0]["result"]["tools"], json!([{"name": "ls"}]));
    let outs = p.on_client(&call(4, "rm", json!({})), T0);
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "tool-cap"
    );
}

#[test]
fn a_server_gone_mid_call_answers_every_pending_request() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(1, "slow", json!({})), T0);
    p.on_client(
        br#"{"jsonrpc":"2.0","id":"r","method":"resources/list"}"#,
        T0,
    );
    let outs = client(&p.on_server_exit("was killed by signal 9", T0));
    assert_eq!(outs.len(), 2);
    // The call: an error result the model reads, saying it may have run.
    let result = &outs.iter().find(|o| o["id"] == 1).unwrap()["result"];
    assert_eq!(result["isError"], true);
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("was killed by signal 9"), "{text}");
    assert!(text.contains("may have run"), "{text}");
    // Any other request: a JSON-RPC error.
    let other = outs.iter().find(|o| o["id"] == "r").unwrap();
    assert_eq!(other["error"]["code"], GATEWAY_ERROR);
    // The server may have run the call before it died: counted.
    assert_eq!(s.used(), (1, 0), "the call in flight counts");
    assert_eq!(p.in_flight(), 0);
}

#[test]
fn a_client_gone_counts_the_calls_in_flight_and_gives_back_those_being_asked() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"ask\"]\n";
    let mut p = s.proxy(budget);
    p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
    p.on_client(&call(1, "run", json!({})), T0);
    p.on_client(&call(2, "ask", json!({})), T0);
    assert_eq!(s.used(), (0, 2));
    p.on_client_closed(T0);
    assert_eq!(s.used(), (1, 0));
    assert_eq!(p.in_flight(), 0);
}

/// A reservation left by a gateway that died is counted as spent at
/// the next decision after its expiry: its call may have run.
#[test]
fn a_crashed_gateways_reservation_is_spent_at_its_expiry_never_given_back() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n";
    let mut crashed = Proxy::new(s.gate(budget, 1_000), "gone".into(), 4096, 1_000);
    crashed.on_client(&call(1, "slow", json!({})), T0);
    drop(crashed);
    assert_eq!(s.used(), (0, 1));
    let mut p = s.proxy(budget);
    let outs = p.on_client(&call(1, "slow", json!({})), T0 + 999);
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "tool-budget"
    );
    let outs = p.on_client(&call(2, "slow", json!({"again": true})), T0 + 1_000);
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "tool-budget",
        "the expired reservation was given back: {outs:?}"
    );
    assert_eq!(s.used(), (1, 0));
}

/// Issue 29, reproduction 3: reservations of live calls expired (a
/// tool slower than the TTL, a call waiting for approval), so waves of
/// calls ran past the budget. A live proxy renews what it holds.
#[test]
fn a_live_gateway_renews_its_reservations_so_slow_calls_never_expire() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";
    let ttl = 2_000;
    let mut p = Proxy::new(s.gate(budget, ttl), "a".into(), 4096, 60_000);
    let mut other = Proxy::new(s.gate(budget, ttl), "b".into(), 4096, 60_000);
    let mut ran = 0;
    // Three waves of two calls, 2.5 s apart, each call taking 8 s.
    for wave in 0..3u64 {
        let at = T0 + wave * 2_500;
        // The proxies tick as their transports do.
        let mut t = at.saturating_sub(2_500).max(T0);
        while t <= at {
            p.on_tick(t);
            other.on_tick(t);
            t += 100;
        }
        for n in 0..2 {
            let id = wave * 10 + n;
            let outs = other.on_client(&call(id, "slow", json!({"n": id})), at);
            ran += server(&outs).len();
            let outs = p.on_client(&call(id, "slow", json!({"n": id})), at);
            ran += server(&outs).len();
        }
    }
    assert_eq!(ran, 2, "only two calls ran on a budget of two");
    assert_eq!(s.used(), (0, 2));
    // Renewal is due within a third of the TTL.
    assert!(p.next_deadline().is_some_and(|d| d <= T0 + 5_000 + ttl / 3));
}

/// Hostile trial of issue 29's fix, F1: a `tools/call` took over the
/// id of a request still awaiting its answer, so the server's error
/// for that request gave the call back and the call's own result went
/// through unchecked. Refused, not forwarded; `1.0` and `1` are one id.
#[test]
fn a_call_may_not_take_the_id_of_a_request_awaiting_its_answer() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    for (first, id) in [
        (r#"{"jsonrpc":"2.0","id":5,"method":"nosuch/method"}"#, 5),
        (r#"{"jsonrpc":"2.0","id":6.0,"method":"nosuch/method"}"#, 6),
        (r#"{"jsonrpc":"2.0","id":7e0,"method":"nosuch/method"}"#, 7),
    ] {
        assert_eq!(server(&p.on_client(first.as_bytes(), T0)).len(), 1);
        let outs = p.on_client(&call(id, "t", json!({"i": id})), T0);
        assert!(server(&outs).is_empty(), "{outs:?}");
        assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
        // The server's error for the request is its own, nothing more.
        let error =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"no"}}}}"#);
        assert_eq!(client(&p.on_server(error.as_bytes(), T0)).len(), 1);
    }
    assert_eq!(s.used(), (0, 0));
    // In one batch, the same.
    let batch = format!(
        "[{},{}]",
        r#"{"jsonrpc":"2.0","id":9,"method":"nosuch/method"}"#,
        String::from_utf8(call(9, "t", json!({}))).unwrap()
    );
    let outs = p.on_client(batch.as_bytes(), T0);
    assert_eq!(
        server(&outs),
        [r#"[{"jsonrpc":"2.0","id":9,"method":"nosuch/method"}]"#]
    );
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    // An id past 2^53 cannot be told apart by a JavaScript server.
    let big = br#"{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"t","arguments":{}}}"#;
    let outs = p.on_client(big, T0);
    assert!(server(&outs).is_empty());
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
}

/// F2: an answer that is no JSON-RPC error (`result: null`, neither
/// member, `error: null`) gave the call back. Counted, and withheld
/// when it is no result object.
#[test]
fn only_a_json_rpc_error_object_gives_a_call_back() {
    let s = Setup::new();
    let mut p = s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 9\n");
    let answers = [
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
        r#"{"jsonrpc":"2.0","id":2}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":null,"error":null}"#,
        r#"{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"x"},"result":{"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":5,"error":"not an object"}"#,
    ];
    for (n, a) in answers.iter().enumerate() {
        let id = n as u64 + 1;
        p.on_client(&call(id, "t", json!({"i": id})), T0);
        let outs = client(&p.on_server(a.as_bytes(), T0));
        assert_eq!(outs[0]["result"]["isError"], true, "{a}: {outs:?}");
        assert_eq!(s.used(), (id, 0), "{a}");
    }
    p.on_client(&call(6, "t", json!({"i": 6})), T0);
    p.on_server(
        br#"{"jsonrpc":"2.0","id":6,"error":{"code":-32602,"message":"bad"}}"#,
        T0,
    );
    assert_eq!(s.used(), (5, 0), "a JSON-RPC error gives it back");
}

/// F3: a second answer to the same id went through unchecked (a result
/// after an error: uncounted and unbounded). Dropped; a result after
/// the error counts the call after all.
#[test]
fn a_second_answer_to_one_id_is_dropped_and_a_result_after_an_error_counts() {
    let s = Setup::new();
    let mut p =
        s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 9\nmax_result_bytes = 100\n");
    let big = json!({"content": [{"type": "text", "text": "x".repeat(2_000)}]});
    p.on_client(&call(1, "t", json!({})), T0);
    p.on_server(
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#,
        T0,
    );
    assert_eq!(s.used(), (0, 0));
    assert!(p.on_server(&answer(1, big.clone()), T0).is_empty());
    assert_eq!(s.used(), (1, 0), "it ran after all");
    assert!(p.on_server(&answer(1, big.clone()), T0).is_empty());
    assert_eq!(s.used(), (1, 0), "counted once");
    p.on_client(&call(2, "t", json!({"n": 2})), T0);
    assert_eq!(
        client(&p.on_server(&answer(2, json!({"content": []})), T0)).len(),
        1
    );
    assert!(p.on_server(&answer(2, big), T0).is_empty());
    assert_eq!(s.used(), (2, 0));
}

/// F4: a member of a server batch that is no JSON-RPC message went
/// through unchecked (one line with the same fault is dropped).
#[test]
fn a_batch_member_that_cannot_be_read_is_dropped() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(1, "t", json!({})), T0);
    let x = "x".repeat(2_000);
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"result":{{"a":"{x}"}},"result":{{"b":"{x}"}}}},{{"jsonrpc":"2.0","method":5}},{{"jsonrpc":"2.0","method":"notifications/message","params":{{}}}}]"#
    );
    let outs = client(&p.on_server(batch.as_bytes(), T0));
    assert_eq!(outs.len(), 1);
    let kept = outs[0].as_array().expect("a batch");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["method"], "notifications/message");
}

/// Hostile trial, round 2, finding 1: a ping took the id of a call given
/// back on the server's error, and the call's late 3 KB result reached the
/// client as the ping's answer, uncounted. The id stays taken; the late
/// result is counted and dropped.
#[test]
fn no_request_takes_the_id_of_a_call_whose_answer_may_still_come() {
    let s = Setup::new();
    let mut p =
        s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\nmax_result_bytes = 100\n");
    p.on_client(&call(1, "t", json!({})), T0);
    p.on_server(
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#,
        T0,
    );
    assert_eq!(s.used(), (0, 0));
    let outs = p.on_client(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, T0);
    assert!(server(&outs).is_empty(), "{outs:?}");
    assert_eq!(client(&outs)[0]["error"]["code"], INVALID_REQUEST);
    let late = answer(
        1,
        json!({"content": [{"type": "text", "text": "x".repeat(3_000)}]}),
    );
    assert!(p.on_server(&late, T0).is_empty());
    assert_eq!(s.used(), (1, 0));
    // Answered here (lost), the same: its id stays taken.
    assert_eq!(server(&p.on_client(&call(2, "u", json!({})), T0)).len(), 1);
    let _ = p.on_no_answer("2", Ran::Maybe, "did not answer", T0);
    assert!(server(&p.on_client(br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#, T0)).is_empty());
}

/// Round 2, finding 2: 256 calls given back on their errors pushed the
/// first out of memory, so its late result went uncounted.
#[test]
fn a_late_result_counts_after_hundreds_of_calls_given_back() {
    let s = Setup::new();
    let mut p = s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n");
    let error = |n: u64| {
        format!(r#"{{"jsonrpc":"2.0","id":{n},"error":{{"code":-32000,"message":"no"}}}}"#)
    };
    p.on_client(&call(1, "t", json!({})), T0);
    p.on_server(error(1).as_bytes(), T0);
    for n in 100..400u64 {
        assert_eq!(
            server(&p.on_client(&call(n, "t", json!({"n": n})), T0)).len(),
            1
        );
        p.on_server(error(n).as_bytes(), T0);
    }
    p.on_server(&answer(1, json!({"content": []})), T0);
    assert_eq!(s.used(), (1, 0));
    assert!(server(&p.on_client(&call(2, "t", json!({"n": 2})), T0)).is_empty());
}

/// Round 2, finding 3: a late result's count that failed was only logged,
/// and calls went on. Kept, and no call is let through until it lands.
#[test]
fn a_late_count_that_fails_is_kept_and_calls_wait_for_it() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n";
    let mut p = Proxy::new(
        s.gate_with_timeout(budget, 60_000, 50),
        "a".into(),
        4096,
        1_000,
    );
    p.on_client(&call(1, "t", json!({})), T0);
    p.on_server(
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#,
        T0,
    );
    let blocker = s.lock_ledger();
    p.on_server(&answer(1, json!({"content": []})), T0);
    assert_eq!(p.unsettled(), 1, "the failed count is kept");
    drop(blocker);
    let outs = p.on_client(&call(2, "t", json!({"n": 2})), T0);
    assert!(server(&outs).is_empty(), "{outs:?}");
    assert_eq!(p.unsettled(), 0);
    assert_eq!(s.used(), (1, 0));
}

/// Round 2, finding 5: ids of 1e19 and more were keyed apart from their
/// integer spellings (and -0 from 0).
#[test]
fn ids_are_keyed_as_the_double_a_peer_reads() {
    let key = |t: &str| normal_id(&serde_json::from_str::<Box<RawValue>>(t).unwrap());
    assert_eq!(key("1e19"), key("10000000000000000000"));
    assert_eq!(key("-0"), key("0"));
    assert_eq!(key("-0.0"), key("0e5"));
    assert_eq!(key("1.0"), key("1"));
    assert_eq!(key("9007199254740993"), key("9007199254740992"));
    assert_ne!(key("1"), key("\"1\""));
    assert_ne!(key("1.5"), key("1"));
}

/// A call waiting for approval keeps its reservation past the TTL.
#[test]
fn a_call_awaiting_approval_keeps_its_reservation_past_the_ttl() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 1\n[tools]\nneeds_approval = [\"send_mail\"]\n";
    let mut p = Proxy::new(s.gate(budget, 2_000), "a".into(), 4096, 30_000);
    p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
    let outs = p.on_client(&call(1, "send_mail", json!({"to": "a"})), T0);
    let eid = client(&outs)[0]["id"].clone();
    let mut other = s.proxy(budget);
    for t in (T0..T0 + 10_000).step_by(200) {
        p.on_tick(t);
        let outs = other.on_client(&call(t, "ls", json!({"t": t})), t);
        assert!(
            server(&outs).is_empty(),
            "another call ran at {t}: {outs:?}"
        );
    }
    let accept =
        json!({"jsonrpc": "2.0", "id": eid, "result": {"action": "accept", "content": {}}});
    let outs = p.on_client(accept.to_string().as_bytes(), T0 + 10_000);
    assert_eq!(server(&outs).len(), 1, "the approved call runs: {outs:?}");
    assert_eq!(s.used(), (0, 1));
}

/// Issue 29, reproduction 2: a commit that failed was lost, and the
/// reservation expired and was given back. A failed commit is kept,
/// made again before the next decision, and calls are refused until it
/// lands.
#[test]
fn a_failed_commit_is_kept_and_calls_are_refused_until_it_lands() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 3600\nmax_tool_calls = 2\n";
    let mut p = Proxy::new(
        s.gate_with_timeout(budget, 2_000, 50),
        "a".into(),
        4096,
        1_000,
    );
    assert_eq!(
        server(&p.on_client(&call(1, "t", json!({"i": 1})), T0)).len(),
        1
    );
    // Another process holds the ledger's write lock while the answer comes.
    let blocker = s.lock_ledger();
    p.on_server(&answer(1, json!({"content": []})), T0 + 1_000);
    assert_eq!(p.unsettled(), 1, "the failed commit is kept");
    let outs = p.on_client(&call(2, "t", json!({"i": 2})), T0 + 3_000);
    assert!(server(&outs).is_empty());
    assert_eq!(
        client(&outs)[0]["result"]["_meta"]["budgetgate"]["reason"],
        "gate-error"
    );
    drop(blocker);
    // Past the TTL: the commit lands before the decision; nothing was
    // given back by expiry.
    let mut ran = 0;
    for n in 3..=6 {
        ran += server(&p.on_client(&call(n, "t", json!({"i": n})), T0 + 4_000 + n)).len();
    }
    assert_eq!(ran, 1, "one more call on a budget of two");
    assert_eq!(p.unsettled(), 0);
    assert_eq!(s.used(), (1, 1));
}

/// Issue 29, reproduction 4, over stdio: an answer over 16 MiB was
/// dropped and its call never answered (then given back). Its call is
/// counted and answered with a withheld result.
#[test]
fn an_answer_over_the_line_bound_counts_its_call_and_is_answered_withheld() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(7, "slow", json!({})), T0);
    let outs = client(&p.on_server_too_long(Some("7"), T0));
    assert_eq!(outs[0]["id"], 7);
    assert_eq!(outs[0]["result"]["isError"], true);
    let text = outs[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("longer than 16 MiB"), "{text}");
    assert_eq!(s.used(), (1, 0));
    // An id not awaited (or unreadable): dropped; a call stays reserved.
    p.on_client(&call(8, "slow", json!({})), T0);
    assert!(p.on_server_too_long(Some("99"), T0).is_empty());
    assert!(p.on_server_too_long(None, T0).is_empty());
    assert_eq!(s.used(), (1, 1));
}

/// Issue 29, reproduction 5: an upstream that timed out or broke off
/// after the request was sent had its call given back. Counted unless
/// the request never reached the server.
#[test]
fn a_call_with_no_answer_counts_unless_it_never_reached_the_server() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    p.on_client(&call(1, "slow", json!({})), T0);
    p.on_client(&call(2, "slow", json!({"n": 2})), T0);
    let outs = client(&p.on_no_answer("1", Ran::Maybe, "did not answer within 1 s", T0));
    assert_eq!(outs[0]["result"]["isError"], true);
    assert_eq!(s.used(), (1, 1));
    let outs = client(&p.on_no_answer("2", Ran::No, "could not be reached", T0));
    assert_eq!(outs[0]["error"]["code"], GATEWAY_ERROR);
    assert!(outs[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("did not run"));
    assert_eq!(s.used(), (1, 0));
    assert!(p.on_no_answer("2", Ran::Maybe, "again", T0).is_empty());
    assert_eq!(s.used(), (1, 0));
}

#[test]
fn rate_windows_refuse_with_when_they_reopen() {
    let s = Setup::new();
    let budget = "[budget]\nmax_seconds = 100000\n[rate]\nper_minute = 2\n";
    let mut p = s.proxy(budget);
    for (id, at) in [(1, T0), (2, T0 + 10_000)] {
        assert_eq!(
            server(&p.on_client(&call(id, "t", json!({"i": id})), at)).len(),
            1
        );
    }
    let outs = p.on_client(&call(3, "t", json!({"i": 3})), T0 + 20_000);
    let meta = &client(&outs)[0]["result"]["_meta"]["budgetgate"];
    assert_eq!(meta["reason"], "rate-limit");
    assert_eq!(meta["limit"], "per_minute");
    assert_eq!(meta["retry_after"], 40);
    assert_eq!(
        server(&p.on_client(&call(4, "t", json!({"i": 4})), T0 + 60_000)).len(),
        1
    );
}

#[test]
fn a_batch_is_split_around_its_gated_calls() {
    let s = Setup::new();
    let mut p = s.proxy("[budget]\nmax_seconds = 3600\nmax_tool_calls = 0\n");
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}},{"jsonrpc":"2.0","method":"n"}]"#;
    let outs = p.on_client(batch.as_bytes(), T0);
    assert_eq!(
        server(&outs),
        [r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#]
    );
    assert_eq!(client(&outs)[0]["id"], 2);
}

#[test]
fn a_line_over_the_limit_is_skipped_while_read() {
    let mut input = b"{\"a\":1}\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 1000));
    // A message over the limit: its top-level id is read as it passes.
    input.extend(b"\n{\"result\":{\"id\":1,\"text\":\"");
    input.extend(std::iter::repeat_n(b'y', 1000));
    input.extend(b"\"},\"id\":\"c-7\"}");
    input.extend(b"\n{}\nlast");
    // In one chunk, and a byte at a time: the same lines.
    for size in [input.len(), 1, 7] {
        let mut lines = Lines::new(100);
        for chunk in input.chunks(size) {
            lines.feed(chunk);
        }
        lines.finish();
        let got: Vec<Line> = std::iter::from_fn(|| lines.take_line()).collect();
        assert_eq!(
            got,
            [
                Line::Text(b"{\"a\":1}".to_vec()),
                Line::TooLong(None),
                Line::TooLong(Some("\"c-7\"".into())),
                Line::Text(b"{}".to_vec()),
                Line::Text(b"last".to_vec()),
            ],
            "chunks of {size}"
        );
    }
    // A line of exactly the limit is kept; one byte more is not.
    let mut lines = Lines::new(4);
    lines.feed(b"abcd\nabcde\n");
    assert_eq!(lines.take_line(), Some(Line::Text(b"abcd".to_vec())));
    assert_eq!(lines.take_line(), Some(Line::TooLong(None)));
    assert_eq!(lines.take_line(), None);
}

#[test]
fn serve_over_pipes_with_a_server_that_answers_and_exits() {
    let s = Setup::new();
    let mut p = s.proxy(BUDGET);
    let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
    let (from_gateway, server_in) = std::io::pipe().expect("pipe");
    let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
    // A server answering two requests and exiting once it read the third.
    std::thread::spawn(move || {
        let mut lines = BufReader::new(from_gateway).lines();
        for _ in 0..2 {
            let line = lines.next().expect("a line").expect("read");
            let v: Value = serde_json::from_str(&line).expect("JSON");
            let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"content": []}});
            writeln!(server_writes, "{reply}").expect("write");
        }
        let _third = lines.next();
    });
    writeln!(
        to_gateway,
        "{}",
        String::from_utf8(call(1, "a", json!({}))).unwrap()
    )
    .unwrap();
    writeln!(
        to_gateway,
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}}"
    )
    .unwrap();
    writeln!(
        to_gateway,
        "{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}}"
    )
    .unwrap();
    let mut out = Vec::new();
    let ending = serve(
        &mut p,
        client_in,
        &mut out,
        server_in,
        server_out,
        &mut || None,
        Duration::from_secs(2),
        None,
    );
    assert_eq!(ending, Ending::ServerGone("closed its stdout".into()));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3);
    assert_eq!(
        (lines[0]["id"].clone(), lines[1]["id"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(lines[2]["error"]["code"], GATEWAY_ERROR);
    assert_eq!(s.used(), (1, 0));
}

#[test]
fn lines_longer_than_a_pipe_reach_a_slow_server_whole_and_in_order() {
    let s = Setup::new();
    let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
    let (from_gateway, server_in) = std::io::pipe().expect("pipe");
    let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
    // A server that reads slowly, 4 KiB at a time (so the gateway's
    // non-blocking writes stop part-way through a line), and answers
    // with what it got.
    struct Slow(std::io::PipeReader);
    impl std::io::Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_micros(200));
            let n = buf.len().min(4096);
            self.0.read(&mut buf[..n])
        }
    }
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(4096, Slow(from_gateway));
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).expect("read") == 0 {
                return;
            }
            let v: Value = serde_json::from_slice(&line).expect("one whole line");
            let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"got": line.len(), "pad": v["params"]["pad"]}});
            writeln!(server_writes, "{reply}").expect("write");
        }
    });
    std::thread::spawn(move || {
        for (i, size) in [300_000usize, 70_000, 1].into_iter().enumerate() {
            let pad: String = "abcdefghij".chars().cycle().take(size).collect();
            let msg = json!({"jsonrpc": "2.0", "id": i, "method": "x/big", "params": {"pad": pad}});
            writeln!(to_gateway, "{msg}").expect("write");
        }
    });
    let mut p = s.proxy(BUDGET);
    let mut out = Vec::new();
    let ending = serve(
        &mut p,
        client_in,
        &mut out,
        server_in,
        server_out,
        &mut || None,
        Duration::from_secs(5),
        None,
    );
    assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3);
    for (i, (line, size)) in lines.iter().zip([300_000usize, 70_000, 1]).enumerate() {
        assert_eq!(line["id"], i, "in order");
        assert_eq!(line["result"]["pad"].as_str().map(str::len), Some(size));
    }
}

/// Issue 13 (faults): after the client closed its stdin, an answer
/// longer than one read (64 KiB) from a server already known to have
/// exited is read to its end and reaches the client, and the call is
/// committed once.
#[test]
fn a_long_last_answer_of_a_server_that_exited_reaches_a_client_that_closed() {
    let s = Setup::new();
    let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
    let (from_gateway, server_in) = std::io::pipe().expect("pipe");
    let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
    let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let told = std::sync::Arc::clone(&exited);
    std::thread::spawn(move || {
        let mut lines = BufReader::new(from_gateway).lines();
        let line = lines.next().expect("a line").expect("read");
        let v: Value = serde_json::from_str(&line).expect("JSON");
        let text: String = "x".repeat(300_000);
        let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {"content": [{"type": "text", "text": text}]}});
        writeln!(server_writes, "{reply}").expect("write");
        // Reported gone once its last write is in the pipe, before the
        // gateway has read it: a process that wrote its answer and ended.
        // (Reported earlier, before the answer was written, the test
        // raced the writer: a real process cannot write after its exit.)
        told.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    writeln!(
        to_gateway,
        "{}",
        String::from_utf8(call(7, "a", json!({}))).unwrap()
    )
    .unwrap();
    drop(to_gateway);
    let mut p = s.proxy(BUDGET);
    let mut out = Vec::new();
    let ending = serve(
        &mut p,
        client_in,
        &mut out,
        server_in,
        server_out,
        &mut || {
            exited
                .load(std::sync::atomic::Ordering::SeqCst)
                .then(|| "exited with status 0".to_owned())
        },
        Duration::from_secs(5),
        None,
    );
    assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
    drop(p);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "the answer reached the client");
    assert_eq!(lines[0]["id"], 7);
    assert_eq!(s.used(), (1, 0));
}

#[test]
fn a_flood_both_ways_never_deadlocks_the_proxy() {
    let s = Setup::new();
    let (client_in, mut to_gateway) = std::io::pipe().expect("pipe");
    let (from_gateway, server_in) = std::io::pipe().expect("pipe");
    let (server_out, mut server_writes) = std::io::pipe().expect("pipe");
    // A server answering every line at once (and writing a notification
    // besides), so both pipes fill faster than they are read.
    std::thread::spawn(move || {
        for line in BufReader::new(from_gateway).lines() {
            let Ok(line) = line else { return };
            let v: Value = serde_json::from_str(&line).expect("JSON");
            let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
            let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {}});
            if writeln!(server_writes, "{note}\n{reply}").is_err() {
                return;
            }
        }
    });
    const N: usize = 20_000;
    let (client_reads, client_out) = std::io::pipe().expect("pipe");
    // The client reads everything, and closes once it has every line.
    let (seen_tx, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut count = 0;
        for line in BufReader::new(client_reads).lines() {
            if line.is_err() {
                return;
            }
            count += 1;
            if count == 2 * N {
                let _ = seen_tx.send(count);
            }
        }
    });
    let (closed_tx, closed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for i in 0..N {
            writeln!(
                to_gateway,
                r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#
            )
            .expect("write");
        }
        let _ = closed_tx.send(seen.recv_timeout(Duration::from_secs(60)));
    });
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut p = s.proxy(BUDGET);
        let mut out = client_out;
        let ending = serve(
            &mut p,
            client_in,
            &mut out,
            server_in,
            server_out,
            &mut || None,
            Duration::from_secs(2),
            None,
        );
        let _ = done_tx.send(ending);
    });
    let ending = done
        .recv_timeout(Duration::from_secs(90))
        .expect("no deadlock");
    assert!(matches!(ending, Ending::ClientClosed { .. }), "{ending:?}");
    let lines = closed
        .recv_timeout(Duration::from_secs(5))
        .expect("the client")
        .expect("every line in time");
    assert_eq!(lines, 2 * N, "every answer and notification passed on");
}

#[test]
fn default_sessions_name_the_command() {
    let a = default_session(&["/usr/bin/npx".into(), "-y".into(), "srv".into()]);
    assert!(a.starts_with("mcp-npx-"), "{a}");
    assert_eq!(a.len(), "mcp-npx-".len() + 16);
    assert_ne!(
        a,
        default_session(&["/usr/bin/npx".into(), "-y srv".into()])
    );
    assert_eq!(
        a,
        default_session(&["/usr/bin/npx".into(), "-y".into(), "srv".into()])
    );
}
