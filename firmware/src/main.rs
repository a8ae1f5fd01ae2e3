//! budgetgate firmware, phase 1: boots on QEMU `mps2-an386` (Cortex-M4) and
//! runs a line-based service on two UARTs.
//!
//! * UART0, the agent link: each `\n`-terminated line of at most
//!   [`FRAME_MAX`] bytes is answered with one line by a
//!   [`service::FrameHandler`] (phase 1: [`service::Echo`], `{"echo":<len>}`
//!   and LED0 toggled); a longer line is discarded up to its `\n` and answered
//!   `{"error":"frame-too-long"}`.
//! * UART1, the operator console: a banner at boot, then commands
//!   (see [`console`]).
//! * Log: `defmt` over semihosting; panics and faults drive all LEDs low and
//!   exit QEMU with status [`board::EXIT_PANIC`] / [`board::EXIT_FAULT`].
//!
//! See `docs/FIRMWARE-BRINGUP.md` for building, running and decoding the log.
#![no_std]
#![no_main]
// `unsafe_code` is `deny` for the crate (Cargo.toml) and allowed only in
// `board/mps2_an386.rs`; every other module says `#![forbid(unsafe_code)]`.

mod board;
mod console;
mod line;
mod service;

use core::sync::atomic::{AtomicBool, Ordering};

use cortex_m_rt::entry;
use defmt_semihosting as _; // the global defmt logger
use embedded_io::Write;

use crate::board::{Board, Uart};
use crate::line::{LineBuffer, LineEvent};
use crate::service::{FrameError, FrameHandler};

/// Largest agent frame in bytes (the line without its `\n`).
pub const FRAME_MAX: usize = 1024;

/// Bytes taken from one UART before the loop looks at the other one.
const BURST: usize = 64;

#[entry]
fn main() -> ! {
    let Some(board) = Board::take() else {
        defmt::error!("board already taken");
        board::exit(board::EXIT_FAULT)
    };
    let Board {
        mut agent,
        mut console,
        led0,
        ..
    } = board;
    defmt::info!("budgetgate-firmware {=str} up", env!("CARGO_PKG_VERSION"));

    let _ = banner(&mut console);

    let mut handler = service::Echo::new(led0);
    let mut agent_rx: LineBuffer<FRAME_MAX> = LineBuffer::new();
    let mut console_rx: LineBuffer<{ console::CONSOLE_LINE_MAX }> = LineBuffer::new();

    loop {
        pump_agent(&mut agent, &mut agent_rx, &mut handler);
        pump_console(&mut console, &mut console_rx, &mut handler);
        board::wait_for_interrupt_unless(|| agent.rx_ready() || console.rx_ready());
    }
}

fn banner(console: &mut Uart) -> Result<(), board::UartError> {
    console.write_all(b"budgetgate-firmware ")?;
    console.write_all(env!("CARGO_PKG_VERSION").as_bytes())?;
    console.write_all(b" phase1 board=mps2-an386 frame_max=")?;
    service::write_decimal(console, FRAME_MAX as u64)?;
    console.write_all(b"\n")
}

/// Moves up to [`BURST`] bytes from the agent UART into `rx`, answering every
/// completed line through `handler`.
fn pump_agent<H: FrameHandler>(uart: &mut Uart, rx: &mut LineBuffer<FRAME_MAX>, handler: &mut H) {
    for _ in 0..BURST {
        let byte = match uart.try_read_byte() {
            Ok(Some(byte)) => byte,
            Ok(None) => return,
            Err(e) => {
                defmt::warn!("agent link: {}", e);
                rx.poison();
                continue;
            }
        };
        let result = match rx.push(byte) {
            None => continue,
            Some(LineEvent::Line(frame)) => handler.on_frame(frame, board::now_ms(), uart),
            Some(LineEvent::TooLong) => {
                defmt::warn!("agent frame longer than {=usize} bytes dropped", FRAME_MAX);
                handler.on_bad_frame(FrameError::TooLong, uart)
            }
            Some(LineEvent::Corrupt) => handler.on_bad_frame(FrameError::Corrupt, uart),
        };
        if let Err(e) = result {
            defmt::warn!("agent reply: {}", e);
        }
    }
}

/// Moves up to [`BURST`] bytes from the console UART into `rx`, answering
/// every completed command line.
fn pump_console<H: FrameHandler>(
    uart: &mut Uart,
    rx: &mut LineBuffer<{ console::CONSOLE_LINE_MAX }>,
    handler: &mut H,
) {
    for _ in 0..BURST {
        let byte = match uart.try_read_byte() {
            Ok(Some(byte)) => byte,
            Ok(None) => return,
            Err(e) => {
                defmt::warn!("console: {}", e);
                rx.poison();
                continue;
            }
        };
        if let Some(event) = rx.push(byte) {
            if let Err(e) = console::handle(event, handler, uart) {
                defmt::warn!("console reply: {}", e);
            }
        }
    }
}

/// Fail-safe stop: actuators off, the message to the defmt log, QEMU exits
/// with [`board::EXIT_PANIC`].
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    static PANICKING: AtomicBool = AtomicBool::new(false);
    board::all_leds_off();
    // A panic while logging the first one (e.g. inside the logger) must not
    // recurse: the second one exits without logging.
    if !PANICKING.swap(true, Ordering::SeqCst) {
        defmt::error!("panic: {}", defmt::Display2Format(info));
    }
    board::exit(board::EXIT_PANIC)
}
