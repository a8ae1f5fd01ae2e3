//! The answers `budgetgate eval` gives most often, written straight as JSON
//! bytes: a validated action, a bounded run's result and a workflow report.
//!
//! Each writer produces exactly the bytes `serde_json::to_writer` gives for
//! the same value through its `Serialize` impl (compact, keys in the same
//! order, strings escaped as serde_json escapes them: `"`, `\`, and control
//! characters as `\b \f \n \r \t` or `\u00xx`; everything else as UTF-8;
//! integers by `itoa`, floats by `ryu`), without serde's per-entry
//! machinery. `tests::each_writer_gives_serde_jsons_bytes` checks that on
//! every request of the reference vectors and on hostile strings; a value
//! these writers do not cover (a tool's result) is written by serde_json.

use budgetgate_core::plan::Workflow;
use budgetgate_core::{ActionRef, JsonStr, Plan, ScalarRef, TraceRow};

use crate::driver::RunResult;

/// Whether serde_json escapes byte `b` in a string.
const fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// `"text"` for a text that needs no escape (an identifier of the contract's
/// grammars, a contract word): written as it is.
fn plain(out: &mut Vec<u8>, text: &str) {
    debug_assert!(!text.bytes().any(needs_escape));
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// `"text"`, escaped as serde_json escapes it.
pub fn str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|&b| needs_escape(b)) {
        return plain(out, text);
    }
    out.push(b'"');
    let mut start = 0;
    for (at, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..at]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = at + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..at]);
        out.extend_from_slice(escape);
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A string as its proposal held it, decoded when it had escapes.
fn json_str(out: &mut Vec<u8>, text: &JsonStr<'_>) {
    match text.as_str() {
        Some(plain) => str(out, plain),
        None => str(out, &text.chars().collect::<String>()),
    }
}

fn int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn float(out: &mut Vec<u8>, x: f64) {
    if x.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

fn bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

fn scalar(out: &mut Vec<u8>, value: &ScalarRef<'_>) {
    match value {
        ScalarRef::Null => out.extend_from_slice(b"null"),
        ScalarRef::Bool(b) => bool(out, *b),
        ScalarRef::Int(i) => int(out, *i),
        ScalarRef::Float(x) => float(out, *x),
        ScalarRef::Str(s) => json_str(out, s),
    }
}

/// A validated action (`SPEC A1`): `{"kind":"final","text":…}` or
/// `{"kind":"tool","call_id":…,"name":…,"arguments":{…}}`.
pub fn action(out: &mut Vec<u8>, action: &ActionRef<'_>) {
    match action {
        ActionRef::Final { text } => {
            out.extend_from_slice(br#"{"kind":"final","text":"#);
            json_str(out, text);
        }
        ActionRef::Tool(call) => {
            out.extend_from_slice(br#"{"kind":"tool","call_id":"#);
            plain(out, call.call_id.as_str());
            out.extend_from_slice(br#","name":"#);
            plain(out, call.name.as_str());
            out.extend_from_slice(br#","arguments":{"#);
            for (i, (key, value)) in call.arguments.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_str(out, &key);
                out.push(b':');
                scalar(out, &value);
            }
            out.push(b'}');
        }
    }
    out.push(b'}');
}

/// A trace row (`SPEC A2`), as `TraceRow`'s `Serialize` writes it.
fn trace_row(out: &mut Vec<u8>, row: &TraceRow) {
    out.extend_from_slice(br#"{"step":"#);
    int(out, row.step());
    match row {
        TraceRow::Final { .. } => out.extend_from_slice(br#","kind":"final""#),
        TraceRow::Rejected { reason, .. } => {
            out.extend_from_slice(br#","kind":"rejected","reason":"#);
            plain(out, reason.as_str());
        }
        TraceRow::Tool {
            call_id,
            name,
            executed,
            ok,
            ..
        } => {
            out.extend_from_slice(br#","kind":"tool","call_id":"#);
            plain(out, call_id.as_str());
            out.extend_from_slice(br#","name":"#);
            plain(out, name.as_str());
            out.extend_from_slice(br#","executed":"#);
            bool(out, *executed);
            out.extend_from_slice(br#","ok":"#);
            bool(out, *ok);
        }
    }
    out.push(b'}');
}

/// A bounded run's result (`SPEC A2`), as [`RunResult`]'s `Serialize`
/// writes it; each observation's data (a tool's result) by serde_json.
pub fn run(out: &mut Vec<u8>, result: &RunResult) -> Result<(), serde_json::Error> {
    out.extend_from_slice(br#"{"status":"#);
    plain(out, result.status.as_str());
    out.extend_from_slice(br#","answer":"#);
    match &result.answer {
        Some(text) => str(out, text),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","observations":["#);
    for (i, o) in result.observations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"call_id":"#);
        str(out, &o.call_id);
        out.extend_from_slice(br#","name":"#);
        str(out, &o.name);
        out.extend_from_slice(br#","ok":"#);
        bool(out, o.ok);
        out.extend_from_slice(br#","data":"#);
        serde_json::to_writer(&mut *out, &o.data)?;
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"trace":["#);
    for (i, row) in result.trace.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        trace_row(out, row);
    }
    out.extend_from_slice(br#"],"tool_attempts":"#);
    int(out, result.tool_attempts);
    out.push(b'}');
    Ok(())
}

/// A workflow's report (`SPEC B2`), as `WorkflowReport`'s `Serialize`
/// writes it: `{"accepted":[ids],"stopped":id|null,"reason":…,"usage":{…}}`.
pub fn workflow<const N: usize>(out: &mut Vec<u8>, plan: &Plan<N>, workflow: &Workflow) {
    let rows = plan.rows();
    out.extend_from_slice(br#"{"accepted":["#);
    let accepted = rows.get(..workflow.accepted).unwrap_or(&[]);
    for (i, row) in accepted.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        plain(out, row.id().as_str());
    }
    out.extend_from_slice(br#"],"stopped":"#);
    match workflow.stopped.and_then(|i| rows.get(i)) {
        Some(row) => str(out, row.id().as_str()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","reason":"#);
    plain(out, workflow.reason.as_str());
    let u = &workflow.usage;
    out.extend_from_slice(br#","usage":{"steps":"#);
    int(out, u.steps);
    out.extend_from_slice(br#","tokens":"#);
    int(out, u.tokens);
    out.extend_from_slice(br#","output":"#);
    int(out, u.output);
    out.extend_from_slice(br#","max_depth":"#);
    int(out, u.max_depth);
    out.extend_from_slice(br#","max_fanout":"#);
    int(out, u.max_fanout);
    out.extend_from_slice(b"}}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use budgetgate_core::limits::MAX_STEPS;
    use budgetgate_core::Limits;

    fn serde_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
        serde_json::to_vec(value).unwrap()
    }

    /// Each writer gives exactly serde_json's bytes (`SPEC A1`, `A2`, `B2`
    /// answers): on every action, run and plan request of the reference
    /// vectors, and on strings holding every escape serde_json writes.
    #[test]
    fn each_writer_gives_serde_jsons_bytes() {
        #[derive(serde::Deserialize)]
        struct Case<'a> {
            #[serde(borrow)]
            request: &'a serde_json::value::RawValue,
        }
        #[derive(serde::Deserialize)]
        struct Request<'a> {
            #[serde(borrow, rename = "fn")]
            function: &'a str,
            #[serde(borrow)]
            args: &'a serde_json::value::RawValue,
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
        let (mut actions, mut runs, mut plans) = (0, 0, 0);
        for file in [
            "validate.jsonl",
            "run.jsonl",
            "plan.jsonl",
            "number_overflow.jsonl",
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for line in text.lines() {
                let case: Case = serde_json::from_str(line).unwrap();
                let Ok(request) = serde_json::from_str::<Request>(case.request.get()) else {
                    continue;
                };
                let args: serde_json::Map<String, serde_json::Value> =
                    match serde_json::from_str(request.args.get()) {
                        Ok(a) => a,
                        Err(_) => continue,
                    };
                let raw = |k: &str| args.get(k).map(|v| v.to_string());
                let mut out = Vec::new();
                match request.function {
                    "validate_agent_action" => {
                        let Some(value) = raw("value") else { continue };
                        let Ok(a) = ActionRef::parse(value.as_bytes()) else {
                            continue;
                        };
                        action(&mut out, &a);
                        assert_eq!(out, serde_bytes(&a), "{value}");
                        actions += 1;
                    }
                    "run_bounded_agent" => {
                        let Ok(object) =
                            serde_json::from_str::<crate::strict::StrictObject>(request.args.get())
                        else {
                            continue;
                        };
                        let Ok(result) =
                            crate::eval::RunArgs::from_args(&object).and_then(|r| r.run())
                        else {
                            continue;
                        };
                        run(&mut out, &result).unwrap();
                        assert_eq!(out, serde_bytes(&result), "{}", request.args.get());
                        runs += 1;
                    }
                    "bounded_workflow" => {
                        let (Some(p), Some(l)) = (raw("plan"), raw("limits")) else {
                            continue;
                        };
                        let (Ok(plan), Ok(limits)) = (
                            Plan::<MAX_STEPS>::parse(p.as_bytes()),
                            Limits::parse(l.as_bytes()),
                        ) else {
                            continue;
                        };
                        let w = plan.bounded_workflow(&limits);
                        workflow(&mut out, &plan, &w);
                        assert_eq!(out, serde_bytes(&plan.report(&w)), "{p}");
                        plans += 1;
                    }
                    _ => {}
                }
            }
        }
        assert!(
            actions > 50 && runs > 50 && plans > 50,
            "{actions} {runs} {plans}"
        );
        // Every byte below 0x80 and a few beyond, plain and escaped.
        let all: String = (0u8..0x80)
            .map(char::from)
            .chain("é€😀\u{2028}".chars())
            .collect();
        let mut out = Vec::new();
        str(&mut out, &all);
        assert_eq!(out, serde_bytes(&all));
        let escaped = serde_json::to_string(&all).unwrap();
        let text = format!(r#"{{"kind":"final","text":{escaped}}}"#);
        let a = ActionRef::parse(text.as_bytes()).unwrap();
        let mut out = Vec::new();
        action(&mut out, &a);
        assert_eq!(out, serde_bytes(&a));
    }
}
