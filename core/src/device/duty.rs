//! Actuators' duty windows (issue 15): [`DutyWindow`], the budget of
//! on-time an actuator governor keeps, sans-IO, and the device gate's
//! windows ([`DeviceGate::set_duty_window`]): a call that would switch on
//! an actuator whose window is spent is refused, and one whose window is
//! spent is driven safe.

use core::fmt;

use embedded_io::Write;
use heapless::Vec;

use super::{Actuators, DeviceGate};
use crate::action::ToolCallRef;
use crate::limits::MAX_DUTY_WINDOWS;
use crate::resume::AuditVerdict;
use crate::run::Pending as Token;
use crate::word;

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

/// Why [`DeviceGate::set_duty_window`] refused a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DutyError {
    /// The actuator's number is [`MAX_DUTY_WINDOWS`] or more.
    Actuator(usize),
    /// The window is 0 ms, or its most on-time is longer than it.
    Window,
    /// The actuator's window already counts on-time, and the new window
    /// is longer: on-time from before the old window was no longer kept,
    /// so the longer one would count less than happened.
    Longer,
}

impl fmt::Display for DutyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Actuator(a) => write!(
                f,
                "actuator {a} is over the {MAX_DUTY_WINDOWS} that may have a duty window"
            ),
            Self::Window => f.write_str(
                "a duty window must be at least 1 ms and its most on-time no longer than it",
            ),
            Self::Longer => f.write_str(
                "a duty window that has counted on-time cannot be made longer (the on-time before it is no longer kept)",
            ),
        }
    }
}

impl core::error::Error for DutyError {}

/// The duty windows' clock runs this far ahead of the gate's, ms: a window
/// resumed at boot (the gate's clock near 0) keeps the spans of the boot
/// before at times that still exist. Any window (a `u32` of ms) fits.
const DUTY_EPOCH_MS: u64 = 1 << 32;

/// The duty windows' clock at the gate's `now_ms`.
pub(super) const fn duty_clock(now_ms: u64) -> u64 {
    now_ms.saturating_add(DUTY_EPOCH_MS)
}

impl<A: Actuators, const TOOLS: usize> DeviceGate<A, TOOLS> {
    /// Gives actuator number `actuator` a duty window: at most `max_on_ms`
    /// of on-time in any `window_ms` (issue 15), counted from the calls
    /// that switch it ([`Actuators::switches`]). A call that would switch it
    /// on when the window holds that much is refused ([`word::DUTY_LIMIT`]);
    /// [`Self::poll`] drives it safe when the window is spent. A board sets
    /// its windows at boot, before [`Self::resume`] brings their history
    /// back; set again later (an operator's console), a window keeps the
    /// on-time it has counted, so setting it never gives on-time back: the
    /// new maximum applies at once to what was counted. Refuses
    /// ([`DutyError`], changing nothing) an actuator number of
    /// [`MAX_DUTY_WINDOWS`] or more, a window of 0 ms, a most on-time
    /// longer than the window, and a window longer than the actuator's
    /// current one once that has counted on-time.
    pub fn set_duty_window(
        &mut self,
        actuator: usize,
        window_ms: u32,
        max_on_ms: u32,
    ) -> Result<(), DutyError> {
        let slot = self
            .duty
            .get_mut(actuator)
            .ok_or(DutyError::Actuator(actuator))?;
        if window_ms == 0 || max_on_ms > window_ms {
            return Err(DutyError::Window);
        }
        let (window_ms, max_on_ms) = (u64::from(window_ms), u64::from(max_on_ms));
        *slot = Some(match slot.as_ref().filter(|w| w.has_history()) {
            Some(counted) if window_ms > counted.window_ms() => return Err(DutyError::Longer),
            Some(counted) => counted.with_limits(window_ms, max_on_ms),
            None => DutyWindow::new(window_ms, max_on_ms),
        });
        Ok(())
    }

    /// Actuator number `actuator`'s duty window, if it has one; its times
    /// are in the windows' own clock, a fixed distance ahead of the gate's
    /// (so that a resumed window keeps spans from before the boot).
    pub fn duty_window(
        &self,
        actuator: usize,
    ) -> Option<&DutyWindow<{ crate::limits::DUTY_SPANS }>> {
        self.duty.get(actuator)?.as_ref()
    }

    /// The on-time of actuator number `actuator` in its duty window at
    /// `now_ms` (the gate's clock), ms; `None` if it has no window.
    pub fn duty_on_time(&self, actuator: usize, now_ms: u64) -> Option<u64> {
        Some(self.duty_window(actuator)?.on_time(duty_clock(now_ms)))
    }

    /// The duty windows at `now_ms`: every actuator whose window is spent
    /// is driven to its safe state ([`Actuators::safe_state_of`]), its
    /// window switched off, and that is logged ([`AuditVerdict::DutyOff`],
    /// and `duty: actuator N …` on the console). The run goes on: a duty
    /// limit is not a fault.
    pub(super) fn check_duty<C: Write>(
        &mut self,
        now_ms: u64,
        console: &mut C,
    ) -> Result<(), C::Error> {
        let now = duty_clock(now_ms);
        let mut shown = Ok(());
        for actuator in 0..MAX_DUTY_WINDOWS {
            let Some(Some(window)) = self.duty.get_mut(actuator) else {
                continue;
            };
            if !window.must_stop(now) {
                continue;
            }
            switch_off_device(window, now);
            self.actuators.safe_state_of(actuator);
            self.clock_ms = now_ms;
            let number = u8::try_from(actuator).unwrap_or(u8::MAX);
            let step = self.step();
            self.journal(step, None, AuditVerdict::DutyOff(number));
            log!(
                info,
                "run {=u32}: actuator {=u8} spent its duty window; driven safe",
                self.runs,
                number
            );
            if shown.is_ok() {
                // One digit: MAX_DUTY_WINDOWS is at most 10.
                shown = console
                    .write_all(b"duty: actuator ")
                    .and_then(|()| console.write_all(&[b'0' + number % 10]))
                    .and_then(|()| {
                        console.write_all(b" spent its duty window; driven to its safe state\n")
                    });
            }
        }
        shown
    }

    /// Refuses a call that would switch on an actuator whose duty window
    /// is spent, as an approval refusal is: a counted attempt that did not
    /// run. The reply says in how many ms the window lets it on again.
    pub(super) fn refuse_duty<W: Write>(
        &mut self,
        agent: &mut W,
        call: &ToolCallRef<'_>,
        token: Token,
        spent: DutyExceeded,
    ) -> Result<(), W::Error> {
        let now = duty_clock(self.clock_ms);
        // `u64::MAX`: a window that allows no on-time never lets it on;
        // otherwise within the window's length (a `u32`).
        let retry = (spent.retry_at_ms != u64::MAX)
            .then(|| u32::try_from(spent.retry_at_ms.saturating_sub(now)).unwrap_or(u32::MAX));
        log!(
            info,
            "run {=u32} step {=u8}: {=str}: duty window spent; not executed",
            self.runs,
            token.step(),
            call.call_id.as_str()
        );
        self.refuse_with(agent, call, token, word::DUTY_LIMIT, retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
