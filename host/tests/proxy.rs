//! `budgetgate proxy` end to end: the real binary between a client and a
//! scripted model API on loopback (the model itself is the one part that
//! cannot run here: it answers with fixed usage in the real API's shapes).
//! The client here speaks raw HTTP/1.1 so that every byte it gets is seen;
//! tests/proxy/sdk_client.py drives the proxy with the official SDKs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::upstream::*;

#[test]
fn a_token_budget_stops_at_the_model_call_the_seed_loop_would_not_make() {
    let (_dir, _budget, ledger, upstream, proxy) =
        setup("[budget]\nmax_tokens = 2500\nmax_model_calls = 50\n", &[]);
    // 0, 1 100, 2 200 tokens used: each below 2 500, each call made (the
    // second streamed).
    for (at, stream) in [(0, false), (1, true), (2, false)] {
        let a = post(proxy.port, "/v1/messages", &[], &messages(stream));
        assert_eq!(a.status, 200, "call {at}: {}", a.text());
        if stream {
            assert!(a.text().contains("event: message_stop"), "{}", a.text());
        } else {
            assert_eq!(a.json()["usage"]["output_tokens"], OUTPUT);
            assert!(
                a.head.contains("request-id: req_1"),
                "the upstream's headers pass"
            );
        }
    }
    assert_eq!(upstream.count("/v1/messages"), 3);
    // 3 300 used: the fourth call is refused, and never reaches the upstream.
    let a = post(proxy.port, "/v1/messages", &[], &messages(true));
    assert_eq!(a.status, 402, "{}", a.text());
    assert!(a.head.contains("x-should-retry: false"), "{}", a.head);
    let err = a.json();
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "billing_error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("3300 of 2500 tokens used (tokens)"),
        "{message}"
    );
    assert_eq!(upstream.count("/v1/messages"), 3);
    let row = settled_row(&ledger, "proxy");
    assert_eq!(used(&row, "tokens"), 3 * (INPUT + OUTPUT));
    assert_eq!(used(&row, "model_calls"), 3);
    // Said where the proxy runs too, for an operator.
    let said = proxy.said("refused").expect("a line on stderr");
    assert!(
        said.starts_with("budgetgate proxy: refused a model call of session proxy (tokens, "),
        "{said}"
    );
}

#[test]
fn anything_but_a_model_call_passes_through_ungated() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup("[budget]\nmax_model_calls = 1\n", &[]);
    let keyed = [("x-api-key", "sk-test"), ("accept-encoding", "gzip")];
    assert_eq!(
        post(proxy.port, "/v1/messages", &keyed, &messages(false)).status,
        200
    );
    // The client's headers pass, but for the encoding: the proxy reads
    // the answer.
    let head = upstream.last_head();
    assert!(head.contains("x-api-key: sk-test"), "{head}");
    assert!(!head.contains("accept-encoding: gzip"), "{head}");
    assert_eq!(
        post(proxy.port, "/v1/messages", &[], &messages(false)).status,
        402
    );
    // count_tokens is not a model call.
    let a = post(
        proxy.port,
        "/v1/messages/count_tokens?beta=true",
        &[],
        &messages(false),
    );
    assert_eq!(
        (a.status, a.json()["input_tokens"].clone()),
        (200, json!(42))
    );
    assert_eq!(upstream.count("/v1/messages/count_tokens?beta=true"), 1);
    // A billed endpoint it cannot gate is refused, never passed on.
    for path in [
        "/v1/messages/batches",
        "/v1/completions",
        "/v1/responses/compact",
    ] {
        let a = post(proxy.port, path, &[], &messages(false));
        assert_eq!(a.status, 403, "{path}: {}", a.text());
        assert!(a.text().contains("cannot be gated"), "{}", a.text());
        assert_eq!(upstream.count(path), 0, "{path}");
    }
    // Nor is a model call with a matrix parameter.
    assert_eq!(
        post(proxy.port, "/v1/messages;x", &[], &messages(false)).status,
        400
    );
    assert_eq!(upstream.count("/v1/messages;x"), 0);
}

#[test]
fn reserve_mode_refuses_a_call_whose_worst_case_does_not_fit() {
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        "[budget]\nmax_tokens = 5000\nmax_model_calls = 50\ntoken_mode = \"reserve\"\n",
        &[],
    );
    // Worst case: the body's bytes + 4 096 + 100 output, about 4 300: fits
    // in 5 000 once; after 1 100 used, 1 100 + 4 300 does not.
    assert_eq!(
        post(proxy.port, "/v1/messages", &[], &messages(false)).status,
        200
    );
    let a = post(proxy.port, "/v1/messages", &[], &messages(false));
    assert_eq!(a.status, 402);
    let message = a.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("(token-reserve)"), "{message}");
    assert!(message.contains("has 3900 of 5000 left"), "{message}");
    assert_eq!(upstream.count("/v1/messages"), 1);
    let row = settled_row(&ledger, "proxy");
    assert_eq!(used(&row, "tokens"), INPUT + OUTPUT);
}

/// Under a cost limit, a model the budget has no price for is refused at
/// its first call, before the upstream (never let through free to be found
/// out from its response), naming the model and the price to add; nothing
/// is counted, and a priced model's calls are still made.
#[test]
fn a_model_without_a_price_is_refused_at_its_first_call_under_a_cost_limit() {
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        "[budget]\nmax_cost_usd = 1\nmax_model_calls = 50\n\
         [prices.\"claude-priced\"]\ninput = 3\noutput = 15\n",
        &[],
    );
    for stream in [false, true] {
        let a = post(proxy.port, "/v1/messages", &[], &messages(stream));
        assert_eq!(a.status, 402, "{}", a.text());
        let message = a.json()["error"]["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(
            message.starts_with(
                "budgetgate: model \"claude-test\" has no price in the budget, and the session's \
                 cost budget (1000000 micro-USD) never counts a call as free, so it is not made: \
                 add [prices.\"claude-test\"]"
            ),
            "{message}"
        );
        assert!(message.ends_with("(unpriced-model)"), "{message}");
    }
    assert_eq!(upstream.count("/v1/messages"), 0, "never reached");
    let mut priced = messages(false);
    priced["model"] = json!("claude-priced");
    let a = post(proxy.port, "/v1/messages", &[], &priced);
    assert_eq!(a.status, 200, "{}", a.text());
    let row = settled_row(&ledger, "proxy");
    assert_eq!(used(&row, "model_calls"), 1);
    assert_eq!(used(&row, "cost_micro_usd"), INPUT * 3 + OUTPUT * 15);
}

/// Reserve mode, a request with no `max_tokens` and a budget with no
/// `reserve_max_tokens`: refused before the upstream, saying that no bound
/// was given and where to give one (not a worst case of 2^64 - 1 tokens).
#[test]
fn reserve_mode_says_a_call_without_any_output_bound_cannot_be_reserved() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup(
        "[budget]\nmax_tokens = 5000\nmax_model_calls = 50\ntoken_mode = \"reserve\"\n",
        &[],
    );
    let mut unbounded = messages(false);
    unbounded
        .as_object_mut()
        .expect("object")
        .remove("max_tokens");
    let a = post(proxy.port, "/v1/chat/completions", &[], &unbounded);
    assert_eq!(a.status, 402, "{}", a.text());
    let message = a.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.contains(
            "sets no output bound (max_tokens), and the budget sets no reserve_max_tokens"
        ),
        "{message}"
    );
    assert!(!message.contains("18446744073709551615"), "{message}");
    assert_eq!(upstream.count("/v1/chat/completions"), 0);
}

/// `reserve_min_reply_tokens`: a call whose worst case does not fit is sent
/// with its `max_tokens` lowered to what is left, while that is at least
/// the minimum; below it, refused. The client is told the bound its call
/// went with.
#[test]
fn reserve_mode_lowers_max_tokens_to_what_is_left_down_to_the_minimum() {
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        "[budget]\nmax_tokens = 6000\nmax_model_calls = 50\ntoken_mode = \"reserve\"\nreserve_min_reply_tokens = 600\n",
        &[],
    );
    let mut request = messages(false);
    request["max_tokens"] = json!(4000);
    let input = request.to_string().len() as u64 + 4_096;
    // 6 000 left: input + 4 000 does not fit, so the reply gets the rest.
    let a = post(proxy.port, "/v1/messages", &[], &request);
    assert_eq!(a.status, 200);
    let first = 6_000 - input;
    assert_eq!(upstream.last_body()["max_tokens"], json!(first));
    assert!(
        a.head
            .contains(&format!("x-budgetgate-max-tokens: {first}\r\n")),
        "{}",
        a.head
    );
    // 4 900 left: the reply gets what is left after the input, at least 600.
    let b = post(proxy.port, "/v1/messages", &[], &request);
    assert_eq!(b.status, 200);
    let second = 6_000 - (INPUT + OUTPUT) - input;
    assert!(second >= 600, "the test's sizes: {second}");
    assert_eq!(upstream.last_body()["max_tokens"], json!(second));
    // 3 800 left: less than the input and the minimum: refused, its whole
    // worst case named.
    let c = post(proxy.port, "/v1/messages", &[], &request);
    assert_eq!(c.status, 402);
    let message = c.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.contains(&format!("could use up to {} tokens", input + 4_000)),
        "{message}"
    );
    assert_eq!(upstream.count("/v1/messages"), 2);
    // A call that fits goes as it came, with no header.
    let mut small = messages(false);
    small["max_tokens"] = json!(1);
    let (_dir2, _b2, _l2, upstream2, proxy2) = setup(
        "[budget]\nmax_tokens = 60000\ntoken_mode = \"reserve\"\nreserve_min_reply_tokens = 600\n",
        &[],
    );
    let d = post(proxy2.port, "/v1/messages", &[], &small);
    assert_eq!(d.status, 200);
    assert!(!d.head.contains("x-budgetgate-max-tokens"), "{}", d.head);
    assert_eq!(upstream2.last_body(), small);
    assert_eq!(
        used(&settled_row(&ledger, "proxy"), "tokens"),
        2 * (INPUT + OUTPUT)
    );
}

/// A request that sets no reply bound, in reserve mode, is sent with the
/// budget's `reserve_max_tokens`: the bound its reservation assumed.
#[test]
fn reserve_mode_sends_a_call_without_a_bound_with_the_one_it_reserved() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup(
        "[budget]\nmax_tokens = 60000\ntoken_mode = \"reserve\"\nreserve_max_tokens = 300\n",
        &[],
    );
    let chat = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]});
    let a = post(proxy.port, "/v1/chat/completions", &[], &chat);
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let sent = upstream.last_body();
    assert_eq!(sent["max_completion_tokens"], json!(300));
    assert_eq!(sent["messages"], chat["messages"]);
    assert!(
        a.head.contains("x-budgetgate-max-tokens: 300\r\n"),
        "{}",
        a.head
    );
    // `n` replies are each up to the bound: 20 × 3 000 does not fit in
    // what is left, and a call of more than one reply is never lowered.
    let many = json!({"model": "gpt-test", "max_completion_tokens": 3000, "n": 20,
                      "messages": [{"role": "user", "content": "hi"}]});
    let b = post(proxy.port, "/v1/chat/completions", &[], &many);
    assert_eq!(b.status, 402, "{}", b.text());
    assert_eq!(b.json()["error"]["code"], "token-reserve");
    assert_eq!(upstream.count("/v1/chat/completions"), 1);
}

#[test]
fn parallel_calls_in_reserve_mode_never_pass_the_budget_together() {
    let dir = tempfile::tempdir().expect("dir");
    // Room for exactly 3 worst cases of about 4 300.
    let budget = write_budget(
        dir.path(),
        "[budget]\nmax_tokens = 13500\nmax_model_calls = 100\ntoken_mode = \"reserve\"\n",
    );
    let ledger = dir.path().join("ledger.sqlite3");
    let upstream = Upstream::start();
    let proxy = start_proxy(&upstream, &budget, &ledger, &[]);
    let port = proxy.port;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            std::thread::spawn(move || {
                post(
                    port,
                    "/v1/messages",
                    &[("x-test-delay-ms", "300")],
                    &messages(false),
                )
                .status
            })
        })
        .collect();
    let statuses: Vec<u16> = calls.into_iter().map(|c| c.join().expect("call")).collect();
    let made = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(made, 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 402).count(), 13);
    assert_eq!(upstream.count("/v1/messages"), 3);
    assert_eq!(
        used(&settled_row(&ledger, "proxy"), "tokens"),
        3 * (INPUT + OUTPUT)
    );
}

#[test]
fn claude_codes_session_header_names_the_ledger_row() {
    let dir = tempfile::tempdir().expect("dir");
    let budget = write_budget(dir.path(), "[budget]\nmax_model_calls = 1\n");
    let ledger = dir.path().join("ledger.sqlite3");
    let upstream = Upstream::start();
    let proxy = start_proxy(
        &upstream,
        &budget,
        &ledger,
        &["--session-header", "x-agent"],
    );
    let cc = [("x-claude-code-session-id", "cc-1")];
    assert_eq!(
        post(proxy.port, "/v1/messages", &cc, &messages(false)).status,
        200
    );
    assert_eq!(
        post(proxy.port, "/v1/messages", &cc, &messages(false)).status,
        402
    );
    // Another session has its own budget; the named header is read when
    // Claude Code's is absent.
    let other = [("x-agent", "team-b")];
    assert_eq!(
        post(proxy.port, "/v1/messages", &other, &messages(false)).status,
        200
    );
    assert_eq!(used(&settled_row(&ledger, "cc-1"), "model_calls"), 1);
    assert_eq!(used(&settled_row(&ledger, "team-b"), "model_calls"), 1);
    let bad = [("x-claude-code-session-id", "")];
    let a = post(proxy.port, "/v1/messages", &bad, &messages(false));
    assert_eq!(a.status, 400);
    assert!(a
        .text()
        .contains("x-claude-code-session-id header is not a session name"));
}

#[test]
fn a_chat_stream_gets_the_usage_chunk_only_when_its_client_asked() {
    let (_dir, _budget, ledger, upstream, proxy) = setup("[budget]\nmax_tokens = 100000\n", &[]);
    let chat = json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let a = post(proxy.port, "/v1/chat/completions", &[], &chat);
    assert_eq!(a.status, 200);
    assert_eq!(
        upstream.last_body()["stream_options"]["include_usage"],
        true
    );
    assert!(!a.text().contains("\"usage\""), "withheld: {}", a.text());
    assert!(a.text().contains("data: [DONE]"));
    let mut asked = chat.clone();
    asked["stream_options"] = json!({"include_usage": true});
    let a = post(proxy.port, "/v1/chat/completions", &[], &asked);
    assert!(a.text().contains("\"usage\""), "relayed: {}", a.text());
    let not_streamed = json!({"model": "gpt-test", "messages": []});
    let a = post(proxy.port, "/v1/chat/completions", &[], &not_streamed);
    assert_eq!(a.json()["usage"]["prompt_tokens"], INPUT);
    assert_eq!(
        used(&settled_row(&ledger, "proxy"), "tokens"),
        3 * (INPUT + OUTPUT)
    );
}

/// SSE lines may end with CRLF or a CR alone: the usage is read all the
/// same (it used to be unseen with a CR alone, and the call counted at its
/// charge), the stream relayed byte for byte, and the usage chunk withheld
/// from a Chat client that did not ask for it.
#[test]
fn streams_with_lines_ended_by_cr_or_crlf_are_read_and_relayed() {
    let (_dir, _budget, ledger, _upstream, proxy) = setup("[budget]\nmax_tokens = 100000\n", &[]);
    for eol in ["cr", "crlf"] {
        let a = post(
            proxy.port,
            "/v1/messages",
            &[("x-test-eol", eol)],
            &messages(true),
        );
        assert_eq!(a.status, 200);
        assert!(a.ended, "{eol}: the stream ended whole");
        let sep = if eol == "cr" { "\r" } else { "\r\n" };
        assert!(
            a.text()
                .ends_with(&format!("data: {{\"type\":\"message_stop\"}}{sep}{sep}")),
            "{eol}: {:?}",
            a.text()
        );
        let chat = json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let c = post(
            proxy.port,
            "/v1/chat/completions",
            &[("x-test-eol", eol)],
            &chat,
        );
        assert!(
            c.ended && !c.text().contains("\"usage\""),
            "{eol}: {:?}",
            c.text()
        );
        assert!(
            c.text().ends_with(&format!("data: [DONE]{sep}{sep}")),
            "{eol}: {:?}",
            c.text()
        );
    }
    // Four calls, each counted at its reported usage, not at its charge.
    assert_eq!(
        used(&settled_row(&ledger, "proxy"), "tokens"),
        4 * (INPUT + OUTPUT)
    );
}

#[test]
fn a_stream_cut_off_counts_what_was_reported_and_an_error_counts_nothing() {
    let (_dir, _budget, ledger, _upstream, proxy) = setup("[budget]\nmax_tokens = 100000\n", &[]);
    let a = post(
        proxy.port,
        "/v1/messages",
        &[("x-test-cut", "1")],
        &messages(true),
    );
    assert_eq!(a.status, 200);
    assert!(a.text().contains("message_start"));
    // The client's answer breaks off as the upstream's did: not ended.
    assert!(!a.ended, "{}", a.text());
    // What was reported (the input, and a placeholder of 1 output token)
    // is not what was generated: the output counts at least the bytes of
    // the answer read (all relayed to the client).
    let start = json!({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": INPUT, "output_tokens": 1}}});
    let sent = format!("event: message_start\ndata: {start}\n\n").len() as u64;
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (used(&row, "tokens"), used(&row, "model_calls")),
        (INPUT + sent, 1)
    );
    // An error answer (529 overloaded) is relayed as it came, not billed.
    let a = post(
        proxy.port,
        "/v1/messages",
        &[("x-test-status", "529")],
        &messages(false),
    );
    assert_eq!(a.status, 529);
    assert_eq!(a.json()["error"]["type"], "overloaded_error");
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (used(&row, "tokens"), used(&row, "model_calls")),
        (INPUT + sent, 1)
    );
}

/// Reserve mode: a stream that broke off before its end counts its whole
/// reservation, not the input and placeholder its first event reported
/// (a hostile trial had long answers counted as 51 tokens each by hanging
/// up mid-stream).
#[test]
fn a_stream_cut_off_in_reserve_mode_counts_its_reservation() {
    let (_dir, _budget, ledger, _upstream, proxy) = setup(
        "[budget]\nmax_tokens = 100000\ntoken_mode = \"reserve\"\n",
        &[],
    );
    let request = messages(true);
    let charge = request.to_string().len() as u64 + 4_096 + 100;
    let a = post(proxy.port, "/v1/messages", &[("x-test-cut", "1")], &request);
    assert!(!a.ended);
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (
            used(&row, "tokens"),
            row["limits"]["tokens"]["reserved"].clone()
        ),
        (charge, json!(0)),
        "{row}"
    );
}

#[test]
fn a_proxy_killed_mid_stream_gives_no_budget_back() {
    let (_dir, budget, ledger, upstream, mut proxy) = setup("[budget]\nmax_model_calls = 1\n", &[]);
    let port = proxy.port;
    let call = std::thread::spawn(move || {
        post(
            port,
            "/v1/messages",
            &[("x-test-stall", "1")],
            &messages(true),
        )
    });
    while upstream.count("/v1/messages") == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let _ = proxy.child.kill(); // SIGKILL
    let _ = proxy.child.wait();
    let _ = call.join();
    // A new proxy on the same ledger: the call in flight still holds its
    // place, so the one model call allowed is spent.
    let again = start_proxy(&upstream, &budget, &ledger, &[]);
    let a = post(again.port, "/v1/messages", &[], &messages(false));
    assert_eq!(a.status, 402, "{}", a.text());
    assert!(a.text().contains("(steps)"), "{}", a.text());
    assert_eq!(upstream.count("/v1/messages"), 1);
}

/// A call its proxy never counted (killed with SIGKILL mid-stream) holds
/// its reservation in the ledger, for a new proxy too, until its deadline
/// and `--orphan-grace` have passed; then it is counted as spent, at its
/// reservation (what the upstream reported before the kill was never
/// written, and the reservation is never below it).
#[test]
fn a_killed_calls_reservation_is_held_then_counted_as_spent_when_it_expires() {
    let timing = ["--call-timeout", "1", "--orphan-grace", "1"];
    let (_dir, budget, ledger, upstream, mut proxy) = setup(
        "[budget]\nmax_tokens = 100000\ntoken_mode = \"reserve\"\n",
        &timing,
    );
    let request = messages(true);
    let charge = request.to_string().len() as u64 + 4_096 + 100;
    let port = proxy.port;
    let call =
        std::thread::spawn(move || post(port, "/v1/messages", &[("x-test-stall", "1")], &request));
    while upstream.count("/v1/messages") == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let _ = proxy.child.kill(); // SIGKILL
    let _ = proxy.child.wait();
    let _ = call.join();
    let row = ledger_row(&ledger, "proxy");
    assert_eq!(
        (
            row["limits"]["tokens"]["reserved"].clone(),
            used(&row, "tokens")
        ),
        (json!(charge), 0),
        "held, not yet spent: {row}"
    );
    // Past its deadline (1 s) and the grace (1 s), the next decision of a
    // new proxy counts it.
    std::thread::sleep(Duration::from_millis(2_300));
    let again = start_proxy(&upstream, &budget, &ledger, &timing);
    let a = post(again.port, "/v1/messages", &[], &messages(false));
    assert_eq!(a.status, 200, "{}", a.text());
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (
            used(&row, "tokens"),
            used(&row, "model_calls"),
            row["limits"]["tokens"]["reserved"].clone()
        ),
        (charge + INPUT + OUTPUT, 2, json!(0)),
        "{row}"
    );
}

#[test]
fn a_request_that_cannot_be_read_is_refused_before_the_upstream() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup("[budget]\n", &[]);
    let a = post(proxy.port, "/v1/messages", &[], &json!({"max_tokens": 5}));
    assert_eq!(a.status, 400);
    assert!(a.text().contains("names no `model`"), "{}", a.text());
    let a = post(
        proxy.port,
        "/v1/messages",
        &[("origin", "http://evil.example")],
        &messages(false),
    );
    assert_eq!(a.status, 403);
    assert_eq!(upstream.count("/v1/messages"), 0);
}

/// Runs `budgetgate hook claude-code` on `event` with `budget` and
/// `ledger`; its standard output.
fn hook(budget: &Path, ledger: &Path, event: &Value) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_budgetgate"))
        .args(["hook", "claude-code", "--budget"])
        .arg(budget)
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(event.to_string().as_bytes())
        .expect("event");
    let out = child.wait_with_output().expect("hook ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_hook_leaves_the_transcript_of_a_session_the_proxy_counts_unread() {
    let (dir, budget, ledger, _upstream, proxy) = setup("[budget]\nmax_tokens = 100000\n", &[]);
    let cc = [("x-claude-code-session-id", "cc-h")];
    assert_eq!(
        post(proxy.port, "/v1/messages", &cc, &messages(false)).status,
        200
    );
    // The transcript Claude Code wrote of that response (here: bigger, so
    // that counting it would show).
    let transcript = dir.path().join("t.jsonl");
    let line = json!({"type": "assistant", "requestId": "req_1", "timestamp": "2026-12-01T10:00:00Z",
        "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                    "content": [], "stop_reason": null, "usage": {"input_tokens": 5000, "output_tokens": 0}}});
    std::fs::write(&transcript, format!("{line}\n")).expect("transcript");
    let event = |session: &str| {
        json!({"session_id": session, "transcript_path": transcript, "cwd": dir.path(),
               "permission_mode": "default", "hook_event_name": "PreToolUse",
               "tool_name": "Read", "tool_input": {"file_path": "/x"}, "tool_use_id": format!("t-{session}")})
    };
    hook(&budget, &ledger, &event("cc-h"));
    assert_eq!(
        used(&settled_row(&ledger, "cc-h"), "tokens"),
        INPUT + OUTPUT
    );
    // A session without the proxy is counted from its transcript.
    hook(&budget, &ledger, &event("plain"));
    assert_eq!(used(&settled_row(&ledger, "plain"), "tokens"), 5000);
}

/// The venv's Python with the official SDKs (tests/mcp/install.sh), if
/// installed.
fn sdk_python() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/.venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import anthropic, openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("BUDGETGATE_REQUIRE_MCP").is_none(),
        "BUDGETGATE_REQUIRE_MCP is set but the anthropic and openai SDKs are not installed (tests/mcp/install.sh)"
    );
    eprintln!("skipped: the anthropic and openai SDKs are not installed (tests/mcp/install.sh)");
    None
}

#[test]
fn the_official_sdks_get_their_answers_and_read_a_refusal_without_retrying_it() {
    let Some(python) = sdk_python() else {
        return;
    };
    let (_dir, _budget, ledger, upstream, proxy) =
        setup("[budget]\nmax_model_calls = 4\nmax_tokens = 100000\n", &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/proxy/sdk_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(format!("http://127.0.0.1:{}", proxy.port))
        .output()
        .expect("the SDK client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let by = |name: &str| -> Value {
        calls
            .iter()
            .find(|c| c["call"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    assert_eq!(
        by("messages")["result"],
        json!({"text": "ok", "output_tokens": OUTPUT})
    );
    assert_eq!(
        by("messages-streamed")["result"],
        json!({"text": "ok", "output_tokens": OUTPUT})
    );
    assert_eq!(
        by("chat")["result"],
        json!({"text": "ok", "prompt_tokens": INPUT})
    );
    // The usage chunk the proxy asked for is not shown to a client that
    // did not ask.
    assert_eq!(
        by("chat-streamed")["result"],
        json!({"text": "ok", "usage_chunks": 0})
    );
    for (name, class) in [
        ("messages-refused", "PaymentRequiredError"),
        ("chat-refused", "APIStatusError"),
    ] {
        let c = by(name);
        assert_eq!(c["ok"], false, "{c}");
        assert_eq!(
            (c["status"].clone(), c["error"].clone()),
            (json!(402), json!(class)),
            "{c}"
        );
        assert_eq!(c["requests"], 1, "retried: {c}");
        assert!(
            c["message"]
                .as_str()
                .unwrap_or("")
                .contains("4 of 4 model calls used (steps)"),
            "{c}"
        );
    }
    assert_eq!(upstream.count("/v1/messages"), 2);
    assert_eq!(upstream.count("/v1/chat/completions"), 2);
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (used(&row, "model_calls"), used(&row, "tokens")),
        (4, 4 * (INPUT + OUTPUT))
    );
}

/// Issue 31: 32 SDK clients at once, 8 in each of 4 sessions, Messages and
/// Chat, streamed and not, each calling until refused, on one budget in
/// reserve mode: no session's ledger passes its token budget, every call
/// made is counted at its usage, every refusal is a 402 the SDKs do not
/// retry, and nothing stays reserved.
#[test]
fn thirty_two_sdk_clients_in_parallel_never_pass_a_reserve_budget() {
    let Some(python) = sdk_python() else {
        return;
    };
    const MAX: u64 = 20_000;
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        &format!(
            "[budget]\nmax_tokens = {MAX}\nmax_model_calls = 1000\ntoken_mode = \"reserve\"\n"
        ),
        &[],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/proxy/sdk_parallel.py");
    let out = Command::new(python)
        .arg(script)
        .arg(format!("http://127.0.0.1:{}", proxy.port))
        .args(["4", "8"])
        .output()
        .expect("the SDK clients run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let threads: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(threads.len(), 32, "{stdout}");
    for t in &threads {
        assert_eq!(t["status"], 402, "{t}");
        assert_eq!(t["requests_for_refusal"], 1, "retried: {t}");
        assert!(
            t["code"] == "token-reserve" || t["code"] == "billing_error",
            "{t}"
        );
    }
    let mut total = 0;
    for session in ["s0", "s1", "s2", "s3"] {
        let made: u64 = threads
            .iter()
            .filter(|t| t["session"] == session)
            .map(|t| t["made"].as_u64().expect("made"))
            .sum();
        let row = settled_row(&ledger, session);
        assert!(made >= 2, "{session}: {made} calls");
        assert_eq!(used(&row, "model_calls"), made, "{session}: {row}");
        assert_eq!(
            used(&row, "tokens"),
            made * (INPUT + OUTPUT),
            "{session}: {row}"
        );
        assert!(
            used(&row, "tokens") <= MAX,
            "{session} passed its budget: {row}"
        );
        assert_eq!(row["limits"]["tokens"]["reserved"], 0, "{row}");
        total += made;
    }
    let sent = upstream.count("/v1/messages") + upstream.count("/v1/chat/completions");
    assert_eq!(sent as u64, total, "every call the upstream saw is counted");
}

/// A Messages conversation in which the model called `status` once per
/// turn, each call returning the matching entry of `results`; the request
/// ends with the last result (or with a person's message after it).
fn messages_with_calls(results: &[&str], person_after: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "wait for job 7"})];
    for (i, result) in results.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "status", "input": {"job": 7}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": [{"type": "text", "text": result}]}]}));
    }
    if person_after {
        messages.push(json!({"role": "user", "content": "try something else"}));
    }
    json!({"model": "claude-test", "max_tokens": 100, "messages": messages})
}

/// Issue 32: under `[loops]` the proxy reads each request's tool calls and
/// results; a request bringing the result of the call that completed a
/// pattern (here the third `status` returning what the two before did,
/// same_outcome 3) is refused `no-progress` before the upstream, in the
/// API's error shape. One call fewer, a changed result, or a person's
/// message after the results: let through.
#[test]
fn a_request_after_calls_that_make_no_progress_is_refused() {
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        "[budget]\nmax_model_calls = 50\n[loops]\nsame_outcome = 3\nsame_error = 2\n",
        &[],
    );
    let call = |body: &Value| post(proxy.port, "/v1/messages", &[], body);
    // Two identical results: below the threshold.
    let a = call(&messages_with_calls(&["pending", "pending"], false));
    assert_eq!(a.status, 200, "{}", a.text());
    // A changed result in the run: nothing completed.
    let a = call(&messages_with_calls(
        &["pending", "running", "running"],
        false,
    ));
    assert_eq!(a.status, 200, "{}", a.text());
    // A person spoke after the third identical result: a new start.
    let a = call(&messages_with_calls(&["pending"; 3], true));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(upstream.count("/v1/messages"), 3);
    // The third identical result: refused, never sent upstream.
    let a = call(&messages_with_calls(&["pending"; 3], false));
    assert_eq!(a.status, 402, "{}", a.text());
    let err = a.json();
    assert_eq!(err["error"]["type"], "billing_error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(message.contains("(no-progress)"), "{message}");
    assert!(message.contains("status has been called 2 times with this input and returned the same result each time; this would be call 3 (same_outcome 3)"), "{message}");
    assert_eq!(upstream.count("/v1/messages"), 3);
    // Nothing was counted for the refused call.
    assert_eq!(used(&settled_row(&ledger, "proxy"), "model_calls"), 3);
}

/// A model call's path written another way (dot segments, doubled
/// slashes, escapes, capitals: what the URL library or an upstream would
/// clean up into the call) is refused before the upstream, never passed
/// through ungated; a GET of a model path is not a model call.
#[test]
fn a_model_call_written_another_way_is_refused_not_passed_through() {
    let (_dir, _budget, ledger, upstream, proxy) = setup("[budget]\nmax_model_calls = 1\n", &[]);
    let body = json!({"model": "claude-test", "max_tokens": 10, "messages": []});
    let a = post(proxy.port, "/v1/messages", &[], &body);
    assert_eq!(a.status, 200, "{}", a.text());
    for path in [
        "/v1/./messages",
        "/v1/x/../messages",
        "/v1/%2e/messages",
        "/v1//messages",
        "/V1/messages",
        "/v1/./chat/completions",
        "/v1/./responses",
    ] {
        let a = post(proxy.port, path, &[], &body);
        assert_eq!(a.status, 400, "{path}: {}", a.text());
        assert!(
            a.text().contains("a model call written another way"),
            "{path}: {}",
            a.text()
        );
    }
    assert_eq!(upstream.count("/v1/messages"), 1);
    assert_eq!(used(&settled_row(&ledger, "proxy"), "model_calls"), 1);
}

/// `same_answer` (issue 32): after the model gave the same text answer 3
/// times in a row, each time told to go on, the next model call is refused
/// `no-progress` before the upstream; two, or a tool call between, pass.
#[test]
fn a_request_after_the_same_answer_three_times_is_refused() {
    let (_dir, _budget, ledger, upstream, proxy) =
        setup("[budget]\nmax_model_calls = 50\n[loops]\n", &[]);
    let conversation = |answers: &[Value]| {
        let mut messages = vec![json!({"role": "user", "content": "fix the build"})];
        for a in answers {
            messages.push(json!({"role": "assistant", "content": a}));
            messages.push(json!({"role": "user", "content": "Please continue."}));
        }
        json!({"model": "claude-test", "max_tokens": 100, "messages": messages})
    };
    let same = json!([{"type": "text", "text": "I will now fix the build."}]);
    let call = json!([{"type": "tool_use", "id": "toolu_1", "name": "make", "input": {}}]);
    let a = post(
        proxy.port,
        "/v1/messages",
        &[],
        &conversation(&[same.clone(), same.clone()]),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let between = conversation(&[same.clone(), same.clone(), call, same.clone()]);
    let a = post(proxy.port, "/v1/messages", &[], &between);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(upstream.count("/v1/messages"), 2);
    let a = post(
        proxy.port,
        "/v1/messages",
        &[],
        &conversation(&[same.clone(), same.clone(), same.clone()]),
    );
    assert_eq!(a.status, 402, "{}", a.text());
    let err = a.json();
    assert_eq!(err["error"]["type"], "billing_error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(message.contains("(no-progress): the model keeps giving the same answer (the model has given the same answer 3 times in a row with no tool call between (same_answer 3)"), "{message}");
    assert_eq!(upstream.count("/v1/messages"), 2);
    assert_eq!(used(&settled_row(&ledger, "proxy"), "model_calls"), 2);
    // A person who writes something new after the three answers starts
    // again; the same prompt once more does not.
    let mut fresh = conversation(&[same.clone(), same.clone(), same]);
    let messages = fresh["messages"].as_array_mut().expect("messages");
    messages.pop();
    messages.push(json!({"role": "user", "content": "Stop that and run the tests instead."}));
    let a = post(proxy.port, "/v1/messages", &[], &fresh);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(upstream.count("/v1/messages"), 3);
}

/// The same rule over OpenAI's shapes: Chat `tool` messages and Responses
/// `function_call_output` items.
#[test]
fn chat_and_responses_histories_are_read_too() {
    let (_dir, _budget, _ledger, upstream, proxy) =
        setup("[budget]\n[loops]\nsame_outcome = 2\n", &[]);
    let chat = |results: &[&str]| {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        for (i, r) in results.iter().enumerate() {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{i}"), "type": "function",
                 "function": {"name": "ls", "arguments": "{\"dir\": \"/tmp\"}"}}]}));
            messages
                .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": r}));
        }
        json!({"model": "gpt-test", "messages": messages})
    };
    let a = post(
        proxy.port,
        "/v1/chat/completions",
        &[],
        &chat(&["a.txt", "b.txt"]),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let a = post(
        proxy.port,
        "/v1/chat/completions",
        &[],
        &chat(&["a.txt", "a.txt"]),
    );
    assert_eq!(a.status, 402, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "no-progress", "{}", a.text());
    let responses = |results: &[&str]| {
        let mut input = vec![json!({"role": "user", "content": "go"})];
        for (i, r) in results.iter().enumerate() {
            input.push(
                json!({"type": "function_call", "call_id": format!("fc_{i}"),
                              "name": "ls", "arguments": "{\"dir\":\"/tmp\"}"}),
            );
            input.push(
                json!({"type": "function_call_output", "call_id": format!("fc_{i}"), "output": r}),
            );
        }
        json!({"model": "gpt-test", "input": input})
    };
    let a = post(
        proxy.port,
        "/v1/responses",
        &[],
        &responses(&["a.txt", "b.txt"]),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let a = post(
        proxy.port,
        "/v1/responses",
        &[],
        &responses(&["a.txt", "a.txt"]),
    );
    assert_eq!(a.status, 402, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "no-progress", "{}", a.text());
    assert_eq!(upstream.count("/v1/chat/completions"), 1);
    assert_eq!(upstream.count("/v1/responses"), 1);
}

/// A Redis ledger that cannot be reached stops the proxy at start (exit 2,
/// one line naming the URL) instead of a proxy that refuses every call.
#[test]
fn a_redis_ledger_that_cannot_be_reached_stops_the_proxy_at_start() {
    let url = "redis://127.0.0.1:1/0";
    let mut cmd = common::subcommand("proxy");
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:9",
    ])
    .args(["--ledger", url])
    .timeout(Duration::from_secs(30));
    let line = common::one_line_error(&mut cmd, "proxy");
    assert!(
        line.contains(url) && line.contains("cannot be reached"),
        "{line}"
    );
    // One that answers: the proxy starts.
    let Some(redis) = common::redis::redis() else {
        return;
    };
    let first = start_lines(&["--ledger", &redis.url], 1);
    assert!(first[0].contains("listening on http://"), "{first:?}");
}

/// The first `n` lines a proxy in front of nothing (`--upstream
/// http://127.0.0.1:9`, unless `args` name another) says on stderr with
/// `args`, read for at most 10 s each (a proxy that says less fails the
/// test, not hangs it); the proxy is stopped after.
fn start_lines(args: &[&str], n: usize) -> Vec<String> {
    use std::io::BufRead as _;
    let upstream: &[&str] = if args.contains(&"--upstream") {
        &[]
    } else {
        &["--upstream", "http://127.0.0.1:9"]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_budgetgate"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .args(upstream)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("the proxy starts");
    let (send, lines) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let _ = send.send(line.expect("a line"));
        }
    });
    let lines: Vec<String> = (0..n)
        .map_while(|_| lines.recv_timeout(Duration::from_secs(10)).ok())
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    lines
}

/// At start the proxy says the budget in force on stderr, after the line
/// it listens on, in the words `replay` prints it for the same budget file
/// (its limits, then its cost and per-tool caps).
#[test]
fn the_proxy_says_the_budget_in_force_at_start_as_replay_does() {
    let budget = common::example("claude-code-budget.toml");
    let replay = Command::new(env!("CARGO_BIN_EXE_budgetgate"))
        .args(["replay", &common::example("replay/claude-code.jsonl")])
        .args(["--budget", &budget])
        .output()
        .expect("replay runs");
    let replay = String::from_utf8_lossy(&replay.stdout).into_owned();
    let said: Vec<&str> = replay
        .lines()
        .filter(|l| l.starts_with("budget: "))
        .collect();
    assert_eq!(said.len(), 2, "{replay}");
    // Replay adds what only a replay has (its approver, the recording's tools).
    let limits = said[0].split("; approval").next().expect("limits");
    let ledger = tempfile::tempdir().expect("dir");
    let state = ledger.path().join("state").display().to_string();
    let lines = start_lines(&["--budget", &budget, "--ledger", &state], 3);
    assert!(lines[0].contains("listening on http://"), "{lines:?}");
    assert_eq!(
        lines[1..].to_vec(),
        [
            format!("budgetgate proxy: {limits}"),
            format!("budgetgate proxy: {}", said[1])
        ],
        "{replay}"
    );
}

/// An upstream given without its scheme (`127.0.0.1:9`, `localhost:9`) is
/// refused at start naming the value and what it must be, not in the URL
/// parser's words (`relative URL without a base`).
#[test]
fn an_upstream_that_is_not_an_http_url_is_named_at_start() {
    for upstream in ["127.0.0.1:9", "localhost:9", "ftp://x/"] {
        let mut cmd = common::subcommand("proxy");
        cmd.args(["--listen", "127.0.0.1:0", "--upstream", upstream])
            .timeout(Duration::from_secs(30));
        let line = common::one_line_error(&mut cmd, "proxy");
        assert!(
            line.starts_with(&format!(
                "budgetgate proxy: --upstream {upstream}: must be an http:// or https:// URL"
            )),
            "{line}"
        );
    }
}

/// An upstream given with the API's `/v1` (as an SDK's base URL is) would
/// send calls to `…/v1/v1/…`: the proxy says so at start; the API's root
/// is taken as it is.
#[test]
fn an_upstream_ending_in_v1_is_warned_of_at_start() {
    for (upstream, warned) in [
        ("http://127.0.0.1:9/v1", true),
        ("http://127.0.0.1:9/openai/v1/", true),
        ("http://127.0.0.1:9", false),
        ("http://127.0.0.1:9/v1beta", false),
    ] {
        // The warning comes first, before the line the proxy listens on.
        let lines = start_lines(&["--upstream", upstream], if warned { 3 } else { 2 });
        assert_eq!(lines.len(), if warned { 3 } else { 2 }, "{lines:?}");
        let warning = lines.iter().find(|l| l.contains("warning"));
        assert_eq!(warning.is_some(), warned, "{upstream}: {lines:?}");
        if let Some(w) = warning {
            assert!(
                w.starts_with(&format!(
                    "budgetgate proxy: warning: --upstream {upstream} ends in /v1"
                )),
                "{w}"
            );
        }
    }
}

/// A hostile trial: with an upstream given with a path of its own
/// (`--upstream http://host/v1`, as an SDK's base URL is), a client that
/// leaves `/v1` out (`POST /chat/completions`, `/messages`) reached the
/// upstream's model API ungated, as the proxy knew model calls only by
/// their whole path. Now a model call is known by how the path the
/// upstream gets ends, whatever its prefix: gated and counted; and the
/// billed endpoints it cannot gate (an Assistants run, images, audio)
/// are refused under any prefix too.
#[test]
fn an_upstream_with_a_path_of_its_own_lets_no_model_call_through_ungated() {
    let dir = tempfile::tempdir().expect("dir");
    let budget = write_budget(
        dir.path(),
        "[budget]\nmax_tokens = 2000\nmax_model_calls = 50\n",
    );
    let ledger = dir.path().join("ledger.sqlite3");
    let upstream = Upstream::start();
    let url = format!("http://127.0.0.1:{}/v1", upstream.port);
    let proxy = common::ProxyProcess::start(&url, &budget, &ledger, &[]);
    for (path, body) in [
        ("/chat/completions", messages(false)),
        ("/messages", messages(false)),
    ] {
        let a = post(proxy.port, path, &[], &body);
        assert_eq!(a.status, 200, "{path}: {}", a.text());
    }
    assert_eq!(upstream.count("/v1/chat/completions"), 1);
    assert_eq!(upstream.count("/v1/messages"), 1);
    // Counted: 2 × 1 100 tokens is over 2 000, so a third is refused.
    let row = settled_row(&ledger, "proxy");
    assert_eq!(used(&row, "model_calls"), 2);
    let a = post(proxy.port, "/chat/completions", &[], &messages(false));
    assert_eq!(a.status, 402, "{}", a.text());
    for path in [
        "/threads/runs",
        "/threads/t1/runs",
        "/images/generations",
        "/audio/speech",
    ] {
        let a = post(proxy.port, path, &[], &messages(false));
        assert_eq!(a.status, 403, "{path}: {}", a.text());
        assert!(
            a.text().contains("is billed and cannot be gated"),
            "{path}: {}",
            a.text()
        );
    }
    assert_eq!(upstream.count("/v1/chat/completions"), 1, "never reached");
}
