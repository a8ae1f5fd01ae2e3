//! `budgetgate eval`: the machine interface, one JSON request per line.
//!
//! A request is `{"fn": NAME, "args": {...}}`; the answer is `{"ok": RESULT}`,
//! `{"error": "invalid-input", "detail": TEXT}` where the contract calls the
//! input invalid (the reference's `ValueError`), or
//! `{"error": "bad-request", "detail": TEXT}` for a line that is not a request.
//! Values are handed to the core as their raw JSON text, so integers and
//! floats stay distinct (`15` vs `15.0`) and `-0` is the integer 0.
//!
//! One reader takes every spelling of a request — compact, Python's
//! `json.dumps` default, keys sorted, any whitespace and key order — in one
//! pass over the line (`request`, at the same speed whatever the spelling:
//! `docs/BENCHMARKS.md`); an error, and the rare request it declines (an
//! escape in a key), is read again through serde_json (`general`), which
//! words the error. Both give the same answer to every line
//! (`tests::every_spelling_answers_as_the_general_path`,
//! `tests::mutants_answer_as_the_general_path`).

use budgetgate_core::{trace_work, ActionRef, Limits, Plan, RunLimits, WorkRow};
use serde_json::json;
use serde_json::value::RawValue;

use crate::driver::{run_with_tools, RunResult};
use crate::strict::{as_int, shape, Shape, StrictObject};
use crate::tools::DemoKind;

mod request;

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
    write_with(line, out, handle_into);
}

/// [`write_answer`] with `read` reading the request.
fn write_with(
    line: &[u8],
    out: &mut Vec<u8>,
    read: fn(&[u8], &mut Vec<u8>) -> Result<(), EvalError>,
) {
    let start = out.len();
    out.extend_from_slice(b"{\"ok\":");
    match read(line, out) {
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
///
/// Every request is read first by the one reader of [`request`], whatever
/// its spelling; what it declines (every error, and the rare request it
/// does not take) is read by [`general`], which words the error.
fn handle_into(line: &[u8], out: &mut Vec<u8>) -> Result<(), EvalError> {
    if request::answer(line, out) {
        return Ok(());
    }
    general(line, out)
}

/// Answers one request through serde_json: each level of the request as a
/// [`StrictObject`] of raw values. The reader of the errors, and of the
/// requests [`request::answer`] declines.
fn general(line: &[u8], out: &mut Vec<u8>) -> Result<(), EvalError> {
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
        let script: Vec<&[u8]> = self.script.iter().map(|raw| raw.get().as_bytes()).collect();
        run_script(&script, &self.tools, self.limits).map(|(result, _)| result)
    }
}

/// The bounded loop with `script` as policy: round `i` proposes `script[i]`
/// (its JSON text), and the policy fails once it is used up. With the
/// result, how many times the policy was asked (so how many proposals the
/// run validated: all of them but a last one it rejected as invalid).
fn run_script(
    script: &[&[u8]],
    tools: &[(String, DemoKind)],
    limits: RunLimits,
) -> Result<(RunResult, usize), EvalError> {
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
    .map(|result| (result, next))
    .map_err(invalid)
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

    /// The answer the general path alone gives.
    fn general_line(line: &[u8]) -> String {
        let mut out = Vec::new();
        write_with(line, &mut out, general);
        String::from_utf8(out).unwrap()
    }

    /// A JSON value as its parts' text, for spelling it again.
    enum Node<'a> {
        Scalar(&'a str),
        Array(Vec<Node<'a>>),
        Object(Vec<(&'a str, Node<'a>)>),
    }

    fn space(s: &[u8], at: &mut usize) {
        while matches!(s.get(*at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            *at += 1;
        }
    }

    /// Reads a value of (valid) JSON text; `None` for anything it does not
    /// follow.
    fn node<'a>(s: &'a str, at: &mut usize) -> Option<Node<'a>> {
        let b = s.as_bytes();
        space(b, at);
        let start = *at;
        match *b.get(*at)? {
            b'{' | b'[' => {
                let object = b[*at] == b'{';
                let close = if object { b'}' } else { b']' };
                *at += 1;
                let (mut members, mut items) = (Vec::new(), Vec::new());
                space(b, at);
                if b.get(*at) == Some(&close) {
                    *at += 1;
                } else {
                    loop {
                        if object {
                            let Node::Scalar(key) = node(s, at)? else {
                                return None;
                            };
                            space(b, at);
                            (b.get(*at) == Some(&b':')).then_some(())?;
                            *at += 1;
                            members.push((key, node(s, at)?));
                        } else {
                            items.push(node(s, at)?);
                        }
                        space(b, at);
                        match *b.get(*at)? {
                            b',' => *at += 1,
                            c if c == close => {
                                *at += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Some(if object {
                    Node::Object(members)
                } else {
                    Node::Array(items)
                })
            }
            b'"' => {
                *at += 1;
                loop {
                    match *b.get(*at)? {
                        b'"' => break,
                        b'\\' => *at += 2,
                        _ => *at += 1,
                    }
                }
                *at += 1;
                s.get(start..*at).map(Node::Scalar)
            }
            _ => {
                while !matches!(
                    b.get(*at),
                    None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    *at += 1;
                }
                (*at > start).then(|| Node::Scalar(&s[start..*at]))
            }
        }
    }

    /// `node` spelled with separators `item` and `key`, keys sorted or not.
    fn spell(node: &Node<'_>, item: &str, key: &str, sorted: bool, out: &mut String) {
        match node {
            Node::Scalar(text) => out.push_str(text),
            Node::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item);
                    }
                    spell(v, item, key, sorted, out);
                }
                out.push(']');
            }
            Node::Object(members) => {
                let mut members: Vec<&(&str, Node<'_>)> = members.iter().collect();
                if sorted {
                    members.sort_by_key(|(k, _)| *k);
                }
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item);
                    }
                    out.push_str(k);
                    out.push_str(key);
                    spell(v, item, key, sorted, out);
                }
                out.push('}');
            }
        }
    }

    /// The spellings of a request tested: as written; Python's `json.dumps`
    /// default; keys sorted (compact); keys sorted with the default
    /// separators; whitespace of every kind around every token.
    fn spellings(line: &str) -> Vec<String> {
        let mut all = vec![line.to_owned()];
        let mut at = 0;
        let Some(tree) = node(line, &mut at) else {
            return all;
        };
        if line[at..].trim_matches([' ', '\t', '\n', '\r']).is_empty() {
            for (item, key, sorted) in [
                (", ", ": ", false),
                (",", ":", true),
                (", ", ": ", true),
                (" \t,\r ", "\t:\n ", false),
            ] {
                let mut out = String::new();
                spell(&tree, item, key, sorted, &mut out);
                all.push(out);
            }
            all.push(format!(" \t{}\t ", all[0]));
        }
        all
    }

    /// Every request of the reference vectors, as written.
    fn vector_requests() -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Case<'a> {
            #[serde(borrow)]
            request: &'a RawValue,
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
        let mut requests = Vec::new();
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
                requests.push(case.request.get().to_owned());
            }
        }
        requests
    }

    /// One reader for every spelling: on every request of the reference
    /// vectors (valid and invalid), in each spelling of [`spellings`], the
    /// answer is the general path's, byte for byte; a request answered
    /// `ok` is answered the same in every spacing; and the one-pass
    /// reader takes the same requests whatever their spelling.
    #[test]
    fn every_spelling_answers_as_the_general_path() {
        let mut taken = [0usize; 6];
        let mut respelled = 0;
        for request in vector_requests() {
            let all = spellings(&request);
            respelled += usize::from(all.len() > 1);
            let first = answer_line(request.as_bytes());
            for (k, line) in all.iter().enumerate() {
                let answer = answer_line(line.as_bytes());
                assert_eq!(answer, general_line(line.as_bytes()), "{line}");
                // Sorting keys changes a request (the order of a call's
                // arguments is kept in its answer); spacing does not.
                if first.starts_with(r#"{"ok":"#) && !matches!(k, 2 | 3) {
                    assert_eq!(answer, first, "{line}");
                }
                let mut out = Vec::new();
                taken[k] += usize::from(request::answer(line.as_bytes(), &mut out));
            }
        }
        assert!(respelled > 300, "only {respelled} requests were respelled");
        assert!(taken[0] > 300, "the one reader took only {taken:?}");
        assert!(
            taken.iter().all(|&t| t == taken[0]),
            "taken per spelling: {taken:?}"
        );
    }

    /// On mutants of the vectors' requests in every spelling (bytes
    /// replaced, inserted or removed: broken syntax, escapes, whitespace of
    /// other kinds, repeated keys, invalid UTF-8), the answer is always the
    /// general path's.
    #[test]
    fn mutants_answer_as_the_general_path() {
        let requests: Vec<String> = vector_requests()
            .iter()
            .flat_map(|r| spellings(r))
            .collect();
        let alphabet: &[u8] = b"{}[],:\"\\ \t\n\x0c\x00\xff0123456789-.eEtrufalsn_ud8xvpk";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut ok, mut taken) = (0, 0);
        for _ in 0..40_000 {
            let mut line = requests[(next() % requests.len() as u64) as usize]
                .as_bytes()
                .to_vec();
            for _ in 0..1 + next() % 2 {
                let at = (next() % (line.len() as u64 + 1)) as usize;
                let byte = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 4 {
                    0 if at < line.len() => line[at] = byte,
                    1 if at < line.len() => {
                        line.remove(at);
                    }
                    2 if at < line.len() => {
                        // A key or value repeated: the member around `at`.
                        let end = (at + 1 + (next() % 40) as usize).min(line.len());
                        let copy = line[at..end].to_vec();
                        line.splice(at..at, copy);
                    }
                    _ => line.insert(at, byte),
                }
            }
            let answer = answer_line(&line);
            assert_eq!(
                answer,
                general_line(&line),
                "{}",
                String::from_utf8_lossy(&line)
            );
            ok += usize::from(answer.starts_with(r#"{"ok":"#));
            taken += usize::from(request::answer(&line, &mut Vec::new()));
        }
        assert!(ok > 3_000 && taken > 2_000, "{ok} ok, {taken} taken");
    }

    /// The one reader leaves every doubtful request to the general path,
    /// which gives the contract's error: invalid UTF-8 inside a proposal, a
    /// null or fractional budget, a repeated tool or key, an unknown key, a
    /// non-string kind, a lone surrogate in a tool name, a form feed after
    /// the request (not JSON whitespace).
    #[test]
    fn the_one_reader_declines_what_the_general_path_refuses() {
        let ok = r#"{"fn":"run_bounded_agent","args":{"script":[{"kind":"final","text":"x"}],"tools":{"add":"add"}}}"#;
        let mut out = Vec::new();
        assert!(request::answer(ok.as_bytes(), &mut out), "the plain case");
        let mut hostile: Vec<Vec<u8>> = [
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add"},"max_decisions":null}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add"},"max_tool_calls":1.5}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":"add","add":"echo"}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"script":[],"tools":{}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{},"extra":1}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"add":1}}}"#,
            r#"{"fn":"run_bounded_agent","args":{"script":[],"tools":{"\ud800":"add"}}}"#,
            r#"{"args":{"script":[{"kind":"final","text":"x"}],"tools":{}},"fn":"run_bounded_agent","fn":"run_bounded_agent"}"#,
            r#"{"fn":"validate_agent_action","args":{"value":{"kind":"final","text":"x"}}}"#,
        ]
        .iter()
        .map(|l| l.as_bytes().to_vec())
        .collect();
        hostile.last_mut().unwrap().push(0x0c);
        let mut bad_utf8 =
            br#"{"fn":"run_bounded_agent","args":{"script":[{"kind":"final","text":""#.to_vec();
        bad_utf8.extend_from_slice(b"\xff\"}],\"tools\":{}}}");
        hostile.push(bad_utf8);
        // A proposal the run never reaches is still read as JSON first.
        hostile.push(
            br#"{"fn":"run_bounded_agent","args":{"script":[{"kind":"final","text":"x"},[1,]],"tools":{}}}"#
                .to_vec(),
        );
        for line in &hostile {
            let mut out = Vec::new();
            assert!(
                !request::answer(line, &mut out),
                "{}",
                String::from_utf8_lossy(line)
            );
            let answer = answer_line(line);
            assert!(answer.starts_with(r#"{"error":"#), "{answer}");
        }
    }
}
