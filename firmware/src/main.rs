//! budgetgate firmware: the gate between an AI agent and the actuators it
//! may command, on QEMU `mps2-an386` (Cortex-M4F, the default), `mps2-an385`
//! (Cortex-M3) or `mps2-an505` (Cortex-M33): one board per build, a cargo
//! feature (`boards.txt`). With the `flash` feature (default; any board) the
//! run and an audit log are kept in flash (`persist.rs`).
//!
//! * UART0, the agent link: sealed frames (`docs/PROTOCOL.md`), split by the
//!   core's [`FrameDecoder`] and answered by the core's device gate
//!   ([`Gate`], `budgetgate_core::device::DeviceGate`): one bounded run of
//!   the same `no_std` core as the desktop (`SPEC A2`), with approval and a
//!   time budget, over the device's tools and actuators ([`tools`]: LED0
//!   lamp, LED1 valve). This crate keeps only the board, the tools and the
//!   main loop.
//! * UART1, the operator console: the trusted side. It starts runs, answers
//!   approval prompts and reads the actuators back (see [`console`]).
//! * Log: `defmt` over semihosting, one info line per decision; panics and
//!   faults drive all actuators low and exit QEMU with status
//!   [`board::EXIT_PANIC`] / [`board::EXIT_FAULT`].
//!
//! See `docs/FIRMWARE.md` for building, running, sizes and the log.
//!
//! `SPEC X` in these docs names section X of docs/CONTRACT.md.
#![no_std]
#![no_main]
// `unsafe_code` is `deny` for the crate (Cargo.toml) and allowed only in
// `board/mps2_an386.rs`; every other module says `#![forbid(unsafe_code)]`.

mod board;
mod config;
mod console;
mod line;
// issue 15: the durable run and the audit log (flash).
#[cfg(feature = "flash")]
mod persist;
mod rx;
mod tools;

use core::cell::Cell;
use core::mem::MaybeUninit;

#[cfg(feature = "keys")]
use budgetgate_core::device::ApprovalKeys;
use budgetgate_core::device::DeviceGate;
use budgetgate_core::{ToolSet, ToolSetError};
use cortex_m_rt::entry;
use critical_section::Mutex;
use defmt_semihosting as _; // the global defmt logger
#[cfg(feature = "keys")]
use embedded_hal::digital::InputPin;
use heapless::spsc::Consumer;

use crate::board::{Board, Uart};
#[cfg(feature = "keys")]
use crate::config::KEY_DEBOUNCE_MS;
use crate::config::{BURST, CONSOLE_LINE_MAX, TIMING, TOOL_CAPACITY};
use crate::config::{VALVE_DUTY_WINDOW_MS, VALVE_MAX_OPEN_MS};
use crate::line::LineBuffer;
use crate::rx::{LinkDecoder, RxQueue};
use crate::tools::{Home, SPECS};

/// The gate as this board runs it: the core's device gate over the home
/// tools and their actuators.
pub type Gate = DeviceGate<Home, TOOL_CAPACITY>;

/// Clock ticks of the last agent frame (console `ticks`).
#[derive(Debug, Default)]
pub struct Meter {
    /// Line end to the last reply byte (a frame that waited for approval
    /// includes the wait).
    pub last_frame_ticks: u64,
    /// Line end to the gate's verdict on its proposal: checksum, request,
    /// validation, the run's decision and the argument check; what the
    /// gate adds before an actuator may move. 0 if the frame was not a
    /// proposal.
    pub verdict_ticks: u64,
}

#[entry]
fn main() -> ! {
    // cortex-m-rt turns these into `&'static mut` (taken once, here), so the
    // state is in `.bss`, where `size` counts it. The gate is built at run
    // time (it owns the board's LEDs) straight into its static: no copy of
    // its 6 KiB on the stack, no initializer image in flash.
    static mut GATE: MaybeUninit<Gate> = MaybeUninit::uninit();
    static mut METER: Meter = Meter {
        last_frame_ticks: 0,
        verdict_ticks: 0,
    };
    static mut AGENT_QUEUE: RxQueue = RxQueue::new();
    static mut AGENT_RX: LinkDecoder = LinkDecoder::new();
    static mut CONSOLE_RX: LineBuffer<CONSOLE_LINE_MAX> = LineBuffer::new();
    // issue 15: the flash file and the journal over it (persist.rs).
    #[cfg(feature = "flash")]
    static mut FLASH_FILE: MaybeUninit<semihosting::fs::File> = MaybeUninit::uninit();
    #[cfg(feature = "flash")]
    static mut JOURNAL: MaybeUninit<persist::Journal> = MaybeUninit::uninit();

    // The receive interrupt's queue, before the board enables the interrupt.
    let mut agent_queue = rx::install(AGENT_QUEUE);

    let Some(board) = Board::take() else {
        defmt::error!("board already taken");
        board::exit(board::EXIT_FAULT)
    };
    let Board {
        mut agent,
        mut console,
        led0,
        led1,
        #[cfg(feature = "keys")]
        mut button0,
        #[cfg(feature = "keys")]
        mut button1,
        ..
    } = board;
    // Physical approval: USERPB0 approves, USERPB1 denies (debounced).
    #[cfg(feature = "keys")]
    let mut keys = ApprovalKeys::new(KEY_DEBOUNCE_MS);
    defmt::info!("budgetgate-firmware {=str} up", env!("CARGO_PKG_VERSION"));

    let gate = match install(GATE, Home::new(led0, led1)) {
        Ok(gate) => gate,
        Err(e) => {
            defmt::error!("tool registry: {}", e);
            board::exit(board::EXIT_FAULT)
        }
    };
    let _ = console::banner(&mut console);
    // issue 15: resume the stored run (after the banner, before any frame).
    #[cfg(feature = "flash")]
    let _ = persist::boot((FLASH_FILE, JOURNAL), gate, &mut console);

    loop {
        if !gate.awaiting_approval() {
            pump_agent(
                &mut agent_queue,
                &mut agent,
                &mut console,
                AGENT_RX,
                gate,
                METER,
            );
        }
        pump_console(&mut console, &mut agent, CONSOLE_RX, gate, METER);
        #[cfg(feature = "keys")]
        if let Some(answer) = keys.sample(
            button0.is_high().unwrap_or(false),
            button1.is_high().unwrap_or(false),
            board::now_ms(),
        ) {
            // Ignored (false) when no call waits for an answer.
            if let Err(e) = gate.on_answer(answer, board::now_ms(), &mut agent, &mut console) {
                defmt::warn!("approval key reply: {}", e);
            }
        }
        if let Err(e) = gate.poll(board::now_ms(), &mut agent, &mut console) {
            defmt::warn!("approval timeout reply: {}", e);
        }
        let read_agent = !gate.awaiting_approval();
        board::wait_for_interrupt_unless(|| {
            (read_agent && agent_queue.ready()) || console.rx_ready()
        });
    }
}

/// Builds the tool table and the gate in its static, with the valve's duty
/// window (before `persist::boot` resumes its history); fails only if a tool
/// name in [`SPECS`] is invalid or repeated. Not inlined: the table (and
/// any temporary) then lives in this short-lived frame, not in `main`'s,
/// which lasts forever.
#[inline(never)]
fn install(
    slot: &'static mut MaybeUninit<Gate>,
    home: Home,
) -> Result<&'static mut Gate, ToolSetError> {
    let tools: ToolSet<TOOL_CAPACITY> = ToolSet::from_specs(&SPECS)?;
    let gate = slot.write(Gate::new(home, tools, TIMING));
    // In range by the config's own checks; a refusal would leave the valve
    // without a window, so it is logged.
    if gate
        .set_duty_window(
            tools::VALVE_ACTUATOR,
            VALVE_DUTY_WINDOW_MS,
            VALVE_MAX_OPEN_MS,
        )
        .is_err()
    {
        defmt::error!("the valve's duty window was refused");
    }
    Ok(gate)
}

/// Moves up to [`BURST`] entries from the agent link's receive queue (filled
/// by the UART0 interrupt, [`rx`]) into the frame decoder, handing every
/// completed frame to the gate. Stops as soon as a call waits for approval:
/// later frames stay queued until it is answered, then are answered in order.
fn pump_agent(
    queue: &mut Consumer<'static, u16>,
    agent: &mut Uart,
    console: &mut Uart,
    rx: &mut LinkDecoder,
    gate: &mut Gate,
    meter: &mut Meter,
) {
    for _ in 0..BURST {
        if gate.awaiting_approval() {
            return;
        }
        let Some(entry) = queue.dequeue() else {
            return;
        };
        // A line end completes a frame: from here to the last reply byte
        // (checksum, parse, decision, tool, reply) is one gated action.
        let start = board::clock_ticks();
        if let Some(frame) = rx.push(entry) {
            gate.actuators_mut().clear_verdict();
            if let Err(e) = gate.on_frame(frame, board::now_ms(), agent, console) {
                defmt::warn!("agent reply: {}", e);
            }
            meter.last_frame_ticks = board::clock_ticks().saturating_sub(start);
            meter.verdict_ticks = gate
                .actuators()
                .verdict_at()
                .map_or(0, |at| at.saturating_sub(start));
        }
    }
}

/// Moves up to [`BURST`] bytes from the console UART into `rx`, answering
/// every completed command line.
fn pump_console(
    console: &mut Uart,
    agent: &mut Uart,
    rx: &mut LineBuffer<CONSOLE_LINE_MAX>,
    gate: &mut Gate,
    meter: &Meter,
) {
    for _ in 0..BURST {
        let byte = match console.try_read_byte() {
            Ok(Some(byte)) => byte,
            Ok(None) => return,
            Err(e) => {
                defmt::warn!("console: {}", e);
                rx.poison();
                continue;
            }
        };
        if let Some(event) = rx.push(byte) {
            if let Err(e) = console::handle(event, gate, meter, agent, console) {
                defmt::warn!("console reply: {}", e);
            }
        }
    }
}

/// Fail-safe stop: actuators off, the message to the defmt log, QEMU exits
/// with [`board::EXIT_PANIC`].
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    // A flag in a critical section, not `AtomicBool::swap`: a Cortex-M0
    // (`thumbv6m`) has no atomic read-modify-write.
    static PANICKING: Mutex<Cell<bool>> = Mutex::new(Cell::new(false));
    board::all_leds_off();
    // A panic while logging the first one (e.g. inside the logger) must not
    // recurse: the second one exits without logging.
    if !critical_section::with(|cs| PANICKING.borrow(cs).replace(true)) {
        // The message when it is a literal (an overflow, `panic!("…")`), and
        // where: no `core::fmt` machinery in the image for a path that
        // should never run (about 1.5 KiB of flash).
        let message = info.message().as_str().unwrap_or("(formatted message)");
        match info.location() {
            Some(at) => defmt::error!(
                "panic: {=str} at {=str}:{=u32}",
                message,
                at.file(),
                at.line()
            ),
            None => defmt::error!("panic: {=str}", message),
        }
    }
    board::exit(board::EXIT_PANIC)
}
