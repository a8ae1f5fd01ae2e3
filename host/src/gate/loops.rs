//! Loop detection's window in the store (`[loops]`; `SPEC E`): each
//! session's last calls and their outcomes, kept as the core's record
//! ([`Window::write_record`]) beside its ledger, read and written in the
//! decision's own transaction, so it survives a restart and gateways that
//! share a ledger share it.
//!
//! The engine pushes each call it lets through ([`super::decide_tool_call`]);
//! the front-end reports each call's outcome when it sees it
//! ([`report_tool_outcome`]: the hook's `PostToolUse`, the gateway's
//! answer from the server).

use budgetgate_core::engine::loops::{Outcome, Window};
use budgetgate_core::turn::CallFingerprint;
use serde_json::Value;

use super::fingerprint::fingerprint_value;
use super::GateError;
use crate::store::{LedgerTx, StoreError};

/// The window of `session` / `agent` (`""`: the session's own calls) as
/// stored, if one is; a record that does not read back is an error (the
/// caller refuses: fail closed).
pub fn load_window(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    agent: &str,
) -> Result<Option<Window>, GateError> {
    tx.loop_window(session, agent)?
        .map(|bytes| {
            Window::read_record(&bytes).map_err(|source| {
                GateError::Store(StoreError::LoopWindow {
                    session: session.to_owned(),
                    source,
                })
            })
        })
        .transpose()
}

/// Stores `window` as `session` / `agent`'s.
pub fn store_window(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    agent: &str,
    window: &Window,
) -> Result<(), GateError> {
    let mut buf = [0u8; Window::<{ budgetgate_core::engine::loops::LOOP_WINDOW }>::RECORD_MAX];
    let n = window.write_record(&mut buf).map_err(|source| {
        GateError::Store(StoreError::LoopWindow {
            session: session.to_owned(),
            source,
        })
    })?;
    tx.put_loop_window(session, agent, buf.get(..n).unwrap_or_default())?;
    Ok(())
}

/// What a tool returned, as loop detection compares it: the digest of its
/// JSON value ([`super::digest::digest_value`], the one replay takes too),
/// and whether it was an error.
pub fn outcome_of(result: &Value, error: bool) -> Outcome {
    Outcome {
        digest: super::digest::digest_value(result),
        error,
    }
}

/// The key loop detection knows call `name` with `input` by (the
/// repetition rule's fingerprint: the tool and its canonical arguments);
/// `None` for input nested too deeply to compare.
pub fn call_key(name: &str, input: &Value) -> Option<CallFingerprint> {
    fingerprint_value(input).map(|f| f.with_name(name))
}

/// Reports that call `call` ([`call_key`]) of `session` / `agent`
/// returned `outcome` (`None`: it did not run after all, and is forgotten):
/// the latest such call in the window without an outcome gets it.
/// `Ok(false)`: no such call (loops off when it was let through,
/// forgotten, or reported already).
pub fn report_tool_outcome(
    tx: &(impl LedgerTx + ?Sized),
    session: &str,
    agent: &str,
    call: CallFingerprint,
    outcome: Option<Outcome>,
) -> Result<bool, GateError> {
    let Some(mut window) = load_window(tx, session, agent)? else {
        return Ok(false);
    };
    let changed = match outcome {
        Some(outcome) => window.report(call, outcome),
        None => window.forget(call),
    };
    if changed {
        store_window(tx, session, agent, &window)?;
    }
    Ok(changed)
}

/// What an MCP `tools/call` result says, as loop detection compares it: its
/// `content` and `structuredContent` (not its `_meta`, which may change
/// from call to call), and `isError`.
pub fn mcp_outcome(result: &Value) -> Outcome {
    let error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let shown = serde_json::json!([result.get("content"), result.get("structuredContent")]);
    outcome_of(&shown, error)
}
