//! A [`Window`] as bytes, for a front-end that keeps a session's window in a
//! store between processes (the Claude Code hook, the MCP gateway on
//! SQLite or Redis): versioned, checksummed, every field checked on the way
//! back in, so a torn or edited record is refused, never half read.
//!
//! Layout (little-endian): version (1 byte), the number of calls (1), then
//! for each call its fingerprint (16), its tool's name (a length byte and
//! the name), its outcome (0: none yet, 1: a result, 2: an error; then the
//! digest, 8 bytes, unless 0), and CRC-32 (ISO-HDLC) of all of that last.

use core::fmt;

use super::{Outcome, Step, Window};
use crate::bytes::{Malformed, CRC};
use crate::limits::MAX_TOOL_NAME_LEN;
use crate::tools::ToolName;
use crate::turn::CallFingerprint;

/// The record's version.
pub const WINDOW_RECORD_VERSION: u8 = 1;

/// Why bytes are not a window's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowRecordError {
    /// Too short for its fields, or longer than they are: the length it has
    /// (reading) or the buffer's end that a write would pass (writing).
    Length(usize),
    /// Another version.
    Version(u8),
    /// The checksum does not match (torn or edited).
    Checksum,
    /// A field out of its range.
    Field(&'static str),
}

impl fmt::Display for WindowRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "a loop window record does not end at byte {n}"),
            Self::Version(v) => write!(
                f,
                "loop window record version {v}; this build reads version {WINDOW_RECORD_VERSION}"
            ),
            Self::Checksum => f.write_str("loop window record checksum mismatch (torn or edited)"),
            Self::Field(what) => write!(f, "loop window record field out of range: {what}"),
        }
    }
}

impl core::error::Error for WindowRecordError {}

impl Malformed for WindowRecordError {
    fn length(len: usize) -> Self {
        Self::Length(len)
    }
    fn field(what: &'static str) -> Self {
        Self::Field(what)
    }
}

type Writer<'a> = crate::bytes::Writer<'a, WindowRecordError>;
type Cursor<'a> = crate::bytes::Cursor<'a, WindowRecordError>;

/// The most bytes one call takes in the record.
const STEP_MAX: usize = 16 + 1 + MAX_TOOL_NAME_LEN + 1 + 8;

impl<const N: usize> Window<N> {
    /// The most bytes [`Self::write_record`] writes.
    pub const RECORD_MAX: usize = 2 + N * STEP_MAX + 4;

    /// Writes the window into `buf` and returns how many bytes it took
    /// (at most [`Self::RECORD_MAX`]); `Length` when `buf` is too short.
    pub fn write_record(&self, buf: &mut [u8]) -> Result<usize, WindowRecordError> {
        let count =
            u8::try_from(self.steps.len()).map_err(|_| WindowRecordError::Field("calls"))?;
        let mut w = Writer::new(buf);
        w.put(&[WINDOW_RECORD_VERSION, count])?;
        for step in &self.steps {
            w.put(&step.call.as_u128().to_le_bytes())?;
            w.text(step.name.as_str())?;
            match step.outcome {
                None => w.put(&[0])?,
                Some(o) => {
                    w.put(&[if o.error { 2 } else { 1 }])?;
                    w.put(&o.digest.to_le_bytes())?;
                }
            }
        }
        let body = w.at;
        let crc = CRC.checksum(w.buf.get(..body).unwrap_or_default());
        w.put(&crc.to_le_bytes())?;
        Ok(w.at)
    }

    /// Reads a window [`Self::write_record`] wrote; refuses another version,
    /// a bad checksum, more calls than `N`, a bad name or outcome, and bytes
    /// after the end.
    pub fn read_record(bytes: &[u8]) -> Result<Self, WindowRecordError> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or(WindowRecordError::Length(bytes.len()))?;
        let (body, crc) = bytes.split_at(body_len);
        let mut c = Cursor::new(body, 0);
        let version = c.u8()?;
        if version != WINDOW_RECORD_VERSION {
            return Err(WindowRecordError::Version(version));
        }
        let mut stored = [0u8; 4];
        stored.copy_from_slice(crc);
        if CRC.checksum(body) != u32::from_le_bytes(stored) {
            return Err(WindowRecordError::Checksum);
        }
        let count = c.u8()?;
        let mut window = Self::new();
        for _ in 0..count {
            let mut call = [0u8; 16];
            call.copy_from_slice(c.take(16)?);
            let len = usize::from(c.u8()?);
            let name = core::str::from_utf8(c.take(len)?)
                .ok()
                .and_then(|n| ToolName::new(n).ok())
                .ok_or(WindowRecordError::Field("tool name"))?;
            let outcome = match c.u8()? {
                0 => None,
                tag @ (1 | 2) => Some(Outcome {
                    digest: c.u64()?,
                    error: tag == 2,
                }),
                _ => return Err(WindowRecordError::Field("outcome")),
            };
            window
                .steps
                .push(Step {
                    call: CallFingerprint::from_u128(u128::from_le_bytes(call)),
                    name,
                    outcome,
                })
                .map_err(|_| WindowRecordError::Field("calls"))?;
        }
        if !c.done() {
            return Err(WindowRecordError::Length(bytes.len()));
        }
        Ok(window)
    }
}
