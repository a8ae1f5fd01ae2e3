//! The budget file of `budgetgate replay` (TOML; documented in
//! `docs/TURN-GATE.md`, example `examples/budget.toml`).

/// Largest budget file any front-end reads (bytes).
pub const MAX_BUDGET_BYTES: u64 = 1 << 20;

use budgetgate_core::engine::{LoopRules, RateSpan, RateWindow};
use budgetgate_core::tools::{ToolRule, ToolTable};
use budgetgate_core::turn::{TokenMode, ToolName, TurnLimits};
use serde::Deserialize;

/// Most seconds `max_seconds` may be when written as a float (an integer
/// may be as large as fits in `u64` milliseconds).
pub const MAX_SECONDS_FLOAT: f64 = 1e15;

/// Who says yes to tools that need approval during a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovePolicy {
    /// Every approval request is granted.
    All,
    /// Every approval request is refused (the default: no one is there to say yes).
    None,
    /// Granted for these tools only.
    Tools(Vec<String>),
}

/// Words that are surely meant as `all` or `none` rather than a tool name.
const POLICY_WORDS: [&str; 17] = [
    "some",
    "ask",
    "prompt",
    "default",
    "auto",
    "yes",
    "no",
    "true",
    "false",
    "any",
    "every",
    "everything",
    "nothing",
    "on",
    "off",
    "always",
    "never",
];

/// Whether `word` is one edit (insert, delete, substitute) or less from
/// `target`, ASCII case ignored.
fn within_one_edit(word: &str, target: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    let (a, b) = (lower.as_bytes(), target.as_bytes());
    if a.len() == b.len() {
        return a.iter().zip(b).filter(|(x, y)| x != y).count() <= 1;
    }
    let (short, long) = if a.len() < b.len() { (a, b) } else { (b, a) };
    if long.len() - short.len() != 1 {
        return false;
    }
    let prefix = short.iter().zip(long).take_while(|(x, y)| x == y).count();
    short[prefix..] == long[prefix + 1..]
}

/// What a name that is surely not meant as a tool name was meant as.
fn near_miss(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if within_one_edit(name, "all") {
        Some("all")
    } else if within_one_edit(name, "none") {
        Some("none")
    } else if POLICY_WORDS.contains(&lower.as_str()) {
        Some("all or none")
    } else {
        None
    }
}

impl ApprovePolicy {
    /// Reads `all`, `none` (any case) or a comma-separated list of tool
    /// names, with no tool needing approval known (see [`Self::parse_for`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_for(text, &[])
    }

    /// Reads `all`, `none` (any case) or a comma-separated list of tool
    /// names. Each name must be a tool name the gate accepts
    /// (`[A-Za-z0-9_-]{1,64}`); an empty entry is an error. A name that looks
    /// like a misspelt `all` or `none` (`al`, `some`, `no`, …) is an error
    /// unless it is one of `needs_approval`. The error does not name the
    /// setting: the caller does.
    pub fn parse_for(text: &str, needs_approval: &[String]) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("all") {
            return Ok(Self::All);
        }
        if trimmed.eq_ignore_ascii_case("none") {
            return Ok(Self::None);
        }
        if trimmed.is_empty() {
            return Err("all, none or a comma-separated list of tool names is needed".into());
        }
        let names: Vec<String> = trimmed.split(',').map(|n| n.trim().to_owned()).collect();
        Self::from_names(names, needs_approval)
    }

    /// A list of tool names, checked as [`Self::parse_for`] checks them.
    pub fn from_names(names: Vec<String>, needs_approval: &[String]) -> Result<Self, String> {
        if names.is_empty() {
            return Err("the list of tool names is empty (write all, none or tool names)".into());
        }
        for (index, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err(format!(
                    "entry {} of the list is empty (write all, none or tool names separated by single commas)",
                    index + 1
                ));
            }
            if let Err(e) = ToolName::new(name) {
                return Err(format!(
                    "{name:?} is not a tool name: it {e}; write all, none or tool names separated by commas"
                ));
            }
            if needs_approval.iter().any(|n| n == name) {
                continue;
            }
            if name.eq_ignore_ascii_case("all") || name.eq_ignore_ascii_case("none") {
                let word = name.to_ascii_lowercase();
                return Err(if names.len() > 1 {
                    format!(
                        "{name:?} cannot be combined with tool names: {word} stands alone; write {word}, or only tool names separated by commas"
                    )
                } else {
                    format!(
                        "{name:?} in a list is taken for a tool name, and no tool named {name:?} needs approval; write {word} alone, not in a list"
                    )
                });
            }
            if let Some(meant) = near_miss(name) {
                return Err(format!(
                    "{name:?} is neither all nor none, and no tool named {name:?} needs approval; did you mean {meant}?"
                ));
            }
        }
        Ok(Self::Tools(names))
    }

    /// Whether a call to `tool` is approved.
    pub fn grants(&self, tool: &str) -> bool {
        match self {
            Self::All => true,
            Self::None => false,
            Self::Tools(names) => names.iter().any(|n| n == tool),
        }
    }

    /// How the policy is shown.
    pub fn describe(&self) -> String {
        match self {
            Self::All => "all".into(),
            Self::None => "none".into(),
            Self::Tools(names) => names.join(","),
        }
    }
}

/// Everything a replay is decided with.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayBudget {
    /// The gate's limits.
    pub limits: TurnLimits,
    /// Reserve mode: the `max_tokens` to assume when the recording does not
    /// state the request's.
    pub reserve_max_tokens: Option<u64>,
    /// Reserve mode, for a front-end that can send a model call with a
    /// lower output bound (the proxy): the fewest reply tokens worth
    /// lowering a call's `max_tokens` to when its worst case does not fit;
    /// `None`: such a call is refused `token-reserve`.
    pub reserve_min_reply_tokens: Option<u64>,
    /// Tools the run knows; `None`: the tools the recording declares, or
    /// any tool if it declares none.
    pub known: Option<Vec<String>>,
    /// Tools that need approval.
    pub needs_approval: Vec<String>,
    /// The approver's answers.
    pub approve: ApprovePolicy,
    /// Prices per model (the cost budget, `max_cost_usd`, is
    /// `limits.max_cost_micros`, in micro-dollars), in US dollars per million tokens.
    pub prices: Vec<ModelPrice>,
    /// Per-tool call caps (`[tools] max_calls = { Bash = 20 }`).
    pub tool_caps: Vec<(String, u32)>,
    /// Limits each sub-agent has on its own (`[subagent]`), inside the
    /// session's budget.
    pub subagent: SubagentLimits,
    /// Whether server tool uses (`server_tool_use`: web search, code
    /// execution, run by the API) count toward `max_tool_calls`
    /// (`[budget] count_server_tools`, default `true`).
    pub count_server_tools: bool,
    /// Rate windows (`[rate]`): tool calls let through per minute, hour, day.
    pub rate: RateLimits,
    /// Largest tool result passed on, in bytes of its compact JSON
    /// (`[budget] max_result_bytes`, default 4096, the contract's bound).
    pub max_result_bytes: u64,
    /// Loop detection (`[loops]`): off without the table; a table without
    /// a key takes the recommended threshold ([`RECOMMENDED_LOOPS`]).
    pub loops: LoopRules,
}

/// The thresholds a `[loops]` table takes for the keys it leaves out: the
/// 4th call of the same tool and input after 3 that returned the same, the
/// 3rd after 2 that failed the same way, the 3rd cycle of two or three
/// calls in turn (each one step earlier than OpenHands' stuck detector
/// flags the same patterns: 4 identical observations, 3 identical errors,
/// 6 alternating steps), and the model call after the 3rd identical text
/// answer in a row (where OpenHands flags 3 agent messages in a row).
pub const RECOMMENDED_LOOPS: LoopRules = LoopRules {
    same_outcome: Some(4),
    same_error: Some(3),
    ping_pong_cycles: Some(3),
    same_answer: Some(3),
};

/// Most tools a budget's tool table lists (`needs_approval` and
/// `max_calls` together), as replay's rules hold them.
pub const BUDGET_TOOLS: usize = 256;

impl ReplayBudget {
    /// The budget file's tools as the core's one tool table, as the hook
    /// and the MCP gateway decide with it: each `needs_approval` tool asks
    /// a person, each `max_calls` tool has its cap, and every other name
    /// runs (those front-ends see only the agent's own tools; saying
    /// `unknown-tool` is replay's, which lists `known` tools itself).
    /// Errors name the key and the tool (a name outside the grammar, more
    /// than `BUDGET_TOOLS` (256) tools).
    pub fn tool_table(&self) -> Result<Box<ToolTable<BUDGET_TOOLS>>, String> {
        let mut table = Box::new(ToolTable::new());
        table.set_others(ToolRule::Run);
        for name in &self.needs_approval {
            if !table.contains(name) {
                table
                    .try_add(name, ToolRule::NeedsApproval)
                    .map_err(|e| format!("[tools] needs_approval: {name:?}: {e}"))?;
            }
        }
        for (name, max) in &self.tool_caps {
            table
                .try_add_cap(name, *max)
                .map_err(|e| format!("[tools] max_calls: {name:?}: {e}"))?;
        }
        Ok(table)
    }
}

/// The contract's result bound (`SPEC A2`): 4096 bytes of compact JSON.
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 4096;

/// Tool calls let through per sliding window (`[rate]`); `None`: no limit.
/// Checked by the hook and the MCP gateway after the per-tool cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Calls in any 60 s.
    pub per_minute: Option<u32>,
    /// Calls in any 3600 s.
    pub per_hour: Option<u32>,
    /// Calls in any 86 400 s.
    pub per_day: Option<u32>,
}

impl RateLimits {
    /// The windows set, shortest first, as the engine checks them.
    pub fn windows(&self) -> Vec<RateWindow> {
        RateSpan::ALL
            .into_iter()
            .zip([self.per_minute, self.per_hour, self.per_day])
            .filter_map(|(span, max)| max.map(|max| RateWindow { span, max }))
            .collect()
    }
}

/// A model's prices, in US dollars per million tokens (`[prices.MODEL]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// The model name, or a prefix of names ending before a `-`
    /// (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`).
    #[serde(skip)]
    pub model: String,
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cache reads (`cache_read_input_tokens`).
    #[serde(default)]
    pub cache_read: f64,
    /// Cache writes (`cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write: f64,
}

impl ModelPrice {
    /// Cost of `usage` in micro-dollars, rounded up (a dollar per million
    /// tokens is a micro-dollar per token): never less than billed.
    pub fn cost_micros(&self, usage: &budgetgate_core::TokenUsage) -> u64 {
        let micros = usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_input_tokens as f64 * self.cache_read
            + usage.cache_creation_input_tokens as f64 * self.cache_write;
        // At most u64::MAX: `as` saturates.
        micros.ceil() as u64
    }
}

/// The price of `model`: an exact entry, else the entry the name is a
/// dated snapshot of: the entry, then `-` or `@` and a date (`20250929`,
/// `2025-09-29`), or `-latest` (`claude-sonnet-4-5-20250929` is priced as
/// `claude-sonnet-4-5`). Any other name that merely begins with an entry
/// is another model, often at another price (`gpt-5-pro` is not
/// `gpt-5`), so it has none. `None`: no price (refused in cost mode).
pub fn price_of<'a>(prices: &'a [ModelPrice], model: &str) -> Option<&'a ModelPrice> {
    prices.iter().find(|p| p.model == model).or_else(|| {
        prices.iter().find(|p| {
            model
                .strip_prefix(p.model.as_str())
                .is_some_and(snapshot_suffix)
        })
    })
}

/// Whether `rest`, after a priced name, makes it a dated snapshot (or the
/// latest one) of that model.
fn snapshot_suffix(rest: &str) -> bool {
    let Some(date) = rest.strip_prefix('-').or_else(|| rest.strip_prefix('@')) else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let dashed = || {
        let mut parts = date.split('-');
        matches!(
            (parts.next(), parts.next(), parts.next(), parts.next()),
            (Some(y), Some(m), Some(d), None) if digits(y, 4) && digits(m, 2) && digits(d, 2)
        )
    };
    digits(date, 8) || dashed() || (rest == "-latest")
}

/// What each sub-agent may use on its own (`[subagent]`); `None`: no limit of
/// its own (the session's budget still holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentLimits {
    /// Model calls.
    pub max_model_calls: Option<u32>,
    /// Tokens, as `[budget] max_tokens` counts them.
    pub max_tokens: Option<u64>,
    /// Tool attempts.
    pub max_tool_calls: Option<u32>,
}

impl Default for ReplayBudget {
    fn default() -> Self {
        Self {
            limits: TurnLimits::DEFAULT,
            reserve_max_tokens: None,
            reserve_min_reply_tokens: None,
            known: None,
            needs_approval: Vec::new(),
            approve: ApprovePolicy::None,
            prices: Vec::new(),
            tool_caps: Vec::new(),
            subagent: SubagentLimits::default(),
            count_server_tools: true,
            rate: RateLimits::default(),
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            loops: LoopRules::OFF,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    budget: BudgetSection,
    #[serde(default)]
    tools: ToolsSection,
    #[serde(default)]
    prices: std::collections::BTreeMap<String, ModelPrice>,
    #[serde(default)]
    subagent: SubagentLimits,
    #[serde(default)]
    rate: RateLimits,
    loops: Option<LoopsSection>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoopsSection {
    same_outcome: Option<u16>,
    same_error: Option<u16>,
    ping_pong_cycles: Option<u16>,
    same_answer: Option<u16>,
}

impl LoopsSection {
    /// The rules, each key checked: at least 2 (the first call is never a
    /// loop), and no more than the window of calls remembered can show.
    fn rules(&self) -> Result<LoopRules, String> {
        let window = budgetgate_core::engine::LOOP_WINDOW as u16;
        let remembered = format!("the last {window} calls are remembered");
        let check = |key: &str, v: Option<u16>, default: Option<u16>, most: u16| {
            let why = if key == "same_answer" {
                "answers are counted, not remembered"
            } else {
                remembered.as_str()
            };
            match v {
                None => Ok(default),
                Some(n) if (2..=most).contains(&n) => Ok(Some(n)),
                Some(n) => Err(format!(
                    "[loops] {key} = {n} is out of range: from 2 to {most} ({why})"
                )),
            }
        };
        let r = RECOMMENDED_LOOPS;
        Ok(LoopRules {
            same_outcome: check("same_outcome", self.same_outcome, r.same_outcome, window)?,
            same_error: check("same_error", self.same_error, r.same_error, window)?,
            ping_pong_cycles: check(
                "ping_pong_cycles",
                self.ping_pong_cycles,
                r.ping_pong_cycles,
                window / 2,
            )?,
            same_answer: check("same_answer", self.same_answer, r.same_answer, 100)?,
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BudgetSection {
    max_model_calls: Option<u32>,
    max_tokens: Option<u64>,
    max_seconds: Option<Seconds>,
    max_repeats: Option<u32>,
    max_tool_calls: Option<u32>,
    token_mode: Option<String>,
    reserve_max_tokens: Option<u64>,
    reserve_min_reply_tokens: Option<u64>,
    max_cost_usd: Option<f64>,
    count_server_tools: Option<bool>,
    max_result_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Int(u64),
    Float(f64),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolsSection {
    known: Option<Vec<String>>,
    #[serde(default)]
    needs_approval: Vec<String>,
    approve: Option<ApproveSetting>,
    #[serde(default)]
    max_calls: std::collections::BTreeMap<String, u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ApproveSetting {
    Word(String),
    List(Vec<String>),
}

/// `max_seconds` written as a float, in milliseconds: rounded to the
/// nearest millisecond; negative, not a number, above
/// [`MAX_SECONDS_FLOAT`] or non-zero below one millisecond (which would
/// round to a limit of 0) is an error.
fn seconds_to_millis(s: f64) -> Result<u64, String> {
    let shown = if s != 0.0 && (s.abs() >= 1e6 || s.abs() < 1e-3) {
        format!("{s:e}")
    } else {
        s.to_string()
    };
    if !(0.0..=MAX_SECONDS_FLOAT).contains(&s) {
        return Err(format!(
            "max_seconds = {shown} is out of range: it must be from 0 to 1e15 seconds"
        ));
    }
    if s > 0.0 && s < 0.001 {
        return Err(format!(
            "max_seconds = {shown} is below one millisecond, the time limit's unit: write 0 (stop before the first model call) or at least 0.001"
        ));
    }
    // At most 1e18 here: fits in u64.
    Ok((s * 1000.0).round() as u64)
}

/// A TOML error as `line L, column C: message`, without the quoted source
/// line the crate adds: a hostile budget's line can be 1 MiB long.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// Reads the budget file at `path`: a regular file (not a FIFO or a device,
/// which could block or never end) of at most 1 MiB, parsed by
/// [`parse_budget`]. The error names the file (`budget file PATH: …`).
/// Every command that takes `--budget` reads it this way.
pub fn read_budget_file(path: &std::path::Path) -> Result<ReplayBudget, String> {
    read_budget(path, StdinBudget::Refused).map_err(|(shown, e)| format!("{shown}: {e}"))
}

/// Whether `-` names standard input as the budget file (`replay`, whose
/// standard input is otherwise unused) or a file called `-` (the hook and
/// the gateways, whose standard input is the agent's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinBudget {
    /// `-` is standard input.
    Allowed,
    /// `-` is a file of that name.
    Refused,
}

/// The one reader of budget files, for every command that takes `--budget`:
/// at most [`MAX_BUDGET_BYTES`] (an endless or larger input
/// is refused unread), never a FIFO or a folder (which could block), as
/// UTF-8, parsed by [`parse_budget`]. The error in two parts: what was read
/// (`budget file PATH`) and what is wrong with it.
pub fn read_budget(
    path: &std::path::Path,
    stdin: StdinBudget,
) -> Result<ReplayBudget, (String, String)> {
    let is_stdin = path == std::path::Path::new("-");
    let (shown, read) = if is_stdin && stdin == StdinBudget::Refused {
        let file = std::path::Path::new(".").join(path);
        (
            format!("budget file {}", path.display()),
            crate::input::read_path(&file, MAX_BUDGET_BYTES),
        )
    } else {
        (
            format!("budget file {}", crate::input::display_name(path)),
            crate::input::read_path(path, MAX_BUDGET_BYTES),
        )
    };
    let text = crate::input::text_of(read, "a budget file").map_err(|e| {
        let e = match stdin {
            StdinBudget::Allowed => e,
            // No advice to read standard input where it is the agent's.
            StdinBudget::Refused => e.replace("; give - to read standard input", ""),
        };
        (shown.clone(), e)
    })?;
    let budget = parse_budget(&text).map_err(|e| (shown.clone(), e))?;
    Ok(budget)
}

/// Reads a budget file; anything missing keeps the reference's default.
/// Errors name the line and column (TOML syntax, wrong types, numbers out of
/// range, nesting past the TOML reader's limit) or the key.
pub fn parse_budget(text: &str) -> Result<ReplayBudget, String> {
    let file: File = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    let d = TurnLimits::DEFAULT;
    let b = file.budget;
    let max_millis = match b.max_seconds {
        None => d.max_millis,
        Some(Seconds::Int(s)) => s.checked_mul(1000).ok_or_else(|| {
            format!(
                "max_seconds = {s} is out of range: at most {} seconds",
                u64::MAX / 1000
            )
        })?,
        Some(Seconds::Float(s)) => seconds_to_millis(s)?,
    };
    let token_mode = match b.token_mode.as_deref() {
        None | Some("after-the-fact") => TokenMode::AfterTheFact,
        Some("reserve") => TokenMode::Reserve,
        Some(other) => {
            return Err(format!(
                "token_mode must be \"after-the-fact\" or \"reserve\", not {other:?}"
            ))
        }
    };
    if let Some(min) = b.reserve_min_reply_tokens {
        if token_mode != TokenMode::Reserve {
            return Err("reserve_min_reply_tokens lowers a call's max_tokens to what a reservation leaves, so it needs token_mode = \"reserve\"".into());
        }
        if min == 0 {
            return Err("reserve_min_reply_tokens = 0: a reply of no tokens is of no use; set at least 1, or leave it out to refuse a call that does not fit".into());
        }
    }
    for (key, names) in [
        ("known", file.tools.known.as_deref().unwrap_or_default()),
        ("needs_approval", &file.tools.needs_approval[..]),
    ] {
        for name in names {
            ToolName::new(name)
                .map_err(|e| format!("[tools] {key}: {name:?} is not a tool name: it {e}"))?;
        }
    }
    let needs_approval = &file.tools.needs_approval;
    let approve = match file.tools.approve {
        None => Ok(ApprovePolicy::None),
        Some(ApproveSetting::Word(w)) => ApprovePolicy::parse_for(&w, needs_approval),
        Some(ApproveSetting::List(names)) => ApprovePolicy::from_names(names, needs_approval),
    }
    .map_err(|e| format!("[tools] approve: {e}"))?;
    let max_cost_micros = match b.max_cost_usd {
        None => None,
        Some(usd) if (0.0..=1e12).contains(&usd) => Some((usd * 1e6).round() as u64),
        Some(usd) => {
            return Err(format!(
                "max_cost_usd = {usd} is out of range: it must be from 0 to 1e12 dollars"
            ))
        }
    };
    let mut prices = Vec::new();
    for (model, mut price) in file.prices {
        for (what, value) in [
            ("input", price.input),
            ("output", price.output),
            ("cache_read", price.cache_read),
            ("cache_write", price.cache_write),
        ] {
            if !(0.0..=1e9).contains(&value) {
                return Err(format!(
                    "[prices.{model:?}] {what} = {value} is out of range: dollars per million tokens, from 0 to 1e9"
                ));
            }
        }
        price.model = model;
        prices.push(price);
    }
    if max_cost_micros.is_some() && prices.is_empty() {
        return Err("max_cost_usd needs a [prices.MODEL] table: in cost mode a model with no price is refused, never counted as free".into());
    }
    let mut tool_caps = Vec::new();
    for (name, max) in file.tools.max_calls {
        ToolName::new(&name)
            .map_err(|e| format!("[tools] max_calls: {name:?} is not a tool name: it {e}"))?;
        tool_caps.push((name, max));
    }
    if tool_caps.len() > budgetgate_core::limits::MAX_TOOLS {
        return Err(format!(
            "[tools] max_calls: at most {} tools have a cap of their own",
            budgetgate_core::limits::MAX_TOOLS
        ));
    }
    let loops = match &file.loops {
        None => LoopRules::OFF,
        Some(section) => section.rules()?,
    };
    Ok(ReplayBudget {
        loops,
        prices,
        tool_caps,
        subagent: file.subagent,
        count_server_tools: b.count_server_tools.unwrap_or(true),
        rate: file.rate,
        max_result_bytes: b.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES),
        limits: TurnLimits {
            max_model_calls: b.max_model_calls.unwrap_or(d.max_model_calls),
            max_tokens: b.max_tokens.unwrap_or(d.max_tokens),
            max_millis,
            max_repeats: b.max_repeats.unwrap_or(d.max_repeats),
            max_tool_calls: b.max_tool_calls,
            token_mode,
            max_cost_micros,
        },
        reserve_max_tokens: b.reserve_max_tokens,
        reserve_min_reply_tokens: b.reserve_min_reply_tokens,
        known: file.tools.known,
        needs_approval: file.tools.needs_approval,
        approve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_reference_defaults() {
        assert_eq!(parse_budget("").unwrap(), ReplayBudget::default());
    }

    #[test]
    fn every_key() {
        let b = parse_budget(
            r#"
            [budget]
            max_model_calls = 5
            max_tokens = 1000
            max_seconds = 1.5
            max_repeats = 1
            max_tool_calls = 3
            token_mode = "reserve"
            reserve_max_tokens = 256
            reserve_min_reply_tokens = 64
            [tools]
            known = ["a", "b"]
            needs_approval = ["b"]
            approve = ["b"]
            "#,
        )
        .unwrap();
        assert_eq!(b.reserve_min_reply_tokens, Some(64));
        assert_eq!(b.limits.max_millis, 1_500);
        assert_eq!(b.limits.token_mode, TokenMode::Reserve);
        assert_eq!(b.limits.max_tool_calls, Some(3));
        assert_eq!(b.approve, ApprovePolicy::Tools(vec!["b".into()]));
        assert_eq!(
            parse_budget("[tools]\napprove = \"all\"").unwrap().approve,
            ApprovePolicy::All
        );
    }

    #[test]
    fn a_reply_minimum_needs_reserve_mode_and_at_least_one_token() {
        let err = parse_budget("[budget]\nreserve_min_reply_tokens = 10").unwrap_err();
        assert!(err.contains("needs token_mode = \"reserve\""), "{err}");
        let err = parse_budget("[budget]\ntoken_mode = \"reserve\"\nreserve_min_reply_tokens = 0")
            .unwrap_err();
        assert!(err.contains("reserve_min_reply_tokens = 0"), "{err}");
        let b = parse_budget("[budget]\ntoken_mode = \"reserve\"\nreserve_min_reply_tokens = 1")
            .unwrap();
        assert_eq!(b.reserve_min_reply_tokens, Some(1));
    }

    /// Issue 11 (one tool table): the hook's and the gateway's tools are
    /// the core's table built from the budget file: `needs_approval` asks,
    /// `max_calls` caps (a tool both capped and asked keeps both), every
    /// other name runs, and a name outside the grammar never does.
    #[test]
    fn a_budgets_tool_table_asks_caps_and_runs_the_rest() {
        let b = parse_budget(
            "[tools]\nneeds_approval = [\"send_email\"]\nmax_calls = { Bash = 20, send_email = 1 }\n",
        )
        .unwrap();
        let t = b.tool_table().unwrap();
        assert_eq!(t.rule("send_email"), ToolRule::NeedsApproval);
        assert_eq!(t.cap("send_email"), Some(1));
        assert_eq!((t.rule("Bash"), t.cap("Bash")), (ToolRule::Run, Some(20)));
        assert_eq!((t.rule("Read"), t.cap("Read")), (ToolRule::Run, None));
        assert_eq!(t.rule("Read all"), ToolRule::Unknown);
        let mut many = b.clone();
        many.needs_approval = (0..=BUDGET_TOOLS).map(|i| format!("t{i}")).collect();
        assert!(many.tool_table().unwrap_err().contains("needs_approval"));
    }

    #[test]
    fn cost_caps_and_subagent_keys() {
        let b = parse_budget(
            r#"
            [budget]
            max_cost_usd = 2.5
            [tools]
            max_calls = { Bash = 20, send_email = 1 }
            [prices.claude-sonnet-4-5]
            input = 3.0
            output = 15.0
            cache_read = 0.3
            cache_write = 3.75
            [subagent]
            max_tokens = 1000
            "#,
        )
        .unwrap();
        assert_eq!(b.limits.max_cost_micros, Some(2_500_000));
        assert_eq!(
            b.tool_caps,
            [("Bash".to_string(), 20), ("send_email".to_string(), 1)]
        );
        assert_eq!(b.subagent.max_tokens, Some(1000));
        let price = price_of(&b.prices, "claude-sonnet-4-5-20250929").unwrap();
        let usage = budgetgate_core::TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 1,
            cache_read_input_tokens: 0,
            cache_creation_input_tokens: 0,
        };
        assert_eq!(price.cost_micros(&usage), 3_000_015);
        assert!(price_of(&b.prices, "claude-sonnet-4-50").is_none());
        assert!(price_of(&b.prices, "claude-opus-4").is_none());
    }

    /// A hostile trial: `gpt-5-pro` was priced as `gpt-5` (about a
    /// twelfth of its list price). A name that begins with a priced one is
    /// priced by it only as a dated snapshot of it, or its latest.
    #[test]
    fn only_a_dated_snapshot_takes_its_models_price() {
        let b = parse_budget(
            "[prices.gpt-5]\ninput = 1.25\noutput = 10\n[prices.claude-sonnet-4-5]\ninput = 3\noutput = 15\n",
        )
        .unwrap();
        for (model, priced) in [
            ("gpt-5", Some("gpt-5")),
            ("gpt-5-2025-08-07", Some("gpt-5")),
            ("claude-sonnet-4-5-20250929", Some("claude-sonnet-4-5")),
            ("claude-sonnet-4-5@20250929", Some("claude-sonnet-4-5")),
            ("gpt-5-latest", Some("gpt-5")),
            ("gpt-5-pro", None),
            ("gpt-5-mini", None),
            ("gpt-5-", None),
            ("gpt-5--x", None),
            ("gpt-5-2025080", None),
            ("gpt-5-202508070", None),
            ("gpt-5-2025-8-07", None),
            ("gpt-5-2025-08-07-pro", None),
            ("gpt-5-pro-2025-10-06", None),
            ("claude-sonnet-4-5-thinking", None),
            ("gpt-50", None),
        ] {
            assert_eq!(
                price_of(&b.prices, model).map(|p| p.model.as_str()),
                priced,
                "{model}"
            );
        }
    }

    #[test]
    fn a_cost_budget_without_prices_is_refused() {
        let err = parse_budget("[budget]\nmax_cost_usd = 1").unwrap_err();
        assert!(err.contains("never counted as free"), "{err}");
        assert!(parse_budget("[budget]\nmax_cost_usd = -1.0").is_err());
        assert!(parse_budget("[prices.m]\ninput = -1.0\noutput = 1.0").is_err());
        assert!(parse_budget("[prices.m]\ninput = 1.0").is_err());
        assert!(parse_budget("[tools]\nmax_calls = { \"a b\" = 1 }").is_err());
    }

    #[test]
    fn rate_windows_and_the_result_bound() {
        let b = parse_budget(
            "[budget]\nmax_result_bytes = 100\n[rate]\nper_minute = 30\nper_day = 1000",
        )
        .unwrap();
        assert_eq!(b.max_result_bytes, 100);
        assert_eq!(
            b.rate.windows(),
            [
                RateWindow {
                    span: RateSpan::Minute,
                    max: 30
                },
                RateWindow {
                    span: RateSpan::Day,
                    max: 1000
                }
            ]
        );
        assert!(!b.rate.windows().is_empty());
        assert!(ReplayBudget::default().rate.windows().is_empty());
        assert_eq!(ReplayBudget::default().max_result_bytes, 4096);
        assert!(parse_budget("[rate]\nper_second = 1").is_err());
        assert!(parse_budget("[rate]\nper_minute = -1").is_err());
    }

    #[test]
    fn mistakes_are_errors() {
        assert!(parse_budget("[budget]\nmax_step = 3").is_err());
        assert!(parse_budget("[budget]\nmax_tokens = -1").is_err());
        assert!(parse_budget("[budget]\ntoken_mode = \"later\"").is_err());
        assert!(parse_budget("[budget]\nmax_seconds = -2.0").is_err());
        assert!(ApprovePolicy::parse(" , ").is_err());
    }

    #[test]
    fn approve_settings_are_checked_tool_names_or_all_or_none() {
        // Any case of all / none.
        for (text, policy) in [("All", ApprovePolicy::All), (" NONE ", ApprovePolicy::None)] {
            assert_eq!(ApprovePolicy::parse(text).unwrap(), policy);
        }
        // Near misses of all / none are errors suggesting them.
        for word in ["al", "alll", "some", "non", "no", "yes", "Nothing"] {
            let err = ApprovePolicy::parse(word).unwrap_err();
            assert!(err.contains("did you mean"), "{word}: {err}");
            let toml = format!("[tools]\napprove = {word:?}");
            let err = parse_budget(&toml).unwrap_err();
            assert!(err.contains("did you mean"), "{word}: {err}");
            let toml = format!("[tools]\napprove = [{word:?}]");
            assert!(parse_budget(&toml).is_err(), "{word}");
        }
        // ... unless a tool of that name needs approval.
        let b = parse_budget("[tools]\nneeds_approval = [\"some\"]\napprove = \"some\"").unwrap();
        assert_eq!(b.approve, ApprovePolicy::Tools(vec!["some".into()]));
        // Empty entries and invalid names are errors.
        for text in [
            "issue_refund,,x",
            "issue_refund,",
            ",a",
            "issue_refund,x y",
            "é",
        ] {
            assert!(ApprovePolicy::parse(text).is_err(), "{text}");
        }
        let err = ApprovePolicy::parse("issue_refund,x y").unwrap_err();
        assert!(err.contains("\"x y\" is not a tool name"), "{err}");
        assert!(parse_budget("[tools]\napprove = []").is_err());
        assert!(parse_budget("[tools]\napprove = [\"\"]").is_err());
        assert!(parse_budget("[tools]\nneeds_approval = [\"x y\"]").is_err());
        assert!(parse_budget("[tools]\nknown = [\"\"]").is_err());
        // Names the gate accepts: up to 64 characters, digits first allowed.
        let long = "mcp__plugin_playwright_playwright__browser_navigate";
        assert_eq!(
            ApprovePolicy::parse(&format!("{long},0day")).unwrap(),
            ApprovePolicy::Tools(vec![long.into(), "0day".into()])
        );
    }

    #[test]
    fn all_or_none_combined_with_tool_names_is_refused_with_its_own_message() {
        for text in ["all,Bash", "Bash, NONE", "None,all"] {
            let err = ApprovePolicy::parse_for(text, &["Bash".into()]).unwrap_err();
            assert!(
                err.contains("cannot be combined with tool names"),
                "{text}: {err}"
            );
            assert!(!err.contains("did you mean"), "{text}: {err}");
        }
        let err =
            parse_budget("[tools]\nneeds_approval = [\"Bash\"]\napprove = [\"all\"]").unwrap_err();
        assert!(err.contains("write all alone, not in a list"), "{err}");
        // A tool really named `all` that needs approval is a name.
        assert_eq!(
            ApprovePolicy::parse_for("all,Bash", &["all".into(), "Bash".into()]).unwrap(),
            ApprovePolicy::Tools(vec!["all".into(), "Bash".into()])
        );
    }

    #[test]
    fn max_seconds_range_and_sub_millisecond_values() {
        let millis = |v: &str| parse_budget(&format!("[budget]\nmax_seconds = {v}"));
        assert_eq!(millis("0").unwrap().limits.max_millis, 0);
        assert_eq!(millis("0.0").unwrap().limits.max_millis, 0);
        assert_eq!(millis("0.001").unwrap().limits.max_millis, 1);
        assert_eq!(millis("0.0015").unwrap().limits.max_millis, 2);
        assert_eq!(millis("5.3").unwrap().limits.max_millis, 5_300);
        let err = millis("0.0001").unwrap_err();
        assert!(err.contains("below one millisecond"), "{err}");
        for v in ["1e300", "-2.0", "-2", "nan", "inf"] {
            let err = millis(v).unwrap_err();
            assert!(err.contains("from 0 to 1e15 seconds"), "{v}: {err}");
        }
        assert!(millis("1e300").unwrap_err().contains("1e300"));
        let err = millis("18446744073709552").unwrap_err();
        assert!(err.contains("out of range"), "{err}");
    }

    #[test]
    fn loops_are_off_without_the_table_and_take_the_recommended_thresholds_with_it() {
        assert_eq!(parse_budget("").unwrap().loops, LoopRules::OFF);
        assert_eq!(parse_budget("[loops]").unwrap().loops, RECOMMENDED_LOOPS);
        let b = parse_budget("[loops]\nsame_outcome = 6\nping_pong_cycles = 2").unwrap();
        assert_eq!(
            b.loops,
            LoopRules {
                same_outcome: Some(6),
                same_error: Some(3),
                ping_pong_cycles: Some(2),
                same_answer: Some(3),
            }
        );
        assert_eq!(
            parse_budget("[loops]\nsame_error = 32")
                .unwrap()
                .loops
                .same_error,
            Some(32)
        );
        for (text, key) in [
            (
                "[loops]\nsame_outcome = 1",
                "same_outcome = 1 is out of range: from 2 to 32",
            ),
            (
                "[loops]\nsame_error = 33",
                "same_error = 33 is out of range",
            ),
            (
                "[loops]\nping_pong_cycles = 17",
                "ping_pong_cycles = 17 is out of range: from 2 to 16",
            ),
            (
                "[loops]\nsame_answer = 101",
                "same_answer = 101 is out of range: from 2 to 100 (answers are counted, not remembered)",
            ),
            ("[loops]\nsame_outcome = -1", "line 2"),
            ("[loops]\nsame = 3", "unknown field `same`"),
        ] {
            let e = parse_budget(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
