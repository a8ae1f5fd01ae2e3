//! `budgetgate --help` and each subcommand's help explain inputs, outputs and
//! exit statuses, with examples that name files shipped in `examples/`.

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;

fn help(args: &[&str]) -> String {
    let output = cargo_bin_cmd!("budgetgate").args(args).assert().success();
    String::from_utf8(output.get_output().stdout.clone()).expect("help is UTF-8")
}

#[test]
fn top_level_help_lists_every_command_with_examples() {
    let text = help(&["--help"]);
    for needle in [
        "plan",
        "run",
        "eval",
        "Examples:",
        "Exit status",
        "examples/plan.json",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn plan_help_explains_limits_json_and_exit_status() {
    for flag in ["--help", "-h"] {
        let text = help(&["plan", flag]);
        for needle in [
            "--limits <FILE>",
            "--steps <N>",
            "--fanout <N>",
            "--json",
            "Exit status: 0 every step accepted, 1 stopped by a limit, 2 invalid input",
            "budgetgate plan examples/plan.json --limits examples/limits.json",
        ] {
            assert!(
                text.contains(needle),
                "plan {flag}: missing {needle:?} in:\n{text}"
            );
        }
    }
    let long = help(&["plan", "--help"]);
    assert!(long.contains(r#"{"usage": USAGE, "workflow": WORKFLOW}"#));
    assert!(long.contains("contract maximum"));
}

#[test]
fn run_help_explains_script_work_units_and_exit_status() {
    let text = help(&["run", "--help"]);
    for needle in [
        "<SCRIPT.json>",
        "--max-decisions <N>",
        "--max-tool-calls <N>",
        "--decision-units <N>",
        "--tool-units <NAME=COST>",
        "default 1 for every registered tool",
        "Exit status: 0 the run ended with final, 1",
        "budgetgate run examples/run-add.json",
    ] {
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat(&text).contains(&flat(needle)),
            "missing {needle:?} in:\n{text}"
        );
    }
}

#[test]
fn eval_help_names_every_function_and_shows_an_answer() {
    let text = help(&["eval", "--help"]);
    for name in budgetgate::eval::FUNCTIONS {
        assert!(text.contains(name), "missing {name} in:\n{text}");
    }
    assert!(
        text.contains(r#"{"ok":{"steps":0,"tokens":0,"output":0,"max_depth":0,"max_fanout":0}}"#)
    );
}

#[test]
fn help_examples_name_files_that_exist() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
    for command in [&["--help"][..], &["plan", "--help"], &["run", "--help"]] {
        for word in help(command).split_whitespace() {
            if word.starts_with("examples/") {
                let path = format!("{examples}{word}");
                assert!(
                    std::path::Path::new(&path).is_file(),
                    "{path} is named in help"
                );
            }
        }
    }
}

/// The subcommands people use most come first (issue 30): the hook, the
/// gateway, replay, the ledger; the lesson functions after them.
#[test]
fn help_lists_the_front_ends_before_the_lesson_functions() {
    let text = help(&["--help"]);
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        ["hook", "mcp", "proxy", "replay", "ledger", "device", "eval", "plan", "run", "help"],
        "{text}"
    );
}

/// Help that cites a section of the contract says where the contract is.
#[test]
fn help_that_cites_spec_sections_names_docs_contract() {
    for command in [
        &["--help"][..],
        &["plan", "--help"],
        &["run", "--help"],
        &["replay", "--help"],
    ] {
        let text = help(command);
        if text.contains("SPEC ") {
            assert!(
                text.contains("docs/CONTRACT.md"),
                "{command:?} cites SPEC without docs/CONTRACT.md:\n{text}"
            );
        }
    }
    assert!(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONTRACT.md")).is_file()
    );
}

#[test]
fn no_command_is_a_usage_error() {
    cargo_bin_cmd!("budgetgate")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("Usage: budgetgate <COMMAND>"));
}
