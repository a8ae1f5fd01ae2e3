//! The device's tools and the actuators they drive.
//!
//! Each tool is a [`ToolSpec`] with typed, range-checked parameters, shaped
//! after the Home Assistant intents that home-automation agents call
//! (`HassTurnOn`, `HassTurnOff`, `HassLightSet`, `HassGetState`), plus
//! `HassValveOpen` and the contract's demo tool `add`. The board's two LEDs
//! stand in for the actuators: LED0 is the **lamp**, LED1 the **valve**.
//!
//! | tool | arguments | approval | does |
//! | --- | --- | --- | --- |
//! | `add` | `a`, `b`: numbers | no | `a + b` (integer if both are integers) |
//! | `HassTurnOn` | `name`: `"lamp"` | no | lamp on |
//! | `HassTurnOff` | `name`: `"lamp"` or `"valve"` | no | lamp off / valve closed |
//! | `HassLightSet` | `name`: `"lamp"`, `brightness`: integer 0..=100 | no | lamp on iff brightness > 0 |
//! | `HassValveOpen` | `name`: `"valve"` | **yes** | valve open |
//! | `HassGetState` | none | no | reads the LED register back |
//!
//! Home Assistant opens a valve with `HassTurnOn`; here opening the valve is
//! a tool of its own so that the approval rule, which belongs to a tool,
//! covers exactly the consequential action. Closing it (`HassTurnOff`) is the
//! safe direction and needs no approval.
//!
//! A call that passed its signature is parsed once into a [`Command`]
//! (parse, then trust): [`Home`]'s `execute` matches on it and re-checks
//! nothing; the gate refuses a call that does not parse as
//! `invalid-arguments`, as one that breaks its signature.
//!
//! Every result reports the actuator state **read back from the LED
//! register**, never a shadow copy. The board has no PWM: `HassLightSet`
//! drives the lamp on for any brightness above 0 and reports the commanded
//! level, which the hardware cannot read back.
#![forbid(unsafe_code)]

use budgetgate_core::device::{self, Actuators as _, CommandError, Switch, ToolFailure};
use budgetgate_core::registry::{ArgumentError, CheckedArguments, Param, ParamKind, ToolSpec};
use budgetgate_core::ScalarRef;
use embedded_hal::digital::{OutputPin, StatefulOutputPin};
use serde::Serialize;

use crate::board::{self, Led};

/// The lamp, LED0.
pub const LAMP: &str = "lamp";
/// The valve, LED1.
pub const VALVE: &str = "valve";
/// The valve's actuator number (its bit in `read_back`), for its duty window.
pub const VALVE_ACTUATOR: usize = 1;

const NAME_LAMP: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&[LAMP]),
    required: true,
};
const NAME_VALVE: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&[VALVE]),
    required: true,
};
const NAME_ANY: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&[LAMP, VALVE]),
    required: true,
};
const NUMBER: ParamKind = ParamKind::Number;

/// Which tool a call names; `KINDS[i]` is the tool of `SPECS[i]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum Kind {
    /// `add`
    Add,
    /// `HassTurnOn`
    TurnOn,
    /// `HassTurnOff`
    TurnOff,
    /// `HassLightSet`
    LightSet,
    /// `HassValveOpen`
    ValveOpen,
    /// `HassGetState`
    GetState,
}

/// The device's tool registry, in registration order (the run's tool index).
pub const SPECS: [ToolSpec; 6] = [
    ToolSpec {
        name: "add",
        description: "a + b (the contract's demo tool)",
        params: &[
            Param {
                key: "a",
                kind: NUMBER,
                required: true,
            },
            Param {
                key: "b",
                kind: NUMBER,
                required: true,
            },
        ],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassTurnOn",
        description: "turn the lamp on",
        params: &[NAME_LAMP],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassTurnOff",
        description: "turn the lamp off or close the valve",
        params: &[NAME_ANY],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassLightSet",
        description: "set the lamp's brightness, percent (on iff above 0; no PWM)",
        params: &[
            NAME_LAMP,
            Param {
                key: "brightness",
                kind: ParamKind::Int { min: 0, max: 100 },
                required: true,
            },
        ],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassValveOpen",
        description: "open the valve (the operator must approve)",
        params: &[NAME_VALVE],
        needs_approval: true,
    },
    ToolSpec {
        name: "HassGetState",
        description: "read the lamp and valve back from the hardware",
        params: &[],
        needs_approval: false,
    },
];

/// The tool of each entry of [`SPECS`], same order.
pub const KINDS: [Kind; SPECS.len()] = [
    Kind::Add,
    Kind::TurnOn,
    Kind::TurnOff,
    Kind::LightSet,
    Kind::ValveOpen,
    Kind::GetState,
];

const _: () = assert!(SPECS.len() <= crate::config::TOOL_CAPACITY);

/// An actuator a call names (its `name` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `"lamp"`, LED0.
    Lamp,
    /// `"valve"`, LED1.
    Valve,
}

impl Target {
    /// The actuator's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Lamp => LAMP,
            Self::Valve => VALVE,
        }
    }

    /// The `name` argument of a checked call.
    #[inline(always)]
    fn parse(args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        match args.text("name") {
            Some(name) if name == LAMP => Ok(Self::Lamp),
            Some(name) if name == VALVE => Ok(Self::Valve),
            Some(_) => Err(ArgumentError::NotAChoice("name").into()),
            None => Err(ArgumentError::Missing("name").into()),
        }
    }
}

/// A number argument ([`ParamKind::Number`]): an integer, or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer; `|x| <= 1e6` (`SPEC A1`), so any two add without
    /// overflow as `i64`.
    Int(i32),
    /// A float, finite, `|x| <= 1e6`.
    Float(f64),
}

impl Number {
    /// Argument `key` of a checked call.
    #[inline(always)]
    fn parse(args: &CheckedArguments<'_>, key: &'static str) -> Result<Self, CommandError> {
        match args.get(key) {
            Some(ScalarRef::Int(v)) => i32::try_from(v)
                .map(Self::Int)
                .map_err(|_| ArgumentError::OutOfRange(key).into()),
            Some(ScalarRef::Float(v)) => Ok(Self::Float(v)),
            Some(_) => Err(ArgumentError::WrongType(key).into()),
            None => Err(ArgumentError::Missing(key).into()),
        }
    }

    /// As an `f64`: exact, for every integer it can hold.
    fn as_f64(self) -> f64 {
        match self {
            Self::Int(v) => f64::from(v),
            Self::Float(v) => v,
        }
    }
}

/// A tool call of [`SPECS`], typed: parsed once from a call whose arguments
/// passed its signature ([`device::Command::parse`]), run by [`Home`] with
/// no further checks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    /// `add`: `a + b`.
    Add(Number, Number),
    /// `HassTurnOn`: the lamp on (its only `name`).
    TurnOn,
    /// `HassTurnOff`: the lamp off, or the valve closed.
    TurnOff(Target),
    /// `HassLightSet` of the lamp (its only `name`): on iff above 0.
    LightSet {
        /// Percent, 0..=100.
        brightness: u8,
    },
    /// `HassValveOpen`: the valve open (approved by the operator).
    ValveOpen,
    /// `HassGetState`: both actuators read back.
    GetState,
}

impl device::Command for Command {
    // Inlined into the gate's one call: built for size, the returned
    // `Result` was assembled and taken apart again with `memcpy` calls,
    // about 60 instructions each, before the verdict.
    #[inline(always)]
    fn parse(tool: usize, args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        let kind = KINDS.get(tool).copied().ok_or(CommandError::Tool(tool))?;
        Ok(match kind {
            Kind::Add => Self::Add(Number::parse(args, "a")?, Number::parse(args, "b")?),
            Kind::TurnOn => Self::TurnOn,
            Kind::TurnOff => Self::TurnOff(Target::parse(args)?),
            Kind::LightSet => {
                let brightness = args
                    .int("brightness")
                    .and_then(|b| u8::try_from(b).ok())
                    .filter(|b| *b <= 100)
                    .ok_or(ArgumentError::OutOfRange("brightness"))?;
                Self::LightSet { brightness }
            }
            Kind::ValveOpen => Self::ValveOpen,
            Kind::GetState => Self::GetState,
        })
    }
}

/// A tool's result: compact JSON on the wire, measured by the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolResult {
    /// `add` of two integers.
    Int(i64),
    /// `add` with a float operand.
    Float(f64),
    /// `{"name":"lamp","state":"on"}`: one actuator, read back.
    Switch {
        /// `lamp` or `valve`.
        name: &'static str,
        /// `on`/`off` (lamp), `open`/`closed` (valve).
        state: &'static str,
    },
    /// `{"name":"lamp","brightness":40,"state":"on"}`.
    Light {
        /// `lamp`.
        name: &'static str,
        /// The commanded level, percent (not readable back: no PWM).
        brightness: u8,
        /// `on`/`off`, read back.
        state: &'static str,
    },
    /// `{"lamp":"on","valve":"closed","leds":1}`: both actuators read back.
    State {
        /// `on`/`off`.
        lamp: &'static str,
        /// `open`/`closed`.
        valve: &'static str,
        /// The LED register, bit 0 = lamp, bit 1 = valve.
        leds: u32,
    },
}

/// The two actuators, LED0 (lamp) and LED1 (valve), as the core's device
/// gate drives them (`device::Actuators`).
pub struct Home {
    lamp: Led,
    valve: Led,
    /// Clock ticks at the last proposal's verdict, 0 if none since
    /// [`Home::clear_verdict`] (the console's `ticks`).
    verdict_at: u64,
    /// Where the gate's journal goes (`persist`); `None`: nothing stored.
    #[cfg(feature = "flash")]
    journal: Option<&'static mut crate::persist::Journal>,
}

impl Home {
    /// Takes the LEDs and drives them to the safe state (lamp off, valve closed).
    pub fn new(lamp: Led, valve: Led) -> Self {
        let mut home = Self {
            lamp,
            valve,
            verdict_at: 0,
            #[cfg(feature = "flash")]
            journal: None,
        };
        home.safe_state();
        home
    }

    /// From now on, the gate's journal is stored in `journal` (`persist::boot`).
    #[cfg(feature = "flash")]
    pub fn attach(&mut self, journal: &'static mut crate::persist::Journal) {
        self.journal = Some(journal);
    }

    /// The flash journal, if one is attached (the console's `audit`).
    #[cfg(feature = "flash")]
    pub fn journal_mut(&mut self) -> Option<&mut crate::persist::Journal> {
        self.journal.as_deref_mut()
    }

    /// Forgets the last verdict's clock reading (at a frame's line end).
    pub fn clear_verdict(&mut self) {
        self.verdict_at = 0;
    }

    /// Clock ticks at the last verdict since [`Home::clear_verdict`], if any.
    pub fn verdict_at(&self) -> Option<u64> {
        (self.verdict_at != 0).then_some(self.verdict_at)
    }

    fn lamp_state(&mut self) -> &'static str {
        // Reads the LED register (StatefulOutputPin on this board is hardware).
        match self.lamp.is_set_high() {
            Ok(true) => "on",
            _ => "off",
        }
    }

    fn valve_state(&mut self) -> &'static str {
        match self.valve.is_set_high() {
            Ok(true) => "open",
            _ => "closed",
        }
    }

    fn switch(&mut self, target: Target) -> ToolResult {
        let state = match target {
            Target::Lamp => self.lamp_state(),
            Target::Valve => self.valve_state(),
        };
        ToolResult::Switch {
            name: target.name(),
            state,
        }
    }
}

impl device::Actuators for Home {
    type Command = Command;
    type Result = ToolResult;

    /// Runs `command`; every state in its result is read back. Never
    /// fails: the sum of two `i32`s fits an `i64`, and the other tools only
    /// drive and read pins.
    fn execute(&mut self, command: Command) -> Result<ToolResult, ToolFailure> {
        Ok(match command {
            Command::Add(Number::Int(a), Number::Int(b)) => {
                ToolResult::Int(i64::from(a) + i64::from(b))
            }
            Command::Add(a, b) => ToolResult::Float(a.as_f64() + b.as_f64()),
            Command::TurnOn => {
                let _ = self.lamp.set_high();
                self.switch(Target::Lamp)
            }
            Command::TurnOff(target) => {
                let _ = match target {
                    Target::Lamp => self.lamp.set_low(),
                    Target::Valve => self.valve.set_low(),
                };
                self.switch(target)
            }
            Command::LightSet { brightness } => {
                let _ = if brightness > 0 {
                    self.lamp.set_high()
                } else {
                    self.lamp.set_low()
                };
                ToolResult::Light {
                    name: LAMP,
                    brightness,
                    state: self.lamp_state(),
                }
            }
            Command::ValveOpen => {
                let _ = self.valve.set_high();
                self.switch(Target::Valve)
            }
            Command::GetState => ToolResult::State {
                lamp: self.lamp_state(),
                valve: self.valve_state(),
                leds: board::read_leds(),
            },
        })
    }

    /// Lamp off, valve closed.
    fn safe_state(&mut self) {
        let _ = self.lamp.set_low();
        let _ = self.valve.set_low();
    }

    /// The LED register: bit 0 the lamp, bit 1 the valve.
    fn read_back(&mut self) -> u32 {
        board::read_leds()
    }

    /// `HassValveOpen` opens the valve, `HassTurnOff` of the valve closes
    /// it: its duty window counts the time between.
    fn switches(&self, command: &Command) -> Switch {
        match command {
            Command::ValveOpen => Switch::On(VALVE_ACTUATOR),
            Command::TurnOff(Target::Valve) => Switch::Off(VALVE_ACTUATOR),
            _ => Switch::None,
        }
    }

    /// The valve closed (its duty window is spent); any other number: every
    /// actuator safe.
    fn safe_state_of(&mut self, actuator: usize) {
        if actuator == VALVE_ACTUATOR {
            let _ = self.valve.set_low();
        } else {
            self.safe_state();
        }
    }

    fn on_verdict(&mut self) {
        self.verdict_at = board::clock_ticks().max(1);
    }

    /// To flash when a journal is attached (`persist`), else nowhere.
    #[cfg(feature = "flash")]
    fn journal(
        &mut self,
        run: &budgetgate_core::resume::RunView<'_>,
        entry: &budgetgate_core::resume::AuditEntry<'_>,
    ) -> Result<(), device::JournalFailure> {
        match self.journal.as_deref_mut() {
            Some(journal) => crate::persist::save(journal, run, entry),
            None => Ok(()),
        }
    }
}
