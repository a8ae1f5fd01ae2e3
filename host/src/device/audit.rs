//! `budgetgate device audit`: reads the device's audit log back over its
//! operator console (issue 15; `SPEC E` durable state). The device keeps
//! the log in flash (`firmware/src/persist.rs`); its console command `audit`
//! prints one line per entry, oldest first,
//! `audit run=R step=S call=ID tool=NAME verdict=WORD time_ms=T` (`-` for no
//! call id or tool), then `audit end entries=N`.
//!
//! [`read_audit`] sends `audit`, passes over lines that are not its reply
//! (a boot banner, a prompt), and reads the entries until the end line,
//! whose count must match; an `error: …` reply, a line that does not parse,
//! a line over [`CONSOLE_LINE_MAX`] bytes, more than [`AUDIT_MAX_ENTRIES`]
//! entries or no line within [`CONSOLE_TIMEOUT`](super::CONSOLE_TIMEOUT)
//! is an error (exit status 2).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::console::{LineReader, CONSOLE_LINE_MAX};
use super::link::DeviceError;
use crate::term::terminal_safe;

/// The most entries read (a device's log holds a few hundred).
pub const AUDIT_MAX_ENTRIES: usize = 100_000;

/// One audit entry as the device printed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditLine {
    /// The run's number.
    pub run: u32,
    /// The decision's step, from 0.
    pub step: u32,
    /// The call id; `None` when the entry is not about a call.
    pub call_id: Option<String>,
    /// The tool name proposed; `None` when the entry is not about a call.
    pub tool: Option<String>,
    /// What happened: `started`, `executing`, `executed`, `tool-error`,
    /// `unknown-tool`, `invalid-arguments`, `asking`, `approval-denied`, a
    /// stop status, `time-budget`, `interrupted`, `storage-error`, `dead-man`,
    /// `duty-limit`, `duty-off`.
    pub verdict: String,
    /// The device's clock, ms since its boot.
    pub time_ms: u64,
}

/// Parses `audit run=R step=S call=ID tool=NAME verdict=WORD time_ms=T`.
pub fn parse_line(line: &str) -> Option<AuditLine> {
    let rest = line.strip_prefix("audit ")?;
    let mut fields = rest.split(' ');
    let mut field = |key: &str| {
        fields
            .next()
            .and_then(|f| f.strip_prefix(key))
            .and_then(|f| f.strip_prefix('='))
            .filter(|v| !v.is_empty())
    };
    let run = field("run")?.parse().ok()?;
    let step = field("step")?.parse().ok()?;
    let id = |v: &str| (v != "-").then(|| v.to_owned());
    let call_id = id(field("call")?);
    let tool = id(field("tool")?);
    let verdict = field("verdict")?.to_owned();
    let time_ms = field("time_ms")?.parse().ok()?;
    if fields.next().is_some() {
        return None;
    }
    Some(AuditLine {
        run,
        step,
        call_id,
        tool,
        verdict,
        time_ms,
    })
}

/// Sends `audit` on `console` and reads the log (see the module's
/// documentation), waiting at most `timeout` for each line.
pub fn read_audit(
    console: &mut TcpStream,
    timeout: Duration,
) -> Result<Vec<AuditLine>, DeviceError> {
    let io = |what: &'static str| {
        move |source| DeviceError::Io {
            what: what.into(),
            source,
        }
    };
    console
        .write_all(b"audit\n")
        .map_err(io("writing to the console"))?;
    let mut lines = LineReader::new(CONSOLE_LINE_MAX);
    let mut entries = Vec::new();
    let mut chunk = [0u8; 512];
    let mut deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DeviceError::Timeout(format!(
                "no end of the audit log on the console within {} s ({} entries read)",
                timeout.as_secs(),
                entries.len()
            )));
        }
        console
            .set_read_timeout(Some(left))
            .map_err(io("the console"))?;
        let n = match console.read(&mut chunk) {
            Ok(0) => return Err(DeviceError::Protocol("the console was closed".into())),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(io("reading the console")(e)),
        };
        for &byte in chunk.iter().take(n) {
            let line = match lines.push(byte) {
                None => continue,
                Some(None) => {
                    return Err(DeviceError::Protocol(format!(
                        "the console sent a line longer than {CONSOLE_LINE_MAX} bytes"
                    )))
                }
                Some(Some(line)) => line,
            };
            deadline = Instant::now() + timeout;
            if let Some(count) = line.strip_prefix("audit end entries=") {
                let count: usize = count.parse().map_err(|_| {
                    DeviceError::Protocol(format!("bad end line {:?}", terminal_safe(&line)))
                })?;
                if count != entries.len() {
                    return Err(DeviceError::Protocol(format!(
                        "the device counted {count} audit entries and sent {}",
                        entries.len()
                    )));
                }
                return Ok(entries);
            }
            if line.starts_with("audit ") {
                let entry = parse_line(&line).ok_or_else(|| {
                    DeviceError::Protocol(format!(
                        "audit line {:?} does not parse",
                        terminal_safe(&line)
                    ))
                })?;
                if entries.len() >= AUDIT_MAX_ENTRIES {
                    return Err(DeviceError::Protocol(format!(
                        "more than {AUDIT_MAX_ENTRIES} audit entries"
                    )));
                }
                entries.push(entry);
            } else if let Some(e) = line.strip_prefix("error: ").filter(|_| entries.is_empty()) {
                return Err(DeviceError::Protocol(format!(
                    "the device: {}",
                    terminal_safe(e)
                )));
            }
            // Anything else (a banner, a prompt) is not the reply.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    #[test]
    fn lines_parse_and_others_do_not() {
        assert_eq!(
            parse_line("audit run=1 step=0 call=c1 tool=HassTurnOn verdict=executed time_ms=12"),
            Some(AuditLine {
                run: 1,
                step: 0,
                call_id: Some("c1".into()),
                tool: Some("HassTurnOn".into()),
                verdict: "executed".into(),
                time_ms: 12
            })
        );
        let started =
            parse_line("audit run=2 step=0 call=- tool=- verdict=started time_ms=0").unwrap();
        assert_eq!((started.call_id, started.tool), (None, None));
        for bad in [
            "audit run=1 step=0 call=c1 tool=T verdict=executed",
            "audit run=x step=0 call=c1 tool=T verdict=executed time_ms=1",
            "audit run=1 step=0 call=c1 tool=T verdict=executed time_ms=1 extra=2",
            "audit step=0 run=1 call=c1 tool=T verdict=executed time_ms=1",
            "audit end entries=1",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }

    /// A fake console that answers `audit` with `reply`.
    fn console(reply: &'static str) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut command = String::new();
            reader.read_line(&mut command).unwrap();
            assert_eq!(command, "audit\n");
            let mut w = stream;
            w.write_all(reply.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        TcpStream::connect(addr).unwrap()
    }

    #[test]
    fn the_log_is_read_to_its_end_line_and_counted() {
        let mut c = console(
            "budgetgate-firmware banner\naudit run=1 step=0 call=- tool=- verdict=started time_ms=0\n\
             audit run=1 step=0 call=c1 tool=HassTurnOn verdict=executing time_ms=5\naudit end entries=2\n",
        );
        let entries = read_audit(&mut c, Duration::from_secs(5)).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].verdict, "executing");
    }

    #[test]
    fn a_wrong_count_an_error_or_a_bad_line_is_an_error() {
        let mut c = console(
            "audit run=1 step=0 call=- tool=- verdict=started time_ms=0\naudit end entries=3\n",
        );
        assert!(read_audit(&mut c, Duration::from_secs(5))
            .unwrap_err()
            .to_string()
            .contains("counted 3"));
        let mut c = console("error: no flash (boot with flash=PATH)\n");
        assert!(read_audit(&mut c, Duration::from_secs(5))
            .unwrap_err()
            .to_string()
            .contains("no flash"));
        let mut c = console("audit run=1 nonsense\n");
        assert!(read_audit(&mut c, Duration::from_secs(5))
            .unwrap_err()
            .to_string()
            .contains("does not parse"));
    }
}
