//! `budgetgate eval`: the machine interface, one JSON request per line.
//!
//! A request is `{"fn": NAME, "args": {...}}`; the answer is `{"ok": RESULT}`,
//! `{"error": "invalid-input", "detail": TEXT}` where the contract calls the
//! input invalid (the reference's `ValueError`), or
//! `{"error": "bad-request", "detail": TEXT}` for a line that is not a request.
//! Values are handed to the core as their raw JSON text, so integers and
//! floats stay distinct (`15` vs `15.0`) and `-0` is the integer 0.

use budgetgate_core::limits::MAX_STEPS;
use budgetgate_core::{trace_work, ActionRef, Limits, Plan, RunLimits, WorkRow};
use serde_json::json;
use serde_json::value::RawValue;

use crate::driver::{run_with_tools, RunResult};
use crate::strict::{as_int, shape, Shape, StrictObject};
use crate::tools::DemoKind;

/// Every function `eval` answers.
pub const FUNCTIONS: [&str; 5] = [
    "validate_agent_action",
    "run_bounded_agent",
    "trace_work",
    "aggregate_usage",
    "bounded_workflow",
];

/// How one request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalError {
    /// The contract calls the input invalid.
    InvalidInput(String),
    /// The line is not a request.
    BadRequest(String),
}

fn invalid(detail: impl std::fmt::Display) -> EvalError {
    EvalError::InvalidInput(detail.to_string())
}

fn bad(detail: impl std::fmt::Display) -> EvalError {
    EvalError::BadRequest(detail.to_string())
}

/// Answers one request line with one response line (no trailing newline).
pub fn answer_line(line: &[u8]) -> String {
    let mut out = Vec::with_capacity(256);
    write_answer(line, &mut out);
    // serde_json writes valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Writes the answer to one request line into `out` (no trailing newline):
/// the result is serialized straight from the core's types, with no JSON
/// value tree in between.
pub fn write_answer(line: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(b"{\"ok\":");
    match handle_into(line, out) {
        Ok(()) => out.push(b'}'),
        Err(e) => {
            out.truncate(start);
            let (kind, detail) = match e {
                EvalError::InvalidInput(d) => ("invalid-input", d),
                EvalError::BadRequest(d) => ("bad-request", d),
            };
            let _ = serde_json::to_writer(&mut *out, &json!({"error": kind, "detail": detail}));
        }
    }
}

/// Serializes `value` onto `out`.
fn put<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), EvalError> {
    serde_json::to_writer(out, value).map_err(invalid)
}

/// The arguments of one request, checked for exactly the expected keys.
struct ArgsOf<'a> {
    object: &'a StrictObject,
}

impl<'a> ArgsOf<'a> {
    fn new(
        object: &'a StrictObject,
        required: &[&str],
        optional: &[&str],
    ) -> Result<Self, EvalError> {
        if let Some(key) = object
            .keys()
            .find(|k| !required.contains(k) && !optional.contains(k))
        {
            return Err(bad(format!("unexpected argument `{key}`")));
        }
        if let Some(key) = required.iter().find(|k| object.get(k).is_none()) {
            return Err(bad(format!("missing argument `{key}`")));
        }
        Ok(Self { object })
    }

    fn get(&self, key: &str) -> Result<&'a RawValue, EvalError> {
        self.object
            .get(key)
            .ok_or_else(|| bad(format!("missing argument `{key}`")))
    }
}

/// Answers one request: `Ok(result)` as a JSON value, or the error to report.
/// (`budgetgate eval` itself writes the result straight out with
/// [`write_answer`]; this form is for programs and tests that want the value.)
pub fn handle(line: &[u8]) -> Result<serde_json::Value, EvalError> {
    let mut out = Vec::new();
    handle_into(line, &mut out)?;
    serde_json::from_slice(&out).map_err(invalid)
}

/// Answers one request: its result written onto `out`, or the error to
/// report (then `out` may hold part of a result, which the caller drops).
fn handle_into(line: &[u8], out: &mut Vec<u8>) -> Result<(), EvalError> {
    if fast_path(line, out) {
        return Ok(());
    }
    let text = std::str::from_utf8(line).map_err(|e| bad(format!("line is not UTF-8: {e}")))?;
    let request: StrictObject =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    if let Some(key) = request.keys().find(|k| !matches!(*k, "fn" | "args")) {
        return Err(bad(format!(
            "unexpected key `{key}`; a request has exactly fn and args"
        )));
    }
    let name = match request.get("fn").map(shape) {
        Some(Ok(Shape::String(s))) => s,
        _ => return Err(bad("`fn` must be a string naming a function")),
    };
    let args = match request.get("args").map(shape) {
        Some(Ok(Shape::Object(o))) => o,
        _ => return Err(bad("`args` must be a JSON object")),
    };
    match name.as_str() {
        "validate_agent_action" => {
            let args = ArgsOf::new(&args, &["value"], &[])?;
            let action = ActionRef::parse(args.get("value")?.get().as_bytes()).map_err(invalid)?;
            put(out, &action)
        }
        "run_bounded_agent" => put(out, &RunArgs::from_args(&args)?.run()?),
        "trace_work" => put(out, &work(&args)?),
        "aggregate_usage" => {
            let args = ArgsOf::new(&args, &["plan"], &[])?;
            let plan: Plan = Plan::parse(args.get("plan")?.get().as_bytes()).map_err(invalid)?;
            put(out, &plan.usage())
        }
        "bounded_workflow" => {
            let args = ArgsOf::new(&args, &["plan", "limits"], &[])?;
            let plan: Plan = Plan::parse(args.get("plan")?.get().as_bytes()).map_err(invalid)?;
            let limits = Limits::parse(args.get("limits")?.get().as_bytes()).map_err(invalid)?;
            put(out, &plan.report(&plan.bounded_workflow(&limits)))
        }
        other => Err(bad(format!(
            "unknown fn `{other}`; expected one of {}",
            FUNCTIONS.join(", ")
        ))),
    }
}

/// The three commonest requests in their compact spelling, answered without
/// reading the envelope as JSON three times: `{"fn":"validate_agent_action",
/// "args":{"value":V}}`, `{"fn":"bounded_workflow","args":{"plan":P,
/// "limits":L}}` and `{"fn":"run_bounded_agent","args":A}` with no
/// whitespace around the envelope's keys. Only a success is answered here: when
/// the inner documents parse as a valid action (or plan and limits), each is
/// one complete JSON value, so the line is exactly that envelope and the
/// answer is the one the general path gives. Anything else (another spelling,
/// an invalid value, a duplicate key) goes the general way, which finds the
/// right error.
fn fast_path(line: &[u8], out: &mut Vec<u8>) -> bool {
    let line = line.trim_ascii_end();
    let mark = out.len();
    if let Some(value) = line
        .strip_prefix(br#"{"fn":"validate_agent_action","args":{"value":"#)
        .and_then(|rest| rest.strip_suffix(b"}}"))
    {
        if let Ok(action) = ActionRef::parse(value) {
            crate::answer::action(out, &action);
            return true;
        }
    } else if let Some(args) = line
        .strip_prefix(br#"{"fn":"bounded_workflow","args":{"plan":"#)
        .and_then(|rest| rest.strip_suffix(b"}}"))
    {
        const LIMITS: &[u8] = br#","limits":"#;
        let split = args.windows(LIMITS.len()).rposition(|w| w == LIMITS);
        if let Some(at) = split {
            let (plan, limits) = (&args[..at], &args[at + LIMITS.len()..]);
            if let (Ok(plan), Ok(limits)) = (Plan::<MAX_STEPS>::parse(plan), Limits::parse(limits))
            {
                crate::answer::workflow(out, &plan, &plan.bounded_workflow(&limits));
                return true;
            }
        }
    } else if let Some(args) = line
        .strip_prefix(br#"{"fn":"run_bounded_agent","args":"#)
        .and_then(|rest| rest.strip_suffix(b"}"))
    {
        // A complete object here makes the line exactly that envelope.
        if let Some(result) = fast_run(args) {
            if crate::answer::run(out, &result).is_ok() {
                return true;
            }
        }
    }
    out.truncate(mark);
    false
}

/// A budget argument: absent gives the default; present must be an integer.
fn budget(args: &StrictObject, key: &str, default: u32) -> Result<u32, EvalError> {
    match args.get(key) {
        None => Ok(default),
        Some(raw) => as_int(raw)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "`{key}` must be an integer (max_decisions 1..=32, max_tool_calls 0..=16)"
                ))
            }),
    }
}

/// The arguments of `run_bounded_agent` (`SPEC A2`), checked: what `eval`
/// reads from a request and `budgetgate run` from a script file.
///
/// The policy is a script: round `i` proposes `script[i]`, whatever it
/// observed; when the script is used up, the policy fails (so the run stops
/// with `policy-error`). Tools are the demo tools of [`DemoKind`].
#[derive(Debug)]
pub struct RunArgs {
    /// The proposals, in order, each kept as its raw JSON text so the core
    /// validates it (`SPEC A1`).
    pub script: Vec<Box<RawValue>>,
    /// The registered tools in document order: name and demo kind (at most 8).
    /// Names are checked when the run starts.
    pub tools: Vec<(String, DemoKind)>,
    /// The two budgets; absent keys give the defaults (8 decisions, 4 tool
    /// attempts).
    pub limits: RunLimits,
}

impl RunArgs {
    /// Reads `{script: [proposal, ...], tools: {name: kind, ...},
    /// max_decisions?: INT, max_tool_calls?: INT}`.
    ///
    /// # Errors
    /// [`EvalError::BadRequest`] for an unexpected or missing key or a
    /// `script` that is not an array; [`EvalError::InvalidInput`] for an
    /// unknown tool kind, more than 8 tools, or budgets out of range
    /// (`max_decisions` 1..=32, `max_tool_calls` 0..=16).
    pub fn from_args(args: &StrictObject) -> Result<Self, EvalError> {
        let a = ArgsOf::new(
            args,
            &["script", "tools"],
            &["max_decisions", "max_tool_calls"],
        )?;
        let script = match shape(a.get("script")?) {
            Ok(Shape::Array(items)) => items,
            _ => return Err(bad("`script` must be an array of proposals")),
        };
        let tools = match shape(a.get("tools")?) {
            Ok(Shape::Object(o)) => o,
            Err(e) => return Err(invalid(format!("`tools`: {e}"))),
            Ok(_) => {
                return Err(invalid(
                    "`tools` must be an object mapping tool names to kinds",
                ))
            }
        };
        let mut registered = Vec::new();
        for (name, kind) in &tools.0 {
            let kind = match shape(kind) {
                Ok(Shape::String(k)) => DemoKind::parse(&k),
                _ => None,
            }
            .ok_or_else(|| {
                invalid(format!(
                    "tool `{name}`: kind must be one of {}",
                    DemoKind::NAMES.join(", ")
                ))
            })?;
            registered.push((name.clone(), kind));
        }
        if registered.len() > budgetgate_core::limits::MAX_TOOLS {
            return Err(invalid(format!(
                "more than {} tools",
                budgetgate_core::limits::MAX_TOOLS
            )));
        }
        let limits = RunLimits::new(
            budget(
                args,
                "max_decisions",
                budgetgate_core::limits::DEFAULT_MAX_DECISIONS,
            )?,
            budget(
                args,
                "max_tool_calls",
                budgetgate_core::limits::DEFAULT_MAX_TOOL_CALLS,
            )?,
        )
        .map_err(invalid)?;
        Ok(Self {
            script,
            tools: registered,
            limits,
        })
    }

    /// Runs the bounded loop (`SPEC A2`) with the script as policy.
    ///
    /// # Errors
    /// [`EvalError::InvalidInput`] when a tool name is invalid or repeated
    /// (nothing runs then).
    pub fn run(&self) -> Result<RunResult, EvalError> {
        let script: Vec<&str> = self.script.iter().map(|raw| raw.get()).collect();
        run_script(&script, &self.tools, self.limits)
    }
}

/// The bounded loop with `script` as policy: round `i` proposes `script[i]`
/// (its JSON text), and the policy fails once it is used up.
fn run_script(
    script: &[&str],
    tools: &[(String, DemoKind)],
    limits: RunLimits,
) -> Result<RunResult, EvalError> {
    let mut next = 0usize;
    let policy = |_: &[crate::driver::Observation]| {
        let proposal = script
            .get(next)
            .copied()
            .ok_or_else(|| "script used up".to_owned());
        next += 1;
        proposal
    };
    run_with_tools(
        policy,
        tools.iter().map(|(name, _)| name.as_str()),
        |tool, args| match tools.get(tool) {
            Some((_, kind)) => kind.call(args),
            None => Err("no such tool".into()),
        },
        limits,
    )
    .map_err(invalid)
}

/// `run_bounded_agent`'s arguments read in one pass, borrowed from the line,
/// for the fast path: the same keys as [`RunArgs::from_args`] (serde refuses
/// an unknown or repeated key, and [`ToolsInOrder`] a repeated tool), each
/// value kept as its raw text. Anything it refuses goes the general way.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BorrowedRunArgs<'a> {
    #[serde(borrow)]
    script: Vec<&'a RawValue>,
    tools: ToolsInOrder,
    // `deserialize_with` sees `null` too (as the raw text `null`), so a null
    // budget is refused as in the general path, not read as absent.
    #[serde(default, borrow, deserialize_with = "raw_present")]
    max_decisions: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_present")]
    max_tool_calls: Option<&'a RawValue>,
}

fn raw_present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// A `tools` object's members in document order; a repeated name is an error.
struct ToolsInOrder(Vec<(String, String)>);

impl<'de> serde::Deserialize<'de> for ToolsInOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = ToolsInOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of tool names to kinds")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((name, kind)) = map.next_entry::<String, String>()? {
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(serde::de::Error::custom("duplicate tool"));
                    }
                    out.push((name, kind));
                }
                Ok(ToolsInOrder(out))
            }
        }
        d.deserialize_map(Members)
    }
}

/// The fast path's run: `Some` only when the arguments read cleanly and the
/// run starts (every error is left to the general path).
fn fast_run(args: &[u8]) -> Option<RunResult> {
    // The whole text is checked first, as the general path checks the line:
    // serde_json does not look inside the strings of a raw value it skips.
    let text = std::str::from_utf8(args).ok()?;
    let a: BorrowedRunArgs<'_> = serde_json::from_str(text).ok()?;
    let mut tools = Vec::with_capacity(a.tools.0.len());
    for (name, kind) in a.tools.0 {
        tools.push((name, DemoKind::parse(&kind)?));
    }
    if tools.len() > budgetgate_core::limits::MAX_TOOLS {
        return None;
    }
    let budget = |raw: Option<&RawValue>, default: u32| match raw {
        None => Some(default),
        Some(raw) => as_int(raw).and_then(|v| u32::try_from(v).ok()),
    };
    let limits = RunLimits::new(
        budget(
            a.max_decisions,
            budgetgate_core::limits::DEFAULT_MAX_DECISIONS,
        )?,
        budget(
            a.max_tool_calls,
            budgetgate_core::limits::DEFAULT_MAX_TOOL_CALLS,
        )?,
    )
    .ok()?;
    let script: Vec<&str> = a.script.iter().map(|raw| raw.get()).collect();
    run_script(&script, &tools, limits).ok()
}

fn work(args: &StrictObject) -> Result<budgetgate_core::Work, EvalError> {
    let a = ArgsOf::new(args, &["trace", "decision_units", "tool_units"], &[])?;
    let rows = match shape(a.get("trace")?) {
        Ok(Shape::Array(items)) => items,
        _ => return Err(invalid("`trace` must be an array of rows")),
    };
    let decision_units = as_int(a.get("decision_units")?)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| invalid("`decision_units` must be an integer 0..=1000"))?;
    let units = match shape(a.get("tool_units")?) {
        Ok(Shape::Object(o)) => o,
        _ => {
            return Err(invalid(
                "`tool_units` must be an object mapping names to costs",
            ))
        }
    };
    let mut costs = Vec::new();
    for (name, cost) in &units.0 {
        let cost = as_int(cost)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "tool_units `{name}`: cost must be an integer 0..=1000"
                ))
            })?;
        costs.push((name.as_str(), cost));
    }
    if rows.len() > budgetgate_core::limits::MAX_STEPS {
        return Err(invalid(format!(
            "a trace has at most {} rows",
            budgetgate_core::limits::MAX_STEPS
        )));
    }
    // Rows own their text until the core borrows it as `WorkRow`s.
    enum Row {
        Final,
        Rejected,
        Tool(String, bool),
    }
    let mut parsed: Vec<(i64, Row)> = Vec::new();
    for (i, raw) in rows.iter().enumerate() {
        let row = match shape(raw) {
            Ok(Shape::Object(o)) => o,
            _ => return Err(invalid(format!("row {i}: must be an object"))),
        };
        let step = row
            .get("step")
            .and_then(as_int)
            .ok_or_else(|| invalid(format!("row {i}: `step` must be the integer {i}")))?;
        let kind = match row.get("kind").map(shape) {
            Some(Ok(Shape::String(k))) if matches!(k.as_str(), "tool" | "final" | "rejected") => k,
            _ => {
                return Err(invalid(format!(
                    "row {i}: `kind` must be tool, final or rejected"
                )))
            }
        };
        let row = if kind == "tool" {
            let name = match row.get("name").map(shape) {
                Some(Ok(Shape::String(n))) => n,
                _ => {
                    return Err(invalid(format!(
                        "row {i}: a tool row needs a string `name`"
                    )))
                }
            };
            let executed = match row.get("executed").map(shape) {
                Some(Ok(Shape::Bool(b))) => b,
                _ => {
                    return Err(invalid(format!(
                        "row {i}: a tool row needs a boolean `executed`"
                    )))
                }
            };
            Row::Tool(name, executed)
        } else if kind == "final" {
            Row::Final
        } else {
            Row::Rejected
        };
        parsed.push((step, row));
    }
    trace_work(
        parsed.iter().map(|(step, row)| {
            let row = match row {
                Row::Tool(name, executed) => WorkRow::Tool {
                    name,
                    executed: *executed,
                },
                Row::Final => WorkRow::Final,
                Row::Rejected => WorkRow::Rejected,
            };
            (*step, row)
        }),
        decision_units,
        &costs,
    )
    .map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compact fast path answers exactly as the general path does, on
    /// every request of the reference vectors (valid and invalid): the same
    /// line with a space after its first `{` takes the general path.
    #[test]
    fn the_fast_path_answers_as_the_general_path() {
        #[derive(serde::Deserialize)]
        struct Case<'a> {
            #[serde(borrow)]
            request: &'a RawValue,
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
        let mut fast = 0;
        for file in [
            "validate.jsonl",
            "run.jsonl",
            "plan.jsonl",
            "trace_work.jsonl",
            "number_overflow.jsonl",
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for line in text.lines() {
                let case: Case = serde_json::from_str(line).unwrap();
                let compact = case.request.get();
                let spaced = format!("{{ {}", &compact[1..]);
                let (a, b) = (
                    answer_line(compact.as_bytes()),
                    answer_line(spaced.as_bytes()),
                );
                assert_eq!(a, b, "{compact}");
                let mut out = Vec::new();
                fast += usize::from(fast_path(compact.as_bytes(), &mut out));
            }
        }
        assert!(fast > 300, "the fast path answered only {fast} requests");
    }
    /// The run's one-pass reading leaves every doubtful request to the
    /// general path, which gives the contract's error: invalid UTF-8 inside
    /// a proposal, a null or fractional budget, a repeated tool or key, an
    /// unknown key, a non-string kind, a lone surrogate in a tool name.
    #[test]
    fn the_fast_run_path_declines_what_the_general_path_refuses() {
        let ok = r#"{"fn":"run_bounded_agent","args":{"script":[{"kind":"final","text":"x"}],"tools":{"add":"add"}}}"#;
        let mut out = Vec::new();
        assert!(fast_path(ok.as_bytes(), &mut out), "the plain case is fast");
        let mut hostile: Vec<Vec<u8>> = [
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add"},"max_decisions":null}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add"},"max_tool_calls":1.5}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add","add":"echo"}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"script":[],"tools":{}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{},"extra":1}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":1}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"\ud800":"add"}}}"#,
        ]
        .iter()
        .map(|l| l.as_bytes().to_vec())
        .collect();
        let mut bad_utf8 =
            br#"{"fn":"run_bounded_agent","args":{"script":[{"kind":"final","text":""#.to_vec();
        bad_utf8.extend_from_slice(b"\xff\"}],\"tools\":{}}}");
        hostile.push(bad_utf8);
        for line in &hostile {
            let mut out = Vec::new();
            assert!(
                !fast_path(line, &mut out),
                "{}",
                String::from_utf8_lossy(line)
            );
            let answer = answer_line(line);
            assert!(answer.starts_with(r#"{"error":"#), "{answer}");
        }
    }
}
