//! `budgetgate plan`: the report a person reads, the `--json` object programs
//! read, exit statuses 0/1/2 and one-line errors naming file, row and rule.

mod common;

use common::{example, stdout_of};
use std::path::PathBuf;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{json, Value};

fn plan() -> Command {
    common::subcommand("plan")
}

/// A file in a fresh temporary directory, removed with the directory.
struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Fixture {
    fn new(name: &str, contents: &[u8]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, contents).expect("write fixture");
        Self { _dir: dir, path }
    }
    fn path(&self) -> &str {
        self.path.to_str().expect("UTF-8 path")
    }
}

fn one_line_error(cmd: &mut Command) -> String {
    common::one_line_error(cmd, "plan")
}

const SPEC_PLAN: &str = r#"[{"id":"a","parent":null,"tokens":2,"output":1},
                            {"id":"b","parent":"a","tokens":3,"output":2}]"#;

#[test]
fn example_plan_without_limits_completes_and_draws_the_tree() {
    let text = stdout_of(plan().arg(example("plan.json")), 0);
    for needle in [
        "6 steps; no limits given: the contract maximums",
        "  limits         32  320000  320000     32      32",
        "  whole plan      6   11900    4300      3       2",
        "    0  research              -                1200     300  accepted",
        "    1  ├─ search-papers      research         2400     800  accepted",
        "    2  │  └─ read-abstracts  search-papers    3000     600  accepted",
        "    3  └─ search-web         research         1800     500  accepted",
        "    5  └─ draft-summary      summarize        1500     900  accepted",
        "Complete: 6 of 6 steps accepted.",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(
        !text.lines().any(|l| l.ends_with(' ')),
        "trailing spaces:\n{text}"
    );
}

#[test]
fn example_limits_stop_the_plan_before_summarize() {
    let text = stdout_of(
        plan().args([&example("plan.json"), "--limits", &example("limits.json")]),
        1,
    );
    for needle in [
        "  accepted        4    8400    2200      3       2",
        "    3  └─ search-web         research         1800     500  accepted",
        "    4  summarize             -                2000    1200  stopped here (limit: tokens 10400 > 10000)",
        "    5  └─ draft-summary      summarize        1500     900  not reached",
        "Stopped by the tokens limit before step summarize (row 4): 10400 > 10000; 4 of 6 steps accepted.",
        "The whole plan would need tokens 11900 (limit 10000).",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn json_is_exactly_usage_and_workflow_as_eval_answers_them() {
    let file = example("plan.json");
    let limits_file = example("limits.json");
    let out = stdout_of(plan().args([&file, "--limits", &limits_file, "--json"]), 1);
    assert_eq!(out.lines().count(), 1, "one line: {out:?}");
    let got: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        got,
        json!({
            "usage": {"steps": 6, "tokens": 11900, "output": 4300, "max_depth": 3, "max_fanout": 2},
            "workflow": {
                "accepted": ["research", "search-papers", "read-abstracts", "search-web"],
                "stopped": "summarize",
                "reason": "tokens",
                "usage": {"steps": 4, "tokens": 8400, "output": 2200, "max_depth": 3, "max_fanout": 2}
            }
        })
    );
    // The same bytes as eval's answers, keys in the same order.
    let plan_value: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let limits_value: Value =
        serde_json::from_str(&std::fs::read_to_string(&limits_file).unwrap()).unwrap();
    let ok = |request: Value| {
        let answer = budgetgate::eval::answer_line(request.to_string().as_bytes());
        let answer = answer
            .strip_prefix(r#"{"ok":"#)
            .expect("ok answer")
            .to_owned();
        answer.strip_suffix('}').expect("object").to_owned()
    };
    let usage = ok(json!({"fn": "aggregate_usage", "args": {"plan": plan_value}}));
    let workflow = ok(json!({"fn": "bounded_workflow",
        "args": {"plan": plan_value, "limits": limits_value}}));
    assert_eq!(
        out,
        format!("{{\"usage\":{usage},\"workflow\":{workflow}}}\n")
    );
}

#[test]
fn roomy_limits_complete_with_json_exit_zero() {
    let out = stdout_of(
        plan().args([
            &example("plan.json"),
            "--limits",
            &example("limits-roomy.json"),
            "--json",
        ]),
        0,
    );
    let got: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(got["workflow"]["reason"], "complete");
    assert_eq!(got["workflow"]["stopped"], Value::Null);
}

#[test]
fn spec_b2_examples_with_single_limit_options() {
    let spec = Fixture::new("spec.json", SPEC_PLAN.as_bytes());
    let options = [
        "--steps", "4", "--tokens", "4", "--output", "10", "--depth", "4", "--fanout", "4",
    ];
    let text = stdout_of(plan().arg(spec.path()).args(options), 1);
    assert!(
        text.contains("stopped here (limit: tokens 5 > 4)"),
        "{text}"
    );
    let out = stdout_of(plan().arg(spec.path()).args(options).arg("--json"), 1);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["workflow"]["accepted"], json!(["a"]));
    assert_eq!(got["workflow"]["usage"]["tokens"], 2);
    assert_eq!(
        got["usage"],
        json!({"steps": 2, "tokens": 5, "output": 3, "max_depth": 2, "max_fanout": 1})
    );

    // Limits not given stay at their maximum.
    let out = stdout_of(plan().args([spec.path(), "--tokens", "5", "--json"]), 0);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["workflow"]["reason"], "complete");
    assert_eq!(got["workflow"]["usage"]["tokens"], 5);

    let zero = Fixture::new(
        "zero.json",
        br#"[{"id":"z","parent":null,"tokens":0,"output":0}]"#,
    );
    let text = stdout_of(plan().args([zero.path(), "--steps", "0"]), 1);
    assert!(text.contains("stopped here (limit: steps 1 > 0)"), "{text}");
}

#[test]
fn empty_plan_completes_even_with_zero_limits() {
    let empty = Fixture::new("empty.json", b"[]");
    let text = stdout_of(
        plan().args([
            empty.path(),
            "--steps",
            "0",
            "--tokens",
            "0",
            "--output",
            "0",
            "--depth",
            "0",
            "--fanout",
            "0",
        ]),
        0,
    );
    assert!(text.contains("(the plan has no steps)"), "{text}");
    assert!(text.contains("Complete: 0 of 0 steps accepted."), "{text}");
}

#[test]
fn plan_is_read_from_stdin_with_a_dash() {
    let out = stdout_of(plan().args(["-", "--json"]).write_stdin(SPEC_PLAN), 0);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["usage"]["tokens"], 5);
}

#[test]
fn limits_file_and_single_options_cannot_be_mixed() {
    plan()
        .args([
            &example("plan.json"),
            "--limits",
            &example("limits.json"),
            "--steps",
            "3",
        ])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("cannot be used with"));
}

#[test]
fn option_out_of_range_is_a_usage_error() {
    plan()
        .args([&example("plan.json"), "--steps", "33"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("33 is not in 0..=32"));
}

#[test]
fn malformed_json_names_the_file_and_the_position() {
    let bad = Fixture::new(
        "bad.json",
        b"[{\"id\":\"a\",\"parent\":null,\"tokens\":1,\"output\":1},\n {\"id\" \"b\"}]",
    );
    let line = one_line_error(plan().arg(bad.path()));
    assert_eq!(
        line,
        format!(
            "budgetgate plan: {}: not acceptable JSON: invalid JSON syntax (line 2, column 8)",
            bad.path()
        )
    );
}

#[test]
fn float_tokens_name_the_row_and_the_rule() {
    let bad = Fixture::new(
        "float.json",
        br#"[{"id":"a","parent":null,"tokens":1,"output":1},
            {"id":"b","parent":"a","tokens":2.0,"output":1}]"#,
    );
    let line = one_line_error(plan().arg(bad.path()));
    assert_eq!(
        line,
        format!(
            "budgetgate plan: {}: row 1 (id \"b\"): `tokens` must be an integer 0..=10000",
            bad.path()
        )
    );
}

#[test]
fn unknown_parent_names_the_row_and_the_rule() {
    let bad = Fixture::new(
        "parent.json",
        br#"[{"id":"a","parent":null,"tokens":1,"output":1},
            {"id":"b","parent":"a","tokens":1,"output":1},
            {"id":"c","parent":"a","tokens":1,"output":1},
            {"id":"d","parent":"e","tokens":1,"output":1},
            {"id":"e","parent":null,"tokens":1,"output":1}]"#,
    );
    let line = one_line_error(plan().arg(bad.path()));
    assert_eq!(
        line,
        format!(
            "budgetgate plan: {}: row 3 (id \"d\"): `parent` is not the id of an earlier row",
            bad.path()
        )
    );
}

#[test]
fn invalid_row_is_reported_even_after_a_stop() {
    // SPEC B: the whole plan is validated even where a stop would come earlier.
    let bad = Fixture::new(
        "late.json",
        br#"[{"id":"a","parent":null,"tokens":1,"output":1},
            {"id":"b","parent":null,"tokens":true,"output":1}]"#,
    );
    let line = one_line_error(plan().args([bad.path(), "--steps", "0"]));
    assert!(
        line.ends_with("row 1 (id \"b\"): `tokens` must be an integer 0..=10000"),
        "{line}"
    );
}

#[test]
fn too_many_rows_name_the_capacity() {
    let rows: Vec<String> = (0..33)
        .map(|i| format!(r#"{{"id":"s{i}","parent":null,"tokens":0,"output":0}}"#))
        .collect();
    let big = Fixture::new("big.json", format!("[{}]", rows.join(",")).as_bytes());
    let line = one_line_error(plan().arg(big.path()));
    assert!(line.ends_with(": a plan has at most 32 rows"), "{line}");
}

#[test]
fn missing_file_is_named() {
    let line = one_line_error(plan().arg("no-such-plan.json"));
    assert!(
        line.starts_with("budgetgate plan: no-such-plan.json: cannot read: "),
        "{line}"
    );
}

#[test]
fn bad_limits_file_is_named() {
    let limits = Fixture::new(
        "limits.json",
        br#"{"steps":1,"tokens":1,"output":1,"depth":1}"#,
    );
    let line = one_line_error(plan().args([&example("plan.json"), "--limits", limits.path()]));
    assert_eq!(
        line,
        format!("budgetgate plan: {}: missing limit `fanout`", limits.path())
    );
    let over = Fixture::new(
        "over.json",
        br#"{"steps":1,"tokens":320001,"output":1,"depth":1,"fanout":1}"#,
    );
    let line = one_line_error(plan().args([&example("plan.json"), "--limits", over.path()]));
    assert!(
        line.ends_with("limit `tokens` must be an integer 0..=320000"),
        "{line}"
    );
}

#[test]
fn an_unexpected_key_is_named_with_its_row() {
    let bad = Fixture::new(
        "extra.json",
        br#"[{"id":"a","parent":null,"tokens":1,"output":1,"weight":3}]"#,
    );
    let line = one_line_error(plan().arg(bad.path()));
    assert_eq!(
        line,
        format!(
            "budgetgate plan: {}: row 0 (id \"a\"): unexpected key `weight`; a row has exactly id, parent, tokens, output",
            bad.path()
        )
    );
}

/// A number too large for any float (`1e400`) is refused like any other out
/// of range cost, and the row is still named by its id.
#[test]
fn an_out_of_range_literal_names_the_row_by_its_id() {
    let bad = Fixture::new(
        "huge.json",
        br#"[{"id":"a","parent":null,"tokens":1,"output":1},
            {"id":"big","parent":"a","tokens":1e400,"output":1}]"#,
    );
    let line = one_line_error(plan().arg(bad.path()));
    assert_eq!(
        line,
        format!(
            "budgetgate plan: {}: row 1 (id \"big\"): `tokens` must be an integer 0..=10000",
            bad.path()
        )
    );
}

/// A cycle cannot be written (a parent must be an earlier row); a row naming
/// itself or a later row as parent is refused as an unknown parent.
#[test]
fn a_plan_cycle_is_refused_as_an_unknown_parent() {
    for (rows, at) in [
        (
            r#"[{"id":"a","parent":"a","tokens":1,"output":1}]"#,
            "row 0 (id \"a\")",
        ),
        (
            r#"[{"id":"a","parent":"b","tokens":1,"output":1},{"id":"b","parent":"a","tokens":1,"output":1}]"#,
            "row 0 (id \"a\")",
        ),
    ] {
        let bad = Fixture::new("cycle.json", rows.as_bytes());
        let line = one_line_error(plan().arg(bad.path()));
        assert!(
            line.contains(&format!("{at}: `parent` is not the id of an earlier row")),
            "{line}"
        );
    }
}
