//! A call waiting for the operator (`SPEC C`, approval): its prompt on the
//! console, the answer ([`DeviceGate::on_answer`]) or the timeout, and the
//! call settled: run, or refused.

use embedded_io::Write;

use super::{Actuators, Answer, DeviceGate, IoError, Phase};
use crate::action::{ActionRef, ToolCallRef, Values};
use crate::approval::{Decision, Question};
use crate::ident::Identifier;
use crate::link::FRAME_MAX;
use crate::resume::AuditVerdict;
use crate::run::{Pending as Token, RunError};
use crate::word;

/// A call waiting for the operator's answer, with its command (parsed once,
/// before the prompt) and the run's token for it. The proposal itself is
/// kept as its bytes (in the gate's `pending_json`) and read again on the
/// answer, for the ids of its reply: 1 KiB of buffer instead of a parsed
/// call, and no copy of one on the stack.
pub(super) struct Pending<C> {
    pub(super) len: usize,
    pub(super) call_id: Identifier,
    pub(super) command: C,
    pub(super) token: Token,
    pub(super) question: Question,
}

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    /// The operator's answer to the pending prompt, at `now_ms`, decided by
    /// the prompt's [`Question`]: an approval at or after its deadline is a
    /// timeout (even when no [`DeviceGate::poll`] has refused it yet), and
    /// [`Answer::Later`] before it leaves the prompt waiting. A decision
    /// writes `approved ID`, `denied ID` or `denied ID (timeout)` to
    /// `console` and the call's observation to `agent`. An approval after
    /// the time budget ran out moves nothing: the call is refused with
    /// `time-budget` and the run stops on time. Returns `false` when nothing
    /// was pending.
    pub fn on_answer<W: Write, C: Write>(
        &mut self,
        answer: Answer,
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
    ) -> Result<bool, IoError<W::Error, C::Error>> {
        let Some(pending) = &self.pending else {
            return Ok(false);
        };
        match pending.question.answer(answer, now_ms) {
            Some(decision) => self
                .conclude(decision, now_ms, agent, console)
                .map(|()| true),
            None => Ok(true),
        }
    }

    /// Ends the pending prompt with `decision`, at `now_ms`.
    pub(super) fn conclude<W: Write, C: Write>(
        &mut self,
        decision: Decision,
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
    ) -> Result<(), IoError<W::Error, C::Error>> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        self.clock_ms = now_ms;
        // The host waited for this answer: the dead-man counts from here.
        self.dead_man.feed(now_ms);
        log!(
            info,
            "run {=u32} step {=u8}: {=str}: operator {}",
            self.runs,
            pending.token.step(),
            pending.call_id.as_str(),
            decision
        );
        // The console line and the reply fail apart: a console that cannot
        // be written never leaves the call without its answer.
        let mut shown = answered(console, decision, pending.call_id.as_str());
        self.settle(pending, decision, now_ms, agent, console, &mut shown)
            .map_err(IoError::Agent)?;
        shown.map_err(IoError::Console)
    }

    /// Settles the call that waited for `decision`: runs it or refuses it,
    /// and replies.
    fn settle<W: Write, C: Write>(
        &mut self,
        pending: Pending<A::Command>,
        decision: Decision,
        now_ms: u64,
        agent: &mut W,
        console: &mut C,
        shown: &mut Result<(), C::Error>,
    ) -> Result<(), W::Error> {
        // The same bytes parse to the same call they did before the prompt.
        // The call borrows them while the gate changes, so they move out of
        // the gate first (the buffer is free again: nothing is pending).
        let kept = core::mem::replace(&mut self.pending_json, [0; FRAME_MAX]);
        let json = kept.get(..pending.len).unwrap_or_default();
        // Read as `decide` read it: one reading of a document in the image
        // (`parse` would build a second copy of the scanner); its command
        // was parsed then, so the values are not used again.
        let mut values = Values::new();
        let action = ActionRef::parse_into(json, &mut values);
        let Ok(ActionRef::Tool(call)) = &action else {
            // Not by type: the bytes were kept after they parsed to this
            // call. Never expected; as above, the run refuses what follows.
            return self.internal(agent, RunError::NoPendingCall);
        };
        let step = pending.token.step();
        // The time budget may have run out while the operator decided: an
        // approval that comes too late never moves the actuator (SPEC C: no
        // call runs past an exhausted budget), and the run stops on time.
        if decision.runs() && self.time_up(now_ms) {
            if shown.is_ok() {
                *shown =
                    console.write_all(b"too late: the run's time budget ran out; not executed\n");
            }
            log!(
                info,
                "run {=u32} step {=u8}: approval after the time budget",
                self.runs,
                step
            );
            self.refuse(agent, call, pending.token, word::TIME_BUDGET)?;
            if self.run.status().is_none() {
                self.phase = Phase::TimeBudget;
                self.stopped(agent, step, AuditVerdict::TimeBudget)?;
            }
            return Ok(());
        }
        if decision.runs() {
            self.execute(agent, call, pending.command, pending.token)
        } else {
            self.refuse(agent, call, pending.token, word::APPROVAL_DENIED)
        }
    }
}

/// `approved ID`, `denied ID` or `denied ID (timeout)` on the console.
fn answered<C: Write>(console: &mut C, decision: Decision, call_id: &str) -> Result<(), C::Error> {
    match decision {
        Decision::Approved => console.write_all(b"approved ")?,
        Decision::Refused | Decision::TimedOut => console.write_all(b"denied ")?,
    }
    console.write_all(call_id.as_bytes())?;
    if decision == Decision::TimedOut {
        console.write_all(b" (timeout)")?;
    }
    console.write_all(b"\n")
}

/// `approve? c3 HassValveOpen {"name":"valve"} [y/n]` on the console.
pub(super) fn prompt<C: Write>(console: &mut C, call: &ToolCallRef<'_>) -> Result<(), C::Error> {
    let mut args = [0u8; 128];
    console.write_all(b"approve? ")?;
    console.write_all(call.call_id.as_bytes())?;
    console.write_all(b" ")?;
    // The name the run matched exactly against the tool's entry.
    console.write_all(call.name.as_bytes())?;
    console.write_all(b" ")?;
    // Checked arguments of an approval tool are short; a longer encoding
    // is elided rather than cut.
    match crate::pyjson::encode(&call.arguments, &mut args) {
        Ok(n) => console.write_all(args.get(..n).unwrap_or_default())?,
        Err(_) => console.write_all(b"{...}")?,
    }
    console.write_all(b" [y/n]\n")
}
