//! The operator console: its lines sorted ([`ConsoleEvent`]), read
//! bounded ([`LineReader`]), approval prompts answered by a reader thread
//! as the [`Operator`] says, and commands sent ([`Console`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use super::link::{io_error, seconds, DeviceError, READ_CHUNK};
use crate::term::terminal_safe;

/// How long a console command waits for its reply line.
pub const CONSOLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest console line read, `\n` excluded (the device's longest line is
/// under 200 bytes); a longer one is discarded to its line end and reported.
pub const CONSOLE_LINE_MAX: usize = 1024;
/// Console events that may wait for the session to read them; past that the
/// console's reader waits (the device's console writes a few lines a run).
pub const CONSOLE_BACKLOG: usize = 64;

/// What the operator answers to every approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Operator {
    /// Answer `y`: the call runs.
    Approve,
    /// Answer `n`: the call is refused (`approval-denied`).
    Deny,
}

impl Operator {
    /// The console answer line.
    pub fn answer(self) -> &'static str {
        match self {
            Self::Approve => "y",
            Self::Deny => "n",
        }
    }
}

/// A line of the operator console, as the console reader sorts it.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsoleEvent {
    /// An approval prompt and the answer sent to it.
    Prompt {
        /// The prompt line, e.g. `approve? c3 HassValveOpen {"name":"valve"} [y/n]`.
        line: String,
        /// The answer sent (`y` or `n`).
        answer: &'static str,
    },
    /// `approved ID` or `denied ID …`: the device's note on an answer.
    Outcome(String),
    /// Any other line (banner, a command's reply).
    Line(String),
    /// A line longer than [`CONSOLE_LINE_MAX`] bytes; it was discarded.
    TooLong,
}

/// Sorts one console line; prompts get `operator`'s answer.
pub fn console_event(line: &str, operator: Operator) -> ConsoleEvent {
    if line.starts_with("approve? ") {
        ConsoleEvent::Prompt {
            line: line.to_owned(),
            answer: operator.answer(),
        }
    } else if line.starts_with("approved ") || line.starts_with("denied ") {
        ConsoleEvent::Outcome(line.to_owned())
    } else {
        ConsoleEvent::Line(line.to_owned())
    }
}

/// Splits a byte stream into lines of at most `max` bytes (`\n` and a `\r`
/// before it excluded). A longer line is reported once, as soon as it
/// passes `max`, and the rest of it is dropped as it arrives, up to its line
/// end. Holds at most `max` bytes.
#[derive(Debug)]
pub struct LineReader {
    pub(super) line: Vec<u8>,
    max: usize,
    overflow: bool,
}

impl LineReader {
    /// An empty reader for lines of up to `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            line: Vec::new(),
            max,
            overflow: false,
        }
    }

    /// Feeds one byte: `Some(Some(line))` at a line end, `Some(None)` when
    /// the line passes `max` bytes, otherwise `None`.
    pub fn push(&mut self, byte: u8) -> Option<Option<String>> {
        if byte != b'\n' {
            if self.overflow {
                return None;
            }
            if self.line.len() < self.max {
                self.line.push(byte);
                return None;
            }
            self.overflow = true;
            self.line = Vec::new();
            return Some(None);
        }
        let line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.overflow) {
            return None;
        }
        let text = String::from_utf8_lossy(&line);
        Some(Some(text.trim_end_matches('\r').to_owned()))
    }
}

/// The console reader thread: bounded lines, prompts answered at once,
/// every event passed on (waiting when the session has not read
/// [`CONSOLE_BACKLOG`] of them yet).
fn read_console(
    mut reader: TcpStream,
    mut answerer: TcpStream,
    operator: Operator,
    frames: bool,
    tx: SyncSender<ConsoleEvent>,
) {
    let mut lines = LineReader::new(CONSOLE_LINE_MAX);
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        for &byte in chunk.iter().take(n) {
            let event = match lines.push(byte) {
                None => continue,
                Some(None) => {
                    if frames {
                        log::info!(
                            "console< (a line longer than {CONSOLE_LINE_MAX} bytes; discarded)"
                        );
                    }
                    ConsoleEvent::TooLong
                }
                Some(Some(line)) => {
                    if frames {
                        log::info!("console< {}", terminal_safe(&line));
                    }
                    console_event(&line, operator)
                }
            };
            // A prompt's note is passed on before the device gets its
            // answer: the device replies on the agent link only once
            // answered, so the session finds the note when it reads that
            // reply (answered first, the note could come after it under
            // load, and be printed at the next step). With no room left for
            // it, the device is answered first, as a blocked note must never
            // hold up the answer.
            let answer = match &event {
                ConsoleEvent::Prompt { answer, .. } => Some(*answer),
                _ => None,
            };
            let held = match tx.try_send(event) {
                Ok(()) => None,
                Err(TrySendError::Full(event)) => Some(event),
                Err(TrySendError::Disconnected(_)) => return,
            };
            if let Some(answer) = answer {
                if frames {
                    log::info!("console> {answer}");
                }
                if answerer
                    .write_all(format!("{answer}\n").as_bytes())
                    .is_err()
                {
                    return;
                }
            }
            if let Some(event) = held {
                if tx.send(event).is_err() {
                    return;
                }
            }
        }
    }
}

/// The operator console: a reader thread answers prompts at once and passes
/// every line on; commands wait for their reply line.
pub struct Console {
    writer: TcpStream,
    events: Receiver<ConsoleEvent>,
    notes: Vec<ConsoleEvent>,
    frames: bool,
}

impl Console {
    /// Takes over `stream` and starts the reader thread.
    pub fn new(stream: TcpStream, operator: Operator, frames: bool) -> Result<Self, DeviceError> {
        let reader = stream.try_clone().map_err(io_error("the console"))?;
        let answerer = stream.try_clone().map_err(io_error("the console"))?;
        let (tx, events) = mpsc::sync_channel(CONSOLE_BACKLOG);
        std::thread::spawn(move || read_console(reader, answerer, operator, frames, tx));
        Ok(Self {
            writer: stream,
            events,
            notes: Vec::new(),
            frames,
        })
    }

    /// Keeps a prompt or an outcome for the report; past
    /// [`CONSOLE_BACKLOG`] of them (a device would never write so many
    /// between two replies) the console is misbehaving.
    fn note(&mut self, note: ConsoleEvent) -> Result<(), DeviceError> {
        if self.notes.len() >= CONSOLE_BACKLOG {
            return Err(DeviceError::Protocol(format!(
                "the console wrote more than {CONSOLE_BACKLOG} prompts and outcomes unasked"
            )));
        }
        self.notes.push(note);
        Ok(())
    }

    /// Sends `command` and returns the first line that starts with one of
    /// `replies` (other lines, such as the boot banner, are passed over).
    /// A console line longer than [`CONSOLE_LINE_MAX`] is an error.
    pub fn command(&mut self, command: &str, replies: &[&str]) -> Result<String, DeviceError> {
        if self.frames {
            log::info!("console> {command}");
        }
        self.writer
            .write_all(format!("{command}\n").as_bytes())
            .map_err(io_error("writing to the console"))?;
        let deadline = Instant::now() + CONSOLE_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ConsoleEvent::Line(line)) if replies.iter().any(|r| line.starts_with(r)) => {
                    return Ok(line)
                }
                Ok(ConsoleEvent::Line(_)) => {}
                Ok(ConsoleEvent::TooLong) => {
                    return Err(DeviceError::Protocol(format!(
                        "the console sent a line longer than {CONSOLE_LINE_MAX} bytes \
                         (waiting for the reply to `{command}`)"
                    )))
                }
                Ok(note) => self.note(note)?,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(DeviceError::Timeout(format!(
                        "no reply to `{command}` on the console within {}",
                        seconds(CONSOLE_TIMEOUT)
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(DeviceError::Protocol("the console was closed".into()))
                }
            }
        }
    }

    /// Prompts and outcomes seen so far, oldest first.
    pub fn take_notes(&mut self) -> Result<Vec<ConsoleEvent>, DeviceError> {
        // Bounded: a console that writes faster than this reads is cut off
        // by the backlog, not followed for ever.
        for _ in 0..CONSOLE_BACKLOG {
            let Ok(event) = self.events.try_recv() else {
                break;
            };
            match event {
                ConsoleEvent::Line(_) => {}
                ConsoleEvent::TooLong => {
                    return Err(DeviceError::Protocol(format!(
                        "the console sent a line longer than {CONSOLE_LINE_MAX} bytes"
                    )))
                }
                note => self.note(note)?,
            }
        }
        Ok(std::mem::take(&mut self.notes))
    }
}
