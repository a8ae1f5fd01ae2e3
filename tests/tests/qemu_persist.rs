//! The durable run under QEMU (issue 15; SPEC E durable state, SPEC A2
//! bounds): the firmware's flash is a host file (`-append flash=PATH`,
//! semihosting file I/O); each test kills QEMU (SIGKILL, no shutdown) in the
//! middle of a run and boots it again on the same file. The run resumes
//! with its budget as committed — never less — its call ids stay used, a
//! call caught in flight is recorded `interrupted` with its actuator off,
//! and the console's `audit` reads the log back. Every test runs on every
//! board of `firmware/boards.txt` in turn (`BUDGETGATE_BOARDS` narrows it).
//! Skipped without `qemu-system-arm` unless `BUDGETGATE_REQUIRE_QEMU` is set.

use std::path::{Path, PathBuf};
use std::time::Duration;

use budgetgate::device_audit::read_audit;
use budgetgate_tests::qemu::{on_every_board, Board, Qemu};

fn lamp(id: &str) -> String {
    format!(
        r#"{{"kind":"tool","call_id":"{id}","name":"HassTurnOn","arguments":{{"name":"lamp"}}}}"#
    )
}

fn valve(id: &str) -> String {
    format!(
        r#"{{"kind":"tool","call_id":"{id}","name":"HassValveOpen","arguments":{{"name":"valve"}}}}"#
    )
}

/// A fresh directory for one test's flash file on `board`.
fn flash_file(board: &Board, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "budgetgate-flash-{}-{}-{test}",
        std::process::id(),
        board.name
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("flash.bin")
}

/// Boots `board` on `flash`; returns QEMU and the console's flash line
/// (after the banner).
fn boot(board: &'static Board, flash: &Path) -> Option<(Qemu, String)> {
    let arg = format!("flash={}", flash.display());
    let mut qemu = Qemu::boot_with(board, &["-append", &arg])?;
    let banner = qemu.read_console_line();
    assert!(banner.starts_with("budgetgate-firmware "), "{banner}");
    let line = qemu.read_console_line();
    Some((qemu, line))
}

/// The audit log's lines (console `audit`), without the end line, whose
/// count must agree.
fn audit(qemu: &mut Qemu) -> Vec<String> {
    qemu.send_console_line("audit");
    let mut lines = Vec::new();
    loop {
        let line = qemu.read_console_line();
        if let Some(n) = line.strip_prefix("audit end entries=") {
            assert_eq!(n.parse::<usize>().expect("a count"), lines.len());
            return lines;
        }
        assert!(line.starts_with("audit run="), "{line}");
        lines.push(line);
    }
}

fn decisions(status: &str) -> u32 {
    status
        .split_whitespace()
        .find_map(|w| w.strip_prefix("decisions="))
        .and_then(|d| d.split('/').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no decisions in {status:?}"))
}

/// SPEC E: a run killed between decisions resumes, after a reboot on the
/// same flash file, with every committed decision and tool attempt used,
/// its call ids still used (SPEC A2 duplicate-call), actuators off, and the
/// audit log holding every decision in order.
#[test]
fn a_killed_run_resumes_with_its_budget_as_committed() {
    on_every_board(|board| {
        let flash = flash_file(board, "resume");
        let Some((mut qemu, line)) = boot(board, &flash) else {
            return;
        };
        assert_eq!(line, "flash: empty");
        qemu.start(Some((8, 4)));
        for id in ["c1", "c2"] {
            let reply = qemu.propose(&lamp(id));
            assert!(reply.contains(r#""executed":true,"ok":true"#), "{reply}");
        }
        assert_eq!(qemu.leds(), 1, "the lamp is on before the cut");
        drop(qemu); // SIGKILL

        let (mut qemu, line) = boot(board, &flash).expect("QEMU boots again");
        assert_eq!(
            line,
            "flash: resumed run 1 running decisions=2 interrupted=none"
        );
        assert_eq!(qemu.leds(), 0, "actuators safe after the reset");
        let status = qemu.console_command("status");
        assert!(
            status.starts_with("run 1 running decisions=2/8 tool_attempts=2/4"),
            "{status}"
        );
        let reply = qemu.propose(&lamp("c3"));
        assert!(reply.contains(r#""step":2"#), "{reply}");
        let reply = qemu.propose(&lamp("c1"));
        assert!(reply.contains(r#""status":"duplicate-call""#), "{reply}");
        let log = audit(&mut qemu);
        let verdicts: Vec<&str> = log
            .iter()
            .map(|l| {
                l.split(" verdict=")
                    .nth(1)
                    .and_then(|v| v.split(' ').next())
                    .unwrap_or("")
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                "started",
                "executing",
                "executed",
                "executing",
                "executed",
                "executing",
                "executed",
                "duplicate-call"
            ]
        );
        assert!(
            log[1].starts_with("audit run=1 step=0 call=c1 tool=HassTurnOn verdict=executing"),
            "{}",
            log[1]
        );
        // `budgetgate device audit` reads the same log over the console.
        let entries =
            read_audit(&mut qemu.console_stream(), Duration::from_secs(5)).expect("the log");
        assert_eq!(entries.len(), log.len());
        assert_eq!(entries[1].call_id.as_deref(), Some("c1"));
        assert_eq!(entries[1].verdict, "executing");
        assert_eq!(
            entries.last().map(|e| e.verdict.as_str()),
            Some("duplicate-call")
        );
    });
}

/// Issue 15: a call waiting for the operator when the power goes never
/// runs: after the reboot it is recorded `interrupted`, the valve is
/// closed, and the run goes on with the attempt counted.
#[test]
fn a_call_waiting_for_approval_is_interrupted_by_a_kill() {
    on_every_board(|board| {
        let flash = flash_file(board, "approval");
        let Some((mut qemu, _)) = boot(board, &flash) else {
            return;
        };
        qemu.start(None);
        qemu.send_frame(&format!("PROPOSE {}", valve("v1")));
        let prompt = qemu.read_console_line();
        assert!(prompt.starts_with("approve? v1 HassValveOpen"), "{prompt}");
        drop(qemu);

        let (mut qemu, line) = boot(board, &flash).expect("QEMU boots again");
        assert_eq!(
            line,
            "flash: resumed run 1 running decisions=1 interrupted=v1"
        );
        assert_eq!(qemu.leds(), 0);
        assert_eq!(qemu.console_command("y"), "error: no approval pending");
        let log = audit(&mut qemu);
        assert!(
            log.last()
                .is_some_and(|l| l.contains("call=v1 tool=HassValveOpen verdict=interrupted")),
            "{log:?}"
        );
        let status = qemu.console_command("status");
        assert!(status.contains("tool_attempts=1/4"), "{status}");
    });
}

/// Power cut in the middle of a decision: QEMU is killed right after a
/// proposal is sent, before its reply. Whatever the cut caught, the reboot
/// finds the decisions committed before it (or one more), never fewer;
/// the lamp is off; a call found in flight is logged `interrupted`.
#[test]
fn kills_mid_decision_never_give_budget_back() {
    on_every_board(|board| {
        let flash = flash_file(board, "midway");
        let Some((mut qemu, _)) = boot(board, &flash) else {
            return;
        };
        qemu.start(Some((32, 16)));
        let mut committed = 0;
        for round in 0..6 {
            // One acknowledged decision, then one cut short.
            let reply = qemu.propose(&lamp(&format!("a{round}")));
            assert!(reply.contains("\"type\":\"observation\""), "{reply}");
            committed += 1;
            qemu.send_frame(&format!("PROPOSE {}", lamp(&format!("b{round}"))));
            // Let the frame reach QEMU for some rounds, not for others.
            std::thread::sleep(Duration::from_millis(round as u64 * 3));
            drop(qemu);
            let (mut next, line) = boot(board, &flash).expect("QEMU boots again");
            assert!(
                line.starts_with("flash: resumed run 1 running decisions="),
                "{line}"
            );
            assert_eq!(next.leds(), 0, "round {round}");
            let d = decisions(&next.console_command("status"));
            assert!(
                d == committed || d == committed + 1,
                "round {round}: {d} decisions after {committed}"
            );
            if !line.ends_with("interrupted=none") {
                let log = audit(&mut next);
                assert!(
                    log.last()
                        .is_some_and(|l| l.contains("verdict=interrupted")),
                    "{log:?}"
                );
            }
            println!("{}: round {round}: {line}", board.name);
            committed = d;
            qemu = next;
        }
    });
}

/// Issue 15 figures (printed with `--nocapture`; docs/FIRMWARE.md): guest
/// instructions of one gated `HassTurnOn` call with the flash journal
/// (`-icount shift=0`: 40 instructions per 25 MHz tick, 50 per 20 MHz tick
/// on AN505; two saves of the record and two audit entries per call), and, with an image built with
/// `--features stack-paint`, the stack's high-water mark after a resume, a
/// journaled call, an approval and an `audit`.
#[test]
fn journal_cost_per_gated_action() {
    on_every_board(|board| {
        let flash = flash_file(board, "cost");
        let arg = format!("flash={}", flash.display());
        let Some(mut qemu) = Qemu::boot_with(board, &["-icount", "shift=0", "-append", &arg])
        else {
            return;
        };
        qemu.read_console_line();
        assert_eq!(qemu.read_console_line(), "flash: empty");
        qemu.start(Some((8, 8)));
        qemu.propose(&lamp("warm"));
        drop(qemu);
        let mut qemu =
            Qemu::boot_with(board, &["-icount", "shift=0", "-append", &arg]).expect("boots");
        qemu.read_console_line();
        let resumed = qemu.read_console_line();
        assert!(resumed.starts_with("flash: resumed run 1"), "{resumed}");
        let mut ticks = Vec::new();
        for id in ["t1", "t2", "t3"] {
            let reply = qemu.propose(&lamp(id));
            assert!(reply.contains(r#""executed":true"#), "{reply}");
            let line = qemu.console_command("ticks");
            let t: u64 = line
                .strip_prefix("last_frame_ticks=")
                .and_then(|r| r.split(' ').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            ticks.push(t);
        }
        println!(
            "{}: HassTurnOn with the flash journal: {:?} ticks = {:?} instructions (line end to reply)",
            board.name,
            ticks,
            ticks.iter().map(|t| t * u64::from(1000 / board.clock_mhz)).collect::<Vec<_>>()
        );
        assert!(ticks.iter().all(|&t| t > 0));
        qemu.send_frame(&format!("PROPOSE {}", valve("w")));
        qemu.read_console_line();
        assert_eq!(qemu.console_command("y"), "approved w");
        qemu.read_frame();
        audit(&mut qemu);
        match qemu.console_command("stack") {
            line if line.starts_with("stack_peak_bytes=") => println!("  with flash: {line}"),
            line => assert_eq!(line, "error: build with --features stack-paint"),
        }
    });
}
