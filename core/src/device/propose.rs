//! One proposal through the device gate (`SPEC A2`, `SPEC C`): validated,
//! decided by the run, its arguments checked and parsed once into the
//! device's command, then held for the operator, executed, or refused.

use embedded_io::Write;

use super::approval::{prompt, Pending};
use super::duty::{duty_clock, switch_off_device};
use super::reply::{observation, Data};
use super::{Actuators, Command, CommandError, DeviceGate, IoError, Phase, Switch};
use crate::action::{ActionRef, ToolCallRef, Values};
use crate::approval::Question;
use crate::link::{self, FRAME_MAX};
use crate::registry::{check_into, CheckedArguments};
use crate::resume::{AuditVerdict, Stage};
use crate::run::{ObservationData, Pending as Token, Progress, RunError, Status, Verdict};
use crate::tools::ToolRule;
use crate::word;

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    pub(super) fn propose<W: Write, C: Write>(
        &mut self,
        json: &[u8],
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
    ) -> Result<(), IoError<W::Error, C::Error>> {
        let mut prompted = Ok(());
        self.decide(json, now_ms, agent, console, &mut prompted)
            .map_err(IoError::Agent)?;
        prompted.map_err(IoError::Console)
    }

    /// Decides a proposal and replies, or keeps it for approval and writes
    /// its prompt (whose outcome goes to `prompted`: the reply and the
    /// prompt fail apart).
    fn decide<W: Write, C: Write>(
        &mut self,
        json: &[u8],
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
        prompted: &mut Result<(), C::Error>,
    ) -> Result<(), W::Error> {
        if let Some(why) = self.halted {
            return self.error(agent, why);
        }
        match self.phase {
            Phase::Idle => return self.error(agent, word::NO_RUN),
            Phase::TimeBudget => return self.error(agent, word::RUN_STOPPED),
            Phase::Running { .. } if self.run.status().is_some() => {
                return self.error(agent, word::RUN_STOPPED)
            }
            Phase::Running { .. } | Phase::TimeUp => {}
        }
        let step = self.step();
        let run = self.runs;
        // SPEC C: the time budget is checked before each decision.
        if self.time_up(now_ms) {
            self.phase = Phase::TimeBudget;
            self.actuators.on_verdict();
            log!(
                info,
                "run {=u32} step {=u8}: stopped: time-budget",
                run,
                step
            );
            return self.stopped(agent, step, AuditVerdict::TimeBudget);
        }
        // The arguments' values as the reading found them: checked against
        // the tool's signature below without reading the document again.
        let mut values = Values::new();
        let action = ActionRef::parse_into(json, &mut values);
        if let Err(e) = &action {
            log!(
                info,
                "run {=u32} step {=u8}: invalid proposal: {}",
                run,
                step,
                e
            );
        }
        let verdict = match self.run.decide(action.as_ref().ok()) {
            Ok(verdict) => verdict,
            Err(RunError::Stopped(_)) => return self.error(agent, word::RUN_STOPPED),
            Err(e) => return self.internal(agent, e),
        };
        // A call to run is decided once its arguments are checked; every
        // other verdict is final here.
        if !matches!(verdict, Verdict::Execute { .. }) {
            self.actuators.on_verdict();
        }
        // The proposal stays where it was parsed; the verdict borrows it.
        let (tool, call, token) = match verdict {
            Verdict::Execute {
                tool,
                call,
                pending,
            } => (tool, call, pending),
            Verdict::UnknownTool { call, progress } => {
                log!(
                    info,
                    "run {=u32} step {=u8}: {=str} {=str}: unknown tool",
                    run,
                    step,
                    call.call_id.as_str(),
                    call.name.as_str()
                );
                self.journal(
                    step,
                    Some((call.call_id.as_str(), call.name.as_str())),
                    AuditVerdict::UnknownTool,
                );
                self.observation(agent, step, call, false, Data::Word(word::UNKNOWN_TOOL))?;
                return self.after(agent, step, progress);
            }
            Verdict::Final { .. } => {
                return self.after(agent, step, Progress::Stopped(Status::Final))
            }
            Verdict::Stop { status, .. } => {
                return self.after(agent, step, Progress::Stopped(status))
            }
        };
        // Not by type: the run's verdict names an entry of its own table.
        // Never expected; the run then awaits an outcome it never gets, and
        // refuses every later proposal.
        let Some(entry) = self.run.tools().get(tool) else {
            return self.internal(agent, RunError::NoPendingCall);
        };
        // A tool without a signature takes no arguments here.
        let (params, needs_approval) = (
            entry.signature().unwrap_or(&[]),
            entry.rule() == ToolRule::NeedsApproval,
        );
        // Parse, then trust: the call becomes its command once, here; a
        // command that does not parse is refused as arguments that break
        // the signature are, and from here on only the command exists.
        // Checked in place, never moved: the checked arguments are about
        // 200 bytes on a 32-bit board, and each move a `memcpy` of about as
        // many instructions before the verdict.
        let mut args = CheckedArguments::new();
        let parsed = match check_into(params, &values, &mut args) {
            Ok(()) => A::Command::parse(tool, &args),
            Err(e) => Err(CommandError::Argument(e)),
        };
        self.actuators.on_verdict();
        let command = match parsed {
            Ok(command) => command,
            Err(e) => {
                log!(
                    info,
                    "run {=u32} step {=u8}: {=str} {=str}: invalid arguments: {}",
                    run,
                    step,
                    call.call_id.as_str(),
                    call.name.as_str(),
                    e
                );
                return self.refuse(agent, call, token, word::INVALID_ARGUMENTS);
            }
        };
        if needs_approval {
            // No prompt for a call its duty window refuses now (execution
            // checks again: the window may be spent by the answer).
            if let Switch::On(actuator) = self.actuators.switches(&command) {
                if let Some(Err(spent)) = self
                    .duty
                    .get(actuator)
                    .and_then(Option::as_ref)
                    .map(|window| window.check_on(duty_clock(now_ms)))
                {
                    return self.refuse_duty(agent, call, token, spent);
                }
            }
            log!(
                info,
                "run {=u32} step {=u8}: {=str} {=str}: asking the operator",
                run,
                step,
                call.call_id.as_str(),
                call.name.as_str()
            );
            let ids = (call.call_id.as_str(), call.name.as_str());
            if !self.journal_in(
                Stage::AwaitingApproval,
                step,
                Some(ids),
                AuditVerdict::Asking,
            ) {
                // Not stored: nothing waits; the call is refused.
                return self.refuse(agent, call, token, word::TOOL_ERROR);
            }
            let len = json.len().min(FRAME_MAX);
            if let (Some(keep), Some(bytes)) = (self.pending_json.get_mut(..len), json.get(..len)) {
                keep.copy_from_slice(bytes);
            }
            self.pending = Some(Pending {
                len,
                call_id: call.call_id.clone(),
                command,
                token,
                question: Question::asked(now_ms, u64::from(self.timing.approval_timeout_ms)),
            });
            // Pending first: even if the console cannot be written, the
            // timeout still settles the call and the run goes on.
            *prompted = prompt(console, call);
            return Ok(());
        }
        self.execute(agent, call, command, token)
    }

    /// Runs the command of an accepted, checked (and, if needed, approved)
    /// call and replies.
    pub(super) fn execute<W: Write>(
        &mut self,
        agent: &mut W,
        call: &ToolCallRef<'_>,
        command: A::Command,
        token: Token,
    ) -> Result<(), W::Error> {
        let step = token.step();
        let ids = (call.call_id.as_str(), call.name.as_str());
        let switch = self.actuators.switches(&command);
        let now = duty_clock(self.clock_ms);
        if let Switch::On(actuator) = switch {
            if let Some(Some(window)) = self.duty.get_mut(actuator) {
                // On from here, before the journal: a record stored from
                // now on counts the longest this call can keep it on.
                if let Err(spent) = window.try_switch_on(now) {
                    return self.refuse_duty(agent, call, token, spent);
                }
            }
        }
        // Stored before the actuator may move: found at boot, this call is
        // known to have been executing.
        if !self.journal(step, Some(ids), AuditVerdict::Executing) {
            return self.refuse(agent, call, token, word::TOOL_ERROR);
        }
        self.moved = true;
        let result = self.actuators.execute(command).ok();
        // A call that switches on and fails may have moved its actuator: its
        // window stays on (towards off) until the actuator is made safe.
        if let (Switch::Off(actuator), Some(_)) = (switch, &result) {
            if let Some(Some(window)) = self.duty.get_mut(actuator) {
                switch_off_device(window, now);
            }
        }
        // Sealed before the run measures it: a result the contract allows
        // (4096 bytes) that one reply frame cannot carry is a `tool-error`
        // here, in the run as on the wire, never an `ok` the agent cannot
        // read. The frame is written once either way.
        let sealed = result.as_ref().and_then(|result| {
            let reply = observation(self.runs, step, call, true, Data::Result(result), None);
            link::write_frame(&mut self.frame, &reply).ok()
        });
        let done = match self
            .run
            .complete(token, result.as_ref().filter(|_| sealed.is_some()))
        {
            Ok(done) => done,
            Err(e) => return self.internal(agent, e),
        };
        let sealed = sealed.filter(|_| matches!(done.data, ObservationData::Result { .. }));
        let verdict = match sealed {
            Some(_) => AuditVerdict::Executed,
            None => AuditVerdict::ToolError,
        };
        self.journal(step, Some(ids), verdict);
        log!(
            info,
            "run {=u32} step {=u8}: {=str} {=str}: executed, ok={=bool}",
            self.runs,
            step,
            call.call_id.as_str(),
            call.name.as_str(),
            sealed.is_some()
        );
        match sealed {
            Some(n) => agent.write_all(self.frame.get(..n).unwrap_or_default())?,
            None => self.observation(agent, step, call, true, Data::Word(word::TOOL_ERROR))?,
        }
        self.after(agent, step, done.progress)
    }

    /// Ends a counted attempt whose tool did not run (invalid arguments,
    /// approval refused, too late): the core records it as not executed
    /// (`Run::refuse`), and so does the wire, with the reason.
    pub(super) fn refuse<W: Write>(
        &mut self,
        agent: &mut W,
        call: &ToolCallRef<'_>,
        token: Token,
        why: &'static str,
    ) -> Result<(), W::Error> {
        self.refuse_with(agent, call, token, why, None)
    }

    pub(super) fn refuse_with<W: Write>(
        &mut self,
        agent: &mut W,
        call: &ToolCallRef<'_>,
        token: Token,
        why: &'static str,
        retry_after_ms: Option<u32>,
    ) -> Result<(), W::Error> {
        let step = token.step();
        let progress = match self.run.refuse(token) {
            Ok(progress) => progress,
            Err(e) => return self.internal(agent, e),
        };
        let verdict = match why {
            word::INVALID_ARGUMENTS => AuditVerdict::InvalidArguments,
            word::APPROVAL_DENIED => AuditVerdict::ApprovalDenied,
            word::TIME_BUDGET => AuditVerdict::TimeBudget,
            word::DUTY_LIMIT => AuditVerdict::DutyLimit,
            _ => AuditVerdict::StorageError,
        };
        self.journal(
            step,
            Some((call.call_id.as_str(), call.name.as_str())),
            verdict,
        );
        let reply = observation(
            self.runs,
            step,
            call,
            false,
            Data::Word(why),
            retry_after_ms,
        );
        self.send(agent, &reply)?;
        self.after(agent, step, progress)
    }
}
