//! The device gate's durable state (`SPEC E`; issue 15): every change of
//! the run handed to [`Actuators::journal`] before its effect is released,
//! and the stored run resumed at boot ([`DeviceGate::resume`]).

use super::duty::{duty_clock, DutyWindow};
use super::{Actuators, DeviceGate, Phase};
use crate::ident::Identifier;
use crate::resume::{self, AuditEntry, AuditVerdict, ResumeError, RunView, Stage};
use crate::run::{Progress, RunLimits};
use crate::word;

/// What [`DeviceGate::resume`] found in the stored run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// The run's number.
    pub run: u32,
    /// `idle`, `running`, or the status it had stopped with.
    pub state: &'static str,
    /// Decisions already used.
    pub decisions: u8,
    /// The call that was executing (or waiting for approval) when the power
    /// went: recorded as `interrupted` (executed, not ok, if it was
    /// executing; not executed if it waited), its actuator driven safe.
    pub interrupted: Option<Identifier>,
}

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    /// Resumes the run stored in `bytes` (a record [`Actuators::journal`]
    /// was given) at `now_ms`, on a gate that has started no run since it
    /// was built: the run's number, budgets used, trace (so its call ids
    /// stay used) and time used come back as committed, never less (`SPEC
    /// E`: a reset never gives budget back; time without power is not
    /// counted). The actuators are driven to their safe state. A call that
    /// was executing or waiting for approval is recorded `interrupted`
    /// (journaled, with the stop it causes), and the agent's next proposal
    /// goes on from there. The duty windows' on-spans come back re-based at
    /// `now_ms` (time without power is not counted), into the windows this
    /// gate has ([`Self::set_duty_window`], set before): the gate's
    /// configuration is the board's, the record's history is kept; a stored
    /// window of an actuator that has none here is dropped. Refuses (and
    /// changes nothing) a record that does not decode ([`resume::decode`]),
    /// names a tool this gate does not have as executed, or comes after a
    /// start.
    pub fn resume(&mut self, bytes: &[u8], now_ms: u64) -> Result<Resumed, ResumeError> {
        if self.runs != 0 || self.phase != Phase::Idle {
            return Err(ResumeError::Field("a gate that has started a run"));
        }
        let header = resume::decode(bytes)?;
        let in_flight = matches!(header.stage, Stage::AwaitingApproval | Stage::Executing);
        if usize::from(header.rows) > self.run.capacity() {
            return Err(ResumeError::Field("rows"));
        }
        let unregistered = resume::rows(bytes, &header).any(|row| {
            matches!(&row, crate::run::TraceRow::Tool { name, executed: true, .. }
                if self.run.tools().position(name.as_str()).is_none())
        });
        if unregistered {
            return Err(ResumeError::Field("an executed tool this device lacks"));
        }
        // Checked above and by `decode`: the rows fit and the state agrees.
        let restored = self.run.restore(
            header.limits,
            resume::rows(bytes, &header),
            header.tool_attempts,
            in_flight,
            header.status,
        );
        if !restored || self.run.trace().len() != usize::from(header.rows) {
            // Unreachable after `decode`; never a half-restored run.
            self.run
                .restore(RunLimits::DEFAULT, core::iter::empty(), 0, false, None);
            return Err(ResumeError::Field("rows"));
        }
        for stored in resume::duty(bytes, &header) {
            if let Some(Some(window)) = self.duty.get_mut(usize::from(stored.actuator)) {
                *window = DutyWindow::new(window.window_ms(), window.max_on_ms());
                stored.restore_into(window, duty_clock(now_ms));
            }
        }
        self.runs = header.run;
        self.clock_ms = now_ms;
        self.carried_ms = header.used_ms;
        self.phase = match header.phase {
            resume::Phase::Idle => Phase::Idle,
            resume::Phase::Running => Phase::Running { started_ms: now_ms },
            resume::Phase::TimeUp => Phase::TimeUp,
            resume::Phase::TimeBudget => Phase::TimeBudget,
        };
        self.safe();
        let mut interrupted = None;
        if let Some(token) = self.run.restored_pending() {
            let step = token.step();
            let ids = match self.run.trace().last() {
                Some(crate::run::TraceRow::Tool { call_id, name, .. }) => {
                    Some((call_id.clone(), name.clone()))
                }
                _ => None,
            };
            let progress = match header.stage {
                Stage::Executing => self
                    .run
                    .complete(token, None::<&()>)
                    .map(|done| done.progress),
                _ => self.run.refuse(token),
            };
            if let Some((call_id, name)) = ids {
                log!(
                    warn,
                    "run {=u32} step {=u8}: {=str} {=str}: interrupted by a reset",
                    self.runs,
                    step,
                    call_id.as_str(),
                    name.as_str()
                );
                self.journal(
                    step,
                    Some((call_id.as_str(), name.as_str())),
                    AuditVerdict::Interrupted,
                );
                if let Ok(Progress::Stopped(status)) = progress {
                    self.journal(step, None, AuditVerdict::Stopped(status));
                }
                interrupted = Some(call_id);
            }
        }
        log!(
            info,
            "run {=u32} resumed: {=str}, {=u8} decisions, {=u64} ms used",
            self.runs,
            self.state(),
            self.step(),
            self.carried_ms
        );
        Ok(Resumed {
            run: self.runs,
            state: self.state(),
            decisions: self.step(),
            interrupted,
        })
    }

    /// Hands the run and `verdict` to [`Actuators::journal`]; `false` (and
    /// the gate halted, actuators safe) if it could not be stored, or the
    /// gate was halted already.
    pub(super) fn journal(
        &mut self,
        step: u8,
        call: Option<(&str, &str)>,
        verdict: AuditVerdict,
    ) -> bool {
        let stage = if self.pending.is_some() {
            Stage::AwaitingApproval
        } else if self.run.awaiting_outcome() {
            Stage::Executing
        } else if self.run.status().is_some() || self.phase == Phase::TimeBudget {
            Stage::Stopped
        } else {
            Stage::AwaitingProposal
        };
        self.journal_in(stage, step, call, verdict)
    }

    /// [`Self::journal`] in `stage`.
    pub(super) fn journal_in(
        &mut self,
        stage: Stage,
        step: u8,
        call: Option<(&str, &str)>,
        verdict: AuditVerdict,
    ) -> bool {
        if self.halted.is_some() {
            return false;
        }
        let phase = match self.phase {
            Phase::Idle => resume::Phase::Idle,
            Phase::Running { .. } => resume::Phase::Running,
            Phase::TimeUp => resume::Phase::TimeUp,
            Phase::TimeBudget => resume::Phase::TimeBudget,
        };
        let used_ms = self.used_ms(self.clock_ms);
        let (call_id, tool) = call.unwrap_or(("", ""));
        let view = RunView {
            run: self.runs,
            phase,
            stage,
            status: self.run.status(),
            used_ms,
            limits: self.run.limits(),
            tool_attempts: self.run.tool_attempts(),
            trace: self.run.trace(),
            duty: &self.duty,
            duty_clock_ms: duty_clock(self.clock_ms),
        };
        let entry = AuditEntry {
            run: self.runs,
            step,
            call_id,
            tool,
            verdict,
            time_ms: self.clock_ms,
        };
        if self.actuators.journal(&view, &entry).is_ok() {
            return true;
        }
        log!(
            error,
            "run {=u32} step {=u8}: state not stored; the gate refuses proposals",
            self.runs,
            step
        );
        self.halted = Some(word::STORAGE_ERROR);
        self.safe();
        false
    }
}
