//! `budgetgate device`: runs a script of proposals through the gate on a
//! co-processor, over its agent link (`docs/PROTOCOL.md`), and optionally
//! acts as the operator on its console.
//!
//! The host is only the agent's messenger: every decision is the device's.
//! It sends one `PROPOSE` at a time, waits for the verdict, and prints it.
//! The frame codec is the core's ([`budgetgate_core::link`]), so host and
//! device read and write the same bytes.
//!
//! * [`DeviceArgs`] and [`command`]: the subcommand (`budgetgate device`).
//! * [`Session`]: the same, as a library, over any [`Port`] (used by the QEMU
//!   end-to-end tests).
//! * [`AgentLink`]: framed requests and verified replies; [`DeviceReply`]: a
//!   reply read back into a Rust value; [`Expected`]: what a reply must be to
//!   belong to its request; [`minify`]: a proposal made into one line without
//!   changing a byte of its meaning.
//!
//! Whatever the peer sends, the host holds a few frames of memory at most: a
//! reply line longer than [`FRAME_MAX`] is reported at once and discarded to
//! its line end, and so is a console line longer than [`CONSOLE_LINE_MAX`].
//! Every text printed from a script or a device goes through
//! [`terminal_safe`] (or, for `--json`, [`json_terminal_safe`]).
//!
//! Replies have one schema, the core's [`link::Reply`]: the device writes it
//! with borrowed words (`Reply<&str, _>`), the host reads it with owned ones
//! ([`DeviceReply`], `Reply<String, Value>`: an owned string can hold what a
//! peer escaped). A test writes every kind of reply with the core's codec
//! and reads it back here.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use budgetgate_core::limits::{DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS};
use budgetgate_core::link::{
    self, FrameDecoder, FrameError, CHECKSUM_LEN, FRAME_MAX, PROTOCOL_VERSION,
};
use budgetgate_core::{word, RunLimits};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::input::{read_path, ReadError};
use crate::term::{terminal_safe, unsafe_on_terminal};
use crate::text::shorten;

/// How long a connection attempt keeps retrying (the device, e.g. QEMU, may
/// still be starting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a console command waits for its reply line.
pub const CONSOLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a request is sent when the device reports line noise
/// (`bad-checksum`, `missing-checksum`, `malformed-checksum`): such a frame
/// used no decision.
pub const SEND_ATTEMPTS: u32 = 3;
/// Most payload bytes of one request frame (`FRAME_MAX` less the checksum).
pub const PAYLOAD_MAX: usize = FRAME_MAX - CHECKSUM_LEN;
/// Longest console line read, `\n` excluded (the device's longest line is
/// under 200 bytes); a longer one is discarded to its line end and reported.
pub const CONSOLE_LINE_MAX: usize = 1024;
/// Console events that may wait for the session to read them; past that the
/// console's reader waits (the device's console writes a few lines a run).
pub const CONSOLE_BACKLOG: usize = 64;
/// Bytes read from a port at a time; the inbox never holds more.
const READ_CHUNK: usize = 2048;
/// Largest script file read (as the other commands' inputs): a script has a
/// few dozen proposals of at most a frame each.
pub const SCRIPT_MAX_BYTES: u64 = 16 << 20;
/// The accepted `--baud` rates.
pub const BAUD_RANGE: std::ops::RangeInclusive<i64> = 50..=4_000_000;
/// The accepted `--reply-timeout` seconds.
pub const REPLY_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;

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

/// Arguments of `budgetgate device`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("link").required(true).args(["tcp", "serial"])))]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DeviceArgs {
    /// `audit`: read the device's audit log instead of running a script.
    #[command(subcommand)]
    pub action: Option<DeviceAction>,

    /// The agent link over TCP, e.g. QEMU's UART0 (`-serial tcp::4440,server=on`).
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp: Option<String>,

    /// The agent link on a serial port (8N1, no flow control).
    #[arg(long, value_name = "PATH")]
    pub serial: Option<PathBuf>,

    /// Baud rate of --serial, 50..=4000000.
    #[arg(long, value_name = "N", default_value_t = 115_200, requires = "serial",
          value_parser = clap::value_parser!(u32).range(BAUD_RANGE))]
    pub baud: u32,

    /// The operator console over TCP: the command sends `start` there first
    /// and answers every approval prompt as --operator says.
    #[arg(long, value_name = "HOST:PORT", requires = "operator")]
    pub console: Option<String>,

    /// How to answer approval prompts on --console.
    #[arg(long, value_enum, requires = "console")]
    pub operator: Option<Operator>,

    /// The script: {"script": [proposal, ...], ...}, the file format of
    /// `budgetgate run`. With --console, its max_decisions and max_tool_calls
    /// (if given) are the budgets the run is started with; other keys (such
    /// as tools) are ignored: the device has its own tools. "-" reads
    /// standard input.
    #[arg(value_name = "SCRIPT.json", required = true)]
    pub script: Option<String>,

    /// Print each reply of the device as one JSON line (the frame's payload;
    /// characters a terminal would act on, such as ESC or bidi controls, are
    /// written as JSON escapes) instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Print every raw frame and console line on standard error (escaped
    /// for the terminal; a line over 1024 bytes is not printed).
    #[arg(long)]
    pub frames: bool,

    /// Seconds to wait for each reply, 1..=3600 (a call that needs approval
    /// waits for the operator, up to the device's approval timeout: keep this
    /// longer than that).
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(REPLY_TIMEOUT_RANGE))]
    pub reply_timeout: u64,
}

/// What `budgetgate device` does instead of running a script.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DeviceAction {
    /// Read the device's audit log (its flash, issue 15) over its console.
    ///
    /// Sends `audit` on --console and prints every entry, oldest first:
    /// run, step, call id, tool, verdict and the device's clock. Exit
    /// status 0, or 2 on a transport or protocol error (one line on stderr).
    ///
    /// Example: budgetgate device audit --console 127.0.0.1:4441 --json
    Audit(crate::device_audit::AuditArgs),
}

/// Why `budgetgate device` could not finish; exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Bad input: the script file or an option.
    #[error("{0}")]
    Usage(String),
    /// The link failed (connect, read, write).
    #[error("{what}: {source}")]
    Io {
        /// Which link and what was being done.
        what: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The device did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The device answered something the protocol does not allow here.
    #[error("{0}")]
    Protocol(String),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> DeviceError {
    let what = what.into();
    move |source| DeviceError::Io { what, source }
}

/// A byte link to the device: a TCP connection or a serial port.
pub trait Port: Read + Write + Send {
    /// How long a read may wait for its first byte.
    fn set_wait(&mut self, wait: Duration) -> io::Result<()>;
}

impl Port for TcpStream {
    fn set_wait(&mut self, wait: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(wait.max(Duration::from_millis(1))))
    }
}

impl Port for Box<dyn serialport::SerialPort> {
    fn set_wait(&mut self, wait: Duration) -> io::Result<()> {
        self.as_mut().set_timeout(wait).map_err(io::Error::from)
    }
}

/// A reply of the device (`docs/PROTOCOL.md`, "Replies"): the core's one
/// reply schema ([`link::Reply`]), read with owned words and the data as a
/// JSON value; fields it does not know are ignored, as the protocol asks.
pub type DeviceReply = link::Reply<String, Value>;

/// A reply as received: its payload text and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The frame's payload (compact JSON), as the device sent it.
    pub raw: String,
    /// The reply read back.
    pub reply: DeviceReply,
}

/// What one received frame line was.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// A verified reply.
    Reply(Reply),
    /// A line that is not a valid frame (line noise on the way back).
    Bad(FrameError),
}

/// Reads a reply from a verified frame payload.
pub fn parse_reply(payload: &[u8]) -> Result<Reply, DeviceError> {
    let raw = std::str::from_utf8(payload)
        .map_err(|_| DeviceError::Protocol("a reply is not UTF-8".into()))?;
    let reply = serde_json::from_str(raw)
        .map_err(|e| DeviceError::Protocol(format!("unreadable reply {raw:?}: {e}")))?;
    Ok(Reply {
        raw: raw.to_owned(),
        reply,
    })
}

/// One request frame: `verb`, then a space and `json` if given, sealed
/// (`PAYLOAD*XXXXXXXX\n`). Fails if it would exceed `FRAME_MAX`.
pub fn request_frame(verb: &str, json: Option<&[u8]>) -> Result<Vec<u8>, DeviceError> {
    let mut buf = vec![0u8; FRAME_MAX + 1];
    let n = link::write_request(&mut buf, verb, json).map_err(|_| {
        DeviceError::Usage(format!(
            "a {verb} request is longer than a frame ({FRAME_MAX} bytes)"
        ))
    })?;
    buf.truncate(n);
    Ok(buf)
}

/// The agent link: sealed requests out, verified replies in.
///
/// Holds at most one frame line (the core's decoder), one line's copy for
/// `--frames`, and one read of `READ_CHUNK` (2048) bytes, whatever the device
/// sends.
pub struct AgentLink<P: Port> {
    port: P,
    decoder: FrameDecoder<FRAME_MAX>,
    inbox: VecDeque<u8>,
    /// The line being received, for `--frames` (at most `FRAME_MAX` bytes).
    line: Vec<u8>,
    /// Bytes of the line being received, its line end excluded.
    line_len: usize,
    /// An over-long line was reported; its bytes are dropped to its `\n`.
    discarding: bool,
    frames: bool,
}

impl<P: Port> AgentLink<P> {
    /// A link over `port`; with `frames`, every raw line is printed on stderr.
    pub fn new(port: P, frames: bool) -> Self {
        Self {
            port,
            decoder: FrameDecoder::new(),
            inbox: VecDeque::with_capacity(READ_CHUNK),
            line: Vec::new(),
            line_len: 0,
            discarding: false,
            frames,
        }
    }

    /// Sends one request frame.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), DeviceError> {
        if self.frames {
            eprintln!(
                "agent> {}",
                terminal_safe(String::from_utf8_lossy(frame).trim_end())
            );
        }
        self.port
            .write_all(frame)
            .and_then(|()| self.port.flush())
            .map_err(io_error("writing to the agent link"))
    }

    /// Takes one byte from the device; a completed line is returned.
    fn take(&mut self, byte: u8) -> Option<Result<Received, DeviceError>> {
        if byte == b'\n' {
            let line = std::mem::take(&mut self.line);
            self.line_len = 0;
            // The decoder reports the over-long line again at its end: it
            // was reported when it passed FRAME_MAX.
            let decoded = self.decoder.push(byte);
            if std::mem::take(&mut self.discarding) {
                return None;
            }
            if self.frames && !line.is_empty() {
                eprintln!(
                    "agent< {}",
                    terminal_safe(String::from_utf8_lossy(&line).trim_end())
                );
            }
            return match decoded? {
                Ok(payload) => Some(parse_reply(payload).map(Received::Reply)),
                Err(e) => Some(Ok(Received::Bad(e))),
            };
        }
        if self.discarding {
            return None;
        }
        self.line_len += 1;
        // The decoder keeps FRAME_MAX bytes and then only notes the
        // overflow; this copy stops there too.
        let _ = self.decoder.push(byte);
        if self.line_len > FRAME_MAX {
            // No reply is ever longer: say so now instead of waiting for a
            // line end that may never come.
            self.discarding = true;
            self.line = Vec::new();
            if self.frames {
                eprintln!("agent< (a line longer than {FRAME_MAX} bytes; discarded)");
            }
            return Some(Ok(Received::Bad(FrameError::TooLong)));
        }
        if self.frames {
            self.line.push(byte);
        }
        None
    }

    /// The next frame line from the device, within `timeout`. A line longer
    /// than [`FRAME_MAX`] is [`Received::Bad`] as soon as it passes the
    /// limit; the rest of it, up to its line end, is dropped as it arrives.
    pub fn receive(&mut self, timeout: Duration) -> Result<Received, DeviceError> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(byte) = self.inbox.pop_front() {
                if let Some(received) = self.take(byte) {
                    return received;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DeviceError::Timeout(format!(
                    "no reply from the device within {}",
                    seconds(timeout)
                )));
            }
            self.port
                .set_wait(left)
                .map_err(io_error("setting the agent link's timeout"))?;
            let mut chunk = [0u8; READ_CHUNK];
            match self.port.read(&mut chunk) {
                Ok(0) => {
                    return Err(DeviceError::Protocol(
                        "the device closed the agent link".into(),
                    ))
                }
                Ok(n) => self.inbox.extend(chunk.iter().take(n)),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(io_error("reading the agent link")(e)),
            }
        }
    }

    /// The next reply; a line that is not a valid frame is an error (the
    /// reply arrived damaged).
    pub fn receive_reply(&mut self, timeout: Duration) -> Result<Reply, DeviceError> {
        match self.receive(timeout)? {
            Received::Reply(reply) => Ok(reply),
            Received::Bad(e) => Err(DeviceError::Protocol(format!(
                "the device's reply arrived damaged ({e})"
            ))),
        }
    }

    /// Sends `frame` and returns the device's reply, resending (up to
    /// [`SEND_ATTEMPTS`] times) when the device reports line noise. A reply
    /// that itself arrives damaged is an error: for a proposal the device
    /// has decided, and sending it again would be a second proposal.
    pub fn request(&mut self, frame: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        for _ in 0..SEND_ATTEMPTS {
            self.send(frame)?;
            let reply = self.receive_reply(timeout)?;
            match &reply.reply {
                DeviceReply::Error { error } if is_line_noise(error) => {
                    if self.frames {
                        eprintln!(
                            "agent: the device saw line noise ({}); sending again",
                            terminal_safe(error)
                        );
                    }
                }
                _ => return Ok(reply),
            }
        }
        Err(DeviceError::Protocol(format!(
            "the device reported line noise {SEND_ATTEMPTS} times in a row"
        )))
    }
}

/// Whether a device's error word says our frame arrived damaged (it used no
/// decision, so the request may be sent again).
fn is_line_noise(error: &str) -> bool {
    [
        FrameError::BadChecksum,
        FrameError::MissingChecksum,
        FrameError::MalformedChecksum,
    ]
    .iter()
    .any(|e| e.as_str() == error)
}

/// Removes the whitespace between JSON tokens (outside strings), so a
/// proposal fits on one frame line. Nothing else changes: duplicate keys,
/// number spellings and escapes reach the device as written, and it decides
/// on them. `text` must be JSON that serde_json accepted (no raw control
/// characters inside strings).
pub fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[derive(Deserialize)]
struct ScriptFile {
    script: Vec<Box<RawValue>>,
    #[serde(default)]
    max_decisions: Option<u32>,
    #[serde(default)]
    max_tool_calls: Option<u32>,
}

/// A script file read for the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The proposals, one line each, in order.
    pub proposals: Vec<String>,
    /// The budgets the operator starts the run with, if the file names any
    /// (`max_decisions`, `max_tool_calls`; the other defaults to 8 or 4).
    pub budgets: Option<RunLimits>,
}

impl Script {
    /// The console command that starts this script's run: `start` or
    /// `start D T`.
    pub fn start_command(&self) -> String {
        match self.budgets {
            None => "start".to_owned(),
            Some(limits) => format!(
                "start {} {}",
                limits.max_decisions(),
                limits.max_tool_calls()
            ),
        }
    }
}

/// Reads a script file: `{"script": [proposal, ...], "max_decisions"?: N,
/// "max_tool_calls"?: N, ...}`, the file format of `budgetgate run` (other
/// keys, such as `tools`, are ignored: the device has its own tools). Each
/// proposal is made one line by [`minify`] and checked to fit a `PROPOSE`
/// frame. The budgets are used only when this host is the operator.
pub fn read_script(name: &str, text: &str) -> Result<Script, DeviceError> {
    let file: ScriptFile = serde_json::from_str(text).map_err(|e| {
        DeviceError::Usage(format!(
            "{name}: a script file is a JSON object {{\"script\": [proposal, ...]}}: {e}"
        ))
    })?;
    let budgets = match (file.max_decisions, file.max_tool_calls) {
        (None, None) => None,
        (d, t) => Some(
            RunLimits::new(
                d.unwrap_or(DEFAULT_MAX_DECISIONS),
                t.unwrap_or(DEFAULT_MAX_TOOL_CALLS),
            )
            .map_err(|e| DeviceError::Usage(format!("{name}: {e}")))?,
        ),
    };
    let mut proposals = Vec::with_capacity(file.script.len());
    for (i, raw) in file.script.iter().enumerate() {
        let line = minify(raw.get());
        let len = "PROPOSE ".len() + line.len();
        if len > PAYLOAD_MAX {
            return Err(DeviceError::Usage(format!(
                "{name}: proposal {i} needs {len} bytes; a frame carries at most {PAYLOAD_MAX}"
            )));
        }
        proposals.push(line);
    }
    Ok(Script { proposals, budgets })
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
    line: Vec<u8>,
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
                        eprintln!(
                            "console< (a line longer than {CONSOLE_LINE_MAX} bytes; discarded)"
                        );
                    }
                    ConsoleEvent::TooLong
                }
                Some(Some(line)) => {
                    if frames {
                        eprintln!("console< {}", terminal_safe(&line));
                    }
                    console_event(&line, operator)
                }
            };
            if let ConsoleEvent::Prompt { answer, .. } = &event {
                if frames {
                    eprintln!("console> {answer}");
                }
                if answerer
                    .write_all(format!("{answer}\n").as_bytes())
                    .is_err()
                {
                    return;
                }
            }
            if tx.send(event).is_err() {
                return;
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
            eprintln!("console> {command}");
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

/// How a session ended when the link worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    /// The run's stop status (`final`, `tool-budget`, …), or `None` when the
    /// script ended while the run still takes proposals.
    pub status: Option<String>,
}

impl SessionEnd {
    /// 0 for `final`, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.status.as_deref() {
            Some("final") => 0,
            _ => 1,
        }
    }
}

/// One script run through the device.
pub struct Session<'o, P: Port> {
    agent: AgentLink<P>,
    console: Option<Console>,
    json: bool,
    reply_timeout: Duration,
    out: &'o mut dyn Write,
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// A proposal in a few words: `tool c1 add {"a":7,"b":8}`, `final "15"`.
pub fn summary(proposal: &str) -> String {
    let value: Option<Value> = serde_json::from_str(proposal).ok();
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "?".into(),
    };
    match value {
        Some(Value::Object(map)) if map.get("kind") == Some(&Value::from("tool")) => format!(
            "tool {} {} {}",
            text(map.get("call_id")),
            text(map.get("name")),
            shorten(&text(map.get("arguments")), 60)
        ),
        Some(Value::Object(map)) if map.get("kind") == Some(&Value::from("final")) => {
            format!(
                "final {}",
                shorten(&text(map.get("text")).replace('\n', " "), 100)
            )
        }
        _ => format!("proposal {}", shorten(proposal, 60)),
    }
}

/// The readable verdict of one reply.
pub fn verdict(reply: &DeviceReply) -> String {
    match reply {
        DeviceReply::Observation {
            executed: true,
            ok: true,
            data,
            ..
        } => format!("ok: {data}"),
        DeviceReply::Observation {
            executed: true,
            data,
            ..
        } => format!("failed: {}", text_of(data)),
        DeviceReply::Observation {
            data,
            retry_after_ms: Some(ms),
            ..
        } => format!(
            "refused, not executed: {} (may go on again in {ms} ms)",
            text_of(data)
        ),
        DeviceReply::Observation { data, .. } => {
            format!("refused, not executed: {}", text_of(data))
        }
        DeviceReply::Stopped { status, .. } => format!("stopped: {status}"),
        DeviceReply::Error { error } => format!("error: {error} (no decision used)"),
        DeviceReply::Status {
            decisions,
            max_decisions,
            tool_attempts,
            max_tool_calls,
            state,
            ..
        } => format!(
            "{state}, {decisions}/{max_decisions} decisions, {tool_attempts}/{max_tool_calls} tool attempts"
        ),
        DeviceReply::Hello {
            protocol,
            frame_max,
        } => format!("protocol {protocol}, frame_max {frame_max}"),
    }
}

fn text_of(data: &Value) -> String {
    match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The reference firmware's actuator register, as `status` reports it
/// (bit 0 the lamp, bit 1 the valve): `3` → `lamp on, valve open (register
/// 3)`; 0 is every actuator in its safe state.
pub fn actuators(bits: u32) -> String {
    format!(
        "lamp {}, valve {} (register {bits}{})",
        if bits & 1 != 0 { "on" } else { "off" },
        if bits & 2 != 0 { "open" } else { "closed" },
        if bits == 0 { ": the safe state" } else { "" }
    )
}

/// `raw` (JSON text) with every character that must not reach a terminal
/// raw ([`unsafe_on_terminal`]) written as a JSON escape inside strings, and
/// as a space between tokens: the same JSON value, byte for byte the same
/// text when there is nothing to escape (what `--json` prints).
pub fn json_terminal_safe(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.chars().any(unsafe_on_terminal) {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if unsafe_on_terminal(c) {
            if in_string {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            } else {
                out.push(' ');
            }
            escaped = false;
            continue;
        }
        out.push(c);
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What a proposal is, as far as its reply must match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedCall {
    /// `kind: "tool"` with a string call id and name: an observation must
    /// name both.
    Tool {
        /// The proposal's call id.
        call_id: String,
        /// The proposal's tool name.
        name: String,
    },
    /// `kind: "final"`: only a stop can answer it.
    Final,
    /// Anything else: the device can only refuse it (`policy-error`).
    Other,
}

/// What a reply must be to belong to the request it answers: the run it
/// was sent in, the step it was to take, and, for a tool call, its call id
/// and name (`docs/PROTOCOL.md`, "Replies"). A reply that does not match is
/// a protocol error, never a verdict: a device (or anything between) that
/// answers another call, another step or another run is not answering us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The run (`status`'s `run`).
    pub run: u32,
    /// The round this proposal is (`decisions` before it).
    pub step: u8,
    /// The proposal.
    pub call: ExpectedCall,
    /// Only this stop: the `decision-budget` stop that follows an
    /// observation of the last decision.
    pub decision_budget: bool,
}

impl Expected {
    /// The reply `proposal` (one line of JSON) needs in `run` at `step`.
    pub fn proposal(proposal: &str, run: u32, step: u8) -> Self {
        let value: Option<Value> = serde_json::from_str(proposal).ok();
        let text = |map: &serde_json::Map<String, Value>, key: &str| {
            map.get(key).and_then(Value::as_str).map(str::to_owned)
        };
        let call = match &value {
            Some(Value::Object(map)) => match map.get("kind").and_then(Value::as_str) {
                Some("tool") => match (text(map, "call_id"), text(map, "name")) {
                    (Some(call_id), Some(name)) => ExpectedCall::Tool { call_id, name },
                    _ => ExpectedCall::Other,
                },
                Some("final") => ExpectedCall::Final,
                _ => ExpectedCall::Other,
            },
            _ => ExpectedCall::Other,
        };
        Self {
            run,
            step,
            call,
            decision_budget: false,
        }
    }

    /// The stop that must follow the observation of the last decision.
    pub fn decision_budget_stop(run: u32, step: u8) -> Self {
        Self {
            run,
            step,
            call: ExpectedCall::Other,
            decision_budget: true,
        }
    }

    /// The stop statuses that can answer this request.
    pub fn stops(&self) -> &'static [&'static str] {
        if self.decision_budget {
            return &[word::DECISION_BUDGET];
        }
        match self.call {
            ExpectedCall::Tool { .. } => &[
                word::POLICY_ERROR,
                word::DUPLICATE_CALL,
                word::TOOL_BUDGET,
                word::TIME_BUDGET,
            ],
            ExpectedCall::Final => &[word::FINAL, word::POLICY_ERROR, word::TIME_BUDGET],
            ExpectedCall::Other => &[word::POLICY_ERROR, word::TIME_BUDGET],
        }
    }

    /// Whether `reply` answers this request; otherwise what was expected and
    /// what came, both named. An `error` reply (no decision used) is
    /// checked by the caller, not here.
    pub fn check(&self, reply: &DeviceReply) -> Result<(), String> {
        let (run, step) = match reply {
            DeviceReply::Observation { run, step, .. } | DeviceReply::Stopped { run, step, .. } => {
                (*run, *step)
            }
            other => {
                return Err(format!(
                    "expected an observation or a stop, got a {} reply",
                    kind_of(other)
                ))
            }
        };
        if run != self.run {
            return Err(format!("expected run {}, got run {run}", self.run));
        }
        if step != self.step {
            return Err(format!("expected step {}, got step {step}", self.step));
        }
        match (reply, &self.call) {
            (
                DeviceReply::Observation {
                    call_id,
                    name,
                    executed,
                    ok,
                    ..
                },
                ExpectedCall::Tool {
                    call_id: want_id,
                    name: want_name,
                },
            ) if !self.decision_budget => {
                if call_id != want_id {
                    Err(format!("expected call id {want_id:?}, got {call_id:?}"))
                } else if name != want_name {
                    Err(format!("expected tool {want_name:?}, got {name:?}"))
                } else if *ok && !executed {
                    Err("an observation that is ok but not executed".into())
                } else {
                    Ok(())
                }
            }
            (DeviceReply::Observation { .. }, _) => Err(format!(
                "expected a stop ({}), got an observation",
                self.stops().join(", ")
            )),
            (DeviceReply::Stopped { status, .. }, _) => {
                if self.stops().contains(&status.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected {}, got the stop {status:?}",
                        self.describe()
                    ))
                }
            }
            _ => Err("expected an observation or a stop".into()),
        }
    }

    /// What this request accepts, in words.
    pub fn describe(&self) -> String {
        let stops = self.stops().join(", ");
        match &self.call {
            ExpectedCall::Tool { call_id, name } if !self.decision_budget => format!(
                "an observation of {call_id} ({name}) or a stop ({stops}) at step {} of run {}",
                self.step, self.run
            ),
            _ => format!("a stop ({stops}) at step {} of run {}", self.step, self.run),
        }
    }
}

fn kind_of(reply: &DeviceReply) -> &'static str {
    match reply {
        DeviceReply::Observation { .. } => "observation",
        DeviceReply::Stopped { .. } => "stopped",
        DeviceReply::Error { .. } => "error",
        DeviceReply::Status { .. } => "status",
        DeviceReply::Hello { .. } => "hello",
    }
}

/// A `status` reply, read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunStatus {
    run: u32,
    decisions: u8,
    max_decisions: u8,
    state: String,
    actuators: u32,
    text: String,
}

impl<'o, P: Port> Session<'o, P> {
    /// A session over `agent`, with the operator `console` if any; the
    /// report (or, with `json`, the replies) goes to `out`.
    pub fn new(
        agent: AgentLink<P>,
        console: Option<Console>,
        json: bool,
        reply_timeout: Duration,
        out: &'o mut dyn Write,
    ) -> Self {
        Self {
            agent,
            console,
            json,
            reply_timeout,
            out,
        }
    }

    /// One line of the report, made safe for a terminal: it holds text from
    /// the script and from the device.
    fn say(&mut self, line: &str) -> Result<(), DeviceError> {
        if !self.json {
            writeln!(self.out, "{}", terminal_safe(line))
                .map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn record(&mut self, reply: &Reply) -> Result<(), DeviceError> {
        if self.json {
            writeln!(self.out, "{}", json_terminal_safe(&reply.raw))
                .map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn ask(&mut self, verb: &str, json: Option<&[u8]>) -> Result<Reply, DeviceError> {
        let frame = request_frame(verb, json)?;
        let reply = self.agent.request(&frame, self.reply_timeout)?;
        self.record(&reply)?;
        Ok(reply)
    }

    fn status(&mut self) -> Result<RunStatus, DeviceError> {
        let reply = self.ask("STATUS", None)?;
        let text = verdict(&reply.reply);
        match reply.reply {
            DeviceReply::Status {
                run,
                decisions,
                max_decisions,
                state,
                actuators,
                ..
            } => Ok(RunStatus {
                run,
                decisions,
                max_decisions,
                state,
                actuators,
                text,
            }),
            _ => Err(DeviceError::Protocol(format!(
                "STATUS was answered with {}",
                reply.raw
            ))),
        }
    }

    fn print_notes(&mut self, step: Option<u8>) -> Result<(), DeviceError> {
        let notes = match &mut self.console {
            Some(console) => console.take_notes()?,
            None => return Ok(()),
        };
        for note in notes {
            if let ConsoleEvent::Prompt { line, answer } = note {
                let at = step.map_or_else(String::new, |s| format!("step {s}  "));
                let line = format!("{at}operator: {line} -> {answer}");
                if self.json {
                    eprintln!("{}", terminal_safe(&line));
                } else {
                    self.say(&line)?;
                }
            }
        }
        Ok(())
    }

    /// Greets the device, starts a run if this session is the operator
    /// (with the script's budgets, if it names any), sends every proposal in
    /// turn and reports each verdict, and what the actuators were left in.
    /// Every reply must belong to its request ([`Expected`]).
    pub fn run(&mut self, script: &Script) -> Result<SessionEnd, DeviceError> {
        let proposals = &script.proposals;
        let hello = self.ask("HELLO", None)?;
        match hello.reply {
            DeviceReply::Hello { protocol, .. } if protocol == PROTOCOL_VERSION => {}
            DeviceReply::Hello { protocol, .. } => {
                return Err(DeviceError::Protocol(format!(
                    "the device speaks protocol {protocol}; this host speaks {PROTOCOL_VERSION}"
                )))
            }
            _ => {
                return Err(DeviceError::Protocol(format!(
                    "HELLO was answered with {}",
                    hello.raw
                )))
            }
        }
        self.say(&format!("device: {}", verdict(&hello.reply)))?;
        let mut started_run = None;
        if let Some(console) = &mut self.console {
            let started = console.command(&script.start_command(), &["started run", "error:"])?;
            if started.starts_with("error:") {
                return Err(DeviceError::Protocol(format!(
                    "the console refused `start`: {started}"
                )));
            }
            started_run = started
                .strip_prefix("started run ")
                .and_then(|rest| rest.split(':').next())
                .and_then(|n| n.parse::<u32>().ok());
            self.say(&format!("operator: {started}"))?;
        }
        let status = self.status()?;
        self.say(&format!("run {}: {}", status.run, status.text))?;
        match status.state.as_str() {
            "running" => {}
            "idle" => {
                return Err(DeviceError::Usage(
                    "the device has no run: the operator must type `start` on its console \
                     (or pass --console HOST:PORT --operator approve|deny)"
                        .into(),
                ))
            }
            other => {
                return Err(DeviceError::Usage(format!(
                    "the device's run has already stopped ({other}); the operator must `start` a new one"
                )))
            }
        }
        let run = status.run;
        if let Some(started) = started_run.filter(|n| *n != run) {
            return Err(DeviceError::Protocol(format!(
                "the console started run {started}, but the agent link reports run {run}"
            )));
        }

        let mut end = None;
        let mut step = status.decisions;
        for (index, proposal) in proposals.iter().enumerate() {
            let frame = request_frame("PROPOSE", Some(proposal.as_bytes()))?;
            let expected = Expected::proposal(proposal, run, step);
            let reply = self.agent.request(&frame, self.reply_timeout)?;
            if !matches!(reply.reply, DeviceReply::Error { .. }) {
                expected.check(&reply.reply).map_err(|why| {
                    DeviceError::Protocol(format!(
                        "proposal {index}: the reply does not belong to it: {why} \
                         (reply {}; expected {})",
                        reply.raw,
                        expected.describe()
                    ))
                })?;
            }
            let at_step = (!matches!(reply.reply, DeviceReply::Error { .. })).then_some(step);
            self.print_notes(at_step)?;
            self.record(&reply)?;
            let about = summary(proposal);
            let at = at_step.map_or_else(|| format!("proposal {index}"), |s| format!("step {s}"));
            self.say(&format!("{at}  {about} -> {}", verdict(&reply.reply)))?;
            match reply.reply {
                DeviceReply::Observation { .. } => {
                    // The round that uses the last decision is followed by
                    // its stop (PROTOCOL.md: decision-budget).
                    if u16::from(step) + 1 >= u16::from(status.max_decisions) {
                        let next = self.agent.receive_reply(self.reply_timeout)?;
                        let want = Expected::decision_budget_stop(run, step);
                        want.check(&next.reply).map_err(|why| {
                            DeviceError::Protocol(format!(
                                "proposal {index}: the reply after its observation does not \
                                 follow it: {why} (reply {}; expected {})",
                                next.raw,
                                want.describe()
                            ))
                        })?;
                        self.record(&next)?;
                        self.say(&format!("step {step}  {}", verdict(&next.reply)))?;
                        if let DeviceReply::Stopped { status, .. } = next.reply {
                            end = Some(status);
                        }
                        break;
                    }
                }
                DeviceReply::Stopped { status, .. } => {
                    end = Some(status);
                    break;
                }
                DeviceReply::Error { error } => match error.as_str() {
                    "run-stopped" => {
                        let text = self.status()?.text;
                        self.say(&format!("run: {text}"))?;
                        return Err(DeviceError::Protocol(format!(
                            "proposal {index}: the run had already stopped"
                        )));
                    }
                    other => {
                        return Err(DeviceError::Protocol(format!(
                            "proposal {index} was refused without a decision: {other}"
                        )))
                    }
                },
                _ => {
                    return Err(DeviceError::Protocol(format!(
                        "PROPOSE was answered with {}",
                        reply.raw
                    )))
                }
            }
            step = step.saturating_add(1);
        }
        let after = self.status()?;
        if after.run != run {
            return Err(DeviceError::Protocol(format!(
                "the device's run changed during the session: expected run {run}, got run {}",
                after.run
            )));
        }
        match &end {
            Some(status) => self.say(&format!("run stopped: {status} ({})", after.text))?,
            None => self.say(&format!(
                "the script ended with the run still open on the device ({})",
                after.text
            ))?,
        }
        self.say(&format!("actuators left: {}", actuators(after.actuators)))?;
        Ok(SessionEnd { status: end })
    }
}

fn resolve(address: &str) -> Result<Vec<SocketAddr>, DeviceError> {
    let addresses: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| DeviceError::Usage(format!("{address}: not a HOST:PORT address ({e})")))?
        .collect();
    if addresses.is_empty() {
        return Err(DeviceError::Usage(format!("{address}: no address")));
    }
    Ok(addresses)
}

/// Connects to `address`, retrying refused connections for up to
/// [`CONNECT_TIMEOUT`] (a QEMU that is still starting).
pub fn connect(address: &str, what: &str) -> Result<TcpStream, DeviceError> {
    let addresses = resolve(address)?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let mut last = None;
        for addr in &addresses {
            match TcpStream::connect_timeout(addr, Duration::from_secs(2)) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            let e = last.unwrap_or_else(|| io::Error::other("no address"));
            return Err(io_error(format!("connecting the {what} at {address}"))(e));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads the script file (`-`: standard input), at most
/// [`SCRIPT_MAX_BYTES`]: a larger one (or `/dev/zero`) is refused without
/// being read whole, as every other input of the command.
fn read_text(path: &str) -> Result<String, DeviceError> {
    let bytes = read_path(std::path::Path::new(path), SCRIPT_MAX_BYTES).map_err(|e| match e {
        ReadError::Io(e) => DeviceError::Usage(format!("{path}: cannot read: {e}")),
        ReadError::TooLarge { limit } => {
            DeviceError::Usage(format!("{path}: larger than {} MiB; refused", limit >> 20))
        }
    })?;
    String::from_utf8(bytes).map_err(|e| DeviceError::Usage(format!("{path}: not UTF-8: {e}")))
}

fn session<P: Port>(
    args: &DeviceArgs,
    agent: P,
    script: &Script,
) -> Result<SessionEnd, DeviceError> {
    let console = match (&args.console, args.operator) {
        (Some(address), Some(operator)) => Some(Console::new(
            connect(address, "console")?,
            operator,
            args.frames,
        )?),
        _ => None,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut session = Session::new(
        AgentLink::new(agent, args.frames),
        console,
        args.json,
        Duration::from_secs(args.reply_timeout),
        &mut out,
    );
    session.run(script)
}

fn run(args: &DeviceArgs) -> Result<SessionEnd, DeviceError> {
    let path = args
        .script
        .as_deref()
        .ok_or_else(|| DeviceError::Usage("give a SCRIPT.json (or `audit`)".into()))?;
    let text = read_text(path)?;
    let name = if path == "-" { "<stdin>" } else { path };
    let script = read_script(name, &text)?;
    match (&args.tcp, &args.serial) {
        (Some(address), None) => session(args, connect(address, "agent link")?, &script),
        (None, Some(path)) => {
            let port = serialport::new(path.to_string_lossy(), args.baud)
                .timeout(Duration::from_millis(100))
                .open()
                .map_err(|e| DeviceError::Io {
                    what: format!("opening {}", path.display()),
                    source: e.into(),
                })?;
            session(args, port, &script)
        }
        _ => Err(DeviceError::Usage(
            "give exactly one of --tcp HOST:PORT and --serial PATH".into(),
        )),
    }
}

/// The one line `budgetgate device` prints on stderr for `e`, made safe for
/// a terminal: the message may quote the device or the script.
pub fn error_line(e: &DeviceError) -> String {
    format!("budgetgate device: {}", terminal_safe(&e.to_string()))
}

/// Runs `budgetgate device`: exit status 0 when the run ended with `final`,
/// 1 with any other stop status (or the script ended first), 2 on a usage,
/// transport or protocol error (one line on stderr).
pub fn command(args: &DeviceArgs) -> ExitCode {
    if let Some(DeviceAction::Audit(audit)) = &args.action {
        return crate::device_audit::command(audit);
    }
    match run(args) {
        Ok(end) => ExitCode::from(end.exit_code()),
        Err(e) => {
            eprintln!("{}", error_line(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    #[test]
    fn minify_keeps_strings_and_spelling() {
        let text = "{ \"kind\" : \"tool\",\n  \"name\": \"a b\\\" c\",\t\"x\": 1e2, \"x\": 7.0 }";
        assert_eq!(
            minify(text),
            r#"{"kind":"tool","name":"a b\" c","x":1e2,"x":7.0}"#
        );
        assert_eq!(minify(r#"["\\", " "]"#), r#"["\\"," "]"#);
    }

    #[test]
    fn script_proposals_are_one_line_each_and_fit_a_frame() {
        let text = r#"{"script": [
            {"kind": "tool", "call_id": "c1", "name": "add",
             "arguments": {"a": 7, "b": 8}},
            {"kind": "final", "text": "15"}], "tools": {"add": "add"}}"#;
        let script = read_script("s.json", text).unwrap();
        assert_eq!(script.budgets, None);
        assert_eq!(script.start_command(), "start");
        assert_eq!(
            script.proposals,
            [
                r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
                r#"{"kind":"final","text":"15"}"#
            ]
        );
        let fits = format!(
            r#"{{"script":[{{"kind":"final","text":"{}"}}]}}"#,
            "x".repeat(PAYLOAD_MAX - 8 - 26)
        );
        assert!(read_script("s", &fits).is_ok());
        let over = fits.replacen("\"x", "\"xx", 1);
        let e = read_script("s", &over).unwrap_err().to_string();
        assert!(e.contains("proposal 0 needs 1016 bytes"), "{e}");
        assert!(read_script("s", r#"{"tools":{}}"#).is_err());
        assert!(read_script("s", "[]").is_err());
        let budgets = read_script("s", r#"{"script":[],"max_tool_calls":6}"#).unwrap();
        assert_eq!(budgets.start_command(), "start 8 6");
        assert!(read_script("s", r#"{"script":[],"max_decisions":33}"#).is_err());
    }

    #[test]
    fn request_frames_are_sealed_like_the_device_expects() {
        assert_eq!(request_frame("STATUS", None).unwrap(), b"STATUS*8BF8A29A\n");
        let frame = request_frame("PROPOSE", Some(b"{}")).unwrap();
        assert_eq!(
            link::verify(&frame[..frame.len() - 1]),
            Ok(&b"PROPOSE {}"[..])
        );
        let big = vec![b'x'; PAYLOAD_MAX];
        assert!(request_frame("PROPOSE", Some(&big)).is_err());
        let just = vec![b'x'; PAYLOAD_MAX - 8];
        assert_eq!(
            request_frame("PROPOSE", Some(&just)).unwrap().len(),
            FRAME_MAX + 1
        );
    }

    #[test]
    fn replies_are_read_and_unknown_fields_ignored() {
        let r = parse_reply(br#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#).unwrap();
        assert_eq!(verdict(&r.reply), "ok: 15");
        let r = parse_reply(br#"{"type":"stopped","run":1,"step":1,"status":"final","extra":1}"#)
            .unwrap();
        assert_eq!(
            r.reply,
            DeviceReply::Stopped {
                run: 1,
                step: 1,
                status: "final".into()
            }
        );
        let r = parse_reply(br#"{"type":"observation","run":1,"step":2,"call_id":"c","name":"HassValveOpen","executed":false,"ok":false,"data":"approval-denied"}"#).unwrap();
        assert_eq!(verdict(&r.reply), "refused, not executed: approval-denied");
        // Issue 15: a duty-limit refusal says when the actuator may go on.
        let r = parse_reply(br#"{"type":"observation","run":1,"step":3,"call_id":"v2","name":"HassValveOpen","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":570001}"#).unwrap();
        assert_eq!(
            verdict(&r.reply),
            "refused, not executed: duty-limit (may go on again in 570001 ms)"
        );
        assert!(parse_reply(br#"{"type":"mystery"}"#).is_err());
        assert!(parse_reply(b"\xff").is_err());
    }

    #[test]
    fn console_lines_are_sorted_and_prompts_answered() {
        let prompt = r#"approve? c3 HassValveOpen {"name":"valve"} [y/n]"#;
        assert_eq!(
            console_event(prompt, Operator::Deny),
            ConsoleEvent::Prompt {
                line: prompt.into(),
                answer: "n"
            }
        );
        assert_eq!(
            console_event("denied c3 (timeout)", Operator::Approve),
            ConsoleEvent::Outcome("denied c3 (timeout)".into())
        );
        assert_eq!(
            console_event("leds=3", Operator::Approve),
            ConsoleEvent::Line("leds=3".into())
        );
        assert_eq!(actuators(3), "lamp on, valve open (register 3)");
        assert_eq!(
            actuators(0),
            "lamp off, valve closed (register 0: the safe state)"
        );
    }

    #[test]
    fn summaries_name_the_call() {
        assert_eq!(
            summary(r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#),
            r#"tool c1 add {"a":7,"b":8}"#
        );
        assert_eq!(summary(r#"{"kind":"final","text":"15"}"#), "final 15");
        assert_eq!(summary("[1]"), "proposal [1]");
    }

    fn sealed(payload: &str) -> Vec<u8> {
        let mut buf = vec![0u8; payload.len() + CHECKSUM_LEN + 1];
        buf[..payload.len()].copy_from_slice(payload.as_bytes());
        let n = link::seal(&mut buf, payload.len()).unwrap();
        buf.truncate(n);
        buf
    }

    /// A scripted stand-in for the device: for each request it expects,
    /// the raw bytes it answers.
    fn fake_device(exchanges: Vec<(&'static str, Vec<Vec<u8>>)>) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut lines = BufReader::new(stream).lines();
            for (expect, answers) in exchanges {
                let line = lines.next().unwrap().unwrap();
                let payload = link::verify(line.as_bytes()).unwrap();
                assert!(
                    std::str::from_utf8(payload).unwrap().starts_with(expect),
                    "{line} does not start with {expect}"
                );
                for answer in answers {
                    writer.write_all(&answer).unwrap();
                }
            }
        });
        TcpStream::connect(address).unwrap()
    }

    fn hello_and_status(max_decisions: u8) -> Vec<(&'static str, Vec<Vec<u8>>)> {
        vec![
            (
                "HELLO",
                vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
            ),
            (
                "STATUS",
                vec![sealed(&format!(
                    r#"{{"type":"status","run":1,"decisions":0,"max_decisions":{max_decisions},"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}}"#
                ))],
            ),
        ]
    }

    fn status_at_end(state: &str) -> (&'static str, Vec<Vec<u8>>) {
        (
            "STATUS",
            vec![sealed(&format!(
                r#"{{"type":"status","run":1,"decisions":2,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"{state}","actuators":0}}"#
            ))],
        )
    }

    fn run_fake(
        exchanges: Vec<(&'static str, Vec<Vec<u8>>)>,
        proposals: &[&str],
        json: bool,
    ) -> (Result<SessionEnd, DeviceError>, String) {
        let stream = fake_device(exchanges);
        let mut out = Vec::new();
        let script = Script {
            proposals: proposals.iter().map(|p| (*p).to_owned()).collect(),
            budgets: None,
        };
        let result = Session::new(
            AgentLink::new(stream, false),
            None,
            json,
            Duration::from_secs(5),
            &mut out,
        )
        .run(&script);
        (result, String::from_utf8(out).unwrap())
    }

    #[test]
    fn worked_example_against_a_fake_device() {
        let mut exchanges = hello_and_status(8);
        exchanges.push((
            "PROPOSE {\"kind\":\"tool\"",
            vec![sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#)],
        ));
        exchanges.push((
            "PROPOSE {\"kind\":\"final\"",
            vec![sealed(
                r#"{"type":"stopped","run":1,"step":1,"status":"final"}"#,
            )],
        ));
        exchanges.push(status_at_end("final"));
        let (result, out) = run_fake(
            exchanges,
            &[
                r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
                r#"{"kind":"final","text":"15"}"#,
            ],
            false,
        );
        assert_eq!(result.unwrap().exit_code(), 0);
        assert!(
            out.contains(r#"step 0  tool c1 add {"a":7,"b":8} -> ok: 15"#),
            "{out}"
        );
        assert!(out.contains("step 1  final 15 -> stopped: final"), "{out}");
        assert!(out.contains("run stopped: final"), "{out}");
    }

    #[test]
    fn line_noise_is_resent_and_json_mode_prints_every_reply() {
        let mut exchanges = hello_and_status(8);
        exchanges.push((
            "PROPOSE",
            vec![sealed(r#"{"type":"error","error":"bad-checksum"}"#)],
        ));
        exchanges.push((
            "PROPOSE",
            vec![sealed(
                r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#,
            )],
        ));
        exchanges.push(status_at_end("final"));
        let (result, out) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], true);
        assert_eq!(result.unwrap().exit_code(), 0);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(
            lines[2],
            r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#
        );
    }

    #[test]
    fn the_last_decision_is_followed_by_its_stop() {
        let mut exchanges = hello_and_status(1);
        exchanges.push((
            "PROPOSE",
            vec![
                sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#),
                sealed(r#"{"type":"stopped","run":1,"step":0,"status":"decision-budget"}"#),
            ],
        ));
        exchanges.push(status_at_end("decision-budget"));
        let (result, out) = run_fake(
            exchanges,
            &[
                r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#,
                r#"{"kind":"final","text":"never sent"}"#,
            ],
            false,
        );
        let end = result.unwrap();
        assert_eq!(end.status.as_deref(), Some("decision-budget"));
        assert_eq!(end.exit_code(), 1);
        assert!(out.contains("step 0  stopped: decision-budget"), "{out}");
    }

    #[test]
    fn a_device_without_a_run_is_a_usage_error() {
        let exchanges = vec![
            (
                "HELLO",
                vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
            ),
            (
                "STATUS",
                vec![sealed(
                    r#"{"type":"status","run":0,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"idle","actuators":0}"#,
                )],
            ),
        ];
        let (result, _) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
        let e = result.unwrap_err();
        assert!(matches!(e, DeviceError::Usage(_)), "{e}");
        assert!(e.to_string().contains("start"), "{e}");
    }

    #[test]
    fn a_damaged_reply_to_a_proposal_is_not_resent() {
        let mut exchanges = hello_and_status(8);
        let mut damaged = sealed(r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#);
        damaged[5] ^= 1;
        exchanges.push(("PROPOSE", vec![damaged]));
        let (result, _) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("damaged (frame checksum does not match)"), "{e}");
    }

    #[test]
    fn a_script_that_ends_first_leaves_exit_status_one() {
        let mut exchanges = hello_and_status(8);
        exchanges.push((
            "PROPOSE",
            vec![sealed(r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"x","executed":false,"ok":false,"data":"unknown-tool"}"#)],
        ));
        exchanges.push(status_at_end("running"));
        let (result, out) = run_fake(
            exchanges,
            &[r#"{"kind":"tool","call_id":"c1","name":"x","arguments":{}}"#],
            false,
        );
        let end = result.unwrap();
        assert_eq!((end.exit_code(), end.status), (1, None));
        assert!(out.contains("refused, not executed: unknown-tool"), "{out}");
        assert!(out.contains("still open"), "{out}");
    }

    /// A peer that sends `chunk` again and again, for at most `for_at_most`
    /// (or until the connection is closed), after `first` if given.
    fn endless_peer(first: Vec<u8>, chunk: &'static [u8], for_at_most: Duration) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.write_all(&first);
            let until = Instant::now() + for_at_most;
            while Instant::now() < until {
                if stream.write_all(chunk).is_err() {
                    break;
                }
            }
        });
        TcpStream::connect(address).unwrap()
    }

    /// Found by a hostile trial: a reply without a line end was buffered
    /// without limit (1.1 GB in 3 s, then an abort). It is refused as soon
    /// as it passes FRAME_MAX, and the link never holds more than a read
    /// and a frame, however long the peer goes on.
    #[test]
    fn a_reply_without_a_line_end_is_bounded() {
        let began = Instant::now();
        let stream = endless_peer(Vec::new(), &[b'A'; 65536], Duration::from_secs(20));
        let mut out = Vec::new();
        let script = Script {
            proposals: vec![r#"{"kind":"final","text":"x"}"#.into()],
            budgets: None,
        };
        let e = Session::new(
            AgentLink::new(stream.try_clone().unwrap(), false),
            None,
            false,
            Duration::from_secs(5),
            &mut out,
        )
        .run(&script)
        .unwrap_err();
        assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
        assert!(
            e.to_string().contains("frame longer than 1024 bytes"),
            "{e}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(4),
            "{:?}",
            began.elapsed()
        );

        // The same link keeps dropping the endless line, in bounded memory.
        let mut link = AgentLink::new(stream, true);
        assert_eq!(
            link.receive(Duration::from_secs(5)).unwrap(),
            Received::Bad(FrameError::TooLong)
        );
        let e = link.receive(Duration::from_millis(500)).unwrap_err();
        assert!(matches!(e, DeviceError::Timeout(_)), "{e}");
        assert!(link.inbox.len() <= READ_CHUNK, "{}", link.inbox.len());
        assert!(
            link.line.capacity() <= FRAME_MAX,
            "{}",
            link.line.capacity()
        );
        assert!(link.discarding);
    }

    #[test]
    fn an_over_long_reply_line_is_discarded_to_its_line_end() {
        let mut first = vec![b'z'; 5000];
        first.push(b'\n');
        first.extend(sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#));
        let stream = endless_peer(first, b"", Duration::ZERO);
        let mut link = AgentLink::new(stream, false);
        assert_eq!(
            link.receive(Duration::from_secs(5)).unwrap(),
            Received::Bad(FrameError::TooLong)
        );
        let next = link.receive_reply(Duration::from_secs(5)).unwrap();
        assert_eq!(
            next.reply,
            DeviceReply::Hello {
                protocol: 2,
                frame_max: 1024
            }
        );
    }

    /// The console side of the same trial: an endless console line is
    /// refused once it passes CONSOLE_LINE_MAX, not buffered.
    #[test]
    fn a_console_line_without_a_line_end_is_bounded() {
        let began = Instant::now();
        let stream = endless_peer(Vec::new(), &[b'B'; 65536], Duration::from_secs(20));
        let mut console = Console::new(stream, Operator::Deny, false).unwrap();
        let e = console.command("start", &["started run"]).unwrap_err();
        assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("longer than 1024 bytes"), "{e}");
        assert!(
            began.elapsed() < Duration::from_secs(4),
            "{:?}",
            began.elapsed()
        );

        let mut lines = LineReader::new(4);
        let fed: Vec<_> = b"abcdefgh\nok\r\n"
            .iter()
            .filter_map(|&b| lines.push(b))
            .collect();
        assert_eq!(fed, [None, Some("ok".to_owned())]);
        assert!(lines.line.capacity() <= 8);
    }

    fn run_fake_budgets(
        exchanges: Vec<(&'static str, Vec<Vec<u8>>)>,
        proposals: &[&str],
    ) -> (Result<SessionEnd, DeviceError>, String) {
        run_fake(exchanges, proposals, false)
    }

    /// Found by a hostile trial: a device (or a man in the middle) that
    /// answered with another call id, another step, or an observation to a
    /// `final` was printed as `ok`. Every reply must match its request; a
    /// mismatch names what was expected and what came.
    #[test]
    fn a_reply_that_does_not_belong_to_its_request_is_a_protocol_error() {
        let add = r#"{"kind":"tool","call_id":"c1","name":"add","arguments":{"a":7,"b":8}}"#;
        let fin = r#"{"kind":"final","text":"15"}"#;
        let obs = |run: u32, step: u8, id: &str, name: &str| {
            sealed(&format!(
                r#"{{"type":"observation","run":{run},"step":{step},"call_id":"{id}","name":"{name}","executed":true,"ok":true,"data":15}}"#
            ))
        };
        let stop = |run: u32, step: u8, status: &str| {
            sealed(&format!(
                r#"{{"type":"stopped","run":{run},"step":{step},"status":"{status}"}}"#
            ))
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                add,
                obs(1, 0, "OTHER", "add"),
                r#"expected call id "c1", got "OTHER""#,
            ),
            (
                add,
                obs(1, 0, "c1", "HassValveOpen"),
                r#"expected tool "add", got "HassValveOpen""#,
            ),
            (add, obs(1, 5, "c1", "add"), "expected step 0, got step 5"),
            (add, obs(2, 0, "c1", "add"), "expected run 1, got run 2"),
            (add, stop(1, 0, "final"), r#"got the stop "final""#),
            (
                fin,
                obs(1, 0, "c1", "add"),
                "expected a stop (final, policy-error, time-budget), got an observation",
            ),
            (fin, stop(3, 0, "final"), "expected run 1, got run 3"),
            (
                fin,
                stop(1, 0, "tool-budget"),
                r#"got the stop "tool-budget""#,
            ),
            (
                fin,
                sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#),
                "got a hello reply",
            ),
            (
                add,
                sealed(
                    r#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"add","executed":false,"ok":true,"data":15}"#,
                ),
                "ok but not executed",
            ),
        ];
        for (proposal, answer, why) in cases {
            let mut exchanges = hello_and_status(8);
            exchanges.push(("PROPOSE", vec![answer]));
            let (result, out) = run_fake_budgets(exchanges, &[proposal]);
            let e = result.unwrap_err();
            assert!(matches!(e, DeviceError::Protocol(_)), "{e}");
            let text = e.to_string();
            assert!(text.contains(why), "{why:?} not in {text}");
            assert!(text.contains("expected "), "{text}");
            assert!(
                !out.contains("-> ok"),
                "a mismatch was reported as a verdict:\n{out}"
            );
        }

        // The stop after the last decision must be that round's.
        let mut exchanges = hello_and_status(1);
        exchanges.push((
            "PROPOSE",
            vec![obs(1, 0, "c1", "add"), stop(1, 1, "decision-budget")],
        ));
        let (result, _) = run_fake_budgets(exchanges, &[add]);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("expected step 0, got step 1"), "{e}");

        // The run may not change under the session.
        let mut exchanges = hello_and_status(8);
        exchanges.push(("PROPOSE", vec![stop(1, 0, "final")]));
        exchanges.push((
            "STATUS",
            vec![sealed(
                r#"{"type":"status","run":2,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}"#,
            )],
        ));
        let (result, _) = run_fake_budgets(exchanges, &[fin]);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("expected run 1, got run 2"), "{e}");
    }

    /// A session that joins a run already under way expects its steps to
    /// go on from the run's decisions.
    #[test]
    fn steps_are_expected_from_the_runs_decisions() {
        let exchanges = vec![
            (
                "HELLO",
                vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
            ),
            (
                "STATUS",
                vec![sealed(
                    r#"{"type":"status","run":4,"decisions":3,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"running","actuators":1}"#,
                )],
            ),
            (
                "PROPOSE",
                vec![sealed(
                    r#"{"type":"stopped","run":4,"step":3,"status":"final"}"#,
                )],
            ),
            (
                "STATUS",
                vec![sealed(
                    r#"{"type":"status","run":4,"decisions":4,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"final","actuators":0}"#,
                )],
            ),
        ];
        let (result, out) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], false);
        assert_eq!(result.unwrap().exit_code(), 0);
        assert!(out.contains("run 4: running, 3/8 decisions"), "{out}");
        assert!(out.contains("step 3  final x -> stopped: final"), "{out}");
        assert!(
            out.contains("actuators left: lamp off, valve closed (register 0: the safe state)"),
            "{out}"
        );
    }

    /// Nothing but line ends that a terminal would act on.
    fn clean(out: &str) -> bool {
        out.chars().all(|c| c == '\n' || !unsafe_on_terminal(c))
    }

    /// Found by a hostile trial: `device` printed raw ESC and bidi
    /// characters from the script and from the device.
    #[test]
    fn script_and_device_text_is_escaped_on_the_terminal() {
        let proposal = "{\"kind\":\"final\",\"text\":\"t\\u001b[2J\u{202e}X\"}";
        let mut exchanges = hello_and_status(8);
        exchanges.push((
            "PROPOSE",
            vec![sealed(
                "{\"type\":\"stopped\",\"run\":1,\"step\":0,\"status\":\"final\u{202e}\\u001b[31m\"}",
            )],
        ));
        let (result, out) = run_fake(exchanges, &[proposal], false);
        // Not a stop word of a final: refused, and the message, which
        // quotes the reply, is escaped where it is printed.
        let e = result.unwrap_err();
        assert!(e.to_string().contains('\u{202e}'), "{e}");
        let line = error_line(&e);
        assert!(clean(&line) && line.contains(r"\u{202e}"), "{line}");
        assert!(clean(&out), "{out:?}");

        let mut exchanges = hello_and_status(8);
        exchanges.push((
            "PROPOSE",
            vec![sealed(
                "{\"type\":\"observation\",\"run\":1,\"step\":0,\"call_id\":\"c1\",\"name\":\"add\",\"executed\":false,\"ok\":false,\"data\":\"\\u001b]0;pwned\\u0007\u{202e}\"}",
            )],
        ));
        exchanges.push(status_at_end("running"));
        let tool = "{\"kind\":\"tool\",\"call_id\":\"c1\",\"name\":\"add\",\"arguments\":{\"a\":\"\\u001b[2J\u{202e}\"}}";
        for json in [false, true] {
            let (result, out) = run_fake(exchanges.clone(), &[proposal, tool][1..], json);
            result.unwrap();
            assert!(clean(&out), "{out:?}");
            if json {
                let line = out.lines().nth(2).unwrap();
                let back: Value = serde_json::from_str(line).unwrap();
                assert_eq!(back["data"], "\u{1b}]0;pwned\u{7}\u{202e}");
            } else {
                assert!(
                    out.contains(r"refused, not executed: \u{1b}]0;pwned\u{7}\u{202e}"),
                    "{out}"
                );
                assert!(out.contains(r#"{"a":"\u001b[2J\u{202e}"}"#), "{out}");
            }
        }
        let (result, out) = run_fake(
            vec![
                (
                    "HELLO",
                    vec![sealed(r#"{"type":"hello","protocol":2,"frame_max":1024}"#)],
                ),
                (
                    "STATUS",
                    vec![sealed(
                        r#"{"type":"status","run":1,"decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"running","actuators":0}"#,
                    )],
                ),
                (
                    "PROPOSE",
                    vec![sealed(
                        r#"{"type":"stopped","run":1,"step":0,"status":"final"}"#,
                    )],
                ),
                status_at_end("final"),
            ],
            &[proposal],
            false,
        );
        result.unwrap();
        assert!(
            out.contains(r"final t\u{1b}[2J\u{202e}X -> stopped: final"),
            "{out}"
        );
        assert_eq!(json_terminal_safe(r#"{"a":"ok"}"#), r#"{"a":"ok"}"#);
        assert_eq!(
            json_terminal_safe("{\"a\":\"\u{202e}\\\"\u{85}\"}"),
            r#"{"a":"\u202e\"\u0085"}"#
        );
    }

    /// Issue 11 (the host's reply schema is the core's): the host reads
    /// every kind of reply the core's codec writes, field for field, a
    /// duty refusal's `retry_after_ms` included.
    #[test]
    fn every_reply_the_core_writes_is_read_by_the_host() {
        let cases: Vec<(link::Reply<&str, i64>, DeviceReply)> = vec![
            (
                link::Reply::Observation {
                    run: 1,
                    step: 3,
                    call_id: "v2",
                    name: "HassValveOpen",
                    executed: false,
                    ok: false,
                    data: 0,
                    retry_after_ms: Some(570_001),
                },
                DeviceReply::Observation {
                    run: 1,
                    step: 3,
                    call_id: "v2".into(),
                    name: "HassValveOpen".into(),
                    executed: false,
                    ok: false,
                    data: Value::from(0),
                    retry_after_ms: Some(570_001),
                },
            ),
            (
                link::Reply::Observation {
                    run: 3,
                    step: 1,
                    call_id: "c1",
                    name: "add",
                    executed: true,
                    ok: true,
                    data: 15,
                    retry_after_ms: None,
                },
                DeviceReply::Observation {
                    run: 3,
                    step: 1,
                    call_id: "c1".into(),
                    name: "add".into(),
                    executed: true,
                    ok: true,
                    data: Value::from(15),
                    retry_after_ms: None,
                },
            ),
            (
                link::Reply::Stopped {
                    run: 3,
                    step: 2,
                    status: "final",
                },
                DeviceReply::Stopped {
                    run: 3,
                    step: 2,
                    status: "final".into(),
                },
            ),
            (
                link::Reply::Error { error: "no-run" },
                DeviceReply::Error {
                    error: "no-run".into(),
                },
            ),
            (
                link::Reply::Status {
                    run: 3,
                    decisions: 2,
                    max_decisions: 8,
                    tool_attempts: 1,
                    max_tool_calls: 4,
                    state: "running",
                    actuators: 2,
                },
                DeviceReply::Status {
                    run: 3,
                    decisions: 2,
                    max_decisions: 8,
                    tool_attempts: 1,
                    max_tool_calls: 4,
                    state: "running".into(),
                    actuators: 2,
                },
            ),
            (
                link::Reply::Hello {
                    protocol: PROTOCOL_VERSION,
                    frame_max: FRAME_MAX,
                },
                DeviceReply::Hello {
                    protocol: PROTOCOL_VERSION,
                    frame_max: FRAME_MAX,
                },
            ),
        ];
        for (written, read) in cases {
            let mut buf = [0u8; FRAME_MAX + 1];
            let n = link::write_frame(&mut buf, &written).unwrap();
            let payload = link::verify(&buf[..n - 1]).unwrap();
            assert_eq!(parse_reply(payload).unwrap().reply, read);
        }
    }

    /// Issue 11 and `docs/PROTOCOL.md` ("Replies"): read with the core's
    /// schema, a reply's unknown fields are ignored, an escaped word is read
    /// (owned), and a reply that breaks the schema — an unknown type, a
    /// missing field, a `retry_after_ms` past the protocol's 32 bits — is
    /// a protocol error, never a reply.
    #[test]
    fn replies_are_read_by_the_core_schema_and_refused_outside_it() {
        let r = parse_reply(
            br#"{"type":"stopped","run":2,"step":0,"status":"fin\u0061l","extra":[1]}"#,
        )
        .unwrap();
        assert_eq!(
            r.reply,
            DeviceReply::Stopped {
                run: 2,
                step: 0,
                status: "final".into()
            }
        );
        for bad in [
            &br#"{"type":"stopping","run":2,"step":0,"status":"final"}"#[..],
            br#"{"type":"stopped","run":2,"status":"final"}"#,
            br#"{"type":"observation","run":1,"step":3,"call_id":"v2","name":"n","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":4294967296}"#,
            br#"{"type":"hello","protocol":-1,"frame_max":1024}"#,
        ] {
            assert!(
                matches!(parse_reply(bad), Err(DeviceError::Protocol(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_malformed_checksum_is_line_noise_to_resend() {
        for word in ["bad-checksum", "missing-checksum", "malformed-checksum"] {
            assert!(is_line_noise(word), "{word}");
        }
        assert!(!is_line_noise("frame-too-long"));
    }

    /// The same class of fault as the endless reply, on the script side:
    /// the script was read whole, whatever its size.
    #[test]
    fn a_script_file_is_read_bounded() {
        let began = Instant::now();
        let e = read_text("/dev/zero").unwrap_err().to_string();
        assert_eq!(e, "/dev/zero: larger than 16 MiB; refused");
        assert!(began.elapsed() < Duration::from_secs(5));
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceArgs,
    }

    /// Found by a hostile trial: `--baud 0` was accepted and
    /// `--reply-timeout 0` silently waited 1 s.
    #[test]
    fn zero_baud_and_zero_reply_timeout_are_refused_with_their_range() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["device", "--serial", "/dev/null", "s.json"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map_err(|e| e.to_string())
        };
        let e = parse(&["--baud", "0"]).unwrap_err();
        assert!(e.contains("0 is not in 50..=4000000"), "{e}");
        let e = parse(&["--reply-timeout", "0"]).unwrap_err();
        assert!(e.contains("0 is not in 1..=3600"), "{e}");
        let ok = parse(&["--baud", "9600", "--reply-timeout", "1"]).unwrap();
        assert_eq!((ok.device.baud, ok.device.reply_timeout), (9600, 1));
    }
}
