//! The budget a gate runs with, as data and in words: the `budget` object
//! of `replay`'s report and its `budget:` lines, which `budgetgate proxy`
//! says at start too (one wording of the budget in force, `SPEC C`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::budget_file::ReplayBudget;
use crate::term::terminal_safe;

/// The limits a gate runs with (`replay`'s `budget` in `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    /// Most model calls.
    pub max_model_calls: u32,
    /// Most tokens.
    pub max_tokens: u64,
    /// Most wall time, in milliseconds.
    pub max_millis: u64,
    /// Most identical calls.
    pub max_repeats: u32,
    /// Most tool attempts, if limited.
    pub max_tool_calls: Option<u32>,
    /// Most cost in micro-dollars (`max_cost_usd`), if limited.
    pub max_cost_micro_usd: Option<u64>,
    /// Per-tool call caps (`[tools] max_calls`), tool name to most calls.
    pub tool_caps: BTreeMap<String, u32>,
    /// `after-the-fact` or `reserve`.
    pub token_mode: &'static str,
    /// Tools that need approval.
    pub needs_approval: Vec<String>,
    /// The approver's answers.
    pub approve: String,
    /// Which tools are known: `listed`, `declared by the recording`, or `any`.
    pub known_tools: String,
    /// Whether server tool uses count toward `max_tool_calls`.
    pub count_server_tools: bool,
}

impl BudgetReport {
    /// The limits of `budget`; its known tools are those it lists, else
    /// any (a replay says which its recording declared instead).
    pub fn new(budget: &ReplayBudget) -> Self {
        let limits = budget.limits;
        Self {
            max_model_calls: limits.max_model_calls,
            max_tokens: limits.max_tokens,
            max_millis: limits.max_millis,
            max_repeats: limits.max_repeats,
            max_tool_calls: limits.max_tool_calls,
            max_cost_micro_usd: limits.max_cost_micros,
            tool_caps: budget.tool_caps.iter().cloned().collect(),
            token_mode: limits.token_mode.as_str(),
            needs_approval: budget.needs_approval.clone(),
            approve: budget.approve.describe(),
            known_tools: if budget.known.is_some() {
                "listed in the budget file"
            } else {
                "any"
            }
            .to_owned(),
            count_server_tools: budget.count_server_tools,
        }
    }

    /// The limits in words: `budget: 15 model calls, 150000 tokens
    /// (after-the-fact), 120 s, 2 repeats, tool calls unlimited`.
    pub fn limits_line(&self) -> String {
        format!(
            "budget: {} model calls, {} tokens ({}), {} s, {} repeats, tool calls {}",
            self.max_model_calls,
            self.max_tokens,
            self.token_mode,
            fmt_seconds(self.max_millis),
            self.max_repeats,
            self.max_tool_calls
                .map_or("unlimited".into(), |n| n.to_string()),
        )
    }

    /// The cost and per-tool caps in words (`budget: cost $25.000000;
    /// per-tool caps: Bash at most 400`), when the budget has either; the
    /// tool names shown through [`terminal_safe`].
    pub fn cost_line(&self) -> Option<String> {
        if self.max_cost_micro_usd.is_none() && self.tool_caps.is_empty() {
            return None;
        }
        let caps: Vec<String> = self
            .tool_caps
            .iter()
            .map(|(tool, max)| format!("{} at most {max}", terminal_safe(tool)))
            .collect();
        Some(format!(
            "budget: cost {}; per-tool caps: {}",
            self.max_cost_micro_usd.map_or("unlimited".into(), fmt_usd),
            if caps.is_empty() {
                "none".into()
            } else {
                caps.join(", ")
            },
        ))
    }
}

/// Micro-dollars as dollars for a person: `$2.500000`.
pub fn fmt_usd(micros: u64) -> String {
    format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

fn fmt_seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{:.3}", ms as f64 / 1000.0)
    }
}
