//! The agent link's codec: how proposals reach the co-processor and verdicts
//! come back, byte for byte the same on the host and the device.
//!
//! A frame is one line of text: `PAYLOAD*XXXXXXXX\n`, where `XXXXXXXX` is the
//! CRC-32 (ISO-HDLC, the one zlib and Python's `binascii.crc32` compute) of
//! `PAYLOAD` in upper-case hex. A `\r` before the `\n` is ignored, and so is an
//! empty line. A frame longer than [`FRAME_MAX`] bytes is discarded up to the
//! next line end and reported once as [`FrameError::TooLong`], so the link
//! never loses sync. A frame whose checksum is missing, malformed or wrong is
//! line noise, told apart from a bad proposal: it consumes no decision.
//!
//! Requests from the agent (`PAYLOAD`):
//! * `PROPOSE {action}` — a proposal, validated by [`crate::Action::parse`];
//! * `STATUS` — ask for the run's counters;
//! * `HELLO` — ask for the protocol version and limits;
//! * `RESET` — refused: only the operator console can start a new run.
//!
//! The full protocol, with every reply, is in `docs/PROTOCOL.md`.

use core::fmt;

use crc::{Crc, Digest, CRC_32_ISO_HDLC};
use heapless::Vec;
use serde::Serialize;

use crate::pyjson::{self, EncodeError};

/// Most bytes in one frame line, checksum included, `\n` excluded (a `\r`
/// before it counts).
pub const FRAME_MAX: usize = 1024;

/// The protocol version carried in `HELLO` replies. Version 2 added the run
/// number to every decision and status reply, the actuator register to
/// `status`, and the `malformed-checksum` error (`docs/PROTOCOL.md`).
pub const PROTOCOL_VERSION: u32 = 2;

/// Bytes a frame adds around its payload: `*`, eight hex digits.
pub const CHECKSUM_LEN: usize = 9;

static CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// The CRC-32 of `payload`, as carried in a frame.
// Out of line, so that it is built with the core's optimisation (a firmware
// built for size would otherwise inline and shrink its table loop).
#[inline(never)]
pub fn checksum(payload: &[u8]) -> u32 {
    CRC32.checksum(payload)
}

/// Why a line is not a valid frame. Each is answered with a transport error
/// and consumes no decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// The line was longer than [`FRAME_MAX`] bytes; it was discarded.
    TooLong,
    /// The line has no `*XXXXXXXX` checksum suffix (too short, or no `*`
    /// nine bytes before its end).
    MissingChecksum,
    /// The line ends in `*` and eight bytes that are not eight upper-case
    /// hex digits (lower-case hex is not the protocol's spelling; a damaged
    /// digit looks the same).
    MalformedChecksum,
    /// The checksum does not match the payload (line noise).
    BadChecksum,
}

impl FrameError {
    /// The `error` value of the transport error reply.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooLong => "frame-too-long",
            Self::MissingChecksum => "missing-checksum",
            Self::MalformedChecksum => "malformed-checksum",
            Self::BadChecksum => "bad-checksum",
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => write!(f, "frame longer than {FRAME_MAX} bytes"),
            Self::MissingChecksum => f.write_str("frame has no *CRC32 suffix"),
            Self::MalformedChecksum => f.write_str("frame checksum is not 8 upper-case hex digits"),
            Self::BadChecksum => f.write_str("frame checksum does not match"),
        }
    }
}

impl core::error::Error for FrameError {}

/// Splits a byte stream into verified frame payloads.
///
/// Holds at most `N` bytes (default [`FRAME_MAX`]); `const fn new()` lets the
/// firmware keep it in a `static`.
///
/// The checksum is computed as the bytes come, not when the line ends: the
/// decoder keeps the CRC-32 of the line a checksum suffix and a `\r`
/// behind its end (every byte is hashed once, ten bytes after it came), so
/// at the line end only the last payload byte is left to hash, and a frame
/// is verified without a second pass over it. On a device that moves the
/// checksum's work out of the time between a frame's end and its verdict.
#[derive(Clone)]
pub struct FrameDecoder<const N: usize = FRAME_MAX> {
    line: Vec<u8, N>,
    overflow: bool,
    done: bool,
    /// The CRC-32 of `line[..hashed]`; `None` before the first byte is
    /// hashed, so that a new decoder is all zeros (a `static` of it lies in
    /// `.bss`, not in flash: a digest holds a pointer to its table).
    crc: Option<Digest<'static, u32>>,
    hashed: usize,
}

impl<const N: usize> fmt::Debug for FrameDecoder<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("line", &self.line)
            .field("overflow", &self.overflow)
            .field("done", &self.done)
            .field("hashed", &self.hashed)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Default for FrameDecoder<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> FrameDecoder<N> {
    /// An empty decoder.
    pub const fn new() -> Self {
        Self {
            line: Vec::new(),
            overflow: false,
            done: false,
            crc: None,
            hashed: 0,
        }
    }

    /// Hashes the line's bytes up to `len` (those not hashed yet).
    // Out of line, as `checksum` is: one copy of the table loop.
    #[inline(never)]
    fn hash_to(&mut self, len: usize) {
        if let Some(bytes) = self.line.get(self.hashed..len) {
            self.crc.get_or_insert_with(|| CRC32.digest()).update(bytes);
            self.hashed = len;
        }
    }

    /// Feeds one byte. At a line end, returns the verified payload (without
    /// checksum) or why the line is not a frame; otherwise `None`. Empty lines
    /// are skipped.
    pub fn push(&mut self, byte: u8) -> Option<Result<&[u8], FrameError>> {
        if self.done {
            self.line.clear();
            self.done = false;
            self.crc = None;
            self.hashed = 0;
        }
        if byte != b'\n' {
            if !self.overflow && self.line.push(byte).is_err() {
                self.overflow = true;
            }
            // What is sure to be payload: all but a suffix and a `\r`.
            if !self.overflow {
                self.hash_to(self.line.len().saturating_sub(CHECKSUM_LEN + 1));
            }
            return None;
        }
        self.done = true;
        if core::mem::take(&mut self.overflow) {
            return Some(Err(FrameError::TooLong));
        }
        let len = match self.line.last() {
            Some(b'\r') => self.line.len() - 1,
            _ => self.line.len(),
        };
        if len == 0 {
            return None;
        }
        let payload = len.saturating_sub(CHECKSUM_LEN);
        self.hash_to(payload);
        let crc = self
            .crc
            .clone()
            .unwrap_or_else(|| CRC32.digest())
            .finalize();
        let line = self.line.get(..len).unwrap_or_default();
        Some(verify_suffix(line, || crc))
    }
}

/// Checks a frame line (without its line end) and returns its payload.
pub fn verify(line: &[u8]) -> Result<&[u8], FrameError> {
    verify_suffix(line, || {
        checksum(
            line.get(..line.len().saturating_sub(CHECKSUM_LEN))
                .unwrap_or_default(),
        )
    })
}

/// [`verify`], with the payload's CRC-32 from `crc` (asked for only once the
/// suffix is well formed).
fn verify_suffix(line: &[u8], crc: impl FnOnce() -> u32) -> Result<&[u8], FrameError> {
    let split = line
        .len()
        .checked_sub(CHECKSUM_LEN)
        .ok_or(FrameError::MissingChecksum)?;
    let (payload, suffix) = line.split_at(split);
    let (star, hex) = suffix.split_first().ok_or(FrameError::MissingChecksum)?;
    if *star != b'*' {
        return Err(FrameError::MissingChecksum);
    }
    let mut sent: u32 = 0;
    for &h in hex {
        let digit = match h {
            b'0'..=b'9' => h - b'0',
            b'A'..=b'F' => h - b'A' + 10,
            _ => return Err(FrameError::MalformedChecksum),
        };
        sent = (sent << 4) | u32::from(digit);
    }
    if sent != crc() {
        return Err(FrameError::BadChecksum);
    }
    Ok(payload)
}

/// Appends `*XXXXXXXX\n` for the payload in `buf[..len]`, returning the frame's
/// total length.
pub fn seal(buf: &mut [u8], len: usize) -> Result<usize, EncodeError> {
    let crc = checksum(buf.get(..len).ok_or(EncodeError::TooLarge)?);
    let end = len + CHECKSUM_LEN + 1;
    let tail = buf.get_mut(len..end).ok_or(EncodeError::TooLarge)?;
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = [b'*', 0, 0, 0, 0, 0, 0, 0, 0, b'\n'];
    for (i, slot) in out.iter_mut().skip(1).take(8).enumerate() {
        let nibble = (crc >> (28 - 4 * i)) & 0xf;
        *slot = HEX.get(nibble as usize).copied().unwrap_or(b'0');
    }
    tail.copy_from_slice(&out);
    Ok(end)
}

/// Writes `message` as a sealed frame into `buf` (compact JSON, then the
/// checksum and `\n`). Returns the frame's length.
pub fn write_frame<T: Serialize + ?Sized>(
    buf: &mut [u8],
    message: &T,
) -> Result<usize, EncodeError> {
    let room = buf.len().saturating_sub(CHECKSUM_LEN + 1);
    let len = pyjson::encode(message, buf.get_mut(..room).ok_or(EncodeError::TooLarge)?)?;
    seal(buf, len)
}

/// Writes a request frame: `verb`, then a space and `json` if given.
pub fn write_request(
    buf: &mut [u8],
    verb: &str,
    json: Option<&[u8]>,
) -> Result<usize, EncodeError> {
    let mut len = 0;
    let mut put = |bytes: &[u8]| -> Result<(), EncodeError> {
        let end = len + bytes.len();
        buf.get_mut(len..end)
            .ok_or(EncodeError::TooLarge)?
            .copy_from_slice(bytes);
        len = end;
        Ok(())
    };
    put(verb.as_bytes())?;
    if let Some(json) = json {
        put(b" ")?;
        put(json)?;
    }
    seal(buf, len)
}

/// A request from the agent, read from a verified payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `PROPOSE {json}`: a proposal, still to be validated.
    Propose(&'a [u8]),
    /// `STATUS`
    Status,
    /// `HELLO`
    Hello,
    /// `RESET`: always refused on the agent link.
    Reset,
}

/// Why a verified payload is not a request (a transport error: no decision used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RequestError {
    /// The payload does not start with a known verb.
    UnknownVerb,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown request; expected PROPOSE, STATUS, HELLO or RESET")
    }
}

impl core::error::Error for RequestError {}

impl<'a> Request<'a> {
    /// Reads a request from a verified payload.
    pub fn parse(payload: &'a [u8]) -> Result<Self, RequestError> {
        // Slice patterns: byte comparisons, no call to `memcmp`.
        match payload {
            [b'P', b'R', b'O', b'P', b'O', b'S', b'E', b' ', json @ ..] => Ok(Self::Propose(json)),
            b"STATUS" => Ok(Self::Status),
            b"HELLO" => Ok(Self::Hello),
            b"RESET" => Ok(Self::Reset),
            _ => Err(RequestError::UnknownVerb),
        }
    }
}

/// A reply from the device, written with [`write_frame`]: the one schema of
/// the protocol's replies (`docs/PROTOCOL.md`, "Replies"), which the device
/// writes and the host reads. `S` is the type of its words and names (the
/// device writes `&str`; the host reads `String`), `D` the observation
/// data's type (the host reads a `serde_json::Value`). With the `alloc`
/// feature it is also `Deserialize` (serde reads an internally tagged enum
/// through a buffer that needs an allocator); fields it does not know are
/// ignored, as the protocol asks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "alloc", derive(serde::Deserialize))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Reply<S, D> {
    /// A tool round: what was observed (`SPEC A2` observation plus trace row).
    Observation {
        /// The run this round belongs to (the console's run number, from 1).
        run: u32,
        /// Round number from 0.
        step: u8,
        /// The call id.
        call_id: S,
        /// The tool name.
        name: S,
        /// Whether the tool ran.
        executed: bool,
        /// Whether `data` is the tool's result.
        ok: bool,
        /// The result, or an error word: `"unknown-tool"`, `"tool-error"`,
        /// `"invalid-arguments"`, `"approval-denied"`, `"duty-limit"`.
        data: D,
        /// With `duty-limit` only: in how many ms the actuator's duty window
        /// lets it go on again (absent when it never does: a window that
        /// allows no on-time). Omitted from every other observation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u32>,
    },
    /// The run stopped in this round with `status`.
    Stopped {
        /// The run that stopped.
        run: u32,
        /// Round number from 0.
        step: u8,
        /// `final`, `policy-error`, `duplicate-call`, `tool-budget`,
        /// `decision-budget`, or `time-budget`.
        status: S,
    },
    /// A request that consumed no decision was refused.
    Error {
        /// What went wrong (`frame-too-long`, `bad-checksum`,
        /// `missing-checksum`, `malformed-checksum`, `unknown-request`, `not-permitted`, `no-run`,
        /// `run-stopped`, `storage-error`; `internal-error` only for a device bug).
        error: S,
    },
    /// The run's counters.
    Status {
        /// The current run's number (from 1), 0 before the first run.
        run: u32,
        /// Decision rounds used.
        decisions: u8,
        /// Most decision rounds.
        max_decisions: u8,
        /// Tool attempts used.
        tool_attempts: u8,
        /// Most tool attempts.
        max_tool_calls: u8,
        /// `idle` (no run started yet), `running`, or the status the run
        /// stopped with (including `time-budget`).
        state: S,
        /// The actuators as read back from the hardware, one bit each; 0 is
        /// every actuator in its safe state (the reference firmware: bit 0
        /// the lamp on, bit 1 the valve open).
        actuators: u32,
    },
    /// The protocol version and limits.
    Hello {
        /// [`PROTOCOL_VERSION`]
        protocol: u32,
        /// [`FRAME_MAX`]
        frame_max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/PROTOCOL.md`: what the host and the console print for a frame
    /// or request the device refuses names the rule. Found by
    /// cargo-mutants (the whole-core run, shard 1/4).
    #[test]
    fn frame_and_request_errors_say_the_rule() {
        assert_eq!(
            FrameError::TooLong.to_string(),
            "frame longer than 1024 bytes"
        );
        assert_eq!(
            FrameError::MissingChecksum.to_string(),
            "frame has no *CRC32 suffix"
        );
        assert_eq!(
            FrameError::MalformedChecksum.to_string(),
            "frame checksum is not 8 upper-case hex digits"
        );
        assert_eq!(
            FrameError::BadChecksum.to_string(),
            "frame checksum does not match"
        );
        assert_eq!(
            RequestError::UnknownVerb.to_string(),
            "unknown request; expected PROPOSE, STATUS, HELLO or RESET"
        );
    }

    fn frame(payload: &str) -> std::vec::Vec<u8> {
        let mut b = payload.as_bytes().to_vec();
        b.resize(payload.len() + CHECKSUM_LEN + 1, 0);
        let total = seal(&mut b, payload.len()).unwrap();
        assert_eq!(total, b.len());
        b
    }

    fn feed(
        d: &mut FrameDecoder,
        bytes: &[u8],
    ) -> std::vec::Vec<Result<std::vec::Vec<u8>, FrameError>> {
        let mut out = std::vec::Vec::new();
        for &b in bytes {
            if let Some(r) = d.push(b) {
                out.push(r.map(|p| p.to_vec()));
            }
        }
        out
    }

    /// `docs/PROTOCOL.md` (framing) and the device's verdict budget
    /// (`docs/FIRMWARE.md`): the decoder hashes a line as its bytes come,
    /// a suffix and a `\r` behind its end, so at the line end at most one
    /// payload byte is left to hash; and it answers exactly as `verify` on
    /// the whole line, with or without `\r`, for payloads holding `*` or
    /// a checksum-like text, for a damaged byte anywhere, and for lines
    /// too short to carry a checksum.
    #[test]
    fn the_decoder_hashes_as_bytes_come_and_answers_as_verify() {
        let long = "y".repeat(1000);
        let mut lines: std::vec::Vec<std::vec::Vec<u8>> = std::vec::Vec::new();
        for p in ["", "x", "STATUS", r#"PROPOSE {"a":"*12345678"}"#, &long] {
            let framed = frame(p);
            let line = framed[..framed.len() - 1].to_vec();
            for at in [0, line.len() / 2, line.len().saturating_sub(1)] {
                let mut damaged = line.clone();
                if let Some(b) = damaged.get_mut(at) {
                    *b ^= 0x01;
                }
                lines.push(damaged);
            }
            lines.push(line);
        }
        for short in ["*", "*1234567", "12345678", "abc*ABCDEF0"] {
            lines.push(short.as_bytes().to_vec());
        }
        for line in &lines {
            for cr in [false, true] {
                let mut d: FrameDecoder = FrameDecoder::new();
                for &b in line.iter().chain(cr.then_some(&b'\r')) {
                    assert!(d.push(b).is_none());
                }
                let payload = line.len().saturating_sub(CHECKSUM_LEN);
                assert!(
                    payload - d.hashed.min(payload) <= 1,
                    "{} hashed of {payload}",
                    d.hashed
                );
                let got = d.push(b'\n').map(|r| r.map(<[u8]>::to_vec));
                let want = Some(verify(line).map(<[u8]>::to_vec));
                assert_eq!(got, want, "{:?} cr={cr}", String::from_utf8_lossy(line));
            }
        }
        // The next line starts afresh.
        let mut d: FrameDecoder = FrameDecoder::new();
        for &b in b"garbage\nSTATUS*8BF8A29A\n" {
            if let Some(r) = d.push(b) {
                if r != Err(FrameError::MissingChecksum) {
                    assert_eq!(r, Ok(&b"STATUS"[..]));
                }
            }
        }
    }

    #[test]
    fn crc_matches_zlib() {
        // Python: hex(binascii.crc32(b"STATUS")) == '0x8bf8a29a'
        assert_eq!(frame("STATUS"), b"STATUS*8BF8A29A\n".to_vec());
        assert_eq!(checksum(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn frames_round_trip_and_noise_is_caught() {
        let mut d = FrameDecoder::new();
        let good = frame("PROPOSE {\"kind\":\"final\",\"text\":\"x\"}");
        assert_eq!(
            feed(&mut d, &good),
            vec![Ok(b"PROPOSE {\"kind\":\"final\",\"text\":\"x\"}".to_vec())]
        );
        let mut bad = good.clone();
        bad[3] ^= 0x20;
        assert_eq!(feed(&mut d, &bad), vec![Err(FrameError::BadChecksum)]);
        assert_eq!(
            feed(&mut d, b"STATUS\n"),
            vec![Err(FrameError::MissingChecksum)]
        );
        assert_eq!(feed(&mut d, b"\n\r\n"), vec![]);
    }

    #[test]
    fn a_lower_case_checksum_is_reported_as_malformed_not_missing() {
        let mut d = FrameDecoder::new();
        // Lower-case hex is not the protocol's spelling; the reason says so.
        assert_eq!(
            feed(&mut d, b"STATUS*8bf8a29a\n"),
            vec![Err(FrameError::MalformedChecksum)]
        );
        assert_eq!(
            feed(&mut d, b"STATUS*8BF8A29G\n"),
            vec![Err(FrameError::MalformedChecksum)]
        );
        assert_eq!(
            feed(&mut d, b"STATUS+8BF8A29A\n"),
            vec![Err(FrameError::MissingChecksum)]
        );
        assert_eq!(FrameError::MalformedChecksum.as_str(), "malformed-checksum");
    }

    #[test]
    fn overlong_frame_is_discarded_without_losing_sync() {
        let mut d = FrameDecoder::new();
        let mut stream = vec![b'x'; FRAME_MAX + 10];
        stream.push(b'\n');
        stream.extend(frame("STATUS"));
        let out = feed(&mut d, &stream);
        assert_eq!(out, vec![Err(FrameError::TooLong), Ok(b"STATUS".to_vec())]);
        // Exactly FRAME_MAX bytes still fit.
        let payload = "P".repeat(FRAME_MAX - CHECKSUM_LEN);
        assert_eq!(
            feed(&mut d, &frame(&payload)),
            vec![Ok(payload.clone().into_bytes())]
        );
        let payload = "P".repeat(FRAME_MAX - CHECKSUM_LEN + 1);
        assert_eq!(
            feed(&mut d, &frame(&payload)),
            vec![Err(FrameError::TooLong)]
        );
    }

    /// A decoder printed with `{:?}` (a host's or a probe's log of a link
    /// that stalled) shows the bytes of the line it holds, whether it has
    /// overflowed, and how much of it is hashed. Found by cargo-mutants
    /// (the whole-core run, shard 1/4 again).
    #[test]
    fn a_decoder_shows_the_line_it_holds_when_printed() {
        let mut d = FrameDecoder::<16>::new();
        for &b in b"ABCDEFGHIJKL" {
            assert!(d.push(b).is_none());
        }
        // All but a checksum and a `\r` (10 bytes) is sure to be payload.
        assert_eq!(
            format!("{d:?}"),
            "FrameDecoder { line: [65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76], \
             overflow: false, done: false, hashed: 2, .. }"
        );
        for &b in b"MNOPQ" {
            assert!(d.push(b).is_none());
        }
        assert!(format!("{d:?}").contains("overflow: true"));
    }

    #[test]
    fn requests() {
        assert_eq!(Request::parse(b"STATUS"), Ok(Request::Status));
        assert_eq!(Request::parse(b"RESET"), Ok(Request::Reset));
        assert_eq!(Request::parse(b"PROPOSE {}"), Ok(Request::Propose(b"{}")));
        assert_eq!(Request::parse(b"PROPOSE"), Err(RequestError::UnknownVerb));
        assert_eq!(Request::parse(b"status"), Err(RequestError::UnknownVerb));
    }

    #[test]
    fn replies_are_sealed_compact_json() {
        let mut buf = [0u8; 256];
        let reply: Reply<&str, ()> = Reply::Stopped {
            run: 1,
            step: 2,
            status: "final",
        };
        let n = write_frame(&mut buf, &reply).unwrap();
        let text = core::str::from_utf8(&buf[..n]).unwrap();
        assert!(
            text.starts_with("{\"type\":\"stopped\",\"run\":1,\"step\":2,\"status\":\"final\"}*"),
            "{text}"
        );
        assert!(text.ends_with('\n'));
        assert_eq!(
            verify(&buf[..n - 1]).map(|p| p.len()),
            Ok(n - 1 - CHECKSUM_LEN)
        );
        let n = write_request(&mut buf, "PROPOSE", Some(b"{}")).unwrap();
        assert_eq!(verify(&buf[..n - 1]), Ok(&b"PROPOSE {}"[..]));
    }
}
