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

pub use crate::device::duty::{DutyExceeded, DutyWindow, DutyWindows};
pub use crate::device::watchdog::Watchdog;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The ledger the tests start from (the record's tests too).
    pub(super) fn ledger() -> Ledger {
        let mut l = Ledger::new(100);
        l.set_max(Limit::Tokens, Some(1000));
        l.set_max(Limit::ToolCalls, Some(2));
        l.track_caps(&tools()).unwrap();
        l
    }

    /// `Bash` capped at 1 call, as the tool table says.
    pub(super) const BASH: Option<u32> = Some(1);

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
