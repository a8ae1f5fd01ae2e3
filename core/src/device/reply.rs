//! What the device gate writes to the agent link (`docs/PROTOCOL.md`): an
//! observation ([`Data`]: a tool's result or an error word), a stop or an
//! error, each sealed into one frame.

use embedded_io::Write;
use serde::Serialize;

use super::{Actuators, DeviceGate, Phase};
use crate::action::ToolCallRef;
use crate::link::{self, Reply};
use crate::resume::AuditVerdict;
use crate::run::{Progress, RunError};
use crate::word;

/// An observation's `data` on the wire: a tool's result or an error word.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Data<R> {
    /// `ok: false`: why there is no result.
    Word(&'static str),
    /// `ok: true`: the tool's result.
    Result(R),
}

pub(super) type Frame<'a, R> = Reply<&'a str, Data<&'a R>>;

/// The observation reply of `call`, round `step` of run `run`
/// (`retry_after_ms`: with `duty-limit` only).
pub(super) fn observation<'a, R: Serialize>(
    run: u32,
    step: u8,
    call: &'a ToolCallRef<'_>,
    executed: bool,
    data: Data<&'a R>,
    retry_after_ms: Option<u32>,
) -> Frame<'a, R> {
    Frame::Observation {
        run,
        step,
        call_id: call.call_id.as_str(),
        name: call.name.as_str(),
        executed,
        ok: matches!(data, Data::Result(_)),
        data,
        retry_after_ms,
    }
}

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    pub(super) fn after<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        progress: Progress,
    ) -> Result<(), W::Error> {
        match progress {
            Progress::Continue => Ok(()),
            Progress::Stopped(status) => {
                log!(
                    info,
                    "run {=u32} step {=u8}: stopped: {=str}",
                    self.runs,
                    step,
                    status.as_str()
                );
                self.stopped(agent, step, AuditVerdict::Stopped(status))
            }
        }
    }

    pub(super) fn observation<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        call: &ToolCallRef<'_>,
        executed: bool,
        data: Data<&A::Result>,
    ) -> Result<(), W::Error> {
        let reply = observation(self.runs, step, call, executed, data, None);
        self.send(agent, &reply)
    }

    pub(super) fn stopped<W: Write>(
        &mut self,
        agent: &mut W,
        step: u8,
        verdict: AuditVerdict,
    ) -> Result<(), W::Error> {
        // Any stop: nothing on the agent link can move an actuator any more,
        // so none is left where the agent put it (docs/FIRMWARE.md).
        self.safe();
        if self.phase == Phase::TimeUp {
            self.phase = Phase::TimeBudget;
        }
        self.journal(step, None, verdict);
        let status = verdict.as_str();
        let run = self.runs;
        self.send(agent, &Frame::Stopped { run, step, status })
    }

    pub(super) fn error<W: Write>(
        &mut self,
        agent: &mut W,
        error: &'static str,
    ) -> Result<(), W::Error> {
        self.send(agent, &Frame::Error { error })
    }

    pub(super) fn internal<W: Write>(
        &mut self,
        agent: &mut W,
        e: RunError,
    ) -> Result<(), W::Error> {
        log!(error, "gate invariant broken: {}", e);
        self.error(agent, word::INTERNAL_ERROR)
    }

    pub(super) fn send<W: Write>(
        &mut self,
        agent: &mut W,
        reply: &Frame<'_, A::Result>,
    ) -> Result<(), W::Error> {
        // Every reply but an observation with a result is a few dozen
        // bytes, and that one is sealed (and refused if too large) in
        // `execute`: the fallback below is for a bug.
        match link::write_frame(&mut self.frame, reply) {
            Ok(n) => agent.write_all(self.frame.get(..n).unwrap_or_default()),
            Err(_e) => {
                // Answered so the link stays in step.
                log!(error, "reply does not fit a frame: {}", _e);
                let fallback: Frame<'_, A::Result> = Frame::Error {
                    error: word::INTERNAL_ERROR,
                };
                let n = link::write_frame(&mut self.frame, &fallback).unwrap_or(0);
                agent.write_all(self.frame.get(..n).unwrap_or_default())
            }
        }
    }
}
