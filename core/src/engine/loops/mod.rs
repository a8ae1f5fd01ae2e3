//! Loop detection (`[loops]`; `SPEC E`): a call that would repeat a pattern
//! of calls whose outcomes do not change is refused `no-progress`.
//!
//! The session remembers its last calls in a [`Window`] (the engine pushes
//! each call it lets through; the front-end reports each call's outcome
//! with [`report`](super::report_outcome)). Before a call is let through,
//! [`detect`] looks for three patterns, each with its threshold, counting
//! the proposed call itself:
//!
//! * **`same_outcome = N`**: the `N`-th call of the same tool with the same
//!   arguments is refused when the `N − 1` before it all returned the same
//!   result and nothing new was seen between them. Other calls may come
//!   between only if each repeats an earlier call with its earlier result
//!   (polling with the same `sleep`); a call that returned something not
//!   seen before in the window (an edit, a new command, a changed result)
//!   starts the count again, as does a changed result of the call itself.
//! * **`same_error = N`**: the same, when that result is an error: a failing
//!   command is usually worth fewer tries.
//! * **`ping_pong_cycles = N`**: two or three different calls taken in turn
//!   (`A B A B …`, `A B C A B C …`), each returning what it returned the
//!   time before, refused at the call that would make `N` whole cycles. A
//!   different call in between, or a changed result, breaks the cycle.
//!
//! A call whose outcome is not known yet (still running) is never matched:
//! no pattern is assumed over a result not seen.
//!
//! A fourth pattern is of the model's answers, not of calls, for a
//! front-end that sees the model's text: **`same_answer = N`** refuses the
//! model call after `N` identical text answers in a row ([`Answers`]).

use core::fmt;

mod answers;
mod history;
mod record;
pub use answers::Answers;
pub use history::{completed, Made};
pub use record::{WindowRecordError, WINDOW_RECORD_VERSION};

use crate::tools::ToolName;
use crate::turn::CallFingerprint;

/// How many calls a session's window remembers.
pub const LOOP_WINDOW: usize = 32;

/// What a call returned, as loop detection compares it: a digest of its
/// content and whether it was an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Outcome {
    /// 64-bit FNV-1a of the result's content as the front-end sees it.
    pub digest: u64,
    /// Whether the call failed (`is_error`, a failed exit).
    pub error: bool,
}

impl Outcome {
    /// The outcome of a result whose content is `content`.
    pub fn of(content: &[u8], error: bool) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in content {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self {
            digest: hash,
            error,
        }
    }
}

/// One call in the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The fingerprint of the tool and its canonical arguments.
    pub call: CallFingerprint,
    /// The tool, for the refusal's sentence.
    pub name: ToolName,
    /// Its outcome, once reported.
    pub outcome: Option<Outcome>,
}

/// A session's last `N` calls, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window<const N: usize = LOOP_WINDOW> {
    steps: heapless::Vec<Step, N>,
}

impl<const N: usize> Window<N> {
    /// No calls yet.
    pub const fn new() -> Self {
        Self {
            steps: heapless::Vec::new(),
        }
    }

    /// The calls remembered, oldest first.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Remembers a call let through; the oldest is forgotten when full.
    pub fn push(&mut self, call: CallFingerprint, name: ToolName) {
        if self.steps.is_full() && !self.steps.is_empty() {
            self.steps.remove(0);
        }
        let _ = self.steps.push(Step {
            call,
            name,
            outcome: None,
        });
    }

    /// Forgets the latest call `call` that has no outcome: it did not run
    /// after all (given back, its approval refused), and a step that never
    /// gets an outcome would hide the patterns around it. `false` when
    /// there is no such call.
    pub fn forget(&mut self, call: CallFingerprint) -> bool {
        let found = self
            .steps
            .iter()
            .rposition(|s| s.call == call && s.outcome.is_none());
        match found {
            Some(at) => {
                self.steps.remove(at);
                true
            }
            None => false,
        }
    }

    /// Swaps this window with `other`: a front-end that keeps one window
    /// per agent (a session's sub-agents call in parallel, each its own
    /// loop) swaps the agent's in before deciding its calls.
    pub fn swap(&mut self, other: &mut Self) {
        core::mem::swap(self, other);
    }

    /// Sets the outcome of the latest call `call` that has none; `false`
    /// when there is no such call (forgotten, or reported already).
    pub fn report(&mut self, call: CallFingerprint, outcome: Outcome) -> bool {
        match self
            .steps
            .iter_mut()
            .rev()
            .find(|s| s.call == call && s.outcome.is_none())
        {
            Some(step) => {
                step.outcome = Some(outcome);
                true
            }
            None => false,
        }
    }
}

/// The thresholds of `[loops]`; a pattern without one is not looked for
/// (the budget file gives every pattern a threshold: a key it leaves out
/// takes the recommended one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoopRules {
    /// Calls of the same tool and arguments returning the same result, this
    /// one included.
    pub same_outcome: Option<u16>,
    /// The same, when the result is an error.
    pub same_error: Option<u16>,
    /// Whole cycles of two or three calls taken in turn with unchanged
    /// results, this call's cycle included.
    pub ping_pong_cycles: Option<u16>,
    /// The same text answer given this many times in a row, with no tool
    /// call between ([`Answers`]; where the front-end sees the model's
    /// text).
    pub same_answer: Option<u16>,
}

impl LoopRules {
    /// No pattern looked for (no `[loops]` table).
    pub const OFF: Self = Self {
        same_outcome: None,
        same_error: None,
        ping_pong_cycles: None,
        same_answer: None,
    };

    /// Whether any pattern is looked for.
    pub const fn is_on(&self) -> bool {
        self.same_outcome.is_some()
            || self.same_error.is_some()
            || self.ping_pong_cycles.is_some()
            || self.same_answer.is_some()
    }
}

/// Which pattern a call would complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Pattern {
    /// `same_outcome`.
    SameOutcome,
    /// `same_error`.
    SameError,
    /// `ping_pong_cycles`, of this many different calls (2 or 3).
    PingPong(u8),
    /// `same_answer`: the model's text answers, not a call.
    SameAnswer,
}

impl Pattern {
    /// The threshold's key in `[loops]`.
    pub const fn key(self) -> &'static str {
        match self {
            Self::SameOutcome => "same_outcome",
            Self::SameError => "same_error",
            Self::PingPong(_) => "ping_pong_cycles",
            Self::SameAnswer => "same_answer",
        }
    }
}

/// A tool's name kept by value in a refusal (which is `Copy`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NameCopy {
    bytes: [u8; 64],
    len: u8,
}

impl NameCopy {
    const EMPTY: Self = Self {
        bytes: [0; 64],
        len: 0,
    };

    /// `name`, its first 64 bytes (a tool name is at most 64).
    pub fn new(name: &str) -> Self {
        let mut out = Self::EMPTY;
        // Tool names are ASCII of at most 64 bytes (`ToolName`).
        for (slot, b) in out.bytes.iter_mut().zip(name.bytes()) {
            *slot = b;
            out.len += 1;
        }
        out
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.bytes
            .get(..usize::from(self.len))
            .and_then(|b| core::str::from_utf8(b).ok())
            .unwrap_or("")
    }
}

impl fmt::Debug for NameCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A pattern the proposed call would complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoProgress {
    /// Which.
    pub pattern: Pattern,
    /// Calls (or, for a cycle, whole cycles), this one included.
    pub times: u16,
    /// The threshold.
    pub max: u16,
    /// For a cycle: the other calls' tools, in the order they come after
    /// this one.
    pub others: [Option<NameCopy>; 2],
}

/// Whether the call at `at` told the agent something new: its result is not
/// known yet, or no earlier call in `steps` is the same call with the same
/// result.
fn news(steps: &[Step], at: usize) -> bool {
    let Some(step) = steps.get(at) else {
        return true;
    };
    step.outcome.is_none()
        || !steps
            .get(..at)
            .unwrap_or_default()
            .iter()
            .any(|s| s.call == step.call && s.outcome == step.outcome)
}

/// The pattern, if any, that call `next` would complete after `steps`
/// (oldest first) under `rules`.
pub fn detect(steps: &[Step], rules: &LoopRules, next: CallFingerprint) -> Option<NoProgress> {
    same_call(steps, rules, next).or_else(|| cycle(steps, rules, next))
}

fn same_call(steps: &[Step], rules: &LoopRules, next: CallFingerprint) -> Option<NoProgress> {
    let mut first = None;
    let mut run: u16 = 0;
    for (at, step) in steps.iter().enumerate().rev() {
        if step.call == next {
            let Some(outcome) = step.outcome else {
                // The latest copy's result not seen yet: nothing is
                // assumed. An older copy's never came (it did not run):
                // the run is what came after it.
                first?;
                break;
            };
            match first {
                None => first = Some(outcome),
                Some(f) if f != outcome => break,
                Some(_) => {}
            }
            run = run.saturating_add(1);
        } else if news(steps, at) {
            // Something new was seen since: the agent may be making
            // progress (an edit between two runs of the same test).
            break;
        }
    }
    let first = first?;
    let times = run.saturating_add(1);
    let (pattern, max) = match (first.error, rules.same_error, rules.same_outcome) {
        (true, Some(max), _) if times >= max => (Pattern::SameError, max),
        (_, _, Some(max)) if times >= max => (Pattern::SameOutcome, max),
        _ => return None,
    };
    Some(NoProgress {
        pattern,
        times,
        max,
        others: [None, None],
    })
}

fn cycle(steps: &[Step], rules: &LoopRules, next: CallFingerprint) -> Option<NoProgress> {
    let max = rules.ping_pong_cycles?;
    // The sequence is `steps` then `next`; position `len` is `next`.
    let len = steps.len();
    let call_at = |i: usize| {
        if i == len {
            Some(next)
        } else {
            steps.get(i).map(|s| s.call)
        }
    };
    for period in [2usize, 3] {
        if len + 1 < 2 * period {
            continue;
        }
        // The period's calls are not all one call (that is same_outcome).
        let distinct = (0..period).any(|k| call_at(len - k) != call_at(len - k - 1));
        if !distinct {
            continue;
        }
        // How far back the sequence repeats itself with period `period`,
        // each call returning what it returned the cycle before.
        let mut matched = 0usize;
        let mut i = len;
        while i >= period {
            let Some(before) = steps.get(i - period) else {
                break;
            };
            let same_result = match before.outcome {
                None => false,
                Some(o) => i == len || steps.get(i).and_then(|s| s.outcome) == Some(o),
            };
            if call_at(i) != Some(before.call) || !same_result {
                break;
            }
            matched += 1;
            i -= 1;
        }
        let cycles = u16::try_from((matched + period) / period).unwrap_or(u16::MAX);
        if matched >= period && cycles >= max {
            let mut others = [None, None];
            for (k, slot) in others.iter_mut().enumerate().take(period - 1) {
                // The calls after `next` in its cycle.
                *slot = steps
                    .get(len + 1 + k - period)
                    .map(|s| NameCopy::new(s.name.as_str()));
            }
            return Some(NoProgress {
                pattern: Pattern::PingPong(period as u8),
                times: cycles,
                max,
                others,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests;
