//! `scripts/demo` says what it is doing while it builds (a newcomer's
//! trial: the first run was silent for minutes). The script is run with
//! stand-ins for `cargo`, `rustup`, `qemu-system-arm` and `size` first on
//! `PATH` (nothing is built, QEMU is not started: the stand-in `cargo` fails
//! the host's build, which ends the script): each install and build is
//! announced by a line of its own before `cargo` runs, and `cargo` is never
//! asked to be quiet, so its own progress shows on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A folder of stand-in programs, removed when dropped.
struct StandIns(PathBuf);

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stand_ins() -> StandIns {
    let dir = std::env::temp_dir().join(format!("bg-demo-stand-ins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("folder");
    let programs = [
        // Says how it was called; the host's build fails, ending the demo
        // before QEMU would be started.
        (
            "cargo",
            "echo \"CARGO $*\" >&2\ncase \"$*\" in *\"-p budgetgate\"*) exit 1;; esac\n",
        ),
        // Every board's target is installed.
        (
            "rustup",
            "awk '!/^#/ && NF {print $3}' firmware/boards.txt\n",
        ),
        ("qemu-system-arm", "echo 'QEMU emulator (stand-in)'\n"),
        ("size", "echo 'size (stand-in)'\n"),
    ];
    for (name, body) in programs {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("stand-in");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("executable");
        }
    }
    StandIns(dir)
}

/// Every `cargo` call of the demo comes after a line saying what it does
/// (the install of `defmt-print`, the firmware's build, the host's build),
/// and none has `--quiet`.
#[test]
fn the_demo_says_what_it_builds_before_each_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stand_ins = stand_ins();
    // No ~/.cargo/bin: `defmt-print` is missing, as on a fresh machine.
    let path = format!("{}:/usr/bin:/bin", stand_ins.0.display());
    let mut child = Command::new("bash")
        .arg("-c")
        .arg("exec 2>&1; exec scripts/demo")
        .current_dir(&root)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/demo did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let calls: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("CARGO "))
        .collect();
    assert_eq!(calls.len(), 3, "install, firmware, host:\n{text}");
    for (&at, what) in calls.iter().zip(["defmt-print", "firmware", "budgetgate"]) {
        let call = lines[at];
        assert!(
            !call.contains("--quiet"),
            "cargo asked to be quiet: {call}\n{text}"
        );
        let said = at.checked_sub(1).map(|i| lines[i]).unwrap_or("");
        assert!(
            !said.starts_with("CARGO ") && !said.starts_with("===") && said.contains(what),
            "no line saying what `{call}` does (before it: {said:?}):\n{text}"
        );
    }
}
