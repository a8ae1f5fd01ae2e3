//! One reader of budget files (issue 30): `replay`, the MCP gateway and
//! `hook install` refuse the same bad budget file with the same words,
//! naming the file and the rule it breaks.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_budgetgate"))
}

/// The last line each command writes on stderr for `--budget PATH`, with
/// the command's own prefix and suffix taken off.
fn complaints(budget: &std::path::Path, dir: &std::path::Path) -> Vec<String> {
    let recording = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/replay");
    let first = std::fs::read_dir(&recording)
        .expect("examples")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .min()
        .expect("an example recording");
    let runs: Vec<(Vec<String>, &str, &str)> = vec![
        (
            vec!["replay".into(), first.display().to_string()],
            "budgetgate replay: ",
            "",
        ),
        (
            vec!["mcp".into(), "--ledger".into(), dir.display().to_string()],
            "budgetgate mcp: ",
            "; not started (fail closed)",
        ),
    ];
    runs.into_iter()
        .map(|(args, prefix, suffix)| {
            let mut cmd = Command::new(bin());
            cmd.args(&args).arg("--budget").arg(budget);
            if args[0] == "mcp" {
                cmd.args(["--", "true"]);
            }
            let out = cmd.output().expect("runs");
            assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or_default().to_owned();
            last.strip_prefix(prefix)
                .and_then(|l| l.strip_suffix(suffix))
                .unwrap_or_else(|| panic!("{args:?}: {last}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn every_command_reads_a_budget_file_the_same_way() {
    let dir = tempfile::tempdir().expect("dir");
    let unknown = dir.path().join("typo.toml");
    std::fs::write(&unknown, "[budget]\nmax_stepz = 1\n").expect("write");
    let big = dir.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).expect("write");
    let folder = dir.path().join("a-folder");
    std::fs::create_dir(&folder).expect("mkdir");
    for (budget, says) in [
        (&unknown, "line 2, column 1: unknown field `max_stepz`"),
        (&big, "larger than 1 MiB"),
        (&folder, "not a file that can be read"),
    ] {
        let said = complaints(budget, dir.path());
        // Only replay, whose standard input is free, may read it instead.
        let replay = said[0].trim_end_matches("; give - to read standard input");
        assert_eq!(replay, said[1], "replay and mcp differ");
        let name = format!("budget file {}: ", budget.display());
        assert!(said[0].starts_with(&name), "{}", said[0]);
        assert!(said[0].contains(says), "{}", said[0]);
    }
}

/// `[loops]` (issue 32) is enforced by every command that reads a budget
/// file (the Claude Code hook, the MCP gateway, replay, and the model proxy
/// from the histories its requests bring: `tests/proxy.rs`); the hook's
/// installer takes a file with the table.
#[test]
fn a_budget_file_with_loops_is_taken() {
    let dir = tempfile::tempdir().expect("dir");
    let loops = dir.path().join("loops.toml");
    std::fs::write(&loops, "[loops]\nsame_outcome = 4\n").expect("write");
    let settings = dir.path().join("settings.json");
    let out = Command::new(bin())
        .args(["hook", "install", "--settings"])
        .arg(&settings)
        .arg("--budget")
        .arg(&loops)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
