//! The words the contract (`SPEC A2`, `SPEC C`) and the device protocol
//! (`docs/PROTOCOL.md`) spell, in one place: statuses, reasons, observation
//! data and the device's errors and states. Every front-end (the host's
//! driver, the device gate, the audit log, the turn gate's reports) writes
//! these constants, never its own copy of the spelling.
//!
//! Words only one enum of one front-end spells (the turn gate's `cut-off`,
//! the link's `bad-checksum`) stay beside that enum's `as_str`.

/// Status `final`: the policy answered with a final action.
pub const FINAL: &str = "final";
/// Status `policy-error`: the policy failed or proposed an invalid action.
pub const POLICY_ERROR: &str = "policy-error";
/// Status `duplicate-call`: a call id was reused.
pub const DUPLICATE_CALL: &str = "duplicate-call";
/// Status and rejection reason `tool-budget`: a tool action with no tool
/// attempts left (also the turn gate's refusal of the same name).
pub const TOOL_BUDGET: &str = "tool-budget";
/// Status `decision-budget`: the decision rounds ran out.
pub const DECISION_BUDGET: &str = "decision-budget";

/// Rejection reason `invalid-policy-action`: no valid action was proposed.
pub const INVALID_POLICY_ACTION: &str = "invalid-policy-action";
/// Rejection reason `duplicate-call-id` (also the turn gate's refusal).
pub const DUPLICATE_CALL_ID: &str = "duplicate-call-id";

/// Observation data: the tool name is not registered.
pub const UNKNOWN_TOOL: &str = "unknown-tool";
/// Observation data: the tool failed or its result was over 4096 bytes.
pub const TOOL_ERROR: &str = "tool-error";
/// Observation data: the arguments do not fit the tool's signature.
pub const INVALID_ARGUMENTS: &str = "invalid-arguments";
/// Observation data: the operator refused, or did not answer in time.
pub const APPROVAL_DENIED: &str = "approval-denied";
/// Observation data: the call would switch on an actuator whose duty
/// window holds its most on-time; not executed (the observation's
/// `retry_after_ms` says when it may go on again).
pub const DUTY_LIMIT: &str = "duty-limit";
/// Stop status (and observation data of a late approval): the run's
/// time budget had passed.
pub const TIME_BUDGET: &str = "time-budget";

/// Device error: the verified payload is not a known request.
pub const UNKNOWN_REQUEST: &str = "unknown-request";
/// Device error: `RESET` on the agent link.
pub const NOT_PERMITTED: &str = "not-permitted";
/// Device error: a proposal after the run stopped.
pub const RUN_STOPPED: &str = "run-stopped";
/// Device error: a proposal before the operator started a run.
pub const NO_RUN: &str = "no-run";
/// Device error (and audit verdict): the gate could not store its state
/// (`Actuators::journal` failed) and refuses every proposal until the
/// operator starts a run that it can store (fail closed).
pub const STORAGE_ERROR: &str = "storage-error";
/// Device error, status state and audit verdict: the dead-man switch
/// tripped (no valid frame on the agent link for
/// `Timing::dead_man_ms` while an actuator was out of its safe state);
/// every proposal is refused until the operator starts a run.
pub const DEAD_MAN: &str = "dead-man";
/// Device error: the gate broke its own invariant (a bug; never expected).
pub const INTERNAL_ERROR: &str = "internal-error";
/// Device status state: no run started since boot.
pub const IDLE: &str = "idle";
/// Device status state: the run takes proposals.
pub const RUNNING: &str = "running";

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's spellings (`SPEC A2` statuses and reasons, `SPEC C`
    /// and `docs/PROTOCOL.md` observation data and device words), written
    /// out here once more so a change to a constant is noticed.
    #[test]
    fn words_are_spelled_as_the_contract_spells_them() {
        let words = [
            (FINAL, "final"),
            (POLICY_ERROR, "policy-error"),
            (DUPLICATE_CALL, "duplicate-call"),
            (TOOL_BUDGET, "tool-budget"),
            (DECISION_BUDGET, "decision-budget"),
            (INVALID_POLICY_ACTION, "invalid-policy-action"),
            (DUPLICATE_CALL_ID, "duplicate-call-id"),
            (UNKNOWN_TOOL, "unknown-tool"),
            (TOOL_ERROR, "tool-error"),
            (INVALID_ARGUMENTS, "invalid-arguments"),
            (APPROVAL_DENIED, "approval-denied"),
            (DUTY_LIMIT, "duty-limit"),
            (TIME_BUDGET, "time-budget"),
            (UNKNOWN_REQUEST, "unknown-request"),
            (NOT_PERMITTED, "not-permitted"),
            (RUN_STOPPED, "run-stopped"),
            (NO_RUN, "no-run"),
            (STORAGE_ERROR, "storage-error"),
            (DEAD_MAN, "dead-man"),
            (INTERNAL_ERROR, "internal-error"),
            (IDLE, "idle"),
            (RUNNING, "running"),
        ];
        for (word, spelled) in words {
            assert_eq!(word, spelled);
        }
    }
}
