//! The budget ledger: used and maximum per limit, checked in one order, with
//! reserve → commit → roll back, and a storable record (`SPEC E`: one budget
//! engine, durable state).
//!
//! A [`Ledger`] is what a front-end keeps between decisions when the
//! decisions are made by different processes or across a reset: the Claude
//! Code hook (one process per hook event), the MCP gateway, the device's
//! flash. It holds a used and an optional maximum per [`Limit`], the amounts
//! reserved by work in flight, per-tool call caps, and the instant the run
//! began. [`Ledger::to_record`] encodes it into a fixed-size, versioned,
//! checksummed [`Record`]; [`Ledger::from_record`] refuses a record of
//! another version, another length, or with a bad checksum. Stores (SQLite,
//! Redis, flash) keep these bytes and never interpret budgets themselves.
//!
//! ```
//! use budgetgate_core::budget::{Ledger, Limit};
//!
//! let mut ledger: Ledger = Ledger::new(1_000);
//! ledger.set_max(Limit::ToolCalls, Some(1));
//! let call = ledger.try_reserve(Limit::ToolCalls, 1).unwrap();
//! assert!(ledger.try_reserve(Limit::ToolCalls, 1).is_err()); // the one call is in flight
//! ledger.commit(call, 1).unwrap();
//! let stored = ledger.to_record();
//! let back: Ledger = Ledger::from_record(stored.as_bytes()).unwrap();
//! assert_eq!(back, ledger);
//! assert_eq!(back.used(Limit::ToolCalls), 1);
//! ```
//!
//! Adding a budget is adding a [`Limit`] variant (its key, its place in
//! [`Limit::ALL`]) — the checks, the record and the reports follow from the
//! array; `docs/BUDGETS.md` walks through the cost budget as the example.

use core::fmt;

use heapless::Vec;

use crate::limits::MAX_TOOLS;
use crate::turn::ToolName;

/// One budget dimension (`SPEC C`, `SPEC E`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Limit {
    /// Model calls made (the reference's `max_pasos`), counted per call.
    ModelCalls,
    /// Tokens billed: input + output + cache reads + cache writes, accumulated.
    Tokens,
    /// Wall time since the run began, in milliseconds.
    Millis,
    /// Cost in micro-dollars (millionths of a US dollar), from a price table.
    CostMicros,
    /// Tool attempts over the whole run.
    ToolCalls,
}

impl Limit {
    /// Every limit, in the order they are checked: the reference's order
    /// (steps, tokens, time), then cost, then tool attempts.
    pub const ALL: [Self; 5] = [
        Self::ModelCalls,
        Self::Tokens,
        Self::Millis,
        Self::CostMicros,
        Self::ToolCalls,
    ];

    /// How many limits there are.
    pub const COUNT: usize = Self::ALL.len();

    /// The limit's key in reports and budget files.
    pub const fn key(self) -> &'static str {
        match self {
            Self::ModelCalls => "model_calls",
            Self::Tokens => "tokens",
            Self::Millis => "time_ms",
            Self::CostMicros => "cost_micro_usd",
            Self::ToolCalls => "tool_calls",
        }
    }

    /// The unit a person reads the figures in.
    pub const fn unit(self) -> &'static str {
        match self {
            Self::ModelCalls => "model calls",
            Self::Tokens => "tokens",
            Self::Millis => "ms",
            Self::CostMicros => "micro-USD",
            Self::ToolCalls => "tool calls",
        }
    }

    /// Whether the limit is checked before the next model call (`SPEC C`:
    /// steps, tokens, time, and cost beside them). Tool attempts are checked
    /// per tool call.
    pub const fn before_model_call(self) -> bool {
        !matches!(self, Self::ToolCalls)
    }

    const fn index(self) -> usize {
        match self {
            Self::ModelCalls => 0,
            Self::Tokens => 1,
            Self::Millis => 2,
            Self::CostMicros => 3,
            Self::ToolCalls => 4,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// A limit reached: which, what was used (reserved amounts included) and its
/// maximum. What a refusal tells the model and the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Exceeded {
    /// The limit.
    pub limit: Limit,
    /// Used so far, with what is reserved.
    pub used: u64,
    /// Its maximum.
    pub max: u64,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} budget exhausted ({} of {} {})",
            self.limit.key(),
            self.used,
            self.max,
            self.limit.unit()
        )
    }
}

/// A per-tool cap reached: the tool's own call count and maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CapReached {
    /// The tool's position in the ledger's cap table.
    pub cap: u8,
    /// Calls made.
    pub used: u32,
    /// Its cap.
    pub max: u32,
}

/// Work in flight against one limit: consumed by [`Ledger::commit`] or
/// [`Ledger::roll_back`]. Plain data (it is stored when work crosses a
/// process boundary); a ledger refuses a token that does not match what it
/// has reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a reservation must be committed or rolled back"]
pub struct Reservation {
    /// The limit reserved against.
    pub limit: Limit,
    /// The amount reserved.
    pub amount: u64,
}

/// Why a ledger operation was refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LedgerError {
    /// The amount does not fit the limit.
    Exceeded(Exceeded),
    /// The reservation is larger than what the ledger holds reserved for its
    /// limit (committed or rolled back twice, or from another ledger).
    NotReserved(Reservation),
    /// The cap table is full.
    CapsFull,
    /// A cap for this tool is already in the table.
    DuplicateCap,
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exceeded(e) => e.fmt(f),
            Self::NotReserved(r) => write!(
                f,
                "no reservation of {} {} is held (committed or rolled back already?)",
                r.amount,
                r.limit.unit()
            ),
            Self::CapsFull => write!(f, "at most {MAX_TOOLS} per-tool caps"),
            Self::DuplicateCap => f.write_str("a cap for this tool is given twice"),
        }
    }
}

impl core::error::Error for LedgerError {}

/// One per-tool call cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCap {
    name: ToolName,
    used: u32,
    max: u32,
}

impl ToolCap {
    /// The tool.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }
    /// Calls counted.
    pub const fn used(&self) -> u32 {
        self.used
    }
    /// The cap.
    pub const fn max(&self) -> u32 {
        self.max
    }
}

/// Used, maximum and reserved per [`Limit`], per-tool caps, and the instant
/// the run began (`SPEC E`). `TOOLS` is the cap table's capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger<const TOOLS: usize = MAX_TOOLS> {
    started_ms: u64,
    used: [u64; Limit::COUNT],
    reserved: [u64; Limit::COUNT],
    max: [Option<u64>; Limit::COUNT],
    caps: Vec<ToolCap, TOOLS>,
}

impl<const TOOLS: usize> Ledger<TOOLS> {
    /// An empty ledger with no maxima, for a run that began at `started_ms`
    /// (a monotonic or wall-clock instant in milliseconds, the caller's).
    pub const fn new(started_ms: u64) -> Self {
        Self {
            started_ms,
            used: [0; Limit::COUNT],
            reserved: [0; Limit::COUNT],
            max: [None; Limit::COUNT],
            caps: Vec::new(),
        }
    }

    /// Sets (or with `None` lifts) the maximum of `limit`.
    pub fn set_max(&mut self, limit: Limit, max: Option<u64>) {
        if let Some(slot) = self.max.get_mut(limit.index()) {
            *slot = max;
        }
    }

    /// Adds a per-tool call cap (`Bash` at most 20 calls).
    pub fn try_add_cap(&mut self, name: ToolName, max: u32) -> Result<(), LedgerError> {
        if self.caps.iter().any(|c| c.name == name) {
            return Err(LedgerError::DuplicateCap);
        }
        self.caps
            .push(ToolCap { name, used: 0, max })
            .map_err(|_| LedgerError::CapsFull)
    }

    /// Sets the cap of tool `name` to `max`, adding it when the tool has none
    /// (a budget file that changed between decisions); calls counted stay.
    pub fn set_cap(&mut self, name: ToolName, max: u32) -> Result<(), LedgerError> {
        match self.caps.iter_mut().find(|c| c.name == name) {
            Some(cap) => {
                cap.max = max;
                Ok(())
            }
            None => self.try_add_cap(name, max),
        }
    }

    /// When the run began.
    pub const fn started_ms(&self) -> u64 {
        self.started_ms
    }

    /// Used so far (committed and recorded; reservations not included).
    pub fn used(&self, limit: Limit) -> u64 {
        self.used.get(limit.index()).copied().unwrap_or(0)
    }

    /// Held by reservations in flight.
    pub fn reserved(&self, limit: Limit) -> u64 {
        self.reserved.get(limit.index()).copied().unwrap_or(0)
    }

    /// The maximum, if the limit is set.
    pub fn max(&self, limit: Limit) -> Option<u64> {
        self.max.get(limit.index()).copied().flatten()
    }

    /// The per-tool caps.
    pub fn caps(&self) -> &[ToolCap] {
        &self.caps
    }

    /// Brings the time used up to `now_ms` (a clock that went back counts
    /// as no time; time used never decreases).
    pub fn observe_time(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.started_ms);
        if let Some(used) = self.used.get_mut(Limit::Millis.index()) {
            *used = (*used).max(elapsed);
        }
    }

    /// The first limit of [`Limit::ALL`] that is already reached (used and
    /// reserved at or above its maximum) among those `which` selects: the
    /// `>=` check the reference makes before each model call.
    pub fn first_exhausted(&self, which: impl Fn(Limit) -> bool) -> Option<Exceeded> {
        Limit::ALL
            .into_iter()
            .filter(|&l| which(l))
            .find_map(|limit| {
                let max = self.max(limit)?;
                let used = self.used(limit).saturating_add(self.reserved(limit));
                (used >= max).then_some(Exceeded { limit, used, max })
            })
    }

    /// Reserves `amount` of `limit` for work about to start, if used, reserved
    /// and `amount` together stay within its maximum (equality allowed).
    pub fn try_reserve(&mut self, limit: Limit, amount: u64) -> Result<Reservation, LedgerError> {
        let held = self.used(limit).saturating_add(self.reserved(limit));
        if let Some(max) = self.max(limit) {
            let would = held.saturating_add(amount);
            if would > max {
                return Err(LedgerError::Exceeded(Exceeded {
                    limit,
                    used: held,
                    max,
                }));
            }
        }
        if let Some(r) = self.reserved.get_mut(limit.index()) {
            *r = r.saturating_add(amount);
        }
        Ok(Reservation { limit, amount })
    }

    /// Ends a reservation with the real figure: `actual` is counted as used
    /// (even above the amount reserved: never hidden), the reservation freed.
    pub fn commit(&mut self, reservation: Reservation, actual: u64) -> Result<(), LedgerError> {
        self.release(reservation)?;
        self.record(reservation.limit, actual);
        Ok(())
    }

    /// Ends a reservation whose work failed or was cancelled: nothing is
    /// counted, the reservation freed.
    pub fn roll_back(&mut self, reservation: Reservation) -> Result<(), LedgerError> {
        self.release(reservation)
    }

    fn release(&mut self, reservation: Reservation) -> Result<(), LedgerError> {
        let slot = self
            .reserved
            .get_mut(reservation.limit.index())
            .ok_or(LedgerError::NotReserved(reservation))?;
        *slot = slot
            .checked_sub(reservation.amount)
            .ok_or(LedgerError::NotReserved(reservation))?;
        Ok(())
    }

    /// Counts `amount` of `limit` after the fact (tokens of a response that
    /// came back, its cost). Saturates instead of wrapping.
    pub fn record(&mut self, limit: Limit, amount: u64) {
        if let Some(used) = self.used.get_mut(limit.index()) {
            *used = used.saturating_add(amount);
        }
    }

    /// Checks the cap of tool `name`, if it has one, and counts the call
    /// when it fits (equality allowed: a cap of 1 allows one call).
    pub fn try_count_tool(&mut self, name: &str) -> Result<(), CapReached> {
        let found = self
            .caps
            .iter_mut()
            .enumerate()
            .find(|(_, c)| c.name.as_str() == name);
        if let Some((at, cap)) = found {
            if cap.used >= cap.max {
                return Err(CapReached {
                    cap: u8::try_from(at).unwrap_or(u8::MAX),
                    used: cap.used,
                    max: cap.max,
                });
            }
            cap.used += 1;
        }
        Ok(())
    }

    /// Gives back one call of tool `name`'s cap, counted by
    /// [`Self::try_count_tool`] for a reservation that was then rolled back
    /// (a cancelled call, a server that failed). A tool without a cap, or
    /// with no call counted, is left as it is (never below zero).
    pub fn release_tool(&mut self, name: &str) {
        if let Some(cap) = self.caps.iter_mut().find(|c| c.name.as_str() == name) {
            cap.used = cap.used.saturating_sub(1);
        }
    }

    /// Whether `name` has a cap and it is reached (no state change).
    pub fn cap_reached(&self, name: &str) -> Option<CapReached> {
        let (at, cap) = self
            .caps
            .iter()
            .enumerate()
            .find(|(_, c)| c.name.as_str() == name)?;
        (cap.used >= cap.max).then(|| CapReached {
            cap: u8::try_from(at).unwrap_or(u8::MAX),
            used: cap.used,
            max: cap.max,
        })
    }
}

// ------------------------------------------------------------------ record

/// The record's version; a record of another version is refused.
pub const RECORD_VERSION: u8 = 1;
const MAGIC: [u8; 3] = *b"BGL";
const CAP_BYTES: usize = 1 + crate::limits::MAX_TOOL_NAME_LEN + 8;
const HEADER: usize = 3 + 1 + 1 + 8;
const LIMIT_BYTES: usize = Limit::COUNT * (8 + 8 + 8 + 1);

/// Bytes of the record of a ledger with cap capacity `tools`: header,
/// per-limit used / reserved / maximum, the caps, a CRC-32.
pub const fn record_len(tools: usize) -> usize {
    HEADER + LIMIT_BYTES + 1 + tools * CAP_BYTES + 4
}

/// The record of a ledger with the default capacity.
pub const RECORD_LEN: usize = record_len(MAX_TOOLS);

/// A ledger's stored form: fixed size (so a flash slot or a database column
/// always holds the same bytes), little-endian, CRC-32 (ISO-HDLC) last.
///
/// Layout, version 1: `"BGL"`, version, cap capacity, `started_ms` (u64);
/// per limit in [`Limit::ALL`] order: used, reserved, maximum (u64 each) and
/// a flag (1: the maximum is set); the number of caps, then per cap slot its
/// name length, the name padded with zeros to 64 bytes, used and max (u32
/// each); the CRC of everything before it. Postcard is not used: its
/// variable-length integers make the size depend on the values, and a
/// fixed-size slot is what flash pages and atomic database updates want.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    bytes: [u8; RECORD_LEN],
}

impl Record {
    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Record({} bytes)", self.bytes.len())
    }
}

/// Why stored bytes are not a ledger; the store must refuse to decide
/// (fail closed), never start from an empty ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RecordError {
    /// Not `RECORD_LEN` bytes.
    Length(usize),
    /// Not a budgetgate ledger record.
    Magic,
    /// A record of another version.
    Version(u8),
    /// The checksum does not match: a torn or corrupted write.
    Checksum,
    /// A field is out of its range (a cap name, a count, reserved above what
    /// a limit allows).
    Field(&'static str),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "a ledger record is {RECORD_LEN} bytes, not {n}"),
            Self::Magic => f.write_str("not a budgetgate ledger record"),
            Self::Version(v) => write!(
                f,
                "ledger record version {v}; this build reads version {RECORD_VERSION}"
            ),
            Self::Checksum => f.write_str("ledger record checksum mismatch (torn or corrupted)"),
            Self::Field(what) => write!(f, "ledger record field out of range: {what}"),
        }
    }
}

impl core::error::Error for RecordError {}

const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// A cursor writing into a fixed buffer (lengths are checked by `const`
/// sizes, so every write is in bounds; `get_mut` keeps it panic-free).
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        self.at += bytes.len();
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let out = self
            .buf
            .get(self.at..self.at + n)
            .ok_or(RecordError::Length(self.buf.len()))?;
        self.at += n;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

impl Ledger<MAX_TOOLS> {
    /// The ledger as its fixed-size, versioned, checksummed record.
    pub fn to_record(&self) -> Record {
        let mut bytes = [0u8; RECORD_LEN];
        let mut w = Writer {
            buf: &mut bytes,
            at: 0,
        };
        w.put(&MAGIC);
        w.put(&[RECORD_VERSION, MAX_TOOLS as u8]);
        w.put(&self.started_ms.to_le_bytes());
        for limit in Limit::ALL {
            w.put(&self.used(limit).to_le_bytes());
            w.put(&self.reserved(limit).to_le_bytes());
            w.put(&self.max(limit).unwrap_or(0).to_le_bytes());
            w.put(&[u8::from(self.max(limit).is_some())]);
        }
        w.put(&[self.caps.len() as u8]);
        for slot in 0..MAX_TOOLS {
            let mut name = [0u8; crate::limits::MAX_TOOL_NAME_LEN];
            let (len, used, max) = match self.caps.get(slot) {
                Some(cap) => {
                    let n = cap.name.as_str().as_bytes();
                    if let Some(dst) = name.get_mut(..n.len()) {
                        dst.copy_from_slice(n);
                    }
                    (n.len() as u8, cap.used, cap.max)
                }
                None => (0, 0, 0),
            };
            w.put(&[len]);
            w.put(&name);
            w.put(&used.to_le_bytes());
            w.put(&max.to_le_bytes());
        }
        let body = w.at;
        let crc = CRC.checksum(bytes.get(..body).unwrap_or_default());
        if let Some(dst) = bytes.get_mut(body..body + 4) {
            dst.copy_from_slice(&crc.to_le_bytes());
        }
        Record { bytes }
    }

    /// Reads a record written by [`Self::to_record`]. Refuses another
    /// length, magic or version, a bad checksum and any field out of range.
    pub fn from_record(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() != RECORD_LEN {
            return Err(RecordError::Length(bytes.len()));
        }
        let (body, crc) = bytes.split_at(RECORD_LEN - 4);
        let mut c = Cursor { buf: body, at: 0 };
        if c.take(3)? != MAGIC {
            return Err(RecordError::Magic);
        }
        let version = c.u8()?;
        if version != RECORD_VERSION {
            return Err(RecordError::Version(version));
        }
        let mut stored = [0u8; 4];
        stored.copy_from_slice(crc);
        if CRC.checksum(body) != u32::from_le_bytes(stored) {
            return Err(RecordError::Checksum);
        }
        if usize::from(c.u8()?) != MAX_TOOLS {
            return Err(RecordError::Field("cap capacity"));
        }
        let mut ledger = Self::new(c.u64()?);
        for limit in Limit::ALL {
            let (used, reserved, max, set) = (c.u64()?, c.u64()?, c.u64()?, c.u8()?);
            let max = match set {
                0 if max == 0 => None,
                1 => Some(max),
                _ => return Err(RecordError::Field("maximum flag")),
            };
            let i = limit.index();
            if let (Some(u), Some(r), Some(m)) = (
                ledger.used.get_mut(i),
                ledger.reserved.get_mut(i),
                ledger.max.get_mut(i),
            ) {
                *u = used;
                *r = reserved;
                *m = max;
            }
        }
        let count = usize::from(c.u8()?);
        if count > MAX_TOOLS {
            return Err(RecordError::Field("cap count"));
        }
        for slot in 0..MAX_TOOLS {
            let len = usize::from(c.u8()?);
            let name = c.take(crate::limits::MAX_TOOL_NAME_LEN)?;
            let (used, max) = (c.u32()?, c.u32()?);
            if slot >= count {
                if len != 0 || used != 0 || max != 0 || name.iter().any(|&b| b != 0) {
                    return Err(RecordError::Field("unused cap slot"));
                }
                continue;
            }
            let text = name
                .get(..len)
                .and_then(|n| core::str::from_utf8(n).ok())
                .ok_or(RecordError::Field("cap name"))?;
            let name = ToolName::new(text).map_err(|_| RecordError::Field("cap name"))?;
            ledger
                .caps
                .push(ToolCap { name, used, max })
                .map_err(|_| RecordError::Field("cap count"))?;
            if ledger
                .caps
                .iter()
                .filter(|c| c.name.as_str() == text)
                .count()
                > 1
            {
                return Err(RecordError::Field("cap name given twice"));
            }
        }
        Ok(ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        let mut l = Ledger::new(100);
        l.set_max(Limit::Tokens, Some(1000));
        l.set_max(Limit::ToolCalls, Some(2));
        l.try_add_cap(ToolName::new("Bash").unwrap(), 1).unwrap();
        l
    }

    #[test]
    fn limits_are_checked_in_one_order_reference_first() {
        let mut l = ledger();
        l.set_max(Limit::ModelCalls, Some(1));
        l.record(Limit::ModelCalls, 1);
        l.record(Limit::Tokens, 1000);
        let e = l.first_exhausted(Limit::before_model_call).unwrap();
        assert_eq!(e.limit, Limit::ModelCalls);
        l.set_max(Limit::ModelCalls, None);
        let e = l.first_exhausted(Limit::before_model_call).unwrap();
        assert_eq!((e.limit, e.used, e.max), (Limit::Tokens, 1000, 1000));
        assert_eq!(
            e.to_string(),
            "tokens budget exhausted (1000 of 1000 tokens)"
        );
        // Tool attempts are not a before-call limit.
        l.set_max(Limit::Tokens, None);
        l.record(Limit::ToolCalls, 2);
        assert_eq!(l.first_exhausted(Limit::before_model_call), None);
        assert_eq!(l.first_exhausted(|_| true).unwrap().limit, Limit::ToolCalls);
    }

    #[test]
    fn a_reservation_holds_budget_until_committed_or_rolled_back() {
        let mut l = ledger();
        let a = l.try_reserve(Limit::ToolCalls, 1).unwrap();
        let b = l.try_reserve(Limit::ToolCalls, 1).unwrap();
        let third = l.try_reserve(Limit::ToolCalls, 1).unwrap_err();
        assert_eq!(
            third,
            LedgerError::Exceeded(Exceeded {
                limit: Limit::ToolCalls,
                used: 2,
                max: 2
            })
        );
        l.roll_back(b).unwrap();
        assert_eq!(l.reserved(Limit::ToolCalls), 1);
        assert_eq!(l.used(Limit::ToolCalls), 0);
        l.commit(a, 1).unwrap();
        assert_eq!(
            (l.used(Limit::ToolCalls), l.reserved(Limit::ToolCalls)),
            (1, 0)
        );
        // A second commit of the same token is refused and changes nothing.
        let before = l.clone();
        assert_eq!(l.commit(a, 1), Err(LedgerError::NotReserved(a)));
        assert_eq!(l.roll_back(a), Err(LedgerError::NotReserved(a)));
        assert_eq!(l, before);
    }

    #[test]
    fn a_commit_above_the_reservation_is_counted_whole() {
        let mut l = ledger();
        let r = l.try_reserve(Limit::Tokens, 100).unwrap();
        l.commit(r, 250).unwrap();
        assert_eq!(l.used(Limit::Tokens), 250);
        // Equality is allowed, one more is not.
        let r = l.try_reserve(Limit::Tokens, 750).unwrap();
        assert!(l.try_reserve(Limit::Tokens, 1).is_err());
        l.roll_back(r).unwrap();
    }

    #[test]
    fn a_released_tool_call_gives_its_cap_back_and_never_goes_below_zero() {
        let mut l = ledger();
        l.try_count_tool("Bash").unwrap();
        assert!(l.cap_reached("Bash").is_some());
        l.release_tool("Bash");
        assert_eq!(l.cap_reached("Bash"), None);
        l.release_tool("Bash");
        l.release_tool("Read");
        l.try_count_tool("Bash").unwrap();
        assert!(l.try_count_tool("Bash").is_err());
    }

    #[test]
    fn a_per_tool_cap_allows_exactly_its_maximum() {
        let mut l = ledger();
        assert_eq!(l.cap_reached("Bash"), None);
        l.try_count_tool("Bash").unwrap();
        let reached = l.try_count_tool("Bash").unwrap_err();
        assert_eq!((reached.used, reached.max), (1, 1));
        assert_eq!(l.cap_reached("Bash"), Some(reached));
        // Another tool has no cap.
        for _ in 0..10 {
            l.try_count_tool("Read").unwrap();
        }
        assert_eq!(
            l.try_add_cap(ToolName::new("Bash").unwrap(), 3),
            Err(LedgerError::DuplicateCap)
        );
    }

    #[test]
    fn time_used_never_goes_back() {
        let mut l = ledger();
        l.observe_time(600);
        assert_eq!(l.used(Limit::Millis), 500);
        l.observe_time(50);
        assert_eq!(l.used(Limit::Millis), 500);
    }

    #[test]
    fn a_record_decodes_to_the_same_ledger() {
        let mut l = ledger();
        l.set_max(Limit::CostMicros, Some(5_000_000));
        l.record(Limit::Tokens, 123);
        let _held = l.try_reserve(Limit::ToolCalls, 1).unwrap();
        l.try_count_tool("Bash").unwrap();
        let record = l.to_record();
        assert_eq!(record.as_bytes().len(), RECORD_LEN);
        assert_eq!(Ledger::from_record(record.as_bytes()), Ok(l.clone()));
        let empty: Ledger = Ledger::new(0);
        assert_eq!(Ledger::from_record(empty.to_record().as_bytes()), Ok(empty));
    }

    #[test]
    fn a_damaged_record_is_refused_never_read_as_empty() {
        let good = ledger().to_record();
        let bytes = good.as_bytes();
        assert_eq!(
            Ledger::from_record(&bytes[..10]),
            Err(RecordError::Length(10))
        );
        // Every single-bit flip is caught (CRC-32 detects all of them).
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.to_vec();
                bad[at] ^= 1 << bit;
                assert!(Ledger::from_record(&bad).is_err(), "flip at {at}.{bit}");
            }
        }
        let mut other = bytes.to_vec();
        other[3] = RECORD_VERSION + 1;
        assert_eq!(
            Ledger::from_record(&other),
            Err(RecordError::Version(RECORD_VERSION + 1))
        );
        let zeros = [0u8; RECORD_LEN];
        assert_eq!(Ledger::from_record(&zeros), Err(RecordError::Magic));
    }

    #[test]
    fn a_well_checksummed_record_with_a_bad_field_is_refused() {
        let good = ledger().to_record();
        let mut bad = good.as_bytes().to_vec();
        // The first cap's name length: longer than a name can be.
        let at = HEADER + LIMIT_BYTES + 1;
        bad[at] = 200;
        let body = RECORD_LEN - 4;
        let crc = CRC.checksum(&bad[..body]);
        bad[body..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Ledger::from_record(&bad),
            Err(RecordError::Field("cap name"))
        );
    }
}
