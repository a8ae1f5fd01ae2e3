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
