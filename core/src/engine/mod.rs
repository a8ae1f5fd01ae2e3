//! The one decision of a proposed tool call (`SPEC C`, `SPEC E`: one budget
//! engine), made the same way by every front-end: replay and the turn gate
//! ([`crate::turn::TurnGate`]), the Claude Code hook and the MCP gateway (the
//! host's gate over its store).
//!
//! The checks run in one order, held in one array ([`CallCheck::ORDER`]);
//! the first that applies answers:
//!
//! 1. the response did not stop for tool use → `cut-off` / `not-tool-turn`
//!    (only where the front-end sees the response);
//! 2. a tool name outside `[A-Za-z0-9_-]{1,64}` → `invalid-name`;
//! 3. a call id used earlier in the session → `duplicate-call-id` (or, with
//!    no room left to remember it, `call-id-capacity`);
//! 4. arguments that could not be read → `invalid-arguments`;
//! 5. a limit checked before each model call already reached — model calls,
//!    tokens, time, cost — or a model without a price under a cost limit →
//!    `budget-exhausted` (only where the front-end cannot refuse the model
//!    call itself: the hook and the gateway; in replay, for a sub-agent's
//!    call against its own ledger, [`BudgetPerCall`]);
//! 6. the same tool with the same arguments more than `max_repeats` times →
//!    `repeat` (the count is raised first, then compared, as the reference
//!    does; no room for a new distinct call → `repeat-capacity`);
//! 7. no tool attempts left (used and reserved), the session's or the
//!    sub-agent's → `tool-budget`;
//! 8. the tool's own cap reached → `tool-cap`;
//! 9. a rate window full → `rate-limit`, with when it reopens.
//!
//! A call that passes every check counts as an attempt (recorded, or
//! reserved until its outcome: [`Counting`]), then the tool table's rule
//! answers: run it, ask a person first, or `unknown-tool`.
//!
//! The engine holds no state of its own: what a session remembers (the
//! ledgers, the call ids, the repetition counts, the calls in the rate
//! windows) is the front-end's [`State`], in memory for a run (the turn
//! gate) or in a store for a session that outlives its processes (the hook,
//! the gateway). A limit added here is enforced by every front-end.
//!
//! ```
//! use budgetgate_core::budget::{Ledger, Limit};
//! use budgetgate_core::engine::{self, Call, Counting, Decision, Ledgers, Rules, Seen, State};
//! use budgetgate_core::tools::{ToolRule, ToolTable};
//! use budgetgate_core::turn::{CallFingerprint, RefusalReason};
//!
//! /// A session kept in memory: one ledger, ids and repeats in small lists.
//! struct Session { ledger: Ledger, ids: Vec<String>, repeats: Vec<(CallFingerprint, u64)> }
//!
//! impl State for Session {
//!     type Error = core::convert::Infallible;
//!     fn see_id(&mut self, id: &str) -> Result<Seen, Self::Error> {
//!         if self.ids.iter().any(|i| i == id) { return Ok(Seen::Again) }
//!         self.ids.push(id.into());
//!         Ok(Seen::New)
//!     }
//!     fn raise_repeat(&mut self, key: CallFingerprint) -> Result<Option<u64>, Self::Error> {
//!         match self.repeats.iter_mut().find(|(k, _)| *k == key) {
//!             Some((_, n)) => { *n += 1; Ok(Some(*n)) }
//!             None => { self.repeats.push((key, 1)); Ok(Some(1)) }
//!         }
//!     }
//!     fn ledgers(&mut self) -> Ledgers<'_> { Ledgers { session: &mut self.ledger, agent: None } }
//!     fn add_unpriced(&mut self, _model: &str) -> Result<(), Self::Error> { Ok(()) }
//! }
//!
//! let mut table: ToolTable = ToolTable::new();
//! table.try_add("search", ToolRule::Run).unwrap();
//! table.try_add_cap("search", 1).unwrap();
//! let rules = Rules { max_repeats: 2, tools: &table, rate: &[], loops: engine::LoopRules::OFF, budget_per_call: engine::BudgetPerCall::All };
//! let mut session = Session { ledger: Ledger::new(0), ids: Vec::new(), repeats: Vec::new() };
//! session.ledger.set_max(Limit::ToolCalls, Some(5));
//! session.ledger.track_caps(&table).unwrap();
//!
//! let call = |id, input: &str| Call {
//!     name: "search",
//!     id,
//!     stop: None,
//!     fingerprint: Some(budgetgate_core::turn::ArgsFingerprint::of_json(input.as_bytes(), &mut [0; 64])
//!         .unwrap().with_name("search")),
//!     now_ms: 10,
//! };
//! let first = engine::decide(&mut session, &rules, &call("c1", "{}"), Counting::Record).unwrap();
//! assert_eq!(first, Decision::Run);
//! let again = engine::decide(&mut session, &rules, &call("c1", "{}"), Counting::Record).unwrap();
//! assert_eq!(again.refused(), Some(RefusalReason::DuplicateCallId));
//! let capped = engine::decide(&mut session, &rules, &call("c2", "{\"q\": 2}"), Counting::Record).unwrap();
//! assert_eq!(capped.refused(), Some(RefusalReason::ToolCap));
//! ```

use core::fmt;

use crate::budget::{CapReached, Exceeded, Ledger, Limit, Reservation};
use crate::pyjson::Quoted;
use crate::tools::{ToolName, ToolRule, ToolTable};
use crate::turn::{CallFingerprint, ExhaustReason, RefusalReason, StopReason};

pub mod loops;
mod model;
#[cfg(test)]
mod tests;

pub use loops::{LoopRules, NoProgress, Outcome, Pattern, Window, LOOP_WINDOW};

pub use model::{
    before_model_call, count_response, release, spent_in_memory, Admitted, ModelStop,
    ModelStopDetail, Response, WorstCase, ONE_MODEL_CALL,
};

/// One check of a proposed tool call, in the order of the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CallCheck {
    /// The response's stop reason (`cut-off`, `not-tool-turn`).
    StopReason,
    /// The tool's name (`invalid-name`).
    Name,
    /// The call id (`duplicate-call-id`, `call-id-capacity`).
    CallId,
    /// The arguments (`invalid-arguments`).
    Arguments,
    /// The limits checked before each model call (`budget-exhausted`).
    Budget,
    /// Repetitions (`repeat`, `repeat-capacity`).
    Repeat,
    /// Calls that would repeat a pattern without progress (`no-progress`;
    /// only with `[loops]`).
    NoProgress,
    /// Tool attempts (`tool-budget`).
    ToolBudget,
    /// The tool's own cap (`tool-cap`).
    ToolCap,
    /// The rate windows (`rate-limit`).
    Rate,
}

impl CallCheck {
    /// Every check, in the order they are made (`SPEC E`: one check order
    /// for every front-end).
    pub const ORDER: [Self; 10] = [
        Self::StopReason,
        Self::Name,
        Self::CallId,
        Self::Arguments,
        Self::Budget,
        Self::Repeat,
        Self::NoProgress,
        Self::ToolBudget,
        Self::ToolCap,
        Self::Rate,
    ];

    /// Whether the check reads the call alone (no session state): these come
    /// first, and a front-end may make them before it tracks the call
    /// ([`stateless`]).
    pub const fn is_stateless(self) -> bool {
        matches!(self, Self::StopReason | Self::Name)
    }
}

/// One tool call to decide, as every front-end hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    /// The tool's name, exactly as the model wrote it.
    pub name: &'a str,
    /// Its call id, unique in the session.
    pub id: &'a str,
    /// The stop reason of the response that holds it, where the front-end
    /// sees the response (replay, the turn gate); `None` where it does not
    /// (the hook, the gateway): the check is then skipped.
    pub stop: Option<StopReason>,
    /// The fingerprint of the tool and its canonical arguments, or `None`
    /// when they could not be read (refused `invalid-arguments`).
    pub fingerprint: Option<CallFingerprint>,
    /// Now, in the clock of the session's ledgers and rate windows (ms).
    pub now_ms: u64,
}

/// What a session remembered about a call id ([`State::see_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Seen {
    /// New to the session; it is remembered from now on.
    New,
    /// Used before in the session.
    Again,
    /// New, but the session has no room left to remember it.
    Full,
}

/// The ledgers a call counts in: the session's (it holds the tools' caps)
/// and, for a sub-agent's call, the sub-agent's.
pub struct Ledgers<'a, const TOOLS: usize = { crate::limits::MAX_TOOLS }> {
    /// The session's ledger.
    pub session: &'a mut Ledger<TOOLS>,
    /// The sub-agent's, for a sub-agent's call.
    pub agent: Option<&'a mut Ledger<TOOLS>>,
}

/// Whose budget a limit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Whose {
    /// The session's (its end ends the agent's loop).
    Session,
    /// The sub-agent's (its end ends that sub-agent's calls only).
    SubAgent,
}

impl Whose {
    /// `session` or `sub-agent`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::SubAgent => "sub-agent",
        }
    }
}

/// A sliding window of tool calls (`[rate]`): at most `max` calls let
/// through in any `span_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RateWindow {
    /// Which window.
    pub span: RateSpan,
    /// Calls let through in any one window.
    pub max: u32,
}

/// The rate windows a budget can set, shortest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RateSpan {
    /// Any 60 s (`per_minute`).
    Minute,
    /// Any 3 600 s (`per_hour`).
    Hour,
    /// Any 86 400 s (`per_day`).
    Day,
}

impl RateSpan {
    /// Every span, shortest first (the order they are checked in).
    pub const ALL: [Self; 3] = [Self::Minute, Self::Hour, Self::Day];

    /// The window's key in budget files and refusals (`per_minute`, …).
    pub const fn key(self) -> &'static str {
        match self {
            Self::Minute => "per_minute",
            Self::Hour => "per_hour",
            Self::Day => "per_day",
        }
    }

    /// The window's length in milliseconds.
    pub const fn millis(self) -> u64 {
        match self {
            Self::Minute => 60_000,
            Self::Hour => 3_600_000,
            Self::Day => 86_400_000,
        }
    }

    /// The window as a person says it (`minute`, `hour`, `day`).
    pub const fn noun(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
        }
    }
}

/// The longest rate window: calls older than this are never looked at again.
pub const LONGEST_RATE_WINDOW_MS: u64 = 86_400_000;

/// The rules a decision applies: from the budget.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a, const N: usize = { crate::limits::MAX_TOOLS }> {
    /// Calls of the same tool with the same arguments allowed.
    pub max_repeats: u32,
    /// The tool table: rules and caps.
    pub tools: &'a ToolTable<N>,
    /// The rate windows, shortest first (none: no rate limit).
    pub rate: &'a [RateWindow],
    /// The loop patterns looked for ([`LoopRules::OFF`]: none, without a
    /// `[loops]` table).
    pub loops: LoopRules,
    /// Whose limits checked before each model call are checked before each
    /// tool call too ([`CallCheck::Budget`]).
    pub budget_per_call: BudgetPerCall,
}

/// Whose limits of a model call ([`CallCheck::Budget`]) a tool call is
/// checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BudgetPerCall {
    /// The session's and the sub-agent's: for a front-end that cannot
    /// refuse a model call itself (the hook, the gateway).
    All,
    /// The sub-agent's only: for a front-end that stops the session before
    /// its model calls but cannot stop a sub-agent's (replay: the recording
    /// made them), so a sub-agent past its own limits has its calls refused
    /// while the session goes on.
    SubAgent,
}

/// How an attempt let through is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Counted at once (the turn gate, the hook: the call's outcome is not
    /// the budget's concern).
    Record,
    /// Reserved in the session's ledger until the call's outcome is known
    /// (the gateway): committed when it may have run, rolled back only when
    /// it is known not to have (`SPEC E`, reserve → commit → roll back).
    Reserve,
}

/// What a session remembers between calls, in memory or in a store. Every
/// method but [`ledgers`](Self::ledgers) may fail (a store that cannot be
/// read): the decision then fails with that error, and the front-end
/// refuses (fail closed).
pub trait State<const TOOLS: usize = { crate::limits::MAX_TOOLS }> {
    /// Why the state could not be read or written.
    type Error;

    /// Looks call id `id` up and remembers it for the rest of the session.
    fn see_id(&mut self, id: &str) -> Result<Seen, Self::Error>;

    /// Raises the repetition count of `key` and returns it; `None` when a
    /// new distinct call does not fit (`repeat-capacity`).
    fn raise_repeat(&mut self, key: CallFingerprint) -> Result<Option<u64>, Self::Error>;

    /// The ledgers the call counts in.
    fn ledgers(&mut self) -> Ledgers<'_, TOOLS>;

    /// Whether a response was counted without a price while a cost limit is
    /// set (a cost budget never counts a call as free). Asked before a model
    /// call and, with [`Rules::budget_per_call`], before a tool call.
    fn unpriced(&mut self) -> Result<bool, Self::Error> {
        Ok(false)
    }

    /// The session's last calls, for loop detection; asked only when the
    /// rules look for loops. `None`: the front-end keeps no window, and a
    /// call under `[loops]` is then refused `no-progress` (fail closed).
    fn loop_window(&mut self) -> Result<Option<&mut Window>, Self::Error> {
        Ok(None)
    }

    /// Remembers that a response of `model`, which has no price, was
    /// counted under a cost limit ([`count_response`]): the next model call
    /// is stopped `unpriced-model`, and [`unpriced`](Self::unpriced) answers
    /// `true` from now on.
    fn add_unpriced(&mut self, model: &str) -> Result<(), Self::Error>;

    /// How many calls were let through after `since_ms`, and the instant of
    /// the oldest of them. Asked only when the rules set rate windows.
    fn rate_calls_after(&mut self, since_ms: u64) -> Result<(u64, Option<u64>), Self::Error> {
        let _ = since_ms;
        Ok((0, None))
    }

    /// Remembers a call let through at `now_ms`, for the rate windows (kept
    /// at least [`LONGEST_RATE_WINDOW_MS`]). Called only when the rules set
    /// rate windows.
    fn add_rate_call(&mut self, now_ms: u64) -> Result<(), Self::Error> {
        let _ = now_ms;
        Ok(())
    }
}

/// The limit behind a refusal, as reports and `_meta` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LimitName {
    /// One of the ledger's limits.
    Ledger(Limit),
    /// `max_repeats`.
    MaxRepeats,
    /// The tool's own cap (`max_calls.TOOL`).
    ToolCap,
    /// A rate window.
    Rate(RateSpan),
    /// A loop pattern's threshold (`[loops]`).
    Loop(Pattern),
}

impl LimitName {
    /// The limit's key as reports and `_meta` name it (`tool_calls`,
    /// `max_repeats`, `max_calls.TOOL` for tool `tool`, `per_minute`).
    pub fn key_for(self, tool: &str) -> impl fmt::Display + '_ {
        KeyFor { name: self, tool }
    }
}

struct KeyFor<'a> {
    name: LimitName,
    tool: &'a str,
}

impl fmt::Display for KeyFor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            LimitName::Ledger(limit) => f.write_str(limit.key()),
            LimitName::MaxRepeats => f.write_str("max_repeats"),
            LimitName::ToolCap => write!(f, "max_calls.{}", self.tool),
            LimitName::Rate(span) => f.write_str(span.key()),
            LimitName::Loop(pattern) => f.write_str(pattern.key()),
        }
    }
}

/// Why a call was refused, with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Why {
    /// The reason word says it all (the stop reason, the name, the id, the
    /// arguments, a capacity, an unknown tool).
    Plain,
    /// A limit checked before each model call was reached.
    Exhausted {
        /// The session's limit or the sub-agent's.
        whose: Whose,
        /// The limit; `None`: a model without a price under a cost limit.
        exceeded: Option<Exceeded>,
    },
    /// The repetition count passed `max_repeats`.
    Repeat {
        /// Calls made, this one included.
        count: u64,
        /// `max_repeats`.
        max: u32,
    },
    /// No tool attempts left.
    ToolBudget {
        /// The session's or the sub-agent's.
        whose: Whose,
        /// Used and reserved.
        used: u64,
        /// The maximum.
        max: u64,
    },
    /// The tool's cap was reached.
    ToolCap(CapReached),
    /// The call would repeat a pattern without progress.
    NoProgress(NoProgress),
    /// A rate window is full.
    Rate {
        /// The window.
        window: RateWindow,
        /// Calls in the window.
        used: u64,
        /// Milliseconds until it has room again (at least 1).
        retry_after_ms: u64,
    },
}

/// A refused call: the contract's reason and the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Refusal {
    /// The reason (its word and the text the model reads:
    /// [`RefusalReason::as_str`], [`RefusalReason::message`]).
    pub reason: RefusalReason,
    /// The figures.
    pub why: Why,
}

impl Refusal {
    const fn plain(reason: RefusalReason) -> Self {
        Self {
            reason,
            why: Why::Plain,
        }
    }

    /// The limit that refused, what was used (with what is reserved) and its
    /// maximum; `None` for a refusal that is not a limit's.
    pub fn figures(&self) -> Option<(LimitName, u64, u64)> {
        match self.why {
            Why::Plain => None,
            Why::Exhausted { exceeded, .. } => {
                exceeded.map(|e| (LimitName::Ledger(e.limit), e.used, e.max))
            }
            Why::Repeat { count, max } => Some((LimitName::MaxRepeats, count, u64::from(max))),
            Why::ToolBudget { used, max, .. } => {
                Some((LimitName::Ledger(Limit::ToolCalls), used, max))
            }
            Why::ToolCap(cap) => {
                Some((LimitName::ToolCap, u64::from(cap.used), u64::from(cap.max)))
            }
            Why::Rate { window, used, .. } => {
                Some((LimitName::Rate(window.span), used, u64::from(window.max)))
            }
            Why::NoProgress(p) => Some((
                LimitName::Loop(p.pattern),
                u64::from(p.times),
                u64::from(p.max),
            )),
        }
    }

    /// Milliseconds until a full rate window has room again.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self.why {
            Why::Rate { retry_after_ms, .. } => Some(retry_after_ms),
            _ => None,
        }
    }

    /// Whether the session's own budget is spent, so that every next model
    /// call would be refused too: a front-end that runs the agent's loop
    /// ends it (the hook's `continue: false`).
    pub fn ends_session(&self) -> bool {
        matches!(
            self.why,
            Why::Exhausted {
                whose: Whose::Session,
                ..
            }
        )
    }

    /// The sentence that says why, for a person and the model: what the
    /// limit is, what was used. `call` names the call as the front-end shows
    /// it (see [`Shown`]).
    pub fn detail<'a>(&'a self, call: &'a Shown<'a>) -> Detail<'a> {
        Detail {
            refusal: self,
            call,
        }
    }
}

/// How a front-end names a call in a refusal's sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown<'a> {
    /// The tool's name as sent.
    pub name: &'a str,
    /// The call id as the model knows it (`the tool_use_id "toolu_1"`).
    pub id: &'a str,
    /// Where ids must be unique (`in this session`, `on this connection`).
    pub id_scope: &'a str,
    /// The model counted without a price, for `budget-exhausted` under a
    /// cost limit (the front-end's record of it).
    pub unpriced_model: Option<&'a str>,
}

/// A refusal's sentence ([`Refusal::detail`]).
pub struct Detail<'a> {
    refusal: &'a Refusal,
    call: &'a Shown<'a>,
}

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self.call;
        match (self.refusal.reason, self.refusal.why) {
            (_, Why::Exhausted { whose, exceeded }) => match (exceeded, call.unpriced_model) {
                (Some(e), _) => write!(f, "{} {e}", whose.as_str()),
                (None, Some(model)) => write!(
                    f,
                    "model {} has no price in the budget, and a cost budget never counts a call as free: add [prices.{}] (input, output, cache_read, cache_write: USD per million tokens) to the budget file",
                    Quoted(model),
                    Quoted(model)
                ),
                (None, None) => f.write_str(
                    "a model has no price in the budget, and a cost budget never counts a call as free",
                ),
            },
            (_, Why::Repeat { count, max }) => write!(
                f,
                "the same {} call with the same input was made {count} times (max_repeats {max})",
                call.name
            ),
            (_, Why::ToolBudget { used, max, .. }) => {
                write!(f, "{used} of {max} tool calls used")
            }
            (_, Why::ToolCap(cap)) => write!(
                f,
                "{} may be called at most {} times in this session ({} used)",
                call.name, cap.max, cap.used
            ),
            (_, Why::Rate {
                window,
                used,
                retry_after_ms,
            }) => write!(
                f,
                "{used} tool calls in the last {} ({} {}); the window reopens in {} s",
                window.span.noun(),
                window.span.key(),
                window.max,
                retry_after_ms.div_ceil(1000).max(1)
            ),
            (_, Why::NoProgress(p)) => loop_detail(f, call.name, &p),
            (RefusalReason::InvalidName, Why::Plain) => write!(
                f,
                "the tool name {} is outside [A-Za-z0-9_-]{{1,64}}",
                Quoted(call.name)
            ),
            (RefusalReason::DuplicateCallId, Why::Plain) => {
                write!(f, "{} was already used {}", call.id, call.id_scope)
            }
            (reason, Why::Plain) => f.write_str(reason.as_str()),
        }
    }
}

impl NoProgress {
    /// The engine's sentence of the pattern, `name` the tool of the call
    /// that completes it (unused for `same_answer`): what a `no-progress`
    /// refusal's [`detail`](Refusal::detail) says, for a front-end that
    /// refuses the model call after the pattern rather than a call.
    pub fn sentence<'a>(&'a self, name: &'a str) -> impl fmt::Display + 'a {
        struct Sentence<'a>(&'a NoProgress, &'a str);
        impl fmt::Display for Sentence<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                loop_detail(f, self.1, self.0)
            }
        }
        Sentence(self, name)
    }
}

fn loop_detail(f: &mut fmt::Formatter<'_>, name: &str, p: &NoProgress) -> fmt::Result {
    let before = p.times.saturating_sub(1);
    let s = if before == 1 { "" } else { "s" };
    match p.pattern {
        Pattern::SameOutcome => write!(
            f,
            "{name} has been called {before} time{s} with this input and returned the same result each time; this would be call {} (same_outcome {})",
            p.times, p.max
        ),
        Pattern::SameError => write!(
            f,
            "{name} has been called {before} time{s} with this input and failed with the same error each time; this would be try {} (same_error {})",
            p.times, p.max
        ),
        Pattern::SameAnswer => write!(
            f,
            "the model has given the same answer {} time{} in a row with no tool call between (same_answer {}); another model call would ask for it again",
            p.times,
            if p.times == 1 { "" } else { "s" },
            p.max
        ),
        Pattern::PingPong(_) => {
            write!(f, "{name}")?;
            let others = p.others.iter().flatten();
            let count = others.clone().count();
            for (i, other) in others.enumerate() {
                let sep = if i + 1 == count { " and " } else { ", " };
                write!(f, "{sep}{}", other.as_str())?;
            }
            write!(
                f,
                " have been called in turn for {before} whole cycle{s} with unchanged results; this call would complete cycle {} (ping_pong_cycles {})",
                p.times, p.max
            )
        }
    }
}

/// The decision on one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decision {
    /// Counted; it may run.
    Run,
    /// Counted; it may run once a person says yes.
    Ask,
    /// Not run; nothing counted but the call id and the repetition count.
    Refused(Refusal),
}

impl Decision {
    /// The refusal's reason, if refused.
    pub fn refused(&self) -> Option<RefusalReason> {
        match self {
            Self::Refused(r) => Some(r.reason),
            _ => None,
        }
    }
}

/// The refusal of the first stateless check ([`CallCheck::is_stateless`])
/// that applies: what [`decide`] would answer before it reads any state. A
/// front-end that tracks calls itself (the turn gate, per response) asks
/// this first to answer a call it cannot track.
pub fn stateless(call: &Call<'_>) -> Option<RefusalReason> {
    CallCheck::ORDER
        .into_iter()
        .filter(|c| c.is_stateless())
        .find_map(|check| stateless_check(check, call))
}

fn stateless_check(check: CallCheck, call: &Call<'_>) -> Option<RefusalReason> {
    match check {
        CallCheck::StopReason => match call.stop? {
            StopReason::ToolUse => None,
            // A cut-off call may have incomplete arguments: never run it.
            StopReason::MaxTokens => Some(RefusalReason::CutOff),
            _ => Some(RefusalReason::NotToolTurn),
        },
        // A name outside the grammar is never matched against a rule, never
        // counted as a repeat or an attempt, and never runs (`SPEC E`).
        CallCheck::Name => ToolName::new(call.name)
            .is_err()
            .then_some(RefusalReason::InvalidName),
        _ => None,
    }
}

/// Decides `call` against `state` under `rules`, in the order of
/// [`CallCheck::ORDER`], and counts it as `counting` says when it passes
/// (`SPEC C`, `SPEC E`). Errors only when `state` cannot be read or
/// written; the front-end then refuses. With [`Counting::Reserve`] the
/// session's ledger holds one tool call reserved ([`ONE_CALL`]) for a call
/// let through.
pub fn decide<S: State<T> + ?Sized, const T: usize, const N: usize>(
    state: &mut S,
    rules: &Rules<'_, N>,
    call: &Call<'_>,
    counting: Counting,
) -> Result<Decision, S::Error> {
    for check in CallCheck::ORDER {
        if let Some(refusal) = apply(check, state, rules, call)? {
            return Ok(Decision::Refused(refusal));
        }
    }
    count(state, rules, call, counting)?;
    Ok(match rules.tools.rule(call.name) {
        ToolRule::Run => Decision::Run,
        ToolRule::NeedsApproval => Decision::Ask,
        ToolRule::Unknown => Decision::Refused(Refusal::plain(RefusalReason::UnknownTool)),
    })
}

/// One tool call reserved: what [`Counting::Reserve`] holds per call.
pub const ONE_CALL: Reservation = Reservation {
    limit: Limit::ToolCalls,
    amount: 1,
};

fn apply<S: State<T> + ?Sized, const T: usize, const N: usize>(
    check: CallCheck,
    state: &mut S,
    rules: &Rules<'_, N>,
    call: &Call<'_>,
) -> Result<Option<Refusal>, S::Error> {
    let refusal = match check {
        CallCheck::StopReason | CallCheck::Name => stateless_check(check, call).map(Refusal::plain),
        CallCheck::CallId => match state.see_id(call.id)? {
            Seen::New => None,
            Seen::Again => Some(Refusal::plain(RefusalReason::DuplicateCallId)),
            Seen::Full => Some(Refusal::plain(RefusalReason::CallIdCapacity)),
        },
        CallCheck::Arguments => call
            .fingerprint
            .is_none()
            .then_some(Refusal::plain(RefusalReason::InvalidArguments)),
        CallCheck::Budget => match rules.budget_per_call {
            BudgetPerCall::All => budget_exhausted(state)?,
            BudgetPerCall::SubAgent => sub_agent_exhausted(state),
        },
        CallCheck::Repeat => match call.fingerprint {
            // The reference counts first (`vistas[clave] += 1`), then compares.
            Some(key) => match state.raise_repeat(key)? {
                None => Some(Refusal::plain(RefusalReason::RepeatCapacity)),
                Some(count) if count > u64::from(rules.max_repeats) => Some(Refusal {
                    reason: RefusalReason::Repeat,
                    why: Why::Repeat {
                        count,
                        max: rules.max_repeats,
                    },
                }),
                Some(_) => None,
            },
            None => Some(Refusal::plain(RefusalReason::InvalidArguments)),
        },
        CallCheck::NoProgress if rules.loops.is_on() => {
            let found = match (call.fingerprint, state.loop_window()?) {
                (Some(key), Some(window)) => {
                    loops::detect(window.steps(), &rules.loops, key).map(Why::NoProgress)
                }
                // No window to look in: refused (fail closed).
                _ => Some(Why::Plain),
            };
            found.map(|why| Refusal {
                reason: RefusalReason::NoProgress,
                why,
            })
        }
        CallCheck::NoProgress => None,
        CallCheck::ToolBudget => {
            let ledgers = state.ledgers();
            let agent = ledgers.agent.as_deref().map(|l| (Whose::SubAgent, l));
            let over = [(Whose::Session, &*ledgers.session)]
                .into_iter()
                .chain(agent)
                .find_map(|(whose, ledger)| {
                    // `used` includes what is reserved: calls in flight count.
                    ledger
                        .exhausted_at(Limit::ToolCalls, ledger.started_ms())
                        .map(|e| (whose, e))
                });
            over.map(|(whose, e)| Refusal {
                reason: RefusalReason::ToolBudget,
                why: Why::ToolBudget {
                    whose,
                    used: e.used,
                    max: e.max,
                },
            })
        }
        CallCheck::ToolCap => state
            .ledgers()
            .session
            .cap_reached(call.name, rules.tools.cap(call.name))
            .map(|cap| Refusal {
                reason: RefusalReason::ToolCap,
                why: Why::ToolCap(cap),
            }),
        CallCheck::Rate => rate_limited(state, rules, call.now_ms)?,
    };
    Ok(refusal)
}

/// [`CallCheck::Budget`] for a sub-agent's call alone
/// ([`BudgetPerCall::SubAgent`]): the first limit checked before each model
/// call that its own ledger has reached; nothing for the session's call.
fn sub_agent_exhausted<S: State<T> + ?Sized, const T: usize>(state: &mut S) -> Option<Refusal> {
    let agent = state.ledgers().agent?;
    model::sub_agent_stopped(agent).map(|stop| Refusal {
        reason: RefusalReason::BudgetExhausted,
        why: Why::Exhausted {
            whose: stop.whose,
            exceeded: Some(stop.exceeded),
        },
    })
}

/// The `budget-exhausted` check ([`CallCheck::Budget`]) alone: the first
/// limit checked before each model call that is reached, the session's then
/// the sub-agent's, or (under a cost limit) a model counted without a
/// price. For a front-end that also ends its agent's loop on it (the hook's
/// `Stop` event).
pub fn budget_exhausted<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
) -> Result<Option<Refusal>, S::Error> {
    // Time as the ledgers have observed it (the front-end brings it up to
    // date first): `now_ms` 0 adds nothing.
    Ok(model::stopped(state, 0)?.map(|stop| Refusal {
        reason: RefusalReason::BudgetExhausted,
        why: Why::Exhausted {
            whose: stop.whose,
            exceeded: (stop.reason != ExhaustReason::Unpriced).then_some(stop.exceeded),
        },
    }))
}

/// The first full rate window, shortest first.
fn rate_limited<S: State<T> + ?Sized, const T: usize, const N: usize>(
    state: &mut S,
    rules: &Rules<'_, N>,
    now_ms: u64,
) -> Result<Option<Refusal>, S::Error> {
    for &window in rules.rate {
        let span = window.span.millis();
        let (used, oldest) = state.rate_calls_after(now_ms.saturating_sub(span))?;
        if used >= u64::from(window.max) {
            let reopens = oldest.map_or(span, |t| t.saturating_add(span).saturating_sub(now_ms));
            return Ok(Some(Refusal {
                reason: RefusalReason::RateLimit,
                why: Why::Rate {
                    window,
                    used,
                    retry_after_ms: reopens.max(1),
                },
            }));
        }
    }
    Ok(None)
}

/// Counts a call let through: a tool attempt in every ledger it counts in,
/// and the tool's call against its cap in the session's.
fn count<S: State<T> + ?Sized, const T: usize, const N: usize>(
    state: &mut S,
    rules: &Rules<'_, N>,
    call: &Call<'_>,
    counting: Counting,
) -> Result<(), S::Error> {
    let cap = rules.tools.cap(call.name);
    let ledgers = state.ledgers();
    match counting {
        Counting::Record => ledgers.session.record(Limit::ToolCalls, 1),
        Counting::Reserve => {
            // Checked above (tool-budget), so it fits; a sum past u64::MAX
            // (no maximum set) counts the call at once instead: never less.
            if ledgers.session.try_reserve(Limit::ToolCalls, 1).is_err() {
                ledgers.session.record(Limit::ToolCalls, 1);
            }
        }
    }
    // Checked above (tool-cap); the caps are the session's.
    let _ = ledgers.session.try_count_tool(call.name, cap);
    // A sub-agent's ledger counts the attempt at once (it holds no
    // reservation and no cap of its own).
    if let Some(agent) = ledgers.agent {
        agent.record(Limit::ToolCalls, 1);
    }
    if !rules.rate.is_empty() {
        state.add_rate_call(call.now_ms)?;
    }
    // A call refused `unknown-tool` (counted, never run) is not a step.
    if rules.loops.is_on() && rules.tools.rule(call.name) != ToolRule::Unknown {
        if let (Some(key), Ok(name), Some(window)) = (
            call.fingerprint,
            ToolName::new(call.name),
            state.loop_window()?,
        ) {
            window.push(key, name);
        }
    }
    Ok(())
}

/// Forgets call `call` (its fingerprint) from the loop window: it was let
/// through but did not run after all (given back, its approval refused).
/// `false` when it is not there (no window, forgotten, or reported).
pub fn forget_call<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
    call: CallFingerprint,
) -> Result<bool, S::Error> {
    Ok(match state.loop_window()? {
        Some(window) => window.forget(call),
        None => false,
    })
}

/// Reports what call `call` (its fingerprint) returned, for loop detection:
/// the latest such call in the window without an outcome gets it. `false`
/// when there is none (forgotten, or no window).
pub fn report_outcome<S: State<T> + ?Sized, const T: usize>(
    state: &mut S,
    call: CallFingerprint,
    outcome: Outcome,
) -> Result<bool, S::Error> {
    Ok(match state.loop_window()? {
        Some(window) => window.report(call, outcome),
        None => false,
    })
}
