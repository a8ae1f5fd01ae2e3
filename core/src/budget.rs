//! The budget ledger: used and maximum per limit, checked in one order, with
//! reserve → commit → roll back, and a storable record (`SPEC E`: one budget
//! engine, durable state).
//!
//! A [`Ledger`] is what a front-end keeps between decisions when the
//! decisions are made by different processes or across a reset: the Claude
//! Code hook (one process per hook event), the MCP gateway, the device's
//! flash. It holds a used and an optional maximum per [`Limit`], the amounts
//! reserved by work in flight, the calls counted for each capped tool, and
//! the instant the run began. The caps themselves are configuration, kept
//! with the tools' rules in the one tool table ([`crate::tools::ToolTable`]);
//! a call's cap is passed in where its call is counted.
//! [`Ledger::to_record`] encodes it into a fixed-size, versioned,
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
use crate::tools::{ToolName, ToolTable};

mod record;

pub use record::{record_len, Record, RecordError, RECORD_LEN, RECORD_VERSION};

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

/// A per-tool cap reached: the tool's own call count and its cap (from the
/// tool table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CapReached {
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
    /// More capped tools than the ledger has count slots (`TOOLS`).
    CapsFull,
    /// The amounts reserved against this limit would pass `u64::MAX` (only
    /// reachable with no maximum set); refused rather than saturated, since a
    /// saturated sum would give budget back when one of them is released.
    Overflow(Limit),
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
            Self::Overflow(limit) => write!(f, "reservations against {limit} overflow"),
        }
    }
}

impl core::error::Error for LedgerError {}

/// The calls counted for one capped tool (state; its cap is in the tool
/// table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCount {
    name: ToolName,
    used: u32,
}

impl ToolCount {
    /// The tool.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }
    /// Calls counted.
    pub const fn used(&self) -> u32 {
        self.used
    }
}

/// Used, maximum and reserved per [`Limit`], the calls counted per capped
/// tool, and the instant the run began (`SPEC E`). `TOOLS` is how many
/// capped tools it can count (8 by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger<const TOOLS: usize = MAX_TOOLS> {
    started_ms: u64,
    used: [u64; Limit::COUNT],
    reserved: [u64; Limit::COUNT],
    max: [Option<u64>; Limit::COUNT],
    counts: Vec<ToolCount, TOOLS>,
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
            counts: Vec::new(),
        }
    }

    /// Sets (or with `None` lifts) the maximum of `limit`.
    pub fn set_max(&mut self, limit: Limit, max: Option<u64>) {
        if let Some(slot) = self.max.get_mut(limit.index()) {
            *slot = max;
        }
    }

    /// Counts the calls of exactly the tools `tools` caps: a capped tool
    /// without a count gets one (0 calls), the count of a tool the table no
    /// longer caps is dropped (its cap was lifted: a budget file changed
    /// between decisions), the calls counted for a tool still capped stay.
    /// Errors [`LedgerError::CapsFull`] when `tools` caps more than `TOOLS`
    /// tools; the ledger then counts the capped tools it already counted and
    /// as many more as fit, and refuses a call of any other capped tool
    /// ([`Self::try_count_tool`]).
    pub fn track_caps<const N: usize>(&mut self, tools: &ToolTable<N>) -> Result<(), LedgerError> {
        self.counts.retain(|c| tools.cap(c.name.as_str()).is_some());
        for (name, _) in tools.caps() {
            if self.count_of(name.as_str()).is_none() {
                self.counts
                    .push(ToolCount {
                        name: name.clone(),
                        used: 0,
                    })
                    .map_err(|_| LedgerError::CapsFull)?;
            }
        }
        Ok(())
    }

    fn count_of(&self, name: &str) -> Option<&ToolCount> {
        self.counts.iter().find(|c| c.name.as_str() == name)
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

    /// The calls counted per capped tool, in the order they were first
    /// counted or tracked ([`Self::track_caps`]).
    pub fn counts(&self) -> &[ToolCount] {
        &self.counts
    }

    /// The calls counted for tool `name` (0 for a tool never counted).
    pub fn tool_used(&self, name: &str) -> u32 {
        self.count_of(name).map_or(0, ToolCount::used)
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
            .find_map(|limit| self.exhausted_at(limit, self.started_ms))
    }

    /// Whether `limit` is reached (used and reserved at or above its
    /// maximum), with the time used taken as at least the time since the run
    /// began at `now_ms` — as [`Self::observe_time`] then this check would,
    /// without changing the ledger. `None` when the limit is unset or not
    /// reached.
    pub fn exhausted_at(&self, limit: Limit, now_ms: u64) -> Option<Exceeded> {
        let max = self.max(limit)?;
        let mut used = self.used(limit);
        if limit == Limit::Millis {
            used = used.max(now_ms.saturating_sub(self.started_ms));
        }
        let used = used.saturating_add(self.reserved(limit));
        (used >= max).then_some(Exceeded { limit, used, max })
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
        let reserved = self
            .reserved(limit)
            .checked_add(amount)
            .ok_or(LedgerError::Overflow(limit))?;
        if let Some(r) = self.reserved.get_mut(limit.index()) {
            *r = reserved;
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

    /// Checks a call of tool `name` against its cap `cap` (the tool
    /// table's, [`ToolTable::cap`]) and counts the call when it fits
    /// (equality allowed: a cap of 1 allows one call, a cap of 0 none). A
    /// tool without a cap (`None`) is neither checked nor counted. Fails
    /// closed: a capped tool that cannot be counted (`name` outside the
    /// grammar, or no count slot left: see [`Self::track_caps`]) is refused
    /// as if its cap were reached.
    pub fn try_count_tool(&mut self, name: &str, cap: Option<u32>) -> Result<(), CapReached> {
        let Some(max) = cap else {
            return Ok(());
        };
        let used = self.tool_used(name);
        if used >= max {
            return Err(CapReached { used, max });
        }
        if let Some(count) = self.counts.iter_mut().find(|c| c.name.as_str() == name) {
            count.used += 1;
            return Ok(());
        }
        let name = ToolName::new(name).map_err(|_| CapReached { used: max, max })?;
        self.counts
            .push(ToolCount { name, used: 1 })
            .map_err(|_| CapReached { used: max, max })
    }

    /// Gives back one call of tool `name`'s cap, counted by
    /// [`Self::try_count_tool`] for a reservation that was then rolled back
    /// (a cancelled call, a server that failed). A tool without a cap, or
    /// with no call counted, is left as it is (never below zero).
    pub fn release_tool(&mut self, name: &str) {
        if let Some(count) = self.counts.iter_mut().find(|c| c.name.as_str() == name) {
            count.used = count.used.saturating_sub(1);
        }
    }

    /// Whether tool `name`, capped at `cap` (the tool table's), has reached
    /// it (no state change). `None` for a tool without a cap.
    pub fn cap_reached(&self, name: &str, cap: Option<u32>) -> Option<CapReached> {
        let max = cap?;
        let used = self.tool_used(name);
        (used >= max).then_some(CapReached { used, max })
    }
}

// ------------------------------------------------------------ duty windows

/// An actuator's duty window: at most `max_on_ms` of on-time in any window
/// of `window_ms` (a valve open at most 30 s in any 10 min), the budget an
/// actuator governor keeps (issue 15). Sans-IO: the caller says when the
/// actuator goes on and off and asks, at every tick, whether it must go off.
///
/// On-time is counted over the half-open window `(now - window_ms, now]`.
/// The last `N` on-spans are kept; when more must be kept, the two oldest
/// are merged into one span covering both, which can only count more
/// on-time, never less (the governor errs towards off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DutyWindow<const N: usize = 8> {
    window_ms: u64,
    max_on_ms: u64,
    /// Closed spans `[start, end)`, oldest first, not overlapping.
    spans: Vec<(u64, u64), N>,
    on_since: Option<u64>,
}

/// The duty windows of a device's actuators, by actuator number
/// ([`crate::limits::MAX_DUTY_WINDOWS`]; `None`: that actuator has none), as
/// the device gate keeps them and its run record stores them.
pub type DutyWindows =
    [Option<DutyWindow<{ crate::limits::DUTY_SPANS }>>; crate::limits::MAX_DUTY_WINDOWS];

/// A switch-on refused by a duty window: the on-time in the window and its
/// maximum, and when it may go on again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DutyExceeded {
    /// On-time in the window now, in ms.
    pub on_ms: u64,
    /// The window's maximum, in ms.
    pub max_on_ms: u64,
    /// The first instant at which switching on is allowed again.
    pub retry_at_ms: u64,
}

/// [`DutyWindow::switch_off`] for the windows of the device gate, compiled
/// once, in this crate: the gate's code is generic over its actuators, so
/// calling the generic method from it built a second copy in the firmware
/// beside the one the stored record's code uses (issue 15, flash).
#[inline(never)]
pub(crate) fn switch_off_device(
    window: &mut DutyWindow<{ crate::limits::DUTY_SPANS }>,
    now_ms: u64,
) {
    window.switch_off(now_ms);
}

impl<const N: usize> DutyWindow<N> {
    /// A window of `window_ms` allowing `max_on_ms` of on-time, with the
    /// actuator off.
    pub const fn new(window_ms: u64, max_on_ms: u64) -> Self {
        Self {
            window_ms,
            max_on_ms,
            spans: Vec::new(),
            on_since: None,
        }
    }

    /// The same history (its closed spans, and the open one while on)
    /// under another window and maximum. Spans wholly before the old
    /// window were dropped when they left it, so a longer window would
    /// count less than happened: a caller keeps a window from growing while
    /// it has a history ([`Self::has_history`]).
    #[must_use]
    pub fn with_limits(&self, window_ms: u64, max_on_ms: u64) -> Self {
        Self {
            window_ms,
            max_on_ms,
            spans: self.spans.clone(),
            on_since: self.on_since,
        }
    }

    /// Whether any on-time was counted: a closed span kept, or the
    /// actuator on.
    pub fn has_history(&self) -> bool {
        self.on_since.is_some() || !self.spans.is_empty()
    }

    /// Whether the actuator is on.
    pub const fn is_on(&self) -> bool {
        self.on_since.is_some()
    }

    /// On-time within `(now - window, now]`, the open span included.
    pub fn on_time(&self, now_ms: u64) -> u64 {
        let from = now_ms.saturating_sub(self.window_ms);
        let overlap = |start: u64, end: u64| end.min(now_ms).saturating_sub(start.max(from));
        let closed: u64 = self.spans.iter().map(|&(s, e)| overlap(s, e)).sum();
        closed + self.on_since.map_or(0, |s| overlap(s, now_ms))
    }

    /// The window's length, ms.
    pub const fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// The most on-time in any window, ms.
    pub const fn max_on_ms(&self) -> u64 {
        self.max_on_ms
    }

    /// The closed on-spans `[start, end)` kept, oldest first, not
    /// overlapping (the open span, while on, is not among them).
    pub fn spans(&self) -> &[(u64, u64)] {
        &self.spans
    }

    /// Whether [`Self::try_switch_on`] at `now` would switch on (or the
    /// actuator is on already), without switching it.
    pub fn check_on(&self, now_ms: u64) -> Result<(), DutyExceeded> {
        if self.on_since.is_some() {
            return Ok(());
        }
        let on_ms = self.on_time(now_ms);
        if on_ms >= self.max_on_ms {
            return Err(DutyExceeded {
                on_ms,
                max_on_ms: self.max_on_ms,
                retry_at_ms: self.first_time_below_max(now_ms),
            });
        }
        Ok(())
    }

    /// Switches the actuator on at `now`, if the window has on-time left
    /// (already on: nothing changes).
    pub fn try_switch_on(&mut self, now_ms: u64) -> Result<(), DutyExceeded> {
        self.check_on(now_ms)?;
        self.on_since.get_or_insert(now_ms);
        Ok(())
    }

    /// Adds an on-span `[start, end)` that is over (the window is off and
    /// the span begins at or after the last one's end: a window rebuilt from
    /// a record, oldest span first). Kept as [`Self::switch_off`] keeps
    /// spans: merged with the oldest when the table is full. While on, or
    /// for an empty span, nothing changes.
    pub fn add_past_span(&mut self, start_ms: u64, end_ms: u64) {
        if self.on_since.is_none() && start_ms < end_ms {
            self.on_since = Some(start_ms);
            self.switch_off(end_ms);
        }
    }

    /// The window as a record keeps it, at `now`, and the instant it is
    /// taken at. Off: as it is, at `now`. On: switched off at the instant
    /// it must stop ([`Self::must_stop_at`]; `now` if it never must), the
    /// longest it can stay on: a record cannot know when the power went,
    /// and must never count less on-time than there was (it errs towards
    /// off). Either way only what a later window can see is kept: spans
    /// that ended before the last window are dropped, one across its start
    /// is cut there, empty ones are dropped, and the spans are made not to
    /// overlap.
    pub fn settled(&self, now_ms: u64) -> (Self, u64) {
        let mut kept = self.clone();
        let at = self.must_stop_at(now_ms).unwrap_or(now_ms).max(now_ms);
        kept.switch_off(at);
        let mut from = at.saturating_sub(self.window_ms);
        kept.spans.retain_mut(|(start, end)| {
            *end = (*end).min(at);
            *start = (*start).max(from);
            from = from.max(*end);
            start < end
        });
        (kept, at)
    }

    /// Switches the actuator off at `now` (already off: nothing changes).
    pub fn switch_off(&mut self, now_ms: u64) {
        let Some(start) = self.on_since.take() else {
            return;
        };
        let end = now_ms.max(start);
        // Spans wholly before any future window are no longer needed.
        let from = now_ms.saturating_sub(self.window_ms);
        self.spans.retain(|&(_, e)| e > from);
        if self.spans.is_full() {
            if let [(s0, _), (_, e1), ..] = self.spans[..] {
                self.spans.remove(0);
                if let Some(first) = self.spans.first_mut() {
                    *first = (s0, e1);
                }
            }
        }
        let _ = self.spans.push((start, end));
    }

    /// While on: the instant by which the actuator must be off, the first at
    /// which the window's on-time reaches its maximum. `None` while off, or
    /// when it may stay on for good (a maximum above the window's length).
    pub fn must_stop_at(&self, now_ms: u64) -> Option<u64> {
        self.on_since?;
        if self.max_on_ms > self.window_ms {
            return None;
        }
        // With the actuator on, on-time grows by 1 per ms, less what leaves
        // the window: it never decreases, so the first instant reaching the
        // maximum is found by bisection.
        let (mut lo, mut hi) = (now_ms, now_ms.saturating_add(self.max_on_ms));
        if self.on_time(lo) >= self.max_on_ms {
            return Some(now_ms);
        }
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if self.on_time(mid) >= self.max_on_ms {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// Whether the actuator is on and must go off now; the caller then
    /// drives it off and calls [`Self::switch_off`].
    pub fn must_stop(&self, now_ms: u64) -> bool {
        self.must_stop_at(now_ms).is_some_and(|at| at <= now_ms)
    }

    /// While off: the first instant at or after `now` at which the on-time
    /// is below the maximum (old spans leaving the window).
    fn first_time_below_max(&self, now_ms: u64) -> u64 {
        if self.max_on_ms == 0 {
            return u64::MAX;
        }
        // Off, on-time never increases: bisection again.
        let (mut lo, mut hi) = (now_ms, now_ms.saturating_add(self.window_ms));
        if self.on_time(lo) < self.max_on_ms {
            return now_ms;
        }
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if self.on_time(mid) < self.max_on_ms {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

/// The dead-man's switch of a link: when no valid frame has come for
/// `timeout_ms` while an actuator is out of its safe state, the device drives
/// it safe and latches the fault (issue 15). Sans-IO: feed it at every valid
/// frame, ask it at every tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Watchdog {
    timeout_ms: u64,
    last_ms: u64,
    tripped: bool,
}

impl Watchdog {
    /// A watchdog fed at `now_ms`.
    pub const fn new(timeout_ms: u64, now_ms: u64) -> Self {
        Self {
            timeout_ms,
            last_ms: now_ms,
            tripped: false,
        }
    }

    /// A valid frame arrived. A tripped watchdog stays tripped (latched):
    /// only [`Self::reset`], an operator's action, clears it.
    pub fn feed(&mut self, now_ms: u64) {
        if !self.tripped {
            self.last_ms = self.last_ms.max(now_ms);
        }
    }

    /// Whether the link has been silent for the timeout or longer; once
    /// true it stays true until [`Self::reset`].
    pub fn check(&mut self, now_ms: u64) -> bool {
        if now_ms.saturating_sub(self.last_ms) >= self.timeout_ms {
            self.tripped = true;
        }
        self.tripped
    }

    /// Changes the timeout (a configuration the operator changed); what was
    /// fed and whether it tripped stay.
    pub fn set_timeout(&mut self, timeout_ms: u64) {
        self.timeout_ms = timeout_ms;
    }

    /// The timeout, ms.
    pub const fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// Clears a tripped watchdog (the operator's action), fed at `now_ms`.
    pub fn reset(&mut self, now_ms: u64) {
        self.tripped = false;
        self.last_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        let mut l = Ledger::new(100);
        l.set_max(Limit::Tokens, Some(1000));
        l.set_max(Limit::ToolCalls, Some(2));
        l.track_caps(&tools()).unwrap();
        l
    }

    /// `Bash` capped at 1 call, as the tool table says.
    const BASH: Option<u32> = Some(1);

    fn tools() -> ToolTable<8> {
        let mut t = ToolTable::new();
        t.set_others(crate::tools::ToolRule::Run);
        t.try_add_cap("Bash", 1).unwrap();
        t
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

    /// `SPEC C` (the `>=` check before each model call): a limit below its
    /// maximum is not exhausted, reservations included; at its maximum and
    /// past it, it is, with the figures (a mutant reading `<=` for `>=` was
    /// missed by the core's tests, found by `scripts/mutants-diff`).
    #[test]
    fn a_limit_is_exhausted_at_and_past_its_maximum_never_below() {
        let mut l = ledger();
        l.record(Limit::Tokens, 998);
        assert_eq!(l.first_exhausted(|_| true), None);
        let held = l.try_reserve(Limit::Tokens, 1).unwrap();
        assert_eq!(l.first_exhausted(|_| true), None, "998 + 1 of 1000");
        l.commit(held, 2).unwrap();
        let e = l.first_exhausted(|_| true).unwrap();
        assert_eq!((e.limit, e.used, e.max), (Limit::Tokens, 1000, 1000));
        l.record(Limit::Tokens, 5);
        let e = l.first_exhausted(|_| true).unwrap();
        assert_eq!((e.limit, e.used, e.max), (Limit::Tokens, 1005, 1000));
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

    /// Found by the `ledger_record` fuzz target: reservations that saturated
    /// (no maximum set) gave budget back when one was released.
    #[test]
    fn reservations_that_would_overflow_are_refused_not_saturated() {
        let mut l: Ledger = Ledger::new(0);
        let a = l.try_reserve(Limit::Tokens, u64::MAX - 1).unwrap();
        assert_eq!(
            l.try_reserve(Limit::Tokens, 2),
            Err(LedgerError::Overflow(Limit::Tokens))
        );
        assert_eq!(l.reserved(Limit::Tokens), u64::MAX - 1);
        l.roll_back(a).unwrap();
        assert_eq!(l.reserved(Limit::Tokens), 0);
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
        l.try_count_tool("Bash", BASH).unwrap();
        assert!(l.cap_reached("Bash", BASH).is_some());
        l.release_tool("Bash");
        assert_eq!(l.cap_reached("Bash", BASH), None);
        l.release_tool("Bash");
        l.release_tool("Read");
        l.try_count_tool("Bash", BASH).unwrap();
        assert!(l.try_count_tool("Bash", BASH).is_err());
    }

    #[test]
    fn a_per_tool_cap_allows_exactly_its_maximum() {
        let mut l = ledger();
        assert_eq!(l.cap_reached("Bash", BASH), None);
        l.try_count_tool("Bash", BASH).unwrap();
        let reached = l.try_count_tool("Bash", BASH).unwrap_err();
        assert_eq!((reached.used, reached.max), (1, 1));
        assert_eq!(l.cap_reached("Bash", BASH), Some(reached));
        // Another tool has no cap: never refused, never counted.
        for _ in 0..10 {
            l.try_count_tool("Read", None).unwrap();
        }
        assert_eq!(l.cap_reached("Read", None), None);
        assert_eq!(l.tool_used("Read"), 0);
        // The table holds one cap per tool (`ToolTableError::Duplicate`).
        assert!(tools().try_add_cap("Bash", 3).is_err());
    }

    #[test]
    fn a_cap_set_again_keeps_its_calls_and_a_new_one_is_added() {
        let mut l = ledger();
        l.try_count_tool("Bash", BASH).unwrap();
        // The budget file now caps Bash at 3 and Read at 2.
        let mut t: ToolTable<8> = ToolTable::new();
        t.try_add_cap("Bash", 3).unwrap();
        t.try_add_cap("Read", 2).unwrap();
        l.track_caps(&t).unwrap();
        let caps: std::vec::Vec<_> = l
            .counts()
            .iter()
            .map(|c| (c.name(), c.used(), t.cap(c.name())))
            .collect();
        assert_eq!(caps, [("Bash", 1, Some(3)), ("Read", 0, Some(2))]);
        // Then only Read: Bash's cap is lifted and its count dropped.
        let mut only_read: ToolTable<8> = ToolTable::new();
        only_read.try_add_cap("Read", 2).unwrap();
        l.track_caps(&only_read).unwrap();
        assert_eq!(l.counts().len(), 1);
        assert_eq!(l.tool_used("Bash"), 0);
        assert_eq!(l.started_ms(), 100);
    }

    #[test]
    fn limits_and_errors_are_worded_for_a_person() {
        assert_eq!(Limit::CostMicros.to_string(), "cost_micro_usd");
        let keys: std::vec::Vec<_> = Limit::ALL.iter().map(|l| l.key()).collect();
        assert_eq!(
            keys,
            [
                "model_calls",
                "tokens",
                "time_ms",
                "cost_micro_usd",
                "tool_calls"
            ]
        );
        let r = Reservation {
            limit: Limit::Tokens,
            amount: 5,
        };
        assert_eq!(
            LedgerError::NotReserved(r).to_string(),
            "no reservation of 5 tokens is held (committed or rolled back already?)"
        );
        assert_eq!(LedgerError::CapsFull.to_string(), "at most 8 per-tool caps");
        assert_eq!(
            LedgerError::Overflow(Limit::Tokens).to_string(),
            "reservations against tokens overflow"
        );
        assert_eq!(
            LedgerError::Exceeded(Exceeded {
                limit: Limit::ToolCalls,
                used: 2,
                max: 2
            })
            .to_string(),
            "tool_calls budget exhausted (2 of 2 tool calls)"
        );
        assert_eq!(
            RecordError::Version(9).to_string(),
            "ledger record version 9; this build reads version 2"
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

    /// Issue 15 (duty windows): a span that ended a whole window ago or
    /// more can count in no later window and is dropped when the actuator
    /// next goes off; one that ended later is kept. (Kept spans are few:
    /// keeping dead ones would merge live ones sooner, counting on-time
    /// that was not.)
    #[test]
    fn a_span_that_ended_a_whole_window_ago_is_dropped_when_the_actuator_goes_off() {
        let mut d: DutyWindow<4> = DutyWindow::new(100, 50);
        d.try_switch_on(0).unwrap();
        d.switch_off(10);
        d.try_switch_on(20).unwrap();
        d.switch_off(21);
        // At 110 the window is (10, 110]: the span ending at 10 is dead, the
        // one ending at 21 is not.
        d.try_switch_on(110).unwrap();
        d.switch_off(110);
        assert_eq!(d.spans(), &[(20, 21), (110, 110)]);
        assert_eq!(d.on_time(110), 1);
    }

    #[test]
    fn a_duty_window_allows_exactly_its_on_time_in_any_window() {
        // At most 30 s on in any 10 min.
        let mut d: DutyWindow<4> = DutyWindow::new(600_000, 30_000);
        d.try_switch_on(0).unwrap();
        assert_eq!(d.must_stop_at(0), Some(30_000));
        assert!(!d.must_stop(29_999));
        assert!(d.must_stop(30_000));
        d.switch_off(30_000);
        assert_eq!(d.on_time(100_000), 30_000);
        // The whole 30 s are still in the window until 600 000.
        let refused = d.try_switch_on(100_000).unwrap_err();
        assert_eq!(
            refused,
            DutyExceeded {
                on_ms: 30_000,
                max_on_ms: 30_000,
                retry_at_ms: 600_001
            }
        );
        assert!(d.try_switch_on(600_000).is_err());
        // One ms of it has left the window: on again, and off by the time the
        // window holds 30 s again (the old span leaves as fast as the new
        // one grows, so not before it has left entirely).
        d.try_switch_on(600_001).unwrap();
        assert_eq!(d.on_time(600_001), 29_999);
        assert_eq!(d.must_stop_at(600_001), Some(630_001));
        assert_eq!(d.on_time(630_000), 29_999);
        assert_eq!(d.on_time(630_001), 30_000);
    }

    /// Issue 15 (duty windows persisted): a window as a record keeps it
    /// holds only what a later window can see, and one that is on is
    /// switched off at the instant it must stop, never earlier.
    #[test]
    fn a_settled_window_keeps_only_what_a_later_window_sees() {
        let mut d: DutyWindow<4> = DutyWindow::new(2_000, 400);
        for (on, off) in [(0, 100), (500, 500), (1_400, 1_600)] {
            d.try_switch_on(on).unwrap();
            d.switch_off(off);
        }
        assert_eq!(d.spans(), &[(0, 100), (500, 500), (1_400, 1_600)]);
        let (off, at) = d.settled(2_150);
        assert_eq!(at, 2_150);
        // (0, 100) is before the last window, (500, 500) empty.
        assert_eq!(off.spans(), &[(1_400, 1_600)]);
        let (cut, _) = d.settled(3_500);
        assert_eq!(cut.spans(), &[(1_500, 1_600)], "cut at the window's start");
        let (early, _) = d.settled(2_050);
        assert_eq!(early.spans(), &[(50, 100), (1_400, 1_600)]);
        // On at 2 000 with 300 ms in the window: the first span leaves as
        // fast as the new one grows, then 100 ms more: it must stop at 2 200.
        d.try_switch_on(2_000).unwrap();
        assert!(d.check_on(2_100).is_ok(), "on already");
        let (on, at) = d.settled(2_050);
        assert_eq!(at, 2_200);
        assert!(!on.is_on() && d.is_on());
        assert_eq!(on.spans(), &[(1_400, 1_600), (2_000, 2_200)]);
        assert_eq!(on.on_time(2_200), 400);
        // Rebuilt from its spans, it is the same window.
        let mut again: DutyWindow<4> = DutyWindow::new(2_000, 400);
        for &(s, e) in on.spans() {
            again.add_past_span(s, e);
        }
        again.add_past_span(2_300, 2_300);
        assert_eq!(again, on, "an empty span adds nothing");
        again.try_switch_on(5_000).unwrap();
        again.add_past_span(5_100, 5_200);
        assert_eq!(again.spans(), on.spans(), "nothing added while on");
    }

    #[test]
    fn a_zero_duty_never_switches_on_and_a_long_one_never_forces_off() {
        let mut never: DutyWindow = DutyWindow::new(1_000, 0);
        assert_eq!(never.try_switch_on(5).unwrap_err().retry_at_ms, u64::MAX);
        let mut always: DutyWindow = DutyWindow::new(1_000, 2_000);
        always.try_switch_on(0).unwrap();
        assert_eq!(always.must_stop_at(0), None);
        assert!(!always.must_stop(1_000_000));
    }

    #[test]
    fn short_bursts_add_up_in_the_window() {
        let mut d: DutyWindow<4> = DutyWindow::new(1_000, 300);
        for start in [0, 200, 400] {
            d.try_switch_on(start).unwrap();
            d.switch_off(start + 100);
        }
        assert_eq!(d.on_time(600), 300);
        assert!(d.try_switch_on(600).is_err());
        // From 1 001 the first burst has begun to leave.
        assert_eq!(d.try_switch_on(600).unwrap_err().retry_at_ms, 1_001);
        d.try_switch_on(1_050).unwrap();
        // 250 ms in the window at 1 050 (50 of the first burst); the first
        // burst leaves as the new span grows, then 50 ms more reach 300.
        assert_eq!(d.on_time(1_050), 250);
        assert_eq!(d.must_stop_at(1_050), Some(1_150));
        assert_eq!(d.on_time(1_149), 299);
    }

    /// Against a timeline of every millisecond: on-time, refusals and the
    /// instant a span must end agree exactly over random switching.
    #[test]
    fn a_duty_window_agrees_with_a_millisecond_timeline() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let (window, max) = (1 + next() % 300, 1 + next() % 120);
            let mut d: DutyWindow<64> = DutyWindow::new(window, max);
            // on[t]: the actuator was on during millisecond [t, t+1).
            let mut on = std::vec![false; 4_000];
            let brute = |on: &[bool], t: u64| -> u64 {
                (t.saturating_sub(window)..t)
                    .filter(|&m| on[m as usize])
                    .count() as u64
            };
            let mut t = 0u64;
            let mut rounds = 0;
            while t < 2_500 {
                rounds += 1;
                assert!(rounds < 20_000, "the timeline makes no progress at {t}");
                if d.is_on() {
                    let Some(stop) = d.must_stop_at(t) else {
                        assert!(max > window, "window {window} max {max} at {t}");
                        let end = t + next() % 80;
                        for m in t..end {
                            on[m as usize] = true;
                        }
                        t = end;
                        d.switch_off(t);
                        continue;
                    };
                    let mut first = t;
                    while brute(
                        &{
                            let mut o = on.clone();
                            for m in t..first {
                                o[m as usize] = true;
                            }
                            o
                        },
                        first,
                    ) < max
                    {
                        first += 1;
                        assert!(first <= t + max, "the timeline never reaches its maximum");
                    }
                    assert_eq!(stop, first, "window {window} max {max} at {t}");
                    let end = (t + next() % 80).min(stop);
                    for m in t..end {
                        on[m as usize] = true;
                    }
                    t = end;
                    d.switch_off(t);
                } else {
                    assert_eq!(
                        d.on_time(t),
                        brute(&on, t),
                        "window {window} max {max} at {t}"
                    );
                    match d.try_switch_on(t) {
                        Ok(()) => assert!(brute(&on, t) < max),
                        Err(e) => {
                            assert!(brute(&on, t) >= max);
                            assert!(brute(&on, e.retry_at_ms) < max);
                            assert!(brute(&on, e.retry_at_ms - 1) >= max);
                        }
                    }
                    if !d.is_on() {
                        t += 1 + next() % 60;
                    }
                }
            }
        }
    }

    #[test]
    fn a_full_span_table_merges_and_only_counts_more() {
        let mut d: DutyWindow<2> = DutyWindow::new(10_000, 10_000);
        for start in [0, 100, 200, 300] {
            d.try_switch_on(start).unwrap();
            d.switch_off(start + 10);
        }
        // 40 ms really on; merged spans may count more, never less.
        assert!(d.on_time(1_000) >= 40);
        assert!(d.on_time(1_000) <= 310);
    }

    #[test]
    fn the_watchdog_trips_after_silence_and_stays_tripped() {
        let mut w = Watchdog::new(5_000, 0);
        w.feed(3_000);
        assert!(!w.check(7_999));
        assert!(w.check(8_000));
        w.feed(8_001);
        assert!(w.check(8_002), "a trip is latched");
        w.reset(9_000);
        assert!(!w.check(13_999));
        assert!(w.check(14_000));
    }

    /// The dead-man time changed by the operator applies from then on, to
    /// the silence already counted; a trip stays latched.
    #[test]
    fn a_watchdogs_new_timeout_applies_to_the_silence_so_far() {
        let mut w = Watchdog::new(5_000, 0);
        assert_eq!(w.timeout_ms(), 5_000);
        w.set_timeout(2_000);
        assert_eq!(w.timeout_ms(), 2_000);
        assert!(!w.check(1_999));
        assert!(w.check(2_000));
        w.set_timeout(60_000);
        assert!(w.check(2_001), "still latched");
    }

    /// An actuator left on past its duty (the device switched it off late)
    /// may only go on again once enough on-time has left the window.
    #[test]
    fn an_overrun_duty_window_waits_until_the_excess_has_left() {
        let mut d: DutyWindow = DutyWindow::new(1_000, 100);
        d.try_switch_on(0).unwrap();
        d.switch_off(300); // 200 ms over
        let refused = d.try_switch_on(400).unwrap_err();
        assert_eq!(refused.on_ms, 300);
        // On-time drops below 100 once more than 200 ms of the span have left: at 1 201.
        assert_eq!(refused.retry_at_ms, 1_201);
        assert!(d.try_switch_on(1_200).is_err());
        d.try_switch_on(1_201).unwrap();
    }

    /// A ledger with its cap table full round-trips (the record's cap count
    /// may equal the capacity).
    #[test]
    fn a_full_cap_table_round_trips() {
        let mut l: Ledger = Ledger::new(5);
        let mut t: ToolTable<9> = ToolTable::new();
        for (i, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .into_iter()
            .enumerate()
        {
            t.try_add_cap(name, i as u32 + 1).unwrap();
        }
        l.track_caps(&t).unwrap();
        for name in ["a", "h"] {
            l.try_count_tool(name, t.cap(name)).unwrap();
        }
        t.try_add_cap("i", 1).unwrap();
        assert_eq!(l.track_caps(&t), Err(LedgerError::CapsFull));
        // Fail closed: a capped tool that cannot be counted is refused.
        assert_eq!(
            l.try_count_tool("i", Some(1)),
            Err(CapReached { used: 1, max: 1 })
        );
        assert_eq!(Ledger::from_record(l.to_record().as_bytes()), Ok(l));
    }

    /// Issue 11 (one tool table): a cap of 0 in the table denies every call
    /// of its tool, and counts none.
    #[test]
    fn a_cap_of_zero_denies_every_call() {
        let mut l: Ledger = Ledger::new(0);
        let mut t: ToolTable<2> = ToolTable::new();
        t.try_add_cap("send_email", 0).unwrap();
        l.track_caps(&t).unwrap();
        let cap = t.cap("send_email");
        assert_eq!(
            l.try_count_tool("send_email", cap),
            Err(CapReached { used: 0, max: 0 })
        );
        assert_eq!(
            l.cap_reached("send_email", cap),
            Some(CapReached { used: 0, max: 0 })
        );
        assert_eq!(l.tool_used("send_email"), 0);
    }

    /// Issue 11: a tool capped in the table but never tracked is counted on
    /// its first call (a slot is taken then), up to its cap; a name outside
    /// the grammar is refused, never counted.
    #[test]
    fn a_cap_reached_refuses_the_next_call_even_untracked() {
        let mut l: Ledger = Ledger::new(0);
        l.try_count_tool("Bash", Some(2)).unwrap();
        l.try_count_tool("Bash", Some(2)).unwrap();
        assert_eq!(
            l.try_count_tool("Bash", Some(2)),
            Err(CapReached { used: 2, max: 2 })
        );
        assert_eq!(l.tool_used("Bash"), 2);
        assert_eq!(
            l.try_count_tool("Ba sh", Some(2)),
            Err(CapReached { used: 2, max: 2 })
        );
        assert_eq!(l.counts().len(), 1);
    }
}
