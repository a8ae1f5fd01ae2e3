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
//! byte and its bytes); then the actuators' duty windows (version 2): their
//! number, and per window, in actuator order, the actuator (u8, below
//! [`MAX_DUTY_WINDOWS`](crate::limits::MAX_DUTY_WINDOWS)), the window and its most on-time (ms, u32 each),
//! the number of on-spans (at most [`DUTY_SPANS`](crate::limits::DUTY_SPANS)) and per span, oldest
//! first, how long before the record's instant it ended and its length (ms,
//! u32 each); last the CRC-32 (ISO-HDLC) of everything before it.
//! The record's size is that of the run's rows and windows (24 bytes and 4
//! of CRC for a fresh run without windows, 15 to 83 more per tool row, 10
//! per window and 8 per span): a flash store writes only what the run holds.
//! There is one encoding per run: a record that decodes encodes back to the
//! same bytes.
//!
//! The duty windows do not depend on the clock of the boot that wrote them
//! (the gate's clock starts again at every boot): a span is stored as its
//! distance back from the instant the record was written, and a resume
//! re-bases it at its own instant ([`StoredDuty::window`]): time without
//! power is not counted as passing, so the on-time stays in the window
//! longer (towards off, as the time budget's `used_ms`). A window that was
//! on is stored as switched off at the instant it would have been driven
//! off, and that instant is its record's instant ([`DutyWindow::settled`](crate::budget::DutyWindow::settled)):
//! the record cannot know when the power went, so it counts the longest the
//! actuator can have stayed on. Only spans a later window can see are kept.
//!
//! Decoding ([`decode`]) refuses another magic or version (a version 1
//! record, from before the duty windows, is [`ResumeError::Version`]), a bad
//! checksum, trailing bytes, and any run the gate could not have reached:
//! steps out of order, a stop row not last, tool attempts that are not the
//! tool rows, a repeated call id, more rows than the run's decisions, a
//! status that does not follow from the rows; and duty windows it could not
//! have stored: an actuator over the capacity or out of order, an empty
//! window or one whose most on-time is over its length, more spans than a
//! window keeps, an empty span, a span reaching back past its window, spans
//! out of order or overlapping. A refused record is an error, never a fresh
//! run.
//!
//! An [`AuditEntry`] (run number, step, call id, tool, verdict, time) is
//! encoded by [`AuditEntry::encode`] into at most [`AUDIT_ENTRY_MAX`] bytes
//! (version byte, run u32, step, verdict, time u64, then the call id and the
//! tool as length and bytes) and read back by [`AuditRecord::decode`].

pub use crate::device::audit::{
    AuditEntry, AuditRecord, AuditVerdict, AUDIT_ENTRY_MAX, AUDIT_ENTRY_VERSION,
};
pub use crate::device::record::{
    decode, duty, duty_windows, rows, Header, Phase, ResumeError, RunView, Stage, StoredDuty,
    RUN_RECORD_MAX, RUN_RECORD_VERSION,
};
