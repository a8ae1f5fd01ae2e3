//! Byte-at-a-time line framing into a fixed buffer (no allocation).
#![forbid(unsafe_code)]

/// What a byte fed to [`LineBuffer::push`] completed.
#[derive(Debug, PartialEq, Eq)]
pub enum LineEvent<'a> {
    /// A whole line: the bytes before `\n` (the `\n` itself is not included).
    Line(&'a [u8]),
    /// A line longer than the buffer ended; its bytes were discarded.
    TooLong,
    /// A line ended that lost bytes on the wire (UART overrun); discarded.
    Corrupt,
}

/// Collects bytes up to `\n` in a buffer of `N` bytes.
///
/// A line of more than `N` bytes (not counting `\n`) is dropped byte by byte
/// until its `\n` and then reported once as [`LineEvent::TooLong`], so the
/// reader stays in step with the sender's lines whatever their length.
pub struct LineBuffer<const N: usize> {
    buf: [u8; N],
    len: usize,
    state: State,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Filling,
    Overflowed,
    Corrupt,
}

impl<const N: usize> LineBuffer<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
            state: State::Filling,
        }
    }

    /// Feeds one byte; returns an event when it was the `\n` ending a line.
    pub fn push(&mut self, byte: u8) -> Option<LineEvent<'_>> {
        if byte == b'\n' {
            let len = core::mem::replace(&mut self.len, 0);
            let state = core::mem::replace(&mut self.state, State::Filling);
            return Some(match state {
                State::Filling => LineEvent::Line(self.buf.get(..len).unwrap_or_default()),
                State::Overflowed => LineEvent::TooLong,
                State::Corrupt => LineEvent::Corrupt,
            });
        }
        if self.state == State::Filling {
            match self.buf.get_mut(self.len) {
                Some(slot) => {
                    *slot = byte;
                    self.len += 1;
                }
                None => self.state = State::Overflowed,
            }
        }
        None
    }

    /// Marks the line being received as damaged (bytes were lost); it is
    /// reported as [`LineEvent::Corrupt`] at its `\n`.
    pub fn poison(&mut self) {
        self.state = State::Corrupt;
    }
}

impl<const N: usize> Default for LineBuffer<N> {
    fn default() -> Self {
        Self::new()
    }
}
