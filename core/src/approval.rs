//! The one approval state machine (`SPEC C`; issue 11): an [`Answer`] from
//! whoever decides (a person at a prompt, a policy, a debounced key, an MCP
//! client's elicitation), and a [`Question`] that waits for it until a
//! deadline and turns it into a [`Decision`].
//!
//! Every front-end asks through these types: the turn gate's
//! [`crate::turn::Approver`] answers with an [`Answer`], the device gate
//! keeps a [`Question`] for its pending call, and the MCP gateway one per
//! `elicitation/create` or terminal question. The rules live here alone:
//!
//! * an approval or a "later" at or after the deadline is
//!   [`Decision::TimedOut`]: **a late approval never runs its call**, even
//!   when it is read before the clock's tick that would have refused it;
//! * a refusal is [`Decision::Refused`] whenever it comes;
//! * [`Answer::Later`] before the deadline decides nothing: the question
//!   goes on.
//!
//! Times are milliseconds on the front-end's own clock (sans-IO: the core
//! reads none). The deadline saturates at `u64::MAX`.
//!
//! ```
//! use budgetgate_core::approval::{Answer, Decision, Question};
//!
//! let question = Question::asked(1_000, 30_000); // asked at 1 s, 30 s to answer
//! assert_eq!(question.answer(Answer::Later, 5_000), None);
//! assert_eq!(question.answer(Answer::Approve, 30_999), Some(Decision::Approved));
//! assert_eq!(question.answer(Answer::Approve, 31_000), Some(Decision::TimedOut));
//! assert_eq!(question.answer(Answer::Refuse, 90_000), Some(Decision::Refused));
//! assert_eq!(question.expired(31_000), Some(Decision::TimedOut));
//! ```

/// An answer to an approval question (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Answer {
    /// Yes: run it.
    Approve,
    /// No: the call is refused `approval-refused` (on the device link,
    /// `approval-denied`).
    Refuse,
    /// No answer yet (a person is being asked, a key awaits): the question
    /// goes on until its deadline.
    Later,
}

/// How an approval question ended (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decision {
    /// Approved in time: the call runs.
    Approved,
    /// Refused: the call is answered with the refusal and never runs.
    Refused,
    /// No approval came before the deadline: a refusal too.
    TimedOut,
}

impl Decision {
    /// Whether the call runs (only [`Decision::Approved`]).
    #[must_use]
    pub const fn runs(self) -> bool {
        matches!(self, Self::Approved)
    }
}

/// An approval question waiting for its [`Answer`] until a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Question {
    deadline_ms: u64,
}

impl Question {
    /// A question asked at `now_ms` that waits `timeout_ms` for its answer
    /// (a timeout of 0 times out at once).
    #[must_use]
    pub const fn asked(now_ms: u64, timeout_ms: u64) -> Self {
        Self {
            deadline_ms: now_ms.saturating_add(timeout_ms),
        }
    }

    /// The first instant at which the question has timed out.
    #[must_use]
    pub const fn deadline_ms(self) -> u64 {
        self.deadline_ms
    }

    /// The answer `answer`, given at `now_ms`: `None` for [`Answer::Later`]
    /// before the deadline (still asked), otherwise how the question ended.
    #[must_use]
    pub const fn answer(self, answer: Answer, now_ms: u64) -> Option<Decision> {
        match answer {
            Answer::Refuse => Some(Decision::Refused),
            Answer::Approve | Answer::Later if now_ms >= self.deadline_ms => {
                Some(Decision::TimedOut)
            }
            Answer::Approve => Some(Decision::Approved),
            Answer::Later => None,
        }
    }

    /// The clock at `now_ms`: [`Decision::TimedOut`] once the deadline has
    /// come, `None` while the question is still asked.
    #[must_use]
    pub const fn expired(self, now_ms: u64) -> Option<Decision> {
        self.answer(Answer::Later, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC C: an approval one millisecond before the deadline runs the
    /// call; at the deadline it is a timeout, and so it is later.
    #[test]
    fn an_approval_runs_only_before_the_deadline() {
        let q = Question::asked(100, 50);
        assert_eq!(q.deadline_ms(), 150);
        assert_eq!(q.answer(Answer::Approve, 100), Some(Decision::Approved));
        assert_eq!(q.answer(Answer::Approve, 149), Some(Decision::Approved));
        assert_eq!(q.answer(Answer::Approve, 150), Some(Decision::TimedOut));
        assert_eq!(
            q.answer(Answer::Approve, u64::MAX),
            Some(Decision::TimedOut)
        );
        assert!(q.answer(Answer::Approve, 149).is_some_and(Decision::runs));
        assert!(!Decision::TimedOut.runs() && !Decision::Refused.runs());
    }

    /// A refusal refuses whenever it comes, and is reported as a refusal,
    /// not as a timeout.
    #[test]
    fn a_refusal_is_a_refusal_before_and_after_the_deadline() {
        let q = Question::asked(0, 10);
        assert_eq!(q.answer(Answer::Refuse, 0), Some(Decision::Refused));
        assert_eq!(q.answer(Answer::Refuse, 10), Some(Decision::Refused));
        assert_eq!(q.answer(Answer::Refuse, 1_000), Some(Decision::Refused));
    }

    /// "Later" keeps the question asked up to the deadline, which then
    /// decides it; the clock alone does the same.
    #[test]
    fn later_waits_until_the_deadline_decides() {
        let q = Question::asked(1_000, 2_000);
        assert_eq!(q.answer(Answer::Later, 2_999), None);
        assert_eq!(q.expired(2_999), None);
        assert_eq!(q.answer(Answer::Later, 3_000), Some(Decision::TimedOut));
        assert_eq!(q.expired(3_000), Some(Decision::TimedOut));
    }

    /// A timeout of 0 has timed out when it is asked; a deadline past the
    /// clock's range saturates instead of wrapping to the past.
    #[test]
    fn deadlines_at_the_edges_of_the_clock() {
        let now = Question::asked(500, 0);
        assert_eq!(now.answer(Answer::Approve, 500), Some(Decision::TimedOut));
        let far = Question::asked(u64::MAX - 1, 10);
        assert_eq!(far.deadline_ms(), u64::MAX);
        assert_eq!(
            far.answer(Answer::Approve, u64::MAX - 1),
            Some(Decision::Approved)
        );
        assert_eq!(far.expired(u64::MAX), Some(Decision::TimedOut));
    }
}
