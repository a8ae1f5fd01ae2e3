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
//!   reply read back into a Rust value; [`minify`]: a proposal made into one
//!   line without changing a byte of its meaning.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use budgetgate_core::limits::{DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS};
use budgetgate_core::link::{
    self, FrameDecoder, FrameError, CHECKSUM_LEN, FRAME_MAX, PROTOCOL_VERSION,
};
use budgetgate_core::RunLimits;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// How long a connection attempt keeps retrying (the device, e.g. QEMU, may
/// still be starting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a console command waits for its reply line.
pub const CONSOLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a request is sent when the device reports line noise
/// (`bad-checksum`, `missing-checksum`): such a frame used no decision.
pub const SEND_ATTEMPTS: u32 = 3;
/// Most payload bytes of one request frame (`FRAME_MAX` less the checksum).
pub const PAYLOAD_MAX: usize = FRAME_MAX - CHECKSUM_LEN;

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
pub struct DeviceArgs {
    /// The agent link over TCP, e.g. QEMU's UART0 (`-serial tcp::4440,server=on`).
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp: Option<String>,

    /// The agent link on a serial port (8N1, no flow control).
    #[arg(long, value_name = "PATH")]
    pub serial: Option<PathBuf>,

    /// Baud rate of --serial.
    #[arg(long, value_name = "N", default_value_t = 115_200, requires = "serial")]
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
    #[arg(value_name = "SCRIPT.json")]
    pub script: String,

    /// Print each reply of the device as one JSON line (exactly the frame's
    /// payload) instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Print every raw frame and console line on standard error.
    #[arg(long)]
    pub frames: bool,

    /// Seconds to wait for each reply (a call that needs approval waits for
    /// the operator, up to the device's approval timeout).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub reply_timeout: u64,
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

/// A reply of the device (`docs/PROTOCOL.md`, "Replies"); fields it does not
/// know are ignored, as the protocol asks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum DeviceReply {
    /// A tool round was decided.
    Observation {
        /// Round number from 0.
        step: u8,
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// Whether the tool ran.
        executed: bool,
        /// Whether `data` is the tool's result.
        ok: bool,
        /// The result, or an error word.
        data: Value,
    },
    /// The run stopped in this round.
    Stopped {
        /// Round number from 0.
        step: u8,
        /// The stop status.
        status: String,
    },
    /// The request used no decision and was refused.
    Error {
        /// The error word.
        error: String,
    },
    /// The run's counters.
    Status {
        /// Decision rounds used.
        decisions: u8,
        /// Most decision rounds.
        max_decisions: u8,
        /// Tool attempts used.
        tool_attempts: u8,
        /// Most tool attempts.
        max_tool_calls: u8,
        /// `idle`, `running` or the stop status.
        state: String,
    },
    /// The protocol version and frame limit.
    Hello {
        /// Protocol version.
        protocol: u32,
        /// Most bytes of a frame.
        frame_max: usize,
    },
}

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
pub struct AgentLink<P: Port> {
    port: P,
    decoder: FrameDecoder<FRAME_MAX>,
    inbox: VecDeque<u8>,
    line: Vec<u8>,
    frames: bool,
}

impl<P: Port> AgentLink<P> {
    /// A link over `port`; with `frames`, every raw line is printed on stderr.
    pub fn new(port: P, frames: bool) -> Self {
        Self {
            port,
            decoder: FrameDecoder::new(),
            inbox: VecDeque::new(),
            line: Vec::new(),
            frames,
        }
    }

    /// Sends one request frame.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), DeviceError> {
        if self.frames {
            eprintln!("agent> {}", String::from_utf8_lossy(frame).trim_end());
        }
        self.port
            .write_all(frame)
            .and_then(|()| self.port.flush())
            .map_err(io_error("writing to the agent link"))
    }

    /// The next frame line from the device, within `timeout`.
    pub fn receive(&mut self, timeout: Duration) -> Result<Received, DeviceError> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(byte) = self.inbox.pop_front() {
                if byte == b'\n' {
                    let line = std::mem::take(&mut self.line);
                    if self.frames && !line.is_empty() {
                        eprintln!("agent< {}", String::from_utf8_lossy(&line).trim_end());
                    }
                } else {
                    self.line.push(byte);
                }
                match self.decoder.push(byte) {
                    None => {}
                    Some(Ok(payload)) => return parse_reply(payload).map(Received::Reply),
                    Some(Err(e)) => return Ok(Received::Bad(e)),
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
            let mut chunk = [0u8; 2048];
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

    /// Sends `frame` and returns the device's reply, resending (up to
    /// [`SEND_ATTEMPTS`] times) when the device reports line noise. A reply
    /// that itself arrives damaged is an error: for a proposal the device
    /// has decided, and sending it again would be a second proposal.
    pub fn request(&mut self, frame: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        for _ in 0..SEND_ATTEMPTS {
            self.send(frame)?;
            match self.receive(timeout)? {
                Received::Bad(e) => {
                    return Err(DeviceError::Protocol(format!(
                        "the device's reply arrived damaged ({e})"
                    )))
                }
                Received::Reply(reply) => match &reply.reply {
                    DeviceReply::Error { error }
                        if error == FrameError::BadChecksum.as_str()
                            || error == FrameError::MissingChecksum.as_str() =>
                    {
                        if self.frames {
                            eprintln!("agent: the device saw line noise ({error}); sending again");
                        }
                    }
                    _ => return Ok(reply),
                },
            }
        }
        Err(DeviceError::Protocol(format!(
            "the device reported line noise {SEND_ATTEMPTS} times in a row"
        )))
    }
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
        let mut answerer = stream.try_clone().map_err(io_error("the console"))?;
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                let line = line.trim_end_matches('\r').to_owned();
                if frames {
                    eprintln!("console< {line}");
                }
                let event = console_event(&line, operator);
                if let ConsoleEvent::Prompt { answer, .. } = &event {
                    if frames {
                        eprintln!("console> {answer}");
                    }
                    if answerer
                        .write_all(format!("{answer}\n").as_bytes())
                        .is_err()
                    {
                        break;
                    }
                }
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            writer: stream,
            events,
            notes: Vec::new(),
            frames,
        })
    }

    /// Sends `command` and returns the first line that starts with one of
    /// `replies` (other lines, such as the boot banner, are passed over).
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
                Ok(note) => self.notes.push(note),
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
    pub fn take_notes(&mut self) -> Vec<ConsoleEvent> {
        let mut notes = std::mem::take(&mut self.notes);
        while let Ok(event) = self.events.try_recv() {
            if !matches!(event, ConsoleEvent::Line(_)) {
                notes.push(event);
            }
        }
        notes
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

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
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

/// `leds=3` → `lamp on, valve open (leds=3)`.
pub fn actuators(leds_line: &str) -> String {
    match leds_line
        .strip_prefix("leds=")
        .and_then(|n| n.trim().parse::<u32>().ok())
    {
        Some(bits) => format!(
            "lamp {}, valve {} ({leds_line})",
            if bits & 1 != 0 { "on" } else { "off" },
            if bits & 2 != 0 { "open" } else { "closed" }
        ),
        None => leds_line.to_owned(),
    }
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

    fn say(&mut self, line: &str) -> Result<(), DeviceError> {
        if !self.json {
            writeln!(self.out, "{line}").map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn record(&mut self, reply: &Reply) -> Result<(), DeviceError> {
        if self.json {
            writeln!(self.out, "{}", reply.raw).map_err(io_error("writing the report"))?;
        }
        Ok(())
    }

    fn ask(&mut self, verb: &str, json: Option<&[u8]>) -> Result<Reply, DeviceError> {
        let frame = request_frame(verb, json)?;
        let reply = self.agent.request(&frame, self.reply_timeout)?;
        self.record(&reply)?;
        Ok(reply)
    }

    fn status(&mut self) -> Result<(DeviceReply, String), DeviceError> {
        let reply = self.ask("STATUS", None)?;
        match reply.reply {
            DeviceReply::Status { .. } => {
                let text = verdict(&reply.reply);
                Ok((reply.reply, text))
            }
            other => Err(DeviceError::Protocol(format!(
                "STATUS was answered with {other:?}"
            ))),
        }
    }

    fn print_notes(&mut self, step: Option<u8>) -> Result<(), DeviceError> {
        let notes = match &mut self.console {
            Some(console) => console.take_notes(),
            None => return Ok(()),
        };
        for note in notes {
            if let ConsoleEvent::Prompt { line, answer } = note {
                let at = step.map_or_else(String::new, |s| format!("step {s}  "));
                let line = format!("{at}operator: {line} -> {answer}");
                if self.json {
                    eprintln!("{line}");
                } else {
                    self.say(&line)?;
                }
            }
        }
        Ok(())
    }

    /// Greets the device, starts a run if this session is the operator
    /// (with the script's budgets, if it names any), sends every proposal in
    /// turn and reports each verdict.
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
            other => {
                return Err(DeviceError::Protocol(format!(
                    "HELLO was answered with {other:?}"
                )))
            }
        }
        self.say(&format!("device: {}", verdict(&hello.reply)))?;
        if let Some(console) = &mut self.console {
            let started = console.command(&script.start_command(), &["started run", "error:"])?;
            if started.starts_with("error:") {
                return Err(DeviceError::Protocol(format!(
                    "the console refused `start`: {started}"
                )));
            }
            self.say(&format!("operator: {started}"))?;
        }
        let (status, text) = self.status()?;
        let DeviceReply::Status {
            max_decisions,
            state,
            ..
        } = status
        else {
            return Err(DeviceError::Protocol("STATUS".into()));
        };
        self.say(&format!("run: {text}"))?;
        match state.as_str() {
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

        let mut end = None;
        for (index, proposal) in proposals.iter().enumerate() {
            let frame = request_frame("PROPOSE", Some(proposal.as_bytes()))?;
            let reply = self.agent.request(&frame, self.reply_timeout)?;
            let step = match &reply.reply {
                DeviceReply::Observation { step, .. } | DeviceReply::Stopped { step, .. } => {
                    Some(*step)
                }
                _ => None,
            };
            self.print_notes(step)?;
            self.record(&reply)?;
            let about = summary(proposal);
            let at = step.map_or_else(|| format!("proposal {index}"), |s| format!("step {s}"));
            self.say(&format!("{at}  {about} -> {}", verdict(&reply.reply)))?;
            match reply.reply {
                DeviceReply::Observation { step, .. } => {
                    // The round that uses the last decision is followed by
                    // its stop (PROTOCOL.md: decision-budget).
                    if u16::from(step) + 1 >= u16::from(max_decisions) {
                        let next = match self.agent.receive(self.reply_timeout)? {
                            Received::Reply(next) => next,
                            Received::Bad(e) => {
                                return Err(DeviceError::Protocol(format!(
                                    "the device's reply arrived damaged ({e})"
                                )))
                            }
                        };
                        self.record(&next)?;
                        self.say(&format!("step {step}  {}", verdict(&next.reply)))?;
                        if let DeviceReply::Stopped { status, .. } = next.reply {
                            end = Some(status);
                            break;
                        }
                        return Err(DeviceError::Protocol(format!(
                            "expected the decision-budget stop, got {}",
                            next.raw
                        )));
                    }
                }
                DeviceReply::Stopped { status, .. } => {
                    end = Some(status);
                    break;
                }
                DeviceReply::Error { error } => match error.as_str() {
                    "run-stopped" => {
                        let (_, text) = self.status()?;
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
                other => {
                    return Err(DeviceError::Protocol(format!(
                        "PROPOSE was answered with {other:?}"
                    )))
                }
            }
        }
        let (_, text) = self.status()?;
        match &end {
            Some(status) => self.say(&format!("run stopped: {status} ({text})"))?,
            None => self.say(&format!(
                "the script ended with the run still open on the device ({text})"
            ))?,
        }
        if let Some(console) = &mut self.console {
            let leds = console.command("leds", &["leds="])?;
            self.say(&format!("actuators: {}", actuators(&leds)))?;
        }
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

fn read_text(path: &str) -> Result<String, DeviceError> {
    let mut bytes = Vec::new();
    let read = if path == "-" {
        io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| DeviceError::Usage(format!("{path}: cannot read: {e}")))?;
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
        Duration::from_secs(args.reply_timeout.max(1)),
        &mut out,
    );
    session.run(script)
}

fn run(args: &DeviceArgs) -> Result<SessionEnd, DeviceError> {
    let text = read_text(&args.script)?;
    let name = if args.script == "-" {
        "<stdin>"
    } else {
        &args.script
    };
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

/// Runs `budgetgate device`: exit status 0 when the run ended with `final`,
/// 1 with any other stop status (or the script ended first), 2 on a usage
/// or transport error (one line on stderr).
pub fn command(args: &DeviceArgs) -> ExitCode {
    match run(args) {
        Ok(end) => ExitCode::from(end.exit_code()),
        Err(e) => {
            eprintln!("budgetgate device: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let r = parse_reply(br#"{"type":"observation","step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#).unwrap();
        assert_eq!(verdict(&r.reply), "ok: 15");
        let r = parse_reply(br#"{"type":"stopped","step":1,"status":"final","extra":1}"#).unwrap();
        assert_eq!(
            r.reply,
            DeviceReply::Stopped {
                step: 1,
                status: "final".into()
            }
        );
        let r = parse_reply(br#"{"type":"observation","step":2,"call_id":"c","name":"HassValveOpen","executed":false,"ok":false,"data":"approval-denied"}"#).unwrap();
        assert_eq!(verdict(&r.reply), "refused, not executed: approval-denied");
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
        assert_eq!(actuators("leds=3"), "lamp on, valve open (leds=3)");
        assert_eq!(actuators("leds=0"), "lamp off, valve closed (leds=0)");
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
                    r#"{{"type":"status","decisions":0,"max_decisions":{max_decisions},"tool_attempts":0,"max_tool_calls":4,"state":"running"}}"#
                ))],
            ),
        ]
    }

    fn status_at_end(state: &str) -> (&'static str, Vec<Vec<u8>>) {
        (
            "STATUS",
            vec![sealed(&format!(
                r#"{{"type":"status","decisions":2,"max_decisions":8,"tool_attempts":1,"max_tool_calls":4,"state":"{state}"}}"#
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
            vec![sealed(r#"{"type":"observation","step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#)],
        ));
        exchanges.push((
            "PROPOSE {\"kind\":\"final\"",
            vec![sealed(r#"{"type":"stopped","step":1,"status":"final"}"#)],
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
            vec![sealed(r#"{"type":"stopped","step":0,"status":"final"}"#)],
        ));
        exchanges.push(status_at_end("final"));
        let (result, out) = run_fake(exchanges, &[r#"{"kind":"final","text":"x"}"#], true);
        assert_eq!(result.unwrap().exit_code(), 0);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(lines[2], r#"{"type":"stopped","step":0,"status":"final"}"#);
    }

    #[test]
    fn the_last_decision_is_followed_by_its_stop() {
        let mut exchanges = hello_and_status(1);
        exchanges.push((
            "PROPOSE",
            vec![
                sealed(r#"{"type":"observation","step":0,"call_id":"c1","name":"add","executed":true,"ok":true,"data":15}"#),
                sealed(r#"{"type":"stopped","step":0,"status":"decision-budget"}"#),
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
                    r#"{"type":"status","decisions":0,"max_decisions":8,"tool_attempts":0,"max_tool_calls":4,"state":"idle"}"#,
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
        let mut damaged = sealed(r#"{"type":"stopped","step":0,"status":"final"}"#);
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
            vec![sealed(r#"{"type":"observation","step":0,"call_id":"c1","name":"x","executed":false,"ok":false,"data":"unknown-tool"}"#)],
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
}
