//! Claude Code session logs and stream-json output: the lines of one
//! response counted once, sub-agents' responses told apart, and, for a long
//! log, the responses no later line can change kept in a temporary file.

use budgetgate_core::engine::loops::Outcome;
use std::collections::{BTreeSet, HashMap};

use budgetgate_core::turn::TokenUsage;
use serde_json::Value;

use super::message::{
    add_blocks, apply_results, collect_results, recorded_input, stop_reason_of, turn_from_message,
    ResultSink,
};
use super::time::parse_rfc3339_ms;
use crate::replay::session::{
    billed_usage, Format, RecordedCall, RecordedTurn, Session, UsageGranularity,
};
use crate::replay::spill::{HashedResults, SpillWriter};
use crate::transcript::claude_line::{ClaudeLine, ClaudeMessage};
use crate::transcript::line::Assistant;
use crate::transcript::{self, OpenResponse};

/// The response later Claude Code lines of one thread may continue, and
/// its index in the turns (the rule is the hook's too: [`transcript`]).
struct Open {
    turn: usize,
    response: OpenResponse,
}

/// Whether a user message holds only `tool_result` blocks answering `calls`.
fn only_results_of(message: Option<&ClaudeMessage>, calls: &[RecordedCall]) -> bool {
    let blocks = transcript::line::result_ids(message);
    // Looked up by id: a response may hold many calls, a user line many
    // results.
    let ids: std::collections::HashSet<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    transcript::only_results_of(blocks, |id| ids.contains(id))
}

/// The turns of each `message.id`, kept by the reader so that a long log is
/// not scanned once per line, without a second copy of the ids: the last
/// turn of each id's hash, and for each turn the one before it of the same
/// hash. A walk compares the turns' ids themselves, so two ids of one hash
/// never mix.
#[derive(Default)]
struct TurnsById<S = std::hash::RandomState> {
    hasher: S,
    /// The id's hash to its last turn.
    last: HashMap<u64, usize>,
    /// For each turn, in order, the one before it whose id has its hash.
    before: Vec<Option<usize>>,
}

impl<S: std::hash::BuildHasher> TurnsById<S> {
    /// The turns whose `message.id` is `id`, the latest first; `is_id` tells
    /// whether a turn's id is `id` (the turn may be in a temporary file).
    fn of(
        &self,
        id: &str,
        mut is_id: impl FnMut(usize) -> Result<bool, String>,
    ) -> Result<Vec<usize>, String> {
        let mut next = self.last.get(&self.hasher.hash_one(id)).copied();
        let mut found = Vec::new();
        while let Some(at) = next {
            next = self.before.get(at).copied().flatten();
            if is_id(at)? {
                found.push(at);
            }
        }
        Ok(found)
    }

    /// Adds the next turn, whose `message.id` is `id`.
    fn push(&mut self, id: &str) {
        let turn = self.before.len();
        self.before
            .push(self.last.insert(self.hasher.hash_one(id), turn));
    }
}

/// `calls` without the blocks that are an earlier line's block logged again:
/// the same call id, name and input in a response of the same `message.id`
/// (Claude Code writes one response over several lines and may repeat a
/// block). Such a repeat is one call, not a reuse of its id; a block that
/// reuses an id with another name or input is kept, and the gate refuses it.
/// Returns the calls kept and how many were dropped.
/// `same_id` gives the indices of the turns of that `message.id`.
fn drop_logged_again(
    turns: &ReadTurns,
    same_id: &[usize],
    calls: Vec<RecordedCall>,
) -> Result<(Vec<RecordedCall>, usize), String> {
    let earlier_turns = same_id
        .iter()
        .map(|&at| turns.calls_of(at))
        .collect::<Result<Vec<_>, _>>()?;
    // The calls seen, by id (a response may hold many: compared only with
    // the calls of its id).
    let mut seen: HashMap<&str, Vec<&RecordedCall>> = HashMap::new();
    for c in earlier_turns.iter().flat_map(|c| c.iter()) {
        seen.entry(c.id.as_str()).or_default().push(c);
    }
    let mut kept: Vec<RecordedCall> = Vec::with_capacity(calls.len());
    let mut kept_ids: HashMap<String, Vec<usize>> = HashMap::new();
    let mut dropped = 0;
    for call in calls {
        let same = |c: &RecordedCall| {
            c.id == call.id && c.name == call.name && c.arguments.same_value(&call.arguments)
        };
        let before = seen
            .get(call.id.as_str())
            .is_some_and(|cs| cs.iter().any(|c| same(c)));
        let here = kept_ids
            .get(&call.id)
            .is_some_and(|at| at.iter().any(|&i| same(&kept[i])));
        if before || here {
            dropped += 1;
        } else {
            kept_ids
                .entry(call.id.clone())
                .or_default()
                .push(kept.len());
            kept.push(call);
        }
    }
    Ok((kept, dropped))
}

/// The results of a Claude Code log's calls: by id, or, for a long log
/// whose responses go to a temporary file, by the ids' hashes.
enum ResultIds {
    Exact(HashMap<String, Outcome>),
    Hashed(HashedResults),
}

impl ResultSink for ResultIds {
    fn record(&mut self, id: &str, outcome: Outcome) {
        match self {
            Self::Exact(map) => map.record(id, outcome),
            Self::Hashed(hashed) => hashed.insert(id, outcome),
        }
    }
}

/// The turns a Claude Code reader has made: all in memory, or, for a long
/// log (`spill`), each written to a temporary file once no later line can
/// change it (it is no thread's open response), so that only the open ones
/// are held (issue 14, memory).
struct ReadTurns {
    spill: Option<SpillWriter>,
    /// The turns after the spilled ones.
    held: Vec<RecordedTurn>,
    /// The first time a turn was requested at (absolute).
    origin: Option<u64>,
    /// Of the spilled turns: how many are a sub-agent's, how many have no
    /// stop reason.
    spilled_agents: usize,
    spilled_inferred: usize,
}

impl ReadTurns {
    /// With `spill`, a temporary file for the closed turns; where none can
    /// be made (no writable temporary directory), every turn is held, as
    /// before there was one.
    fn new(spill: bool) -> Self {
        Self {
            spill: if spill { SpillWriter::new().ok() } else { None },
            held: Vec::new(),
            origin: None,
            spilled_agents: 0,
            spilled_inferred: 0,
        }
    }

    fn first_held(&self) -> usize {
        self.spill.as_ref().map_or(0, SpillWriter::len)
    }

    fn len(&self) -> usize {
        self.first_held() + self.held.len()
    }

    fn push(&mut self, turn: RecordedTurn) {
        if self.origin.is_none() {
            self.origin = turn.requested_at_ms;
        }
        self.held.push(turn);
    }

    /// A held turn (an open response is always held).
    fn held(&self, at: usize) -> &RecordedTurn {
        &self.held[at - self.first_held()]
    }

    fn held_mut(&mut self, at: usize) -> &mut RecordedTurn {
        let first = self.first_held();
        &mut self.held[at - first]
    }

    fn message_id_is(&self, at: usize, id: &str) -> Result<bool, String> {
        match at.checked_sub(self.first_held()) {
            Some(held) => Ok(self
                .held
                .get(held)
                .is_some_and(|t| t.message_id.as_deref() == Some(id))),
            None => self
                .read_back(at)
                .map(|t| t.message_id.as_deref() == Some(id)),
        }
    }

    fn calls_of(&self, at: usize) -> Result<std::borrow::Cow<'_, [RecordedCall]>, String> {
        match at.checked_sub(self.first_held()) {
            Some(held) => Ok(self
                .held
                .get(held)
                .map_or(&[][..], |t| t.calls.as_slice())
                .into()),
            None => self.read_back(at).map(|t| t.calls.into()),
        }
    }

    fn read_back(&self, at: usize) -> Result<RecordedTurn, String> {
        match &self.spill {
            Some(spill) => spill.get(at).map_err(spill_error),
            None => Err(format!("internal: turn {at} is neither held nor spilled")),
        }
    }

    /// Spills the held turns before `first_open`, the first turn later
    /// lines may still change (all of them when `None`); nothing when not
    /// spilling.
    fn spill_closed(&mut self, first_open: Option<usize>) -> Result<(), String> {
        let first = self.first_held();
        let Some(spill) = &mut self.spill else {
            return Ok(());
        };
        let until = first_open.unwrap_or(first + self.held.len());
        let closed = until.saturating_sub(first).min(self.held.len());
        for turn in self.held.drain(..closed) {
            self.spilled_agents += usize::from(turn.agent.is_some());
            self.spilled_inferred += usize::from(turn.stop_reason.is_none());
            spill.push(&turn).map_err(spill_error)?;
        }
        Ok(())
    }
}

pub(super) fn spill_error(e: std::io::Error) -> String {
    format!("cannot keep the responses in a temporary file: {e}")
}

/// Reads a Claude Code log or stream-json output; with `spill`, the
/// responses no later line can change go to a temporary file as they are
/// read ([`Session::spilled`]).
pub(super) fn read_claude_code(
    lines: impl IntoIterator<Item = Result<(usize, Box<ClaudeLine>), String>>,
    format: Format,
    spill: bool,
) -> Result<Session, String> {
    let stream_json = format == Format::ClaudeCodeStreamJson;
    let mut turns = ReadTurns::new(spill);
    let spill = turns.spill.is_some();
    // When spilling, the turns of `opens`, in order: the first is where the
    // spilled turns end (kept apart so that many threads cost no walk).
    let mut open_turns: BTreeSet<usize> = BTreeSet::new();
    // The response each thread may continue: the main agent (`None`) and,
    // in stream-json output, each sub-agent by its `parent_tool_use_id`
    // (parallel sub-agents' lines interleave).
    let mut opens: HashMap<Option<String>, Open> = HashMap::new();
    let mut result_notes = Vec::new();
    // The turns of each `message.id`; an id met again in a new turn is one
    // split in several.
    let mut by_message: TurnsById = TurnsById::default();
    // How many responses reuse an earlier one's id, and the first such id.
    let (mut split_count, mut split_first) = (0usize, None::<String>);
    let mut results = if spill {
        ResultIds::Hashed(HashedResults::default())
    } else {
        ResultIds::Exact(HashMap::new())
    };
    let mut start: Option<u64> = None;
    let mut last_time: Option<u64> = None;
    let mut synthetic = 0usize;
    let mut skipped = 0usize;
    let mut bad_times = 0usize;
    let mut repeated_blocks = 0usize;
    let mut lines_read = 0usize;
    for item in lines {
        let (line_no, line) = item?;
        let message = line.message.as_ref();
        let (line_no, line) = (&line_no, &line);
        lines_read += 1;
        let time = match line.get("timestamp") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let time = value.as_str().and_then(parse_rfc3339_ms);
                if time.is_none() {
                    bad_times += 1;
                }
                time
            }
        };
        if start.is_none() {
            start = time;
        }
        let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
        let thread: Option<String> = if stream_json {
            line.get("parent_tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        } else {
            None
        };
        match kind {
            "assistant" => {
                let request_key = if stream_json {
                    "request_id"
                } else {
                    "requestId"
                };
                let (message, id, request_id) = match transcript::line::assistant(line, request_key)
                    .map_err(|e| format!("line {line_no}: {e}"))?
                {
                    Assistant::NoMessage => {
                        skipped += 1;
                        continue;
                    }
                    Assistant::Synthetic => {
                        synthetic += 1;
                        continue;
                    }
                    Assistant::Response {
                        message,
                        id,
                        request_id,
                    } => (message, id, request_id),
                };
                let (usage, iterations) = match message.get("usage") {
                    None | Some(Value::Null) => (TokenUsage::ZERO, Vec::new()),
                    Some(u) => billed_usage(u).map_err(|e| format!("line {line_no}: {e}"))?,
                };
                let continued = opens
                    .get(&thread)
                    .filter(|o| o.response.continued_by(id, request_id))
                    .map(|o| o.turn);
                let response = continued.unwrap_or(turns.len());
                let context = |e: String| format!("line {line_no} (response {response}): {e}");
                match continued {
                    Some(index) => {
                        // A later line of the same response: same usage,
                        // repeated (output_tokens may grow): keep the largest.
                        let turn = turns.held_mut(index);
                        let old = turn.usage.unwrap_or(TokenUsage::ZERO);
                        turn.usage = Some(TokenUsage {
                            input_tokens: old.input_tokens.max(usage.input_tokens),
                            output_tokens: old.output_tokens.max(usage.output_tokens),
                            cache_read_input_tokens: old
                                .cache_read_input_tokens
                                .max(usage.cache_read_input_tokens),
                            cache_creation_input_tokens: old
                                .cache_creation_input_tokens
                                .max(usage.cache_creation_input_tokens),
                        });
                        if turn.iterations.len() < iterations.len() {
                            turn.iterations = iterations;
                        }
                        if let Some(reason) = stop_reason_of(message).map_err(context)? {
                            turn.stop_reason = Some(reason);
                        }
                        let before = turn.calls.len();
                        add_blocks(turn, message.get("content"), recorded_input)
                            .map_err(context)?;
                        let added = turn.calls.split_off(before);
                        let same_id = by_message.of(id, |at| turns.message_id_is(at, id))?;
                        let kept = drop_logged_again(&turns, &same_id, added)?;
                        repeated_blocks += kept.1;
                        // Held to the end: no room to spare (pushing a
                        // call left room for four).
                        let calls = &mut turns.held_mut(index).calls;
                        calls.extend(kept.0);
                        calls.shrink_to_fit();
                    }
                    None => {
                        let mut turn =
                            turn_from_message(message, recorded_input).map_err(context)?;
                        let calls = std::mem::take(&mut turn.calls);
                        let same_id = by_message.of(id, |at| turns.message_id_is(at, id))?;
                        let kept = drop_logged_again(&turns, &same_id, calls)?;
                        repeated_blocks += kept.1;
                        turn.calls = kept.0;
                        turn.usage = Some(usage);
                        turn.iterations = iterations;
                        // Absolute for now; counted from the first model
                        // call once every response is read.
                        turn.requested_at_ms = last_time;
                        if !same_id.is_empty() {
                            split_count += 1;
                            split_first.get_or_insert_with(|| id.to_owned());
                        }
                        by_message.push(id);
                        turn.agent = thread.as_ref().map(|t| format!("Task {t}"));
                        let closed = opens.insert(
                            thread.clone(),
                            Open {
                                turn: turns.len(),
                                response: OpenResponse::new(id, request_id, stream_json),
                            },
                        );
                        if spill {
                            if let Some(closed) = closed {
                                open_turns.remove(&closed.turn);
                            }
                            open_turns.insert(turns.len());
                        }
                        turns.push(turn);
                        turns.spill_closed(open_turns.first().copied())?;
                    }
                }
            }
            "user" => {
                if let Some(message) = message {
                    collect_results(message.get("content"), &mut results);
                }
                if let Some(o) = opens.get_mut(&thread) {
                    let only_results = only_results_of(message, &turns.held(o.turn).calls);
                    o.response.user_line(only_results);
                }
            }
            "result" if stream_json => {
                // The run's own summary: shown, not counted (the responses
                // are counted one by one).
                let turns_said = line.get("num_turns").and_then(Value::as_u64);
                let cost = line.get("total_cost_usd").and_then(Value::as_f64);
                result_notes.push(format!(
                    "line {line_no}: result line ({}{}): a summary, not counted",
                    turns_said.map_or("num_turns not given".into(), |n| format!("num_turns {n}")),
                    cost.map_or(String::new(), |c| format!(", total_cost_usd {c}"))
                ));
            }
            _ => {}
        }
        if time.is_some() {
            last_time = time;
        }
    }
    if turns.len() == 0 {
        return Err("a Claude Code log with no assistant responses".into());
    }
    let count = turns.len();
    let ReadTurns {
        spill,
        held: mut turns,
        origin,
        spilled_agents,
        spilled_inferred,
    } = turns;
    // The clock starts at the first model call, not at the first
    // timestamped line (a startup hook, copied context, a summary).
    if let Some(origin) = origin {
        for turn in &mut turns {
            turn.requested_at_ms = turn.requested_at_ms.map(|t| t.saturating_sub(origin));
        }
    }
    let spilled = match results {
        ResultIds::Exact(results) => {
            apply_results(&mut turns, &results);
            None
        }
        ResultIds::Hashed(mut results) => {
            results.finish();
            for call in turns.iter_mut().flat_map(|t| t.calls.iter_mut()) {
                call.recorded = results.get(&call.id);
            }
            match spill {
                Some(spill) => Some(std::sync::Arc::new(
                    spill.finish(results, origin).map_err(spill_error)?,
                )),
                None => None,
            }
        }
    };
    let mut notes = vec![if stream_json {
        format!(
            "{lines_read} lines; {count} responses (lines of one response share message.id, with its tool results between them; counted once)"
        )
    } else {
        format!(
            "{lines_read} lines; {count} responses (lines of one response, sharing message.id and requestId, counted once)"
        )
    }];
    notes.extend(result_notes);
    let agents = spilled_agents + turns.iter().filter(|t| t.agent.is_some()).count();
    if agents > 0 {
        notes.push(format!(
            "{agents} responses are sub-agents' (parent_tool_use_id set): counted in the total"
        ));
    }
    if let Some(first) = split_first {
        notes.push(format!(
            "{split_count} response(s) reuse the message.id of an earlier response (another requestId, or a user message between them), e.g. {first}: each counted as its own model call"
        ));
    }
    let inferred = spilled_inferred + turns.iter().filter(|t| t.stop_reason.is_none()).count();
    if inferred > 0 {
        notes.push(format!(
            "stop_reason is null on {inferred} of {count} responses: inferred from the blocks (a tool_use block makes a tool_use turn, else end_turn)"
        ));
    }
    if synthetic > 0 {
        notes.push(format!(
            "{synthetic} synthetic assistant lines (no model call) skipped"
        ));
    }
    if repeated_blocks > 0 {
        notes.push(format!(
            "{repeated_blocks} tool_use block(s) logged again on a later line of the same message.id (same id, name and input): read once, not as a reused call id"
        ));
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} assistant lines without a message skipped"
        ));
    }
    if bad_times > 0 {
        notes.push(format!(
            "{bad_times} lines have a timestamp that cannot be read (RFC 3339 expected): their time is not used"
        ));
    }
    if start.is_none() {
        notes.push("no timestamps: the time limit is not checked".into());
    }
    Ok(Session {
        spilled,
        format,
        turns,
        usage: UsageGranularity::PerTurn,
        declared_tools: None,
        ends_complete: false,
        notes,
        time_origin_ms: origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 14 (memory): the reader finds the turns of a `message.id` from
    /// their ids' hashes without a second copy of the ids, and two ids of
    /// one hash never mix: with a hasher under which every id collides, each
    /// id still gives exactly its own turns, the latest first.
    #[test]
    fn turns_by_id_never_mix_two_ids_of_one_hash() {
        #[derive(Default)]
        struct Colliding;
        impl std::hash::BuildHasher for Colliding {
            type Hasher = Constant;
            fn build_hasher(&self) -> Constant {
                Constant
            }
        }
        struct Constant;
        impl std::hash::Hasher for Constant {
            fn finish(&self) -> u64 {
                7
            }
            fn write(&mut self, _: &[u8]) {}
        }
        let ids = ["msg_a", "msg_b", "msg_a", "msg_c", "msg_b", "msg_a"];
        let mut by_id = TurnsById::<Colliding>::default();
        // Held, and spilled to a temporary file after each turn.
        for spill in [false, true] {
            let mut turns = ReadTurns::new(spill);
            for id in ids {
                assert_eq!(
                    !by_id
                        .of(id, |at| turns.message_id_is(at, id))
                        .unwrap()
                        .is_empty(),
                    ids[..turns.len()].contains(&id)
                );
                if !spill {
                    by_id.push(id);
                }
                turns.push(RecordedTurn {
                    message_id: Some(id.to_owned()),
                    ..RecordedTurn::default()
                });
                turns.spill_closed(None).unwrap();
            }
            assert_eq!(turns.first_held(), if spill { ids.len() } else { 0 });
            let of = |id: &str| by_id.of(id, |at| turns.message_id_is(at, id)).unwrap();
            assert_eq!(of("msg_a"), [5, 2, 0]);
            assert_eq!(of("msg_b"), [4, 1]);
            assert_eq!(of("msg_c"), [3]);
            assert_eq!(of("msg_d"), [] as [usize; 0]);
            // With the real hasher too.
            let mut real: TurnsById = TurnsById::default();
            for id in ids {
                real.push(id);
            }
            assert_eq!(
                real.of("msg_a", |at| turns.message_id_is(at, "msg_a"))
                    .unwrap(),
                [5, 2, 0]
            );
        }
    }
}
