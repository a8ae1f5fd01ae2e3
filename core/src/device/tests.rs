//! The duty windows through the device gate (`SPEC A2`, `SPEC C` on a
//! co-processor; issue 15): tiny windows, the clock a number the test
//! moves, a lamp (actuator 0, no window) and a valve (actuator 1).
use super::*;
use crate::limits::MAX_DUTY_WINDOWS;
use crate::link;
use crate::registry::{CheckedArguments, Param, ParamKind, ToolSpec};
use crate::resume::{
    self, AuditEntry, AuditRecord, RunView, Stage, AUDIT_ENTRY_MAX, RUN_RECORD_MAX,
};
use std::string::String;
use std::vec::Vec;

const VALVE: Param = Param {
    key: "name",
    kind: ParamKind::Choice(&["valve"]),
    required: true,
};

static SPECS: [ToolSpec; 4] = [
    ToolSpec {
        name: "HassTurnOn",
        description: "lamp on",
        params: &[],
        needs_approval: false,
    },
    ToolSpec {
        name: "ValveOpen",
        description: "valve open, no approval",
        params: &[VALVE],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassTurnOff",
        description: "valve closed",
        params: &[VALVE],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassValveOpen",
        description: "valve open, approved",
        params: &[VALVE],
        needs_approval: true,
    },
];

#[derive(Default)]
struct Home {
    lamp: bool,
    valve: bool,
    /// Actuators driven safe one by one (`safe_state_of`).
    safe_of: Vec<usize>,
    records: Vec<Vec<u8>>,
    audit: Vec<AuditRecord>,
}

/// The calls of [`SPECS`], typed: the valve's two tools that open it
/// are one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HomeCommand {
    LampOn,
    ValveOpen,
    ValveClose,
}

impl Command for HomeCommand {
    fn parse(tool: usize, _args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        match tool {
            0 => Ok(Self::LampOn),
            1 | 3 => Ok(Self::ValveOpen),
            2 => Ok(Self::ValveClose),
            _ => Err(CommandError::Tool(tool)),
        }
    }
}

impl Actuators for Home {
    type Command = HomeCommand;
    type Result = bool;

    fn execute(&mut self, command: HomeCommand) -> Result<bool, ToolFailure> {
        match command {
            HomeCommand::LampOn => self.lamp = true,
            HomeCommand::ValveOpen => self.valve = true,
            HomeCommand::ValveClose => self.valve = false,
        }
        Ok(true)
    }

    fn safe_state(&mut self) {
        self.lamp = false;
        self.valve = false;
    }

    fn read_back(&mut self) -> u32 {
        u32::from(self.lamp) | (u32::from(self.valve) << 1)
    }

    fn switches(&self, command: &HomeCommand) -> Switch {
        match command {
            HomeCommand::ValveOpen => Switch::On(1),
            HomeCommand::ValveClose => Switch::Off(1),
            HomeCommand::LampOn => Switch::None,
        }
    }

    fn safe_state_of(&mut self, actuator: usize) {
        self.safe_of.push(actuator);
        if actuator == 1 {
            self.valve = false;
        }
    }

    fn journal(&mut self, run: &RunView<'_>, entry: &AuditEntry<'_>) -> Result<(), JournalFailure> {
        let mut buf = [0u8; RUN_RECORD_MAX];
        let n = run.encode(&mut buf).map_err(|_| JournalFailure)?;
        self.records.push(buf[..n].to_vec());
        let mut e = [0u8; AUDIT_ENTRY_MAX];
        let m = entry.encode(&mut e).map_err(|_| JournalFailure)?;
        self.audit
            .push(AuditRecord::decode(&e[..m]).map_err(|_| JournalFailure)?);
        Ok(())
    }
}

struct Device {
    gate: DeviceGate<Home, 4>,
    now_ms: u64,
    agent: Vec<u8>,
    console: Vec<u8>,
}

impl Device {
    /// A gate whose valve may be open `max_on_ms` in any `window_ms`,
    /// with a run started at 0.
    fn new(window_ms: u32, max_on_ms: u32) -> Self {
        let mut d = Self::booted(window_ms, max_on_ms);
        d.gate.start(RunLimits::new(32, 16).unwrap(), 0).unwrap();
        d
    }

    /// The same gate, no run started.
    fn booted(window_ms: u32, max_on_ms: u32) -> Self {
        let tools = ToolSet::from_specs(&SPECS).unwrap();
        let mut gate = DeviceGate::new(Home::default(), tools, Timing::DEFAULT);
        // Windows of minutes outlast the default time budget.
        gate.set_time_budget(u32::MAX);
        gate.set_duty_window(1, window_ms, max_on_ms).unwrap();
        Self {
            gate,
            now_ms: 0,
            agent: Vec::new(),
            console: Vec::new(),
        }
    }

    /// Proposes `tool` (with `{"name":"valve"}`) as `id` at the clock;
    /// the reply's payload, or "" if none (a prompt).
    fn call(&mut self, id: &str, tool: &str) -> String {
        let json = std::format!(
            r#"PROPOSE {{"kind":"tool","call_id":"{id}","name":"{tool}","arguments":{{"name":"valve"}}}}"#
        );
        let json = if tool == "HassTurnOn" {
            json.replace(r#"{"name":"valve"}"#, "{}")
        } else {
            json
        };
        self.gate
            .on_frame(
                Ok(json.as_bytes()),
                self.now_ms,
                &mut self.agent,
                &mut self.console,
            )
            .unwrap();
        self.reply()
    }

    fn reply(&mut self) -> String {
        let Some(end) = self.agent.iter().position(|&b| b == b'\n') else {
            return String::new();
        };
        let line: Vec<u8> = self.agent.drain(..=end).collect();
        let payload = link::verify(&line[..end]).unwrap();
        String::from_utf8(payload.to_vec()).unwrap()
    }

    fn wait_until(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        self.gate
            .poll(now_ms, &mut self.agent, &mut self.console)
            .unwrap();
    }

    fn valve(&self) -> bool {
        self.gate.actuators().valve
    }

    fn verdicts(&self) -> Vec<AuditVerdict> {
        self.gate
            .actuators()
            .audit
            .iter()
            .map(|e| e.verdict)
            .collect()
    }

    fn last_verdict(&self) -> AuditVerdict {
        *self.verdicts().last().unwrap()
    }
}

/// Issue 11 (the pending token): a call waiting for approval is stored
/// as waiting (its stage before the prompt), and a call stored while
/// executing or waiting is ended at resume with the token the restored
/// run hands back: executed-not-ok if it was executing, not executed if
/// it waited (`SPEC E`, durable state).
#[test]
fn a_call_in_flight_is_stored_and_ended_at_resume_with_its_token() {
    let mut d = Device::new(60_000, 60_000);
    assert!(d.call("o1", "ValveOpen").contains(r#""ok":true"#));
    assert_eq!(d.call("a2", "HassValveOpen"), "");
    assert!(d.gate.awaiting_approval());
    let records = &d.gate.actuators().records;
    let audit = &d.gate.actuators().audit;
    let at = |verdict: AuditVerdict| {
        let i = audit.iter().position(|e| e.verdict == verdict).unwrap();
        records[i].clone()
    };
    let (executing, asking) = (at(AuditVerdict::Executing), at(AuditVerdict::Asking));
    assert_eq!(
        resume::decode(&asking).unwrap().stage,
        Stage::AwaitingApproval
    );
    assert_eq!(resume::decode(&executing).unwrap().stage, Stage::Executing);
    for (record, step, executed) in [(executing, 0, true), (asking, 1, false)] {
        let mut back = Device::booted(60_000, 60_000);
        let resumed = back.gate.resume(&record, 5).unwrap();
        assert_eq!(resumed.decisions, step + 1);
        assert!(!back.gate.run.awaiting_outcome());
        match back.gate.trace().last() {
            Some(TraceRow::Tool {
                step: s,
                executed: e,
                ok: false,
                ..
            }) => assert_eq!((*s, *e), (step, executed)),
            other => panic!("{other:?}"),
        }
        assert_eq!(back.last_verdict(), AuditVerdict::Interrupted);
    }
}

/// Issue 15 (duty windows, checked before a command): a call that would
/// switch the valve on when its window is spent is not executed: the
/// observation is `duty-limit`, `executed:false`, with the ms until the
/// window allows it again; it is a counted attempt (like
/// approval-denied), audited `duty-limit`, and the valve never moves.
#[test]
fn a_switch_on_with_its_duty_window_spent_is_refused_not_executed() {
    let mut d = Device::new(1_000, 100);
    assert!(d.call("o1", "ValveOpen").contains(r#""executed":true"#));
    d.wait_until(100);
    assert!(!d.valve(), "driven closed at its most on-time");
    d.now_ms = 300;
    let refused = d.call("o2", "ValveOpen");
    assert_eq!(
        refused,
        r#"{"type":"observation","run":1,"step":1,"call_id":"o2","name":"ValveOpen","executed":false,"ok":false,"data":"duty-limit","retry_after_ms":701}"#
    );
    assert!(!d.valve(), "the valve did not move");
    assert_eq!(d.last_verdict(), AuditVerdict::DutyLimit);
    let last = d.gate.actuators().audit.last().unwrap();
    assert_eq!(
        (last.call_id.as_str(), last.tool.as_str()),
        ("o2", "ValveOpen")
    );
    assert!(matches!(
        d.gate.trace().last(),
        Some(TraceRow::Tool {
            executed: false,
            ok: false,
            ..
        })
    ));
    let run = d.gate.snapshot(300).unwrap();
    assert_eq!(
        (run.decisions, run.tool_attempts, run.state),
        (2, 2, "running")
    );
    // Other tools go on: the run is not stopped.
    assert!(d.call("l1", "HassTurnOn").contains(r#""executed":true"#));
}

/// Issue 15: the window slides; the call is allowed again exactly when
/// enough on-time has left it (the reply's `retry_after_ms`), not before.
#[test]
fn a_switch_on_is_allowed_again_once_the_window_slides() {
    let mut d = Device::new(1_000, 100);
    d.call("o1", "ValveOpen");
    d.now_ms = 60;
    assert!(d.call("c1", "HassTurnOff").contains(r#""executed":true"#));
    d.now_ms = 70;
    d.call("o2", "ValveOpen");
    d.wait_until(110);
    assert!(!d.valve(), "60 + 40 ms: spent");
    d.now_ms = 1_000;
    assert!(d.call("o3", "ValveOpen").contains(r#""retry_after_ms":1"#));
    d.now_ms = 1_001;
    assert!(d.call("o4", "ValveOpen").contains(r#""executed":true"#));
    assert!(d.valve());
    // 1 ms of the first span has left: it may stay on until the window
    // holds 100 ms again.
    assert_eq!(d.gate.duty_on_time(1, 1_001), Some(99));
}

/// Issue 15 (enforced by poll): the valve is driven closed at exactly
/// the instant its window holds its most on-time (`must_stop_at`), only
/// it (`safe_state_of`), audited `duty-off` with its number and said on
/// the console; the run goes on (a duty limit is not a fault).
#[test]
fn poll_drives_the_valve_closed_at_exactly_its_most_on_time() {
    let mut d = Device::new(10_000, 300);
    d.now_ms = 1_000;
    d.call("l1", "HassTurnOn");
    d.call("o1", "ValveOpen");
    let stop_at = d
        .gate
        .duty_window(1)
        .unwrap()
        .must_stop_at(duty_clock(1_000))
        .unwrap();
    assert_eq!(stop_at, duty_clock(1_300));
    d.wait_until(1_299);
    assert!(d.valve(), "not before");
    assert!(d.gate.actuators().safe_of.is_empty());
    d.wait_until(1_300);
    assert!(!d.valve(), "at exactly its most on-time");
    assert!(d.gate.actuators().lamp, "only the valve");
    assert_eq!(d.gate.actuators().safe_of, [1]);
    assert_eq!(d.last_verdict(), AuditVerdict::DutyOff(1));
    assert_eq!(
        String::from_utf8(d.console.clone()).unwrap(),
        "duty: actuator 1 spent its duty window; driven to its safe state\n"
    );
    assert_eq!(d.gate.state(), "running");
    d.wait_until(2_000);
    assert_eq!(d.gate.actuators().safe_of, [1], "once");
    assert!(d.call("l2", "HassTurnOn").contains(r#""executed":true"#));
}

/// Issue 15: closing the valve stops its on-time; a failed or refused
/// call does not, and every drive to the safe state (a stop, a start)
/// switches the window off at that instant.
#[test]
fn only_a_switch_off_or_a_safe_state_ends_the_on_time() {
    let mut d = Device::new(100_000, 50_000);
    d.call("o1", "ValveOpen");
    d.now_ms = 400;
    d.call("c1", "HassTurnOff");
    assert_eq!(d.gate.duty_on_time(1, 5_000), Some(400));
    d.now_ms = 5_000;
    d.call("o2", "ValveOpen");
    d.now_ms = 5_100;
    let json = br#"PROPOSE {"kind":"final","text":"done"}"#;
    d.gate
        .on_frame(Ok(json), 5_100, &mut d.agent, &mut d.console)
        .unwrap();
    assert!(d.reply().contains("final"));
    assert!(
        !d.gate.duty_window(1).unwrap().is_on(),
        "the stop made it safe"
    );
    assert_eq!(d.gate.duty_on_time(1, 9_000), Some(500));
    // A new run does not give the on-time back.
    d.gate.start(RunLimits::DEFAULT, 9_000).unwrap();
    assert_eq!(d.gate.duty_on_time(1, 9_000), Some(500));
    d.now_ms = 9_000;
    d.call("o3", "ValveOpen");
    d.gate.start(RunLimits::DEFAULT, 9_250).unwrap();
    assert_eq!(
        d.gate.duty_on_time(1, 20_000),
        Some(750),
        "switched off at the start"
    );
}

/// Issue 15 with approval (SPEC C): a call whose window is spent is
/// refused before any prompt; one whose window is spent while the
/// operator decides is refused at the approval, never executed.
#[test]
fn a_spent_window_refuses_an_approval_call_before_and_after_the_prompt() {
    let mut d = Device::new(1_000, 100);
    d.call("o1", "ValveOpen");
    d.wait_until(100);
    d.now_ms = 200;
    let refused = d.call("a1", "HassValveOpen");
    assert!(refused.contains(r#""data":"duty-limit""#), "{refused}");
    assert!(!d.gate.awaiting_approval(), "no prompt");
    assert!(d.console.ends_with(b"safe state\n"), "no prompt line");
    // The valve on again, then a call that waits while it is spent.
    d.now_ms = 1_150;
    d.call("o2", "ValveOpen");
    assert!(
        d.call("a2", "HassValveOpen").is_empty(),
        "prompted: on already"
    );
    d.wait_until(1_250);
    assert!(!d.valve());
    let answered = d
        .gate
        .on_answer(Answer::Approve, 1_260, &mut d.agent, &mut d.console)
        .unwrap();
    assert!(answered);
    let reply = d.reply();
    assert!(
        reply.contains(r#""executed":false"#) && reply.contains("duty-limit"),
        "{reply}"
    );
    assert!(!d.valve(), "the approval moved nothing");
    assert_eq!(d.last_verdict(), AuditVerdict::DutyLimit);
}

/// Issue 15 (persisted with the ledger): a gate booted on the last
/// record resumes the window's on-time re-based at its own clock (time
/// without power not counted): the valve on when the power went counts
/// the longest it could have stayed on, and is refused until the window
/// slides past that.
#[test]
fn the_duty_window_survives_a_power_cut_re_based() {
    let mut d = Device::new(600_000, 30_000);
    d.now_ms = 50_000;
    d.call("o1", "ValveOpen");
    d.now_ms = 60_000;
    d.call("l1", "HassTurnOn");
    // The last record is of 60 000: 10 s open, and it may have stayed
    // open 20 s more, to 80 000, before the power went. That instant is
    // the resume's (7 ms after boot): 30 s open, ended then.
    let record = d.gate.actuators().records.last().unwrap().clone();
    let mut back = Device::booted(600_000, 30_000);
    back.gate.resume(&record, 7).unwrap();
    assert!(!back.valve());
    assert_eq!(back.gate.duty_on_time(1, 7), Some(30_000));
    back.now_ms = 7;
    // Its first ms leaves the window 570 000 ms after it ended.
    let refused = back.call("o2", "ValveOpen");
    assert!(refused.contains(r#""retry_after_ms":570001"#), "{refused}");
    back.now_ms = 570_007;
    assert!(back.call("o4", "ValveOpen").contains("duty-limit"));
    back.now_ms = 570_008;
    assert!(back.call("o3", "ValveOpen").contains(r#""executed":true"#));
    // A board with no window for the valve drops the stored one.
    let tools = ToolSet::from_specs(&SPECS).unwrap();
    let mut bare: DeviceGate<Home, 4> = DeviceGate::new(Home::default(), tools, Timing::DEFAULT);
    bare.resume(&record, 0).unwrap();
    assert!(bare.duty_window(1).is_none());
}

/// Fail closed on configuration: an actuator over the capacity, an
/// empty window or one that allows more on-time than its length is an
/// error, never a panic, and sets nothing.
#[test]
fn a_duty_window_out_of_range_is_refused() {
    let mut d = Device::booted(1_000, 100);
    assert_eq!(
        d.gate.set_duty_window(MAX_DUTY_WINDOWS, 1_000, 10),
        Err(DutyError::Actuator(MAX_DUTY_WINDOWS))
    );
    assert_eq!(d.gate.set_duty_window(0, 0, 0), Err(DutyError::Window));
    assert_eq!(d.gate.set_duty_window(0, 10, 11), Err(DutyError::Window));
    assert!(d.gate.duty_window(0).is_none());
    assert_eq!(d.gate.set_duty_window(0, 10, 10), Ok(()));
    assert!(DutyError::Actuator(9).to_string().contains("actuator 9"));
}
