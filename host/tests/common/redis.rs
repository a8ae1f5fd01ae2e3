//! A real `redis-server` for the tests of the Redis ledger.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` on a free loopback port, stopped when dropped; `None`
/// (the test is skipped) when none is installed and `BUDGETGATE_REQUIRE_REDIS`
/// is not `1`.
pub struct Redis {
    child: Child,
    /// `redis://127.0.0.1:PORT/0`.
    pub url: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn redis() -> Option<Redis> {
    redis_with(&[])
}

/// [`redis`] with `extra` arguments after the defaults (`--save ""
/// --appendonly no`), which they may override (a later one wins).
pub fn redis_with(extra: &[&str]) -> Option<Redis> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        if std::env::var("BUDGETGATE_REQUIRE_REDIS").as_deref() == Ok("1") {
            panic!("BUDGETGATE_REQUIRE_REDIS=1 and redis-server is not installed");
        }
        eprintln!("skipped: redis-server is not installed");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("addr")
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    wait_for_port(port);
    Some(Redis {
        child,
        url: format!("redis://127.0.0.1:{port}/0"),
    })
}

/// Waits (at most 10 s) until a server listens on loopback `port`.
pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
}
