//! The recorded session every format is read into: one entry per model
//! response, counted once, with its usage, stop reason and tool calls.

use budgetgate_core::engine::loops::Outcome;
use budgetgate_core::turn::{ArgsFingerprint, TokenUsage};
use serde_json::Value;

pub use crate::gate::usage::{billed_usage, UsageIteration};

use std::borrow::Cow;

use super::fingerprint_walk;
use super::spill::{SpilledTurns, TurnRef};
use crate::gate::digest::TextDigest;

/// The recording formats `budgetgate replay` reads (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Claude Code session log: JSON Lines, one content block per line,
    /// lines of one response sharing `message.id`.
    ClaudeCode,
    /// Claude Code `stream-json` output (`claude -p --output-format
    /// stream-json --verbose`, the Agent SDK's transport): JSON Lines with
    /// `session_id`, one content block per line, no `requestId`; lines of one
    /// response share `message.id` even with its results between them.
    ClaudeCodeStreamJson,
    /// Anthropic Messages API exchanges: `{request, response}` objects (one
    /// JSON document, an array, or JSON Lines), or bare response messages.
    AnthropicExchanges,
    /// VCR cassette (vcrpy / pytest-recording), YAML or JSON:
    /// `interactions[].request` / `.response`.
    VcrCassette,
    /// claude-trace log (`.claude-trace/log-*.jsonl`): one
    /// `{request: {url, body}, response: {status_code, body | body_raw}}`
    /// pair per line, Claude Code's own API traffic.
    ClaudeTrace,
    /// SWE-agent trajectory (`.traj`): actions and observations per step,
    /// usage only as run totals.
    SweAgentTraj,
}

impl Format {
    /// The identifier printed by `--json`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code-jsonl",
            Self::ClaudeCodeStreamJson => "claude-code-stream-json",
            Self::AnthropicExchanges => "anthropic-messages",
            Self::VcrCassette => "vcr-cassette",
            Self::ClaudeTrace => "claude-trace",
            Self::SweAgentTraj => "swe-agent-traj",
        }
    }

    /// The name shown in the table.
    pub const fn description(self) -> &'static str {
        match self {
            Self::ClaudeCode => "Claude Code session log (JSON Lines)",
            Self::ClaudeCodeStreamJson => {
                "Claude Code stream-json output (claude -p --output-format stream-json)"
            }
            Self::AnthropicExchanges => "Anthropic Messages API exchanges (JSON)",
            Self::VcrCassette => "VCR cassette of model API calls (Anthropic Messages, OpenAI Chat Completions or Responses, Bedrock Converse, Gemini)",
            Self::ClaudeTrace => "claude-trace log of Claude Code's API traffic (JSON Lines)",
            Self::SweAgentTraj => "SWE-agent trajectory (.traj)",
        }
    }
}

/// One tool call as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// The call id (`tool_use.id`; synthesized `step-N` where the format has none).
    pub id: String,
    /// The tool's name (for SWE-agent, the command's first word).
    pub name: String,
    /// What its arguments are kept as: their fingerprints, taken when the
    /// call is read, never the arguments themselves.
    pub arguments: RecordedArguments,
    /// The result the recording holds for it, as loop detection compares
    /// it (a digest of its content, and whether it was an error); `None`
    /// when no result is recorded.
    pub recorded: Option<Outcome>,
}

impl RecordedCall {
    /// Whether its recorded result is an error: `None` when none is
    /// recorded.
    pub fn recorded_error(&self) -> Option<bool> {
        self.recorded.map(|o| o.error)
    }
}

/// A call's arguments as replay keeps them: fingerprints taken when the call
/// is read, the value itself dropped at once (issue 14: Write and Edit
/// inputs hold whole files, and the gate only counts repeats by the
/// fingerprint, `SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedArguments {
    /// They could not be read (a streamed `input_json_delta` cut off
    /// mid-way): the gate refuses the call as `invalid-arguments`.
    Unreadable,
    /// Read; they nest deeper than 128 levels and cannot be fingerprinted:
    /// refused as `invalid-arguments` too.
    TooDeep,
    /// Read and fingerprinted ([`fingerprint_value`](super::fingerprint_value)).
    Read(ArgsFingerprint),
    /// Read, holding a float `-0.0`: the fingerprint (where `-0.0` and
    /// `0.0` differ, as `json.dumps` writes them) and that of the same value
    /// with every `-0.0` read as `0.0`, which tells whether two inputs are
    /// equal as `serde_json` compares them (`-0.0 == 0.0`).
    ReadWithNegativeZero {
        /// What the gate counts repeats by.
        fingerprint: ArgsFingerprint,
        /// The fingerprint with the zeros' signs dropped.
        unsigned_zeros: ArgsFingerprint,
    },
}

impl RecordedArguments {
    /// What `input`, just read, is kept as.
    pub fn of_value(input: &Value) -> Self {
        match fingerprint_walk(input, false) {
            (None, _) => Self::TooDeep,
            (Some(fingerprint), false) => Self::Read(fingerprint),
            (Some(fingerprint), true) => match fingerprint_walk(input, true) {
                (Some(unsigned_zeros), _) => Self::ReadWithNegativeZero {
                    fingerprint,
                    unsigned_zeros,
                },
                // The same value at the same depth: not reached.
                (None, _) => Self::TooDeep,
            },
        }
    }

    /// The fingerprint the gate counts repeats by (`SPEC C`), or `None` when
    /// the arguments could not be read or fingerprinted (the gate then
    /// refuses the call as `invalid-arguments`).
    pub fn fingerprint(&self) -> Option<ArgsFingerprint> {
        match *self {
            Self::Unreadable | Self::TooDeep => None,
            Self::Read(fingerprint) | Self::ReadWithNegativeZero { fingerprint, .. } => {
                Some(fingerprint)
            }
        }
    }

    /// Whether two calls' arguments were the same JSON value, as `serde_json`
    /// compares values (object keys in any order, `-0.0 == 0.0`, `1 != 1.0`),
    /// or both unreadable: what tells a block logged again from a reused
    /// call id. Arguments too deep to fingerprint are never the same (the
    /// stricter answer: the block is kept and its reused id refused; a Claude
    /// Code line nests at most 128 levels in all, so its inputs never are).
    pub fn same_value(&self, other: &Self) -> bool {
        match (self.value_key(), other.value_key()) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a && b,
            _ => false,
        }
    }

    /// The fingerprint of the value with every `-0.0` as `0.0`, or whether
    /// the arguments are unreadable (`true`) or too deep (`false`).
    fn value_key(&self) -> Result<ArgsFingerprint, bool> {
        match *self {
            Self::Unreadable => Err(true),
            Self::TooDeep => Err(false),
            Self::Read(key)
            | Self::ReadWithNegativeZero {
                unsigned_zeros: key,
                ..
            } => Ok(key),
        }
    }
}

/// How usage is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGranularity {
    /// Each response carries its usage.
    PerTurn,
    /// Only the whole run's totals are known (SWE-agent).
    RunTotal(TokenUsage),
    /// No usage is recorded at all (a SWE-agent trajectory without
    /// `info.model_stats`): the cost is unknown, the token limit unchecked.
    Unknown,
}

/// One model response, counted once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordedTurn {
    /// The response's message id, when recorded.
    pub message_id: Option<String>,
    /// The stop reason as recorded (`None` when null or absent; any other
    /// type is an error when reading).
    pub stop_reason: Option<String>,
    /// Usage of this call (`None` when the format records only totals).
    pub usage: Option<TokenUsage>,
    /// The tool calls, in block order.
    pub calls: Vec<RecordedCall>,
    /// Characters of text in the response.
    pub text_chars: usize,
    /// The digest of its text (`[loops]` `same_answer`).
    pub text_digest: TextDigest,
    /// When the request was sent, in milliseconds since the session began,
    /// if the recording has times.
    pub requested_at_ms: Option<u64>,
    /// The request's `max_tokens`, when recorded.
    pub max_tokens: Option<u64>,
    /// The entries of `usage.iterations`, each already counted in `usage`
    /// (billed: top level plus every iteration); empty when there are none.
    pub iterations: Vec<UsageIteration>,
    /// Why the reply is cut off although its stop reason does not say so (a
    /// stream that ended without `message_stop`): its calls never run, as
    /// for `max_tokens`.
    pub cut_off: Option<String>,
    /// Server tool uses in the response (`server_tool_use` blocks: web
    /// search, code execution, …), by tool name, in block order: run by the
    /// API, not by the agent.
    pub server_calls: Vec<String>,
    /// The sub-agent whose call this is (Claude Code `subagents/*.jsonl`), or
    /// `None` for the main agent.
    pub agent: Option<String>,
    /// The model that answered (the response's `model`, else the request's),
    /// when recorded: what a cost budget prices the response by.
    pub model: Option<String>,
}

impl RecordedTurn {
    /// The response as the model's text answer (`same_answer`): its text's
    /// digest when it made no call (neither the agent's nor the API's),
    /// `None` when it made one.
    pub fn answer(&self) -> Option<u64> {
        (self.calls.is_empty() && self.server_calls.is_empty()).then(|| self.text_digest.get())
    }

    /// The stop reason the gate uses: the recorded one, or, when null, the
    /// reliable sign: a `tool_use` block makes a tool turn, else `end_turn`.
    pub fn effective_stop_reason(&self) -> (String, bool) {
        if self.cut_off.is_some() {
            // Cut off whatever it says: its calls may be incomplete.
            return ("max_tokens".to_owned(), true);
        }
        match &self.stop_reason {
            Some(reason) => (reason.clone(), false),
            None if self.calls.is_empty() => ("end_turn".to_owned(), true),
            None => ("tool_use".to_owned(), true),
        }
    }
}

/// A recorded session, whatever its format.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The format detected.
    pub format: Format,
    /// One per model response, in order: all of them, or, when
    /// [`spilled`](Self::spilled) is set, those after the spilled ones.
    pub turns: Vec<RecordedTurn>,
    /// The first responses, kept in a temporary file instead of `turns` (a
    /// Claude Code log read line by line: issue 14, memory); `None` when
    /// every response is in `turns`. [`each_turn`](Self::each_turn) gives
    /// them all; [`hold_all`](Self::hold_all) moves them into `turns`.
    pub spilled: Option<std::sync::Arc<SpilledTurns>>,
    /// How usage is recorded.
    pub usage: UsageGranularity,
    /// Tool names the requests declared (`tools[].name`), if any request did.
    pub declared_tools: Option<Vec<String>>,
    /// Whether the recording says the run finished after its last response
    /// although no `end_turn` is recorded (a SWE-agent trajectory whose
    /// `info.exit_status` is `submitted`: its last action submitted the
    /// result).
    pub ends_complete: bool,
    /// Facts about the reading worth showing (skipped lines, inferred values).
    pub notes: Vec<String>,
    /// The instant (ms since the Unix epoch) the turns' `requested_at_ms`
    /// count from, when the recording has wall-clock times: lets the
    /// sub-agents' logs be put in order with the session's.
    pub time_origin_ms: Option<u64>,
}

impl Session {
    /// How many responses: the spilled ones and `turns`.
    pub fn turn_count(&self) -> usize {
        self.spilled.as_ref().map_or(0, |s| s.len()) + self.turns.len()
    }

    /// Every response in order: the spilled ones read back, then `turns`
    /// borrowed. An error reading the temporary file back ends the walk.
    pub fn each_turn(&self) -> impl Iterator<Item = std::io::Result<TurnRef<'_>>> + '_ {
        self.spilled
            .iter()
            .flat_map(|s| s.iter().map(|t| t.map(Cow::Owned)))
            .chain(self.turns.iter().map(|t| Ok(Cow::Borrowed(t))))
    }

    /// Moves the spilled responses, if any, into `turns` (what code that
    /// indexes or reorders `turns` needs first).
    pub fn hold_all(&mut self) -> std::io::Result<()> {
        let Some(spilled) = self.spilled.take() else {
            return Ok(());
        };
        let mut all = spilled.iter().collect::<std::io::Result<Vec<_>>>()?;
        all.append(&mut self.turns);
        self.turns = all;
        Ok(())
    }

    /// Adds the responses of sub-agents (`(name, their own session)`, as
    /// Claude Code keeps them in `<session>/subagents/agent-ID.jsonl`) to
    /// this session, each marked with its agent: by wall-clock time when
    /// every log has times (the budget is shared, so the order is the one
    /// the calls were made in), else after the session's own, with a note.
    /// Their notes are kept, prefixed with the agent's name. Every session's
    /// responses must be held ([`hold_all`](Self::hold_all)).
    pub fn merge_subagents(&mut self, subagents: Vec<(String, Session)>) {
        if subagents.is_empty() {
            return;
        }
        let absolute = |turn: &RecordedTurn, origin: Option<u64>| {
            turn.requested_at_ms
                .zip(origin)
                .map(|(t, o)| t.saturating_add(o))
        };
        let mut all: Vec<(Option<u64>, RecordedTurn)> = self
            .turns
            .drain(..)
            .map(|t| (absolute(&t, self.time_origin_ms), t))
            .collect();
        let mut names = Vec::new();
        for (name, sub) in subagents {
            for note in &sub.notes {
                self.notes.push(format!("sub-agent {name}: {note}"));
            }
            let calls = sub.tool_calls();
            names.push(format!(
                "{name} ({} responses, {calls} tool calls)",
                sub.turns.len()
            ));
            for mut turn in sub.turns {
                let at = absolute(&turn, sub.time_origin_ms);
                turn.agent = Some(name.clone());
                all.push((at, turn));
            }
        }
        let timed = all.iter().all(|(at, _)| at.is_some());
        if timed {
            // Stable: lines of one log keep their order at equal times.
            all.sort_by_key(|(at, _)| *at);
            let origin = all.first().and_then(|(at, _)| *at);
            for (at, turn) in &mut all {
                turn.requested_at_ms = at.zip(origin).map(|(t, o)| t.saturating_sub(o));
            }
            self.time_origin_ms = origin;
        }
        self.turns = all.into_iter().map(|(_, t)| t).collect();
        self.notes.push(format!(
            "{} sub-agent log(s) replayed with the session, {}: {}",
            names.len(),
            if timed {
                "in the order of their timestamps, on the session's budget"
            } else {
                "after the session's own responses (not every response has a time), on the session's budget"
            },
            names.join(", ")
        ));
    }

    /// Tool calls in all responses.
    pub fn tool_calls(&self) -> usize {
        self.turns.iter().map(|t| t.calls.len()).sum()
    }

    /// What the recording really cost: per-turn usage summed, or the run
    /// totals where only those are recorded (zero when none is recorded).
    pub fn recorded_usage(&self) -> TokenUsage {
        match self.usage {
            UsageGranularity::RunTotal(total) => total,
            UsageGranularity::Unknown => TokenUsage::ZERO,
            UsageGranularity::PerTurn => self
                .turns
                .iter()
                .filter_map(|t| t.usage)
                .fold(TokenUsage::ZERO, TokenUsage::saturating_add),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::fingerprint_value;
    use serde_json::json;

    fn of(text: &str) -> RecordedArguments {
        RecordedArguments::of_value(&crate::strict::value_from_str(text).unwrap())
    }

    /// Issue 14 (memory), SPEC C repetitions: the fingerprint kept for a
    /// call, taken as it is read, is the one the gate used to take from the
    /// whole input when it proposed the call; arguments too deep for it are
    /// `None` as before, refused `invalid-arguments`.
    #[test]
    fn the_fingerprint_kept_is_the_one_taken_from_the_whole_input() {
        for text in [
            r#"{"file_path":"/a","content":"whole file\n"}"#,
            r#"{"b":[1,2.5,-3,18446744073709551615],"a":{"x":null,"y":true}}"#,
            r#"{"x":-0.0}"#,
            r#""\u0000unreadable-arguments:{""#,
            "null",
        ] {
            let value = crate::strict::value_from_str(text).unwrap();
            let kept = RecordedArguments::of_value(&value);
            assert_eq!(kept.fingerprint(), fingerprint_value(&value), "{text}");
            assert!(kept.fingerprint().is_some(), "{text}");
        }
        let mut deep = Value::Null;
        for _ in 0..129 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(
            RecordedArguments::of_value(&deep),
            RecordedArguments::TooDeep
        );
        assert_eq!(RecordedArguments::TooDeep.fingerprint(), None);
        assert_eq!(RecordedArguments::Unreadable.fingerprint(), None);
    }

    /// Issue 14 (memory): whether two kept inputs are the same value answers
    /// as `serde_json`'s `==` on the inputs did (what told a block logged
    /// again from a reused call id): keys in any order alike, `1` and `1.0`
    /// apart, `-0.0` and `0.0` alike (while their fingerprints stay apart,
    /// as `json.dumps` writes them); two unreadable inputs alike.
    #[test]
    fn kept_inputs_are_the_same_value_exactly_when_serde_json_said_so() {
        let pairs = [
            (r#"{"a":1,"b":[2,3]}"#, r#"{"b":[2,3],"a":1}"#),
            (r#"{"a":1}"#, r#"{"a":1.0}"#),
            (r#"{"a":[1,2]}"#, r#"{"a":[2,1]}"#),
            (r#"{"x":-0.0}"#, r#"{"x":0.0}"#),
            (r#"{"x":-0}"#, r#"{"x":0.0}"#),
            (r#"{"x":-0.0,"y":"s"}"#, r#"{"y":"s","x":-0.0}"#),
            (r#"{"x":-0.0}"#, r#"{"x":0}"#),
            (r#"{"a":"1"}"#, r#"{"a":1}"#),
            (r#"{}"#, r#"[]"#),
            ("null", "null"),
        ];
        for (a, b) in pairs {
            let (va, vb) = (
                crate::strict::value_from_str(a).unwrap(),
                crate::strict::value_from_str(b).unwrap(),
            );
            assert_eq!(of(a).same_value(&of(b)), va == vb, "{a} vs {b}");
            assert_eq!(of(b).same_value(&of(a)), va == vb, "{b} vs {a}");
        }
        assert_ne!(
            of(r#"{"x":-0.0}"#).fingerprint(),
            of(r#"{"x":0.0}"#).fingerprint()
        );
        let unreadable = RecordedArguments::Unreadable;
        assert!(unreadable.same_value(&unreadable));
        assert!(!unreadable.same_value(&of("null")));
        assert!(!of("null").same_value(&unreadable));
        // Too deep to fingerprint: never the same (kept, its reused id refused).
        let too_deep = RecordedArguments::TooDeep;
        assert!(!too_deep.same_value(&too_deep));
        assert!(!too_deep.same_value(&unreadable));
        assert!(of("1").same_value(&RecordedArguments::of_value(&json!(1))));
    }
}
