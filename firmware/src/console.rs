//! Operator console (UART1): the trusted side. One command per line, one
//! reply line each; approval prompts and their outcomes are the only lines
//! the device writes unasked.
//!
//! | command | reply |
//! | --- | --- |
//! | `start` | `started run N: max_decisions=8 max_tool_calls=4 time_budget_ms=… approval_timeout_ms=… tools=…` (a new run with the config budgets; actuators to the safe state) |
//! | `start D T` | the same with `max_decisions` D (1..=32) and `max_tool_calls` T (0..=16) |
//! | `status` | `run N STATE decisions=d/D tool_attempts=t/T time_left_ms=… approval=ID|none rx_overruns=O rx_lost=L`, or `idle: no run (type start)` (O: times the agent link lost bytes since boot, L: bytes lost; `crate::rx`) |
//! | `y`, `yes`, `approve` / `n`, `no`, `deny` | `approved ID` / `denied ID` (answers the pending prompt) |
//! | `timeout MS` | `ok approval_timeout_ms=MS` (1..=3600000; otherwise `error: timeout MS needs one whole number of milliseconds, 1..=3600000`) |
//! | `duty W M` | `ok duty_window_ms=W duty_max_on_ms=M`: the valve may be open at most M ms in any W ms (1..=3600000 each, M at most W), from now on and for later runs; the on-time already counted is kept (never given back), so a longer window than the valve's is refused once it has been open (`error: …`). Refused while a run is running (`error: stop the run first …`); at a reset the config's window comes back |
//! | `deadline MS` | `ok time_budget_ms=MS` (current run, from its start, and later runs; same range; a run already stopped on time stays stopped) |
//! | `leds` | `leds=<n>`: the LED register read back from hardware (bit 0 lamp, bit 1 valve) |
//! | `tools` | the registered tools, `*` = needs approval |
//! | `buttons` | `buttons=<n>` |
//! | `uptime` | `uptime_ms=<n>` |
//! | `ticks` | `last_frame_ticks=<n> verdict_ticks=<m>`: core clock ticks (`board::SYSCLK_HZ`: 25 MHz on AN385/AN386, 20 MHz on AN505) the last agent frame took, line end to reply, and line end to the gate's verdict on its proposal (0 for other requests); under QEMU `-icount shift=0`, 40 (50 on AN505) instructions per tick |
//! | `audit` | the flash audit log, oldest first: `audit run=R step=S call=ID tool=NAME verdict=WORD time_ms=T` per entry, then `audit end entries=N` (`error: no flash …` in a build or boot without flash; see `persist`) |
//! | `stack` | `stack_peak_bytes=<n>`: the stack's high-water mark (only in a build with `--features stack-paint`) |
//! | `help` | the list of commands |
//! | `panic` | none: panics (fail-safe test hook: actuators off, QEMU exits 101) |
//!
//! Unasked lines: `approve? ID TOOL {args} [y/n]` when a call needs approval,
//! then `approved ID`, `denied ID` or `denied ID (timeout)`.
//!
//! Blank lines are ignored; surrounding ASCII whitespace (also `\r`) is
//! ignored; anything else answers `error: …`.
#![forbid(unsafe_code)]

use budgetgate_core::device::Answer;
use budgetgate_core::RunLimits;
use embedded_io::Write;

use crate::board;
use crate::config::{DEFAULT_LIMITS, FRAME_MAX, MAX_CONSOLE_MILLIS};
use crate::line::LineEvent;
use crate::tools::SPECS;
use crate::{Gate, Meter};

/// A parsed console command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum Command {
    /// Start a new run, with these budgets or the config's.
    Start(Option<(u32, u32)>),
    /// Report the run.
    Status,
    /// Answer the pending approval prompt.
    Answer(bool),
    /// Set the approval timeout, ms.
    Timeout(u32),
    /// Set the run's time budget, ms.
    Deadline(u32),
    /// Set the valve's duty window: window and most on-time, ms.
    Duty(u32, u32),
    /// `duty` without two numbers of ms in range.
    BadDuty,
    /// Report the LED register.
    Leds,
    /// List the tools.
    Tools,
    /// Report the button register.
    Buttons,
    /// Report milliseconds since boot.
    Uptime,
    /// Report the clock ticks of the last agent frame.
    Ticks,
    /// Report the stack's high-water mark.
    Stack,
    /// Print the audit log.
    Audit,
    /// List commands.
    Help,
    /// Panic on purpose (tests the fail-safe exit path).
    Panic,
    /// `start` with numbers that are not two budgets.
    BadStart,
    /// `timeout` (`true`) or `deadline` without one number of ms in range.
    BadMillis(bool),
    /// Not a command.
    Unknown,
}

fn number(word: Option<&[u8]>) -> Option<u32> {
    let word = word?;
    if word.is_empty() || word.len() > 9 || !word.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(word.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
}

/// Whether `word` is one of `choices`, ignoring ASCII case (an operator who
/// types `Y` means yes).
fn is_any(word: &[u8], choices: &[&[u8]]) -> bool {
    choices.iter().any(|c| word.eq_ignore_ascii_case(c))
}

/// Parses one console line; `None` for a blank line.
pub fn parse(line: &[u8]) -> Option<Command> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let mut words = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let verb = words.next().unwrap_or_default();
    let (first, second, extra) = (words.next(), words.next(), words.next());
    let none = first.is_none();
    let millis = |w| {
        number(w)
            .filter(|ms| (1..=MAX_CONSOLE_MILLIS).contains(ms))
            .filter(|_| second.is_none())
    };
    Some(match verb {
        b"start" if none => Command::Start(None),
        b"start" => match (number(first), number(second), extra) {
            (Some(d), Some(t), None) => Command::Start(Some((d, t))),
            _ => Command::BadStart,
        },
        b"timeout" => millis(first).map_or(Command::BadMillis(true), Command::Timeout),
        b"duty" => {
            let ms = |w| number(w).filter(|ms| (1..=MAX_CONSOLE_MILLIS).contains(ms));
            match (ms(first), ms(second), extra) {
                (Some(w), Some(m), None) if m <= w => Command::Duty(w, m),
                _ => Command::BadDuty,
            }
        }
        b"deadline" => millis(first).map_or(Command::BadMillis(false), Command::Deadline),
        _ if !none => Command::Unknown,
        b"status" => Command::Status,
        v if is_any(v, &[b"y", b"yes", b"approve"]) => Command::Answer(true),
        v if is_any(v, &[b"n", b"no", b"deny"]) => Command::Answer(false),
        b"leds" => Command::Leds,
        b"tools" => Command::Tools,
        b"buttons" => Command::Buttons,
        b"uptime" => Command::Uptime,
        b"ticks" => Command::Ticks,
        b"stack" => Command::Stack,
        b"audit" => Command::Audit,
        b"help" => Command::Help,
        b"panic" => Command::Panic,
        _ => Command::Unknown,
    })
}

/// Answers one console line event on `console`; an approval answer may also
/// write the agent's reply on `agent`.
pub fn handle<W: Write>(
    event: LineEvent<'_>,
    gate: &mut Gate,
    meter: &Meter,
    agent: &mut W,
    console: &mut W,
) -> Result<(), W::Error> {
    let command = match event {
        LineEvent::Line(line) => match parse(line) {
            Some(command) => command,
            None => return Ok(()),
        },
        LineEvent::TooLong => return console.write_all(b"error: line too long\n"),
        LineEvent::Corrupt => return console.write_all(b"error: line corrupt\n"),
    };
    defmt::info!("console: {}", command);
    let out = console;
    match command {
        Command::Start(budgets) => {
            let limits = match budgets {
                None => Ok(DEFAULT_LIMITS),
                Some((d, t)) => RunLimits::new(d, t),
            };
            let Ok(limits) = limits else {
                return out.write_all(START_USAGE);
            };
            match gate.start(limits, board::now_ms()) {
                Ok(run) => started(out, gate, run, limits),
                // `StartError::ApprovalPending`, the only reason there is.
                Err(_) => {
                    out.write_all(b"error: answer the pending approval first (y or n)\n")
                }
            }
        }
        Command::Status => write_status(gate, board::now_ms(), out),
        Command::Answer(approve) => {
            let answer = if approve {
                Answer::Approve
            } else {
                Answer::Refuse
            };
            match gate.on_answer(answer, board::now_ms(), agent, out) {
                Ok(true) => Ok(()),
                Ok(false) => out.write_all(b"error: no approval pending\n"),
                Err(e) => Err(e.into_inner()),
            }
        }
        Command::Timeout(ms) => {
            gate.set_approval_timeout(ms);
            reply_number(out, b"ok approval_timeout_ms=", u64::from(ms))
        }
        Command::Deadline(ms) => {
            gate.set_time_budget(ms);
            reply_number(out, b"ok time_budget_ms=", u64::from(ms))
        }
        Command::Duty(_, _) if gate.state() == budgetgate_core::word::RUNNING => out.write_all(
            b"error: stop the run first (a duty window is set between runs)\n",
        ),
        Command::Duty(window, max_on) => {
            match gate.set_duty_window(crate::tools::VALVE_ACTUATOR, window, max_on) {
                Ok(()) => {
                    out.write_all(b"ok duty_window_ms=")?;
                    write_decimal(out, u64::from(window))?;
                    reply_number(out, b" duty_max_on_ms=", u64::from(max_on))
                }
                Err(_) => out.write_all(
                    b"error: the valve has been open in its window, which cannot be made longer\n",
                ),
            }
        }
        Command::BadDuty => reply_number(
            out,
            b"error: duty W M needs two whole numbers of milliseconds, M at most W, each 1..=",
            u64::from(MAX_CONSOLE_MILLIS),
        ),
        Command::Leds => reply_number(out, b"leds=", u64::from(board::read_leds())),
        Command::Tools => {
            out.write_all(b"tools: ")?;
            write_tools(out)?;
            out.write_all(b" (* needs approval)\n")
        }
        Command::Buttons => reply_number(out, b"buttons=", u64::from(board::read_buttons())),
        Command::Uptime => reply_number(out, b"uptime_ms=", board::now_ms()),
        Command::Ticks => {
            out.write_all(b"last_frame_ticks=")?;
            write_decimal(out, meter.last_frame_ticks)?;
            reply_number(out, b" verdict_ticks=", meter.verdict_ticks)
        }
        Command::Stack => match board::stack_high_water() {
            Some(bytes) => reply_number(out, b"stack_peak_bytes=", u64::from(bytes)),
            None => out.write_all(b"error: build with --features stack-paint\n"),
        },
        #[cfg(feature = "flash")]
        Command::Audit => crate::persist::write_audit(gate.actuators_mut().journal_mut(), out),
        #[cfg(not(feature = "flash"))]
        Command::Audit => out.write_all(b"error: no flash (a build without the flash feature)\n"),
        Command::Help => out.write_all(
            b"commands: start [D T] status y n timeout MS deadline MS duty W M leds tools buttons uptime ticks stack audit help panic\n",
        ),
        Command::Panic => panic!("panic requested on the operator console"),
        Command::BadStart => out.write_all(START_USAGE),
        Command::BadMillis(timeout) => {
            out.write_all(if timeout {
                b"error: timeout"
            } else {
                b"error: deadline"
            })?;
            reply_number(
                out,
                b" MS needs one whole number of milliseconds, 1..=",
                u64::from(MAX_CONSOLE_MILLIS),
            )
        }
        Command::Unknown => out.write_all(b"error: unknown command\n"),
    }
}

/// The reply to a `start` whose budgets are not numbers within the contract.
const START_USAGE: &[u8] =
    b"error: start D T needs max_decisions 1..=32 and max_tool_calls 0..=16\n";

/// The boot banner (one line).
pub fn banner<W: Write>(out: &mut W) -> Result<(), W::Error> {
    out.write_all(b"budgetgate-firmware ")?;
    out.write_all(env!("CARGO_PKG_VERSION").as_bytes())?;
    out.write_all(b" gate board=")?;
    out.write_all(board::NAME.as_bytes())?;
    out.write_all(b" protocol=")?;
    write_decimal(out, u64::from(budgetgate_core::link::PROTOCOL_VERSION))?;
    out.write_all(b" frame_max=")?;
    write_decimal(out, FRAME_MAX as u64)?;
    out.write_all(b"; no run yet: type start\n")
}

fn started<W: Write>(
    out: &mut W,
    gate: &Gate,
    run: u32,
    limits: RunLimits,
) -> Result<(), W::Error> {
    out.write_all(b"started run ")?;
    write_decimal(out, u64::from(run))?;
    out.write_all(b": max_decisions=")?;
    write_decimal(out, u64::from(limits.max_decisions()))?;
    out.write_all(b" max_tool_calls=")?;
    write_decimal(out, u64::from(limits.max_tool_calls()))?;
    out.write_all(b" time_budget_ms=")?;
    let timing = gate.timing();
    write_decimal(out, u64::from(timing.time_budget_ms))?;
    out.write_all(b" approval_timeout_ms=")?;
    write_decimal(out, u64::from(timing.approval_timeout_ms))?;
    out.write_all(b" tools=")?;
    write_tools(out)?;
    out.write_all(b"\n")
}

/// One line about the run:
/// `run 1 running decisions=2/8 tool_attempts=1/4 time_left_ms=118000 approval=none rx_overruns=0 rx_lost=0`.
fn write_status<W: Write>(gate: &Gate, now_ms: u64, out: &mut W) -> Result<(), W::Error> {
    let Some(run) = gate.snapshot(now_ms) else {
        return out.write_all(b"idle: no run (type start)\n");
    };
    out.write_all(b"run ")?;
    write_decimal(out, u64::from(run.run))?;
    out.write_all(b" ")?;
    out.write_all(run.state.as_bytes())?;
    out.write_all(b" decisions=")?;
    write_decimal(out, u64::from(run.decisions))?;
    out.write_all(b"/")?;
    write_decimal(out, u64::from(run.max_decisions))?;
    out.write_all(b" tool_attempts=")?;
    write_decimal(out, u64::from(run.tool_attempts))?;
    out.write_all(b"/")?;
    write_decimal(out, u64::from(run.max_tool_calls))?;
    out.write_all(b" time_left_ms=")?;
    write_decimal(out, run.time_left_ms)?;
    out.write_all(b" approval=")?;
    out.write_all(run.approval.unwrap_or("none").as_bytes())?;
    out.write_all(b" rx_overruns=")?;
    write_decimal(out, u64::from(crate::rx::overruns()))?;
    reply_number(out, b" rx_lost=", u64::from(crate::rx::lost_bytes()))
}

fn write_tools<W: Write>(out: &mut W) -> Result<(), W::Error> {
    for (i, spec) in SPECS.iter().enumerate() {
        out.write_all(if i == 0 { b"" } else { b"," })?;
        out.write_all(spec.name.as_bytes())?;
        if spec.needs_approval {
            out.write_all(b"*")?;
        }
    }
    Ok(())
}

fn reply_number<W: Write>(out: &mut W, key: &[u8], value: u64) -> Result<(), W::Error> {
    out.write_all(key)?;
    write_decimal(out, value)?;
    out.write_all(b"\n")
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
