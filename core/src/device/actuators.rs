//! What a device maker implements: its tools' calls as one [`Command`] and
//! its [`Actuators`] (a command in, a result out; the safe state; the
//! actuators read back; the journal), and their errors.

use core::fmt;

use serde::Serialize;

#[cfg(doc)]
use super::DeviceGate;
use crate::registry::{ArgumentError, CheckedArguments};
use crate::resume::{AuditEntry, RunView};
#[cfg(doc)]
use crate::{limits::MAX_DUTY_WINDOWS, link::FRAME_MAX, resume::AuditVerdict, word};

/// A tool that could not do what it was asked: its observation is
/// `tool-error` (`SPEC A2` step 5). The tool was executed all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ToolFailure;

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the tool failed")
    }
}

impl core::error::Error for ToolFailure {}

/// The board could not store the gate's state ([`Actuators::journal`]):
/// the gate refuses to go on (fail closed, [`word::STORAGE_ERROR`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JournalFailure;

impl fmt::Display for JournalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the gate's state could not be stored")
    }
}

impl core::error::Error for JournalFailure {}

/// Why a call whose arguments fit its [`ToolSpec`](crate::registry::ToolSpec) does not become its
/// tool's [`Command`] ([`Command::parse`]). The gate refuses it exactly as
/// it refuses arguments that break the signature: `invalid-arguments`, not
/// executed, a counted attempt, audited [`AuditVerdict::InvalidArguments`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CommandError {
    /// This tool number (its index in the gate's [`ToolSpec`](crate::registry::ToolSpec) list) has
    /// no command: the tool list and the command type disagree.
    Tool(usize),
    /// An argument the signature allows and the command cannot take (a
    /// rule between arguments, a narrower range): which, and why.
    Argument(ArgumentError),
}

impl From<ArgumentError> for CommandError {
    fn from(e: ArgumentError) -> Self {
        Self::Argument(e)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tool(tool) => write!(f, "tool {tool} has no command"),
            Self::Argument(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for CommandError {}

/// A device's tool call as a typed value: what [`Actuators::execute`] runs.
/// Parse, then trust: the gate parses a call once, from the arguments its
/// [`ToolSpec::check`](crate::registry::ToolSpec::check) handed back, before any prompt or actuator, and from
/// then on only this value exists; a call waiting for approval keeps it,
/// and `execute` never sees the raw arguments. So a command holds what it
/// needs by value (an enum with a variant per tool, the arguments as the
/// types the tool works in), nothing borrowed from the frame.
pub trait Command: Sized {
    /// The command of tool number `tool` (its index in the gate's
    /// [`ToolSpec`](crate::registry::ToolSpec) list), from the arguments that passed that spec's check
    /// (each of its parameter's type and range, read once): take them as
    /// the types the tool works in, and refuse what a signature cannot say
    /// (a rule between two arguments). A refusal is the observation
    /// `invalid-arguments` (`SPEC A2` step 5: a counted attempt, not
    /// executed); nothing runs.
    fn parse(tool: usize, args: &CheckedArguments<'_>) -> Result<Self, CommandError>;
}

/// What a device maker implements: the device's tools acting on its
/// actuators. The gate calls [`Actuators::execute`] only for a call that
/// the run accepted, whose arguments passed its [`ToolSpec::check`](crate::registry::ToolSpec::check) and
/// parsed to its [`Command`], and that the operator approved if its spec
/// says so.
pub trait Actuators {
    /// The device's tool calls, typed ([`Command::parse`]).
    type Command: Command;

    /// A tool's result: compact JSON on the wire, measured by the run
    /// (`SPEC A2`: at most 4096 bytes, or the observation is `tool-error`).
    /// Stricter on a device: its observation must also fit one reply frame
    /// ([`FRAME_MAX`] bytes with the observation's other fields and the
    /// checksum; keep results under about 800 bytes), or it is a
    /// `tool-error` too, in the run's trace as on the wire.
    type Result: Serialize;

    /// Runs `command`, parsed from an accepted, checked (and, if its tool
    /// needs it, approved) call. A failure is the observation `tool-error`.
    fn execute(&mut self, command: Self::Command) -> Result<Self::Result, ToolFailure>;

    /// Drives every actuator to its safe state (the state at boot). Called
    /// on every start and every stop of a run.
    fn safe_state(&mut self);

    /// The actuators as read back from the hardware, one bit each; 0 means
    /// every actuator is in its safe state (`STATUS`'s `actuators`).
    fn read_back(&mut self) -> u32;

    /// Which actuator `command` switches on or off, for its duty window
    /// ([`DeviceGate::set_duty_window`]): the gate asks before it prompts
    /// for and before it executes the call. [`Switch::None`] (the default)
    /// for a command that moves no actuator with a window.
    fn switches(&self, command: &Self::Command) -> Switch {
        let _ = command;
        Switch::None
    }

    /// Drives actuator number `actuator` to its safe state: its duty window
    /// is spent ([`DeviceGate::poll`]). By default every actuator
    /// ([`Actuators::safe_state`]): the safe direction for all, though the
    /// other windows go on counting (towards off).
    fn safe_state_of(&mut self, actuator: usize) {
        let _ = actuator;
        self.safe_state();
    }

    /// Called once per proposal when the gate has reached its verdict
    /// (checksum, request, validation, the run's decision, the argument
    /// check and the command's parse), before any actuator may move: a
    /// board can read its cycle counter here to measure the gate's work.
    /// Does nothing by default.
    fn on_verdict(&mut self) {}

    /// Stores the run (`run`, encoded by [`RunView::encode`]) and appends
    /// `entry` to the audit log, durably, before returning (`SPEC E`,
    /// durable state; issue 15). Called after every decision and every
    /// change of the run, before its effect is released: before a call's
    /// actuator moves (`entry` says `executing`), before its observation or
    /// stop is written to the agent. A board gives the newest stored record
    /// to [`DeviceGate::resume`] at boot. A failure makes the gate refuse
    /// the call and every later proposal ([`word::STORAGE_ERROR`]) until a
    /// run is started whose start can be stored. Stores nothing by default.
    fn journal(&mut self, run: &RunView<'_>, entry: &AuditEntry<'_>) -> Result<(), JournalFailure> {
        let _ = (run, entry);
        Ok(())
    }
}

/// What a call does to an actuator with a duty window
/// ([`Actuators::switches`]); actuators are numbered from 0, below
/// [`MAX_DUTY_WINDOWS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Switch {
    /// No actuator with a window: nothing is counted.
    None,
    /// Switches this actuator on: refused if its window is spent; its
    /// on-time counts from the call's execution.
    On(usize),
    /// Switches this actuator off (the safe direction): its on-time stops
    /// once the call has run without failing.
    Off(usize),
}
