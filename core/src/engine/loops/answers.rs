//! `same_answer`: the model giving the same text answer again and again,
//! with no tool call between (an agent re-prompted to go on, answering
//! what it answered before). Only a front-end that sees the model's text
//! looks for it: the model proxy (the answers in each request's messages)
//! and replay (each recorded response's text).
//!
//! Unlike the call patterns, the count is of answers already given: a model
//! call cannot be judged by an answer it has not given yet. With
//! `same_answer = 3`, the model call after the third identical answer in a
//! row is refused.

use super::{LoopRules, NoProgress, Pattern};

/// The model's latest run of identical text answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Answers {
    /// The digest of the latest answer, if the latest response was one.
    last: Option<u64>,
    /// How many times in a row it has been given.
    times: u16,
}

impl Answers {
    /// No answer yet.
    pub const fn new() -> Self {
        Self {
            last: None,
            times: 0,
        }
    }

    /// Records a model response: `Some` digest of its text when it made no
    /// tool call (an answer), `None` when it made one (a tool call ends the
    /// run of answers).
    pub fn record(&mut self, answer: Option<u64>) {
        match answer {
            Some(digest) if self.last == Some(digest) => {
                self.times = self.times.saturating_add(1);
            }
            Some(digest) => {
                self.last = Some(digest);
                self.times = 1;
            }
            None => *self = Self::new(),
        }
    }

    /// Before a model call: the pattern the answers so far complete, when
    /// the latest one has been given `same_answer` times in a row.
    pub fn check(&self, rules: &LoopRules) -> Option<NoProgress> {
        let max = rules.same_answer?;
        (self.times >= max).then_some(NoProgress {
            pattern: Pattern::SameAnswer,
            times: self.times,
            max,
            others: [None, None],
        })
    }
}
