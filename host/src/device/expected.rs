//! What a reply must be to belong to the request it answers ([`Expected`]).

use budgetgate_core::word;
use serde_json::Value;

use super::link::DeviceReply;

/// What a proposal is, as far as its reply must match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedCall {
    /// `kind: "tool"` with a string call id and name: an observation must
    /// name both.
    Tool {
        /// The proposal's call id.
        call_id: String,
        /// The proposal's tool name.
        name: String,
    },
    /// `kind: "final"`: only a stop can answer it.
    Final,
    /// Anything else: the device can only refuse it (`policy-error`).
    Other,
}

/// What a reply must be to belong to the request it answers: the run it
/// was sent in, the step it was to take, and, for a tool call, its call id
/// and name (`docs/PROTOCOL.md`, "Replies"). A reply that does not match is
/// a protocol error, never a verdict: a device (or anything between) that
/// answers another call, another step or another run is not answering us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The run (`status`'s `run`).
    pub run: u32,
    /// The round this proposal is (`decisions` before it).
    pub step: u8,
    /// The proposal.
    pub call: ExpectedCall,
    /// Only this stop: the `decision-budget` stop that follows an
    /// observation of the last decision.
    pub decision_budget: bool,
}

impl Expected {
    /// The reply `proposal` (one line of JSON) needs in `run` at `step`.
    pub fn proposal(proposal: &str, run: u32, step: u8) -> Self {
        let value: Option<Value> = serde_json::from_str(proposal).ok();
        let text = |map: &serde_json::Map<String, Value>, key: &str| {
            map.get(key).and_then(Value::as_str).map(str::to_owned)
        };
        let call = match &value {
            Some(Value::Object(map)) => match map.get("kind").and_then(Value::as_str) {
                Some("tool") => match (text(map, "call_id"), text(map, "name")) {
                    (Some(call_id), Some(name)) => ExpectedCall::Tool { call_id, name },
                    _ => ExpectedCall::Other,
                },
                Some("final") => ExpectedCall::Final,
                _ => ExpectedCall::Other,
            },
            _ => ExpectedCall::Other,
        };
        Self {
            run,
            step,
            call,
            decision_budget: false,
        }
    }

    /// The stop that must follow the observation of the last decision.
    pub fn decision_budget_stop(run: u32, step: u8) -> Self {
        Self {
            run,
            step,
            call: ExpectedCall::Other,
            decision_budget: true,
        }
    }

    /// The stop statuses that can answer this request.
    pub fn stops(&self) -> &'static [&'static str] {
        if self.decision_budget {
            return &[word::DECISION_BUDGET];
        }
        match self.call {
            ExpectedCall::Tool { .. } => &[
                word::POLICY_ERROR,
                word::DUPLICATE_CALL,
                word::TOOL_BUDGET,
                word::TIME_BUDGET,
            ],
            ExpectedCall::Final => &[word::FINAL, word::POLICY_ERROR, word::TIME_BUDGET],
            ExpectedCall::Other => &[word::POLICY_ERROR, word::TIME_BUDGET],
        }
    }

    /// Whether `reply` answers this request; otherwise what was expected and
    /// what came, both named. An `error` reply (no decision used) is
    /// checked by the caller, not here.
    pub fn check(&self, reply: &DeviceReply) -> Result<(), String> {
        let (run, step) = match reply {
            DeviceReply::Observation { run, step, .. } | DeviceReply::Stopped { run, step, .. } => {
                (*run, *step)
            }
            other => {
                return Err(format!(
                    "expected an observation or a stop, got a {} reply",
                    kind_of(other)
                ))
            }
        };
        if run != self.run {
            return Err(format!("expected run {}, got run {run}", self.run));
        }
        if step != self.step {
            return Err(format!("expected step {}, got step {step}", self.step));
        }
        match (reply, &self.call) {
            (
                DeviceReply::Observation {
                    call_id,
                    name,
                    executed,
                    ok,
                    ..
                },
                ExpectedCall::Tool {
                    call_id: want_id,
                    name: want_name,
                },
            ) if !self.decision_budget => {
                if call_id != want_id {
                    Err(format!("expected call id {want_id:?}, got {call_id:?}"))
                } else if name != want_name {
                    Err(format!("expected tool {want_name:?}, got {name:?}"))
                } else if *ok && !executed {
                    Err("an observation that is ok but not executed".into())
                } else {
                    Ok(())
                }
            }
            (DeviceReply::Observation { .. }, _) => Err(format!(
                "expected a stop ({}), got an observation",
                self.stops().join(", ")
            )),
            (DeviceReply::Stopped { status, .. }, _) => {
                if self.stops().contains(&status.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected {}, got the stop {status:?}",
                        self.describe()
                    ))
                }
            }
            _ => Err("expected an observation or a stop".into()),
        }
    }

    /// What this request accepts, in words.
    pub fn describe(&self) -> String {
        let stops = self.stops().join(", ");
        match &self.call {
            ExpectedCall::Tool { call_id, name } if !self.decision_budget => format!(
                "an observation of {call_id} ({name}) or a stop ({stops}) at step {} of run {}",
                self.step, self.run
            ),
            _ => format!("a stop ({stops}) at step {} of run {}", self.step, self.run),
        }
    }
}

fn kind_of(reply: &DeviceReply) -> &'static str {
    match reply {
        DeviceReply::Observation { .. } => "observation",
        DeviceReply::Stopped { .. } => "stopped",
        DeviceReply::Error { .. } => "error",
        DeviceReply::Status { .. } => "status",
        DeviceReply::Hello { .. } => "hello",
    }
}
