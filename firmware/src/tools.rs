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
//! Every result reports the actuator state **read back from the LED
//! register**, never a shadow copy. The board has no PWM: `HassLightSet`
//! drives the lamp on for any brightness above 0 and reports the commanded
//! level, which the hardware cannot read back.
#![forbid(unsafe_code)]

use budgetgate_core::device::{self, Actuators as _, Switch, ToolFailure};
use budgetgate_core::registry::{Param, ParamKind, ToolSpec};
use budgetgate_core::{ArgumentsRef, ScalarRef};
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

/// What each tool does; `KINDS[i]` is the behaviour of `SPECS[i]`.
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

/// The behaviour of each entry of [`SPECS`], same order.
pub const KINDS: [Kind; SPECS.len()] = [
    Kind::Add,
    Kind::TurnOn,
    Kind::TurnOff,
    Kind::LightSet,
    Kind::ValveOpen,
    Kind::GetState,
];

const _: () = assert!(SPECS.len() <= crate::config::TOOL_CAPACITY);

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

    fn switch(&mut self, name: &'static str) -> ToolResult {
        let state = if name == VALVE {
            self.valve_state()
        } else {
            self.lamp_state()
        };
        ToolResult::Switch { name, state }
    }
}

impl device::Actuators for Home {
    type Result = ToolResult;

    fn execute(&mut self, tool: usize, args: &ArgumentsRef<'_>) -> Result<ToolResult, ToolFailure> {
        let kind = KINDS.get(tool).copied().ok_or(ToolFailure)?;
        execute(kind, args, self).ok_or(ToolFailure)
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
    fn switches(&self, tool: usize, args: &ArgumentsRef<'_>) -> Switch {
        match KINDS.get(tool) {
            Some(Kind::ValveOpen) => Switch::On(VALVE_ACTUATOR),
            Some(Kind::TurnOff) if name_of(args) == Some(VALVE) => Switch::Off(VALVE_ACTUATOR),
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

fn name_of(args: &ArgumentsRef<'_>) -> Option<&'static str> {
    let name = ToolSpec::text(args, "name")?;
    [LAMP, VALVE].into_iter().find(|known| name == *known)
}

/// Runs tool `kind` with arguments that passed its [`ToolSpec::check`].
/// `None` is a failed tool (`tool-error`); it cannot happen for checked
/// arguments, but a tool never trusts that.
fn execute(kind: Kind, args: &ArgumentsRef<'_>, actuators: &mut Home) -> Option<ToolResult> {
    Some(match kind {
        Kind::Add => match (args.get("a")?, args.get("b")?) {
            (ScalarRef::Int(a), ScalarRef::Int(b)) => ToolResult::Int(a.checked_add(b)?),
            _ => {
                let sum = ToolSpec::number(args, "a")? + ToolSpec::number(args, "b")?;
                ToolResult::Float(sum)
            }
        },
        Kind::TurnOn => {
            name_of(args).filter(|n| *n == LAMP)?;
            let _ = actuators.lamp.set_high();
            actuators.switch(LAMP)
        }
        Kind::TurnOff => {
            let name = name_of(args)?;
            if name == VALVE {
                let _ = actuators.valve.set_low();
            } else {
                let _ = actuators.lamp.set_low();
            }
            actuators.switch(name)
        }
        Kind::LightSet => {
            name_of(args).filter(|n| *n == LAMP)?;
            let brightness = u8::try_from(ToolSpec::int(args, "brightness")?)
                .ok()
                .filter(|b| *b <= 100)?;
            let _ = if brightness > 0 {
                actuators.lamp.set_high()
            } else {
                actuators.lamp.set_low()
            };
            ToolResult::Light {
                name: LAMP,
                brightness,
                state: actuators.lamp_state(),
            }
        }
        Kind::ValveOpen => {
            name_of(args).filter(|n| *n == VALVE)?;
            let _ = actuators.valve.set_high();
            actuators.switch(VALVE)
        }
        Kind::GetState => ToolResult::State {
            lamp: actuators.lamp_state(),
            valve: actuators.valve_state(),
            leds: board::read_leds(),
        },
    })
}
