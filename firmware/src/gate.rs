//! The gate: one bounded run of the core (`SPEC A2`) between the agent link
//! and the actuators, with operator approval (`SPEC C`) and a time budget
//! measured on the device.
//!
//! Per agent frame (`docs/PROTOCOL.md`): a transport error or a request that
//! is not a proposal uses no decision; `PROPOSE {json}` is validated by
//! [`ActionRef::parse`] (one pass, strings left in the frame) and decided
//! by [`Run::decide`]. An accepted call of a registered tool has its
//! arguments checked against the tool's [`ToolSpec`]; a tool that needs
//! approval waits for the operator; then the tool runs and its result is
//! measured by [`Run::complete`]. Every reply is a sealed frame written with
//! [`link::write_frame`].
//!
//! While an approval is pending the main loop reads nothing from the agent
//! link (its bytes wait in the UART) and polls the console and the clock.
//!
//! Every stop of a run (any status, `final` included, and the time budget
//! as soon as it passes) drives every actuator to its safe state: once the
//! run has stopped nothing on the agent link can move an actuator, so what
//! is left must be safe without supervision (docs/FIRMWARE.md, "Stopping").
#![forbid(unsafe_code)]

use budgetgate_core::link::{self, FrameError, Reply, Request, PROTOCOL_VERSION};
use budgetgate_core::registry::{tool_set, ToolSpec};
use budgetgate_core::{
    ActionRef, Identifier, ObservationData, Progress, Run, RunError, RunLimits, Status,
    ToolCallRef, ToolSet, ToolSetError, Verdict,
};
use embedded_io::Write;
use serde::Serialize;

use crate::board;
use crate::config::{
    APPROVAL_TIMEOUT_MS, FRAME_MAX, MAX_DECISIONS, MAX_TOOL_CALLS, RUN_TIME_BUDGET_MS,
    TOOL_CAPACITY,
};
use crate::console::write_decimal;
use crate::tools::{self, Actuators, Kind, ToolResult, KINDS, SPECS};

/// Trace capacity of the device's run: the contract's most decisions.
const STEPS: usize = budgetgate_core::limits::MAX_STEPS;

/// The run as the device keeps it.
pub type DeviceRun = Run<STEPS, TOOL_CAPACITY>;
/// A tool call as the device reads it: borrowed from the frame it came in.
pub type DeviceCall<'a> = ToolCallRef<'a>;

/// The words of the protocol (`docs/PROTOCOL.md`), spelled once.
pub mod word {
    /// Observation data: the tool name is not registered.
    pub const UNKNOWN_TOOL: &str = "unknown-tool";
    /// Observation data: the tool failed or its result was over 4096 bytes.
    pub const TOOL_ERROR: &str = "tool-error";
    /// Observation data: the arguments do not fit the tool's signature.
    pub const INVALID_ARGUMENTS: &str = "invalid-arguments";
    /// Observation data: the operator refused, or did not answer in time.
    pub const APPROVAL_DENIED: &str = "approval-denied";
    /// Stop status: the run's time budget had passed before a decision.
    pub const TIME_BUDGET: &str = "time-budget";
    /// Error: the verified payload is not a known request.
    pub const UNKNOWN_REQUEST: &str = "unknown-request";
    /// Error: `RESET` on the agent link.
    pub const NOT_PERMITTED: &str = "not-permitted";
    /// Error: a proposal after the run stopped.
    pub const RUN_STOPPED: &str = "run-stopped";
    /// Error: a proposal before the operator started a run.
    pub const NO_RUN: &str = "no-run";
    /// Error: the device broke its own invariant (a bug; never expected).
    pub const INTERNAL_ERROR: &str = "internal-error";
    /// Status state: no run started since boot.
    pub const IDLE: &str = "idle";
    /// Status state: the run takes proposals.
    pub const RUNNING: &str = "running";
}

/// An observation's `data` on the wire: a tool's result or an error word.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Data {
    /// `ok: false`: why there is no result.
    Word(&'static str),
    /// `ok: true`: the tool's result.
    Result(ToolResult),
}

type Frame<'a> = Reply<'a, Data>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No run since boot: the operator has not typed `start`.
    Idle,
    /// A run exists; the core's [`Run::status`] tells whether it stopped.
    Running,
    /// The time budget passed while no proposal came: the actuators are
    /// safe, and the next proposal is answered `stopped`/`time-budget`.
    TimeUp,
    /// The gate stopped the run on its time budget (and said so).
    TimeBudget,
}

/// A call waiting for the operator's answer. The proposal itself is kept as
/// its bytes (in [`Gate`]'s `pending_json`) and read again on the answer:
/// 1 KiB of buffer instead of a parsed call of 2.4 KiB, and no copy of one
/// on the stack.
struct Pending {
    len: usize,
    call_id: Identifier,
    kind: Kind,
    step: u8,
    deadline_ms: u64,
}

/// How an approval prompt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum Answer {
    /// `y`, `yes` or `approve` on the console.
    Approve,
    /// `n`, `no` or `deny` on the console.
    Deny,
    /// No answer within the approval timeout: a refusal.
    Timeout,
}

/// Why the console cannot start a run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum StartError {
    /// An approval prompt is waiting for its answer.
    ApprovalPending,
}

/// The device gate: the run, the registry, the actuators, the approval
/// state and the time budget.
pub struct Gate {
    run: DeviceRun,
    tools: ToolSet<TOOL_CAPACITY>,
    phase: Phase,
    runs: u32,
    started_ms: u64,
    time_budget_ms: u32,
    approval_timeout_ms: u32,
    pending: Option<Pending>,
    pending_json: [u8; FRAME_MAX],
    actuators: Actuators,
    frame: [u8; FRAME_MAX + 1],
    last_frame_ticks: u64,
    /// Clock ticks at the last agent frame's line end and at its verdict.
    frame_start_ticks: u64,
    verdict_ticks: u64,
}

impl Gate {
    /// The device's tool registry as the run sees it ([`SPECS`], in order).
    /// Fails only if a name is invalid or repeated.
    pub fn tools() -> Result<ToolSet<TOOL_CAPACITY>, ToolSetError> {
        tool_set(&SPECS)
    }

    /// A gate with no run (the operator starts one) over `tools` (from
    /// [`Gate::tools`]) and the actuators, which are in the safe state.
    pub fn new(actuators: Actuators, tools: ToolSet<TOOL_CAPACITY>) -> Self {
        Self {
            run: Run::new(Self::default_limits(), tools.clone()),
            tools,
            phase: Phase::Idle,
            runs: 0,
            started_ms: 0,
            time_budget_ms: RUN_TIME_BUDGET_MS,
            approval_timeout_ms: APPROVAL_TIMEOUT_MS,
            pending: None,
            pending_json: [0; FRAME_MAX],
            actuators,
            frame: [0; FRAME_MAX + 1],
            last_frame_ticks: 0,
            frame_start_ticks: 0,
            verdict_ticks: 0,
        }
    }

    /// The budgets of a bare `start`: [`MAX_DECISIONS`], [`MAX_TOOL_CALLS`].
    pub const fn default_limits() -> RunLimits {
        match RunLimits::new(MAX_DECISIONS, MAX_TOOL_CALLS) {
            Ok(limits) => limits,
            Err(_) => RunLimits::DEFAULT,
        }
    }

    /// Starts run number `n` (returned): fresh budgets, the time budget
    /// counted from `now_ms`, actuators driven to the safe state. Only the
    /// operator console calls this.
    pub fn start(&mut self, limits: RunLimits, now_ms: u64) -> Result<u32, StartError> {
        if self.pending.is_some() {
            return Err(StartError::ApprovalPending);
        }
        self.run = Run::new(limits, self.tools.clone());
        self.phase = Phase::Running;
        self.runs = self.runs.wrapping_add(1);
        self.started_ms = now_ms;
        self.actuators.safe_state();
        defmt::info!(
            "run {=u32} started: max_decisions={=u8} max_tool_calls={=u8} time_budget_ms={=u32}",
            self.runs,
            limits.max_decisions(),
            limits.max_tool_calls(),
            self.time_budget_ms
        );
        Ok(self.runs)
    }

    /// Sets the approval timeout (console `timeout`).
    pub fn set_approval_timeout(&mut self, ms: u32) {
        self.approval_timeout_ms = ms;
    }

    /// Sets the time budget of the current run (counted from its start) and
    /// of later runs (console `deadline`).
    pub fn set_time_budget(&mut self, ms: u32) {
        self.time_budget_ms = ms;
    }

    /// The current approval timeout, ms.
    pub fn approval_timeout_ms(&self) -> u32 {
        self.approval_timeout_ms
    }

    /// The current time budget, ms.
    pub fn time_budget_ms(&self) -> u32 {
        self.time_budget_ms
    }

    /// Records how many core clock ticks the last agent frame took, from its
    /// line end to its reply (console `ticks`). A frame that waited for
    /// approval includes the wait.
    pub fn note_frame_ticks(&mut self, ticks: u64) {
        self.last_frame_ticks = ticks;
    }

    /// Core clock ticks of the last agent frame ([`Gate::note_frame_ticks`]).
    pub fn last_frame_ticks(&self) -> u64 {
        self.last_frame_ticks
    }

    /// Records the clock at an agent frame's line end, before it is
    /// verified: the start of [`Gate::verdict_ticks`].
    pub fn note_frame_start(&mut self, ticks: u64) {
        self.frame_start_ticks = ticks;
        self.verdict_ticks = 0;
    }

    /// Core clock ticks from the last proposal's line end to its verdict:
    /// checksum, request, validation, the run's decision and the argument
    /// check; what the gate adds before an actuator may move (console
    /// `ticks`). 0 if the last frame was not a proposal.
    pub fn verdict_ticks(&self) -> u64 {
        self.verdict_ticks
    }

    fn note_verdict(&mut self) {
        self.verdict_ticks = board::clock_ticks().saturating_sub(self.frame_start_ticks);
    }

    /// Whether a call waits for the operator (the agent link is not read then).
    pub fn awaiting_approval(&self) -> bool {
        self.pending.is_some()
    }

    /// `running`, `idle`, or the status the run stopped with.
    pub fn state(&self) -> &'static str {
        match self.phase {
            Phase::Idle => word::IDLE,
            Phase::TimeUp | Phase::TimeBudget => word::TIME_BUDGET,
            Phase::Running => self.run.status().map_or(word::RUNNING, Status::as_str),
        }
    }

    fn step(&self) -> u8 {
        u8::try_from(self.run.trace().len()).unwrap_or(u8::MAX)
    }

    /// Answers one agent frame (or transport error) per `docs/PROTOCOL.md`.
    /// A call that needs approval writes its prompt to `console` and returns
    /// without a reply; [`Gate::answer`] or [`Gate::poll`] replies later.
    pub fn on_agent_frame<W: Write>(
        &mut self,
        frame: Result<&[u8], FrameError>,
        now_ms: u64,
        agent: &mut W,
        console: &mut W,
    ) -> Result<(), W::Error> {
        let payload = match frame {
            Ok(payload) => payload,
            Err(e) => {
                defmt::warn!("agent link: {} (no decision used)", e);
                return self.error(agent, e.as_str());
            }
        };
        match Request::parse(payload) {
            Err(_) => {
                defmt::warn!("agent link: unknown request (no decision used)");
                self.error(agent, word::UNKNOWN_REQUEST)
            }
            Ok(Request::Hello) => self.send(
                agent,
                &Frame::Hello {
                    protocol: PROTOCOL_VERSION,
                    frame_max: FRAME_MAX,
                },
            ),
            Ok(Request::Status) => {
                let limits = self.run.limits();
                let status = Frame::Status {
                    run: self.runs,
                    decisions: self.step(),
                    max_decisions: limits.max_decisions(),
                    tool_attempts: self.run.tool_attempts(),
                    max_tool_calls: limits.max_tool_calls(),
                    state: self.state(),
                    actuators: board::read_leds(),
                };
                self.send(agent, &status)
            }
            Ok(Request::Reset) => {
                defmt::warn!("agent link: RESET refused (only the console starts a run)");
                self.error(agent, word::NOT_PERMITTED)
            }
            Ok(Request::Propose(json)) => self.propose(json, now_ms, agent, console),
        }
    }

    fn propose<W: Write>(
        &mut self,
        json: &[u8],
        now_ms: u64,
        agent: &mut W,
        console: &mut W,
    ) -> Result<(), W::Error> {
        match self.phase {
            Phase::Idle => return self.error(agent, word::NO_RUN),
            Phase::TimeBudget => return self.error(agent, word::RUN_STOPPED),
            Phase::Running if self.run.status().is_some() => {
                return self.error(agent, word::RUN_STOPPED)
            }
            Phase::Running | Phase::TimeUp => {}
        }
        let step = self.step();
        let run = self.runs;
        // SPEC C: the time budget is checked before each decision.
        if self.time_up(now_ms) {
            self.phase = Phase::TimeBudget;
            defmt::info!("run {=u32} step {=u8}: stopped: time-budget", run, step);
            return self.stopped(agent, step, word::TIME_BUDGET);
        }
        let action = ActionRef::parse(json);
        if let Err(e) = &action {
            defmt::info!("run {=u32} step {=u8}: invalid proposal: {}", run, step, e);
        }
        let verdict = match self.run.decide(action.as_ref().ok()) {
            Ok(verdict) => verdict,
            Err(RunError::Stopped(_)) => return self.error(agent, word::RUN_STOPPED),
            Err(e) => return self.internal(agent, e),
        };
        // A call to run is decided once its arguments are checked; every
        // other verdict is final here.
        if !matches!(verdict, Verdict::Execute { .. }) {
            self.note_verdict();
        }
        // The proposal stays where it was parsed; everything below borrows it.
        let tool = match (verdict, &action) {
            (Verdict::Stop(status), _) => {
                defmt::info!(
                    "run {=u32} step {=u8}: stopped: {=str}",
                    run,
                    step,
                    status.as_str()
                );
                return self.stopped(agent, step, status.as_str());
            }
            (Verdict::UnknownTool { progress }, Ok(ActionRef::Tool(call))) => {
                defmt::info!(
                    "run {=u32} step {=u8}: {=str} {=str}: unknown tool",
                    run,
                    step,
                    call.call_id.as_str(),
                    call.name.as_str()
                );
                self.observation(agent, step, call, false, Data::Word(word::UNKNOWN_TOOL))?;
                return self.after(agent, step, progress);
            }
            (Verdict::Execute { tool }, Ok(ActionRef::Tool(_))) => tool,
            (_, _) => return self.internal(agent, RunError::NoPendingCall),
        };
        let Ok(ActionRef::Tool(call)) = &action else {
            return self.internal(agent, RunError::NoPendingCall);
        };
        let Some((spec, kind)) = SPECS.get(tool).zip(KINDS.get(tool).copied()) else {
            return self.internal(agent, RunError::NoPendingCall);
        };
        let checked = spec.check(&call.arguments);
        self.note_verdict();
        if let Err(e) = checked {
            defmt::info!(
                "run {=u32} step {=u8}: {=str} {=str}: invalid arguments: {}",
                run,
                step,
                call.call_id.as_str(),
                call.name.as_str(),
                e
            );
            return self.refuse(agent, step, call, word::INVALID_ARGUMENTS);
        }
        if spec.needs_approval {
            defmt::info!(
                "run {=u32} step {=u8}: {=str} {=str}: asking the operator",
                run,
                step,
                call.call_id.as_str(),
                call.name.as_str()
            );
            let len = json.len().min(FRAME_MAX);
            if let (Some(keep), Some(bytes)) = (self.pending_json.get_mut(..len), json.get(..len)) {
                keep.copy_from_slice(bytes);
            }
            self.pending = Some(Pending {
                len,
                call_id: call.call_id.clone(),
                kind,
                step,
                deadline_ms: now_ms.saturating_add(u64::from(self.approval_timeout_ms)),
            });
            // Pending first: even if the console cannot be written, the
            // timeout still settles the call and the run goes on.
            return prompt(console, spec, call);
        }
        self.execute(agent, step, call, kind)
    }

    /// Whether the run's time budget has run out at `now_ms`.
    fn out_of_time(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.started_ms) >= u64::from(self.time_budget_ms)
    }

    /// Whether the run has stopped on time, or would now: a later `deadline`
    /// never revives a run whose actuators were already made safe.
    fn time_up(&self, now_ms: u64) -> bool {
        self.phase == Phase::TimeUp || self.out_of_time(now_ms)
    }

    /// The operator's answer to the pending prompt (or its timeout). Returns
    /// `false` when nothing was pending.
    pub fn answer<W: Write>(
        &mut self,
        answer: Answer,
        now_ms: u64,
        agent: &mut W,
        console: &mut W,
    ) -> Result<bool, W::Error> {
        let Some(pending) = self.pending.take() else {
            return Ok(false);
        };
        let call_id = pending.call_id.as_str();
        defmt::info!(
            "run {=u32} step {=u8}: {=str}: operator {}",
            self.runs,
            pending.step,
            call_id,
            answer
        );
        match answer {
            Answer::Approve => console.write_all(b"approved ")?,
            Answer::Deny | Answer::Timeout => console.write_all(b"denied ")?,
        }
        console.write_all(call_id.as_bytes())?;
        if answer == Answer::Timeout {
            console.write_all(b" (timeout)")?;
        }
        console.write_all(b"\n")?;
        // The same bytes parse to the same call they did before the prompt.
        // The call borrows them while the gate changes, so they move out of
        // the gate first (the buffer is free again: nothing is pending).
        let kept = core::mem::replace(&mut self.pending_json, [0; FRAME_MAX]);
        let json = kept.get(..pending.len).unwrap_or_default();
        let action = ActionRef::parse(json);
        let Ok(ActionRef::Tool(call)) = &action else {
            return self.internal(agent, RunError::NoPendingCall).map(|()| true);
        };
        // The time budget may have run out while the operator decided: an
        // approval that comes too late never moves the actuator (SPEC C: no
        // call runs past an exhausted budget), and the run stops on time.
        if answer == Answer::Approve && self.time_up(now_ms) {
            console.write_all(b"too late: the run's time budget ran out; not executed\n")?;
            defmt::info!(
                "run {=u32} step {=u8}: approval after the time budget",
                self.runs,
                pending.step
            );
            self.refuse(agent, pending.step, call, word::TIME_BUDGET)?;
            if self.run.status().is_none() {
                self.phase = Phase::TimeBudget;
                self.stopped(agent, pending.step, word::TIME_BUDGET)?;
            }
            return Ok(true);
        }
        if answer == Answer::Approve {
            self.execute(agent, pending.step, call, pending.kind)
        } else {
            self.refuse(agent, pending.step, call, word::APPROVAL_DENIED)
        }
        .map(|()| true)
    }

    /// Refuses the pending call once its approval timeout has passed, and
    /// stops the run when its time budget passes even if no proposal comes:
    /// the actuators go to their safe state then, not at the next proposal.
    pub fn poll<W: Write>(
        &mut self,
        now_ms: u64,
        agent: &mut W,
        console: &mut W,
    ) -> Result<(), W::Error> {
        if self.phase == Phase::Running && self.run.status().is_none() && self.out_of_time(now_ms) {
            defmt::info!("run {=u32}: time budget passed; actuators safe", self.runs);
            self.phase = Phase::TimeUp;
            self.actuators.safe_state();
        }
        match &self.pending {
            Some(p) if now_ms >= p.deadline_ms => self
                .answer(Answer::Timeout, now_ms, agent, console)
                .map(|_| ()),
            _ => Ok(()),
        }
    }

    /// One console line about the run:
    /// `run 1 running decisions=2/8 tool_attempts=1/4 time_left_ms=118000 approval=none`.
    pub fn write_status<W: Write>(&self, now_ms: u64, out: &mut W) -> Result<(), W::Error> {
        if self.phase == Phase::Idle {
            return out.write_all(b"idle: no run (type start)\n");
        }
        let limits = self.run.limits();
        let elapsed = now_ms.saturating_sub(self.started_ms);
        out.write_all(b"run ")?;
        write_decimal(out, u64::from(self.runs))?;
        out.write_all(b" ")?;
        out.write_all(self.state().as_bytes())?;
        out.write_all(b" decisions=")?;
        write_decimal(out, u64::from(self.step()))?;
        out.write_all(b"/")?;
        write_decimal(out, u64::from(limits.max_decisions()))?;
        out.write_all(b" tool_attempts=")?;
        write_decimal(out, u64::from(self.run.tool_attempts()))?;
        out.write_all(b"/")?;
        write_decimal(out, u64::from(limits.max_tool_calls()))?;
        out.write_all(b" time_left_ms=")?;
        write_decimal(out, u64::from(self.time_budget_ms).saturating_sub(elapsed))?;
        out.write_all(b" approval=")?;
        match &self.pending {
            Some(p) => out.write_all(p.call_id.as_bytes())?,
            None => out.write_all(b"none")?,
        }
        out.write_all(b"\n")
    }

    /// Runs an accepted, checked (and, if needed, approved) call and replies.
    fn execute<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        call: &DeviceCall,
        kind: Kind,
    ) -> Result<(), W::Error> {
        let result = tools::execute(kind, &call.arguments, &mut self.actuators);
        let done = match self.run.complete(result.as_ref()) {
            Ok(done) => done,
            Err(e) => return self.internal(agent, e),
        };
        let data = match (done.data, result) {
            (ObservationData::Result { .. }, Some(result)) => Data::Result(result),
            _ => Data::Word(word::TOOL_ERROR),
        };
        defmt::info!(
            "run {=u32} step {=u8}: {=str} {=str}: executed, ok={=bool}",
            self.runs,
            step,
            call.call_id.as_str(),
            call.name.as_str(),
            matches!(data, Data::Result(_))
        );
        self.observation(agent, step, call, true, data)?;
        self.after(agent, step, done.progress)
    }

    /// Ends a counted attempt whose tool did not run (invalid arguments,
    /// approval refused, too late): the core records it as not executed
    /// (`Run::refuse`), and so does the wire, with the reason.
    fn refuse<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        call: &DeviceCall,
        why: &'static str,
    ) -> Result<(), W::Error> {
        let progress = match self.run.refuse() {
            Ok(progress) => progress,
            Err(e) => return self.internal(agent, e),
        };
        self.observation(agent, step, call, false, Data::Word(why))?;
        self.after(agent, step, progress)
    }

    fn after<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        progress: Progress,
    ) -> Result<(), W::Error> {
        match progress {
            Progress::Continue => Ok(()),
            Progress::Stopped(status) => {
                defmt::info!(
                    "run {=u32} step {=u8}: stopped: {=str}",
                    self.runs,
                    step,
                    status.as_str()
                );
                self.stopped(agent, step, status.as_str())
            }
        }
    }

    fn observation<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        call: &DeviceCall,
        executed: bool,
        data: Data,
    ) -> Result<(), W::Error> {
        let reply = Frame::Observation {
            run: self.runs,
            step,
            call_id: call.call_id.as_str(),
            name: call.name.as_str(),
            executed,
            ok: matches!(data, Data::Result(_)),
            data,
        };
        self.send(agent, &reply)
    }

    fn stopped<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        status: &'static str,
    ) -> Result<(), W::Error> {
        // Any stop: nothing on the agent link can move an actuator any more,
        // so none is left where the agent put it (docs/FIRMWARE.md).
        self.actuators.safe_state();
        if self.phase == Phase::TimeUp {
            self.phase = Phase::TimeBudget;
        }
        let run = self.runs;
        self.send(agent, &Frame::Stopped { run, step, status })
    }

    fn error<W: Write>(&mut self, agent: &mut W, error: &'static str) -> Result<(), W::Error> {
        self.send(agent, &Frame::Error { error })
    }

    fn internal<W: Write>(&mut self, agent: &mut W, e: RunError) -> Result<(), W::Error> {
        defmt::error!("gate invariant broken: {}", e);
        self.error(agent, word::INTERNAL_ERROR)
    }

    fn send<W: Write>(&mut self, agent: &mut W, reply: &Frame<'_>) -> Result<(), W::Error> {
        match link::write_frame(&mut self.frame, reply) {
            Ok(n) => agent.write_all(self.frame.get(..n).unwrap_or_default()),
            Err(e) => {
                // Every reply of this device is far below a frame (results are
                // a few dozen bytes); a bug, answered so the link stays in step.
                defmt::error!("reply does not fit a frame: {}", e);
                let fallback = Frame::Error {
                    error: word::INTERNAL_ERROR,
                };
                let n = link::write_frame(&mut self.frame, &fallback).unwrap_or(0);
                agent.write_all(self.frame.get(..n).unwrap_or_default())
            }
        }
    }
}

/// `approve? c3 HassValveOpen {"name":"valve"} [y/n]` on the console.
fn prompt<W: Write>(console: &mut W, spec: &ToolSpec, call: &DeviceCall) -> Result<(), W::Error> {
    let mut args = [0u8; 128];
    console.write_all(b"approve? ")?;
    console.write_all(call.call_id.as_bytes())?;
    console.write_all(b" ")?;
    console.write_all(spec.name.as_bytes())?;
    console.write_all(b" ")?;
    // Checked arguments of an approval tool are short; a longer encoding
    // is elided rather than cut.
    match budgetgate_core::pyjson::encode(&call.arguments, &mut args) {
        Ok(n) => console.write_all(args.get(..n).unwrap_or_default())?,
        Err(_) => console.write_all(b"{...}")?,
    }
    console.write_all(b" [y/n]\n")
}
