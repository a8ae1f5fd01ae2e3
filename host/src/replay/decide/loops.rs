//! `[loops]` in replay's walk: each sub-agent's loop window swapped into
//! the gate for its calls, each agent's run of text answers
//! (`same_answer`), and the first stop for no progress the report names.

use budgetgate_core::engine::loops::{Answers, NoProgress};

use super::super::report::LoopStop;
use super::super::session::{RecordedCall, UsageGranularity};
use super::Walk;

impl Walk<'_, '_> {
    /// Swaps the loop window of sub-agent `agent` (none: the main agent's
    /// stays) with the gate's: before its calls, and back after.
    pub(super) fn swap_window(&mut self, agent: Option<&str>) {
        if let (Some(agent), true) = (agent, self.budget.loops.is_on()) {
            let window = self.agent_windows.entry(agent.to_owned()).or_default();
            self.gate.swap_loop_window(window);
        }
    }

    /// The text answers in a row of `agent` (`None`: the main agent).
    pub(super) fn answers_of(&mut self, agent: Option<&str>) -> &mut Answers {
        match agent {
            None => &mut self.answers,
            Some(a) => self.agent_answers.entry(a.to_owned()).or_default(),
        }
    }

    /// Before the model call of response `index` (of `agent`): under
    /// `same_answer`, the agent gave the same text answer that many times
    /// in a row; the first such model call is kept as the run's first
    /// stop for no progress (the recorded session goes on, as after a
    /// refused call).
    pub(super) fn same_answer(&mut self, index: usize, agent: Option<&str>) {
        let rules = self.budget.loops;
        if let Some(found) = self.answers_of(agent).check(&rules) {
            self.keep_first_stop(index, None, found);
        }
    }

    /// Keeps the gate's refusal of `call` when it is the first for no
    /// progress.
    pub(super) fn note_no_progress(&mut self, index: usize, call: &RecordedCall) {
        let Some(refusal) = self.gate.last_refusal() else {
            return;
        };
        if let budgetgate_core::engine::Why::NoProgress(found) = refusal.why {
            self.keep_first_stop(index, Some(call), found);
        }
    }

    /// The run's first stop for no progress: at response `index`, of
    /// `call` (`None`: its model call), with the engine's sentence.
    fn keep_first_stop(&mut self, index: usize, call: Option<&RecordedCall>, found: NoProgress) {
        if self.no_progress.is_some() {
            return;
        }
        self.no_progress = Some(LoopStop {
            turn: index,
            call_id: call.map(|c| c.id.clone()),
            tool: call.map(|c| c.name.clone()),
            pattern: found.pattern.key(),
            detail: found
                .sentence(call.map_or("", |c| c.name.as_str()))
                .to_string(),
            saved_model_calls: 0,
            saved_tokens: matches!(self.session.usage, UsageGranularity::PerTurn).then_some(0),
        });
    }
}
