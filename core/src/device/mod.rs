//! The device gate, sans-IO: one bounded run (`SPEC A2`) between an agent
//! link and a device's actuators, with operator approval and a time budget
//! (`SPEC C`), speaking the framed protocol of [`link`] (`docs/PROTOCOL.md`,
//! protocol version [`PROTOCOL_VERSION`]).
//!
//! Frames in, replies and actuator commands out, time passed in: the gate
//! never reads a clock or a port. The device maker lists its tools as
//! [`ToolSpec`](crate::registry::ToolSpec)s (registered in the run's one tool table by
//! [`ToolSet::from_specs`]), types their calls as one [`Command`] (parsed once from a
//! checked call) and implements [`Actuators`] (a command in, a result out;
//! the safe state; the actuators read back); the board's main loop feeds
//! [`DeviceGate::on_frame`] every frame the [`link::FrameDecoder`]
//! completes, [`DeviceGate::on_answer`] every operator answer and
//! [`DeviceGate::poll`] the clock. Replies are sealed frames
//! written to the agent link; approval prompts and their outcomes are lines
//! written to the operator console. Both are [`embedded_io::Write`]rs.
//!
//! Per agent frame: a transport error or a request that is not a proposal
//! uses no decision; `PROPOSE {json}` is validated by [`ActionRef::parse`]
//! (one pass, strings left in the frame) and decided by [`Run::decide`],
//! whose [`Verdict`] hands back the call it is about, borrowed from the
//! frame: the gate keeps no copy of the proposal to match against it. An
//! accepted call of a registered tool has its arguments checked against its
//! [`ToolSpec`](crate::registry::ToolSpec) and is parsed, once, into the device's [`Command`] (parse,
//! then trust: a call that does not parse is refused as `invalid-arguments`,
//! and [`Actuators::execute`] sees only the command, never the raw
//! arguments); a tool that needs approval waits for the operator, the
//! command and the run's [`Pending`](crate::run::Pending) token kept with
//! the call's bytes; then the command runs and its result is measured by
//! [`Run::complete`], which consumes the token (a refusal by
//! [`Run::refuse`]). Every word the gate writes is the core's ([`word`],
//! here re-exported from [`crate::word`]).
//!
//! Every stop of a run (any status, `final` included, and the time budget as
//! soon as [`DeviceGate::poll`] sees it pass) drives every actuator to its
//! safe state: once the run has stopped nothing on the agent link can move an
//! actuator, so what is left must be safe without supervision
//! (`docs/FIRMWARE.md`, "Stopping").
//!
//! An actuator may also have a duty window ([`DeviceGate::set_duty_window`]:
//! at most `max_on_ms` on in any `window_ms`, the budget an actuator
//! governor keeps; issue 15): a call that would switch it on
//! ([`Actuators::switches`]) when its window holds its most on-time is
//! refused, not executed ([`word::DUTY_LIMIT`]), and [`DeviceGate::poll`]
//! drives it to its safe state ([`Actuators::safe_state_of`]) the instant
//! its window is spent. The windows are device-wide, not per run (a new run
//! does not give on-time back), and are stored with the run
//! ([`crate::resume`]).
//!
//! ```
//! use budgetgate_core::device::{
//!     Actuators, Command, CommandError, DeviceGate, Timing, ToolFailure,
//! };
//! use budgetgate_core::link::{self, FrameDecoder};
//! use budgetgate_core::registry::{CheckedArguments, Param, ParamKind, ToolSpec};
//! use budgetgate_core::{RunLimits, ToolSet};
//!
//! /// One lamp; its safe state is off.
//! struct Lamp(bool);
//!
//! const TOOLS: [ToolSpec; 1] = [ToolSpec {
//!     name: "HassTurnOn",
//!     description: "turn the lamp on",
//!     params: &[Param { key: "name", kind: ParamKind::Choice(&["lamp"]), required: true }],
//!     needs_approval: false,
//! }];
//!
//! /// The lamp's calls, typed: tool 0, whose `name` can only be "lamp".
//! enum LampCommand {
//!     On,
//! }
//!
//! impl Command for LampCommand {
//!     fn parse(tool: usize, _args: &CheckedArguments<'_>) -> Result<Self, CommandError> {
//!         match tool {
//!             0 => Ok(Self::On),
//!             _ => Err(CommandError::Tool(tool)),
//!         }
//!     }
//! }
//!
//! impl Actuators for Lamp {
//!     type Command = LampCommand;
//!     type Result = &'static str;
//!     fn execute(&mut self, command: LampCommand) -> Result<&'static str, ToolFailure> {
//!         match command {
//!             LampCommand::On => { self.0 = true; Ok("on") }
//!         }
//!     }
//!     fn safe_state(&mut self) { self.0 = false; }
//!     fn read_back(&mut self) -> u32 { u32::from(self.0) }
//! }
//!
//! // The agent link and the console; a board passes its UARTs.
//! let (mut agent, mut console) = ([0u8; 256], [0u8; 64]);
//! let tools = ToolSet::from_specs(&TOOLS)?;
//! let mut gate: DeviceGate<Lamp, 1> = DeviceGate::new(Lamp(false), tools, Timing::DEFAULT);
//! gate.start(RunLimits::DEFAULT, 0)?;
//!
//! let mut frame = [0u8; 128];
//! let json = br#"{"kind":"tool","call_id":"c1","name":"HassTurnOn","arguments":{"name":"lamp"}}"#;
//! let n = link::write_request(&mut frame, "PROPOSE", Some(json))?;
//! let mut rx: FrameDecoder = FrameDecoder::new();
//! let (mut replies, mut prompts) = (&mut agent[..], &mut console[..]);
//! for &byte in &frame[..n] {
//!     if let Some(line) = rx.push(byte) {
//!         gate.on_frame(line, 10, &mut replies, &mut prompts)?;
//!     }
//! }
//! assert!(gate.actuators().0, "the lamp is on");
//! let written = 256 - replies.len();
//! assert!(agent[..written].starts_with(
//!     br#"{"type":"observation","run":1,"step":0,"call_id":"c1","name":"HassTurnOn","executed":true,"ok":true,"data":"on"}*"#
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Non-features
//! * No clock, no UART, no pins: time is an argument in milliseconds from
//!   any monotonic origin, and the actuators are the device maker's.
//! * No console command parser: the board reads its operator's lines and
//!   calls [`DeviceGate::start`], [`DeviceGate::on_answer`] and the setters.

use core::fmt;

pub use embedded_io;
use embedded_io::Write;

#[cfg(doc)]
use crate::action::ActionRef;
#[cfg(doc)]
use crate::approval::Decision;
use crate::budget::{Ledger, Limit};
use crate::limits::{DEFAULT_MAX_RUN_MILLIS, MAX_STEPS, MAX_TOOLS};
use crate::link::{FrameError, Request, FRAME_MAX, PROTOCOL_VERSION};
use crate::resume::AuditVerdict;
#[cfg(doc)]
use crate::run::Verdict;
use crate::run::{Run, RunLimits, Status, ToolSet, TraceRow};
use crate::tools::ToolTable;

/// `defmt::info!` with the `defmt` feature, nothing (the arguments only
/// borrowed) without it: the core never needs a global logger.
macro_rules! log {
    ($level:ident, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        #[cfg(feature = "defmt")]
        defmt::$level!($fmt $(, $arg)*);
        #[cfg(not(feature = "defmt"))]
        let _ = ($(&$arg,)*);
    }};
}

mod actuators;
mod approval;
pub(crate) mod audit;
pub(crate) mod duty;
mod journal;
mod keys;
pub mod link;
mod propose;
pub(crate) mod record;
mod reply;
pub(crate) mod watchdog;

pub use actuators::{Actuators, Command, CommandError, JournalFailure, Switch, ToolFailure};
use approval::Pending;
pub use duty::DutyError;
use duty::{duty_clock, DutyWindows};
pub use journal::Resumed;
pub use keys::ApprovalKeys;
pub use reply::Data;
use reply::Frame;
use watchdog::Watchdog;

/// The words of the protocol (`docs/PROTOCOL.md`) the device gate spells:
/// the core's one module of words ([`crate::word`]).
pub use crate::word;

/// The run's two clocks, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Timing {
    /// Wall time a run may take from its start (`SPEC C`: 120 s by
    /// default); checked before each decision and by [`DeviceGate::poll`].
    pub time_budget_ms: u32,
    /// How long an approval prompt waits; no answer in time is a refusal.
    pub approval_timeout_ms: u32,
    /// The dead-man switch, ms (0: off): when no valid frame has come on the
    /// agent link for this long while an actuator may be out of its safe
    /// state (a tool ran since the gate last drove them safe), and no call
    /// waits for the operator, [`DeviceGate::poll`] drives the actuators
    /// safe, logs it ([`AuditVerdict::DeadMan`]) and refuses every proposal
    /// ([`word::DEAD_MAN`]) until the operator starts a run: the host
    /// crashing or its link dropping never leaves a valve open. Any valid
    /// frame feeds it, so a host with nothing to propose sends `STATUS`.
    pub dead_man_ms: u32,
}

impl Timing {
    /// 120 s for the run (`SPEC C`), 30 s for an approval.
    pub const DEFAULT: Self = Self {
        time_budget_ms: DEFAULT_MAX_RUN_MILLIS as u32,
        approval_timeout_ms: 30_000,
        dead_man_ms: 0,
    };
}

impl Default for Timing {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How the operator answered an approval prompt: the one
/// [`crate::approval::Answer`]. Its deadline is the prompt's
/// [`crate::approval::Question`]: an approval at or after it is a timeout.
pub use crate::approval::Answer;

/// Why [`DeviceGate::start`] cannot start a run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StartError {
    /// An approval prompt is waiting for its answer.
    ApprovalPending,
    /// The new run could not be stored ([`Actuators::journal`] failed): it
    /// takes no proposal ([`word::STORAGE_ERROR`]).
    Storage,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ApprovalPending => f.write_str("an approval prompt is waiting for its answer"),
            Self::Storage => f.write_str("the new run could not be stored"),
        }
    }
}

impl core::error::Error for StartError {}

/// A write to the agent link (`A`, its writer's error) or to the operator
/// console (`C`) failed. The gate's state is whole either way: the decision
/// was made and recorded, and a console that fails never keeps a call from
/// its reply (the reply is written first or regardless).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IoError<A, C> {
    /// The agent link: a reply is lost (or cut), and the agent will time out.
    Agent(A),
    /// The console: a prompt or an answer line is lost.
    Console(C),
}

impl<E> IoError<E, E> {
    /// The error, when the agent link and the console are the same kind of
    /// writer (two UARTs).
    pub fn into_inner(self) -> E {
        match self {
            Self::Agent(e) | Self::Console(e) => e,
        }
    }
}

impl<A: fmt::Debug, C: fmt::Debug> fmt::Display for IoError<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Agent(e) => write!(f, "agent link write failed: {e:?}"),
            Self::Console(e) => write!(f, "console write failed: {e:?}"),
        }
    }
}

impl<A: fmt::Debug, C: fmt::Debug> core::error::Error for IoError<A, C> {}

/// The run as the console reports it ([`DeviceGate::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The run's number, from 1.
    pub run: u32,
    /// `running`, or the status the run stopped with (`time-budget` too).
    pub state: &'static str,
    /// Decision rounds used.
    pub decisions: u8,
    /// Most decision rounds.
    pub max_decisions: u8,
    /// Tool attempts used.
    pub tool_attempts: u8,
    /// Most tool attempts.
    pub max_tool_calls: u8,
    /// What is left of the time budget, ms.
    pub time_left_ms: u64,
    /// The call id waiting for approval, if any.
    pub approval: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No run since boot: the operator has not started one.
    Idle,
    /// A run that started at `started_ms` and whose time budget had not
    /// passed when last looked at; the core's [`Run::status`] tells whether
    /// it stopped on another budget.
    Running {
        /// The clock at the operator's start, ms.
        started_ms: u64,
    },
    /// The time budget passed while no proposal came: the actuators are
    /// safe, and the next proposal is answered `stopped`/`time-budget`. No
    /// clock is kept: no later time budget revives the run.
    TimeUp,
    /// The gate stopped the run on its time budget (and said so).
    TimeBudget,
}

/// The device gate: the run, the tool registry, the actuators, the approval
/// state and the time budget. `TOOLS` is the tool capacity (at most 8,
/// `SPEC A2`). About 6 KiB with the defaults (two 1 KiB frame buffers and
/// a [`Run`] of 32 steps), so a board keeps it in a `static`.
pub struct DeviceGate<A: Actuators, const TOOLS: usize = MAX_TOOLS> {
    /// The run; its tool table holds the tools' names, signatures and
    /// approval rules.
    run: Run<MAX_STEPS, TOOLS>,
    phase: Phase,
    runs: u32,
    timing: Timing,
    pending: Option<Pending<A::Command>>,
    pending_json: [u8; FRAME_MAX],
    actuators: A,
    frame: [u8; FRAME_MAX + 1],
    /// The clock as last passed in, ms (the time of audit entries).
    clock_ms: u64,
    /// Time the run used before the last resume, ms.
    carried_ms: u64,
    /// Why proposals are refused until the operator starts a run: the
    /// state could not be stored ([`word::STORAGE_ERROR`]), or the dead-man
    /// switch tripped ([`word::DEAD_MAN`]).
    halted: Option<&'static str>,
    /// A tool ran since the gate last drove the actuators safe.
    moved: bool,
    /// The dead-man switch's clock: fed by every valid frame on the agent
    /// link and every operator answer ([`Timing::dead_man_ms`]).
    dead_man: Watchdog,
    /// The actuators' duty windows, in the windows' clock ([`duty_clock`]).
    duty: DutyWindows,
}

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    /// A gate with no run (the operator starts one) over `tools` and
    /// `actuators`, which are driven to their safe state.
    pub fn new(mut actuators: A, tools: ToolSet<TOOLS>, timing: Timing) -> Self {
        actuators.safe_state();
        Self {
            run: Run::new(RunLimits::DEFAULT, tools),
            phase: Phase::Idle,
            runs: 0,
            timing,
            pending: None,
            pending_json: [0; FRAME_MAX],
            actuators,
            frame: [0; FRAME_MAX + 1],
            clock_ms: 0,
            carried_ms: 0,
            halted: None,
            moved: false,
            dead_man: Watchdog::new(u64::from(timing.dead_man_ms), 0),
            duty: DutyWindows::default(),
        }
    }

    /// Wall time the run has used at `now_ms`, ms (with what it used
    /// before a resume).
    fn used_ms(&self, now_ms: u64) -> u64 {
        match self.phase {
            Phase::Idle => 0,
            Phase::Running { started_ms } => now_ms
                .saturating_sub(started_ms)
                .saturating_add(self.carried_ms),
            Phase::TimeUp | Phase::TimeBudget => {
                u64::from(self.timing.time_budget_ms).max(self.carried_ms)
            }
        }
    }

    /// Starts run number `n` (returned, from 1): fresh budgets, the time
    /// budget counted from `now_ms`, actuators driven to the safe state.
    /// Only the operator starts a run (the agent's `RESET` is refused).
    pub fn start(&mut self, limits: RunLimits, now_ms: u64) -> Result<u32, StartError> {
        if self.pending.is_some() {
            return Err(StartError::ApprovalPending);
        }
        self.run.restart(limits);
        self.phase = Phase::Running { started_ms: now_ms };
        self.runs = self.runs.wrapping_add(1);
        self.clock_ms = now_ms;
        self.carried_ms = 0;
        self.halted = None;
        self.dead_man.reset(now_ms);
        self.safe();
        if !self.journal(0, None, AuditVerdict::Started) {
            return Err(StartError::Storage);
        }
        log!(
            info,
            "run {=u32} started: max_decisions={=u8} max_tool_calls={=u8} time_budget_ms={=u32}",
            self.runs,
            limits.max_decisions(),
            limits.max_tool_calls(),
            self.timing.time_budget_ms
        );
        Ok(self.runs)
    }

    /// Sets the approval timeout of later prompts.
    pub fn set_approval_timeout(&mut self, ms: u32) {
        self.timing.approval_timeout_ms = ms;
    }

    /// Sets the time budget of the current run (counted from its start) and
    /// of later runs. A run that already stopped on time stays stopped.
    pub fn set_time_budget(&mut self, ms: u32) {
        self.timing.time_budget_ms = ms;
    }

    /// The two clocks' settings.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The registered tools (tool index `i` is entry `i`): names, approval
    /// rules and signatures.
    pub fn tools(&self) -> &ToolTable<TOOLS> {
        self.run.tools()
    }

    /// The actuators.
    pub fn actuators(&self) -> &A {
        &self.actuators
    }

    /// The actuators, to read a measurement a board keeps there; a tool call
    /// never reaches them but through the gate.
    pub fn actuators_mut(&mut self) -> &mut A {
        &mut self.actuators
    }

    /// Whether a call waits for the operator. The board should read nothing
    /// from the agent link then: its bytes wait, and are answered in order.
    pub fn awaiting_approval(&self) -> bool {
        self.pending.is_some()
    }

    /// `idle`, `running`, or the status the run stopped with.
    pub fn state(&self) -> &'static str {
        if let Some(why) = self.halted.filter(|w| *w == word::DEAD_MAN) {
            return why;
        }
        match self.phase {
            Phase::Idle => word::IDLE,
            Phase::TimeUp | Phase::TimeBudget => word::TIME_BUDGET,
            Phase::Running { .. } => self.run.status().map_or(word::RUNNING, Status::as_str),
        }
    }

    /// The run's counters at `now_ms`; `None` before the first run.
    pub fn snapshot(&self, now_ms: u64) -> Option<Snapshot<'_>> {
        let time_left_ms = match self.phase {
            Phase::Idle => return None,
            Phase::Running { .. } => {
                u64::from(self.timing.time_budget_ms).saturating_sub(self.used_ms(now_ms))
            }
            Phase::TimeUp | Phase::TimeBudget => 0,
        };
        let limits = self.run.limits();
        Some(Snapshot {
            run: self.runs,
            state: self.state(),
            decisions: self.step(),
            max_decisions: limits.max_decisions(),
            tool_attempts: self.run.tool_attempts(),
            max_tool_calls: limits.max_tool_calls(),
            time_left_ms,
            approval: self.pending.as_ref().map(|p| p.call_id.as_str()),
        })
    }

    /// The run's trace so far (`SPEC A2`).
    pub fn trace(&self) -> &[TraceRow] {
        self.run.trace()
    }

    fn step(&self) -> u8 {
        u8::try_from(self.run.trace().len()).unwrap_or(u8::MAX)
    }

    /// Answers one agent frame (or transport error) per `docs/PROTOCOL.md`,
    /// at `now_ms`. A call that needs approval writes its prompt to
    /// `console` and returns without a reply; [`DeviceGate::on_answer`] or
    /// [`DeviceGate::poll`] replies later. Errors are the writers' only;
    /// the decision is made and recorded either way.
    pub fn on_frame<W: Write, C: Write>(
        &mut self,
        frame: Result<&[u8], FrameError>,
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
    ) -> Result<(), IoError<W::Error, C::Error>> {
        self.clock_ms = now_ms;
        let payload = match frame {
            Ok(payload) => {
                // A frame that passed its checksum: the host is there.
                self.dead_man.feed(now_ms);
                payload
            }
            Err(e) => {
                log!(warn, "agent link: {} (no decision used)", e);
                return self.error(agent, e.as_str()).map_err(IoError::Agent);
            }
        };
        let replied = match Request::parse(payload) {
            Err(_) => {
                log!(warn, "agent link: unknown request (no decision used)");
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
                    actuators: self.actuators.read_back(),
                };
                self.send(agent, &status)
            }
            Ok(Request::Reset) => {
                log!(
                    warn,
                    "agent link: RESET refused (only the console starts a run)"
                );
                self.error(agent, word::NOT_PERMITTED)
            }
            Ok(Request::Propose(json)) => return self.propose(json, now_ms, agent, console),
        };
        replied.map_err(IoError::Agent)
    }

    /// Whether a run started at `started_ms` is out of time at `now_ms`:
    /// the ledger's rule for the time limit (`SPEC E`: one budget engine),
    /// on the time the run has used — since it started or resumed on this
    /// boot's clock, plus what it used before a power cut (`carried_ms`: a
    /// sum of two clocks, which the device keeps itself).
    fn out_of_time(&self, started_ms: u64, now_ms: u64) -> bool {
        let mut time: Ledger<0> = Ledger::new(0);
        time.set_max(Limit::Millis, Some(u64::from(self.timing.time_budget_ms)));
        time.record(
            Limit::Millis,
            now_ms
                .saturating_sub(started_ms)
                .saturating_add(self.carried_ms),
        );
        time.first_exhausted(|limit| limit == Limit::Millis)
            .is_some()
    }

    /// Whether the run has stopped on time, or would now: a later time
    /// budget never revives a run whose actuators were already made safe.
    fn time_up(&self, now_ms: u64) -> bool {
        match self.phase {
            Phase::Running { started_ms } => self.out_of_time(started_ms, now_ms),
            Phase::TimeUp | Phase::TimeBudget => true,
            Phase::Idle => false,
        }
    }

    /// The clock, at `now_ms`: refuses the pending call once its approval
    /// timeout has passed ([`Decision::TimedOut`]), and stops the run when
    /// its time budget passes even if no proposal comes: the actuators go
    /// to their safe state then, not at the next proposal.
    pub fn poll<W: Write, C: Write>(
        &mut self,
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
    ) -> Result<(), IoError<W::Error, C::Error>> {
        let passed = match self.phase {
            Phase::Running { started_ms } => self.out_of_time(started_ms, now_ms),
            _ => false,
        };
        if passed && self.run.status().is_none() {
            log!(
                info,
                "run {=u32}: time budget passed; actuators safe",
                self.runs
            );
            self.clock_ms = now_ms;
            self.phase = Phase::TimeUp;
            self.safe();
            let step = self.step();
            self.journal(step, None, AuditVerdict::TimeBudget);
        }
        self.check_dead_man(now_ms, console)
            .map_err(IoError::Console)?;
        let shown = self.check_duty(now_ms, console);
        if let Some(decision) = self
            .pending
            .as_ref()
            .and_then(|p| p.question.expired(now_ms))
        {
            self.conclude(decision, now_ms, agent, console)?;
        }
        shown.map_err(IoError::Console)
    }

    /// Drives every actuator to its safe state; their duty windows switch
    /// off at the gate's clock.
    fn safe(&mut self) {
        self.actuators.safe_state();
        self.moved = false;
        let now = duty_clock(self.clock_ms);
        for window in self.duty.iter_mut().flatten() {
            duty::switch_off_device(window, now);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod command_tests;
