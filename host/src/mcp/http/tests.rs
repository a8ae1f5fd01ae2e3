//! The Streamable HTTP gateway's unit tests (`SPEC C`, `SPEC E`;
//! `docs/MCP.md`, "Streamable HTTP").

use super::body::{merged, request_ids};
use super::questions::route_answers;
use super::server::accepts_stream;
use super::sessions::{waiter_key, Answer};
use super::*;
use crate::mcp::Out;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Duration;

/// A gateway in front of nothing, on a ledger in a new folder (kept
/// while the folder is).
fn gateway(budget: crate::gate::budget_file::ReplayBudget) -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().expect("dir");
    let store = crate::store::Store::open(dir.path(), Duration::from_secs(5)).expect("ledger");
    let gate = LedgerGate::new(store, budget, "s".into(), 60_000);
    let gw = Gateway::new(
        "http://127.0.0.1:1/mcp".into(),
        gate,
        4096,
        Duration::from_secs(1),
        Duration::from_secs(1),
        "t".into(),
        None,
    )
    .expect("gateway");
    (dir, gw)
}

/// Bounded memory (docs/MCP.md, "Streamable HTTP"): at most
/// [`MAX_SESSIONS`] proxies; a new session takes the place of the least
/// recently used idle one, never of one with a request in flight.
#[test]
fn sessions_are_bounded_and_the_least_recently_used_idle_one_gives_way() {
    let (_dir, gw) = gateway(Default::default());
    for i in 0..MAX_SESSIONS {
        assert!(gw.session(&format!("s{i}")).is_some());
    }
    let (busy, _) = gw.session("s0").expect("s0");
    let outs = busy
        .lock()
        .expect("lock")
        .on_client(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 1);
    assert!(matches!(outs.as_slice(), [Out::Server(_)]));
    // s1 is now the least recently used, and idle.
    assert!(gw.session("new").is_some());
    let held = |k: &str| gw.sessions.lock().expect("lock").map.contains_key(k);
    assert!(held("s0") && held("new") && held("s2"));
    assert!(!held("s1"));
    assert_eq!(gw.sessions.lock().expect("lock").map.len(), MAX_SESSIONS);
}

/// Approval over HTTP (docs/MCP.md, "Streamable HTTP"): a client's
/// answer to one of the gateway's questions, or its cancelling of the
/// call asked about, goes to the task that asked; everything else in
/// the body stays, a batch a batch.
#[test]
fn answers_to_the_gateways_questions_go_to_the_task_that_asked() {
    let budget = crate::gate::budget_file::parse_budget(
        "[budget]\nmax_seconds = 3600\n[tools]\nneeds_approval = [\"mail\"]\n",
    )
    .expect("budget");
    let (_dir, gw) = gateway(budget);
    let (proxy, _) = gw.session("s").expect("session");
    let mut p = proxy.lock().expect("lock");
    p.on_client(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#, 1);
    let call = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"mail","arguments":{{"n":{id}}}}}}}"#
        )
    };
    p.on_client(call(1).as_bytes(), 1);
    p.on_client(call(2).as_bytes(), 1);
    let mut asked: Vec<String> = p.asking().into_iter().map(|(eid, _)| eid).collect();
    asked.sort();
    let mut waiting = Vec::new();
    for eid in &asked {
        let (tx, rx) = tokio::sync::oneshot::channel();
        gw.waiters
            .lock()
            .expect("lock")
            .insert(waiter_key(p.connection(), eid), tx);
        waiting.push(rx);
    }
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"action":"accept"}}}}"#,
        asked[0]
    );
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
    // Not an answer: the body as it came. Nor is a message to a
    // question's id that is not a JSON-RPC 2.0 result or error: the
    // proxy answers it (-32600) and the question goes on.
    for bad in [
        format!(
            r#"{{"jsonrpc":"1.0","id":{},"result":{{"action":"accept"}}}}"#,
            asked[0]
        ),
        format!(r#"{{"id":{},"result":{{"action":"accept"}}}}"#, asked[0]),
        format!(r#"{{"jsonrpc":"2.0","id":{},"result":null}}"#, asked[0]),
        format!(r#"{{"jsonrpc":"2.0","id":{}}}"#, asked[0]),
    ] {
        assert!(
            matches!(
                route_answers(&gw, &p, bad.as_bytes()),
                Some(Cow::Borrowed(_))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        route_answers(&gw, &p, ping.as_bytes()),
        Some(Cow::Borrowed(_))
    ));
    let batch = format!("[{answer}, {ping},{cancel}]");
    let rest = route_answers(&gw, &p, batch.as_bytes()).expect("the ping is left");
    assert_eq!(
        std::str::from_utf8(&rest).expect("text"),
        format!("[{ping}]")
    );
    assert_eq!(
        waiting[0].try_recv().expect("handed over"),
        Answer::Client(answer.clone())
    );
    let got = waiting[1].try_recv().expect("handed over");
    assert_eq!(got, Answer::Client(cancel.into()));
    assert!(gw.waiters.lock().expect("lock").is_empty());
    // A waiter gone (its deadline passed): the answer stays in the body,
    // and the proxy drops it as its own.
    assert!(matches!(
        route_answers(&gw, &p, answer.as_bytes()),
        Some(Cow::Borrowed(_))
    ));
    assert_eq!(route_answers(&gw, &p, b"[]").as_deref(), Some(&b"[]"[..]));
}

#[test]
fn a_post_may_be_answered_with_a_stream_when_it_accepts_one() {
    let accepts = |values: &[&str]| {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(ACCEPT, HeaderValue::from_str(v).expect("value"));
        }
        accepts_stream(&h)
    };
    assert!(accepts(&["application/json, text/event-stream"]));
    assert!(accepts(&["application/json", "Text/Event-Stream;q=0.5"]));
    assert!(accepts(&["*/*"]) && accepts(&["text/*"]));
    assert!(!accepts(&["application/json"]) && !accepts(&[]));
    assert!(!accepts(&["text/event-streams"]));
}

#[test]
fn request_ids_are_those_of_requests_only() {
    assert_eq!(
        request_ids(r#"{"jsonrpc":"2.0","id":"\u0061","method":"x"}"#),
        ["\"a\""]
    );
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"x"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"result":{}}]"#;
    assert_eq!(request_ids(batch), ["1"]);
}

#[test]
fn answers_merge_into_one_body() {
    assert_eq!(merged(&["{\"a\":1}".into()]), "{\"a\":1}");
    assert_eq!(
        merged(&["{\"a\":1}".into(), "[{\"b\":2},{\"c\":3}]".into()]),
        "[{\"a\":1},{\"b\":2},{\"c\":3}]"
    );
}

#[test]
fn listen_addresses_default_to_loopback_and_upstreams_are_http_or_https() {
    assert_eq!(
        listen_addr("8080"),
        Ok(SocketAddr::from(([127, 0, 0, 1], 8080)))
    );
    assert!(listen_addr("[::1]:9").is_ok());
    assert!(listen_addr("localhost:80").is_err());
    assert!(upstream_url("http://127.0.0.1:3001/mcp").is_ok());
    assert!(upstream_url("https://example.com/mcp").is_ok());
    assert!(upstream_url("ftp://x/").is_err());
    let loopback: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
    for host in [
        "127.0.0.1:8080",
        "localhost:8080",
        "LOCALHOST",
        "[::1]:8080",
        "127.0.0.1",
    ] {
        assert!(allowed_host(host, loopback), "{host}");
    }
    for host in [
        "evil.example",
        "evil.example:8080",
        "10.0.0.1:8080",
        "",
        "[::2]:8080",
        "127.0.0.1.evil.example",
    ] {
        assert!(!allowed_host(host, loopback), "{host}");
    }
    let lan: SocketAddr = "192.0.2.7:8080".parse().expect("addr");
    assert!(allowed_host("192.0.2.7:8080", lan));
    assert!(!allowed_host("evil.example", lan));
    let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
    assert!(allowed_host("gateway.example:8080", any));
    assert!(local_origin("http://localhost:6274"));
    assert!(local_origin("http://[::1]"));
    assert!(!local_origin("http://evil.example"));
    assert!(!local_origin("http://127.0.0.1.evil.example"));
}
