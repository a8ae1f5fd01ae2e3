//! The script file of `budgetgate device`: its proposals made one line each
//! ([`minify`]) and checked to fit a frame, and the budgets the operator
//! starts the run with ([`read_script`]).

use budgetgate_core::limits::{DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS};
use budgetgate_core::RunLimits;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::link::{DeviceError, PAYLOAD_MAX};

/// Removes the whitespace between JSON tokens (outside strings), so a
/// proposal fits on one frame line. Nothing else changes: duplicate keys,
/// number spellings and escapes reach the device as written, and it decides
/// on them. `text` must be JSON that serde_json accepted (no raw control
/// characters inside strings).
pub fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[derive(Deserialize)]
struct ScriptFile {
    script: Vec<Box<RawValue>>,
    #[serde(default)]
    max_decisions: Option<u32>,
    #[serde(default)]
    max_tool_calls: Option<u32>,
}

/// A script file read for the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The proposals, one line each, in order.
    pub proposals: Vec<String>,
    /// The budgets the operator starts the run with, if the file names any
    /// (`max_decisions`, `max_tool_calls`; the other defaults to 8 or 4).
    pub budgets: Option<RunLimits>,
}

impl Script {
    /// The console command that starts this script's run: `start` or
    /// `start D T`.
    pub fn start_command(&self) -> String {
        match self.budgets {
            None => "start".to_owned(),
            Some(limits) => format!(
                "start {} {}",
                limits.max_decisions(),
                limits.max_tool_calls()
            ),
        }
    }
}

/// Reads a script file: `{"script": [proposal, ...], "max_decisions"?: N,
/// "max_tool_calls"?: N, ...}`, the file format of `budgetgate run` (other
/// keys, such as `tools`, are ignored: the device has its own tools). Each
/// proposal is made one line by [`minify`] and checked to fit a `PROPOSE`
/// frame. The budgets are used only when this host is the operator.
pub fn read_script(name: &str, text: &str) -> Result<Script, DeviceError> {
    let file: ScriptFile = serde_json::from_str(text).map_err(|e| {
        DeviceError::Usage(format!(
            "{name}: a script file is a JSON object {{\"script\": [proposal, ...]}}: {e}"
        ))
    })?;
    let budgets = match (file.max_decisions, file.max_tool_calls) {
        (None, None) => None,
        (d, t) => Some(
            RunLimits::new(
                d.unwrap_or(DEFAULT_MAX_DECISIONS),
                t.unwrap_or(DEFAULT_MAX_TOOL_CALLS),
            )
            .map_err(|e| DeviceError::Usage(format!("{name}: {e}")))?,
        ),
    };
    let mut proposals = Vec::with_capacity(file.script.len());
    for (i, raw) in file.script.iter().enumerate() {
        let line = minify(raw.get());
        let len = "PROPOSE ".len() + line.len();
        if len > PAYLOAD_MAX {
            return Err(DeviceError::Usage(format!(
                "{name}: proposal {i} needs {len} bytes; a frame carries at most {PAYLOAD_MAX}"
            )));
        }
        proposals.push(line);
    }
    Ok(Script { proposals, budgets })
}
