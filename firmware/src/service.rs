//! What answers the agent's frames. Phase 1: [`Echo`]. The gate from
//! `budgetgate-core` replaces it by implementing [`FrameHandler`].
#![forbid(unsafe_code)]

use embedded_hal::digital::StatefulOutputPin;
use embedded_io::Write;

/// Why a frame could not be delivered to the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum FrameError {
    /// The line exceeded [`crate::FRAME_MAX`] bytes; it was discarded.
    TooLong,
    /// Bytes of the line were lost on the wire; it was discarded.
    Corrupt,
}

impl FrameError {
    /// The reply line (without `\n`) sent to the agent for this error.
    pub const fn reply(self) -> &'static str {
        match self {
            Self::TooLong => r#"{"error":"frame-too-long"}"#,
            Self::Corrupt => r#"{"error":"frame-corrupt"}"#,
        }
    }
}

/// The main loop's contract with whatever answers agent frames.
///
/// For every `\n`-terminated line the main loop calls exactly one of
/// `on_frame` / `on_bad_frame`; each must write exactly one reply line,
/// `\n`-terminated, to `reply` (the agent UART), which keeps the agent's
/// requests and the replies in step.
pub trait FrameHandler {
    /// One complete frame: the bytes of the line, `\n` excluded (a `\r`
    /// before it is kept). At most [`crate::FRAME_MAX`] bytes, any values.
    fn on_frame<W: Write>(
        &mut self,
        frame: &[u8],
        now_ms: u64,
        reply: &mut W,
    ) -> Result<(), W::Error>;

    /// A line that was discarded (see [`FrameError`]).
    fn on_bad_frame<W: Write>(&mut self, error: FrameError, reply: &mut W) -> Result<(), W::Error> {
        reply.write_all(error.reply().as_bytes())?;
        reply.write_all(b"\n")
    }

    /// The operator started a new run (console `reset`).
    fn reset(&mut self, now_ms: u64);
}

/// Phase-1 handler: replies `{"echo":<len>}` and toggles an actuator per frame.
pub struct Echo<P> {
    actuator: P,
    frames: u32,
}

impl<P: StatefulOutputPin> Echo<P> {
    /// An echo handler toggling `actuator` (driven low now).
    pub fn new(mut actuator: P) -> Self {
        let _ = actuator.set_low();
        Self {
            actuator,
            frames: 0,
        }
    }
}

impl<P: StatefulOutputPin> FrameHandler for Echo<P> {
    fn on_frame<W: Write>(
        &mut self,
        frame: &[u8],
        _now_ms: u64,
        reply: &mut W,
    ) -> Result<(), W::Error> {
        self.frames = self.frames.wrapping_add(1);
        let _ = self.actuator.toggle();
        defmt::debug!("frame {=u32}: {=usize} bytes", self.frames, frame.len());
        reply.write_all(br#"{"echo":"#)?;
        write_decimal(reply, frame.len() as u64)?;
        reply.write_all(b"}\n")
    }

    fn reset(&mut self, _now_ms: u64) {
        self.frames = 0;
        let _ = self.actuator.set_low();
    }
}

/// Writes `n` in decimal ASCII (no `core::fmt`, cannot fail on its own).
pub fn write_decimal<W: Write>(out: &mut W, mut n: u64) -> Result<(), W::Error> {
    let mut digits = [0u8; 20]; // u64::MAX has 20 digits
    let mut start = digits.len();
    loop {
        start -= 1;
        if let Some(d) = digits.get_mut(start) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || start == 0 {
            break;
        }
    }
    out.write_all(digits.get(start..).unwrap_or_default())
}
