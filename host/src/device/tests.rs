//! The device client's unit tests.

use super::link::{is_line_noise, READ_CHUNK};
use super::*;
use budgetgate_core::link::{self, FrameError, CHECKSUM_LEN, FRAME_MAX, PROTOCOL_VERSION};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::term::unsafe_on_terminal;

#[test]
fn minify_keeps_strings_and_spelling() {
    let text = "{ \"kind\" : \"tool\",\n  \"name\": \"a b\\\" c\",\t\"x\": 1e2, \"x\": 7.0 }";
    assert_eq!(
        minify(text),
        r#"{"kind":"tool","name":"a b\" c","x":1e2,"x":7.0}"#
    );
    assert_eq!(minify(r#"["\\", " "]"#), r#"["\\"," "]"#);
}

#[test]
fn script_proposals_are_one_line_each_and_fit_a_frame() {
    let text = r#"{"script": [
            {"kind": "tool", "call_id": "c1", "name": "add",
             "arguments": {"a": 7, "b": 8}},
            {"kind": "final", "text": "15"}], "tools": {"add": "add"}}"#;
    let script = read_script("s.json", text).unwrap();
    assert_eq!(script.budgets, None);
    assert_eq!(script.start_command(), "start");
    assert_eq!(
        script.proposals,
        [
            r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
            r#"{"kind":"final","text":"15"}"#
        ]
    );
    let fits = format!(
        r#"{{"script":[{{"kind":"final","text":"{}"}}]}}"#,
        "x".repeat(PAYLOAD_MAX - 8 - 26)
    );
    assert!(read_script("s", &fits).is_ok());
    let over = fits.replacen("\"x", "\"xx", 1);
    let e = read_script("s", &over).unwrap_err().to_string();
    assert!(e.contains("proposal 0 needs 1016 bytes"), "{e}");
    assert!(read_script("s", r#"{"tools":{}}"#).is_err());
    assert!(read_script("s", "[]").is_err());
    let budgets = read_script("s", r#"{"script":[],"max_tool_calls":6}"#).unwrap();
    assert_eq!(budgets.start_command(), "start 8 6");
    assert!(read_script("s", r#"{"script":[],"max_decisions":33}"#).is_err());
}

#[test]
fn request_frames_are_sealed_like_the_device_expects() {
    assert_eq!(request_frame("STATUS", None).unwrap(), b"STATUS*8BF8A29A\n");
    let frame = request_frame("PROPOSE", Some(b"{}")).unwrap();
    assert_eq!(
        link::verify(&frame[..frame.len() - 1]),
        Ok(&b"PROPOSE {}"[..])
    );
    let big = vec![b'x'; PAYLOAD_MAX];
    assert!(request_frame("PROPOSE", Some(&big)).is_err());
    let just = vec![b'x'; PAYLOAD_MAX - 8];
    assert_eq!(
        request_frame("PROPOSE", Some(&just)).unwrap().len(),
        FRAME_MAX + 1
    );
}

#[test]
fn replies_are_read_and_unknown_fields_ignored() {
    let r = parse_reply(br#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#).unwrap();
    assert_eq!(verdict(&r.reply), "ok: 15");
    let r =
        parse_reply(br#"{"type":"stopped","run":1,"step":1,"status":"final","extra":1}"#).unwrap();
    assert_eq!(
        r.reply,
        DeviceReply::Stopped {
            run: 1,
            step: 1,
            status: "final".into()
        }
    );
    let r = parse_reply(br#"{"type":"observation","run":1,"step":2,"call_id":"c","name":"HassValveOpen","executed":false,"ok":false,"data":"approval-denied"}"#).unwrap();
    assert_eq!(verdict(&r.reply), "refused, not executed: approval-denied");
    // Issue 15: a duty-limit refusal says when the actuator may go on.
    let r = parse_reply(br#"{"type":"observation","run":1,"step":3,"call_id":"v2","name":"HassValveOpen","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":570001}"#).unwrap();
    assert_eq!(
        verdict(&r.reply),
        "refused, not executed: duty-limit (may go on again in 570001 ms)"
    );
    assert!(parse_reply(br#"{"type":"mystery"}"#).is_err());
    assert!(parse_reply(b"\xff").is_err());
}

#[test]
fn console_lines_are_sorted_and_prompts_answered() {
    let prompt = r#"approve? c3 HassValveOpen {"name":"valve"} [y/n]"#;
    assert_eq!(
        console_event(prompt, Operator::Deny),
        ConsoleEvent::Prompt {
            line: prompt.into(),
            answer: "n"
        }
    );
    assert_eq!(
        console_event("denied c3 (timeout)", Operator::Approve),
        ConsoleEvent::Outcome("denied c3 (timeout)".into())
    );
    assert_eq!(
        console_event("leds=3", Operator::Approve),
        ConsoleEvent::Line("leds=3".into())
    );
    assert_eq!(actuators(3), "lamp on, valve open (register 3)");
    assert_eq!(
        actuators(0),
        "lamp off, valve closed (register 0: the safe state)"
    );
}

#[test]
fn summaries_name_the_call() {
    assert_eq!(
        summary(r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#),
        r#"tool c1 add {"a":7,"b":8}"#
    );
    assert_eq!(summary(r#"{"kind":"final","text":"15"}"#), "final 15");
    assert_eq!(summary("[1]"), "proposal [1]");
}

fn sealed(payload: &str) -> Vec<u8> {
    let mut buf = vec![0u8; payload.len() + CHECKSUM_LEN + 1];
    buf[..payload.len()].copy_from_slice(payload.as_bytes());
    let n = link::seal(&mut buf, payload.len()).unwrap();
    buf.truncate(n);
    buf
}

/// A scripted stand-in for the device: for each request it expects,
/// the raw bytes it answers.
fn fake_device(exchanges: Vec<(&'static str, Vec<Vec<u8>>)>) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut lines = BufReader::new(stream).lines();
        for (expect, answers) in exchanges {
            let line = lines.next().unwrap().unwrap();
            let payload = link::verify(line.as_bytes()).unwrap();
            assert!(
                std::str::from_utf8(payload).unwrap().starts_with(expect),
                "{line} does not start with {expect}"
            );
            for answer in answers {
                writer.write_all(&answer).unwrap();
            }
        }
    });
    TcpStream::connect(address).unwrap()
}

fn hello_and_status(max_decisions: u8) -> Vec<(&'static str, Vec<Vec<u8>>)> {
    vec![
        (
            "HELLO",
            vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
        ),
        (
            "STATUS",
            vec![sealed(&format!(
                r#"{{"type":"status","run":1,"decisions":0,"max_decisions":{max_decisions},"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}}"#
            ))],
        ),
    ]
}

fn status_at_end(state: &str) -> (&'static str, Vec<Vec<u8>>) {
    (
        "STATUS",
        vec![sealed(&format!(
            r#"{{"type":"status","run":1,"decisions":2,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"{state}","actuators":0}}"#
        ))],
    )
}

fn run_fake(
    exchanges: Vec<(&'static str, Vec<Vec<u8>>)>,
    proposals: &[&str],
    json: bool,
) -> (Result<SessionEnd, DeviceError>, String) {
    let stream = fake_device(exchanges);
    let mut out = Vec::new();
    let script = Script {
        proposals: proposals.iter().map(|p| (*p).to_owned()).collect(),
        budgets: None,
    };
    let result = Session::new(
        AgentLink::new(stream, false),
        None,
        json,
        Duration::from_secs(5),
        &mut out,
    )
    .run(&script);
    (result, String::from_utf8(out).unwrap())
}

#[test]
fn worked_example_against_a_fake_device() {
    let mut exchanges = hello_and_status(8);
    exchanges.push((
            "PROPOSE {\"kind\":\"tool\"",
            vec![sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#)],
        ));
    exchanges.push((
        "PROPOSE {\"kind\":\"final\"",
        vec![sealed(
            r#"{"type":"stopped","run":1,"step":1,"status":"final"}"#,
        )],
    ));
    exchanges.push(status_at_end("final"));
    let (result, out) = run_fake(
        exchanges,
        &[
            r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
            r#"{"kind":"final","text":"15"}"#,
        ],
        false,
    );
    assert_eq!(result.unwrap().exit_code(), 0);
    assert!(
        out.contains(r#"step 0  tool c1 add {"a":7,"b":8} -> ok: 15"#),
        "{out}"
    );
    assert!(out.contains("step 1  final 15 -> stopped: final"), "{out}");
    assert!(out.contains("run stopped: final"), "{out}");
}

#[test]
fn line_noise_is_resent_and_json_mode_prints_every_reply() {
    let mut exchanges = hello_and_status(8);
    exchanges.push((
        "PROPOSE",
        vec![sealed(r#"{"type":"error","error":"bad-checksum"}"#)],
    ));
    exchanges.push((
        "PROPOSE",
        vec![sealed(
            r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#,
        )],
    ));
    exchanges.push(status_at_end("final"));
    let (result, out) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], true);
    assert_eq!(result.unwrap().exit_code(), 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(
        lines[2],
        r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#
    );
}

#[test]
fn the_last_decision_is_followed_by_its_stop() {
    let mut exchanges = hello_and_status(1);
    exchanges.push((
            "PROPOSE",
            vec![
                sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#),
                sealed(r#"{"type":"stopped","run":1,"step":0,"status":"decision-budget"}"#),
            ],
        ));
    exchanges.push(status_at_end("decision-budget"));
    let (result, out) = run_fake(
        exchanges,
        &[
            r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
            r#"{"kind":"final","text":"never sent"}"#,
        ],
        false,
    );
    let end = result.unwrap();
    assert_eq!(end.status.as_deref(), Some("decision-budget"));
    assert_eq!(end.exit_code(), 1);
    assert!(out.contains("step 0  stopped: decision-budget"), "{out}");
}

#[test]
fn a_device_without_a_run_is_a_usage_error() {
    let exchanges = vec![
        (
            "HELLO",
            vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
        ),
        (
            "STATUS",
            vec![sealed(
                r#"{"type":"status","run":0,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"idle","actuators":0}"#,
            )],
        ),
    ];
    let (result, _) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
    let e = result.unwrap_err();
    assert!(matches!(e, DeviceError::Usage(_)), "{e}");
    assert!(e.to_string().contains("start"), "{e}");
}

#[test]
fn a_damaged_reply_to_a_proposal_is_not_resent() {
    let mut exchanges = hello_and_status(8);
    let mut damaged = sealed(r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#);
    damaged[5] ^= 1;
    exchanges.push(("PROPOSE", vec![damaged]));
    let (result, _) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
    let e = result.unwrap_err().to_string();
    assert!(e.contains("damaged (frame checksum does not match)"), "{e}");
}

#[test]
fn a_script_that_ends_first_leaves_exit_status_one() {
    let mut exchanges = hello_and_status(8);
    exchanges.push((
            "PROPOSE",
            vec![sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"x","executed":false,"ok":false,"data":"unknown-tool"}"#)],
        ));
    exchanges.push(status_at_end("running"));
    let (result, out) = run_fake(
        exchanges,
        &[r#"{"kind":"tool","call_id":"c1","name":"x","arguments":{}}"#],
        false,
    );
    let end = result.unwrap();
    assert_eq!((end.exit_code(), end.status), (1, None));
    assert!(out.contains("refused, not executed: unknown-tool"), "{out}");
    assert!(out.contains("still open"), "{out}");
}

/// A peer that sends `chunk` again and again, for at most `for_at_most`
/// (or until the connection is closed), after `first` if given.
fn endless_peer(first: Vec<u8>, chunk: &'static [u8], for_at_most: Duration) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let _ = stream.write_all(&first);
        let until = Instant::now() + for_at_most;
        while Instant::now() < until {
            if stream.write_all(chunk).is_err() {
                break;
            }
        }
    });
    TcpStream::connect(address).unwrap()
}

/// Found by a hostile trial: a reply without a line end was buffered
/// without limit (1.1 GB in 3 s, then an abort). It is refused as soon
/// as it passes FRAME_MAX, and the link never holds more than a read
/// and a frame, however long the peer goes on.
#[test]
fn a_reply_without_a_line_end_is_bounded() {
    let began = Instant::now();
    let stream = endless_peer(Vec::new(), &[b'A'; 65536], Duration::from_secs(20));
    let mut out = Vec::new();
    let script = Script {
        proposals: vec![r#"{"kind":"final","text":"x"}"#.into()],
        budgets: None,
    };
    let e = Session::new(
        AgentLink::new(stream.try_clone().unwrap(), false),
        None,
        false,
        Duration::from_secs(5),
        &mut out,
    )
    .run(&script)
    .unwrap_err();
    assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
    assert!(
        e.to_string().contains("frame longer than 1024 bytes"),
        "{e}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );

    // The same link keeps dropping the endless line, in bounded memory.
    let mut link = AgentLink::new(stream, true);
    assert_eq!(
        link.receive(Duration::from_secs(5)).unwrap(),
        Received::Bad(FrameError::TooLong)
    );
    let e = link.receive(Duration::from_millis(500)).unwrap_err();
    assert!(matches!(e, DeviceError::Timeout(_)), "{e}");
    assert!(link.inbox.len() <= READ_CHUNK, "{}", link.inbox.len());
    assert!(
        link.line.capacity() <= FRAME_MAX,
        "{}",
        link.line.capacity()
    );
    assert!(link.discarding);
}

#[test]
fn an_over_long_reply_line_is_discarded_to_its_line_end() {
    let mut first = vec![b'z'; 5000];
    first.push(b'\n');
    first.extend(sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#));
    let stream = endless_peer(first, b"", Duration::ZERO);
    let mut link = AgentLink::new(stream, false);
    assert_eq!(
        link.receive(Duration::from_secs(5)).unwrap(),
        Received::Bad(FrameError::TooLong)
    );
    let next = link.receive_reply(Duration::from_secs(5)).unwrap();
    assert_eq!(
        next.reply,
        DeviceReply::Hello {
            protocol: 2,
            frame_max: 1024
        }
    );
}

/// The console side of the same trial: an endless console line is
/// refused once it passes CONSOLE_LINE_MAX, not buffered.
#[test]
fn a_console_line_without_a_line_end_is_bounded() {
    let began = Instant::now();
    let stream = endless_peer(Vec::new(), &[b'B'; 65536], Duration::from_secs(20));
    let mut console = Console::new(stream, Operator::Deny, false).unwrap();
    let e = console.command("start", &["started run"]).unwrap_err();
    assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
    assert!(e.to_string().contains("longer than 1024 bytes"), "{e}");
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );

    let mut lines = LineReader::new(4);
    let fed: Vec<_> = b"abcdefgh\nok\r\n"
        .iter()
        .filter_map(|&b| lines.push(b))
        .collect();
    assert_eq!(fed, [None, Some("ok".to_owned())]);
    assert!(lines.line.capacity() <= 8);
}

fn run_fake_budgets(
    exchanges: Vec<(&'static str, Vec<Vec<u8>>)>,
    proposals: &[&str],
) -> (Result<SessionEnd, DeviceError>, String) {
    run_fake(exchanges, proposals, false)
}

/// Found by a hostile trial: a device (or a man in the middle) that
/// answered with another call id, another step, or an observation to a
/// `final` was printed as `ok`. Every reply must match its request; a
/// mismatch names what was expected and what came.
#[test]
fn a_reply_that_does_not_belong_to_its_request_is_a_protocol_error() {
    let add = r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#;
    let fin = r#"{"kind":"final","text":"15"}"#;
    let obs = |run: u32, step: u8, id: &str, name: &str| {
        sealed(&format!(
            r#"{{"type":"observation","run":{run},"step":{step},"call_id":"{id}","name":"{name}","executed":true,"ok":true,"data":15}}"#
        ))
    };
    let stop = |run: u32, step: u8, status: &str| {
        sealed(&format!(
            r#"{{"type":"stopped","run":{run},"step":{step},"status":"{status}"}}"#
        ))
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            add,
            obs(1, 0, "OTHER", "add"),
            r#"expected call id "c1", got "OTHER""#,
        ),
        (
            add,
            obs(1, 0, "c1", "HassValveOpen"),
            r#"expected tool "add", got "HassValveOpen""#,
        ),
        (add, obs(1, 5, "c1", "add"), "expected step 0, got step 5"),
        (add, obs(2, 0, "c1", "add"), "expected run 1, got run 2"),
        (add, stop(1, 0, "final"), r#"got the stop "final""#),
        (
            fin,
            obs(1, 0, "c1", "add"),
            "expected a stop (final, policy-error, time-budget), got an observation",
        ),
        (fin, stop(3, 0, "final"), "expected run 1, got run 3"),
        (
            fin,
            stop(1, 0, "tool-budget"),
            r#"got the stop "tool-budget""#,
        ),
        (
            fin,
            sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#),
            "got a hello reply",
        ),
        (
            add,
            sealed(
                r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":false,"ok":true,"data":15}"#,
            ),
            "ok but not executed",
        ),
    ];
    for (proposal, answer, why) in cases {
        let mut exchanges = hello_and_status(8);
        exchanges.push(("PROPOSE", vec![answer]));
        let (result, out) = run_fake_budgets(exchanges, &[proposal]);
        let e = result.unwrap_err();
        assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
        let text = e.to_string();
        assert!(text.contains(why), "{why:?} not in {text}");
        assert!(text.contains("expected "), "{text}");
        assert!(
            !out.contains("-> ok"),
            "a mismatch was reported as a verdict:\n{out}"
        );
    }

    // The stop after the last decision must be that round's.
    let mut exchanges = hello_and_status(1);
    exchanges.push((
        "PROPOSE",
        vec![obs(1, 0, "c1", "add"), stop(1, 1, "decision-budget")],
    ));
    let (result, _) = run_fake_budgets(exchanges, &[add]);
    let e = result.unwrap_err().to_string();
    assert!(e.contains("expected step 0, got step 1"), "{e}");

    // The run may not change under the session.
    let mut exchanges = hello_and_status(8);
    exchanges.push(("PROPOSE", vec![stop(1, 0, "final")]));
    exchanges.push((
            "STATUS",
            vec![sealed(
                r#"{"type":"status","run":2,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}"#,
            )],
        ));
    let (result, _) = run_fake_budgets(exchanges, &[fin]);
    let e = result.unwrap_err().to_string();
    assert!(e.contains("expected run 1, got run 2"), "{e}");
}

/// A session that joins a run already under way expects its steps to
/// go on from the run's decisions.
#[test]
fn steps_are_expected_from_the_runs_decisions() {
    let exchanges = vec![
        (
            "HELLO",
            vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
        ),
        (
            "STATUS",
            vec![sealed(
                r#"{"type":"status","run":4,"decisions":3,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"running","actuators":1}"#,
            )],
        ),
        (
            "PROPOSE",
            vec![sealed(
                r#"{"type":"stopped","run":4,"step":3,"status":"final"}"#,
            )],
        ),
        (
            "STATUS",
            vec![sealed(
                r#"{"type":"status","run":4,"decisions":4,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"final","actuators":0}"#,
            )],
        ),
    ];
    let (result, out) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
    assert_eq!(result.unwrap().exit_code(), 0);
    assert!(out.contains("run 4: running, 3/8 decisions"), "{out}");
    assert!(out.contains("step 3  final x -> stopped: final"), "{out}");
    assert!(
        out.contains("actuators left: lamp off, valve closed (register 0: the safe state)"),
        "{out}"
    );
}

/// Nothing but line ends that a terminal would act on.
fn clean(out: &str) -> bool {
    out.chars().all(|c| c == '\n' || !unsafe_on_terminal(c))
}

/// Found by a hostile trial: `device` printed raw ESC and bidi
/// characters from the script and from the device.
#[test]
fn script_and_device_text_is_escaped_on_the_terminal() {
    let proposal = "{\"kind\":\"final\",\"text\":\"t\\u001b[2J\u{202e}X\"}";
    let mut exchanges = hello_and_status(8);
    exchanges.push((
        "PROPOSE",
        vec![sealed(
            "{\"type\":\"stopped\",\"run\":1,\"step\":0,\"status\":\"final\u{202e}\\u001b[31m\"}",
        )],
    ));
    let (result, out) = run_fake(exchanges, &[proposal], false);
    // Not a stop word of a final: refused, and the message, which
    // quotes the reply, is escaped where it is printed.
    let e = result.unwrap_err();
    assert!(e.to_string().contains('\u{202e}'), "{e}");
    let line = error_line(&e);
    assert!(clean(&line) && line.contains(r"\u{202e}"), "{line}");
    assert!(clean(&out), "{out:?}");

    let mut exchanges = hello_and_status(8);
    exchanges.push((
            "PROPOSE",
            vec![sealed(
                "{\"type\":\"observation\",\"run\":1,\"step\":0,\"call_id\":\"c1\",\"name\":\"add\",\"executed\":false,\"ok\":false,\"data\":\"\\u001b]0;pwned\\u0007\u{202e}\"}",
            )],
        ));
    exchanges.push(status_at_end("running"));
    let tool = "{\"kind\":\"tool\",\"call_id\":\"c1\",\"name\":\"add\",\"arguments\":{\"a\":\"\\u001b[2J\u{202e}\"}}";
    for json in [false, true] {
        let (result, out) = run_fake(exchanges.clone(), &[proposal, tool][1..], json);
        result.unwrap();
        assert!(clean(&out), "{out:?}");
        if json {
            let line = out.lines().nth(2).unwrap();
            let back: Value = serde_json::from_str(line).unwrap();
            assert_eq!(back["data"], "\u{1b}]0;pwned\u{7}\u{202e}");
        } else {
            assert!(
                out.contains(r"refused, not executed: \u{1b}]0;pwned\u{7}\u{202e}"),
                "{out}"
            );
            assert!(out.contains(r#"{"a":"\u001b[2J\u{202e}"}"#), "{out}");
        }
    }
    let (result, out) = run_fake(
        vec![
            (
                "HELLO",
                vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
            ),
            (
                "STATUS",
                vec![sealed(
                    r#"{"type":"status","run":1,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}"#,
                )],
            ),
            (
                "PROPOSE",
                vec![sealed(
                    r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#,
                )],
            ),
            status_at_end("final"),
        ],
        &[proposal],
        false,
    );
    result.unwrap();
    assert!(
        out.contains(r"final t\u{1b}[2J\u{202e}X -> stopped: final"),
        "{out}"
    );
    assert_eq!(json_terminal_safe(r#"{"a":"ok"}"#), r#"{"a":"ok"}"#);
    assert_eq!(
        json_terminal_safe("{\"a\":\"\u{202e}\\\"\u{85}\"}"),
        r#"{"a":"\u202e\"\u0085"}"#
    );
}

/// Issue 11 (the host's reply schema is the core's): the host reads
/// every kind of reply the core's codec writes, field for field, a
/// duty refusal's `retry_after_ms` included.
#[test]
fn every_reply_the_core_writes_is_read_by_the_host() {
    let cases: Vec<(link::Reply<&str, i64>, DeviceReply)> = vec![
        (
            link::Reply::Observation {
                run: 1,
                step: 3,
                call_id: "v2",
                name: "HassValveOpen",
                executed: false,
                ok: false,
                data: 0,
                retry_after_ms: Some(570_001),
            },
            DeviceReply::Observation {
                run: 1,
                step: 3,
                call_id: "v2".into(),
                name: "HassValveOpen".into(),
                executed: false,
                ok: false,
                data: Value::from(0),
                retry_after_ms: Some(570_001),
            },
        ),
        (
            link::Reply::Observation {
                run: 3,
                step: 1,
                call_id: "c1",
                name: "add",
                executed: true,
                ok: true,
                data: 15,
                retry_after_ms: None,
            },
            DeviceReply::Observation {
                run: 3,
                step: 1,
                call_id: "c1".into(),
                name: "add".into(),
                executed: true,
                ok: true,
                data: Value::from(15),
                retry_after_ms: None,
            },
        ),
        (
            link::Reply::Stopped {
                run: 3,
                step: 2,
                status: "final",
            },
            DeviceReply::Stopped {
                run: 3,
                step: 2,
                status: "final".into(),
            },
        ),
        (
            link::Reply::Error { error: "no-run" },
            DeviceReply::Error {
                error: "no-run".into(),
            },
        ),
        (
            link::Reply::Status {
                run: 3,
                decisions: 2,
                max_decisions: 8,
                tool_attempts: 1,
                max_tool_calls: 4,
                state: "running",
                actuators: 2,
            },
            DeviceReply::Status {
                run: 3,
                decisions: 2,
                max_decisions: 8,
                tool_attempts: 1,
                max_tool_calls: 4,
                state: "running".into(),
                actuators: 2,
            },
        ),
        (
            link::Reply::Hello {
                protocol: PROTOCOL_VERSION,
                frame_max: FRAME_MAX,
            },
            DeviceReply::Hello {
                protocol: PROTOCOL_VERSION,
                frame_max: FRAME_MAX,
            },
        ),
    ];
    for (written, read) in cases {
        let mut buf = [0u8; FRAME_MAX + 1];
        let n = link::write_frame(&mut buf, &written).unwrap();
        let payload = link::verify(&buf[..n - 1]).unwrap();
        assert_eq!(parse_reply(payload).unwrap().reply, read);
    }
}

/// Issue 11 and `docs/PROTOCOL.md` ("Replies"): read with the core's
/// schema, a reply's unknown fields are ignored, an escaped word is read
/// (owned), and a reply that breaks the schema — an unknown type, a
/// missing field, a `retry_after_ms` past the protocol's 32 bits — is
/// a protocol error, never a reply.
#[test]
fn replies_are_read_by_the_core_schema_and_refused_outside_it() {
    let r =
        parse_reply(br#"{"type":"stopped","run":2,"step":0,"status":"fin\u0061l","extra":[1]}"#)
            .unwrap();
    assert_eq!(
        r.reply,
        DeviceReply::Stopped {
            run: 2,
            step: 0,
            status: "final".into()
        }
    );
    for bad in [
            &br#"{"type":"stopping","run":2,"step":0,"status":"final"}"#[..],
            br#"{"type":"stopped","run":2,"status":"final"}"#,
            br#"{"type":"observation","run":1,"step":3,"call_id":"v2","name":"n","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":4294967296}"#,
            br#"{"type":"hello","protocol":-1,"frame_max":1024}"#,
        ] {
            assert!(
                matches!(parse_reply(bad), Err(DeviceError::Protocol(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
}

#[test]
fn a_malformed_checksum_is_line_noise_to_resend() {
    for word in ["bad-checksum", "missing-checksum", "malformed-checksum"] {
        assert!(is_line_noise(word), "{word}");
    }
    assert!(!is_line_noise("frame-too-long"));
}
