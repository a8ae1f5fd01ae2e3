//! The budget file of `budgetgate replay` (TOML; documented in
//! `docs/TURN-GATE.md`, example `examples/budget.toml`).

use budgetgate_core::turn::{TokenMode, TurnLimits};
use serde::Deserialize;

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

impl ApprovePolicy {
    /// Reads `all`, `none` or a comma-separated list of tool names.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "all" => Ok(Self::All),
            "none" => Ok(Self::None),
            "" => Err("--approve needs all, none or a list of tool names".into()),
            list => {
                let names: Vec<String> = list
                    .split(',')
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect();
                if names.is_empty() {
                    return Err("--approve needs all, none or a list of tool names".into());
                }
                Ok(Self::Tools(names))
            }
        }
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
    /// Tools the run knows; `None`: the tools the recording declares, or
    /// any tool if it declares none.
    pub known: Option<Vec<String>>,
    /// Tools that need approval.
    pub needs_approval: Vec<String>,
    /// The approver's answers.
    pub approve: ApprovePolicy,
}

impl Default for ReplayBudget {
    fn default() -> Self {
        Self {
            limits: TurnLimits::DEFAULT,
            reserve_max_tokens: None,
            known: None,
            needs_approval: Vec::new(),
            approve: ApprovePolicy::None,
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
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ApproveSetting {
    Word(String),
    List(Vec<String>),
}

/// Reads a budget file; anything missing keeps the reference's default.
pub fn parse_budget(text: &str) -> Result<ReplayBudget, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let d = TurnLimits::DEFAULT;
    let b = file.budget;
    let max_millis = match b.max_seconds {
        None => d.max_millis,
        Some(Seconds::Int(s)) => s.checked_mul(1000).ok_or("max_seconds is too large")?,
        Some(Seconds::Float(s)) if (0.0..1e15).contains(&s) => (s * 1000.0).round() as u64,
        Some(Seconds::Float(_)) => return Err("max_seconds must be a non-negative number".into()),
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
    let approve = match file.tools.approve {
        None => ApprovePolicy::None,
        Some(ApproveSetting::Word(w)) => ApprovePolicy::parse(&w)?,
        Some(ApproveSetting::List(names)) => ApprovePolicy::Tools(names),
    };
    Ok(ReplayBudget {
        limits: TurnLimits {
            max_model_calls: b.max_model_calls.unwrap_or(d.max_model_calls),
            max_tokens: b.max_tokens.unwrap_or(d.max_tokens),
            max_millis,
            max_repeats: b.max_repeats.unwrap_or(d.max_repeats),
            max_tool_calls: b.max_tool_calls,
            token_mode,
        },
        reserve_max_tokens: b.reserve_max_tokens,
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
            [tools]
            known = ["a", "b"]
            needs_approval = ["b"]
            approve = ["b"]
            "#,
        )
        .unwrap();
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
    fn mistakes_are_errors() {
        assert!(parse_budget("[budget]\nmax_step = 3").is_err());
        assert!(parse_budget("[budget]\nmax_tokens = -1").is_err());
        assert!(parse_budget("[budget]\ntoken_mode = \"later\"").is_err());
        assert!(parse_budget("[budget]\nmax_seconds = -2.0").is_err());
        assert!(ApprovePolicy::parse(" , ").is_err());
    }
}
