//! Phase-1 firmware under QEMU (`mps2-an386`): banner, agent-link echo, LED0
//! toggling, frame-length limit, garbage input, console commands, fail-safe
//! panic exit. Each test boots its own QEMU; all skip (with a notice) when
//! `qemu-system-arm` is missing, unless `BUDGETGATE_REQUIRE_QEMU` is set.

use std::time::{Duration, Instant};

use budgetgate_tests::qemu::{Qemu, EXIT_PANIC};

/// `FRAME_MAX` of the firmware.
const FRAME_MAX: usize = 1024;
const TOO_LONG: &str = r#"{"error":"frame-too-long"}"#;

fn echo(len: usize) -> String {
    format!(r#"{{"echo":{len}}}"#)
}

/// Boots QEMU and consumes the banner; `None` means "skipped".
fn boot() -> Option<Qemu> {
    let mut qemu = Qemu::boot()?;
    let banner = qemu.read_console_line();
    assert!(
        banner.starts_with("budgetgate-firmware "),
        "banner: {banner:?}"
    );
    Some(qemu)
}

#[test]
fn banner_names_board_and_frame_limit() {
    let Some(mut qemu) = Qemu::boot() else { return };
    let banner = qemu.read_console_line();
    assert!(
        banner.starts_with("budgetgate-firmware 0."),
        "banner: {banner:?}"
    );
    assert!(banner.contains("board=mps2-an386"), "banner: {banner:?}");
    assert!(
        banner.contains(&format!("frame_max={FRAME_MAX}")),
        "banner: {banner:?}"
    );
    // Nothing is sent on the agent link unasked.
    assert_eq!(qemu.try_read_line(Duration::from_millis(200)), None);
}

#[test]
fn echoes_each_line_and_toggles_led0() {
    let Some(mut qemu) = boot() else { return };
    assert_eq!(qemu.leds(), 0, "LEDs are off after boot");

    qemu.send_line("hello");
    assert_eq!(qemu.read_line(), echo(5));
    assert_eq!(qemu.leds(), 0b01, "LED0 on after the first frame");

    let request = r#"{"tool":"search","args":{"q":"x"}}"#;
    qemu.send_line(request);
    assert_eq!(qemu.read_line(), echo(request.len()));
    assert_eq!(qemu.leds(), 0b00, "LED0 off after the second frame");

    qemu.send_line("");
    assert_eq!(
        qemu.read_line(),
        echo(0),
        "an empty line is a frame of 0 bytes"
    );
    assert_eq!(qemu.leds(), 0b01);

    // Pipelined lines, sent in one write, get one reply each, in order.
    qemu.send_bytes(b"a\nbb\nccc\n");
    for len in 1..=3 {
        assert_eq!(qemu.read_line(), echo(len));
    }
    assert_eq!(qemu.leds(), 0b00, "four toggles later LED0 is off again");

    // A line split across writes is one frame.
    qemu.send_bytes(b"par");
    std::thread::sleep(Duration::from_millis(50));
    qemu.send_bytes(b"tial\n");
    assert_eq!(qemu.read_line(), echo(7));
    assert_eq!(qemu.leds(), 0b01);

    // `reset` (new run) drives the actuator low.
    assert_eq!(qemu.console_command("reset"), "ok");
    assert_eq!(qemu.leds(), 0);
}

#[test]
fn over_long_frames_are_rejected_without_losing_sync() {
    let Some(mut qemu) = boot() else { return };

    qemu.send_line(&"x".repeat(FRAME_MAX));
    assert_eq!(
        qemu.read_line(),
        echo(FRAME_MAX),
        "exactly FRAME_MAX bytes is accepted"
    );

    qemu.send_line(&"y".repeat(FRAME_MAX + 1));
    assert_eq!(qemu.read_line(), TOO_LONG);

    // Much longer, written in pieces, then a normal line right behind it.
    let long = "z".repeat(5 * FRAME_MAX);
    for piece in long.as_bytes().chunks(700) {
        qemu.send_bytes(piece);
    }
    qemu.send_bytes(b"\nnext\n");
    assert_eq!(qemu.read_line(), TOO_LONG);
    assert_eq!(
        qemu.read_line(),
        echo(4),
        "the line after an over-long one is intact"
    );

    // Rejected frames do not touch the actuator: 1 accepted + 1 = 2 toggles.
    assert_eq!(qemu.leds(), 0b00);
    // Nothing else is pending.
    assert_eq!(qemu.try_read_line(Duration::from_millis(100)), None);
}

#[test]
fn garbage_bytes_are_framed_like_any_other() {
    let Some(mut qemu) = boot() else { return };

    // Every byte value except '\n', NUL and 0xFF included.
    let all: Vec<u8> = (0..=255u8).filter(|&b| b != b'\n').collect();
    qemu.send_bytes(&all);
    qemu.send_bytes(b"\n");
    assert_eq!(qemu.read_line(), echo(255));

    // Pseudo-random bytes (fixed seed), cut into lines at every '\n'.
    let mut state: u32 = 0x2545_F491;
    let noise: Vec<u8> = (0..6000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        })
        .collect();
    qemu.send_bytes(&noise);
    qemu.send_bytes(b"\n");
    let expected: Vec<String> = noise
        .split(|&b| b == b'\n')
        .map(|line| {
            if line.len() > FRAME_MAX {
                TOO_LONG.to_owned()
            } else {
                echo(line.len())
            }
        })
        .collect();
    assert!(expected.len() > 10, "the noise should hold many lines");
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(&qemu.read_line(), want, "reply {i} to the noise");
    }

    // CR is data on the agent link; the link still works afterwards.
    qemu.send_bytes(b"crlf\r\n");
    assert_eq!(qemu.read_line(), echo(5));
    qemu.send_line("still in sync");
    assert_eq!(qemu.read_line(), echo(13));

    // Garbage on the console is an unknown command, not a crash.
    qemu.send_console_bytes(b"\x00\xff\x1b[2J\n");
    assert_eq!(qemu.read_console_line(), "error: unknown command");
    assert_eq!(qemu.console_command("reset"), "ok");
}

#[test]
fn console_commands() {
    let Some(mut qemu) = boot() else { return };
    assert_eq!(qemu.console_command("reset"), "ok");
    assert_eq!(
        qemu.console_command("  reset\r"),
        "ok",
        "whitespace and CR are ignored"
    );
    assert_eq!(
        qemu.console_command("buttons"),
        "buttons=0",
        "QEMU models no buttons"
    );
    assert!(qemu.console_command("help").starts_with("commands: reset"));
    assert_eq!(qemu.console_command("frobnicate"), "error: unknown command");
    assert_eq!(
        qemu.console_command(&"r".repeat(500)),
        "error: line too long"
    );
    // Blank lines get no reply: the next reply is the next command's.
    qemu.send_console_line("");
    qemu.send_console_line("   ");
    assert_eq!(qemu.console_command("reset"), "ok");

    // Uptime is milliseconds from SysTick (25 MHz core clock): it tracks
    // host time loosely (QEMU runs without -icount).
    let uptime = |qemu: &mut Qemu| -> u64 {
        let reply = qemu.console_command("uptime");
        reply
            .strip_prefix("uptime_ms=")
            .and_then(|n| n.parse().ok())
            .expect(&reply)
    };
    let (t0, host0) = (uptime(&mut qemu), Instant::now());
    std::thread::sleep(Duration::from_millis(300));
    let (t1, host) = (uptime(&mut qemu), host0.elapsed().as_millis() as u64);
    assert!(t1 > t0, "uptime must advance: {t0} -> {t1}");
    let dt = t1 - t0;
    assert!(
        dt >= 150 && dt <= host + 200,
        "uptime advanced {dt} ms over {host} ms of host time"
    );
}

#[test]
fn panic_turns_actuators_off_and_exits_qemu_with_failure() {
    let Some(mut qemu) = boot() else { return };
    qemu.send_line("on");
    assert_eq!(qemu.read_line(), echo(2));
    assert_eq!(qemu.leds(), 1);

    qemu.send_console_line("panic");
    let status = qemu
        .wait_exit(Duration::from_secs(5))
        .expect("QEMU exits after a panic");
    assert_eq!(status.code(), Some(EXIT_PANIC), "exit status {status}");
    // The panic message went to the defmt log (binary frames on QEMU's stdout).
    assert!(!qemu.defmt_log().is_empty(), "defmt log is empty");
}
