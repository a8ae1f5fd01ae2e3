//! Unit tests of the gateway with MCP 2026-07-28 (stateless) requests:
//! answers in the shape of each request's generation, and approval by
//! `InputRequiredResult` ([`crate::mcp::request_state`]).

use super::*;

const T0: u64 = 1_000_000;
const VERSION: &str = "2026-07-28";

fn gate(dir: &tempfile::TempDir, budget: &str) -> LedgerGate {
    let store = crate::store::Store::open(dir.path(), Duration::from_secs(5)).expect("ledger");
    let budget = crate::gate::budget_file::parse_budget(budget).expect("budget");
    LedgerGate::new(store, budget, "s".into(), 60_000)
}

fn proxy(dir: &tempfile::TempDir, budget: &str) -> Proxy<LedgerGate> {
    let gate = gate(dir, budget);
    let max = gate.budget.max_result_bytes;
    Proxy::new(gate, "c1".into(), max, 1_000)
}

/// A stateless `tools/call` (its `_meta` names the protocol version and
/// the client's capabilities), with `extra` members in its params.
fn modern_call(id: u64, tool: &str, args: Value, capabilities: Value, extra: Value) -> Vec<u8> {
    let mut params = json!({
        "name": tool,
        "arguments": args,
        "_meta": {
            generation::PROTOCOL_VERSION_META: VERSION,
            generation::CLIENT_CAPABILITIES_META: capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        },
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
        .to_string()
        .into_bytes()
}

fn old_call(id: u64, tool: &str, args: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
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

fn server(outs: &[Out]) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Server(l) => Some(serde_json::from_str(l).expect("JSON")),
            _ => None,
        })
        .collect()
}

fn used(dir: &tempfile::TempDir) -> (u64, u64) {
    let store = crate::store::Store::open(dir.path(), Duration::from_secs(5)).expect("ledger");
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

#[test]
fn the_gateways_own_answers_take_the_shape_of_the_requests_generation() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(
        &dir,
        "[budget]\nmax_seconds = 3600\nmax_tool_calls = 3\nmax_result_bytes = 100\n",
    );
    // Let through, answered by the server: its result passes unchanged.
    let outs = p.on_client(
        &modern_call(1, "echo", json!({"m": 1}), json!({}), json!({})),
        T0,
    );
    assert_eq!(server(&outs).len(), 1);
    let result = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#;
    assert_eq!(
        p.on_server(result.as_bytes(), T0 + 1),
        vec![Out::Client(result.into())]
    );
    // A result over the bound, withheld in the stateless shape.
    p.on_client(
        &modern_call(2, "echo", json!({"m": 2}), json!({}), json!({})),
        T0 + 2,
    );
    let long = json!({"jsonrpc": "2.0", "id": 2,
        "result": {"resultType": "complete", "content": [{"type": "text", "text": "x".repeat(200)}]}});
    let withheld = client(&p.on_server(long.to_string().as_bytes(), T0 + 3));
    assert_eq!(
        withheld[0]["result"]["resultType"], "complete",
        "{withheld:?}"
    );
    assert_eq!(withheld[0]["result"]["isError"], true);
    // A handshake-era call on the same connection: its answers have no
    // `resultType`, which that generation's schema does not know.
    p.on_client(&old_call(3, "echo", json!({"m": 3})), T0 + 4);
    let long = json!({"jsonrpc": "2.0", "id": 3,
        "result": {"content": [{"type": "text", "text": "x".repeat(200)}]}});
    let withheld = client(&p.on_server(long.to_string().as_bytes(), T0 + 5));
    assert_eq!(withheld[0]["result"]["isError"], true);
    assert!(
        withheld[0]["result"].get("resultType").is_none(),
        "{withheld:?}"
    );
    // Refused by the budget (3 of 3 used): each in its own generation.
    let refused = client(&p.on_client(
        &modern_call(4, "echo", json!({"m": 4}), json!({}), json!({})),
        T0 + 6,
    ));
    assert_eq!(refused[0]["result"]["resultType"], "complete");
    assert_eq!(
        refused[0]["result"]["_meta"]["budgetgate"]["reason"],
        "tool-budget"
    );
    let refused = client(&p.on_client(&old_call(5, "echo", json!({"m": 5})), T0 + 7));
    assert_eq!(
        refused[0]["result"]["_meta"]["budgetgate"]["reason"],
        "tool-budget"
    );
    assert!(refused[0]["result"].get("resultType").is_none());
    // A server that breaks off before answering: the call's error result
    // in the call's generation.
    let dir2 = tempfile::tempdir().expect("dir");
    let mut p = proxy(&dir2, "[budget]\nmax_seconds = 3600\n");
    p.on_client(&modern_call(7, "echo", json!({}), json!({}), json!({})), T0);
    let gone = client(&p.on_server_exit("exited", T0 + 1));
    assert_eq!(gone[0]["result"]["resultType"], "complete", "{gone:?}");
    assert_eq!(used(&dir2), (1, 0));
}

const ASKS: &str = "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"send_mail\"]\n";

fn eliciting() -> Value {
    json!({"elicitation": {}})
}

/// The state and the elicitation request of an `InputRequiredResult`.
fn asked(outs: &[Out]) -> (String, Value) {
    let c = client(outs);
    assert_eq!(c.len(), 1, "{c:?}");
    let r = &c[0]["result"];
    assert_eq!(r["resultType"], "input_required", "{r}");
    let state = r["requestState"].as_str().expect("a state").to_owned();
    (state, r["inputRequests"][request_state::INPUT_KEY].clone())
}

fn retry(id: u64, tool: &str, args: Value, state: &str, action: Option<&str>) -> Vec<u8> {
    let mut extra = json!({"requestState": state});
    if let Some(a) = action {
        extra["inputResponses"] = json!({request_state::INPUT_KEY: {"action": a, "content": {}}});
    }
    modern_call(id, tool, args, eliciting(), extra)
}

fn refusal_text(outs: &[Out]) -> String {
    let c = client(outs);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["result"]["resultType"], "complete", "{c:?}");
    assert_eq!(
        c[0]["result"]["_meta"]["budgetgate"]["reason"], "approval-refused",
        "{c:?}"
    );
    c[0]["result"]["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}

#[test]
fn an_accepted_retry_is_forwarded_without_the_gateways_state_under_the_first_reservation() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(&dir, ASKS);
    let args = json!({"to": "a@b", "n": 1});
    let outs = p.on_client(
        &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
        T0,
    );
    assert!(server(&outs).is_empty());
    let (state, request) = asked(&outs);
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "form");
    assert!(request["params"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("send_mail"));
    assert_eq!(used(&dir), (0, 1), "reserved while the retry is awaited");
    // Keys in another order are the same arguments.
    let outs = p.on_client(
        &retry(
            2,
            "send_mail",
            json!({"n": 1, "to": "a@b"}),
            &state,
            Some("accept"),
        ),
        T0 + 10,
    );
    let sent = server(&outs);
    assert_eq!(sent.len(), 1, "{outs:?}");
    assert_eq!(sent[0]["id"], 2);
    assert_eq!(sent[0]["params"]["name"], "send_mail");
    assert!(
        sent[0]["params"].get("requestState").is_none(),
        "{}",
        sent[0]
    );
    assert!(
        sent[0]["params"].get("inputResponses").is_none(),
        "{}",
        sent[0]
    );
    assert_eq!(
        sent[0]["params"]["_meta"][generation::PROTOCOL_VERSION_META],
        VERSION
    );
    let result = r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","content":[]}}"#;
    assert_eq!(
        p.on_server(result.as_bytes(), T0 + 20),
        vec![Out::Client(result.into())]
    );
    assert_eq!(used(&dir), (1, 0));
    // The state is used once.
    let outs = p.on_client(
        &retry(3, "send_mail", args, &state, Some("accept")),
        T0 + 30,
    );
    assert!(server(&outs).is_empty());
    assert!(refusal_text(&outs).contains("already used"));
    assert_eq!(used(&dir), (1, 0));
}

#[test]
fn a_declined_stale_or_mismatched_retry_is_refused_and_counted() {
    for (how, want) in [
        ("decline", "the person declined it"),
        ("cancel", "the person dismissed the request"),
        ("ACCEPT", "the client answered \"ACCEPT\", not accept"),
        ("stale", "no answer came within 1 s"),
        ("arguments", "not the ones the approval was asked about"),
        ("tool", "not the ones the approval was asked about"),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let mut p = proxy(&dir, ASKS);
        let args = json!({"to": "a@b"});
        let (state, _) = asked(&p.on_client(
            &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
            T0,
        ));
        let (tool, args, action, at) = match how {
            "stale" => ("send_mail", args, "accept", T0 + 1_000),
            "arguments" => ("send_mail", json!({"to": "c@d"}), "accept", T0 + 10),
            "tool" => ("send_mail2", args, "accept", T0 + 10),
            _ => ("send_mail", args, how, T0 + 10),
        };
        let outs = p.on_client(&retry(2, tool, args, &state, Some(action)), at);
        assert!(server(&outs).is_empty(), "{how}: {outs:?}");
        let text = refusal_text(&outs);
        assert!(text.contains(want), "{how}: {text}");
        assert_eq!(used(&dir), (1, 0), "{how}: the attempt counts");
    }
}

#[test]
fn a_forged_state_is_refused_and_ends_nothing_the_gateway_holds() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(&dir, ASKS);
    let args = json!({"to": "a@b"});
    let (state, _) = asked(&p.on_client(
        &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
        T0,
    ));
    // One character of the payload changed; a state of another key (a
    // gateway run before a restart); one made up.
    let mut edited = state.clone().into_bytes();
    edited[6] = if edited[6] == b'A' { b'B' } else { b'A' };
    let edited = String::from_utf8(edited).expect("ASCII");
    let other_key = request_state::Sealer::with_key([1; 32]).seal(&request_state::Claims {
        nonce: 1,
        tool: "send_mail".into(),
        arguments: request_state::arguments_digest(&args),
        binding: "c1".into(),
        deadline_ms: u64::MAX,
    });
    for forged in [edited.as_str(), other_key.as_str(), "bg1.e30.AAAA"] {
        let outs = p.on_client(
            &retry(2, "send_mail", args.clone(), forged, Some("accept")),
            T0 + 10,
        );
        assert!(server(&outs).is_empty(), "{forged}");
        let text = refusal_text(&outs);
        assert!(
            text.contains("signature") || text.contains("not one the gateway wrote"),
            "{forged}: {text}"
        );
    }
    assert_eq!(
        used(&dir),
        (0, 1),
        "the real question still awaits its retry"
    );
    // Its deadline passes with no retry: counted, as a question unanswered.
    assert!(p.next_deadline().is_some_and(|d| d <= T0 + 1_000));
    p.on_tick(T0 + 1_000);
    assert_eq!(used(&dir), (1, 0));
    let outs = p.on_client(
        &retry(3, "send_mail", args, &state, Some("accept")),
        T0 + 1_001,
    );
    assert!(
        refusal_text(&outs).contains("after the approval's deadline (no answer came within 1 s)")
    );
}

#[test]
fn a_state_of_another_session_is_refused_and_left_to_its_own() {
    let dir = tempfile::tempdir().expect("dir");
    let retries = AwaitedRetries::shared();
    let mut a = proxy(&dir, ASKS);
    a.share_retries(std::sync::Arc::clone(&retries), "e2e/session-a".into());
    let mut b = proxy(&dir, ASKS);
    b.share_retries(std::sync::Arc::clone(&retries), "e2e/session-b".into());
    let args = json!({"to": "a@b"});
    let (state, _) = asked(&a.on_client(
        &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
        T0,
    ));
    let outs = b.on_client(
        &retry(2, "send_mail", args.clone(), &state, Some("accept")),
        T0 + 1,
    );
    assert!(refusal_text(&outs).contains("another session"));
    // The session it was asked on retries it: forwarded.
    let outs = a.on_client(&retry(2, "send_mail", args, &state, Some("accept")), T0 + 2);
    assert_eq!(server(&outs).len(), 1, "{outs:?}");
}

#[test]
fn a_retry_without_an_answer_is_asked_again_and_a_client_gone_gives_the_call_back() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(&dir, ASKS);
    let args = json!({"to": "a@b"});
    let (state, _) = asked(&p.on_client(
        &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
        T0,
    ));
    let (again, _) = asked(&p.on_client(&retry(2, "send_mail", args, &state, None), T0 + 1));
    assert_eq!(again, state);
    assert_eq!(used(&dir), (0, 1));
    p.on_client_closed(T0 + 2);
    assert_eq!(used(&dir), (0, 0), "never reached the server: given back");
}

#[test]
fn without_the_elicitation_capability_a_stateless_call_is_refused_never_asked_by_request() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(&dir, ASKS);
    // Even a connection that declared elicitation in a handshake: a
    // stateless request is asked only by `InputRequiredResult`.
    p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, T0);
    let outs = p.on_client(
        &modern_call(1, "send_mail", json!({}), json!({}), json!({})),
        T0,
    );
    assert!(server(&outs).iter().all(|m| m["method"] != "tools/call"));
    let c = client(&outs);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        c[0]["result"]["_meta"]["budgetgate"]["reason"],
        "approval-refused"
    );
    assert_eq!(c[0]["result"]["resultType"], "complete");
    assert!(c[0].get("method").is_none(), "no elicitation/create: {c:?}");
}

#[test]
fn a_servers_own_input_required_result_passes_untouched_and_its_retry_is_a_call_of_its_own() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(
        &dir,
        "[budget]\nmax_seconds = 3600\n[tools]\nmax_calls = { confirm = 1 }\n",
    );
    p.on_client(
        &modern_call(1, "confirm", json!({}), eliciting(), json!({})),
        T0,
    );
    assert_eq!(used(&dir), (0, 1));
    let own = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"sure?","requestedSchema":{"type":"object","properties":{}}}}},"requestState":"server-state"}}"#;
    assert_eq!(
        p.on_server(own.as_bytes(), T0 + 1),
        vec![Out::Client(own.into())]
    );
    assert_eq!(
        used(&dir),
        (0, 0),
        "the request ended without running the tool"
    );
    // The retry carries the server's state: decided (and counted) as a call.
    let outs = p.on_client(
        &modern_call(
            2,
            "confirm",
            json!({}),
            eliciting(),
            json!({"requestState": "server-state", "inputResponses": {"ok": {"action": "accept"}}}),
        ),
        T0 + 2,
    );
    let sent = server(&outs);
    assert_eq!(
        sent[0]["params"]["requestState"], "server-state",
        "untouched"
    );
    p.on_server(
        br#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","content":[]}}"#,
        T0 + 3,
    );
    assert_eq!(used(&dir), (1, 0));
}

#[test]
fn the_retry_of_an_approved_call_for_its_servers_own_question_is_not_asked_again() {
    let dir = tempfile::tempdir().expect("dir");
    let mut p = proxy(
        &dir,
        "[budget]\nmax_seconds = 3600\nmax_repeats = 20\n[tools]\nneeds_approval = [\"send_mail\"]\n",
    );
    let args = json!({"to": "a@b"});
    let (state, _) = asked(&p.on_client(
        &modern_call(1, "send_mail", args.clone(), eliciting(), json!({})),
        T0,
    ));
    p.on_client(
        &retry(2, "send_mail", args.clone(), &state, Some("accept")),
        T0 + 1,
    );
    let own = r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"sure?","requestedSchema":{"type":"object","properties":{}}}}},"requestState":"server-state"}}"#;
    assert_eq!(
        p.on_server(own.as_bytes(), T0 + 2),
        vec![Out::Client(own.into())]
    );
    assert_eq!(used(&dir), (0, 0));
    let server_retry = |id, args: Value, s: &str| {
        modern_call(
            id,
            "send_mail",
            args,
            eliciting(),
            json!({"requestState": s, "inputResponses": {"ok": {"action": "accept"}}}),
        )
    };
    // Other arguments, or a state the server did not send: asked again.
    let outs = p.on_client(
        &server_retry(3, json!({"to": "x@y"}), "server-state"),
        T0 + 3,
    );
    asked(&outs);
    let outs = p.on_client(&server_retry(4, args.clone(), "another-state"), T0 + 4);
    asked(&outs);
    // The retry for the server's question: forwarded as it came.
    let outs = p.on_client(&server_retry(5, args.clone(), "server-state"), T0 + 5);
    let sent = server(&outs);
    assert_eq!(sent.len(), 1, "{outs:?}");
    assert_eq!(sent[0]["params"]["requestState"], "server-state");
    // Once only.
    asked(&p.on_client(&server_retry(6, args, "server-state"), T0 + 6));
}
