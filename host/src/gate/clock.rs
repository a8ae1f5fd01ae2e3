//! The wall clock every front-end decides by.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (the hook runs as a new process each
/// time, so only the wall clock is shared; a clock that goes back counts as
/// no time, see `Ledger::observe_time`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
