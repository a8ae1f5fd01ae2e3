//! The agent link's dead-man switch (issue 15): [`Watchdog`], sans-IO.

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
}
