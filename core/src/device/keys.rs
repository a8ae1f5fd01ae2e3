//! Two debounced keys that answer approval prompts ([`ApprovalKeys`]).

#[cfg(doc)]
use super::DeviceGate;
use crate::approval::Answer;

/// Two debounced keys that answer approval prompts on a board that has them
/// (issue 15, physical approval): one approves, one denies. Sans-IO: the
/// board samples its pins (an `embedded-hal` `InputPin`) and passes the
/// levels in with the time; a press is the key going down and staying down
/// for `debounce_ms`, after it was seen up as long. A key already held when
/// sampling begins answers nothing until it is released and pressed again,
/// and while both keys are down nothing is answered (fail safe: no guess).
/// The board hands the answer to [`DeviceGate::on_answer`], which ignores it
/// when no call waits.
#[derive(Debug, Clone)]
pub struct ApprovalKeys {
    debounce_ms: u64,
    keys: [Key; 2],
}

#[derive(Debug, Clone, Copy)]
struct Key {
    /// The debounced level (`true`: down).
    down: bool,
    /// The raw level last seen, and since when.
    raw: bool,
    since_ms: u64,
}

impl Key {
    /// Takes a sample; `true` when this sample completes a press.
    fn sample(&mut self, raw: bool, now_ms: u64, debounce_ms: u64) -> bool {
        if raw != self.raw {
            self.raw = raw;
            self.since_ms = now_ms;
            return false;
        }
        if raw == self.down || now_ms.saturating_sub(self.since_ms) < debounce_ms {
            return false;
        }
        self.down = raw;
        raw
    }
}

impl ApprovalKeys {
    /// Keys debounced over `debounce_ms` (20 ms suits most switches), both
    /// taken as held until they are seen up.
    pub const fn new(debounce_ms: u32) -> Self {
        let held = Key {
            down: true,
            raw: true,
            since_ms: 0,
        };
        Self {
            debounce_ms: debounce_ms as u64,
            keys: [held, held],
        }
    }

    /// Samples both keys at `now_ms` (`true`: pressed); the answer a
    /// completed press gives, if any.
    pub fn sample(&mut self, approve: bool, deny: bool, now_ms: u64) -> Option<Answer> {
        let [a, d] = &mut self.keys;
        let approved = a.sample(approve, now_ms, self.debounce_ms);
        let denied = d.sample(deny, now_ms, self.debounce_ms);
        match (approved, denied) {
            (true, false) if !d.raw => Some(Answer::Approve),
            (false, true) if !a.raw => Some(Answer::Refuse),
            _ => None,
        }
    }
}
