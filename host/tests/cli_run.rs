//! `budgetgate run`: the trace table, the summary with work units, `--json`
//! identical to eval's answer, exit statuses 0/1/2 and one-line errors.

mod common;

use common::{example, stdout_of};
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{json, Value};

fn run() -> Command {
    common::subcommand("run")
}

fn contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(
        !text.lines().any(|l| l.ends_with(' ')),
        "trailing spaces:\n{text}"
    );
}

/// What `budgetgate eval` answers for `run_bounded_agent` with the file's
/// object as args, as the text after `{"ok":`.
fn eval_ok(file: &str) -> String {
    let args: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let request = json!({"fn": "run_bounded_agent", "args": args});
    let answer = budgetgate::eval::answer_line(request.to_string().as_bytes());
    let ok = answer
        .strip_prefix(r#"{"ok":"#)
        .unwrap_or_else(|| panic!("not ok: {answer}"));
    ok.strip_suffix('}').expect("object").to_owned()
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Fixture {
    fn new(contents: &[u8]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("script.json");
        std::fs::write(&path, contents).expect("write fixture");
        Self { _dir: dir, path }
    }
    fn path(&self) -> &str {
        self.path.to_str().expect("UTF-8 path")
    }
}

fn one_line_error(cmd: &mut Command) -> String {
    common::one_line_error(cmd, "run")
}

#[test]
fn spec_worked_example_add_then_final() {
    let text = stdout_of(run().arg(example("run-add.json")), 0);
    contains_all(
        &text,
        &[
            "2 proposals; tools: add",
            "  step  decision  call id  tool  executed  ok   observation",
            "     0  tool      c1       add   yes       yes  15",
            "     1  final     -        -     -         -    -",
            "  status         final",
            "  answer         \"15\"",
            "  decisions      2 of at most 8",
            "  tool attempts  1 of at most 4",
            "  executions     1",
            "  work units     3 = 2×1 for decisions + 1×1 for add",
        ],
    );
}

#[test]
fn spec_a3_work_units_with_costs() {
    let text = stdout_of(
        run().args([
            &example("run-add.json"),
            "--decision-units",
            "2",
            "--tool-units",
            "add=3",
        ]),
        0,
    );
    contains_all(
        &text,
        &["  work units     7 = 2×2 for decisions + 1×3 for add"],
    );
}

#[test]
fn json_is_exactly_the_eval_result_for_every_example() {
    for (name, code, status) in [
        ("run-add.json", 0, "final"),
        ("run-budget.json", 1, "tool-budget"),
        ("run-tools.json", 0, "final"),
        ("run-duplicate.json", 1, "duplicate-call"),
        ("run-invalid.json", 1, "policy-error"),
    ] {
        let file = example(name);
        let out = stdout_of(run().args([&file, "--json"]), code);
        assert_eq!(out, format!("{}\n", eval_ok(&file)), "{name}");
        let got: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(got["status"], status, "{name}");
    }
}

#[test]
fn spec_worked_example_tool_budget() {
    let file = example("run-budget.json");
    let text = stdout_of(run().arg(&file), 1);
    contains_all(
        &text,
        &[
            "     0  tool                   c0       add   yes       yes  15",
            "     1  rejected: tool-budget  c1       add   -         -    -",
            "  status         tool-budget",
            "  why            step 1: a tool call with no tool attempts left (max_tool_calls 1)",
            "  answer         none",
            "  tool attempts  1 of at most 1",
        ],
    );
    let got: Value = serde_json::from_str(&stdout_of(run().args([&file, "--json"]), 1)).unwrap();
    assert_eq!(got["trace"].as_array().map(Vec::len), Some(2));
    assert_eq!(got["tool_attempts"], 1);
    assert_eq!(got["answer"], Value::Null);
}

#[test]
fn spec_worked_example_decision_budget_from_the_option() {
    let file = example("run-add.json");
    let text = stdout_of(run().args([&file, "--max-decisions", "1"]), 1);
    contains_all(
        &text,
        &[
            "  status         decision-budget",
            "  why            all 1 decision rounds used without a final answer (max_decisions 1)",
            "  decisions      1 of at most 1",
        ],
    );
    let got: Value = serde_json::from_str(&stdout_of(
        run().args([&file, "--max-decisions", "1", "--json"]),
        1,
    ))
    .unwrap();
    assert_eq!(got["status"], "decision-budget");
    assert_eq!(got["trace"].as_array().map(Vec::len), Some(1));
}

#[test]
fn max_tool_calls_option_overrides_the_file() {
    let text = stdout_of(
        run().args([&example("run-add.json"), "--max-tool-calls", "0"]),
        1,
    );
    contains_all(
        &text,
        &["rejected: tool-budget", "  tool attempts  0 of at most 0"],
    );
}

#[test]
fn tools_example_shows_unknown_tools_failures_and_cut_observations() {
    let text = stdout_of(run().arg(example("run-tools.json")), 0);
    contains_all(
        &text,
        &[
            r#"     0  tool      lookup     echo       yes       yes  {"city":"Zürich","days":3,"units":"metr…"#,
            "     1  tool      sum        add        yes       yes  6.5",
            "     3  tool      notify     send_mail  no        no   \"unknown-tool\"",
            "     4  tool      flaky      fail       yes       no   \"tool-error\"",
            "  answer         \"Zürich: 3 days planned; total 6.5.\"",
            "  executions     4",
        ],
    );
    for line in text.lines().filter(|l| l.contains('…')) {
        let observation = line.rsplit("  ").next().unwrap();
        assert_eq!(observation.chars().count(), 40, "{line}");
    }
}

#[test]
fn duplicate_and_invalid_proposals_say_why() {
    let text = stdout_of(run().arg(example("run-duplicate.json")), 1);
    contains_all(
        &text,
        &[
            "rejected: duplicate-call-id  c1       add",
            "  why            step 1: call id `c1` was already used by an earlier tool attempt",
        ],
    );
    let text = stdout_of(run().arg(example("run-invalid.json")), 1);
    contains_all(
        &text,
        &[
            "rejected: invalid-policy-action",
            "  why            step 0: the proposal is not a valid action: argument 1: must be a string, number, boolean or null, not an object or array (key `b`)",
        ],
    );
}

#[test]
fn used_up_script_is_a_policy_error() {
    let script = Fixture::new(br#"{"script": [], "tools": {}}"#);
    let text = stdout_of(run().arg(script.path()), 1);
    contains_all(
        &text,
        &[
            "0 proposals; tools: none",
            "  status         policy-error",
            "  why            step 0: the script has no proposal left (it has 0)",
        ],
    );
}

#[test]
fn terminal_controls_in_tool_data_are_escaped() {
    let script = Fixture::new(
        "{\"script\": [{\"kind\":\"tool\",\"call_id\":\"c\",\"name\":\"e\",\"arguments\":{\"s\":\"\u{9b}2J\"}},
                      {\"kind\":\"final\",\"text\":\"\u{7f}x\"}], \"tools\": {\"e\": \"echo\"}}"
            .as_bytes(),
    );
    let text = stdout_of(run().arg(script.path()), 0);
    assert!(
        !text.contains('\u{9b}') && !text.contains('\u{7f}'),
        "{text:?}"
    );
    contains_all(
        &text,
        &[r#"{"s":"\u{9b}2J"}"#, r#"answer         "\u{7f}x""#],
    );
}

#[test]
fn script_from_stdin() {
    let body = std::fs::read(example("run-add.json")).unwrap();
    let out = stdout_of(run().args(["-", "--json"]).write_stdin(body), 0);
    assert!(
        out.starts_with(r#"{"status":"final","answer":"15""#),
        "{out}"
    );
}

#[test]
fn malformed_scripts_give_one_line_naming_the_file() {
    let cases: [(&[u8], &str); 8] = [
        (b"{\"script\": [", "not valid JSON: EOF while parsing"),
        (b"[1, 2]", "a script file is a JSON object"),
        (
            br#"{"script": [], "tools": {}, "extra": 1}"#,
            "unexpected key `extra`",
        ),
        (br#"{"script": []}"#, "missing key `tools`"),
        (
            br#"{"script": {}, "tools": {}}"#,
            "`script` must be an array of proposals",
        ),
        (
            br#"{"script": [], "tools": {"t": "teleport"}}"#,
            "tool `t`: kind must be one of add, echo, fail, repeat, nested",
        ),
        (
            br#"{"script": [], "tools": {}, "max_decisions": 0}"#,
            "max_decisions must be an integer 1..=32",
        ),
        (
            br#"{"script": [], "tools": {"9bad": "add"}}"#,
            "tool `9bad`",
        ),
    ];
    for (body, want) in cases {
        let script = Fixture::new(body);
        let line = one_line_error(run().arg(script.path()));
        let prefix = format!("budgetgate run: {}: ", script.path());
        assert!(line.starts_with(&prefix), "{line}");
        assert!(line.contains(want), "want {want:?} in {line}");
    }
    let line = one_line_error(run().arg("no-such-script.json"));
    assert!(
        line.starts_with("budgetgate run: no-such-script.json: cannot read: "),
        "{line}"
    );
    let script = Fixture::new(b"{\"script\": [], \"tools\": {}, \"x\xff\": 1}");
    let line = one_line_error(run().arg(script.path()));
    assert!(line.contains("not UTF-8"), "{line}");
}

#[test]
fn bad_options_are_errors() {
    let file = example("run-add.json");
    let line = one_line_error(run().args([&file, "--tool-units", "search=2"]));
    assert!(
        line.contains("`search` is not a tool registered in"),
        "{line}"
    );
    let line = one_line_error(run().args([&file, "--tool-units", "add=1,add=2"]));
    assert!(line.contains("`add` is given twice"), "{line}");
    for bad in [
        &["--tool-units", "add"][..],
        &["--tool-units", "add=1001"],
        &["--decision-units", "1001"],
        &["--max-decisions", "0"],
        &["--max-tool-calls", "17"],
    ] {
        run().arg(&file).args(bad).assert().code(2).stdout("");
    }
}

#[test]
fn input_over_the_size_limit_is_refused_without_reading_it_all() {
    // /dev/zero never ends: only a bounded read can answer at all.
    let output = run()
        .arg("/dev/zero")
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8(output.stderr).expect("UTF-8");
    assert!(stderr.contains("larger than 16 MiB"), "{stderr}");
}

#[test]
fn a_byte_order_mark_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bom.json");
    std::fs::write(&file, b"\xEF\xBB\xBF{\"script\":[],\"tools\":{}}").expect("write");
    let output = run().arg(&file).assert().code(2).get_output().clone();
    assert!(String::from_utf8_lossy(&output.stderr).contains("byte-order mark"));
}

#[test]
fn a_failed_write_is_exit_2_not_a_panic() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("budgetgate"));
    let output = cmd
        .args(["run", &example("run-add.json")])
        .stdout(full)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("writing the output"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_invalid_proposal_names_the_key_at_fault() {
    let cases: [(&[u8], &str); 4] = [
        (
            br#"{"script": [{"kind": "final", "text": "x", "call_id": "c"}], "tools": {}}"#,
            "unexpected key: a final action has exactly kind and text, a tool action exactly kind, call_id, name and arguments (key `call_id`)",
        ),
        (
            br#"{"script": [{"kind": "tool", "call_id": "c", "name": "add", "arguments": {}, "why": 1}], "tools": {}}"#,
            "(key `why`)",
        ),
        (
            br#"{"script": [{"kind": "tool", "call_id": "c", "name": "add", "arguments": {"a": 1, "speed": 1000001}}], "tools": {}}"#,
            "argument 1: number must be finite with magnitude at most 1e6 (key `speed`)",
        ),
        // Not about one key: nothing is added.
        (
            br#"{"script": [{"kind": "tool", "call_id": "c", "name": "add"}], "tools": {}}"#,
            "the proposal is not a valid action: missing key `arguments`\n",
        ),
    ];
    for (script, expected) in cases {
        let script = Fixture::new(script);
        let text = stdout_of(run().arg(script.path()), 1);
        contains_all(&text, &[expected]);
    }
}

/// An argument refused for a literal no float can hold (`1e400`) is named by
/// its key, as every other argument error is.
#[test]
fn an_out_of_range_literal_names_its_argument_key() {
    let script = Fixture::new(
        br#"{"script":[{"kind":"tool","call_id":"c","name":"add","arguments":{"a":1,"huge":1e400}}],"tools":{"add":"add"}}"#,
    );
    let text = stdout_of(run().arg(script.path()), 1);
    contains_all(
        &text,
        &["argument 1: number must be finite with magnitude at most 1e6 (key `huge`)"],
    );
}
