//! The device run's stored form (`SPEC E`, durable state; `SPEC A2`
//! bounds): [`RunView`] encodes a run, [`decode`] checks a record and
//! [`rows`] and [`duty`] read it back. The layout and what decoding refuses are documented on
//! [`crate::resume`], which re-exports this module.

use core::fmt;

use super::duty::{DutyWindow, DutyWindows};
use crate::bytes::{Malformed, CRC};
use crate::limits::{DUTY_SPANS, MAX_DECISIONS, MAX_DUTY_WINDOWS, MAX_TOOL_CALLS};
use crate::run::{RejectReason, RunLimits, Status, TraceRow};

/// The run record's version; a record of another version is refused.
/// Version 2 added the duty windows.
pub const RUN_RECORD_VERSION: u8 = 2;
const MAGIC: [u8; 3] = *b"BGR";
/// Identifier capacity (call ids and tool names), bytes.
pub(super) const ID_MAX: usize = 40;
const HEADER: usize = 3 + 1 + 4 + 1 + 1 + 1 + 8 + 1 + 1 + 1 + 1;
const TOOL_ROW_MAX: usize = 1 + 1 + (1 + ID_MAX) * 2;
/// A duty window with every span: actuator, window, most on-time, span
/// count, spans.
const DUTY_MAX: usize = 1 + 4 + 4 + 1 + DUTY_SPANS * (4 + 4);

/// The most bytes a run record takes: the header, [`MAX_TOOL_CALLS`] tool
/// rows of the longest ids and names, one stop row, every duty window with
/// every span, the CRC (1 670 bytes).
pub const RUN_RECORD_MAX: usize =
    HEADER + MAX_TOOL_CALLS as usize * TOOL_ROW_MAX + 2 + 1 + MAX_DUTY_WINDOWS * DUTY_MAX + 4;

/// Where the run's time budget stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Phase {
    /// No run started.
    Idle,
    /// A run whose time budget had not passed.
    Running,
    /// The time budget passed while no proposal came (actuators made safe).
    TimeUp,
    /// The run was stopped on its time budget.
    TimeBudget,
}

/// Where the run's current call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Stage {
    /// Waiting for the agent's next proposal.
    AwaitingProposal,
    /// The last tool row's call waits for the operator; nothing has moved.
    AwaitingApproval,
    /// The last tool row's call was released to its actuator: if this is
    /// found at boot, the call was executing when the power went.
    Executing,
    /// The run has stopped (its status says why, or the phase: time budget).
    Stopped,
}

/// The run as stored: borrowed from the gate, encoded by [`RunView::encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunView<'a> {
    /// The run's number, from 1 (0: no run yet).
    pub run: u32,
    /// The time budget's state.
    pub phase: Phase,
    /// The current call's state.
    pub stage: Stage,
    /// The run's status once stopped on a budget of `SPEC A2`.
    pub status: Option<Status>,
    /// Wall time the run has used, ms (the time budget is counted on from
    /// here after a reset; time without power is not counted).
    pub used_ms: u64,
    /// The run's budgets.
    pub limits: RunLimits,
    /// Tool attempts used.
    pub tool_attempts: u8,
    /// The trace so far: one row per decision.
    pub trace: &'a [TraceRow],
    /// The actuators' duty windows, in the windows' clock.
    pub duty: &'a DutyWindows,
    /// The windows' clock when the record is written, ms: the instant the
    /// spans are stored back from.
    pub duty_clock_ms: u64,
}

/// Why bytes are not a run record (or an audit entry) this build reads.
/// The gate refuses to resume from it (fail closed), and never starts the
/// stored run afresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ResumeError {
    /// Shorter than its fields say, longer than they say, or over the
    /// buffer given to [`RunView::encode`].
    Length(usize),
    /// Not a budgetgate run record.
    Magic,
    /// A record of another version.
    Version(u8),
    /// The checksum does not match: a torn or corrupted write.
    Checksum,
    /// A field is out of its range, or the rows are not a run the gate can
    /// reach (the field is named).
    Field(&'static str),
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "run record: {n} bytes do not hold its fields"),
            Self::Magic => f.write_str("not a budgetgate run record"),
            Self::Version(v) => write!(
                f,
                "run record version {v}; this build reads version {RUN_RECORD_VERSION}"
            ),
            Self::Checksum => f.write_str("run record checksum mismatch (torn or corrupted)"),
            Self::Field(what) => write!(f, "run record field out of range: {what}"),
        }
    }
}

impl core::error::Error for ResumeError {}

impl Malformed for ResumeError {
    fn length(len: usize) -> Self {
        Self::Length(len)
    }
    fn field(what: &'static str) -> Self {
        Self::Field(what)
    }
}

/// The run record's and the audit entry's writer and cursor.
pub(super) type Writer<'a> = crate::bytes::Writer<'a, ResumeError>;
pub(super) type Cursor<'a> = crate::bytes::Cursor<'a, ResumeError>;

pub(super) const fn status_code(status: Option<Status>) -> u8 {
    match status {
        None => 0,
        Some(Status::Final) => 1,
        Some(Status::PolicyError) => 2,
        Some(Status::DuplicateCall) => 3,
        Some(Status::ToolBudget) => 4,
        Some(Status::DecisionBudget) => 5,
    }
}

pub(super) fn status_of(code: u8) -> Result<Option<Status>, ResumeError> {
    Ok(match code {
        0 => None,
        1 => Some(Status::Final),
        2 => Some(Status::PolicyError),
        3 => Some(Status::DuplicateCall),
        4 => Some(Status::ToolBudget),
        5 => Some(Status::DecisionBudget),
        _ => return Err(ResumeError::Field("status")),
    })
}

const fn reason_code(reason: RejectReason) -> u8 {
    match reason {
        RejectReason::InvalidPolicyAction => 0,
        RejectReason::DuplicateCallId => 1,
        RejectReason::ToolBudget => 2,
    }
}

impl RunView<'_> {
    /// Encodes the run into `out` (give it [`RUN_RECORD_MAX`] bytes) and
    /// returns the record's length. Fails only if `out` is too small or a
    /// row cannot be stored (more rows than a run holds).
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, ResumeError> {
        let rows = u8::try_from(self.trace.len()).map_err(|_| ResumeError::Field("rows"))?;
        let mut w = Writer::new(out);
        w.put(&MAGIC)?;
        w.put(&[RUN_RECORD_VERSION])?;
        w.put(&self.run.to_le_bytes())?;
        let phase = match self.phase {
            Phase::Idle => 0,
            Phase::Running => 1,
            Phase::TimeUp => 2,
            Phase::TimeBudget => 3,
        };
        let stage = match self.stage {
            Stage::AwaitingProposal => 0,
            Stage::AwaitingApproval => 1,
            Stage::Executing => 2,
            Stage::Stopped => 3,
        };
        w.put(&[phase, stage, status_code(self.status)])?;
        w.put(&self.used_ms.to_le_bytes())?;
        w.put(&[
            self.limits.max_decisions(),
            self.limits.max_tool_calls(),
            self.tool_attempts,
            rows,
        ])?;
        for row in self.trace {
            match row {
                TraceRow::Final { .. } => w.put(&[0])?,
                TraceRow::Rejected { reason, .. } => w.put(&[1, reason_code(*reason)])?,
                TraceRow::Tool {
                    call_id,
                    name,
                    executed,
                    ok,
                    ..
                } => {
                    w.put(&[2, u8::from(*executed) | (u8::from(*ok) << 1)])?;
                    w.text(call_id.as_str())?;
                    w.text(name.as_str())?;
                }
            }
        }
        let windows = self.duty.iter().flatten().count();
        w.put(&[u8::try_from(windows).map_err(|_| ResumeError::Field("duty windows"))?])?;
        for (actuator, window) in self.duty.iter().enumerate() {
            if let Some(window) = window {
                encode_duty(&mut w, actuator, window, self.duty_clock_ms)?;
            }
        }
        let body = w.at;
        let crc = CRC.checksum(w.buf.get(..body).unwrap_or_default());
        w.put(&crc.to_le_bytes())?;
        Ok(w.at)
    }
}

/// One window, settled at `now` ([`DutyWindow::settled`]), its spans back
/// from its own instant.
fn encode_duty(
    w: &mut Writer<'_>,
    actuator: usize,
    window: &DutyWindow<DUTY_SPANS>,
    now_ms: u64,
) -> Result<(), ResumeError> {
    let field = |n: u64| u32::try_from(n).map_err(|_| ResumeError::Field("duty window"));
    if window.window_ms() == 0 || window.max_on_ms() > window.window_ms() {
        // Not a window the gate keeps; it would not decode.
        return Err(ResumeError::Field("duty window"));
    }
    let (settled, at) = window.settled(now_ms);
    let actuator = u8::try_from(actuator).map_err(|_| ResumeError::Field("duty actuator"))?;
    w.put(&[actuator])?;
    w.put(&field(window.window_ms())?.to_le_bytes())?;
    w.put(&field(window.max_on_ms())?.to_le_bytes())?;
    let spans = settled.spans();
    w.put(&[u8::try_from(spans.len()).map_err(|_| ResumeError::Field("duty spans"))?])?;
    for &(start, end) in spans {
        w.put(&field(at - end)?.to_le_bytes())?;
        w.put(&field(end - start)?.to_le_bytes())?;
    }
    Ok(())
}

/// One actuator's duty window as a record stores it: its configuration, and
/// its on-spans as (ms before the record's instant it ended, length), oldest
/// first, as [`decode`] checked them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDuty {
    /// The actuator, below [`MAX_DUTY_WINDOWS`].
    pub actuator: u8,
    /// The window's length, ms (at least 1).
    pub window_ms: u32,
    /// Its most on-time, ms (at most the window).
    pub max_on_ms: u32,
    /// The on-spans: (ms back from the record's instant to the span's end,
    /// length in ms).
    pub spans: heapless::Vec<(u32, u32), DUTY_SPANS>,
}

impl StoredDuty {
    /// The spans re-based at `now_ms` (the resume's instant, in the clock
    /// the windows will run in): the record's instant becomes `now_ms`, so
    /// time without power is not counted. Each is `[start, end)`, oldest
    /// first; a span that would begin before 0 begins at 0 (give the
    /// windows a clock that starts at least a window after 0, as the
    /// device gate does, so that none is cut).
    pub fn rebased(&self, now_ms: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.spans.iter().map(move |&(ago, len)| {
            let end = now_ms.saturating_sub(u64::from(ago));
            (end.saturating_sub(u64::from(len)), end)
        })
    }

    /// The stored spans added, re-based at `now_ms` ([`Self::rebased`]), to
    /// `window` (the device's own, whose configuration stays; it should be
    /// off and hold no later span).
    pub fn restore_into(&self, window: &mut DutyWindow<DUTY_SPANS>, now_ms: u64) {
        for (start, end) in self.rebased(now_ms) {
            window.add_past_span(start, end);
        }
    }

    /// The stored window with its own configuration, re-based at `now_ms`.
    pub fn window(&self, now_ms: u64) -> DutyWindow<DUTY_SPANS> {
        let mut window = DutyWindow::new(u64::from(self.window_ms), u64::from(self.max_on_ms));
        self.restore_into(&mut window, now_ms);
        window
    }
}

/// Reads one duty window and checks it (see the module's documentation).
fn duty_window(c: &mut Cursor<'_>) -> Result<StoredDuty, ResumeError> {
    let actuator = c.u8()?;
    if usize::from(actuator) >= MAX_DUTY_WINDOWS {
        return Err(ResumeError::Field("duty actuator"));
    }
    let (window_ms, max_on_ms) = (c.u32()?, c.u32()?);
    if window_ms == 0 || max_on_ms > window_ms {
        return Err(ResumeError::Field("duty window"));
    }
    let count = c.u8()?;
    let mut spans = heapless::Vec::new();
    // The earliest a span may end: the last one's start (spans are oldest
    // first, and do not overlap).
    let mut before = window_ms;
    for _ in 0..count {
        let (ago, len) = (c.u32()?, c.u32()?);
        if len == 0 {
            return Err(ResumeError::Field("an empty duty span"));
        }
        let start = ago
            .checked_add(len)
            .filter(|start| *start <= window_ms)
            .ok_or(ResumeError::Field("a duty span longer than its window"))?;
        if start > before {
            return Err(ResumeError::Field("duty spans out of order"));
        }
        before = ago;
        spans
            .push((ago, len))
            .map_err(|_| ResumeError::Field("duty spans"))?;
    }
    Ok(StoredDuty {
        actuator,
        window_ms,
        max_on_ms,
        spans,
    })
}

/// Reads and checks the duty windows: at most one per actuator, in order.
fn check_duty(c: &mut Cursor<'_>) -> Result<u8, ResumeError> {
    let count = c.u8()?;
    if usize::from(count) > MAX_DUTY_WINDOWS {
        return Err(ResumeError::Field("duty windows"));
    }
    let mut next = 0u8;
    for _ in 0..count {
        let window = duty_window(c)?;
        if window.actuator < next {
            return Err(ResumeError::Field("duty windows out of order"));
        }
        next = window.actuator + 1;
    }
    Ok(count)
}

/// The duty windows of a record [`decode`] accepted, in actuator order.
/// Yields nothing more once one does not read (which [`decode`] has ruled
/// out).
pub fn duty<'a>(bytes: &'a [u8], header: &Header) -> impl Iterator<Item = StoredDuty> + 'a {
    let mut c = Cursor::new(
        bytes
            .get(..bytes.len().saturating_sub(4))
            .unwrap_or_default(),
        HEADER,
    );
    let read = (0..header.rows).all(|step| row(&mut c, step).is_ok());
    let count = if read { c.u8().unwrap_or(0) } else { 0 };
    (0..count).map_while(move |_| duty_window(&mut c).ok())
}

/// The duty windows of a record [`decode`] accepted, each with its own
/// configuration, re-based at `now_ms` ([`StoredDuty::window`]): what a
/// [`RunView`] at `now_ms` encodes back to the same bytes.
pub fn duty_windows(bytes: &[u8], header: &Header, now_ms: u64) -> DutyWindows {
    let mut windows = DutyWindows::default();
    for stored in duty(bytes, header) {
        if let Some(slot) = windows.get_mut(usize::from(stored.actuator)) {
            *slot = Some(stored.window(now_ms));
        }
    }
    windows
}

/// A run record's fixed fields, as [`decode`] read and checked them. The
/// rows are read again by [`rows`], from the same checked bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The run's number.
    pub run: u32,
    /// The time budget's state.
    pub phase: Phase,
    /// The current call's state.
    pub stage: Stage,
    /// The status once stopped on an `SPEC A2` budget.
    pub status: Option<Status>,
    /// Wall time used, ms.
    pub used_ms: u64,
    /// The run's budgets.
    pub limits: RunLimits,
    /// Tool attempts used.
    pub tool_attempts: u8,
    /// Trace rows stored.
    pub rows: u8,
    /// Duty windows stored ([`duty`] reads them).
    pub duty: u8,
}

/// Reads and checks a record written by [`RunView::encode`]: the bytes,
/// the checksum, and that the rows are a run the gate can reach (see the
/// module's documentation). Returns its fixed fields.
pub fn decode(bytes: &[u8]) -> Result<Header, ResumeError> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or(ResumeError::Length(bytes.len()))?;
    let (body, crc) = bytes.split_at(body_len);
    let mut c = Cursor::new(body, 0);
    if c.take(3)? != MAGIC {
        return Err(ResumeError::Magic);
    }
    let version = c.u8()?;
    if version != RUN_RECORD_VERSION {
        return Err(ResumeError::Version(version));
    }
    let mut stored = [0u8; 4];
    stored.copy_from_slice(crc);
    if CRC.checksum(body) != u32::from_le_bytes(stored) {
        return Err(ResumeError::Checksum);
    }
    let run = c.u32()?;
    let phase = match c.u8()? {
        0 => Phase::Idle,
        1 => Phase::Running,
        2 => Phase::TimeUp,
        3 => Phase::TimeBudget,
        _ => return Err(ResumeError::Field("phase")),
    };
    let stage = match c.u8()? {
        0 => Stage::AwaitingProposal,
        1 => Stage::AwaitingApproval,
        2 => Stage::Executing,
        3 => Stage::Stopped,
        _ => return Err(ResumeError::Field("stage")),
    };
    let status = status_of(c.u8()?)?;
    let used_ms = c.u64()?;
    let limits = RunLimits::new(u32::from(c.u8()?), u32::from(c.u8()?))
        .map_err(|_| ResumeError::Field("limits"))?;
    let tool_attempts = c.u8()?;
    let rows = c.u8()?;
    let mut header = Header {
        run,
        phase,
        stage,
        status,
        used_ms,
        limits,
        tool_attempts,
        rows,
        duty: 0,
    };
    check(&header, &mut c)?;
    header.duty = check_duty(&mut c)?;
    if !c.done() {
        return Err(ResumeError::Length(bytes.len()));
    }
    Ok(header)
}

/// Reads one row; `step` is its position.
fn row(c: &mut Cursor<'_>, step: u8) -> Result<TraceRow, ResumeError> {
    Ok(match c.u8()? {
        0 => TraceRow::Final { step },
        1 => TraceRow::Rejected {
            step,
            reason: match c.u8()? {
                0 => RejectReason::InvalidPolicyAction,
                1 => RejectReason::DuplicateCallId,
                2 => RejectReason::ToolBudget,
                _ => return Err(ResumeError::Field("reject reason")),
            },
        },
        2 => {
            let flags = c.u8()?;
            if flags > 3 || flags == 2 {
                // ok without executed is no outcome the gate records.
                return Err(ResumeError::Field("tool row flags"));
            }
            TraceRow::Tool {
                step,
                executed: flags & 1 != 0,
                ok: flags & 2 != 0,
                call_id: c.ident("call id")?,
                name: c.ident("tool name")?,
            }
        }
        _ => return Err(ResumeError::Field("row kind")),
    })
}

/// The status a stop row means.
fn stop_status(row: &TraceRow) -> Option<Status> {
    match row {
        TraceRow::Final { .. } => Some(Status::Final),
        TraceRow::Rejected { reason, .. } => Some(match reason {
            RejectReason::InvalidPolicyAction => Status::PolicyError,
            RejectReason::DuplicateCallId => Status::DuplicateCall,
            RejectReason::ToolBudget => Status::ToolBudget,
        }),
        TraceRow::Tool { .. } => None,
    }
}

/// Checks the rows against the header: the run the gate can reach.
fn check(h: &Header, c: &mut Cursor<'_>) -> Result<(), ResumeError> {
    if h.rows > h.limits.max_decisions() || u32::from(h.rows) > MAX_DECISIONS {
        return Err(ResumeError::Field("rows"));
    }
    if h.phase == Phase::Idle && (h.run != 0 || h.rows != 0 || h.stage != Stage::AwaitingProposal) {
        return Err(ResumeError::Field("idle run"));
    }
    if h.phase != Phase::Idle && h.run == 0 {
        return Err(ResumeError::Field("run number"));
    }
    let mut tools = 0u8;
    let mut stop: Option<Status> = None;
    let mut last: Option<(bool, bool)> = None;
    // Call ids seen so far: compared with the rows before, read again.
    let start = c.at;
    for step in 0..h.rows {
        if stop.is_some() {
            return Err(ResumeError::Field("a stop row that is not last"));
        }
        let at = c.at;
        let r = row(c, step)?;
        stop = stop_status(&r);
        if let TraceRow::Tool {
            call_id,
            executed,
            ok,
            ..
        } = &r
        {
            tools = tools.saturating_add(1);
            last = Some((*executed, *ok));
            let mut before = Cursor::new(c.buf.get(..at).unwrap_or_default(), start);
            for s in 0..step {
                if let TraceRow::Tool { call_id: seen, .. } = row(&mut before, s)? {
                    if seen == *call_id {
                        return Err(ResumeError::Field("a call id given twice"));
                    }
                }
            }
        } else {
            last = None;
        }
    }
    if tools != h.tool_attempts || tools > h.limits.max_tool_calls() {
        return Err(ResumeError::Field("tool attempts"));
    }
    // The status follows from the rows: a stop row's, or the decision
    // budget once every decision is used.
    let expected = stop.or((h.rows >= h.limits.max_decisions()
        && !matches!(h.stage, Stage::AwaitingApproval | Stage::Executing))
    .then_some(Status::DecisionBudget));
    if h.status != expected {
        return Err(ResumeError::Field("status"));
    }
    let stopped = h.status.is_some() || h.phase == Phase::TimeBudget;
    let in_flight = matches!(h.stage, Stage::AwaitingApproval | Stage::Executing);
    let bad = match h.stage {
        Stage::Stopped => !stopped,
        Stage::AwaitingProposal => stopped,
        // The call in flight is the last row, a registered tool, with no
        // outcome yet, in a run that has not stopped.
        Stage::AwaitingApproval | Stage::Executing => {
            last != Some((true, false)) || !matches!(h.phase, Phase::Running | Phase::TimeUp)
        }
    };
    if bad {
        return Err(ResumeError::Field(if in_flight {
            "call in flight"
        } else {
            "stage"
        }));
    }
    Ok(())
}

/// The rows of a record [`decode`] accepted, in step order. Yields nothing
/// more once a row does not read (which [`decode`] has ruled out).
pub fn rows<'a>(bytes: &'a [u8], header: &Header) -> impl Iterator<Item = TraceRow> + 'a {
    let count = header.rows;
    let mut c = Cursor::new(
        bytes
            .get(..bytes.len().saturating_sub(4))
            .unwrap_or_default(),
        HEADER,
    );
    (0..count).map_while(move |step| row(&mut c, step).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::audit::{AuditEntry, AuditVerdict, AUDIT_ENTRY_MAX};
    use crate::ident::Identifier;
    use heapless::Vec;

    /// Issue 15 (the run's record in flash): `RUN_RECORD_MAX` is what the
    /// largest run a device can hold encodes to, exactly — sixteen tool
    /// rows of the longest ids and names, a stop row, every duty window
    /// with every span — and that record decodes; an audit entry of the
    /// longest ids is `AUDIT_ENTRY_MAX` bytes, exactly. A buffer sized by a wrong
    /// bound would truncate the record or waste flash. Found by
    /// cargo-mutants (the whole-core run, shard 2/4): nothing tied the
    /// layout's constants to what is written.
    #[test]
    fn the_largest_run_encodes_to_exactly_the_record_bound() {
        assert_eq!((RUN_RECORD_MAX, AUDIT_ENTRY_MAX), (1670, 97));
        let id = |n: usize, c: char| {
            let mut s: std::string::String = std::iter::repeat_n(c, 39).collect();
            s.insert(0, char::from(b'a' + (n % 26) as u8));
            Identifier::new(&s).unwrap()
        };
        let mut trace: std::vec::Vec<TraceRow> = (0..MAX_TOOL_CALLS as usize)
            .map(|n| TraceRow::Tool {
                step: n as u8,
                call_id: id(n, 'c'),
                name: id(n, 'n'),
                executed: true,
                ok: n % 2 == 0,
            })
            .collect();
        trace.push(TraceRow::Rejected {
            step: MAX_TOOL_CALLS as u8,
            reason: RejectReason::ToolBudget,
        });
        let window = 600_000u64;
        let full = || {
            let mut w = crate::budget::DutyWindow::<DUTY_SPANS>::new(window, 30_000);
            for k in 0..DUTY_SPANS as u64 {
                w.add_past_span(1_000 + k * 10_000, 1_000 + k * 10_000 + 1_000);
            }
            assert_eq!(w.spans().len(), DUTY_SPANS);
            Some(w)
        };
        let duty: DutyWindows = [full(), full(), full(), full()];
        let run = RunView {
            run: u32::MAX,
            phase: Phase::Running,
            stage: Stage::Stopped,
            status: Some(Status::ToolBudget),
            used_ms: 1234,
            limits: RunLimits::new(32, MAX_TOOL_CALLS).unwrap(),
            tool_attempts: MAX_TOOL_CALLS as u8,
            trace: &trace,
            duty: &duty,
            duty_clock_ms: 100_000,
        };
        let bytes = encode(&run);
        assert_eq!(bytes.len(), RUN_RECORD_MAX);
        assert!(decode(&bytes).is_ok(), "{:?}", decode(&bytes));
        let mut short = [0u8; RUN_RECORD_MAX - 1];
        assert!(run.encode(&mut short).is_err(), "one byte short is refused");

        let (call, tool) = (id(0, 'c'), id(1, 't'));
        let entry = AuditEntry {
            run: u32::MAX,
            step: 31,
            call_id: call.as_str(),
            tool: tool.as_str(),
            verdict: AuditVerdict::Executed,
            time_ms: u64::MAX,
        };
        let mut buf = [0u8; AUDIT_ENTRY_MAX];
        assert_eq!(entry.encode(&mut buf), Ok(AUDIT_ENTRY_MAX));
        assert!(entry.encode(&mut buf[..AUDIT_ENTRY_MAX - 1]).is_err());
    }

    fn tool(step: u8, id: &str, executed: bool, ok: bool) -> TraceRow {
        TraceRow::Tool {
            step,
            call_id: Identifier::new(id).unwrap(),
            name: Identifier::new("HassTurnOn").unwrap(),
            executed,
            ok,
        }
    }

    fn encode(view: &RunView<'_>) -> std::vec::Vec<u8> {
        let mut buf = [0u8; RUN_RECORD_MAX];
        let n = view.encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    static NO_DUTY: DutyWindows = [None, None, None, None];

    fn view(trace: &[TraceRow]) -> RunView<'_> {
        RunView {
            run: 3,
            phase: Phase::Running,
            stage: Stage::AwaitingProposal,
            status: None,
            used_ms: 1234,
            limits: RunLimits::new(8, 4).unwrap(),
            tool_attempts: trace.len() as u8,
            trace,
            duty: &NO_DUTY,
            duty_clock_ms: 0,
        }
    }

    /// A fresh run's record with `section` in place of its duty windows,
    /// sealed with a good CRC: what the decoder's duty checks see.
    fn with_duty(section: &[u8]) -> std::vec::Vec<u8> {
        let mut bytes = encode(&view(&[]));
        bytes.truncate(bytes.len() - 5);
        bytes.extend_from_slice(section);
        sealed(bytes)
    }

    /// `body` with its CRC appended: a record as a gate would seal it.
    fn sealed(mut body: std::vec::Vec<u8>) -> std::vec::Vec<u8> {
        let crc = CRC.checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    /// `record`'s body (its CRC dropped), to change and seal again.
    fn body_of(mut record: std::vec::Vec<u8>) -> std::vec::Vec<u8> {
        record.truncate(record.len() - 4);
        record
    }

    /// One window's bytes: actuator, window, most on-time, spans.
    fn window_bytes(
        actuator: u8,
        window: u32,
        max: u32,
        spans: &[(u32, u32)],
    ) -> std::vec::Vec<u8> {
        let mut out = std::vec![actuator];
        out.extend_from_slice(&window.to_le_bytes());
        out.extend_from_slice(&max.to_le_bytes());
        out.push(spans.len() as u8);
        for (ago, len) in spans {
            out.extend_from_slice(&ago.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        out
    }

    /// Issue 15 (duty windows persisted with the ledger): the windows of a
    /// record decode, re-based at any later instant, to windows that encode
    /// back to the same bytes (one encoding per run, SPEC E), and each span
    /// keeps its distance back from the record's instant.
    #[test]
    fn duty_windows_round_trip_re_based() {
        // Actuator 1: on 100..400 and 2 000..2 500 in a 10 s window; actuator 3:
        // a 1 s window whose only span is long gone.
        let mut valve: DutyWindow<DUTY_SPANS> = DutyWindow::new(10_000, 3_000);
        for (on, off) in [(100, 400), (2_000, 2_500)] {
            valve.try_switch_on(on).unwrap();
            valve.switch_off(off);
        }
        let mut old: DutyWindow<DUTY_SPANS> = DutyWindow::new(1_000, 500);
        old.try_switch_on(0).unwrap();
        old.switch_off(10);
        let windows: DutyWindows = [None, Some(valve), None, Some(old)];
        let mut v = view(&[]);
        v.duty = &windows;
        v.duty_clock_ms = 3_000;
        let bytes = encode(&v);
        let header = decode(&bytes).unwrap();
        assert_eq!(header.duty, 2);
        let stored: std::vec::Vec<StoredDuty> = duty(&bytes, &header).collect();
        assert_eq!(stored.len(), 2);
        assert_eq!(
            (stored[0].actuator, stored[0].window_ms, stored[0].max_on_ms),
            (1, 10_000, 3_000)
        );
        assert_eq!(&stored[0].spans[..], &[(2_600, 300), (500, 500)]);
        assert_eq!(
            (stored[1].actuator, stored[1].spans.len()),
            (3, 0),
            "outside every later window"
        );
        assert_eq!(bytes.len(), HEADER + 1 + 2 * 10 + 2 * 8 + 4);
        // Re-based at 50 000: the record's instant is 50 000; no time passed.
        let back = duty_windows(&bytes, &header, 50_000);
        let valve = back[1].as_ref().unwrap();
        assert_eq!(valve.spans(), &[(47_100, 47_400), (49_000, 49_500)]);
        assert_eq!(valve.on_time(50_000), 800);
        let mut again = view(&[]);
        again.duty = &back;
        again.duty_clock_ms = 50_000;
        assert_eq!(encode(&again), bytes);
    }

    /// Issue 15: a window that was on when the record was written is stored
    /// as on until the instant it would have been driven off (the power may
    /// have gone at any time before): never less on-time than there was.
    #[test]
    fn a_window_that_was_on_is_stored_at_its_longest() {
        let mut valve: DutyWindow<DUTY_SPANS> = DutyWindow::new(600_000, 30_000);
        valve.try_switch_on(1_000).unwrap();
        let windows: DutyWindows = [None, Some(valve), None, None];
        let mut v = view(&[]);
        v.duty = &windows;
        v.duty_clock_ms = 5_000;
        let bytes = encode(&v);
        let header = decode(&bytes).unwrap();
        let stored: std::vec::Vec<StoredDuty> = duty(&bytes, &header).collect();
        assert_eq!(&stored[0].spans[..], &[(0, 30_000)]);
        let back = stored[0].window(1_000_000);
        assert!(!back.is_on());
        assert_eq!(back.on_time(1_000_000), 30_000);
        assert!(back.check_on(1_000_000).is_err(), "the window is spent");
    }

    /// Fail closed (issue 15): duty windows the gate could not have stored
    /// are refused, each naming what is wrong; the same bytes with good
    /// windows decode.
    #[test]
    fn impossible_duty_windows_are_refused() {
        let good = window_bytes(1, 1_000, 300, &[(500, 100), (100, 200)]);
        let mut section = std::vec![1];
        section.extend_from_slice(&good);
        assert_eq!(decode(&with_duty(&section)).map(|h| h.duty), Ok(1));
        let refused = |windows: &[std::vec::Vec<u8>]| {
            let mut section = std::vec![windows.len() as u8];
            for w in windows {
                section.extend_from_slice(w);
            }
            decode(&with_duty(&section))
        };
        let field = |what| Err(ResumeError::Field(what));
        assert_eq!(
            refused(&[window_bytes(4, 1_000, 300, &[])]),
            field("duty actuator")
        );
        assert_eq!(refused(&[window_bytes(0, 0, 0, &[])]), field("duty window"));
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 1_001, &[])]),
            field("duty window")
        );
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &[(0, 0)])]),
            field("an empty duty span")
        );
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &[(901, 100)])]),
            field("a duty span longer than its window")
        );
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &[(u32::MAX, 2)])]),
            field("a duty span longer than its window")
        );
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &[(100, 200), (500, 100)])]),
            field("duty spans out of order")
        );
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &[(500, 100), (450, 100)])]),
            field("duty spans out of order"),
            "overlapping"
        );
        // Touching spans (off and on again in the same ms) are in order.
        assert!(refused(&[window_bytes(0, 1_000, 300, &[(500, 100), (400, 100)])]).is_ok());
        let many: std::vec::Vec<(u32, u32)> =
            (0..=DUTY_SPANS as u32).rev().map(|i| (i * 10, 5)).collect();
        assert_eq!(
            refused(&[window_bytes(0, 1_000, 300, &many)]),
            field("duty spans")
        );
        assert!(refused(&[window_bytes(0, 1_000, 300, &many[1..])]).is_ok());
        let (w0, w2) = (
            window_bytes(0, 1_000, 300, &[]),
            window_bytes(2, 1_000, 300, &[]),
        );
        assert_eq!(
            refused(&[w2.clone(), w0.clone()]),
            field("duty windows out of order")
        );
        assert_eq!(
            refused(&[w0.clone(), w0.clone()]),
            field("duty windows out of order")
        );
        assert!(refused(&[w0.clone(), w2.clone()]).is_ok());
        assert_eq!(
            refused(&[w0.clone(), w0.clone(), w0.clone(), w0.clone(), w0.clone()]),
            field("duty windows")
        );
        // A window count with fewer windows than it says: short.
        assert!(matches!(
            decode(&with_duty(&[1])),
            Err(ResumeError::Length(_))
        ));
    }

    /// Fail closed (issue 15): a record of version 1 (before the duty
    /// windows) is refused as another version, checksum good or not.
    #[test]
    fn a_version_1_record_is_refused() {
        let mut old = encode(&view(&[]));
        old[3] = 1;
        assert_eq!(decode(&old), Err(ResumeError::Version(1)));
        // Resealed as version 1 would have sealed it (no duty section).
        old.truncate(old.len() - 5);
        assert_eq!(decode(&sealed(old)), Err(ResumeError::Version(1)));
    }

    /// SPEC E: one encoding per run — a record that decodes encodes back
    /// to the same bytes, rows included.
    #[test]
    fn a_decoded_record_encodes_to_the_same_bytes() {
        let trace = [tool(0, "c1", true, true), tool(1, "c2", false, false)];
        let bytes = encode(&view(&trace));
        let header = decode(&bytes).unwrap();
        let rows: Vec<TraceRow, 32> = rows(&bytes, &header).collect();
        let back = RunView {
            run: header.run,
            phase: header.phase,
            stage: header.stage,
            status: header.status,
            used_ms: header.used_ms,
            limits: header.limits,
            tool_attempts: header.tool_attempts,
            trace: &rows,
            duty: &NO_DUTY,
            duty_clock_ms: 0,
        };
        assert_eq!(encode(&back), bytes);
        assert_eq!(bytes.len(), HEADER + 1 + 4 + 2 * (2 + 3 + 11));
    }

    /// Fail closed: runs the gate cannot reach are refused, each with the
    /// field that is wrong.
    #[test]
    fn unreachable_runs_are_refused() {
        let twice = [tool(0, "c1", true, true), tool(1, "c1", true, true)];
        assert_eq!(
            decode(&encode(&view(&twice))),
            Err(ResumeError::Field("a call id given twice"))
        );
        let trace = [tool(0, "c1", true, true)];
        let mut wrong = view(&trace);
        wrong.tool_attempts = 0;
        assert_eq!(
            decode(&encode(&wrong)),
            Err(ResumeError::Field("tool attempts"))
        );
        let mut flying = view(&trace);
        flying.stage = Stage::Executing;
        assert_eq!(
            decode(&encode(&flying)),
            Err(ResumeError::Field("call in flight"))
        );
        let stop = [TraceRow::Final { step: 0 }, tool(1, "c1", true, true)];
        let mut v = view(&stop);
        v.tool_attempts = 1;
        assert_eq!(
            decode(&encode(&v)),
            Err(ResumeError::Field("a stop row that is not last"))
        );
        let mut stopped = view(&[]);
        stopped.status = Some(Status::Final);
        assert_eq!(decode(&encode(&stopped)), Err(ResumeError::Field("status")));
        let mut bytes = encode(&view(&trace));
        bytes.push(0);
        assert!(decode(&bytes).is_err(), "a trailing byte decoded");
    }

    /// Issue 15 (a budget that survives power loss): every state a run
    /// can be stored in comes back as it was — each stop row with its
    /// status, the decision budget used up, each time phase, a call
    /// awaiting approval or executing — and re-encodes to the same bytes;
    /// every field out of its range, and each run the gate cannot reach,
    /// is refused naming the field. Found by cargo-mutants (the whole-core
    /// run, shard 2/4): only some codes and checks were exercised.
    #[test]
    fn every_storable_state_round_trips_and_every_bad_field_is_refused() {
        let one = [tool(0, "c1", true, true)];
        let in_flight = [tool(0, "c1", true, false)];
        let stops = [
            (TraceRow::Final { step: 1 }, Status::Final),
            (
                TraceRow::Rejected {
                    step: 1,
                    reason: RejectReason::InvalidPolicyAction,
                },
                Status::PolicyError,
            ),
            (
                TraceRow::Rejected {
                    step: 1,
                    reason: RejectReason::DuplicateCallId,
                },
                Status::DuplicateCall,
            ),
            (
                TraceRow::Rejected {
                    step: 1,
                    reason: RejectReason::ToolBudget,
                },
                Status::ToolBudget,
            ),
        ];
        /// Rows, phase, stage, status, most decisions.
        type Case = (std::vec::Vec<TraceRow>, Phase, Stage, Option<Status>, u8);
        let mut cases: std::vec::Vec<Case> = std::vec::Vec::new();
        for (row, status) in stops {
            cases.push((
                std::vec![one[0].clone(), row],
                Phase::Running,
                Stage::Stopped,
                Some(status),
                8,
            ));
        }
        let two = std::vec![tool(0, "c1", true, true), tool(1, "c2", false, false)];
        cases.push((
            two,
            Phase::Running,
            Stage::Stopped,
            Some(Status::DecisionBudget),
            2,
        ));
        cases.push((
            one.to_vec(),
            Phase::TimeUp,
            Stage::AwaitingProposal,
            None,
            8,
        ));
        cases.push((one.to_vec(), Phase::TimeBudget, Stage::Stopped, None, 8));
        cases.push((
            in_flight.to_vec(),
            Phase::Running,
            Stage::AwaitingApproval,
            None,
            8,
        ));
        cases.push((in_flight.to_vec(), Phase::TimeUp, Stage::Executing, None, 8));
        for (trace, phase, stage, status, max_decisions) in &cases {
            let mut v = view(trace);
            v.phase = *phase;
            v.stage = *stage;
            v.status = *status;
            v.limits = RunLimits::new(u32::from(*max_decisions), 4).unwrap();
            v.tool_attempts = trace
                .iter()
                .filter(|r| matches!(r, TraceRow::Tool { .. }))
                .count() as u8;
            let bytes = encode(&v);
            let header =
                decode(&bytes).unwrap_or_else(|e| panic!("{phase:?} {stage:?} {status:?}: {e:?}"));
            assert_eq!(
                (
                    header.phase,
                    header.stage,
                    header.status,
                    header.tool_attempts
                ),
                (*phase, *stage, *status, v.tool_attempts)
            );
            let back: Vec<TraceRow, 32> = rows(&bytes, &header).collect();
            assert_eq!(&back[..], &trace[..]);
            assert_eq!(
                back.iter()
                    .map(TraceRow::step)
                    .collect::<std::vec::Vec<_>>(),
                (0..trace.len() as u8).collect::<std::vec::Vec<_>>()
            );
        }
        let mut idle = view(&[]);
        idle.run = 0;
        idle.phase = Phase::Idle;
        assert!(decode(&encode(&idle)).is_ok());

        // Each field out of its range, sealed with a good CRC.
        let reseal = |record: std::vec::Vec<u8>, at: usize, value: u8| {
            let mut body = body_of(record);
            body[at] = value;
            decode(&sealed(body))
        };
        let base = encode(&view(&one));
        let (phase_at, stage_at, status_at) = (8, 9, 10);
        assert_eq!(
            reseal(base.clone(), phase_at, 4),
            Err(ResumeError::Field("phase"))
        );
        assert_eq!(
            reseal(base.clone(), stage_at, 4),
            Err(ResumeError::Field("stage"))
        );
        assert_eq!(
            reseal(base.clone(), status_at, 6),
            Err(ResumeError::Field("status"))
        );
        let row_at = HEADER;
        assert_eq!(
            reseal(base.clone(), row_at, 3),
            Err(ResumeError::Field("row kind"))
        );
        assert_eq!(
            reseal(base.clone(), row_at + 1, 2),
            Err(ResumeError::Field("tool row flags"))
        );
        assert_eq!(
            reseal(base.clone(), row_at + 1, 4),
            Err(ResumeError::Field("tool row flags"))
        );
        let stop = [TraceRow::Rejected {
            step: 0,
            reason: RejectReason::ToolBudget,
        }];
        let mut v = view(&stop);
        v.stage = Stage::Stopped;
        v.status = Some(Status::ToolBudget);
        v.tool_attempts = 0;
        let rejected = encode(&v);
        assert_eq!(
            reseal(rejected, row_at + 1, 3),
            Err(ResumeError::Field("reject reason"))
        );

        // Runs the gate cannot reach.
        let mut numbered_idle = view(&[]);
        numbered_idle.phase = Phase::Idle;
        assert_eq!(
            decode(&encode(&numbered_idle)),
            Err(ResumeError::Field("idle run"))
        );
        let mut idle_rows = view(&one);
        idle_rows.run = 0;
        idle_rows.phase = Phase::Idle;
        assert_eq!(
            decode(&encode(&idle_rows)),
            Err(ResumeError::Field("idle run"))
        );
        let mut idle_staged = view(&[]);
        idle_staged.run = 0;
        idle_staged.phase = Phase::Idle;
        idle_staged.stage = Stage::Stopped;
        assert_eq!(
            decode(&encode(&idle_staged)),
            Err(ResumeError::Field("idle run"))
        );
        let mut unnumbered = view(&one);
        unnumbered.run = 0;
        assert_eq!(
            decode(&encode(&unnumbered)),
            Err(ResumeError::Field("run number"))
        );
        let three = [
            tool(0, "c1", true, true),
            tool(1, "c2", true, true),
            tool(2, "c3", true, true),
        ];
        let mut over_decisions = view(&three);
        over_decisions.limits = RunLimits::new(2, 4).unwrap();
        assert_eq!(
            decode(&encode(&over_decisions)),
            Err(ResumeError::Field("rows"))
        );
        let mut over_tools = view(&three);
        over_tools.limits = RunLimits::new(8, 2).unwrap();
        assert_eq!(
            decode(&encode(&over_tools)),
            Err(ResumeError::Field("tool attempts"))
        );
        let mut at_tools = view(&three);
        at_tools.limits = RunLimits::new(8, 3).unwrap();
        assert!(
            decode(&encode(&at_tools)).is_ok(),
            "as many attempts as the budget"
        );
    }

    /// Fail closed on what no gate writes: a record with a byte after its
    /// fields (sealed with a good CRC) is refused for its length, a duty
    /// window of no length or allowing more on-time than it is long is
    /// never written, an audit entry's id over 40 bytes is refused, and
    /// each error says what is wrong with the record. Found by
    /// cargo-mutants (the whole-core run, shard 2/4).
    #[test]
    fn what_no_gate_writes_is_refused_and_errors_say_why() {
        let mut body = body_of(encode(&view(&[tool(0, "c1", true, true)])));
        body.push(0);
        let bytes = sealed(body);
        assert_eq!(decode(&bytes), Err(ResumeError::Length(bytes.len())));

        for (window, max_on) in [(0, 0), (1_000, 1_001)] {
            let duty: DutyWindows = [
                Some(crate::budget::DutyWindow::new(window, max_on)),
                None,
                None,
                None,
            ];
            let mut v = view(&[]);
            v.duty = &duty;
            let mut buf = [0u8; RUN_RECORD_MAX];
            assert_eq!(
                v.encode(&mut buf),
                Err(ResumeError::Field("duty window")),
                "{window} {max_on}"
            );
        }

        let long = "x".repeat(41);
        for (call_id, tool) in [(long.as_str(), "t"), ("c1", long.as_str())] {
            let entry = AuditEntry {
                run: 1,
                step: 0,
                call_id,
                tool,
                verdict: AuditVerdict::Started,
                time_ms: 0,
            };
            let mut buf = [0u8; 2 * AUDIT_ENTRY_MAX];
            assert_eq!(
                entry.encode(&mut buf),
                Err(ResumeError::Field("identifier"))
            );
        }

        for (error, said) in [
            (
                ResumeError::Length(7),
                "run record: 7 bytes do not hold its fields",
            ),
            (ResumeError::Magic, "not a budgetgate run record"),
            (
                ResumeError::Version(1),
                "run record version 1; this build reads version 2",
            ),
            (
                ResumeError::Checksum,
                "run record checksum mismatch (torn or corrupted)",
            ),
            (
                ResumeError::Field("phase"),
                "run record field out of range: phase",
            ),
        ] {
            assert_eq!(error.to_string(), said);
        }
    }
}
