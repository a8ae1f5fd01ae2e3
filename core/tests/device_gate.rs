//! The core's device gate (`budgetgate_core::device`) on the host, with the
//! cases of the QEMU end-to-end tests (`qemu_gate.rs`) and the same bytes on
//! the wire: the bounded run (SPEC A2) with approval and a time budget
//! (SPEC C) on a co-processor. The gate is sans-IO, so the clock is a number
//! this test moves, the agent link and the console are byte buffers, and the
//! actuators are two booleans behind the firmware's tool table (copied here
//! from `firmware/src/tools.rs`: the firmware is its own workspace).
// A test states what it expects with `expect`, `unwrap`, `panic!` and
// indexing: a failure is the test failing, as in the core's unit tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;

use budgetgate_core::device::{
    Actuators, Answer, Command, CommandError, DeviceGate, DutyError, StartError, Switch, Timing,
    ToolFailure,
};
use budgetgate_core::link::{self, FrameDecoder, FRAME_MAX};
use budgetgate_core::registry::{ArgumentError, CheckedArguments, Param, ParamKind, ToolSpec};
use budgetgate_core::{RunLimits, ScalarRef, ToolSet};
use serde::Serialize;

mod common;
use common::frame;

// ---------------------------------------------------------------------------
// The firmware's tools, over two booleans instead of two LEDs.

const NAME_LAMP: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&["lamp"]),
    required: true,
};
const NAME_VALVE: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&["valve"]),
    required: true,
};
const NAME_ANY: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&["lamp", "valve"]),
    required: true,
};
const NUMBER: Param = Param {
    key: "",
    kind: ParamKind::Number,
    required: true,
};

static SPECS: [ToolSpec; 8] = [
    ToolSpec {
        name: "add",
        description: "a + b",
        params: &[Param { key: "a", ..NUMBER }, Param { key: "b", ..NUMBER }],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassTurnOn",
        description: "lamp on",
        params: &[NAME_LAMP],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassTurnOff",
        description: "lamp off or valve closed",
        params: &[NAME_ANY],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassLightSet",
        description: "lamp brightness",
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
        description: "valve open (approval)",
        params: &[NAME_VALVE],
        needs_approval: true,
    },
    ToolSpec {
        name: "HassGetState",
        description: "read back",
        params: &[],
        needs_approval: false,
    },
    // Not in the firmware: a tool that fails, for `tool-error`.
    ToolSpec {
        name: "Broken",
        description: "always fails",
        params: &[],
        needs_approval: false,
    },
    // Not in the firmware: a result of `len` bytes (quotes included).
    ToolSpec {
        name: "Big",
        description: "a long string",
        params: &[Param {
            key: "len",
            kind: ParamKind::Int { min: 2, max: 4096 },
            required: true,
        }],
        needs_approval: false,
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
enum ToolResult {
    Text(&'static str),
    Int(i64),
    Float(f64),
    Switch {
        name: &'static str,
        state: &'static str,
    },
    Light {
        name: &'static str,
        brightness: u8,
        state: &'static str,
    },
    State {
        lamp: &'static str,
        valve: &'static str,
        leds: u32,
    },
}

/// The lamp and the valve; `safe_states` counts how often the gate made
/// them safe, `verdicts` how often it reached a verdict.
#[derive(Debug, Default)]
struct Home {
    lamp: bool,
    valve: bool,
    safe_states: u32,
    verdicts: u32,
}

impl Home {
    fn lamp_state(&self) -> &'static str {
        if self.lamp {
            "on"
        } else {
            "off"
        }
    }

    fn valve_state(&self) -> &'static str {
        if self.valve {
            "open"
        } else {
            "closed"
        }
    }

    fn switch(&self, target: Target) -> ToolResult {
        let state = match target {
            Target::Lamp => self.lamp_state(),
            Target::Valve => self.valve_state(),
        };
        ToolResult::Switch {
            name: target.name(),
            state,
        }
    }

    fn leds(&self) -> u32 {
        u32::from(self.lamp) | u32::from(self.valve) << 1
    }
}

/// An actuator a call names, as the firmware's `tools::Target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Lamp,
    Valve,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Self::Lamp => "lamp",
            Self::Valve => "valve",
        }
    }

    fn parse(args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        match args.text("name") {
            Some(name) if name == "lamp" => Ok(Self::Lamp),
            Some(name) if name == "valve" => Ok(Self::Valve),
            _ => Err(ArgumentError::NotAChoice("name").into()),
        }
    }
}

/// A number argument, as the firmware's `tools::Number`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Number {
    Int(i32),
    Float(f64),
}

impl Number {
    fn parse(args: &CheckedArguments<'_>, key: &'static str) -> Result<Self, CommandError> {
        match args.get(key) {
            Some(ScalarRef::Int(v)) => i32::try_from(v)
                .map(Self::Int)
                .map_err(|_| ArgumentError::OutOfRange(key).into()),
            Some(ScalarRef::Float(v)) => Ok(Self::Float(v)),
            _ => Err(ArgumentError::WrongType(key).into()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Self::Int(v) => f64::from(v),
            Self::Float(v) => v,
        }
    }
}

/// The calls of [`SPECS`], typed, as the firmware's `tools::Command`, with
/// the two tools the firmware lacks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum HomeCommand {
    Add(Number, Number),
    TurnOn,
    TurnOff(Target),
    LightSet { brightness: u8 },
    ValveOpen,
    GetState,
    Broken,
    Big { len: usize },
}

impl Command for HomeCommand {
    fn parse(tool: usize, args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        Ok(match tool {
            0 => Self::Add(Number::parse(args, "a")?, Number::parse(args, "b")?),
            1 => Self::TurnOn,
            2 => Self::TurnOff(Target::parse(args)?),
            3 => Self::LightSet {
                brightness: args
                    .int("brightness")
                    .and_then(|b| u8::try_from(b).ok())
                    .filter(|b| *b <= 100)
                    .ok_or(ArgumentError::OutOfRange("brightness"))?,
            },
            4 => Self::ValveOpen,
            5 => Self::GetState,
            6 => Self::Broken,
            7 => Self::Big {
                len: args
                    .int("len")
                    .and_then(|len| usize::try_from(len).ok())
                    .filter(|len| *len >= 2)
                    .ok_or(ArgumentError::OutOfRange("len"))?,
            },
            _ => return Err(CommandError::Tool(tool)),
        })
    }
}

impl Actuators for Home {
    type Command = HomeCommand;
    type Result = ToolResult;

    fn execute(&mut self, command: HomeCommand) -> Result<ToolResult, ToolFailure> {
        Ok(match command {
            HomeCommand::Add(Number::Int(a), Number::Int(b)) => {
                ToolResult::Int(i64::from(a) + i64::from(b))
            }
            HomeCommand::Add(a, b) => ToolResult::Float(a.as_f64() + b.as_f64()),
            HomeCommand::TurnOn => {
                self.lamp = true;
                self.switch(Target::Lamp)
            }
            HomeCommand::TurnOff(target) => {
                match target {
                    Target::Lamp => self.lamp = false,
                    Target::Valve => self.valve = false,
                }
                self.switch(target)
            }
            HomeCommand::LightSet { brightness } => {
                self.lamp = brightness > 0;
                ToolResult::Light {
                    name: "lamp",
                    brightness,
                    state: self.lamp_state(),
                }
            }
            HomeCommand::ValveOpen => {
                self.valve = true;
                self.switch(Target::Valve)
            }
            HomeCommand::GetState => ToolResult::State {
                lamp: self.lamp_state(),
                valve: self.valve_state(),
                leds: self.leds(),
            },
            HomeCommand::Broken => return Err(ToolFailure),
            HomeCommand::Big { len } => ToolResult::Text("x".repeat(len - 2).leak()),
        })
    }

    fn safe_state(&mut self) {
        self.lamp = false;
        self.valve = false;
        self.safe_states += 1;
    }

    fn read_back(&mut self) -> u32 {
        self.leds()
    }

    fn on_verdict(&mut self) {
        self.verdicts += 1;
    }

    /// As the firmware: `HassValveOpen` switches the valve (actuator 1) on,
    /// `HassTurnOff` of the valve off.
    fn switches(&self, command: &HomeCommand) -> Switch {
        match command {
            HomeCommand::ValveOpen => Switch::On(1),
            HomeCommand::TurnOff(Target::Valve) => Switch::Off(1),
            _ => Switch::None,
        }
    }

    fn safe_state_of(&mut self, actuator: usize) {
        if actuator == 1 {
            self.valve = false;
        } else {
            self.safe_state();
        }
    }
}

// ---------------------------------------------------------------------------
// The board, simulated: the main loop of `firmware/src/main.rs`.

struct Device {
    gate: DeviceGate<Home, 8>,
    rx: FrameDecoder,
    /// Agent bytes not read yet: the firmware reads none while a call waits
    /// for approval (they wait in the UART).
    inbox: VecDeque<u8>,
    now_ms: u64,
    agent: Vec<u8>,
    console: Vec<u8>,
    run: u32,
}

impl Device {
    fn boot() -> Self {
        let tools = ToolSet::from_specs(&SPECS).expect("the tool table");
        Self {
            gate: DeviceGate::new(Home::default(), tools, Timing::DEFAULT),
            rx: FrameDecoder::new(),
            inbox: VecDeque::new(),
            now_ms: 0,
            agent: Vec::new(),
            console: Vec::new(),
            run: 0,
        }
    }

    /// Boots and starts a run with the firmware's default budgets (8, 4).
    fn started() -> Self {
        let mut device = Self::boot();
        device.start(None);
        device
    }

    fn start(&mut self, budgets: Option<(u32, u32)>) -> u32 {
        let (d, t) = budgets.unwrap_or((8, 4));
        let limits = RunLimits::new(d, t).expect("budgets");
        self.run = self.gate.start(limits, self.now_ms).expect("start");
        self.run
    }

    /// Feeds waiting agent bytes to the gate, as the main loop does.
    fn pump(&mut self) {
        while !self.gate.awaiting_approval() {
            let Some(byte) = self.inbox.pop_front() else {
                return;
            };
            if let Some(frame) = self.rx.push(byte) {
                self.gate
                    .on_frame(frame, self.now_ms, &mut self.agent, &mut self.console)
                    .expect("a Vec takes every byte");
            }
        }
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.inbox.extend(bytes);
        self.pump();
    }

    fn send_frame(&mut self, payload: &str) {
        self.send_bytes(&frame(payload.as_bytes()));
    }

    /// The next reply frame's verified payload, if one was written.
    fn try_read_frame(&mut self) -> Option<String> {
        let end = self.agent.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.agent.drain(..=end).collect();
        let payload = link::verify(&line[..end]).expect("a sealed reply");
        Some(String::from_utf8(payload.to_vec()).expect("UTF-8 reply"))
    }

    fn read_frame(&mut self) -> String {
        self.try_read_frame().expect("a reply")
    }

    fn read_console_line(&mut self) -> String {
        let end = self
            .console
            .iter()
            .position(|&b| b == b'\n')
            .expect("a console line");
        let line: Vec<u8> = self.console.drain(..=end).collect();
        String::from_utf8(line[..end].to_vec()).expect("UTF-8 line")
    }

    fn request(&mut self, payload: &str) -> String {
        self.send_frame(payload);
        let reply = self.read_frame();
        assert_eq!(self.try_read_frame(), None, "one reply to {payload:?}");
        reply
    }

    fn propose(&mut self, json: &str) -> String {
        self.request(&format!("PROPOSE {json}"))
    }

    fn status(&mut self) -> String {
        self.request("STATUS")
    }

    fn answer(&mut self, answer: Answer) -> bool {
        let answered = self
            .gate
            .on_answer(answer, self.now_ms, &mut self.agent, &mut self.console)
            .expect("a Vec takes every byte");
        self.pump();
        answered
    }

    /// Moves the clock on and lets the gate see it.
    fn wait(&mut self, ms: u64) {
        self.now_ms += ms;
        self.gate
            .poll(self.now_ms, &mut self.agent, &mut self.console)
            .expect("a Vec takes every byte");
        self.pump();
    }

    fn leds(&self) -> u32 {
        self.gate.actuators().leds()
    }

    // The replies of docs/PROTOCOL.md, as `qemu_gate.rs` spells them.

    fn observation(
        &self,
        step: u8,
        call_id: &str,
        name: &str,
        executed: bool,
        data: &str,
    ) -> String {
        let ok = !data.starts_with('"');
        let run = self.run;
        format!(
            r#"{{"type":"observation","run":{run},"step":{step},"call_id":"{call_id}","name":"{name}","executed":{executed},"ok":{ok},"data":{data}}}"#
        )
    }

    fn ran(&self, step: u8, call_id: &str, name: &str, data: &str) -> String {
        self.observation(step, call_id, name, true, data)
    }

    fn refused(&self, step: u8, call_id: &str, name: &str, word: &str) -> String {
        self.observation(step, call_id, name, false, &format!("\"{word}\""))
    }

    fn stopped(&self, step: u8, status: &str) -> String {
        let run = self.run;
        format!(r#"{{"type":"stopped","run":{run},"step":{step},"status":"{status}"}}"#)
    }

    fn status_is(&self, decisions: u8, max_d: u8, attempts: u8, max_t: u8, state: &str) -> String {
        self.status_with(decisions, max_d, attempts, max_t, state, 0)
    }

    fn status_with(
        &self,
        decisions: u8,
        max_d: u8,
        attempts: u8,
        max_t: u8,
        state: &str,
        actuators: u32,
    ) -> String {
        let run = self.run;
        format!(
            r#"{{"type":"status","run":{run},"decisions":{decisions},"max_decisions":{max_d},"tool_attempts":{attempts},"max_tool_calls":{max_t},"state":"{state}","actuators":{actuators}}}"#
        )
    }
}

fn error(word: &str) -> String {
    format!(r#"{{"type":"error","error":"{word}"}}"#)
}

fn tool(call_id: &str, name: &str, arguments: &str) -> String {
    format!(r#"{{"kind":"tool","call_id":"{call_id}","name":"{name}","arguments":{arguments}}}"#)
}

fn add(call_id: &str) -> String {
    tool(call_id, "add", r#"{"a":7,"b":8}"#)
}

fn final_(text: &str) -> String {
    format!(r#"{{"kind":"final","text":"{text}"}}"#)
}

fn valve(call_id: &str) -> String {
    tool(call_id, "HassValveOpen", r#"{"name":"valve"}"#)
}

fn valve_prompt(call_id: &str) -> String {
    format!(r#"approve? {call_id} HassValveOpen {{"name":"valve"}} [y/n]"#)
}

const LAMP: &str = r#"{"name":"lamp"}"#;

// ---------------------------------------------------------------------------

#[test]
fn idle_until_the_operator_starts_a_run() {
    let mut d = Device::boot();
    assert_eq!(
        d.request("HELLO"),
        r#"{"type":"hello","protocol":2,"frame_max":1024}"#
    );
    assert_eq!(d.status(), d.status_is(0, 8, 0, 4, "idle"));
    assert_eq!(d.propose(&add("c1")), error("no-run"));
    assert_eq!(d.gate.snapshot(0), None);
    assert_eq!(d.leds(), 0);
    assert_eq!(d.gate.actuators().safe_states, 1, "safe at boot");

    assert_eq!(d.start(None), 1);
    assert_eq!(d.status(), d.status_is(0, 8, 0, 4, "running"));
    let snapshot = d.gate.snapshot(1_000).expect("a run");
    assert_eq!(
        (
            snapshot.run,
            snapshot.state,
            snapshot.time_left_ms,
            snapshot.approval
        ),
        (1, "running", 119_000, None)
    );
}

/// SPEC A2, first worked example, and the run id in every reply.
#[test]
fn worked_example_add_then_final_with_run_ids() {
    let mut d = Device::started();
    assert_eq!(d.propose(&add("c1")), d.ran(0, "c1", "add", "15"));
    assert_eq!(d.propose(&final_("15")), d.stopped(1, "final"));
    assert_eq!(d.status(), d.status_is(2, 8, 1, 4, "final"));
    assert_eq!(d.propose(&add("c2")), error("run-stopped"));
    // A second run: every reply names run 2.
    assert_eq!(d.start(None), 2);
    assert_eq!(d.propose(&add("c1")), d.ran(0, "c1", "add", "15"));
    assert!(d.status().contains(r#""run":2,"#));
    assert_eq!(d.propose(&final_("15")), d.stopped(1, "final"));
}

#[test]
fn add_takes_integers_and_floats() {
    let mut d = Device::started();
    let args = [
        (r#"{"a":-1000000,"b":1000000}"#, "0"),
        (r#"{"a":2.5,"b":4}"#, "6.5"),
        (r#"{"a":1e-5,"b":0.0}"#, "1e-05"),
    ];
    for (step, (args, sum)) in args.into_iter().enumerate() {
        let id = format!("s{step}");
        assert_eq!(
            d.propose(&tool(&id, "add", args)),
            d.ran(step as u8, &id, "add", sum)
        );
    }
    assert_eq!(
        d.propose(&tool("b", "add", r#"{"a":true,"b":1}"#)),
        d.refused(3, "b", "add", "invalid-arguments")
    );
}

#[test]
fn invalid_arguments_count_an_attempt_and_move_nothing() {
    let mut d = Device::started();
    let cases = [
        ("HassLightSet", r#"{"name":"lamp","brightness":150}"#),
        ("HassLightSet", r#"{"name":"lamp","brightness":40.0}"#),
        ("HassTurnOn", r#"{"name":"valve"}"#),
    ];
    for (step, (name, args)) in cases.iter().enumerate() {
        let id = format!("x{step}");
        assert_eq!(
            d.propose(&tool(&id, name, args)),
            d.refused(step as u8, &id, name, "invalid-arguments")
        );
    }
    assert_eq!(d.leds(), 0, "no actuator moved");
    assert_eq!(d.status(), d.status_is(3, 8, 3, 4, "running"));
    assert_eq!(
        d.propose(&tool("x3", "HassGetState", "{}")),
        d.ran(
            3,
            "x3",
            "HassGetState",
            r#"{"lamp":"off","valve":"closed","leds":0}"#
        )
    );
}

#[test]
fn unknown_tool_is_counted_but_not_executed() {
    let mut d = Device::started();
    assert_eq!(
        d.propose(&tool("v", "HassVacuumStart", "{}")),
        d.refused(0, "v", "HassVacuumStart", "unknown-tool")
    );
    assert_eq!(d.status(), d.status_is(1, 8, 1, 4, "running"));
}

#[test]
fn a_failing_tool_is_a_tool_error_and_was_executed() {
    let mut d = Device::started();
    assert_eq!(
        d.propose(&tool("b", "Broken", "{}")),
        d.observation(0, "b", "Broken", true, r#""tool-error""#)
    );
    assert_eq!(d.status(), d.status_is(1, 8, 1, 4, "running"));
}

#[test]
fn approval_granted_opens_the_valve() {
    let mut d = Device::started();
    d.send_frame(&format!("PROPOSE {}", valve("water")));
    assert_eq!(d.read_console_line(), valve_prompt("water"));
    assert_eq!(
        d.try_read_frame(),
        None,
        "nothing answered before the operator"
    );
    assert_eq!(d.leds(), 0);
    assert_eq!(
        d.gate.snapshot(d.now_ms).and_then(|s| s.approval),
        Some("water")
    );
    assert_eq!(
        d.gate.start(RunLimits::DEFAULT, 0),
        Err(StartError::ApprovalPending)
    );
    assert!(d.answer(Answer::Approve));
    assert_eq!(d.read_console_line(), "approved water");
    assert_eq!(
        d.read_frame(),
        d.ran(
            0,
            "water",
            "HassValveOpen",
            r#"{"name":"valve","state":"open"}"#
        )
    );
    assert_eq!(d.leds(), 0b10);
    assert_eq!(
        d.propose(&tool("shut", "HassTurnOff", r#"{"name":"valve"}"#)),
        d.ran(
            1,
            "shut",
            "HassTurnOff",
            r#"{"name":"valve","state":"closed"}"#
        ),
        "closing the valve needs no approval"
    );
    assert!(!d.answer(Answer::Approve), "no approval pending");
}

#[test]
fn approval_denied_leaves_the_valve_closed() {
    let mut d = Device::started();
    d.send_frame(&format!("PROPOSE {}", valve("water")));
    assert_eq!(d.read_console_line(), valve_prompt("water"));
    assert!(d.answer(Answer::Refuse));
    assert_eq!(d.read_console_line(), "denied water");
    assert_eq!(
        d.read_frame(),
        d.refused(0, "water", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.leds(), 0, "the valve did not move");
    assert_eq!(d.status(), d.status_is(1, 8, 1, 4, "running"));
    assert_eq!(
        d.propose(&final_("valve stays shut")),
        d.stopped(1, "final")
    );
}

#[test]
fn approval_timeout_is_a_refusal_and_queued_frames_are_answered_in_order() {
    let mut d = Device::started();
    d.gate.set_approval_timeout(300);
    d.send_frame(&format!("PROPOSE {}", valve("water")));
    // Pipelined behind the proposal: it waits until the approval is settled.
    d.send_frame("STATUS");
    assert_eq!(d.read_console_line(), valve_prompt("water"));
    d.wait(299);
    assert_eq!(d.try_read_frame(), None, "not yet");
    d.wait(1);
    assert_eq!(d.read_console_line(), "denied water (timeout)");
    assert_eq!(
        d.read_frame(),
        d.refused(0, "water", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.read_frame(), d.status_is(1, 8, 1, 4, "running"));
    assert_eq!(d.leds(), 0, "the valve did not move");
}

/// SPEC C, the approval timeout (issue 11, one approval state machine): an
/// approval read at or after the prompt's deadline is a timeout even when
/// the clock's poll has not refused the call yet (a main loop may read the
/// key before it polls); one just before the deadline runs the call. A
/// "later" keeps the prompt waiting.
#[test]
fn an_approval_at_the_deadline_is_a_timeout_before_any_poll() {
    let mut d = Device::started();
    d.gate.set_approval_timeout(300);
    d.send_frame(&format!("PROPOSE {}", valve("late")));
    assert_eq!(d.read_console_line(), valve_prompt("late"));
    d.now_ms += 300; // no poll
    assert!(d.answer(Answer::Later), "a prompt was pending");
    assert_eq!(d.read_console_line(), "denied late (timeout)");
    assert_eq!(
        d.read_frame(),
        d.refused(0, "late", "HassValveOpen", "approval-denied")
    );
    assert!(!d.answer(Answer::Approve), "nothing pending any more");
    assert_eq!(d.leds(), 0, "the valve did not move");

    d.send_frame(&format!("PROPOSE {}", valve("late2")));
    assert_eq!(d.read_console_line(), valve_prompt("late2"));
    d.now_ms += 300; // no poll
    assert!(d.answer(Answer::Approve));
    assert_eq!(d.read_console_line(), "denied late2 (timeout)");
    assert_eq!(
        d.read_frame(),
        d.refused(1, "late2", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.leds(), 0, "a late approval moved nothing");

    d.send_frame(&format!("PROPOSE {}", valve("in-time")));
    assert_eq!(d.read_console_line(), valve_prompt("in-time"));
    d.now_ms += 299;
    assert!(d.answer(Answer::Later));
    assert!(d.gate.awaiting_approval(), "later: still asked");
    assert_eq!(d.try_read_frame(), None);
    assert!(d.answer(Answer::Approve));
    assert_eq!(d.read_console_line(), "approved in-time");
    assert_eq!(
        d.read_frame(),
        d.ran(
            2,
            "in-time",
            "HassValveOpen",
            r#"{"name":"valve","state":"open"}"#
        )
    );
    assert_eq!(d.leds(), 0b10, "approved in time: the valve opened");
}

/// Found by a hostile trial on the device: an approval after the time
/// budget opened the valve. It is refused for time and the run stops.
#[test]
fn an_approval_after_the_time_budget_moves_nothing() {
    let mut d = Device::boot();
    d.gate.set_approval_timeout(5_000);
    d.gate.set_time_budget(300);
    d.start(None);
    d.send_frame(&format!("PROPOSE {}", valve("water")));
    assert_eq!(d.read_console_line(), valve_prompt("water"));
    d.wait(400);
    assert!(d.answer(Answer::Approve));
    assert_eq!(d.read_console_line(), "approved water");
    assert_eq!(
        d.read_console_line(),
        "too late: the run's time budget ran out; not executed"
    );
    assert_eq!(
        d.read_frame(),
        d.refused(0, "water", "HassValveOpen", "time-budget")
    );
    assert_eq!(d.read_frame(), d.stopped(0, "time-budget"));
    assert_eq!(d.leds(), 0, "the valve did not move");
    assert_eq!(d.propose(&final_("done")), error("run-stopped"));
}

#[test]
fn time_budget_stops_the_run_when_it_passes() {
    let mut d = Device::started();
    d.gate.set_time_budget(500);
    assert_eq!(d.propose(&add("c1")), d.ran(0, "c1", "add", "15"));
    assert_eq!(
        d.propose(&tool("on", "HassTurnOn", LAMP)),
        d.ran(1, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
    );
    assert_eq!(d.status(), d.status_with(2, 8, 2, 4, "running", 1));
    d.wait(499);
    assert_eq!(d.leds(), 1, "not yet");
    d.wait(1);
    // The run stops when its time passes, not at the next proposal.
    assert_eq!(d.leds(), 0, "the time budget made every actuator safe");
    assert_eq!(d.status(), d.status_is(2, 8, 2, 4, "time-budget"));
    // A later deadline does not revive it, nor gives it time left.
    d.gate.set_time_budget(60_000);
    assert_eq!(d.gate.snapshot(d.now_ms).map(|s| s.time_left_ms), Some(0));
    assert_eq!(d.propose(&final_("15")), d.stopped(2, "time-budget"));
    assert_eq!(d.status(), d.status_is(2, 8, 2, 4, "time-budget"));
    assert_eq!(d.propose(&final_("15")), error("run-stopped"));
    d.start(None);
    assert_eq!(d.propose(&final_("15")), d.stopped(0, "final"));
}

/// Without a poll in between, the proposal itself finds the time passed.
#[test]
fn time_budget_is_checked_before_each_decision() {
    let mut d = Device::started();
    d.gate.set_time_budget(100);
    d.now_ms += 100;
    assert_eq!(d.propose(&add("c1")), d.stopped(0, "time-budget"));
    // The stop on time is no decision round: the trace has no row for it.
    assert_eq!(d.status(), d.status_is(0, 8, 0, 4, "time-budget"));
    assert_eq!(d.propose(&add("c1")), error("run-stopped"));
}

#[test]
fn duplicate_call_id_stops_the_run() {
    let mut d = Device::started();
    assert_eq!(d.propose(&add("c1")), d.ran(0, "c1", "add", "15"));
    assert_eq!(
        d.propose(&tool("c1", "HassGetState", "{}")),
        d.stopped(1, "duplicate-call")
    );
    assert_eq!(d.status(), d.status_is(2, 8, 1, 4, "duplicate-call"));
    assert_eq!(d.propose(&add("c2")), error("run-stopped"));
}

#[test]
fn tool_budget_stops_the_fifth_attempt() {
    let mut d = Device::started();
    for i in 0..4u8 {
        let id = format!("c{i}");
        assert_eq!(d.propose(&add(&id)), d.ran(i, &id, "add", "15"));
    }
    assert_eq!(d.propose(&add("c4")), d.stopped(4, "tool-budget"));
    assert_eq!(d.status(), d.status_is(5, 8, 4, 4, "tool-budget"));
    assert_eq!(d.propose(&final_("15")), error("run-stopped"));
}

#[test]
fn decision_budget_and_the_contract_examples() {
    let mut d = Device::boot();
    d.start(Some((1, 4)));
    d.send_frame(&format!("PROPOSE {}", add("c1")));
    assert_eq!(d.read_frame(), d.ran(0, "c1", "add", "15"));
    assert_eq!(d.read_frame(), d.stopped(0, "decision-budget"));
    assert_eq!(d.status(), d.status_is(1, 1, 1, 4, "decision-budget"));

    d.start(Some((3, 1)));
    assert_eq!(d.propose(&add("c0")), d.ran(0, "c0", "add", "15"));
    assert_eq!(d.propose(&add("c1")), d.stopped(1, "tool-budget"));
    assert_eq!(d.status(), d.status_is(2, 3, 1, 1, "tool-budget"));
}

#[test]
fn a_stopped_run_leaves_every_actuator_in_its_safe_state() {
    let mut d = Device::started();
    assert_eq!(
        d.propose(&tool("on", "HassTurnOn", LAMP)),
        d.ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
    );
    d.send_frame(&format!("PROPOSE {}", valve("water")));
    assert_eq!(d.read_console_line(), valve_prompt("water"));
    assert!(d.answer(Answer::Approve));
    assert_eq!(d.read_console_line(), "approved water");
    assert_eq!(
        d.read_frame(),
        d.ran(
            1,
            "water",
            "HassValveOpen",
            r#"{"name":"valve","state":"open"}"#
        )
    );
    assert_eq!(d.leds(), 0b11);
    assert_eq!(d.status(), d.status_with(2, 8, 2, 4, "running", 0b11));
    assert_eq!(d.propose(&add("a")), d.ran(2, "a", "add", "15"));
    assert_eq!(d.propose(&add("b")), d.ran(3, "b", "add", "15"));
    assert_eq!(d.propose(&add("c")), d.stopped(4, "tool-budget"));
    assert_eq!(
        d.leds(),
        0,
        "the stop closed the valve and turned the lamp off"
    );
    assert_eq!(
        d.propose(&tool("off", "HassTurnOff", r#"{"name":"valve"}"#)),
        error("run-stopped")
    );

    let stops = [
        (final_("done"), "final"),
        (tool("on", "HassGetState", "{}"), "duplicate-call"),
        (r#"{"kind":"tool"}"#.to_owned(), "policy-error"),
    ];
    for (proposal, status_word) in stops {
        d.start(None);
        assert_eq!(
            d.propose(&tool("on", "HassTurnOn", LAMP)),
            d.ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
        );
        assert_eq!(d.leds(), 1);
        let safe_before = d.gate.actuators().safe_states;
        assert_eq!(d.propose(&proposal), d.stopped(1, status_word));
        assert_eq!(d.leds(), 0, "{status_word}");
        assert_eq!(d.gate.actuators().safe_states, safe_before + 1);
        assert_eq!(d.status(), d.status_is(2, 8, 1, 4, status_word));
    }
    d.start(Some((1, 4)));
    d.send_frame(&format!("PROPOSE {}", tool("on", "HassTurnOn", LAMP)));
    assert_eq!(
        d.read_frame(),
        d.ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
    );
    assert_eq!(d.read_frame(), d.stopped(0, "decision-budget"));
    assert_eq!(d.leds(), 0, "decision-budget");
}

#[test]
fn invalid_proposals_are_policy_errors() {
    let mut d = Device::started();
    assert_eq!(
        d.propose(r#"{"kind":"tool","call_id":"c1","name":"add"}"#),
        d.stopped(0, "policy-error")
    );
    d.start(None);
    assert_eq!(d.propose(&final_(&"x".repeat(900))), d.stopped(0, "final"));
    d.start(None);
    assert_eq!(
        d.propose(r#"{"kind":"final","text":"x","kind":"final"}"#),
        d.stopped(0, "policy-error")
    );
}

#[test]
fn corrupted_frames_use_no_decision() {
    let mut d = Device::started();
    let verdicts = d.gate.actuators().verdicts;
    let good = frame(format!("PROPOSE {}", add("c1")).as_bytes());
    let mut flipped = good.clone();
    flipped[20] ^= 0x01;
    d.send_bytes(&flipped);
    assert_eq!(d.read_frame(), error("bad-checksum"));
    let mut bad_crc = good.clone();
    let digit = bad_crc.len() - 2;
    bad_crc[digit] = if bad_crc[digit] == b'0' { b'1' } else { b'0' };
    d.send_bytes(&bad_crc);
    assert_eq!(d.read_frame(), error("bad-checksum"));
    d.send_bytes(b"STATUS\n");
    assert_eq!(d.read_frame(), error("missing-checksum"));
    d.send_bytes(b"STATUS*8bf8a29a\n");
    assert_eq!(d.read_frame(), error("malformed-checksum"));
    let long = vec![b'z'; FRAME_MAX + 1];
    d.send_bytes(&long);
    d.send_bytes(b"\n");
    assert_eq!(d.read_frame(), error("frame-too-long"));
    for payload in [&b"\x00"[..], b"\xff\xfe", b"PROPOSE\x00{}"] {
        d.send_bytes(&frame(payload));
        assert_eq!(d.read_frame(), error("unknown-request"), "{payload:?}");
    }
    assert_eq!(d.status(), d.status_is(0, 8, 0, 4, "running"));
    assert_eq!(
        d.gate.actuators().verdicts,
        verdicts,
        "no verdict was reached"
    );
    let mut crlf = good.clone();
    crlf.insert(crlf.len() - 1, b'\r');
    d.send_bytes(&crlf);
    assert_eq!(d.read_frame(), d.ran(0, "c1", "add", "15"));
    assert_eq!(d.gate.actuators().verdicts, verdicts + 1);
}

#[test]
fn the_agent_link_cannot_reset_the_budget() {
    let mut d = Device::started();
    assert_eq!(d.propose(&add("c1")), d.ran(0, "c1", "add", "15"));
    let before = d.status();
    assert_eq!(d.request("RESET"), error("not-permitted"));
    for other in ["reset", "RESET ", "START", "PROPOSE", "status"] {
        assert_eq!(d.request(other), error("unknown-request"), "{other:?}");
    }
    assert_eq!(d.status(), before, "nothing changed");
    assert_eq!(d.propose(&add("c1")), d.stopped(1, "duplicate-call"));
}

/// The gate's trace is the run's (`SPEC A2`): refused and unknown attempts
/// are rows that did not execute.
#[test]
fn the_trace_says_what_ran() {
    let mut d = Device::started();
    d.propose(&add("a"));
    d.propose(&tool(
        "b",
        "HassLightSet",
        r#"{"name":"lamp","brightness":101}"#,
    ));
    d.propose(&tool("c", "nope", "{}"));
    let executed: Vec<bool> = d
        .gate
        .trace()
        .iter()
        .map(|row| matches!(row, budgetgate_core::TraceRow::Tool { executed: true, .. }))
        .collect();
    assert_eq!(executed, [true, false, false]);
}

/// A console that cannot be written (a full buffer here, a broken serial
/// line on a board) loses its lines, never a call's answer: the refusal is
/// still written to the agent link and the run goes on. (Before the gate
/// moved into the core, a failed `denied` line returned early with the call
/// taken off the prompt but never settled, and every later proposal was an
/// `internal-error`.)
#[test]
fn a_console_that_cannot_be_written_never_leaves_a_call_unanswered() {
    use budgetgate_core::device::IoError;
    let mut d = Device::started();
    let mut full: [u8; 0] = [];
    let payload = frame(format!("PROPOSE {}", valve("water")).as_bytes());
    let mut result = Ok(());
    for &byte in &payload {
        if let Some(line) = d.rx.push(byte) {
            result = d.gate.on_frame(line, 0, &mut d.agent, &mut &mut full[..]);
        }
    }
    assert!(matches!(result, Err(IoError::Console(_))), "{result:?}");
    assert!(d.gate.awaiting_approval(), "the call waits all the same");
    let answered = d
        .gate
        .on_answer(Answer::Refuse, 10, &mut d.agent, &mut &mut full[..]);
    assert!(matches!(answered, Err(IoError::Console(_))), "{answered:?}");
    assert_eq!(
        d.read_frame(),
        d.refused(0, "water", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.status(), d.status_is(1, 8, 1, 4, "running"));
    assert_eq!(d.propose(&add("c1")), d.ran(1, "c1", "add", "15"));
    // The approval timeout settles a call whose prompt was lost too.
    for &byte in &frame(format!("PROPOSE {}", valve("w2")).as_bytes()) {
        if let Some(line) = d.rx.push(byte) {
            let _ = d.gate.on_frame(line, 20, &mut d.agent, &mut &mut full[..]);
        }
    }
    let polled = d.gate.poll(20 + 30_000, &mut d.agent, &mut &mut full[..]);
    assert!(matches!(polled, Err(IoError::Console(_))), "{polled:?}");
    assert_eq!(
        d.read_frame(),
        d.refused(2, "w2", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.leds(), 0);
}

/// The tool table refuses what a run could not register, before any gate
/// exists: more specs than its capacity, a repeated name.
#[test]
fn the_tool_table_is_checked_before_the_gate() {
    use budgetgate_core::ToolSetError;
    assert_eq!(
        ToolSet::<2>::from_specs(&SPECS).map(|_| ()),
        Err(ToolSetError::Full)
    );
    static TWICE: [ToolSpec; 2] = [SPECS[0], SPECS[0]];
    assert_eq!(
        ToolSet::<8>::from_specs(&TWICE).map(|_| ()),
        Err(ToolSetError::Duplicate)
    );
    let table = ToolSet::<8>::from_specs(&SPECS).expect("eight fit eight");
    assert_eq!(table.table().len(), 8);
}

/// A result the contract allows (at most 4096 bytes) that one reply frame
/// cannot carry is a `tool-error` on the device, in the run's trace as on
/// the wire: before, the run counted it `ok` and the agent got an
/// `internal-error` instead of its observation.
#[test]
fn a_result_too_large_for_a_frame_is_a_tool_error_in_the_trace_too() {
    use budgetgate_core::TraceRow;
    let mut d = Device::started();
    let fits = d.propose(&tool("s", "Big", r#"{"len":800}"#));
    // (The helper takes a quoted value for an error word; this one is a result.)
    let text = "x".repeat(798);
    assert_eq!(
        fits,
        d.observation(0, "s", "Big", true, &format!("\"{text}\""))
            .replace(r#""ok":false"#, r#""ok":true"#)
    );
    assert_eq!(
        d.propose(&tool("l", "Big", r#"{"len":2000}"#)),
        d.observation(1, "l", "Big", true, r#""tool-error""#)
    );
    let ok: Vec<bool> = d
        .gate
        .trace()
        .iter()
        .map(|row| matches!(row, TraceRow::Tool { ok: true, .. }))
        .collect();
    assert_eq!(ok, [true, false]);
    assert_eq!(d.status(), d.status_is(2, 8, 2, 4, "running"));
}

/// The dead-man switch (issue 15): with an actuator out of its safe state
/// and no valid frame for the configured time, the gate drives every
/// actuator safe, says so on the console, and refuses proposals
/// (`dead-man`) until the operator starts a run. The host crashing must not
/// leave the valve open.
#[test]
fn the_dead_man_switch_makes_actuators_safe_when_the_host_goes_quiet() {
    let mut d = Device::started();
    d.gate.set_dead_man(1_000);
    assert_eq!(
        d.propose(&tool("on", "HassTurnOn", LAMP)),
        d.ran(0, "on", "HassTurnOn", r#"{"name":"lamp","state":"on"}"#)
    );
    d.wait(999);
    assert_eq!(d.leds(), 1, "not yet");
    d.wait(1);
    assert_eq!(d.leds(), 0, "the dead-man made every actuator safe");
    assert!(d.read_console_line().starts_with("dead-man:"));
    assert_eq!(d.status(), d.status_is(1, 8, 1, 4, "dead-man"));
    assert_eq!(d.propose(&final_("x")), error("dead-man"));
    d.start(None);
    assert_eq!(d.propose(&final_("x")), d.stopped(0, "final"));
}

/// The dead-man switch is fed by every valid frame (a host with nothing to
/// propose sends STATUS), not by a damaged one; it is not armed while every
/// actuator is safe, nor while a call waits for the operator.
#[test]
fn the_dead_man_switch_is_fed_by_valid_frames_only_and_armed_only_when_needed() {
    let mut d = Device::started();
    d.gate.set_dead_man(1_000);
    d.wait(5_000);
    assert_eq!(
        d.status(),
        d.status_is(0, 8, 0, 4, "running"),
        "nothing moved: not armed"
    );
    d.propose(&tool("on", "HassTurnOn", LAMP));
    d.wait(900);
    d.status();
    d.wait(900);
    assert_eq!(d.leds(), 1, "fed by STATUS 900 ms ago");
    let mut damaged = frame(b"STATUS");
    damaged[0] ^= 0x20;
    d.send_bytes(&damaged);
    assert_eq!(d.read_frame(), error("bad-checksum"));
    d.wait(100);
    assert_eq!(d.leds(), 0, "a damaged frame does not feed it");
    assert!(d.read_console_line().starts_with("dead-man:"));
    // While a call waits for the operator, the operator is there.
    d.start(None);
    d.propose(&tool("on", "HassTurnOn", LAMP));
    d.send_frame(&format!("PROPOSE {}", valve("v1")));
    assert_eq!(d.read_console_line(), valve_prompt("v1"));
    d.wait(5_000);
    assert_eq!(d.leds(), 1, "not while the operator is asked");
    d.answer(Answer::Refuse);
    d.read_frame();
    d.wait(999);
    assert_eq!(d.leds(), 1, "counted from the answer");
    d.wait(1);
    assert_eq!(d.leds(), 0);
}

/// Physical approval (issue 15): two debounced keys answer the prompt. A
/// press is the key down and steady for the debounce time after it was seen
/// up; bounces are one press, a key held from before answers nothing, and
/// both keys at once answer nothing (no guess). QEMU models no buttons, so
/// the path is tested here, through the gate.
#[test]
fn debounced_keys_answer_the_approval_prompt() {
    use budgetgate_core::device::ApprovalKeys;
    let mut keys = ApprovalKeys::new(20);
    // Held at boot: nothing, however long.
    for t in (0..200).step_by(10) {
        assert_eq!(keys.sample(true, false, t), None);
    }
    // Released, then a bouncing press: one approval, when it is steady.
    assert_eq!(keys.sample(false, false, 200), None);
    assert_eq!(keys.sample(false, false, 220), None);
    for (t, level) in [(230, true), (232, false), (234, true), (250, true)] {
        assert_eq!(keys.sample(level, false, t), None, "at {t} ms");
    }
    assert_eq!(keys.sample(true, false, 254), Some(Answer::Approve));
    assert_eq!(keys.sample(true, false, 400), None, "one press, one answer");
    // Both keys down: no answer.
    assert_eq!(keys.sample(false, false, 500), None);
    assert_eq!(keys.sample(false, false, 520), None);
    assert_eq!(keys.sample(true, true, 530), None);
    assert_eq!(keys.sample(true, true, 560), None);
    // The deny key, through the gate: the valve stays closed.
    let mut d = Device::started();
    d.send_frame(&format!("PROPOSE {}", valve("v1")));
    assert_eq!(d.read_console_line(), valve_prompt("v1"));
    let mut keys = ApprovalKeys::new(20);
    let mut answer = None;
    for (t, deny) in [(0, false), (20, false), (30, true), (50, true)] {
        answer = answer.or(keys.sample(false, deny, t));
    }
    assert_eq!(answer, Some(Answer::Refuse));
    assert!(d.answer(answer.expect("the deny key")));
    assert_eq!(
        d.read_frame(),
        d.refused(0, "v1", "HassValveOpen", "approval-denied")
    );
    assert_eq!(d.leds(), 0);
}

/// Issue 15 (duty windows, with the firmware's tools and approval): the
/// valve opened with the operator's approval is closed by `poll` the instant
/// its window is spent (the lamp stays on, the run goes on); the next
/// `HassValveOpen` is refused `duty-limit` without a prompt, with when it may
/// open again; closing it is never refused.
#[test]
fn the_valves_duty_window_closes_it_and_refuses_the_next_opening() {
    let mut d = Device::started();
    d.gate.set_duty_window(1, 10_000, 500).expect("a window");
    d.propose(&tool("on", "HassTurnOn", LAMP));
    d.send_frame(&format!("PROPOSE {}", valve("v1")));
    assert_eq!(d.read_console_line(), valve_prompt("v1"));
    d.wait(100);
    d.answer(Answer::Approve);
    d.read_console_line();
    assert!(d.read_frame().contains(r#""executed":true"#));
    assert_eq!(d.leds(), 3);
    d.wait(499);
    assert_eq!(d.leds(), 3, "not yet");
    d.wait(1);
    assert_eq!(d.leds(), 1, "the valve closed at 500 ms open, the lamp on");
    assert_eq!(
        d.read_console_line(),
        "duty: actuator 1 spent its duty window; driven to its safe state"
    );
    d.wait(400);
    assert_eq!(
        d.propose(&valve("v2")),
        format!(
            r#"{{"type":"observation","run":1,"step":2,"call_id":"v2","name":"HassValveOpen","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":9101}}"#
        )
    );
    assert!(d.console.is_empty(), "no prompt");
    assert!(d
        .propose(&tool("off", "HassTurnOff", r#"{"name":"valve"}"#))
        .contains(r#""executed":true"#));
    assert_eq!(d.status(), d.status_with(4, 8, 4, 4, "running", 1));
}

/// Issue 15, duty windows set again (an operator's console): the on-time
/// already counted is kept, so setting the same window again gives nothing
/// back; a tighter maximum applies at once to it (the next poll drives the
/// open valve safe); a longer window is refused while on-time is counted,
/// and any window is taken while none is.
#[test]
fn a_duty_window_set_again_keeps_the_on_time_it_counted() {
    let mut d = Device::started();
    d.gate.set_duty_window(1, 10_000, 500).expect("a window");
    assert_eq!(
        d.gate.set_duty_window(1, 20_000, 500),
        Ok(()),
        "no history yet"
    );
    d.gate
        .set_duty_window(1, 10_000, 500)
        .expect("the same again");
    d.send_frame(&format!("PROPOSE {}", valve("v1")));
    d.read_console_line();
    d.answer(Answer::Approve);
    d.read_console_line();
    assert!(d.read_frame().contains(r#""executed":true"#));
    d.wait(300);
    assert_eq!(d.gate.duty_on_time(1, d.now_ms), Some(300));
    // The same window again: 300 ms stay counted, the valve stays open.
    d.gate
        .set_duty_window(1, 10_000, 500)
        .expect("the same again");
    assert_eq!(d.gate.duty_on_time(1, d.now_ms), Some(300));
    assert_eq!(
        d.gate.set_duty_window(1, 10_001, 500),
        Err(DutyError::Longer)
    );
    assert_eq!(d.gate.duty_window(1).map(|w| w.window_ms()), Some(10_000));
    // Tighter than what was counted: the next poll closes the valve.
    d.gate
        .set_duty_window(1, 5_000, 200)
        .expect("a tighter window");
    assert_eq!(d.leds(), 0b10);
    d.wait(1);
    assert_eq!(d.leds(), 0, "spent at once under the tighter maximum");
    assert_eq!(
        d.read_console_line(),
        "duty: actuator 1 spent its duty window; driven to its safe state"
    );
    assert!(d.propose(&valve("v2")).contains(r#""data":"duty-limit""#));
    assert_eq!(
        DutyError::Longer.to_string(),
        "a duty window that has counted on-time cannot be made longer (the on-time before it is no longer kept)"
    );
}

/// The device gate's errors, as a board logs them: each says what failed.
#[test]
fn the_device_gates_errors_say_what_failed() {
    use budgetgate_core::device::{IoError, JournalFailure, StartError, ToolFailure};
    assert_eq!(ToolFailure.to_string(), "the tool failed");
    assert_eq!(
        JournalFailure.to_string(),
        "the gate's state could not be stored"
    );
    assert_eq!(
        StartError::ApprovalPending.to_string(),
        "an approval prompt is waiting for its answer"
    );
    assert_eq!(
        StartError::Storage.to_string(),
        "the new run could not be stored"
    );
    let agent: IoError<&str, &str> = IoError::Agent("broken pipe");
    assert_eq!(
        agent.to_string(),
        "agent link write failed: \"broken pipe\""
    );
    let console: IoError<&str, &str> = IoError::Console("full");
    assert_eq!(console.to_string(), "console write failed: \"full\"");
}

/// The console's settings reach the gate's clocks, and `timing` reads them
/// back (`SPEC C`: the time budget and the approval timeout; the dead-man
/// switch).
#[test]
fn the_clocks_settings_are_read_back_as_set() {
    let mut device = Device::boot();
    let gate = &mut device.gate;
    assert_eq!(gate.timing(), Timing::DEFAULT);
    gate.set_approval_timeout(5_000);
    gate.set_time_budget(7_000);
    gate.set_dead_man(9_000);
    assert_eq!(
        gate.timing(),
        Timing {
            time_budget_ms: 7_000,
            approval_timeout_ms: 5_000,
            dead_man_ms: 9_000,
        }
    );
}

/// Physical approval (issue 15): a key pressed while the other is already
/// held answers nothing, whichever is held (no guess between the two); once
/// the held one is released, a press answers again.
#[test]
fn a_key_pressed_while_the_other_is_held_answers_nothing() {
    use budgetgate_core::device::ApprovalKeys;
    for approve_held in [true, false] {
        let mut keys = ApprovalKeys::new(20);
        // Both seen up, then one held down long past its debounce.
        let sample = |keys: &mut ApprovalKeys, held: bool, pressed: bool, t: u64| {
            if approve_held {
                keys.sample(held, pressed, t)
            } else {
                keys.sample(pressed, held, t)
            }
        };
        assert_eq!(sample(&mut keys, false, false, 0), None);
        assert_eq!(sample(&mut keys, false, false, 30), None);
        let held_answer = [(40, true), (70, true)]
            .into_iter()
            .filter_map(|(t, level)| sample(&mut keys, level, false, t))
            .last();
        let expected = if approve_held {
            Answer::Approve
        } else {
            Answer::Refuse
        };
        assert_eq!(held_answer, Some(expected), "the held key's own press");
        // The other pressed, steady past its debounce, the first still down.
        assert_eq!(sample(&mut keys, true, true, 80), None);
        assert_eq!(
            sample(&mut keys, true, true, 110),
            None,
            "approve_held {approve_held}"
        );
        assert_eq!(sample(&mut keys, true, true, 200), None);
        // The held key released: the other, pressed again, answers.
        assert_eq!(sample(&mut keys, false, false, 300), None);
        assert_eq!(sample(&mut keys, false, false, 330), None);
        assert_eq!(sample(&mut keys, false, true, 340), None);
        let other = if approve_held {
            Answer::Refuse
        } else {
            Answer::Approve
        };
        assert_eq!(sample(&mut keys, false, true, 370), Some(other));
    }
}

/// Issue 15 (duty windows): an actuator whose device maker did not write
/// `safe_state_of` is still driven safe when its window is spent: the
/// default drives every actuator to its safe state.
#[test]
fn a_spent_window_drives_the_actuator_safe_through_the_default() {
    /// One valve; only `safe_state`, not `safe_state_of`.
    struct Valve(bool);
    static ONE: [ToolSpec; 1] = [ToolSpec {
        name: "HassValveOpen",
        description: "valve open",
        params: &[],
        needs_approval: false,
    }];
    /// Its one command.
    struct Open;
    impl Command for Open {
        fn parse(_: usize, _: &CheckedArguments<'_>) -> Result<Self, CommandError> {
            Ok(Open)
        }
    }
    impl Actuators for Valve {
        type Command = Open;
        type Result = &'static str;
        fn execute(&mut self, _: Open) -> Result<&'static str, ToolFailure> {
            self.0 = true;
            Ok("open")
        }
        fn safe_state(&mut self) {
            self.0 = false;
        }
        fn read_back(&mut self) -> u32 {
            u32::from(self.0)
        }
        fn switches(&self, _: &Open) -> Switch {
            Switch::On(0)
        }
    }
    let tools = ToolSet::from_specs(&ONE).expect("the tool table");
    let mut gate: DeviceGate<Valve, 1> = DeviceGate::new(Valve(false), tools, Timing::DEFAULT);
    gate.set_duty_window(0, 1_000, 100).expect("a window");
    gate.start(RunLimits::DEFAULT, 0).expect("start");
    let (mut agent, mut console) = (Vec::new(), Vec::new());
    let open = r#"PROPOSE {"kind":"tool","call_id":"v1","name":"HassValveOpen","arguments":{}}"#;
    let mut rx: FrameDecoder = FrameDecoder::new();
    for &b in &frame(open.as_bytes()) {
        if let Some(f) = rx.push(b) {
            gate.on_frame(f, 0, &mut agent, &mut console)
                .expect("a Vec");
        }
    }
    assert!(gate.actuators().0, "open");
    gate.poll(99, &mut agent, &mut console).expect("a Vec");
    assert!(gate.actuators().0, "still within its window");
    gate.poll(100, &mut agent, &mut console).expect("a Vec");
    assert!(!gate.actuators().0, "closed at its most on-time");
}
