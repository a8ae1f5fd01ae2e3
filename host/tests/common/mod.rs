//! Helpers the command-line tests share.
#![allow(dead_code)]

use std::path::Path;

pub mod redis;

use assert_cmd::cargo::cargo_bin_cmd;
use assert_cmd::Command;

/// The path of a shipped example file, as a string argument.
pub fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    path.to_str().expect("UTF-8 path").to_owned()
}

/// `budgetgate SUBCOMMAND`.
pub fn subcommand(name: &str) -> Command {
    let mut cmd = cargo_bin_cmd!("budgetgate");
    cmd.arg(name);
    cmd
}

/// Runs `cmd` expecting exit `code` and an empty stderr; returns stdout.
pub fn stdout_of(cmd: &mut Command, code: i32) -> String {
    let output = cmd.assert().code(code).stderr("").get_output().clone();
    String::from_utf8(output.stdout).expect("stdout is UTF-8")
}

/// Runs `budgetgate SUBCOMMAND …` expecting exit 2, an empty stdout and
/// exactly one stderr line starting `budgetgate SUBCOMMAND: `; returns it.
pub fn one_line_error(cmd: &mut Command, subcommand: &str) -> String {
    let output = cmd.assert().code(2).stdout("").get_output().clone();
    let stderr = String::from_utf8(output.stderr).expect("stderr is UTF-8");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    let prefix = format!("budgetgate {subcommand}: ");
    assert!(stderr.starts_with(&prefix), "{stderr:?}");
    stderr.trim_end().to_owned()
}
