//! The device gate's durable run (`budgetgate_core::resume`, issue 15):
//! after every decision the gate hands its run and an audit entry to
//! `Actuators::journal`, before the effect is released; a gate booted on
//! any stored record resumes the run with its budget as committed (SPEC E:
//! a reset never gives budget back; SPEC A2 bounds and call ids), a call
//! that was executing is recorded `interrupted` with its actuator safe, and
//! a record that does not decode is refused (fail closed). Each test
//! simulates a power cut by booting a fresh gate on a record the previous
//! gate stored.
// A test states what it expects with `expect`, `unwrap`, `panic!` and
// indexing: a failure is the test failing, as in the core's unit tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use budgetgate_core::device::{
    Actuators, Answer, Command, CommandError, DeviceGate, JournalFailure, Timing, ToolFailure,
};
use budgetgate_core::link::{self, FrameDecoder};
use budgetgate_core::registry::{CheckedArguments, Param, ParamKind, ToolSpec};
use budgetgate_core::resume::{
    self, AuditEntry, AuditRecord, AuditVerdict, ResumeError, RunView, AUDIT_ENTRY_MAX,
    RUN_RECORD_MAX,
};
use budgetgate_core::ToolSet;
use budgetgate_core::{RunLimits, TraceRow};

mod common;
use common::frame;

static SPECS: [ToolSpec; 2] = [
    ToolSpec {
        name: "HassTurnOn",
        description: "lamp on",
        params: &[Param {
            key: "name",
            kind: ParamKind::Choice(&["lamp"]),
            required: true,
        }],
        needs_approval: false,
    },
    ToolSpec {
        name: "HassValveOpen",
        description: "valve open",
        params: &[Param {
            key: "name",
            kind: ParamKind::Choice(&["valve"]),
            required: true,
        }],
        needs_approval: true,
    },
];

/// A lamp and a valve, and a journal that keeps every record and entry.
#[derive(Default)]
struct Board {
    lamp: bool,
    valve: bool,
    /// Every stored run record, oldest first; with the lamp as it was when
    /// the record was stored.
    records: Vec<(Vec<u8>, bool)>,
    entries: Vec<AuditRecord>,
    /// Fail the journal from this many calls on.
    fail_after: Option<usize>,
}

/// The calls of [`SPECS`]: each tool has one target.
enum On {
    Lamp,
    Valve,
}

impl Command for On {
    fn parse(tool: usize, _args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
        match tool {
            0 => Ok(Self::Lamp),
            1 => Ok(Self::Valve),
            _ => Err(CommandError::Tool(tool)),
        }
    }
}

impl Actuators for Board {
    type Command = On;
    type Result = &'static str;

    fn execute(&mut self, command: On) -> Result<&'static str, ToolFailure> {
        match command {
            On::Lamp => self.lamp = true,
            On::Valve => self.valve = true,
        }
        Ok("on")
    }

    fn safe_state(&mut self) {
        self.lamp = false;
        self.valve = false;
    }

    fn read_back(&mut self) -> u32 {
        u32::from(self.lamp) | u32::from(self.valve) << 1
    }

    fn journal(&mut self, run: &RunView<'_>, entry: &AuditEntry<'_>) -> Result<(), JournalFailure> {
        if self.fail_after.is_some_and(|n| self.records.len() >= n) {
            return Err(JournalFailure);
        }
        let mut buf = [0u8; RUN_RECORD_MAX];
        let n = run.encode(&mut buf).map_err(|_| JournalFailure)?;
        self.records.push((buf[..n].to_vec(), self.lamp));
        let mut e = [0u8; AUDIT_ENTRY_MAX];
        let m = entry.encode(&mut e).map_err(|_| JournalFailure)?;
        self.entries
            .push(AuditRecord::decode(&e[..m]).expect("an entry reads back"));
        Ok(())
    }
}

struct Device {
    gate: DeviceGate<Board, 2>,
    now_ms: u64,
    agent: Vec<u8>,
    console: Vec<u8>,
}

impl Device {
    fn boot(timing: Timing) -> Self {
        let tools = ToolSet::from_specs(&SPECS).expect("the tool table");
        Self {
            gate: DeviceGate::new(Board::default(), tools, timing),
            now_ms: 0,
            agent: Vec::new(),
            console: Vec::new(),
        }
    }

    fn started(d: u32, t: u32) -> Self {
        let mut device = Self::boot(Timing::DEFAULT);
        let limits = RunLimits::new(d, t).expect("budgets");
        device.gate.start(limits, 0).expect("start");
        device
    }

    fn request(&mut self, payload: &str) -> String {
        let mut rx: FrameDecoder = FrameDecoder::new();
        for &b in &frame(payload.as_bytes()) {
            if let Some(f) = rx.push(b) {
                self.gate
                    .on_frame(f, self.now_ms, &mut self.agent, &mut self.console)
                    .expect("a Vec takes every byte");
            }
        }
        let Some(end) = self.agent.iter().position(|&b| b == b'\n') else {
            return String::new();
        };
        let line: Vec<u8> = self.agent.drain(..=end).collect();
        let out = link::verify(&line[..end]).expect("a sealed reply");
        String::from_utf8(out.to_vec()).expect("UTF-8")
    }

    fn lamp(&mut self, call_id: &str) -> String {
        self.request(&format!(
            r#"PROPOSE {{"kind":"tool","call_id":"{call_id}","name":"HassTurnOn","arguments":{{"name":"lamp"}}}}"#
        ))
    }

    fn valve(&mut self, call_id: &str) -> String {
        self.request(&format!(
            r#"PROPOSE {{"kind":"tool","call_id":"{call_id}","name":"HassValveOpen","arguments":{{"name":"valve"}}}}"#
        ))
    }

    /// A fresh gate (power cut, reset) booted on `record`.
    fn reboot(
        record: &[u8],
        now_ms: u64,
    ) -> (Self, Result<budgetgate_core::device::Resumed, ResumeError>) {
        let mut device = Self::boot(Timing::DEFAULT);
        device.now_ms = now_ms;
        let resumed = device.gate.resume(record, now_ms);
        (device, resumed)
    }

    /// The run record the gate stored last.
    fn last_record(&self) -> Vec<u8> {
        let (record, _) = self.gate.actuators().records.last().expect("stored");
        record.clone()
    }

    fn decisions(&self) -> (u8, u8) {
        let s = self.gate.snapshot(self.now_ms).expect("a run");
        (s.decisions, s.tool_attempts)
    }
}

/// SPEC E, durable state: the run is journaled after every decision (one
/// `executing` entry before the actuator moves, one outcome entry before
/// the reply), and a gate booted on any journaled record has used at least
/// the decisions and tool attempts committed in it — never fewer.
#[test]
fn every_record_resumes_with_the_committed_budget_or_more() {
    let mut device = Device::started(8, 4);
    for id in ["c1", "c2", "c3"] {
        assert!(device.lamp(id).contains(r#""executed":true,"ok":true"#));
    }
    let verdicts: Vec<&str> = device
        .gate
        .actuators()
        .entries
        .iter()
        .map(|e| e.verdict.as_str())
        .collect();
    assert_eq!(
        verdicts,
        [
            "started",
            "executing",
            "executed",
            "executing",
            "executed",
            "executing",
            "executed"
        ]
    );
    let records = device.gate.actuators().records.clone();
    let mut last = (0, 0);
    for (i, (record, _)) in records.iter().enumerate() {
        let header = resume::decode(record).expect("a stored record decodes");
        let (mut back, resumed) = Device::reboot(record, 5);
        let resumed = resumed.expect("resumes");
        assert_eq!(resumed.run, 1);
        let used = back.decisions();
        assert!(used >= last, "record {i}: {used:?} after {last:?}");
        assert_eq!(used.1, header.tool_attempts);
        last = used;
        assert_eq!(
            back.gate.actuators_mut().read_back(),
            0,
            "actuators safe at boot"
        );
        // The resumed run goes on where it was.
        let reply = back.lamp("c9");
        assert!(
            reply.contains(&format!(r#""step":{}"#, used.0)),
            "record {i}: {reply}"
        );
    }
    assert_eq!(last, (3, 3));
}

/// Issue 15: a call that was executing when the power went (its record
/// says `executing`; the lamp had been switched on) is found at boot,
/// recorded as interrupted (executed, not ok) in the trace and the audit
/// log, and its actuator is driven to the safe state.
#[test]
fn a_call_executing_at_the_cut_is_recorded_interrupted_and_made_safe() {
    let mut device = Device::started(8, 4);
    device.lamp("c1");
    let records = &device.gate.actuators().records;
    // The record stored right before the actuator moved.
    let executing = device
        .gate
        .actuators()
        .entries
        .iter()
        .position(|e| e.verdict == AuditVerdict::Executing)
        .expect("an executing entry");
    let (record, _) = records[executing].clone();
    let (mut back, resumed) = Device::reboot(&record, 7);
    let resumed = resumed.expect("resumes");
    assert_eq!(resumed.interrupted.as_ref().map(|c| c.as_str()), Some("c1"));
    assert_eq!(back.gate.actuators_mut().read_back(), 0);
    assert!(matches!(
        back.gate.trace().last(),
        Some(TraceRow::Tool {
            executed: true,
            ok: false,
            ..
        })
    ));
    let entry = back.gate.actuators().entries.last().expect("journaled");
    assert_eq!(
        (
            entry.verdict,
            entry.call_id.as_str(),
            entry.tool.as_str(),
            entry.time_ms
        ),
        (AuditVerdict::Interrupted, "c1", "HassTurnOn", 7)
    );
    // Its call id stays used (SPEC A2: duplicate-call).
    assert!(back.lamp("c1").contains(r#""status":"duplicate-call""#));
}

/// SPEC C approval across a reset: a call waiting for the operator when
/// the power went never runs; it is recorded interrupted, not executed.
#[test]
fn a_call_waiting_for_approval_at_the_cut_never_runs() {
    let mut device = Device::started(8, 4);
    assert_eq!(device.valve("v1"), "");
    assert!(device.gate.awaiting_approval());
    let record = device.last_record();
    let (mut back, resumed) = Device::reboot(&record, 1);
    assert!(resumed.expect("resumes").interrupted.is_some());
    assert!(!back.gate.awaiting_approval());
    assert!(matches!(
        back.gate.trace().last(),
        Some(TraceRow::Tool {
            executed: false,
            ..
        })
    ));
    assert_eq!(back.decisions(), (1, 1));
    let answered = back
        .gate
        .on_answer(Answer::Approve, 2, &mut back.agent, &mut back.console)
        .expect("writes");
    assert!(!answered, "nothing waits any more");
    assert_eq!(back.gate.actuators_mut().read_back(), 0);
}

/// SPEC A2 bounds across resets: a run whose decisions are used up stays
/// stopped when resumed, and one reset after another never hands back a
/// tool attempt.
#[test]
fn a_stopped_run_stays_stopped_after_a_reset() {
    let mut device = Device::started(2, 4);
    device.lamp("c1");
    assert!(device.lamp("c2").contains("executed"));
    let record = device.last_record();
    let (mut back, resumed) = Device::reboot(&record, 0);
    assert_eq!(resumed.expect("resumes").state, "decision-budget");
    assert!(back.lamp("c3").contains("run-stopped"));
    assert_eq!(back.gate.actuators_mut().read_back(), 0);
}

/// SPEC C time budget across a reset: the time used before the cut is
/// counted on after it.
#[test]
fn the_time_used_before_a_reset_is_counted_after_it() {
    let timing = Timing {
        time_budget_ms: 1_000,
        approval_timeout_ms: 500,
        dead_man_ms: 0,
    };
    let mut device = Device::boot(timing);
    device.gate.start(RunLimits::DEFAULT, 0).expect("start");
    device.now_ms = 700;
    device.lamp("c1");
    let record = device.last_record();
    let mut back = Device::boot(timing);
    back.gate.resume(&record, 10).expect("resumes");
    let left = back.gate.snapshot(10).expect("a run").time_left_ms;
    assert_eq!(left, 300);
    back.now_ms = 320;
    assert!(back.lamp("c2").contains("time-budget"));
}

/// Fail closed (SPEC E): a record with one bit flipped, of another version,
/// or cut short is refused with its reason, and the gate stays as it was
/// built (idle, no run to take proposals).
#[test]
fn a_damaged_record_is_refused_and_changes_nothing() {
    let mut device = Device::started(8, 4);
    device.lamp("c1");
    let record = device.last_record();
    for bit in 0..record.len() * 8 {
        let mut bad = record.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let (mut back, resumed) = Device::reboot(&bad, 0);
        assert!(resumed.is_err(), "bit {bit} flipped decoded");
        assert_eq!(back.gate.state(), "idle");
        assert!(back.lamp("c2").contains("no-run"));
    }
    let mut other = record.clone();
    other[3] = 1;
    assert_eq!(resume::decode(&other), Err(ResumeError::Version(1)));
    other[3] = 3;
    assert_eq!(resume::decode(&other), Err(ResumeError::Version(3)));
    for n in 0..record.len() {
        assert!(resume::decode(&record[..n]).is_err(), "{n} bytes decoded");
    }
}

/// Fail closed: when the journal cannot store the state before a call,
/// the actuator never moves, and every later proposal is refused
/// `storage-error` until a run is started that can be stored.
#[test]
fn a_journal_that_fails_keeps_the_actuator_still() {
    let mut device = Device::started(8, 4);
    device.gate.actuators_mut().fail_after = Some(1);
    let reply = device.lamp("c1");
    assert!(reply.contains(r#""executed":false"#), "{reply}");
    assert_eq!(device.gate.actuators_mut().read_back(), 0);
    assert!(device.lamp("c2").contains("storage-error"));
}

/// SPEC E: the operator's start after a resume is a new run with a new
/// number (the stored run's number carries on), and the resumed run's
/// records go on counting from what was committed.
#[test]
fn run_numbers_and_attempts_go_on_after_a_resume() {
    let mut device = Device::started(8, 4);
    device.lamp("c1");
    device.valve("v1");
    device
        .gate
        .on_answer(Answer::Refuse, 3, &mut device.agent, &mut device.console)
        .expect("writes");
    let record = device.last_record();
    let (mut again, resumed) = Device::reboot(&record, 0);
    resumed.expect("resumes");
    again.lamp("c7");
    let latest = &again.gate.actuators().records;
    let header = resume::decode(&latest.last().expect("stored").0).expect("decodes");
    assert_eq!((header.run, header.tool_attempts, header.rows), (1, 3, 3));
    let (mut back, _) = Device::reboot(&record, 0);
    back.gate
        .start(RunLimits::DEFAULT, 0)
        .expect("the operator may start a new run");
    assert_eq!(back.gate.snapshot(0).expect("a run").run, 2);
}

/// The audit log names each refusal by its own word (issue 15, audit
/// trail): arguments that break the tool's signature `invalid-arguments`,
/// an operator's refusal `approval-denied`, an approval that came after the
/// run's time budget `time-budget`; nothing moved for any of them.
#[test]
fn each_refusal_is_audited_with_its_own_word() {
    let timing = Timing {
        time_budget_ms: 10_000,
        approval_timeout_ms: 60_000,
        ..Timing::DEFAULT
    };
    let mut device = Device::boot(timing);
    device
        .gate
        .start(RunLimits::new(8, 4).expect("budgets"), 0)
        .expect("start");
    let bad = device.request(
        r#"PROPOSE {"kind":"tool","call_id":"c1","name":"HassTurnOn","arguments":{"name":"door"}}"#,
    );
    assert!(bad.contains(r#""data":"invalid-arguments""#), "{bad}");
    device.valve("c2");
    let (mut agent, mut console) = (Vec::new(), Vec::new());
    device
        .gate
        .on_answer(Answer::Refuse, 1_000, &mut agent, &mut console)
        .expect("a Vec takes every byte");
    device.valve("c3");
    device
        .gate
        .on_answer(Answer::Approve, 20_000, &mut agent, &mut console)
        .expect("a Vec takes every byte");
    let refused: Vec<(&str, &str)> = device
        .gate
        .actuators()
        .entries
        .iter()
        .filter(|e| !matches!(e.verdict, AuditVerdict::Started | AuditVerdict::Asking))
        .map(|e| (e.call_id.as_str(), e.verdict.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("c1", "invalid-arguments"),
            ("c2", "approval-denied"),
            ("c3", "time-budget"),
            // Then the run's own stop, on its time budget.
            ("", "time-budget"),
        ]
    );
    assert!(!device.gate.actuators().valve && !device.gate.actuators().lamp);
}

/// SPEC E, durable state: a run that filled its trace (every tool
/// attempt it may make, then the stop its budget caused) is stored and
/// resumes whole: a record at the trace's capacity is within bounds, not
/// over them.
#[test]
fn a_run_that_filled_its_trace_resumes_whole() {
    let mut device = Device::started(32, 16);
    for i in 0..16 {
        assert!(
            device.lamp(&format!("c{i}")).contains("\"ok\":true"),
            "call {i}"
        );
    }
    assert!(device.lamp("c16").contains("tool-budget"));
    let record = device.last_record();
    let header = resume::decode(&record).expect("decodes");
    assert_eq!(usize::from(header.rows), 17, "16 tool rows and the stop");
    let (back, resumed) = Device::reboot(&record, 1);
    assert_eq!(resumed.expect("resumes").run, 1);
    assert_eq!(back.gate.trace(), device.gate.trace());
}

/// SPEC C / SPEC E: a run that has stopped stays stopped: a proposal after
/// its stop is answered `run-stopped` even once its time budget has run
/// out (it is not a new time-budget stop, journaled and reported again).
#[test]
fn a_stopped_run_answers_run_stopped_even_past_its_time_budget() {
    let mut device = Device::started(1, 1);
    device.lamp("c1");
    assert!(device.lamp("c2").contains("decision-budget"));
    assert!(device.lamp("c3").contains("run-stopped"));
    let journaled = device.gate.actuators().records.len();
    device.now_ms = 10_000_000;
    let late = device.lamp("c4");
    assert!(late.contains("run-stopped"), "{late}");
    assert_eq!(
        device.gate.actuators().records.len(),
        journaled,
        "nothing journaled"
    );
}
