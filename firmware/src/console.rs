//! Operator console (UART1): one command per line, one reply line each.
//!
//! | command | reply |
//! | --- | --- |
//! | `reset` | `ok` (starts a new run: [`FrameHandler::reset`]) |
//! | `leds` | `leds=<n>`: the LED register read back from hardware, decimal |
//! | `buttons` | `buttons=<n>`: the button register, decimal |
//! | `uptime` | `uptime_ms=<n>` |
//! | `help` | the list of commands |
//! | `panic` | none: panics (bring-up hook: QEMU exits with status 101) |
//!
//! Blank lines are ignored; anything else answers `error: unknown command`.
//! Leading/trailing ASCII whitespace (also `\r`) is ignored.
#![forbid(unsafe_code)]

use embedded_io::Write;

use crate::board;
use crate::line::LineEvent;
use crate::service::{write_decimal, FrameHandler};

/// Longest console line accepted, `\n` excluded.
pub const CONSOLE_LINE_MAX: usize = 128;

/// A parsed console command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum Command {
    /// Start a new run.
    Reset,
    /// Report the LED register.
    Leds,
    /// Report the button register.
    Buttons,
    /// Report milliseconds since boot.
    Uptime,
    /// List commands.
    Help,
    /// Panic on purpose (tests the fail-safe exit path).
    Panic,
    /// Not a command.
    Unknown,
}

/// Parses one console line; `None` for a blank line.
pub fn parse(line: &[u8]) -> Option<Command> {
    let word = line.trim_ascii();
    Some(match word {
        b"" => return None,
        b"reset" => Command::Reset,
        b"leds" => Command::Leds,
        b"buttons" => Command::Buttons,
        b"uptime" => Command::Uptime,
        b"help" => Command::Help,
        b"panic" => Command::Panic,
        _ => Command::Unknown,
    })
}

/// Answers one console line event on `out`.
pub fn handle<H: FrameHandler, W: Write>(
    event: LineEvent<'_>,
    handler: &mut H,
    out: &mut W,
) -> Result<(), W::Error> {
    let command = match event {
        LineEvent::Line(line) => match parse(line) {
            Some(command) => command,
            None => return Ok(()),
        },
        LineEvent::TooLong => return out.write_all(b"error: line too long\n"),
        LineEvent::Corrupt => return out.write_all(b"error: line corrupt\n"),
    };
    defmt::info!("console: {}", command);
    match command {
        Command::Reset => {
            handler.reset(board::now_ms());
            out.write_all(b"ok\n")
        }
        Command::Leds => reply_number(out, b"leds=", u64::from(board::read_leds())),
        Command::Buttons => reply_number(out, b"buttons=", u64::from(board::read_buttons())),
        Command::Uptime => reply_number(out, b"uptime_ms=", board::now_ms()),
        Command::Help => out.write_all(b"commands: reset leds buttons uptime help panic\n"),
        Command::Panic => panic!("panic requested on the operator console"),
        Command::Unknown => out.write_all(b"error: unknown command\n"),
    }
}

fn reply_number<W: Write>(out: &mut W, key: &[u8], value: u64) -> Result<(), W::Error> {
    out.write_all(key)?;
    write_decimal(out, value)?;
    out.write_all(b"\n")
}
