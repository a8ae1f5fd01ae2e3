//! Approval at the gateway's terminal (`SPEC C`; docs/MCP.md, "Approval"):
//! when the client cannot be asked (it declared no `elicitation`
//! capability), the person at the gateway's controlling terminal
//! (`/dev/tty`, not its standard input, which is the protocol) is.
//!
//! One thread asks the questions one at a time, each until its deadline:
//! the question, escaped for the terminal ([`crate::term::terminal_safe`],
//! so an agent's arguments cannot move the cursor or rewrite the prompt),
//! then `allow? [y/N]`. Only `y` or `yes` (any case) allows; any other
//! line refuses; keys typed before the question was shown are discarded.
//! A question withdrawn (its deadline passed, its call cancelled) is said
//! so and the next one asked. A terminal that goes away asks nothing more:
//! the questions left are refused at their deadlines by the proxy.
//!
//! Off Unix there is no terminal to ask: [`controlling`] and
//! [`Terminal::on`] give `None`, and the callers refuse as without one.
#![cfg_attr(not(unix), allow(dead_code, unused_imports))]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::time::Duration;

use crate::mcp::Question;

/// Questions queued for the terminal at most (more are refused at once).
const QUEUE: usize = 256;

/// The questions waiting their turn: id, text, deadline.
type Queue = VecDeque<(String, String, u64)>;

enum Cmd {
    Ask {
        id: String,
        text: String,
        deadline_ms: u64,
    },
    Withdraw {
        id: String,
        why: String,
    },
}

/// The gateway's terminal, asking approval questions.
pub struct Terminal {
    tx: SyncSender<Cmd>,
    /// The terminal itself, to see whether the gateway may use it now.
    tty: File,
}

/// Whether the gateway may read and write `tty` now without being stopped:
/// it is not the gateway's controlling terminal (no job control applies),
/// or the gateway's process group is its foreground one. A gateway run in
/// the background of a shell (`budgetgate mcp … &`) is stopped by the
/// first read (SIGTTIN), so it asks nothing there.
#[cfg(unix)]
fn foreground(tty: &File) -> bool {
    match rustix::termios::tcgetpgrp(tty) {
        Ok(group) => group == rustix::process::getpgrp(),
        Err(_) => true,
    }
}

#[cfg(not(unix))]
fn foreground(_: &File) -> bool {
    false
}

/// The gateway's controlling terminal (`/dev/tty`, opened to read and
/// write), when it has one.
pub fn controlling() -> Option<File> {
    if cfg!(not(unix)) {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// The wall clock in milliseconds (the proxy's clock).
fn now() -> u64 {
    crate::gate::clock::now_ms()
}

impl Terminal {
    /// Asks on `tty` (a terminal, or for tests any readable and writable
    /// file).
    #[cfg(unix)]
    pub fn on(tty: File, answered: impl Fn(String, bool) + Send + 'static) -> Option<Self> {
        let (tx, rx) = sync_channel(QUEUE);
        let own = tty.try_clone().ok()?;
        std::thread::spawn(move || ask_each(tty, &rx, &answered));
        Some(Self { tx, tty: own })
    }

    /// No asker off Unix.
    #[cfg(not(unix))]
    pub fn on(tty: File, answered: impl Fn(String, bool) + Send + 'static) -> Option<Self> {
        let _ = (tty, answered);
        None
    }

    /// Queues `question`, answered under `id`. `false`: it cannot be
    /// asked (the gateway is in the background of its terminal, the queue
    /// is full, or the terminal gone): refuse it.
    pub fn ask(&self, id: String, question: &Question) -> bool {
        foreground(&self.tty)
            && self
                .tx
                .try_send(Cmd::Ask {
                    id,
                    text: question.text.clone(),
                    deadline_ms: question.deadline_ms,
                })
                .is_ok()
    }

    /// The question `id` is no longer asked (`why`).
    pub fn withdraw(&self, id: String, why: &str) {
        let _ = self.tx.try_send(Cmd::Withdraw {
            id,
            why: why.to_owned(),
        });
    }
}

/// How a question ended at the terminal.
enum Ended {
    Answered(bool),
    Withdrawn(String),
    Late,
    Gone,
}

#[cfg(unix)]
fn ask_each(mut tty: File, rx: &Receiver<Cmd>, answered: &dyn Fn(String, bool)) {
    let mut queue: Queue = VecDeque::new();
    let take = |queue: &mut Queue, cmd: Cmd| match cmd {
        Cmd::Ask {
            id,
            text,
            deadline_ms,
        } => queue.push_back((id, text, deadline_ms)),
        Cmd::Withdraw { id, .. } => queue.retain(|(q, _, _)| *q != id),
    };
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(cmd) => take(&mut queue, cmd),
                Err(_) => return,
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            take(&mut queue, cmd);
        }
        let Some((id, text, deadline)) = queue.pop_front() else {
            continue;
        };
        if deadline <= now() || !foreground(&tty) {
            // Refused by the proxy already, while it waited its turn; or
            // the gateway went to the background: the deadline refuses it.
            continue;
        }
        // Keys typed before the question was shown answer nothing.
        let _ = rustix::termios::tcflush(&tty, rustix::termios::QueueSelector::IFlush);
        let shown = format!(
            "\r\n{}\r\n  allow? [y/N] ({} s) ",
            crate::term::terminal_safe(&text),
            deadline.saturating_sub(now()).div_ceil(1000)
        );
        if tty
            .write_all(shown.as_bytes())
            .and_then(|()| tty.flush())
            .is_err()
        {
            return;
        }
        let ended = answer(&mut tty, rx, &id, deadline, &mut queue, &take);
        let said = match &ended {
            Ended::Answered(true) => "allowed\r\n".to_owned(),
            Ended::Answered(false) => "refused\r\n".to_owned(),
            Ended::Withdrawn(why) => format!("\r\n  withdrawn ({why}): not run\r\n"),
            Ended::Late => "\r\n  no answer in time: refused\r\n".to_owned(),
            Ended::Gone => return,
        };
        if let Ended::Answered(yes) = ended {
            answered(id, yes);
        }
        let _ = tty.write_all(said.as_bytes());
    }
}

/// Reads the person's answer to question `id` until `deadline`, taking
/// the other commands as they come.
#[cfg(unix)]
fn answer(
    tty: &mut File,
    rx: &Receiver<Cmd>,
    id: &str,
    deadline: u64,
    queue: &mut Queue,
    take: &dyn Fn(&mut Queue, Cmd),
) -> Ended {
    let mut line: Vec<u8> = Vec::new();
    loop {
        loop {
            match rx.try_recv() {
                Ok(Cmd::Withdraw { id: w, why }) if w == id => return Ended::Withdrawn(why),
                Ok(cmd) => take(queue, cmd),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let left = deadline.saturating_sub(now());
        if left == 0 {
            return Ended::Late;
        }
        if !foreground(tty) {
            // Sent to the background while asking: reading would stop the
            // gateway; the deadline refuses the call.
            std::thread::sleep(Duration::from_millis(left.min(100)));
            continue;
        }
        let wait = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: i64::try_from(left.min(100) * 1_000_000).unwrap_or(100_000_000),
        };
        let mut fds = [rustix::event::PollFd::new(
            &*tty,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&wait)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Ended::Gone,
        }
        if fds[0]
            .revents()
            .intersects(rustix::event::PollFlags::HUP | rustix::event::PollFlags::ERR)
            && !fds[0].revents().contains(rustix::event::PollFlags::IN)
        {
            return Ended::Gone;
        }
        let mut buf = [0u8; 256];
        match tty.read(&mut buf) {
            // End of input at the terminal (Ctrl-D): no.
            Ok(0) => return Ended::Answered(false),
            Err(_) => return Ended::Gone,
            Ok(n) => {
                // A line is short; a flood of keys without a newline is
                // not held past a bound.
                if line.len() < 256 {
                    line.extend_from_slice(&buf[..n]);
                }
                if let Some(end) = line.iter().position(|&b| b == b'\n' || b == b'\r') {
                    let word = String::from_utf8_lossy(&line[..end])
                        .trim()
                        .to_ascii_lowercase();
                    return Ended::Answered(word == "y" || word == "yes");
                }
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;
    use std::time::Instant;

    /// A pseudo-terminal: its controlling side, and the terminal the asker
    /// is given (not made the test's controlling terminal).
    fn pty() -> (File, File) {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
            .open(name.to_str().expect("name"))
            .expect("the terminal");
        (File::from(master), slave)
    }

    /// What the terminal showed, read until it contains `want` (at most 5 s).
    fn shown_until(master: &mut File, seen: &mut String, want: &str) {
        let until = Instant::now() + Duration::from_secs(5);
        while !seen.contains(want) {
            assert!(Instant::now() < until, "{want:?} never shown: {seen:?}");
            let mut fds = [rustix::event::PollFd::new(
                &*master,
                rustix::event::PollFlags::IN,
            )];
            let wait = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            if rustix::event::poll(&mut fds, Some(&wait)).unwrap_or(0) > 0 {
                let mut buf = [0u8; 4096];
                let n = master.read(&mut buf).expect("read");
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    }

    fn question(text: &str, ms: u64) -> Question {
        Question {
            eid: "q".into(),
            text: text.into(),
            deadline_ms: now() + ms,
        }
    }

    /// Approval at the terminal (docs/MCP.md, "Approval"): only `y` or
    /// `yes` allows; any other line refuses; the question is shown escaped;
    /// keys typed before it was shown answer nothing; a question
    /// withdrawn or past its deadline is said so and the next one asked.
    #[test]
    fn the_person_at_the_terminal_answers_each_question_in_turn() {
        let (mut master, slave) = pty();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = Terminal::on(slave, move |id, yes| {
            let _ = tx.send((id, yes));
        })
        .expect("the asker");
        let mut seen = String::new();
        assert!(t.ask(
            "1".into(),
            &question("call rm with \u{1b}[2J\u{202e}?", 5_000)
        ));
        shown_until(&mut master, &mut seen, "allow? [y/N]");
        assert!(
            seen.contains("call rm with \\u{1b}[2J\\u{202e}?"),
            "{seen:?}"
        );
        assert!(!seen.contains('\u{1b}'), "{seen:?}");
        master.write_all(b"YES\n").expect("type");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(("1".into(), true))
        );
        shown_until(&mut master, &mut seen, "allowed");
        for (id, typed) in [("2", "n\n"), ("3", "yess\n"), ("4", "\n")] {
            assert!(t.ask(id.into(), &question("again?", 5_000)));
            seen.clear();
            shown_until(&mut master, &mut seen, "allow? [y/N]");
            master.write_all(typed.as_bytes()).expect("type");
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)),
                Ok((id.into(), false)),
                "{typed:?}"
            );
            shown_until(&mut master, &mut seen, "refused");
        }
        // Typed ahead of the question: discarded, so the deadline refuses.
        master.write_all(b"y\n").expect("type");
        std::thread::sleep(Duration::from_millis(100));
        assert!(t.ask("5".into(), &question("typed ahead?", 700)));
        seen.clear();
        shown_until(&mut master, &mut seen, "no answer in time: refused");
        assert!(
            rx.try_recv().is_err(),
            "a key typed before the question answered it"
        );
        // Withdrawn while asked, and one queued behind it withdrawn before
        // its turn: said so, then the next one is asked.
        assert!(t.ask("6".into(), &question("six?", 5_000)));
        assert!(t.ask("7".into(), &question("seven?", 5_000)));
        assert!(t.ask("8".into(), &question("eight?", 5_000)));
        seen.clear();
        shown_until(&mut master, &mut seen, "six?");
        t.withdraw("7".into(), "the call was cancelled");
        t.withdraw("6".into(), "the call was cancelled");
        shown_until(
            &mut master,
            &mut seen,
            "withdrawn (the call was cancelled): not run",
        );
        shown_until(&mut master, &mut seen, "eight?");
        assert!(!seen.contains("seven?"), "{seen:?}");
        master.write_all(b"y\n").expect("type");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(("8".into(), true))
        );
    }
}
