//! `budgetgate eval` through the real binary: the SPEC worked examples of every
//! function, and a stream whose bad lines are each answered in order without
//! stopping it.

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use serde_json::{json, Value};

/// Feeds `input` to `budgetgate eval`, expects exit 0 and an empty stderr,
/// and returns the answers, one JSON value per line.
fn eval(input: impl Into<Vec<u8>>) -> Vec<Value> {
    let output = cargo_bin_cmd!("budgetgate")
        .arg("eval")
        .write_stdin(input.into())
        .assert()
        .success()
        .stderr("")
        .get_output()
        .clone();
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 answers");
    assert!(stdout.ends_with('\n') || stdout.is_empty(), "{stdout:?}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn error_kind(answer: &Value) -> &str {
    answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

const ADD_7_8: &str = r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#;

#[test]
fn spec_worked_examples_of_every_function() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/eval.jsonl");
    let input = std::fs::read(&path).expect("examples/eval.jsonl");
    let answers = eval(input);
    let ok: Vec<&Value> = answers
        .iter()
        .map(|a| a.get("ok").unwrap_or_else(|| panic!("not ok: {a}")))
        .collect();
    assert_eq!(ok.len(), 10);
    // SPEC A1: the validated action is the proposal itself.
    assert_eq!(*ok[0], serde_json::from_str::<Value>(ADD_7_8).unwrap());
    assert_eq!(*ok[1], json!({"kind": "final", "text": "15"}));
    // SPEC A2: add then final; the fresh-call-id policy; max_decisions 1.
    assert_eq!(ok[2]["status"], "final");
    assert_eq!(ok[2]["answer"], "15");
    assert_eq!(ok[2]["tool_attempts"], 1);
    assert_eq!(ok[2]["trace"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        ok[2]["observations"],
        json!([{"call_id": "c1", "name": "add", "ok": true, "data": 15}])
    );
    assert_eq!(ok[3]["status"], "tool-budget");
    assert_eq!(ok[3]["trace"].as_array().map(Vec::len), Some(2));
    assert_eq!(ok[3]["tool_attempts"], 1);
    assert_eq!(ok[4]["status"], "decision-budget");
    assert_eq!(ok[4]["answer"], Value::Null);
    // SPEC A3: decision_units 2, add costs 3.
    assert_eq!(
        *ok[5],
        json!({"decisions": 2, "executed_tools": 1, "work_units": 7})
    );
    // SPEC B1.
    assert_eq!(
        *ok[6],
        json!({"steps": 2, "tokens": 5, "output": 3, "max_depth": 2, "max_fanout": 1})
    );
    // SPEC B2: tokens 4 stops before b; tokens 5 completes; steps 0 accepts nothing.
    assert_eq!(ok[7]["accepted"], json!(["a"]));
    assert_eq!(ok[7]["stopped"], "b");
    assert_eq!(ok[7]["reason"], "tokens");
    assert_eq!(ok[7]["usage"]["tokens"], 2);
    assert_eq!(ok[8]["reason"], "complete");
    assert_eq!(ok[8]["stopped"], Value::Null);
    assert_eq!(ok[8]["usage"]["tokens"], 5);
    assert_eq!(ok[9]["accepted"], json!([]));
    assert_eq!(ok[9]["reason"], "steps");
}

#[test]
fn bad_lines_are_answered_in_order_and_the_stream_goes_on() {
    let usage = r#"{"fn":"aggregate_usage","args":{"plan":[]}}"#;
    let mut input = Vec::new();
    input.extend_from_slice(usage.as_bytes());
    input.extend_from_slice(b"\n{\"fn\": \"aggregate_usage\", \"args\": \n"); // cut short
    input.extend_from_slice(b"\n"); // empty line
    input.extend_from_slice(b"{\"fn\":\"aggregate_usage\",\"args\":{\"plan\":\xff}}\n"); // not UTF-8
    input.extend_from_slice(b"[1, 2]\n"); // not an object
    input.extend_from_slice(b"\"just a string\"\n");
    input.extend_from_slice(br#"{"fn":"nope","args":{}}"#);
    input.push(b'\n');
    input.extend_from_slice(
        format!(r#"{{"fn":"validate_agent_action","args":{{"value":{ADD_7_8}}}}}"#).as_bytes(),
    );
    input.extend_from_slice(b"\r\n");
    input.extend_from_slice(
        br#"{"fn":"validate_agent_action","args":{"value":{"kind":"final","text":"  "}}}"#,
    );
    input.push(b'\n');
    input.extend_from_slice(usage.as_bytes()); // last line without a newline
    let answers = eval(input);
    assert_eq!(answers.len(), 10, "{answers:#?}");
    let empty_usage =
        json!({"steps": 0, "tokens": 0, "output": 0, "max_depth": 0, "max_fanout": 0});
    assert_eq!(answers[0], json!({"ok": empty_usage}));
    for (i, answer) in answers.iter().enumerate().take(7).skip(1) {
        assert_eq!(error_kind(answer), "bad-request", "line {i}: {answer}");
    }
    assert!(answers[3]["detail"].as_str().unwrap().contains("not UTF-8"));
    assert!(answers[6]["detail"]
        .as_str()
        .unwrap()
        .contains("unknown fn `nope`"));
    assert_eq!(answers[7]["ok"]["call_id"], "c1");
    assert_eq!(error_kind(&answers[8]), "invalid-input");
    assert_eq!(answers[9], json!({"ok": empty_usage}));
}

#[test]
fn no_input_gives_no_answers() {
    assert!(eval(Vec::new()).is_empty());
}

#[test]
fn an_over_long_line_is_answered_and_the_stream_goes_on() {
    let mut input = vec![b' '; (16 << 20) + 1];
    input.extend_from_slice(b"\n{\"fn\":\"aggregate_usage\",\"args\":{\"plan\":[]}}\n");
    let output = assert_cmd::cargo::cargo_bin_cmd!("budgetgate")
        .arg("eval")
        .write_stdin(input)
        .assert()
        .code(0)
        .get_output()
        .clone();
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("bad-request") && lines[0].contains("longer than 16 MiB"));
    assert!(lines[1].starts_with("{\"ok\":"));
}

/// A reader that stops early (`eval | head -1`) ends the stream as a normal
/// end (exit 0, nothing on stderr), as every other subcommand treats it.
#[test]
fn a_reader_closing_the_pipe_ends_eval_normally() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let mut child = Command::new(assert_cmd::cargo::cargo_bin!("budgetgate"))
        .arg("eval")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("budgetgate eval starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let line = format!("{{\"fn\":\"validate_agent_action\",\"args\":{{\"value\":{ADD_7_8}}}}}\n");
    stdin.write_all(line.as_bytes()).expect("first request");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("first answer");
    assert!(first.starts_with("{\"ok\":"), "{first}");
    // The reader is gone; eval's next answer meets a closed pipe. Keep feeding
    // lines until eval has noticed (it must end, not hang or fail).
    for _ in 0..10_000 {
        if stdin.write_all(line.as_bytes()).is_err() {
            break;
        }
    }
    drop(stdin);
    let output = child.wait_with_output().expect("eval ends");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

/// Answers that cannot be written (a full disk) are an error with its reason
/// on stderr, never a silent exit.
#[test]
fn a_full_disk_is_reported_on_stderr_with_exit_2() {
    if !Path::new("/dev/full").exists() {
        eprintln!("no /dev/full on this system");
        return;
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full opens");
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("budgetgate"))
        .arg("eval")
        .stdin(
            std::fs::File::open(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/eval.jsonl"),
            )
            .expect("examples"),
        )
        .stdout(full)
        .output()
        .expect("eval runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("budgetgate eval: writing the answers"),
        "{stderr}"
    );
}
