//! Every bound and capacity of the device gate, in one place.
//!
//! The budgets are the contract's reference defaults (`SPEC A2`); the
//! operator console may choose others when it starts a run (`start D T`),
//! the agent link never can. The time budget and the approval timeout are the
//! console's to change too (`deadline MS`, `timeout MS`).
#![forbid(unsafe_code)]

use budgetgate_core::device::Timing;
use budgetgate_core::limits::{
    DEFAULT_MAX_DECISIONS, DEFAULT_MAX_RUN_MILLIS, DEFAULT_MAX_TOOL_CALLS, MAX_TOOLS,
};
use budgetgate_core::link;
use budgetgate_core::RunLimits;

/// Most decision rounds of a run started with a bare `start` (`SPEC A2`: 8).
pub const MAX_DECISIONS: u32 = DEFAULT_MAX_DECISIONS;

/// Most tool attempts of a run started with a bare `start` (`SPEC A2`: 4).
pub const MAX_TOOL_CALLS: u32 = DEFAULT_MAX_TOOL_CALLS;

/// Wall time a run may take, from the console's `start`, in milliseconds
/// (`SPEC C`: 120 s). Checked before each decision; once passed, the next
/// proposal is answered `stopped`/`time-budget`.
pub const RUN_TIME_BUDGET_MS: u32 = DEFAULT_MAX_RUN_MILLIS as u32;

/// How long the operator has to answer an approval prompt, in milliseconds.
/// No answer in time is a refusal (`approval-denied`).
pub const APPROVAL_TIMEOUT_MS: u32 = 30_000;

/// The budgets of a bare `start`: [`MAX_DECISIONS`], [`MAX_TOOL_CALLS`].
pub const DEFAULT_LIMITS: RunLimits = match RunLimits::new(MAX_DECISIONS, MAX_TOOL_CALLS) {
    Ok(limits) => limits,
    Err(_) => RunLimits::DEFAULT,
};

/// The dead-man switch: with an actuator out of its safe state, this long
/// without a valid frame on the agent link drives every actuator safe and
/// halts the run (`Timing::dead_man_ms`; a host with nothing to propose
/// sends `STATUS`). Not counted while a call waits for the operator.
pub const DEAD_MAN_MS: u32 = 30_000;

/// The valve's duty window (issue 15): open at most [`VALVE_MAX_OPEN_MS`]
/// in any [`VALVE_DUTY_WINDOW_MS`]: 30 s in any 10 min. A `HassValveOpen`
/// beyond it is refused (`duty-limit`), and the gate closes the valve the
/// instant its window is spent (`DeviceGate::set_duty_window`).
pub const VALVE_DUTY_WINDOW_MS: u32 = 600_000;

/// The most the valve may be open in its duty window, ms.
pub const VALVE_MAX_OPEN_MS: u32 = 30_000;

/// How long an approval key must stay down (after it was seen up) to count
/// as a press: switch bounce lasts a few milliseconds.
#[cfg(feature = "keys")]
pub const KEY_DEBOUNCE_MS: u32 = 20;

/// The gate's clocks at boot: [`RUN_TIME_BUDGET_MS`], [`APPROVAL_TIMEOUT_MS`],
/// [`DEAD_MAN_MS`].
pub const TIMING: Timing = Timing {
    time_budget_ms: RUN_TIME_BUDGET_MS,
    approval_timeout_ms: APPROVAL_TIMEOUT_MS,
    dead_man_ms: DEAD_MAN_MS,
};

/// Largest value the console accepts for `timeout` and `deadline`, in
/// milliseconds (one hour).
pub const MAX_CONSOLE_MILLIS: u32 = 3_600_000;

/// Most bytes of one agent-link frame, checksum included (the core's codec).
pub const FRAME_MAX: usize = link::FRAME_MAX;

/// Most tools the device registers (`SPEC A2`: 8).
pub const TOOL_CAPACITY: usize = MAX_TOOLS;

/// Longest console line accepted, `\n` excluded.
pub const CONSOLE_LINE_MAX: usize = 128;

/// Entries of the agent link's receive queue (`rx`): 16 bits each (a byte
/// or a lost-bytes marker), `AGENT_RX_QUEUE - 1` in use at most, so 2 KiB of
/// RAM holding 1023 bytes: a frame of up to about 1000 bytes, or several
/// short ones, can wait behind an approval; more is an overrun.
pub const AGENT_RX_QUEUE: usize = 1024;

/// Bytes taken from one UART before the main loop looks at the other one.
pub const BURST: usize = 64;

const _: () = assert!(MAX_DECISIONS >= 1 && MAX_TOOL_CALLS <= 16);
const _: () = assert!(APPROVAL_TIMEOUT_MS <= MAX_CONSOLE_MILLIS);
const _: () = assert!(RUN_TIME_BUDGET_MS <= MAX_CONSOLE_MILLIS);
const _: () = assert!(VALVE_MAX_OPEN_MS <= VALVE_DUTY_WINDOW_MS && VALVE_DUTY_WINDOW_MS > 0);
