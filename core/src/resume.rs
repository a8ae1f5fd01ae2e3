//! What a device run needs to survive a reset or a power cut (`SPEC E`,
//! durable state; `SPEC A2` bounds; issue 15): the run's stored form, and
//! the entries of the device's append-only audit log.
//!
//! The device gate ([`crate::device::DeviceGate`]) hands both to its board
//! through [`crate::device::Actuators::journal`] after every decision, before
//! the decision's effect is released (an actuator moved, a reply written);
//! the board stores them (the `budgetgate-storage` crate keeps them in NOR
//! flash) and at boot gives the newest record back to
//! [`crate::device::DeviceGate::resume`].
//!
//! A [`RunView`] is encoded by [`RunView::encode`] into at most
//! [`RUN_RECORD_MAX`] bytes. Layout, version [`RUN_RECORD_VERSION`], all
//! integers little-endian: `"BGR"`, version, run number (u32), phase (0
//! idle, 1 running, 2 time up, 3 stopped on time), stage (0 awaiting a
//! proposal, 1 awaiting approval, 2 executing, 3 stopped), status (0 none,
//! then `final`, `policy-error`, `duplicate-call`, `tool-budget`,
//! `decision-budget`), time used (ms, u64), most decisions, most tool
//! attempts, tool attempts, the number of trace rows; per row its kind (0
//! final, 1 rejected and the reason: 0 `invalid-policy-action`, 1
//! `duplicate-call-id`, 2 `tool-budget`; 2 tool: a flag byte, bit 0
//! executed, bit 1 ok, then the call id and the tool name, each as a length
//! byte and its bytes); last the CRC-32 (ISO-HDLC) of everything before it.
//! The record's size is that of the run's rows (23 bytes and 4 of CRC for a
//! fresh run, 15 to 83 more per tool row): a flash store writes only what
//! the run holds. There is one encoding per run: a record that decodes
//! encodes back to the same bytes.
//!
//! Decoding ([`decode`]) refuses another magic or version, a bad checksum,
//! trailing bytes, and any run the gate could not have reached: steps out of
//! order, a stop row not last, tool attempts that are not the tool rows, a
//! repeated call id, more rows than the run's decisions, a status that does
//! not follow from the rows. A refused record is an error, never a fresh run.
//!
//! An [`AuditEntry`] (run number, step, call id, tool, verdict, time) is
//! encoded by [`AuditEntry::encode`] into at most [`AUDIT_ENTRY_MAX`] bytes
//! (version byte, run u32, step, verdict, time u64, then the call id and the
//! tool as length and bytes) and read back by [`AuditRecord::decode`].

use core::fmt;

use crate::ident::Identifier;
use crate::limits::{MAX_DECISIONS, MAX_TOOL_CALLS};
use crate::run::{RejectReason, RunLimits, Status, TraceRow};

/// The run record's version; a record of another version is refused.
pub const RUN_RECORD_VERSION: u8 = 1;
const MAGIC: [u8; 3] = *b"BGR";
/// Identifier capacity (call ids and tool names), bytes.
const ID_MAX: usize = 40;
const HEADER: usize = 3 + 1 + 4 + 1 + 1 + 1 + 8 + 1 + 1 + 1 + 1;
const TOOL_ROW_MAX: usize = 1 + 1 + (1 + ID_MAX) * 2;

/// The most bytes a run record takes: the header, [`MAX_TOOL_CALLS`] tool
/// rows of the longest ids and names, one stop row, the CRC (1 373 bytes).
pub const RUN_RECORD_MAX: usize = HEADER + MAX_TOOL_CALLS as usize * TOOL_ROW_MAX + 2 + 4;

/// The audit entry's layout version.
pub const AUDIT_ENTRY_VERSION: u8 = 1;
/// The most bytes an audit entry takes (96).
pub const AUDIT_ENTRY_MAX: usize = 1 + 4 + 1 + 1 + 8 + (1 + ID_MAX) * 2;

const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

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

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), ResumeError> {
        let end = self.at + bytes.len();
        self.buf
            .get_mut(self.at..end)
            .ok_or(ResumeError::Length(end))?
            .copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }
    fn text(&mut self, text: &str) -> Result<(), ResumeError> {
        let len = u8::try_from(text.len()).map_err(|_| ResumeError::Field("identifier"))?;
        self.put(&[len])?;
        self.put(text.as_bytes())
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ResumeError> {
        let out = self
            .buf
            .get(self.at..self.at + n)
            .ok_or(ResumeError::Length(self.buf.len()))?;
        self.at += n;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, ResumeError> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    fn u32(&mut self) -> Result<u32, ResumeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, ResumeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn ident(&mut self, what: &'static str) -> Result<Identifier, ResumeError> {
        let len = usize::from(self.u8()?);
        let bytes = self.take(len)?;
        core::str::from_utf8(bytes)
            .ok()
            .and_then(|t| Identifier::new(t).ok())
            .ok_or(ResumeError::Field(what))
    }
    fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}

const fn status_code(status: Option<Status>) -> u8 {
    match status {
        None => 0,
        Some(Status::Final) => 1,
        Some(Status::PolicyError) => 2,
        Some(Status::DuplicateCall) => 3,
        Some(Status::ToolBudget) => 4,
        Some(Status::DecisionBudget) => 5,
    }
}

fn status_of(code: u8) -> Result<Option<Status>, ResumeError> {
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
        let mut w = Writer { buf: out, at: 0 };
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
        let body = w.at;
        let crc = CRC.checksum(w.buf.get(..body).unwrap_or_default());
        w.put(&crc.to_le_bytes())?;
        Ok(w.at)
    }
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
    let mut c = Cursor { buf: body, at: 0 };
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
    let header = Header {
        run,
        phase,
        stage,
        status,
        used_ms,
        limits,
        tool_attempts,
        rows,
    };
    check(&header, &mut c)?;
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
            let mut before = Cursor {
                buf: c.buf.get(..at).unwrap_or_default(),
                at: start,
            };
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
    let mut c = Cursor {
        buf: bytes
            .get(..bytes.len().saturating_sub(4))
            .unwrap_or_default(),
        at: HEADER,
    };
    (0..count).map_while(move |step| row(&mut c, step).ok())
}

/// What an audit entry says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AuditVerdict {
    /// The operator started the run.
    Started,
    /// The call was released to its actuator.
    Executing,
    /// The call ran and its result is the observation.
    Executed,
    /// The call ran and failed, or its result was too large: `tool-error`.
    ToolError,
    /// The tool is not registered; nothing ran.
    UnknownTool,
    /// The arguments broke the tool's signature; nothing ran.
    InvalidArguments,
    /// The call waits for the operator.
    Asking,
    /// The operator refused, or did not answer in time; nothing ran.
    ApprovalDenied,
    /// The run stopped with a status of `SPEC A2`.
    Stopped(Status),
    /// The run's time budget passed (`SPEC C`).
    TimeBudget,
    /// The call was executing (or waiting for approval) when the power went;
    /// found at boot, recorded so, its actuator driven safe.
    Interrupted,
    /// The gate could not store its state and refused the call (fail closed).
    StorageError,
    /// No valid frame came on the agent link for the dead-man time while an
    /// actuator was out of its safe state: the gate drove it safe and
    /// refuses proposals until the operator starts a run.
    DeadMan,
}

impl AuditVerdict {
    /// The word the console and `budgetgate device audit` print.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Executing => "executing",
            Self::Executed => "executed",
            Self::ToolError => "tool-error",
            Self::UnknownTool => "unknown-tool",
            Self::InvalidArguments => "invalid-arguments",
            Self::Asking => "asking",
            Self::ApprovalDenied => "approval-denied",
            Self::Stopped(status) => status.as_str(),
            Self::TimeBudget => "time-budget",
            Self::Interrupted => "interrupted",
            Self::StorageError => "storage-error",
            Self::DeadMan => "dead-man",
        }
    }

    const fn code(self) -> u8 {
        match self {
            Self::Started => 0,
            Self::Executing => 1,
            Self::Executed => 2,
            Self::ToolError => 3,
            Self::UnknownTool => 4,
            Self::InvalidArguments => 5,
            Self::Asking => 6,
            Self::ApprovalDenied => 7,
            Self::TimeBudget => 8,
            Self::Interrupted => 9,
            Self::StorageError => 10,
            Self::DeadMan => 11,
            Self::Stopped(status) => 16 + status_code(Some(status)),
        }
    }

    fn of(code: u8) -> Result<Self, ResumeError> {
        Ok(match code {
            0 => Self::Started,
            1 => Self::Executing,
            2 => Self::Executed,
            3 => Self::ToolError,
            4 => Self::UnknownTool,
            5 => Self::InvalidArguments,
            6 => Self::Asking,
            7 => Self::ApprovalDenied,
            8 => Self::TimeBudget,
            9 => Self::Interrupted,
            10 => Self::StorageError,
            11 => Self::DeadMan,
            17..=21 => match status_of(code - 16)? {
                Some(status) => Self::Stopped(status),
                None => return Err(ResumeError::Field("verdict")),
            },
            _ => return Err(ResumeError::Field("verdict")),
        })
    }
}

impl fmt::Display for AuditVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of the audit log, borrowed from the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditEntry<'a> {
    /// The run's number.
    pub run: u32,
    /// The decision's step, from 0 (the next step for `started` and stops
    /// found by the clock).
    pub step: u8,
    /// The call id, empty when the entry is not about a call.
    pub call_id: &'a str,
    /// The tool name proposed, empty when the entry is not about a call.
    pub tool: &'a str,
    /// What happened.
    pub verdict: AuditVerdict,
    /// The gate's clock when it happened, ms since boot: the time passed
    /// in with the frame, answer, poll or start that caused it (a call's
    /// `executing` and `executed` carry its frame's time).
    pub time_ms: u64,
}

impl AuditEntry<'_> {
    /// Encodes the entry into `out` (give it [`AUDIT_ENTRY_MAX`] bytes);
    /// returns its length. Fails if `out` is too small or an id is over 40
    /// bytes.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, ResumeError> {
        if self.call_id.len() > ID_MAX || self.tool.len() > ID_MAX {
            return Err(ResumeError::Field("identifier"));
        }
        let mut w = Writer { buf: out, at: 0 };
        w.put(&[AUDIT_ENTRY_VERSION])?;
        w.put(&self.run.to_le_bytes())?;
        w.put(&[self.step, self.verdict.code()])?;
        w.put(&self.time_ms.to_le_bytes())?;
        w.text(self.call_id)?;
        w.text(self.tool)?;
        Ok(w.at)
    }
}

/// An audit entry read back from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The run's number.
    pub run: u32,
    /// The decision's step.
    pub step: u8,
    /// The call id (empty if none).
    pub call_id: heapless::String<ID_MAX>,
    /// The tool name (empty if none).
    pub tool: heapless::String<ID_MAX>,
    /// What happened.
    pub verdict: AuditVerdict,
    /// The gate's clock, ms since boot.
    pub time_ms: u64,
}

impl AuditRecord {
    /// Reads an entry written by [`AuditEntry::encode`]; refuses another
    /// version, an unknown verdict, text that is not UTF-8 or too long, and
    /// trailing bytes. (The flash store's items carry their own CRC.)
    pub fn decode(bytes: &[u8]) -> Result<Self, ResumeError> {
        let mut c = Cursor { buf: bytes, at: 0 };
        let version = c.u8()?;
        if version != AUDIT_ENTRY_VERSION {
            return Err(ResumeError::Version(version));
        }
        let run = c.u32()?;
        let step = c.u8()?;
        let verdict = AuditVerdict::of(c.u8()?)?;
        let time_ms = c.u64()?;
        let mut text = |what| -> Result<heapless::String<ID_MAX>, ResumeError> {
            let len = usize::from(c.u8()?);
            let bytes = c.take(len)?;
            let mut s = heapless::String::new();
            core::str::from_utf8(bytes)
                .ok()
                .and_then(|t| s.push_str(t).ok())
                .ok_or(ResumeError::Field(what))?;
            Ok(s)
        };
        let call_id = text("call id")?;
        let tool = text("tool name")?;
        if !c.done() {
            return Err(ResumeError::Length(bytes.len()));
        }
        Ok(Self {
            run,
            step,
            call_id,
            tool,
            verdict,
            time_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heapless::Vec;

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
        }
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
        };
        assert_eq!(encode(&back), bytes);
        assert_eq!(bytes.len(), HEADER + 4 + 2 * (2 + 3 + 11));
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

    #[test]
    fn an_audit_entry_round_trips_and_refuses_another_version() {
        let entry = AuditEntry {
            run: 7,
            step: 3,
            call_id: "c9",
            tool: "HassValveOpen",
            verdict: AuditVerdict::Stopped(Status::DecisionBudget),
            time_ms: 99,
        };
        let mut buf = [0u8; AUDIT_ENTRY_MAX];
        let n = entry.encode(&mut buf).unwrap();
        let back = AuditRecord::decode(&buf[..n]).unwrap();
        assert_eq!(
            (
                back.run,
                back.step,
                back.call_id.as_str(),
                back.tool.as_str()
            ),
            (7, 3, "c9", "HassValveOpen")
        );
        assert_eq!(back.verdict.as_str(), "decision-budget");
        assert_eq!(back.time_ms, 99);
        buf[0] = 2;
        assert_eq!(AuditRecord::decode(&buf[..n]), Err(ResumeError::Version(2)));
        assert!(AuditRecord::decode(&buf[..n - 1]).is_err());
    }
}
