//! `budgetgate proxy`'s bounds end to end (issue 31, "bounded memory
//! whatever a peer sends"): a request body over `--max-request-mib` is
//! refused 413 before the upstream; bodies held at once are bounded
//! together (past it 503 `overloaded_error`, to be sent again, and room
//! comes back when they are gone); a client that does not read its answer
//! is cut off at the call's deadline and the call counted; a whole answer
//! keeps its length, and one the upstream breaks off reaches the client
//! with its head and broken off too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::upstream::*;

const ROOMY: &str = "[budget]\nmax_tokens = 1000000000\nmax_model_calls = 1000\n";

/// A Messages request whose body is exactly `size` bytes (the padding is
/// JSON whitespace after the object).
fn body_of(size: usize) -> String {
    let mut body = messages(false).to_string();
    assert!(size >= body.len());
    body.push_str(&" ".repeat(size - body.len()));
    body
}

/// Posts the raw `body` to the proxy's `/v1/messages`; the status and the
/// answer's head and body.
fn post_raw(port: u16, body: &str) -> (u16, String, String) {
    let a = post_text(port, "/v1/messages", &[], body);
    (a.status, a.head.clone(), a.text())
}

#[test]
fn a_body_over_the_bound_is_refused_413_and_one_at_it_is_sent() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup(ROOMY, &["--max-request-mib", "1"]);
    let (status, _, body) = post_raw(proxy.port, &body_of((1 << 20) + 1));
    assert_eq!(status, 413, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON error");
    assert_eq!(error["type"], "error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over 1 MiB"),
        "{error}"
    );
    assert_eq!(upstream.count("/v1/messages"), 0);
    let (status, _, body) = post_raw(proxy.port, &body_of(1 << 20));
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream.count("/v1/messages"), 1);
}

/// Four clients each hold all but a few bytes of a 1 MiB body, so the
/// proxy holds about 4 MiB (4 × `--max-request-mib 1`): a fifth request is
/// refused 503 `overloaded_error` with `x-should-retry: true`, never sent;
/// once the four are gone it is sent.
#[test]
fn bodies_held_at_once_are_bounded_together_and_room_comes_back() {
    let (_dir, _budget, _ledger, upstream, proxy) = setup(ROOMY, &["--max-request-mib", "1"]);
    let hold_four = || -> Vec<TcpStream> {
        (0..4)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
                let head = format!(
                    "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    proxy.port,
                    1 << 20
                );
                s.write_all(head.as_bytes()).expect("head");
                s.write_all(&vec![b' '; (1 << 20) - 2_000]).expect("body");
                s
            })
            .collect()
    };
    // The proxy reads the four bodies as they come: a request sent before
    // it has read them all may find room (and be answered: it is a valid
    // call), and a held body that then finds none is itself refused. So
    // the fifth goes once they have had time to be read, and the whole is
    // tried again if it found room.
    let mut tries = 0;
    let (held, refused) = loop {
        tries += 1;
        let held = hold_four();
        std::thread::sleep(Duration::from_millis(300 * tries));
        let (status, head, body) = post_raw(proxy.port, &body_of(10_000));
        if status == 503 {
            break (held, (head, body));
        }
        assert_eq!(status, 200, "{body}");
        assert!(tries < 8, "never refused 503");
    };
    let sent = upstream.count("/v1/messages");
    assert!(refused.0.contains("x-should-retry: true"), "{}", refused.0);
    let error: Value = serde_json::from_str(&refused.1).expect("JSON error");
    assert_eq!(error["error"]["type"], "overloaded_error", "{error}");
    // Never sent while refused.
    let (status, _, _) = post_raw(proxy.port, &body_of(10_000));
    assert_eq!(status, 503);
    assert_eq!(upstream.count("/v1/messages"), sent);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, body) = post_raw(proxy.port, &body_of(10_000));
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "room never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(upstream.count("/v1/messages"), sent + 1);
}

/// A client that asks for a long stream and never reads it: the proxy
/// cannot write, and at the call's deadline (`--call-timeout 1`) it cuts
/// the answer off and counts the call — in reserve mode its whole
/// reservation — while the client is still connected. Nothing stays
/// reserved for a client that stalls.
#[test]
fn a_client_that_does_not_read_its_answer_is_cut_off_and_the_call_counted() {
    let (_dir, _budget, ledger, upstream, proxy) = setup(
        "[budget]\nmax_tokens = 1000000\ntoken_mode = \"reserve\"\n",
        &["--call-timeout", "1"],
    );
    let request = messages(true);
    let charge = request.to_string().len() as u64 + 4_096 + 100;
    let body = request.to_string();
    let mut stalled = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-test-flood: 64\r\n\r\n{body}",
        proxy.port,
        body.len()
    );
    stalled.write_all(head.as_bytes()).expect("request");
    let started = Instant::now();
    // Decided (its row written) before it was sent.
    while upstream.count("/v1/messages") == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "never sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    let counted = loop {
        let row = ledger_row(&ledger, "proxy");
        if used(&row, "tokens") > 0 {
            break row;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not counted while the client stalls: {row}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (
            used(&counted, "model_calls"),
            used(&counted, "tokens"),
            counted["limits"]["tokens"]["reserved"].clone()
        ),
        (1, charge, json!(0)),
        "{counted}"
    );
    // The client, reading now, finds its answer broken off.
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut raw = Vec::new();
    let _ = stalled.read_to_end(&mut raw);
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(!raw.ends_with(b"0\r\n\r\n"), "the answer was not cut off");
}

/// A whole answer is relayed with the upstream's `content-length` and its
/// bytes as they came; one the upstream breaks off after its head reaches
/// the client with its head and a body shorter than that length (never no
/// answer at all, which an SDK would send again), and the call counts.
#[test]
fn a_whole_answer_keeps_its_length_and_one_broken_off_reaches_the_client_broken() {
    let (_dir, _budget, ledger, _upstream, proxy) = setup(ROOMY, &[]);
    let whole = post(proxy.port, "/v1/messages", &[], &messages(false));
    assert_eq!(whole.status, 200);
    assert!(
        whole
            .head
            .contains(&format!("content-length: {}", whole.body.len())),
        "{}",
        whole.head
    );
    assert_eq!(whole.json()["usage"]["output_tokens"], 100);
    let cut = post(
        proxy.port,
        "/v1/messages",
        &[("x-test-cut", "1")],
        &messages(false),
    );
    assert_eq!(cut.status, 200, "{}", cut.head);
    let length: usize = cut
        .head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("its length")
        .trim()
        .parse()
        .expect("a number");
    assert!(cut.body.len() < length, "{} of {length}", cut.body.len());
    // Counted once the answer is out (within 50 ms).
    let row = settled_row(&ledger, "proxy");
    assert_eq!(used(&row, "model_calls"), 2, "{row}");
    assert!(used(&row, "tokens") > 1_100, "{row}");
    assert_eq!(row["limits"]["model_calls"]["reserved"], json!(0), "{row}");
}

/// An upstream answer with both a length and chunked framing is read as
/// chunked (HTTP/1.1), and relayed without that length: the client gets
/// the whole answer (hostile trial: it got the length's 20 bytes).
#[test]
fn an_answer_sent_chunked_with_a_length_is_relayed_whole() {
    let (_dir, _budget, _ledger, _upstream, proxy) = setup(ROOMY, &[]);
    let a = post(
        proxy.port,
        "/v1/messages",
        &[("x-test-te-cl", "1")],
        &messages(false),
    );
    assert_eq!(a.status, 200, "{}", a.head);
    assert!(!a.head.contains("content-length: 20"), "{}", a.head);
    assert_eq!(a.json()["usage"]["output_tokens"], 100);
}
