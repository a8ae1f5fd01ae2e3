//! Board support. Everything board-specific (addresses, clocks, interrupt
//! numbers, the `unsafe` register access) lives in one file per board; the
//! rest of the firmware uses only what this module re-exports.

pub mod mps2_an386;

// The whole board API is re-exported, including parts phase 1 does not use yet.
#[allow(unused_imports)]
pub use mps2_an386::{
    all_leds_off, clock_ticks, exit, now_ms, read_buttons, read_leds, stack_high_water,
    wait_for_interrupt_unless, Board, Button, Led, Uart, UartError, BUTTON_COUNT, EXIT_FAULT,
    EXIT_PANIC, LED_COUNT, SYSCLK_HZ, UART_BAUD,
};
