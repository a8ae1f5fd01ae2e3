//! The byte links to the device (a TCP connection or a serial port, and
//! connecting to one), the agent link's framing over them ([`AgentLink`]:
//! sealed requests out, verified replies in), and [`DeviceError`], why a
//! device command could not finish.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use budgetgate_core::link::{self, FrameDecoder, FrameError, CHECKSUM_LEN, FRAME_MAX};
use serde_json::Value;

use crate::term::terminal_safe;

/// How long a connection attempt keeps retrying (the device, e.g. QEMU, may
/// still be starting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a request is sent when the device reports line noise
/// (`bad-checksum`, `missing-checksum`, `malformed-checksum`): such a frame
/// used no decision.
pub const SEND_ATTEMPTS: u32 = 3;
/// Most payload bytes of one request frame (`FRAME_MAX` less the checksum).
pub const PAYLOAD_MAX: usize = FRAME_MAX - CHECKSUM_LEN;
/// Bytes read from a port at a time; the inbox never holds more.
pub(super) const READ_CHUNK: usize = 2048;

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

pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> DeviceError {
    let what = what.into();
    move |source| DeviceError::Io { what, source }
}

pub(super) fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
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
    pub(super) inbox: VecDeque<u8>,
    /// The line being received, for `--frames` (at most `FRAME_MAX` bytes).
    pub(super) line: Vec<u8>,
    /// Bytes of the line being received, its line end excluded.
    line_len: usize,
    /// An over-long line was reported; its bytes are dropped to its `\n`.
    pub(super) discarding: bool,
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
            log::info!(
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
                log::info!(
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
                log::warn!("agent< (a line longer than {FRAME_MAX} bytes; discarded)");
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
                        log::info!(
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
pub(super) fn is_line_noise(error: &str) -> bool {
    [
        FrameError::BadChecksum,
        FrameError::MissingChecksum,
        FrameError::MalformedChecksum,
    ]
    .iter()
    .any(|e| e.as_str() == error)
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
