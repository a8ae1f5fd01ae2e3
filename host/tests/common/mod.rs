//! Helpers the command-line tests share.
#![allow(dead_code)]

use std::path::Path;

pub mod hook;
pub mod redis;
pub mod tls;
pub mod upstream;

use assert_cmd::cargo::cargo_bin_cmd;
use assert_cmd::Command;

/// A test's own folder with its `budget.toml` written in it; each test file
/// adds the methods of its front-end (`impl common::Setup { … }` there).
pub struct Setup {
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// A new folder with `budget` as its `budget.toml`.
    pub fn new(budget: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("budget.toml"), budget).expect("budget");
        Self { dir }
    }

    /// A file in the folder.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

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

/// `budgetgate proxy` on a free loopback port, killed when dropped.
pub struct ProxyProcess {
    /// The process.
    pub child: std::process::Child,
    /// The port it listens on.
    pub port: u16,
    /// What it said on stderr after its first line.
    said: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProcess {
    /// Starts `budgetgate proxy --listen 127.0.0.1:0 --upstream URL
    /// --budget BUDGET --ledger sqlite:LEDGER EXTRA…` and reads its port
    /// from the line it prints on stderr (`listening on http://ADDR, …`).
    pub fn start(url: &str, budget: &Path, ledger: &Path, extra: &[&str]) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_budgetgate"))
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                url,
                "--budget",
            ])
            .arg(budget)
            .arg("--ledger")
            .arg(format!("sqlite:{}", ledger.display()))
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the proxy");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        // Warnings at start come before it.
        let line = lines
            .by_ref()
            .map(|l| l.expect("stderr"))
            .find(|l| l.contains("listening on http://"))
            .expect("the line it listens on");
        let port = line
            .split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        // Its later lines are read (and kept) so that it never blocks.
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&said);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().expect("lines").push(line);
            }
        });
        Self { child, port, said }
    }

    /// Waits (at most 10 s) for a line it said on stderr after the first
    /// that contains `text`; that line.
    pub fn said(&self, text: &str) -> Option<String> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let found = self
                .said
                .lock()
                .expect("lines")
                .iter()
                .find(|l| l.contains(text))
                .cloned();
            if found.is_some() || std::time::Instant::now() > until {
                return found;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Its base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The folder of the MCP test parts (`tests/mcp`: npm servers, the Claude
/// Code CLI, the Python clients' venvs), installed by `tests/mcp/install.sh`.
pub fn mcp_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp")
}

/// Whether the end-to-end parts `paths` (and `node`) are installed. When
/// one is missing the test is skipped (`false`, said on stderr), unless
/// `BUDGETGATE_REQUIRE_MCP=1` (as `scripts/test` sets it): then it fails.
/// `what` names the parts in the message.
pub fn mcp_parts_installed(paths: &[&Path], what: &str) -> bool {
    let missing: Vec<String> = paths
        .iter()
        .filter(|f| !f.exists())
        .map(|f| f.display().to_string())
        .collect();
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok();
    if missing.is_empty() && node {
        return true;
    }
    let why = format!(
        "missing {} (run tests/mcp/install.sh)",
        if node {
            missing.join(", ")
        } else {
            "node".into()
        }
    );
    if std::env::var("BUDGETGATE_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("BUDGETGATE_REQUIRE_MCP=1 and the {what} are {why}");
    }
    eprintln!("skipped: the {what} are {why}");
    false
}
