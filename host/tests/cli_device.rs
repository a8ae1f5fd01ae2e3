//! `budgetgate device` against hostile peers, as the real binary: whatever a
//! device sends, the command ends with a clean error (exit status 2, one
//! line on stderr) in bounded time and memory.

use std::io::Write;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin_cmd;

fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Found by a hostile trial: a peer that sends one endless line made the
/// command buffer it without limit (1.1 GB in 3 s, then SIGABRT). The reply
/// is refused as soon as it passes FRAME_MAX.
#[test]
fn a_reply_without_a_line_end_is_bounded() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let peer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let chunk = [b'A'; 65536];
        let until = Instant::now() + Duration::from_secs(20);
        let mut sent = 0usize;
        while Instant::now() < until && stream.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let began = Instant::now();
    let output = cargo_bin_cmd!("budgetgate")
        .args(["device", "--tcp", &address.to_string()])
        .arg(example("device-session.json"))
        .timeout(Duration::from_secs(30))
        .output()
        .expect("run budgetgate device");
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{:?}: {stderr}",
        output.status
    );
    assert!(
        stderr.contains("the device's reply arrived damaged (frame longer than 1024 bytes)"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // The command stopped reading and closed the link long before the peer
    // would have stopped on its own.
    let sent = peer.join().expect("peer");
    assert!(sent > 1024, "the peer sent {sent} bytes");
}

/// Found by a hostile trial: `--baud 0` was accepted, `--reply-timeout 0`
/// silently waited 1 s. Both are usage errors that name the range.
#[test]
fn zero_baud_and_zero_reply_timeout_are_usage_errors() {
    for (flag, range) in [("--baud", "50..=4000000"), ("--reply-timeout", "1..=3600")] {
        let output = cargo_bin_cmd!("budgetgate")
            .args(["device", "--serial", "/dev/null", flag, "0"])
            .arg(example("device-session.json"))
            .output()
            .expect("run budgetgate device");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(&format!("0 is not in {range}")), "{stderr}");
    }
    let help = cargo_bin_cmd!("budgetgate")
        .args(["device", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Baud rate of --serial, 50..=4000000"),
        "{help}"
    );
    assert!(
        help.contains("Seconds to wait for each reply, 1..=3600"),
        "{help}"
    );
}
