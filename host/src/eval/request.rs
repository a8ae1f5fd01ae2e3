//! The one reader of `budgetgate eval`'s requests: every spelling of a
//! request — compact, Python's `json.dumps` default (`", "`, `": "`), keys
//! sorted, any whitespace and any key order — is read in one pass over the
//! line, each value borrowed from it, and answered with the writers of
//! `crate::answer` (issue 30, item 5: its speed does not depend on the
//! spelling).
//!
//! It answers only what it can prove the serde reading of the line would
//! answer the same way: a request whose structure it reads here and whose
//! values the core's strict readers accept. Everything else — an error of
//! any kind, an escape in a key, the function name or a tool name, a budget
//! that is not a plain integer, a function other than the four it reads — is
//! declined (`None`), and [`super::general`] answers, which words every error
//! exactly as before.
//!
//! Why reading the structure here is enough: each value is either read here
//! byte by byte (keys, the function name, tool names and kinds, budgets) or
//! handed whole to a reader that accepts exactly one complete JSON value
//! (`ActionRef::validate`, `Plan::parse`, `Limits::parse`, or
//! `budgetgate_core::json::check` for a proposal the run did not validate),
//! all of them stricter than serde_json. A value's end is found by
//! [`Cursor::skip`], which does not check what it skips: when the bytes it
//! marks are then accepted as one complete value, the line is exactly the
//! request read here, and valid JSON. Whitespace is JSON's four bytes only.

use budgetgate_core::limits::{
    DEFAULT_MAX_DECISIONS, DEFAULT_MAX_TOOL_CALLS, MAX_STEPS, MAX_TOOLS,
};
use budgetgate_core::{ActionRef, Limits, Plan, RunLimits};

use crate::driver::Rejection;
use crate::tools::DemoKind;

/// Deepest nesting [`Cursor::skip`] goes through; anything deeper is
/// declined (serde_json's limit of 128 levels counts from the line, the
/// core's from the value).
const MAX_SKIP_DEPTH: u32 = 32;

/// A position in a request line.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    const fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Skips JSON whitespace (space, tab, line feed, carriage return).
    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        self.space();
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// Whitespace, then exactly `b`.
    fn byte(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    /// A string without escapes: the bytes between its quotes. A string
    /// with a backslash is declined (its decoded text could be anything);
    /// its bytes are otherwise unchecked, so a caller compares them with
    /// known ASCII words or checks them itself.
    fn plain(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let start = self.at;
        // Keys, names and kinds are short: a byte loop beats a vector search.
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => break,
                b'\\' => return None,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        self.bytes.get(start..self.at - 1)
    }

    /// A key and its colon.
    fn key(&mut self) -> Option<&'a [u8]> {
        let key = self.plain()?;
        self.byte(b':')?;
        Some(key)
    }

    /// After a member or an element: `true` at a comma, `false` at the
    /// container's end `close`.
    fn more(&mut self, close: u8) -> Option<bool> {
        match self.next()? {
            b',' => Some(true),
            b if b == close => Some(false),
            _ => None,
        }
    }

    /// One value, skipped without checking it (see the module's doc): the
    /// bytes from its first to its last. Containers are matched by depth,
    /// strings by their closing quote (an escaped quote does not close one).
    fn skip(&mut self) -> Option<&'a [u8]> {
        self.space();
        let start = self.at;
        let mut depth = 0u32;
        loop {
            // Bytes that change nothing here (digits, letters, `:`, and
            // `,` or whitespace inside a container) in one tight loop.
            while let Some(&b) = self.bytes.get(self.at) {
                match SKIP[usize::from(b)] {
                    PLAIN => self.at += 1,
                    DELIMITER if depth > 0 => self.at += 1,
                    _ => break,
                }
            }
            match SKIP[usize::from(*self.bytes.get(self.at)?)] {
                QUOTE => {
                    self.at += 1;
                    loop {
                        match *self.bytes.get(self.at)? {
                            b'"' => break,
                            // The escaped byte too.
                            b'\\' => self.at += 2,
                            _ => self.at += 1,
                        }
                    }
                    self.at += 1;
                }
                OPEN => {
                    depth += 1;
                    if depth > MAX_SKIP_DEPTH {
                        return None;
                    }
                    self.at += 1;
                    continue;
                }
                CLOSE if depth > 0 => {
                    depth -= 1;
                    self.at += 1;
                }
                // A delimiter, or a container's end, after a top-level
                // scalar.
                _ => break,
            }
            if depth == 0 {
                break;
            }
        }
        self.bytes.get(start..self.at).filter(|v| !v.is_empty())
    }

    /// The last value of the object being read: everything up to the
    /// object's closing brace, which must end the text (whitespace aside).
    /// Whoever reads the value checks that it is one complete value.
    fn last(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let inner = trim(rest).strip_suffix(b"}")?;
        self.at = self.bytes.len();
        Some(trim(inner)).filter(|v| !v.is_empty())
    }

    /// Only whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.space();
        (self.at == self.bytes.len()).then_some(())
    }

    /// A budget: a plain non-negative integer, no leading zero, ending at a
    /// delimiter, within `u32` (anything else — `-0`, a float, `null` — is
    /// declined and the general path decides).
    fn uint(&mut self) -> Option<u32> {
        self.space();
        let (value, len) = budgetgate_core::json::plain_uint(self.bytes.get(self.at..)?)?;
        self.at += len;
        Some(value)
    }
}

/// The classes of bytes for [`Cursor::skip`].
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const OPEN: u8 = 2;
const CLOSE: u8 = 3;
const DELIMITER: u8 = 4;

const SKIP: [u8; 256] = {
    let mut table = [PLAIN; 256];
    table[b'"' as usize] = QUOTE;
    table[b'{' as usize] = OPEN;
    table[b'[' as usize] = OPEN;
    table[b'}' as usize] = CLOSE;
    table[b']' as usize] = CLOSE;
    table[b',' as usize] = DELIMITER;
    table[b' ' as usize] = DELIMITER;
    table[b'\t' as usize] = DELIMITER;
    table[b'\n' as usize] = DELIMITER;
    table[b'\r' as usize] = DELIMITER;
    table
};

const fn is_space(b: &u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `bytes` without JSON whitespace at either end.
fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    trim_end(bytes.get(start..).unwrap_or_default())
}

/// `bytes` without JSON whitespace at its end.
fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(0, |e| e + 1);
    bytes.get(..end).unwrap_or_default()
}

/// The envelope `{"fn": NAME, "args": ARGS}`, in either order: the name's
/// bytes (no escape) and the arguments' text.
fn envelope(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut c = Cursor::new(line);
    c.byte(b'{')?;
    if let Some(found) = args_first(line, c.at) {
        return found;
    }
    let (mut name, mut args) = (None, None);
    loop {
        match c.key()? {
            b"fn" if name.is_none() => name = Some(c.plain()?),
            // The arguments after the name run to the envelope's end.
            b"args" if args.is_none() && name.is_some() => {
                args = Some(c.last()?);
                break;
            }
            b"args" if args.is_none() => args = Some(c.skip()?),
            _ => return None,
        }
        if !c.more(b'}')? {
            break;
        }
    }
    c.end()?;
    Some((name?, args?))
}

/// The envelope with its arguments first (keys sorted), `at` just past its
/// `{`: the name is read from the line's end, `, "fn": "NAME" }`, backwards
/// (the name has no quote or backslash: it must be one of the functions'
/// names), and the arguments are everything between, not skipped first.
/// `None` when the line does not go on with `"args"`; `Some(None)` to
/// decline.
#[allow(clippy::option_option)]
fn args_first(line: &[u8], at: usize) -> Option<Option<(&[u8], &[u8])>> {
    let mut c = Cursor { bytes: line, at };
    if c.key() != Some(b"args") {
        return None;
    }
    let found = (|| {
        let tail = trim_end(line).strip_suffix(b"}")?;
        let tail = trim_end(tail).strip_suffix(b"\"")?;
        let open = tail.iter().rposition(|&b| b == b'"')?;
        let name = tail.get(open + 1..)?;
        let tail = trim_end(tail.get(..open)?).strip_suffix(b":")?;
        let tail = trim_end(tail).strip_suffix(b"\"fn\"")?;
        let tail = trim_end(tail).strip_suffix(b",")?;
        let args = trim(tail.get(c.at..)?);
        (!args.is_empty() && super::FUNCTIONS.iter().any(|f| f.as_bytes() == name))
            .then_some((name, args))
    })();
    Some(found)
}

/// Answers `line` onto `out` if it is a request this reader takes (see the
/// module's doc); `false` (and `out` as it was) otherwise.
pub(super) fn answer(line: &[u8], out: &mut Vec<u8>) -> bool {
    let mark = out.len();
    let answered = envelope(line).is_some_and(|(name, args)| match name {
        b"validate_agent_action" => validate(args, out),
        b"bounded_workflow" => workflow(args, out),
        b"run_bounded_agent" => run(args, out),
        b"aggregate_usage" => usage(args, out),
        _ => false,
    });
    if !answered {
        out.truncate(mark);
    }
    answered
}

/// `{"value": PROPOSAL}`.
fn validate(args: &[u8], out: &mut Vec<u8>) -> bool {
    let mut c = Cursor::new(args);
    let value = (|| {
        c.byte(b'{')?;
        (c.key()? == b"value").then_some(())?;
        c.last()
    })();
    match value.map(ActionRef::parse) {
        Some(Ok(action)) => {
            crate::answer::action(out, &action);
            true
        }
        _ => false,
    }
}

/// `{"plan": PLAN}`.
fn usage(args: &[u8], out: &mut Vec<u8>) -> bool {
    let mut c = Cursor::new(args);
    let plan = (|| {
        c.byte(b'{')?;
        (c.key()? == b"plan").then_some(())?;
        c.last()
    })();
    match plan.map(Plan::<MAX_STEPS>::parse) {
        Some(Ok(plan)) => serde_json::to_writer(out, &plan.usage()).is_ok(),
        _ => false,
    }
}

/// `{"plan": PLAN, "limits": LIMITS}`, in either order. With the plan
/// first, the limits are found from the end instead of skipping the plan:
/// valid limits are one flat object, so they start at the last `{`, after
/// `, "limits":` (what is read backwards is then parsed whole, as the plan
/// before it, so a line read wrongly here is declined).
fn workflow(args: &[u8], out: &mut Vec<u8>) -> bool {
    let mut c = Cursor::new(args);
    let parts = (|| {
        c.byte(b'{')?;
        match c.key()? {
            b"plan" => {
                let inner = trim_end(args).strip_suffix(b"}")?;
                let open = inner.iter().rposition(|&b| b == b'{')?;
                let limits = trim_end(inner.get(open..)?);
                let before = trim_end(inner.get(..open)?).strip_suffix(b":")?;
                let before = trim_end(before).strip_suffix(b"\"limits\"")?;
                let before = trim_end(before).strip_suffix(b",")?;
                let plan = trim(before.get(c.at..)?);
                (!plan.is_empty()).then_some((plan, limits))
            }
            b"limits" => {
                let limits = c.skip()?;
                c.byte(b',')?;
                (c.key()? == b"plan").then_some(())?;
                Some((c.last()?, limits))
            }
            _ => None,
        }
    })();
    let Some((plan, limits)) = parts else {
        return false;
    };
    match (Plan::<MAX_STEPS>::parse(plan), Limits::parse(limits)) {
        (Ok(plan), Ok(limits)) => {
            crate::answer::workflow(out, &plan, &plan.bounded_workflow(&limits));
            true
        }
        _ => false,
    }
}

/// The arguments of `run_bounded_agent`, borrowed from the line.
#[derive(Default)]
struct RunArgs<'a> {
    /// Each proposal's text, as [`Cursor::skip`] marked it (unchecked yet).
    script: Option<Vec<&'a [u8]>>,
    tools: Option<Vec<(String, DemoKind)>>,
    max_decisions: Option<u32>,
    max_tool_calls: Option<u32>,
}

impl<'a> RunArgs<'a> {
    /// `{"script": [...], "tools": {...}, "max_decisions"?: INT,
    /// "max_tool_calls"?: INT}` in any order, each key once.
    fn read(args: &'a [u8]) -> Option<Self> {
        let mut c = Cursor::new(args);
        let mut a = Self::default();
        c.byte(b'{')?;
        loop {
            match c.key()? {
                b"script" if a.script.is_none() => a.script = Some(script(&mut c)?),
                b"tools" if a.tools.is_none() => a.tools = Some(tools(&mut c)?),
                b"max_decisions" if a.max_decisions.is_none() => {
                    a.max_decisions = Some(c.uint()?);
                }
                b"max_tool_calls" if a.max_tool_calls.is_none() => {
                    a.max_tool_calls = Some(c.uint()?);
                }
                _ => return None,
            }
            if !c.more(b'}')? {
                break;
            }
        }
        c.end()?;
        Some(a)
    }
}

/// `[PROPOSAL, ...]`: each proposal's bytes, unchecked.
fn script<'a>(c: &mut Cursor<'a>) -> Option<Vec<&'a [u8]>> {
    c.byte(b'[')?;
    let mut items = Vec::new();
    c.space();
    if c.bytes.get(c.at) == Some(&b']') {
        c.at += 1;
        return Some(items);
    }
    loop {
        items.push(c.skip()?);
        if !c.more(b']')? {
            return Some(items);
        }
    }
}

/// `{NAME: KIND, ...}`: names of printable ASCII without escapes, each once,
/// at most [`MAX_TOOLS`]; kinds the demo tools' names.
fn tools(c: &mut Cursor<'_>) -> Option<Vec<(String, DemoKind)>> {
    c.byte(b'{')?;
    let mut tools: Vec<(String, DemoKind)> = Vec::new();
    c.space();
    if c.bytes.get(c.at) == Some(&b'}') {
        c.at += 1;
        return Some(tools);
    }
    loop {
        let name = c.key()?;
        if !name.iter().all(|b| (0x20..0x7f).contains(b)) {
            return None;
        }
        let name = std::str::from_utf8(name).ok()?;
        let kind = DemoKind::parse(std::str::from_utf8(c.plain()?).ok()?)?;
        if tools.len() == MAX_TOOLS || tools.iter().any(|(n, _)| n == name) {
            return None;
        }
        tools.push((name.to_owned(), kind));
        if !c.more(b'}')? {
            return Some(tools);
        }
    }
}

/// Runs `run_bounded_agent`'s arguments and writes the result, if they read
/// cleanly here, the run starts, and every proposal is one valid JSON
/// document (those the run validated as actions are; the others, the
/// proposal it rejected as invalid and those it never reached, are checked
/// by `budgetgate_core::json::check`, as the general path has serde_json
/// check every one before the run).
fn run(args: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(a) = RunArgs::read(args) else {
        return false;
    };
    let (Some(script), Some(tools)) = (a.script, a.tools) else {
        return false;
    };
    let Ok(limits) = RunLimits::new(
        a.max_decisions.unwrap_or(DEFAULT_MAX_DECISIONS),
        a.max_tool_calls.unwrap_or(DEFAULT_MAX_TOOL_CALLS),
    ) else {
        return false;
    };
    let Ok((result, proposed)) = super::run_script(&script, &tools, limits) else {
        return false;
    };
    // Proposals before `checked` were validated as actions by the run.
    let invalid_last = matches!(result.rejection, Some(Rejection::Invalid(_)));
    let checked = proposed.min(script.len()) - usize::from(invalid_last && proposed > 0);
    let rest = script.get(checked..).unwrap_or_default();
    if rest
        .iter()
        .any(|item| budgetgate_core::json::check(item).is_err())
    {
        return false;
    }
    crate::answer::run(out, &result).is_ok()
}
