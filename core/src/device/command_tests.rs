//! Parse, then trust in the device gate (`SPEC A2`, `SPEC C` on a
//! co-processor; issue 15): a call becomes its device's command once,
//! right after its signature check, and only the command reaches the
//! actuators. A timer that switches a lamp or a valve on for hours
//! `from..to`: a rule between two arguments that no signature states,
//! so only the command's parse can refuse `to <= from`.
use super::*;
use crate::link;
use crate::registry::{ArgumentError, CheckedArguments, Param, ParamKind, ToolSpec};
use crate::resume::{AuditEntry, AuditRecord, RunView, AUDIT_ENTRY_MAX};
use std::cell::Cell;
use std::string::{String, ToString};
use std::vec::Vec;

const HOUR: ParamKind = ParamKind::Int { min: 0, max: 24 };
const FROM_TO: &[Param] = &[
    Param {
        key: "from",
        kind: HOUR,
        required: true,
    },
    Param {
        key: "to",
        kind: HOUR,
        required: true,
    },
];

static SPECS: [ToolSpec; 3] = [
    ToolSpec {
        name: "LampSchedule",
        description: "the lamp on from one hour to a later one",
        params: FROM_TO,
        needs_approval: false,
    },
    ToolSpec {
        name: "ValveSchedule",
        description: "the valve open from one hour to a later one",
        params: FROM_TO,
        needs_approval: true,
    },
    // In the tool list, and no command parses it.
    ToolSpec {
        name: "Unwired",
        description: "a tool the command type does not know",
        params: &[],
        needs_approval: false,
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Actuator {
    Lamp,
    Valve,
}

/// On from hour `from` to hour `to`, `from < to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    actuator: Actuator,
    from: u8,
    to: u8,
}

std::thread_local! {
    /// `Schedule::parse` calls on this test's thread.
    static PARSES: Cell<u32> = const { Cell::new(0) };
}

impl Command for Schedule {
    fn parse(tool: usize, args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        PARSES.with(|n| n.set(n.get() + 1));
        let actuator = match tool {
            0 => Actuator::Lamp,
            1 => Actuator::Valve,
            _ => return Err(CommandError::Tool(tool)),
        };
        let hour = |key| {
            args.int(key)
                .and_then(|h| u8::try_from(h).ok())
                .ok_or(ArgumentError::WrongType(key))
        };
        let (from, to) = (hour("from")?, hour("to")?);
        if to <= from {
            return Err(ArgumentError::OutOfRange("to").into());
        }
        Ok(Self { actuator, from, to })
    }
}

/// Every command it ran, every verdict and every audit entry.
#[derive(Default)]
struct Timer {
    executed: Vec<Schedule>,
    verdicts: u32,
    audit: Vec<AuditRecord>,
}

impl Actuators for Timer {
    type Command = Schedule;
    /// The hours on.
    type Result = u8;

    fn execute(&mut self, command: Schedule) -> Result<u8, ToolFailure> {
        self.executed.push(command);
        Ok(command.to - command.from)
    }

    fn safe_state(&mut self) {}

    fn read_back(&mut self) -> u32 {
        0
    }

    fn on_verdict(&mut self) {
        self.verdicts += 1;
    }

    fn journal(
        &mut self,
        _run: &RunView<'_>,
        entry: &AuditEntry<'_>,
    ) -> Result<(), JournalFailure> {
        let mut e = [0u8; AUDIT_ENTRY_MAX];
        let m = entry.encode(&mut e).map_err(|_| JournalFailure)?;
        self.audit
            .push(AuditRecord::decode(&e[..m]).map_err(|_| JournalFailure)?);
        Ok(())
    }
}

struct Device {
    gate: DeviceGate<Timer, 3>,
    agent: Vec<u8>,
    console: Vec<u8>,
}

impl Device {
    fn started() -> Self {
        PARSES.with(|n| n.set(0));
        let tools = ToolSet::from_specs(&SPECS).unwrap();
        let mut gate = DeviceGate::new(Timer::default(), tools, Timing::DEFAULT);
        gate.start(RunLimits::new(16, 16).unwrap(), 0).unwrap();
        Self {
            gate,
            agent: Vec::new(),
            console: Vec::new(),
        }
    }

    /// Proposes `tool` with `arguments` as `id`; the reply's payload,
    /// or "" if none (a prompt).
    fn call(&mut self, id: &str, tool: &str, arguments: &str) -> String {
        let json = std::format!(
            r#"PROPOSE {{"kind":"tool","call_id":"{id}","name":"{tool}","arguments":{arguments}}}"#
        );
        self.gate
            .on_frame(Ok(json.as_bytes()), 10, &mut self.agent, &mut self.console)
            .unwrap();
        self.reply()
    }

    fn reply(&mut self) -> String {
        let Some(end) = self.agent.iter().position(|&b| b == b'\n') else {
            return String::new();
        };
        let line: Vec<u8> = self.agent.drain(..=end).collect();
        String::from_utf8(link::verify(&line[..end]).unwrap().to_vec()).unwrap()
    }

    fn parses() -> u32 {
        PARSES.with(Cell::get)
    }
}

fn refused(step: u8, id: &str, tool: &str) -> String {
    std::format!(
        r#"{{"type":"observation","run":1,"step":{step},"call_id":"{id}","name":"{tool}","executed":false,"ok":false,"data":"invalid-arguments"}}"#
    )
}

/// Issue 15 (parse, then trust; SPEC A2 step 5): a call whose arguments
/// fit its signature but whose command does not parse (`to` before
/// `from`; a tool the command type lacks) is refused exactly as one
/// that breaks its signature: the same reply word `invalid-arguments`,
/// a counted attempt not executed, the same audit entry, one verdict;
/// nothing reaches `execute`, and a tool that needs approval asks no one.
#[test]
fn a_command_that_does_not_parse_is_refused_as_invalid_arguments_and_never_executed() {
    let mut d = Device::started();
    let calls = [
        // Breaks the signature: never parsed.
        ("s1", "LampSchedule", r#"{"from":20,"to":25}"#),
        // Fits it; the command refuses it.
        ("p1", "LampSchedule", r#"{"from":9,"to":7}"#),
        ("p2", "ValveSchedule", r#"{"from":3,"to":3}"#),
        ("p3", "Unwired", "{}"),
    ];
    for (step, (id, tool, arguments)) in (0u8..).zip(calls) {
        assert_eq!(d.call(id, tool, arguments), refused(step, id, tool));
    }
    assert_eq!(Device::parses(), 3, "s1 failed its check first");
    let timer = d.gate.actuators();
    assert!(timer.executed.is_empty(), "{:?}", timer.executed);
    assert_eq!(timer.verdicts, 4);
    let audited: Vec<(&str, AuditVerdict)> = timer
        .audit
        .iter()
        .skip(1)
        .map(|e| (e.call_id.as_str(), e.verdict))
        .collect();
    assert_eq!(
        audited,
        calls.map(|(id, ..)| (id, AuditVerdict::InvalidArguments))
    );
    assert!(d.gate.trace().iter().all(|row| matches!(
        row,
        TraceRow::Tool {
            executed: false,
            ok: false,
            ..
        }
    )));
    assert!(
        !d.gate.awaiting_approval() && d.console.is_empty(),
        "no prompt"
    );
    let run = d.gate.snapshot(10).unwrap();
    assert_eq!((run.tool_attempts, run.state), (4, "running"));
}

/// Issue 15 (parse, then trust): a call that parses reaches `execute`
/// as the command it parsed to (the arguments in any order), parsed
/// once; a call that waits for approval keeps its command and runs it
/// on the answer without being parsed again.
#[test]
fn a_parsed_command_reaches_execute_as_parsed() {
    let mut d = Device::started();
    let ran = d.call("l1", "LampSchedule", r#"{"to":18,"from":6}"#);
    assert!(
        ran.ends_with(r#""executed":true,"ok":true,"data":12}"#),
        "{ran}"
    );
    assert_eq!(Device::parses(), 1);
    assert_eq!(d.call("v1", "ValveSchedule", r#"{"from":1,"to":4}"#), "");
    assert!(d.gate.awaiting_approval());
    assert_eq!(Device::parses(), 2, "parsed before the prompt");
    d.gate
        .on_answer(Answer::Approve, 20, &mut d.agent, &mut d.console)
        .unwrap();
    assert!(d.reply().ends_with(r#""data":3}"#));
    assert_eq!(Device::parses(), 2, "not parsed again at the answer");
    let lamp = Schedule {
        actuator: Actuator::Lamp,
        from: 6,
        to: 18,
    };
    let valve = Schedule {
        actuator: Actuator::Valve,
        from: 1,
        to: 4,
    };
    assert_eq!(d.gate.actuators().executed, [lamp, valve]);
}

/// A parse error says which rule failed: the argument's own words, or
/// the tool that has no command.
#[test]
fn a_command_error_names_its_argument_or_tool() {
    let e = CommandError::from(ArgumentError::OutOfRange("to"));
    assert_eq!(e, CommandError::Argument(ArgumentError::OutOfRange("to")));
    assert_eq!(e.to_string(), "argument `to` is out of range");
    assert_eq!(CommandError::Tool(2).to_string(), "tool 2 has no command");
}
