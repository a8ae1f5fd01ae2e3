//! Board support. Everything board-specific (addresses, clocks, interrupt
//! numbers, the `unsafe` register access) lives in one file per board; the
//! rest of the firmware uses only what this module re-exports.

//!
//! One board per build, chosen by a cargo feature (`boards.txt` lists them
//! with their targets; `build.rs` checks the pair). `mps2-an386` and
//! `mps2-an385` share `mps2_an386.rs`: QEMU models the same peripherals on
//! both; `mps2-an505` (Cortex-M33) has the same blocks (CMSDK UARTs, FPGA
//! I/O) at other addresses, a 20 MHz clock and other interrupt numbers,
//! which the same file selects (`layout`).

#[cfg(not(any(feature = "mps2-an386", feature = "mps2-an385", feature = "mps2-an505")))]
compile_error!("no board selected: --features mps2-an386 (the default), mps2-an385 or mps2-an505");
#[cfg(any(
    all(feature = "mps2-an386", feature = "mps2-an385"),
    all(feature = "mps2-an386", feature = "mps2-an505"),
    all(feature = "mps2-an385", feature = "mps2-an505")
))]
compile_error!("two boards selected: build with --no-default-features --features BOARD");

pub mod mps2_an386;

// The whole board API is re-exported, including parts phase 1 does not use yet.
#[allow(unused_imports)]
pub use mps2_an386::{
    all_leds_off, clock_ticks, exit, now_ms, read_buttons, read_leds, stack_high_water,
    wait_for_interrupt_unless, Board, Button, Led, Uart, UartError, BUTTON_COUNT, EXIT_FAULT,
    EXIT_PANIC, LED_COUNT, NAME, SYSCLK_HZ, UART_BAUD,
};
