//! `DutyWindow` (an actuator's on-time in any window) under arbitrary
//! switching, against a per-millisecond timeline (its on-time in the window
//! kept as a sliding sum, checked against the whole count at each step).
//!
//! Invariants: never panics; while the span table does not overflow, the
//! on-time is exactly the timeline's; a switch-on is refused exactly when the
//! window holds its maximum; an actuator that obeys `must_stop` is never on
//! for more than the maximum in any window.
#![no_main]

use budgetgate_core::budget::DutyWindow;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    window: u8,
    max: u8,
    steps: Vec<(bool, u8)>,
}

fuzz_target!(|input: Input| {
    let window = u64::from(input.window) + 1;
    let max = u64::from(input.max);
    let mut duty: DutyWindow<64> = DutyWindow::new(window, max);
    let mut on = vec![false; 0];
    let brute = |on: &[bool], t: u64| {
        (t.saturating_sub(window)..t)
            .filter(|&m| on.get(m as usize) == Some(&true))
            .count() as u64
    };
    let mut t = 0u64;
    // The on-time in [t - window, t), kept as a sliding sum of the timeline
    // (checked against the whole count at every step).
    let mut in_window = 0u64;
    for (switch_on, wait) in input.steps.iter().take(200) {
        assert_eq!(in_window, brute(&on, t));
        if *switch_on {
            let before = in_window;
            match duty.try_switch_on(t) {
                Ok(()) => assert!(before < max || duty.is_on()),
                Err(e) => {
                    assert!(before >= max);
                    assert_eq!(e.on_ms, before);
                }
            }
        } else {
            duty.switch_off(t);
        }
        // Time passes; an obedient device switches off when told.
        for _ in 0..u64::from(*wait) {
            if duty.must_stop(t) {
                duty.switch_off(t);
            }
            on.push(duty.is_on());
            in_window += u64::from(duty.is_on());
            t += 1;
            if t > window && on[(t - window - 1) as usize] {
                in_window -= 1;
            }
            assert!(in_window <= max.max(if max > window { window } else { 0 }));
            assert_eq!(duty.on_time(t), in_window);
        }
    }
});
