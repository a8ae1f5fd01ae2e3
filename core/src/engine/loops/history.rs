//! Loop detection over a history of calls already made, for a front-end
//! that sees calls only after they ran: the model proxy reads them, with
//! their results, from the messages of each model request. [`completed`]
//! replays the history through a [`Window`] as the engine would have met it
//! live — each turn's calls pushed before any of their results is known,
//! then the results — and answers the first pattern that one of the
//! latest turn's calls completed. Such a front-end cannot refuse that call
//! any more (it ran); it refuses the model call that would follow it.

use super::{detect, LoopRules, NoProgress, Outcome, Window, LOOP_WINDOW};
use crate::tools::ToolName;
use crate::turn::CallFingerprint;

/// One call of a history, as the front-end read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// The fingerprint of its tool and canonical arguments.
    pub call: CallFingerprint,
    /// Its tool.
    pub name: ToolName,
    /// What it returned, if the history has its result.
    pub outcome: Option<Outcome>,
    /// The model response (turn) that made it; a history's turns come in
    /// order, the calls of one turn next to each other.
    pub turn: u32,
}

/// The first pattern under `rules` that a call of turn `latest` completed
/// and kept, with that call's tool, replaying `history` (oldest first; a
/// call of a turn after `latest` is not looked at): the call would have
/// been refused before it ran ([`detect`]), and what it returned was no
/// news either (the same result as its copies before). A latest call whose
/// result was new made progress after all, and counts for nothing here.
/// `None`: no such call, or no pattern is looked for.
pub fn completed(
    history: &[Made],
    rules: &LoopRules,
    latest: u32,
) -> Option<(NoProgress, ToolName)> {
    if !rules.is_on() {
        return None;
    }
    let mut window: Window = Window::new();
    let mut rest = history;
    while let Some(first) = rest.first() {
        let turn = first.turn;
        if turn > latest {
            break;
        }
        let len = rest.iter().take_while(|m| m.turn == turn).count();
        let (calls, after) = rest.split_at(len);
        // Decided as live: every call of a response before any result.
        // The latest turn's calls that would have been refused (as many as
        // a window holds; a turn of more calls is looked at that far).
        let mut found: heapless::Vec<(NoProgress, &Made), LOOP_WINDOW> = heapless::Vec::new();
        for made in calls {
            if turn == latest {
                if let Some(pattern) = detect(window.steps(), rules, made.call) {
                    let _ = found.push((pattern, made));
                }
            }
            window.push(made.call, made.name.clone());
        }
        // Only the calls still in the window: the result of one pushed out
        // already (a turn of more calls than the window holds) would be
        // given to a later copy of the same call.
        let gone = calls.len().saturating_sub(LOOP_WINDOW);
        for made in calls.iter().skip(gone) {
            if let Some(outcome) = made.outcome {
                window.report(made.call, outcome);
            }
        }
        if turn == latest {
            let steps = window.steps();
            return found.into_iter().find_map(|(pattern, made)| {
                let kept = steps
                    .iter()
                    .rposition(|s| s.call == made.call)
                    .is_some_and(|at| !super::news(steps, at));
                kept.then(|| (pattern, made.name.clone()))
            });
        }
        rest = after;
    }
    None
}
