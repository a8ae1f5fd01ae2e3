//! The agent link's dead-man switch (issue 15): [`Watchdog`], sans-IO, and
//! the device gate's ([`Timing::dead_man_ms`]): the actuators driven safe
//! when the link goes silent.

use embedded_io::Write;

#[cfg(doc)]
use super::Timing;
use super::{Actuators, DeviceGate};
use crate::resume::AuditVerdict;
use crate::word;

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

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    /// Sets the dead-man switch ([`Timing::dead_man_ms`]; 0: off).
    pub fn set_dead_man(&mut self, ms: u32) {
        self.timing.dead_man_ms = ms;
        self.dead_man.set_timeout(u64::from(ms));
    }

    /// The dead-man switch ([`Timing::dead_man_ms`]): trips when a tool ran
    /// since the actuators were last made safe, no call waits for the
    /// operator, and no valid frame came for that long.
    pub(super) fn check_dead_man<C: Write>(
        &mut self,
        now_ms: u64,
        console: &mut C,
    ) -> Result<(), C::Error> {
        if self.dead_man.timeout_ms() == 0
            || !self.moved
            || self.pending.is_some()
            || self.halted.is_some()
            || !self.dead_man.check(now_ms)
        {
            return Ok(());
        }
        self.clock_ms = now_ms;
        self.safe();
        let step = self.step();
        self.journal(step, None, AuditVerdict::DeadMan);
        // A journal that failed halted the gate already (storage-error).
        self.halted.get_or_insert(word::DEAD_MAN);
        log!(
            warn,
            "run {=u32}: dead-man: no frame for {=u64} ms with an actuator out of its safe state; actuators safe",
            self.runs,
            self.dead_man.timeout_ms()
        );
        console.write_all(
            b"dead-man: no valid frame on the agent link in time; actuators safe; start a run to go on\n",
        )
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
