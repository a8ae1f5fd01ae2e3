//! What the turn gate says: stop reasons, statuses, exhaustion, refusals and
//! the error results that answer refused calls (`SPEC C`).

use core::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::usage::TokenUsage;
use crate::budget::Limit;
use crate::word;

/// Longest unknown stop reason kept, in bytes (`SPEC C`).
pub const MAX_REASON_LEN: usize = 32;

/// The text of a stop reason the gate does not know, kept (up to
/// [`MAX_REASON_LEN`] bytes) so the status can name it (`SPEC C`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ReasonText {
    bytes: [u8; MAX_REASON_LEN],
    len: u8,
}

impl ReasonText {
    fn new(text: &str) -> Option<Self> {
        let mut bytes = [0u8; MAX_REASON_LEN];
        bytes
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(Self {
            bytes,
            len: u8::try_from(text.len()).ok()?,
        })
    }

    /// The reason as the API wrote it (`SPEC C`).
    pub fn as_str(&self) -> &str {
        // Copied whole from a `&str`, so always valid UTF-8.
        self.bytes
            .get(..usize::from(self.len))
            .and_then(|b| core::str::from_utf8(b).ok())
            .unwrap_or("")
    }
}

impl fmt::Debug for ReasonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ReasonText {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=str}", self.as_str())
    }
}

/// Why a model response stopped: its `stop_reason` (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StopReason {
    /// `end_turn`: the answer is complete.
    EndTurn,
    /// `tool_use`: the response holds tool calls to decide and answer.
    ToolUse,
    /// `pause_turn`: a long server-side turn paused; continue, run nothing.
    PauseTurn,
    /// `max_tokens`: cut off; a tool call in it may be incomplete.
    MaxTokens,
    /// `stop_sequence`: a custom stop sequence was generated.
    StopSequence,
    /// `refusal`: the model declined.
    Refusal,
    /// `model_context_window_exceeded`: the context window is full.
    ModelContextWindowExceeded,
    /// Any other reason, as written.
    Other(ReasonText),
}

/// Why a stop reason could not be kept (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StopReasonError {
    /// An unknown reason longer than [`MAX_REASON_LEN`] bytes.
    TooLong,
    /// An empty reason.
    Empty,
}

impl fmt::Display for StopReasonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => write!(f, "unknown stop reason longer than {MAX_REASON_LEN} bytes"),
            Self::Empty => f.write_str("empty stop reason"),
        }
    }
}

impl core::error::Error for StopReasonError {}

impl StopReason {
    /// Reads a `stop_reason` as the Messages API spells it; any other
    /// non-empty text of at most [`MAX_REASON_LEN`] bytes becomes
    /// [`StopReason::Other`] (`SPEC C`).
    pub fn parse(text: &str) -> Result<Self, StopReasonError> {
        Ok(match text {
            "" => return Err(StopReasonError::Empty),
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "pause_turn" => Self::PauseTurn,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" => Self::Refusal,
            "model_context_window_exceeded" => Self::ModelContextWindowExceeded,
            other => Self::Other(ReasonText::new(other).ok_or(StopReasonError::TooLong)?),
        })
    }

    /// The API's spelling (`SPEC C`).
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::PauseTurn => "pause_turn",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
            Self::ModelContextWindowExceeded => "model_context_window_exceeded",
            Self::Other(text) => text.as_str(),
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Which stop condition ended the run before a model call (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ExhaustReason {
    /// `steps`: as many model calls as allowed were made.
    Steps,
    /// `tokens`: the accumulated tokens reached the limit.
    Tokens,
    /// `time`: the wall time since the run began reached the limit.
    Time,
    /// `cost`: the accumulated cost reached the limit.
    Cost,
    /// `unpriced-model`: a response of a model with no price was recorded
    /// while a cost limit is set; a cost budget never counts a call as free.
    Unpriced,
    /// `token-reserve` (reserve mode): the next call's declared worst case,
    /// added to the tokens so far, would pass the limit.
    TokenReserve,
    /// `closed`: the caller closed the run before any limit was reached.
    Closed,
}

impl ExhaustReason {
    /// The reason a run stops with when `limit`, one of those checked
    /// before each model call, is reached; `None` for a limit checked per
    /// tool call (tool attempts).
    pub const fn of_limit(limit: Limit) -> Option<Self> {
        match limit {
            Limit::ModelCalls => Some(Self::Steps),
            Limit::Tokens => Some(Self::Tokens),
            Limit::Millis => Some(Self::Time),
            Limit::CostMicros => Some(Self::Cost),
            Limit::ToolCalls => None,
        }
    }

    /// The spelling used in statuses and reports (`SPEC C`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Steps => "steps",
            Self::Tokens => "tokens",
            Self::Time => "time",
            Self::Cost => "cost",
            Self::Unpriced => "unpriced-model",
            Self::TokenReserve => "token-reserve",
            Self::Closed => "closed",
        }
    }
}

impl fmt::Display for ExhaustReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the budget stood when it ran out: the reason plus everything the
/// run gathered (`SPEC C`, the reference's `incompleto` with its `motivo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Exhaustion {
    /// Which condition.
    pub reason: ExhaustReason,
    /// Model calls made.
    pub steps: u32,
    /// Tokens used, field by field.
    pub usage: TokenUsage,
    /// Cost recorded, in micro-dollars (0 without a cost limit).
    pub cost_micros: u64,
    /// Milliseconds since the run began, at the check.
    pub elapsed_ms: u64,
    /// The limit reached: model calls, tokens, milliseconds or micro-dollars
    /// (`unpriced-model`: the cost limit; 0 for `closed`).
    pub limit: u64,
    /// The declared worst case of the refused call (`token-reserve` only, else 0).
    pub worst_case: u64,
}

impl fmt::Display for Exhaustion {
    /// Worded as the reference's `agotado()` words it, in English.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            ExhaustReason::Steps => write!(f, "step limit ({})", self.limit),
            ExhaustReason::Tokens => {
                write!(f, "token limit ({} of {})", self.usage.total(), self.limit)
            }
            ExhaustReason::Time => {
                write!(
                    f,
                    "time limit ({} s)",
                    self.limit.saturating_add(500) / 1000
                )
            }
            ExhaustReason::TokenReserve => write!(
                f,
                "token limit ({} used, the next call may use {} more, limit {})",
                self.usage.total(),
                self.worst_case,
                self.limit
            ),
            ExhaustReason::Cost => write!(
                f,
                "cost limit ({} of {} micro-USD)",
                self.cost_micros, self.limit
            ),
            ExhaustReason::Unpriced => f.write_str(
                "cost limit: a model with no price was called, and a cost budget never counts a call as free",
            ),
            ExhaustReason::Closed => f.write_str("closed by the caller"),
        }
    }
}

/// The status of a run (`SPEC C`): the reference's `estado`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RunStatus {
    /// Still going: `running`.
    Running,
    /// `end_turn` arrived: `complete`. The text is the caller's (the core
    /// keeps no text).
    Complete,
    /// The budget ran out before a model call: `incomplete`, with the reason
    /// and what was gathered. Never an error that loses the work.
    Incomplete(Exhaustion),
    /// The response stopped for another reason (`max_tokens`, `refusal`,
    /// `stop_sequence`, `model_context_window_exceeded`, unknown): `error`
    /// with that reason.
    Error(StopReason),
}

impl RunStatus {
    /// `running`, `complete`, `incomplete` or `error` (`SPEC C`).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Complete => "complete",
            Self::Incomplete(_) => "incomplete",
            Self::Error(_) => "error",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete(e) => write!(f, "incomplete: {e}"),
            Self::Error(reason) => write!(f, "error: {reason}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why a tool call was not executed; every refusal is answered with an
/// error result for its call id (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RefusalReason {
    /// `repeat`: the same tool with the same arguments more than `max_repeats` times.
    Repeat,
    /// `approval-refused`: the approver said no.
    ApprovalRefused,
    /// `unknown-tool`: the tool's rule is [`ToolRule::Unknown`](super::ToolRule::Unknown).
    UnknownTool,
    /// `tool-budget`: no tool attempts left.
    ToolBudget,
    /// `cut-off`: the response stopped at `max_tokens`; the call may be incomplete.
    CutOff,
    /// `not-tool-turn`: the response stopped for a reason other than `tool_use`
    /// or `max_tokens`, so its calls are not run.
    NotToolTurn,
    /// `invalid-arguments`: the arguments could not be read or fingerprinted.
    InvalidArguments,
    /// `turn-capacity`: more calls in one response than the gate tracks.
    TurnCapacity,
    /// `repeat-capacity`: the table of distinct calls is full; a new one is
    /// refused rather than forgotten.
    RepeatCapacity,
    /// `budget-exhausted`: left unanswered when the run closed.
    BudgetExhausted,
    /// `invalid-name`: the tool name is outside the grammar
    /// `[A-Za-z0-9_-]{1,64}` (a space, an invisible character, a NUL, empty,
    /// too long); never executed and never matched against a tool rule
    /// (`SPEC E`).
    InvalidName,
    /// `duplicate-call-id`: the call id was used by a call of an earlier
    /// response of this run (`SPEC E`, as `SPEC A2` step 3).
    DuplicateCallId,
    /// `call-id-capacity`: the table of call ids seen in this run is full;
    /// a new id is refused rather than an old one forgotten (`SPEC E`).
    CallIdCapacity,
    /// `tool-cap`: the tool's own call cap (`[tools] max_calls`) is reached
    /// (`SPEC E`).
    ToolCap,
    /// `rate-limit`: a `[rate]` window is full: too many calls in a short
    /// time (`SPEC E`).
    RateLimit,
    /// `no-progress`: the call would repeat a pattern of calls whose
    /// outcomes do not change (`[loops]`; `SPEC E`).
    NoProgress,
}

impl RefusalReason {
    /// Every reason, in the order reports list them (`SPEC C`).
    pub const ALL: [Self; 16] = [
        Self::Repeat,
        Self::ApprovalRefused,
        Self::UnknownTool,
        Self::ToolBudget,
        Self::CutOff,
        Self::NotToolTurn,
        Self::InvalidArguments,
        Self::TurnCapacity,
        Self::RepeatCapacity,
        Self::BudgetExhausted,
        Self::InvalidName,
        Self::DuplicateCallId,
        Self::CallIdCapacity,
        Self::ToolCap,
        Self::RateLimit,
        Self::NoProgress,
    ];

    /// The spelling used in reports (`SPEC C`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Repeat => "repeat",
            Self::ApprovalRefused => "approval-refused",
            Self::UnknownTool => word::UNKNOWN_TOOL,
            Self::ToolBudget => word::TOOL_BUDGET,
            Self::CutOff => "cut-off",
            Self::NotToolTurn => "not-tool-turn",
            Self::InvalidArguments => word::INVALID_ARGUMENTS,
            Self::TurnCapacity => "turn-capacity",
            Self::RepeatCapacity => "repeat-capacity",
            Self::BudgetExhausted => "budget-exhausted",
            Self::InvalidName => "invalid-name",
            Self::DuplicateCallId => word::DUPLICATE_CALL_ID,
            Self::CallIdCapacity => "call-id-capacity",
            Self::ToolCap => "tool-cap",
            Self::RateLimit => "rate-limit",
            Self::NoProgress => "no-progress",
        }
    }

    /// The text of the error result sent to the model for this call, worded
    /// as the reference's `ejecutar_con_control` words its results (`SPEC C`).
    pub const fn message(self) -> &'static str {
        match self {
            Self::Repeat => "You have already made this same call several times with the same arguments. Change approach or answer with what you have.",
            Self::ApprovalRefused => "The user rejected this action. Do not repeat it; explain what you would do instead.",
            Self::UnknownTool => "Error: unknown tool. Use only the tools you were given.",
            Self::ToolBudget => "Tool-call budget exhausted, not executed. Answer with what you have.",
            Self::CutOff => "Your reply was cut off at max_tokens, so this tool call may be incomplete; it was not executed.",
            Self::NotToolTurn => "Not executed: the reply did not stop for tool use.",
            Self::InvalidArguments => "Error: the arguments could not be read; not executed.",
            Self::TurnCapacity => "Too many tool calls in one reply; not executed. Make fewer calls at a time.",
            Self::RepeatCapacity => "Too many different tool calls in this run; not executed. Answer with what you have.",
            Self::BudgetExhausted => "Budget exhausted, not executed.",
            Self::InvalidName => "Error: the tool name is not a valid tool name (letters, digits, _ and -, at most 64); not executed. Use only the tools you were given, spelled exactly.",
            Self::DuplicateCallId => "Error: this tool call id was already used earlier in this conversation; not executed. Give every tool call a new id.",
            Self::CallIdCapacity => "Too many tool calls in this run; not executed. Answer with what you have.",
            Self::ToolCap => "This tool's own call budget is exhausted, not executed. Use another tool or answer with what you have.",
            Self::RateLimit => "Too many tool calls in a short time; not executed. Wait until the window reopens, or answer with what you have.",
            Self::NoProgress => "These calls keep returning the same results; not executed. Change approach or stop and answer with what you have.",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }

    /// The error result answering `call_id` with this refusal, serializable
    /// as a Messages API `tool_result` block (`SPEC C`).
    pub fn result_for(self, call_id: &str) -> ErrorResult<'_> {
        ErrorResult {
            call_id,
            content: self.message(),
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error `tool_result` block: `{"type": "tool_result", "tool_use_id",
/// "is_error": true, "content"}` (`SPEC C`: no call is left without a result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorResult<'a> {
    /// The call answered.
    pub call_id: &'a str,
    /// The text the model reads.
    pub content: &'a str,
}

impl Serialize for ErrorResult<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("type", "tool_result")?;
        map.serialize_entry("tool_use_id", self.call_id)?;
        map.serialize_entry("is_error", &true)?;
        map.serialize_entry("content", self.content)?;
        map.end()
    }
}

/// How many calls were refused, per reason (`SPEC C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RefusalCounts {
    counts: [u32; RefusalReason::ALL.len()],
}

impl RefusalCounts {
    /// No refusals (`SPEC C`).
    pub const fn new() -> Self {
        Self {
            counts: [0; RefusalReason::ALL.len()],
        }
    }

    pub(super) fn add(&mut self, reason: RefusalReason) {
        if let Some(count) = self.counts.get_mut(reason.index()) {
            *count = count.saturating_add(1);
        }
    }

    /// Refusals for `reason` (`SPEC C`).
    pub fn get(&self, reason: RefusalReason) -> u32 {
        self.counts.get(reason.index()).copied().unwrap_or(0)
    }

    /// All refusals (`SPEC C`).
    pub fn total(&self) -> u32 {
        self.counts.iter().fold(0u32, |a, b| a.saturating_add(*b))
    }

    /// The reasons with at least one refusal, with their counts (`SPEC C`).
    pub fn iter(&self) -> impl Iterator<Item = (RefusalReason, u32)> + '_ {
        RefusalReason::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|(_, n)| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip() {
        for text in [
            "end_turn",
            "tool_use",
            "pause_turn",
            "max_tokens",
            "stop_sequence",
            "refusal",
            "model_context_window_exceeded",
            "something_new",
        ] {
            assert_eq!(StopReason::parse(text).unwrap().as_str(), text);
        }
        assert!(matches!(
            StopReason::parse("something_new"),
            Ok(StopReason::Other(_))
        ));
        assert!(StopReason::parse(&"x".repeat(32)).is_ok());
        assert_eq!(
            StopReason::parse(&"x".repeat(33)),
            Err(StopReasonError::TooLong)
        );
        assert_eq!(StopReason::parse(""), Err(StopReasonError::Empty));
    }

    #[test]
    fn refusal_indexes_match_all() {
        for (i, r) in RefusalReason::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let mut counts = RefusalCounts::new();
        counts.add(RefusalReason::Repeat);
        counts.add(RefusalReason::Repeat);
        counts.add(RefusalReason::BudgetExhausted);
        assert_eq!(counts.total(), 3);
        assert_eq!(
            counts.iter().collect::<std::vec::Vec<_>>(),
            [
                (RefusalReason::Repeat, 2),
                (RefusalReason::BudgetExhausted, 1)
            ]
        );
    }

    #[test]
    fn exhaustion_wording_follows_the_reference() {
        let e = Exhaustion {
            reason: ExhaustReason::Tokens,
            steps: 3,
            usage: TokenUsage {
                input_tokens: 150_001,
                ..TokenUsage::ZERO
            },
            cost_micros: 2_500_001,
            elapsed_ms: 10,
            limit: 150_000,
            worst_case: 0,
        };
        assert_eq!(e.to_string(), "token limit (150001 of 150000)");
        let c = Exhaustion {
            reason: ExhaustReason::Cost,
            limit: 2_500_000,
            ..e
        };
        assert_eq!(c.to_string(), "cost limit (2500001 of 2500000 micro-USD)");
        let t = Exhaustion {
            reason: ExhaustReason::Time,
            limit: 120_000,
            ..e
        };
        assert_eq!(t.to_string(), "time limit (120 s)");
        let s = Exhaustion {
            reason: ExhaustReason::Steps,
            limit: 15,
            ..e
        };
        assert_eq!(s.to_string(), "step limit (15)");
    }

    /// `SPEC C`: a stop reason that cannot be kept says why, in words.
    #[test]
    fn stop_reason_errors_say_why() {
        assert_eq!(
            StopReasonError::TooLong.to_string(),
            "unknown stop reason longer than 32 bytes"
        );
        assert_eq!(StopReasonError::Empty.to_string(), "empty stop reason");
    }

    /// `SPEC C`: an unknown stop reason is kept as the text the API wrote,
    /// and debug output shows that text, not the buffer that holds it.
    #[test]
    fn an_unknown_stop_reason_shows_as_its_text() {
        let reason = StopReason::parse("brand_new_reason").unwrap();
        assert_eq!(format!("{reason:?}"), r#"Other("brand_new_reason")"#);
        let long = "x".repeat(MAX_REASON_LEN);
        let reason = StopReason::parse(&long).unwrap();
        assert_eq!(format!("{reason:?}"), format!("Other({long:?})"));
    }

    /// `SPEC C`: the reason a budget ran out is named by one word each, as
    /// statuses and the replay's reports name it, and displays as that word.
    #[test]
    fn exhaust_reasons_are_spelled_as_reports_spell_them() {
        let words = [
            (ExhaustReason::Steps, "steps"),
            (ExhaustReason::Tokens, "tokens"),
            (ExhaustReason::Time, "time"),
            (ExhaustReason::Cost, "cost"),
            (ExhaustReason::Unpriced, "unpriced-model"),
            (ExhaustReason::TokenReserve, "token-reserve"),
            (ExhaustReason::Closed, "closed"),
        ];
        for (reason, word) in words {
            assert_eq!(reason.as_str(), word);
            assert_eq!(reason.to_string(), word);
        }
    }

    /// `SPEC C`: a run's status is `running`, `complete`, `incomplete` or
    /// `error`, the reference's `estado` in the words reports write; a
    /// status with nothing more to say displays as its word alone, the
    /// others add their reason.
    #[test]
    fn run_status_words_are_the_reports_words() {
        let e = Exhaustion {
            reason: ExhaustReason::Steps,
            steps: 15,
            usage: TokenUsage::ZERO,
            cost_micros: 0,
            elapsed_ms: 0,
            limit: 15,
            worst_case: 0,
        };
        let statuses = [
            (RunStatus::Running, "running", "running"),
            (RunStatus::Complete, "complete", "complete"),
            (
                RunStatus::Incomplete(e),
                "incomplete",
                "incomplete: step limit (15)",
            ),
            (
                RunStatus::Error(StopReason::MaxTokens),
                "error",
                "error: max_tokens",
            ),
        ];
        for (status, word, shown) in statuses {
            assert_eq!(status.as_str(), word);
            assert_eq!(status.to_string(), shown);
        }
    }

    /// `SPEC C`: each limit checked before a model call stops a run with
    /// its own reason; tool attempts are checked per call instead.
    #[test]
    fn each_before_call_limit_stops_with_its_own_reason() {
        let reasons = Limit::ALL.map(ExhaustReason::of_limit);
        assert_eq!(
            reasons,
            [
                Some(ExhaustReason::Steps),
                Some(ExhaustReason::Tokens),
                Some(ExhaustReason::Time),
                Some(ExhaustReason::Cost),
                None
            ]
        );
        for limit in Limit::ALL {
            assert_eq!(
                ExhaustReason::of_limit(limit).is_some(),
                limit.before_model_call()
            );
        }
    }

    /// `SPEC C`: every reason a tool call is refused has its own word, the
    /// one reports count refusals under, and displays as that word.
    #[test]
    fn refusal_reasons_are_spelled_as_reports_spell_them() {
        let words = [
            "repeat",
            "approval-refused",
            "unknown-tool",
            "tool-budget",
            "cut-off",
            "not-tool-turn",
            "invalid-arguments",
            "turn-capacity",
            "repeat-capacity",
            "budget-exhausted",
            "invalid-name",
            "duplicate-call-id",
            "call-id-capacity",
            "tool-cap",
            "rate-limit",
            "no-progress",
        ];
        for (reason, word) in RefusalReason::ALL.into_iter().zip(words) {
            assert_eq!(reason.as_str(), word, "{reason:?}");
            assert_eq!(reason.to_string(), word, "{reason:?}");
        }
        assert_eq!(RefusalReason::ALL.len(), words.len());
    }
}
