//! What a bounded run records (`SPEC A2`): how it ended, why a call was
//! refused, and one trace row per round.

use core::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::ident::Identifier;
use crate::word;

/// How a run ended (`SPEC A2`); spelled as the contract spells it by [`Status::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Status {
    /// The policy answered with a final action: `final`.
    Final,
    /// The policy failed or proposed an invalid action: `policy-error`.
    PolicyError,
    /// A call id was reused: `duplicate-call`.
    DuplicateCall,
    /// A tool action came with no tool attempts left: `tool-budget`.
    ToolBudget,
    /// The decision rounds ran out: `decision-budget`.
    DecisionBudget,
}

impl Status {
    /// The contract's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Final => word::FINAL,
            Self::PolicyError => word::POLICY_ERROR,
            Self::DuplicateCall => word::DUPLICATE_CALL,
            Self::ToolBudget => word::TOOL_BUDGET,
            Self::DecisionBudget => word::DECISION_BUDGET,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Why a decision round was rejected (the `reason` of a `rejected` trace row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RejectReason {
    /// `invalid-policy-action`
    InvalidPolicyAction,
    /// `duplicate-call-id`
    DuplicateCallId,
    /// `tool-budget`
    ToolBudget,
}

impl RejectReason {
    /// The contract's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidPolicyAction => word::INVALID_POLICY_ACTION,
            Self::DuplicateCallId => word::DUPLICATE_CALL_ID,
            Self::ToolBudget => word::TOOL_BUDGET,
        }
    }
}

/// One row of the trace: one per decision round, steps counted from 0 (`SPEC A2`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TraceRow {
    /// `{step, kind: "final"}`
    Final {
        /// Round number from 0.
        step: u8,
    },
    /// `{step, kind: "rejected", reason}`
    Rejected {
        /// Round number from 0.
        step: u8,
        /// Why the round was rejected.
        reason: RejectReason,
    },
    /// `{step, kind: "tool", call_id, name, executed, ok}`
    Tool {
        /// Round number from 0.
        step: u8,
        /// The call id of the attempt.
        call_id: Identifier,
        /// The tool name proposed (registered or not).
        name: Identifier,
        /// Whether a registered tool was called (even if it failed).
        executed: bool,
        /// Whether the observation is a usable result.
        ok: bool,
    },
}

impl TraceRow {
    /// The round number, from 0.
    pub fn step(&self) -> u8 {
        match self {
            Self::Final { step } | Self::Rejected { step, .. } | Self::Tool { step, .. } => *step,
        }
    }
}

impl Serialize for TraceRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Final { step } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "final")?;
                map.end()
            }
            Self::Rejected { step, reason } => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "rejected")?;
                map.serialize_entry("reason", reason.as_str())?;
                map.end()
            }
            Self::Tool {
                step,
                call_id,
                name,
                executed,
                ok,
            } => {
                let mut map = s.serialize_map(Some(6))?;
                map.serialize_entry("step", step)?;
                map.serialize_entry("kind", "tool")?;
                map.serialize_entry("call_id", call_id)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("executed", executed)?;
                map.serialize_entry("ok", ok)?;
                map.end()
            }
        }
    }
}
