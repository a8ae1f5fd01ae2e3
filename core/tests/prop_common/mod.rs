//! Shared pieces of the property tests (`core/tests/prop_*.rs`, and
//! `tests/tests/prop_*.rs`, which include this file by path).
//!
//! * [`J`]: a JSON document tree whose *spelling* the test controls (string
//!   escapes, number literals, whitespace, a BOM, trailing text), rendered to
//!   bytes by [`Doc::render`];
//! * [`decode`]: an independent model of what a strict `json.loads` makes of
//!   such a tree ([`MV`]), refusing what the contract refuses at the JSON level
//!   (duplicate keys, lone surrogates, raw control characters, bad literals,
//!   a BOM, trailing text);
//! * [`py_dumps`]: a model of Python's
//!   `json.dumps(v, ensure_ascii=False, separators=(',', ':'), allow_nan=False)`
//!   over `serde_json::Value`, with floats spelled by Python's `repr` rules
//!   re-spelled from serde_json's own (ryu) output;
//! * [`config`]: the case count, raised with the `PROPTEST_CASES` variable.
//!
//! Everything here allocates freely and is written from the contract
//! (`docs/CONTRACT.md`, whose section X is what `SPEC X` names) and the
//! seed's Python, not from the core's code.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;

/// Cases per property: `PROPTEST_CASES` when set (proptest's own variable),
/// otherwise `default`.
pub fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        // Shrunk failures are kept next to each test file
        // (`prop_*.proptest-regressions`) and replayed first on every run.
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..Config::default()
    }
}

/// The first `n` characters of a document, for failure messages.
pub fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > 300 {
        format!(
            "{}… ({} bytes)",
            text.chars().take(300).collect::<String>(),
            bytes.len()
        )
    } else {
        text.into_owned()
    }
}

// ---------------------------------------------------------------------------
// The document tree and its rendering

/// One character of a JSON string as it is spelled.
#[derive(Debug, Clone, PartialEq)]
pub enum SChar {
    /// Written as is (a raw control character makes the document invalid;
    /// `"` and `\` are always written with their short escapes).
    Raw(char),
    /// Written as `\uXXXX` (a surrogate pair above U+FFFF).
    Esc(char),
    /// Written with its two-character escape when it has one, else as `Esc`.
    Short(char),
    /// A lone surrogate escape `\uD8xx`: never acceptable.
    Lone(u16),
}

/// A JSON string as spelled.
#[derive(Clone, PartialEq)]
pub struct JStr(pub Vec<SChar>);

/// Shown as it is written in the document, cut after 120 characters, so that
/// failure messages and regression files stay readable.
impl std::fmt::Debug for JStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut r = Renderer {
            out: String::new(),
            ws: &[],
            next: 0,
            bad_ws: false,
        };
        r.string(self);
        let n = r.out.chars().count();
        if n > 120 {
            let head: String = r.out.chars().take(120).collect();
            write!(f, "J{head}…({n} chars)")
        } else {
            write!(f, "J{}", r.out)
        }
    }
}

impl JStr {
    /// `text` spelled plainly (controls escaped, everything else raw).
    pub fn plain(text: &str) -> Self {
        Self::styled(text, 0)
    }

    /// `text` with each character's spelling chosen by the bits of `style`.
    pub fn styled(text: &str, style: u64) -> Self {
        Self(
            text.chars()
                .enumerate()
                .map(|(i, c)| {
                    let bit = |k: usize| (style.rotate_right(((i * 2 + k) % 64) as u32)) & 1 == 1;
                    if (c as u32) < 0x20 || bit(0) {
                        if bit(1) {
                            SChar::Short(c)
                        } else {
                            SChar::Esc(c)
                        }
                    } else {
                        SChar::Raw(c)
                    }
                })
                .collect(),
        )
    }
}

/// A JSON value as spelled.
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    /// A number literal, written verbatim (may be an invalid literal on purpose).
    Num(String),
    Str(JStr),
    Arr(Vec<J>),
    /// Members in document order; keys may repeat on purpose.
    Obj(Vec<(JStr, J)>),
}

impl J {
    pub fn s(text: &str) -> Self {
        Self::Str(JStr::plain(text))
    }
    pub fn int(v: i64) -> Self {
        Self::Num(v.to_string())
    }
    pub fn obj(members: Vec<(&str, J)>) -> Self {
        Self::Obj(
            members
                .into_iter()
                .map(|(k, v)| (JStr::plain(k), v))
                .collect(),
        )
    }
}

/// A whole document: the value plus what surrounds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    pub bom: bool,
    /// Whitespace pieces used in turn at every token boundary (none if empty).
    pub ws: Vec<&'static str>,
    pub value: J,
    /// Text after the value.
    pub trailing: &'static str,
}

impl Doc {
    pub fn bare(value: J) -> Self {
        Self {
            bom: false,
            ws: Vec::new(),
            value,
            trailing: "",
        }
    }

    /// The bytes, and whether a non-JSON whitespace piece was actually written.
    pub fn render(&self) -> (Vec<u8>, bool) {
        let mut r = Renderer {
            out: String::new(),
            ws: &self.ws,
            next: 0,
            bad_ws: false,
        };
        r.gap();
        r.value(&self.value);
        r.gap();
        r.out.push_str(self.trailing);
        let mut bytes = Vec::new();
        if self.bom {
            bytes.extend_from_slice(b"\xEF\xBB\xBF");
        }
        bytes.extend_from_slice(r.out.as_bytes());
        (bytes, r.bad_ws)
    }

    pub fn text(&self) -> Vec<u8> {
        self.render().0
    }
}

/// Renders a value with no extra whitespace.
pub fn render(value: &J) -> String {
    String::from_utf8(Doc::bare(value.clone()).text()).expect("rendered JSON is UTF-8")
}

struct Renderer<'a> {
    out: String,
    ws: &'a [&'static str],
    next: usize,
    bad_ws: bool,
}

impl Renderer<'_> {
    fn gap(&mut self) {
        if self.ws.is_empty() {
            return;
        }
        let piece = self.ws[self.next % self.ws.len()];
        self.next += 1;
        if piece
            .chars()
            .any(|c| !matches!(c, ' ' | '\t' | '\n' | '\r'))
        {
            self.bad_ws = true;
        }
        self.out.push_str(piece);
    }

    fn string(&mut self, s: &JStr) {
        self.out.push('"');
        for c in &s.0 {
            match *c {
                SChar::Raw('"') => self.out.push_str("\\\""),
                SChar::Raw('\\') => self.out.push_str("\\\\"),
                SChar::Raw(c) => self.out.push(c),
                SChar::Short(c) => match c {
                    '"' => self.out.push_str("\\\""),
                    '\\' => self.out.push_str("\\\\"),
                    '/' => self.out.push_str("\\/"),
                    '\u{8}' => self.out.push_str("\\b"),
                    '\u{c}' => self.out.push_str("\\f"),
                    '\n' => self.out.push_str("\\n"),
                    '\r' => self.out.push_str("\\r"),
                    '\t' => self.out.push_str("\\t"),
                    other => self.escape(other),
                },
                SChar::Esc(c) => self.escape(c),
                SChar::Lone(u) => self.out.push_str(&format!("\\u{u:04x}")),
            }
        }
        self.out.push('"');
    }

    fn escape(&mut self, c: char) {
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            self.out.push_str(&format!("\\u{u:04X}"));
        }
    }

    fn value(&mut self, v: &J) {
        match v {
            J::Null => self.out.push_str("null"),
            J::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            J::Num(n) => self.out.push_str(n),
            J::Str(s) => self.string(s),
            J::Arr(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.gap();
                    if i > 0 {
                        self.out.push(',');
                        self.gap();
                    }
                    self.value(item);
                }
                self.gap();
                self.out.push(']');
            }
            J::Obj(members) => {
                self.out.push('{');
                for (i, (k, item)) in members.iter().enumerate() {
                    self.gap();
                    if i > 0 {
                        self.out.push(',');
                        self.gap();
                    }
                    self.string(k);
                    self.gap();
                    self.out.push(':');
                    self.gap();
                    self.value(item);
                }
                self.gap();
                self.out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The model of a strict json.loads

/// What a strict reader makes of a document: Python's `json.loads` value
/// model (integers unbounded, floats IEEE doubles).
#[derive(Debug, Clone, PartialEq)]
pub enum MV {
    Null,
    Bool(bool),
    /// An integer literal that fits `i128`.
    Int(i128),
    /// An integer literal beyond `i128` (out of every range here).
    HugeInt,
    Float(f64),
    Str(String),
    Arr(Vec<MV>),
    Obj(Vec<(String, MV)>),
}

impl MV {
    pub fn get(&self, key: &str) -> Option<&MV> {
        match self {
            MV::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Python's `type(x) is int` with its value.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            MV::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The key set of an object, sorted.
    pub fn keys(&self) -> Option<Vec<&str>> {
        match self {
            MV::Obj(m) => {
                let mut k: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
                k.sort_unstable();
                Some(k)
            }
            _ => None,
        }
    }
}

/// The document as a strict reader sees it, or `Err` if it is not acceptable JSON.
pub fn decode(doc: &Doc) -> Result<MV, ()> {
    let (_, bad_ws) = doc.render();
    if doc.bom || bad_ws {
        return Err(());
    }
    if doc
        .trailing
        .chars()
        .any(|c| !matches!(c, ' ' | '\t' | '\n' | '\r'))
    {
        return Err(());
    }
    decode_value(&doc.value)
}

pub fn decode_value(v: &J) -> Result<MV, ()> {
    Ok(match v {
        J::Null => MV::Null,
        J::Bool(b) => MV::Bool(*b),
        J::Num(text) => number(text)?,
        J::Str(s) => MV::Str(decode_str(s)?),
        J::Arr(items) => MV::Arr(items.iter().map(decode_value).collect::<Result<_, _>>()?),
        J::Obj(members) => {
            let mut out: Vec<(String, MV)> = Vec::new();
            for (k, item) in members {
                let key = decode_str(k)?;
                if out.iter().any(|(seen, _)| *seen == key) {
                    return Err(()); // duplicate key: refused (stricter than Python)
                }
                out.push((key, decode_value(item)?));
            }
            MV::Obj(out)
        }
    })
}

pub fn decode_str(s: &JStr) -> Result<String, ()> {
    let mut out = String::new();
    for c in &s.0 {
        match *c {
            SChar::Raw(c) if (c as u32) < 0x20 => return Err(()),
            SChar::Raw(c) | SChar::Esc(c) | SChar::Short(c) => out.push(c),
            SChar::Lone(_) => return Err(()),
        }
    }
    Ok(out)
}

/// RFC 8259 number grammar, checked by hand, then Python's reading of it.
pub fn number(text: &str) -> Result<MV, ()> {
    let b = text.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return Err(()),
    }
    let mut float = false;
    if b.get(i) == Some(&b'.') {
        i += 1;
        float = true;
        if !digits(&mut i) {
            return Err(());
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        float = true;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return Err(());
        }
    }
    if i != b.len() {
        return Err(());
    }
    Ok(if float {
        MV::Float(text.parse().map_err(|_| ())?)
    } else {
        text.parse().map_or(MV::HugeInt, MV::Int)
    })
}

// ---------------------------------------------------------------------------
// Small pieces of the contract, written out plainly

/// Every character for which Python 3.11's `str.isspace()` is true (what
/// `str.strip()` removes), listed from CPython itself.
pub const PY_SPACE: &[char] = &[
    '\u{9}', '\u{a}', '\u{b}', '\u{c}', '\u{d}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{1f}', ' ',
    '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}', '\u{2003}', '\u{2004}',
    '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200a}', '\u{2028}', '\u{2029}',
    '\u{202f}', '\u{205f}', '\u{3000}',
];

/// Python's `not s.strip()`.
pub fn py_blank(s: &str) -> bool {
    s.chars().all(|c| PY_SPACE.contains(&c))
}

const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
const DIGITS: &str = "0123456789";

/// `re.fullmatch(f"[{first}][{rest}]{{0,{max-1}}}", s)` over explicit ASCII sets.
pub fn fullmatch(s: &str, first: &str, rest: &str, max: usize) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if first.contains(c) => {}
        _ => return false,
    }
    chars.all(|c| rest.contains(c)) && s.chars().count() <= max
}

/// `[A-Za-z][A-Za-z0-9_-]{0,39}`
pub fn is_identifier(s: &str) -> bool {
    let letters = format!("{UPPER}{LOWER}");
    fullmatch(s, &letters, &format!("{letters}{DIGITS}_-"), 40)
}

/// `[A-Za-z][A-Za-z0-9_]{0,31}`
pub fn is_argument_key(s: &str) -> bool {
    let letters = format!("{UPPER}{LOWER}");
    fullmatch(s, &letters, &format!("{letters}{DIGITS}_"), 32)
}

/// `[a-z][a-z0-9-]{0,31}`
pub fn is_plan_id(s: &str) -> bool {
    fullmatch(s, LOWER, &format!("{LOWER}{DIGITS}-"), 32)
}

// ---------------------------------------------------------------------------
// The model of Python's compact json.dumps

/// `json.dumps(v, ensure_ascii=False, separators=(',', ':'), allow_nan=False)`.
pub fn py_dumps(v: &Value) -> String {
    py_dumps_with(v, &py_float_repr)
}

/// [`py_dumps`] with another float spelling (to tolerate a known bug).
pub fn py_dumps_with(v: &Value, float: &dyn Fn(f64) -> String) -> String {
    let mut out = String::new();
    dump(v, &mut out, float);
    out
}

fn dump(v: &Value, out: &mut String, float: &dyn Fn(f64) -> String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                out.push_str(&float(f));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => out.push_str(&py_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dump(item, out, float);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&py_str(k));
                out.push(':');
                dump(item, out, float);
            }
            out.push('}');
        }
    }
}

/// Python's `py_encode_basestring` (the `ensure_ascii=False` string encoder).
pub fn py_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Python's `float.__repr__`: the shortest digits that round-trip, in fixed
/// notation when the decimal exponent is in `-4..16`, otherwise as `d.ddde±XX`.
///
/// The digits come from serde_json's own float output (ryu), re-spelled from
/// its layout (`1e16`, `1e-5`) into Python's. The core takes its digits from
/// ryu too (since 7fb6654), so the independent check of the digits themselves
/// is the CPython table in `prop_pyjson.rs`.
pub fn py_float_repr(f: f64) -> String {
    assert!(f.is_finite());
    let spelled = serde_json::to_string(&f).expect("finite float");
    let (negative, body) = match spelled.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, spelled.as_str()),
    };
    let (mantissa, exp) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().expect("exponent")),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // value = 0.DIGITS × 10^point, once leading zeros are removed.
    let all = format!("{int_part}{frac_part}");
    let mut point = int_part.len() as i32 + exp;
    let trimmed_lead = all.trim_start_matches('0');
    point -= (all.len() - trimmed_lead.len()) as i32;
    let digits = trimmed_lead.trim_end_matches('0');
    let sign = if negative { "-" } else { "" };
    if digits.is_empty() {
        return format!("{sign}0.0");
    }
    let sci = point - 1;
    if (-4..16).contains(&sci) {
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if (point as usize) < digits.len() {
            let (a, b) = digits.split_at(point as usize);
            format!("{sign}{a}.{b}")
        } else {
            format!(
                "{sign}{digits}{}.0",
                "0".repeat(point as usize - digits.len())
            )
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if sci < 0 { '-' } else { '+' };
        format!("{sign}{first}{rest}e{esign}{:02}", sci.abs())
    }
}

// ---------------------------------------------------------------------------
// Strategies shared by several properties

/// A string spelled plainly or with a random mix of raw characters and
/// escapes.
pub fn styled(text: impl Strategy<Value = String>) -> impl Strategy<Value = JStr> {
    // Half of them plainly, as agents write them: a key, an identifier or
    // a kind mixing raw and escaped characters at random is hardly ever
    // plain, and the scanner's fast paths read only plain ones.
    let style = prop_oneof![Just(0u64), any::<u64>()];
    (text, style).prop_map(|(t, style)| JStr::styled(&t, style))
}

/// Like [`styled`], but about one in `1/p` strings gets a lone surrogate or a
/// raw control character somewhere (a near miss at the JSON level).
pub fn styled_or_broken(
    text: impl Strategy<Value = String>,
    broken_weight: u32,
) -> impl Strategy<Value = JStr> {
    (
        styled(text),
        prop::option::weighted(
            f64::from(broken_weight) / 100.0,
            (
                any::<prop::sample::Index>(),
                prop_oneof![
                    (0xD800u16..=0xDFFF).prop_map(SChar::Lone),
                    (0u32..0x20).prop_map(|c| SChar::Raw(char::from_u32(c).unwrap_or('\0'))),
                ],
            ),
        ),
    )
        .prop_map(|(mut s, broken)| {
            if let Some((at, c)) = broken {
                let at = at.index(s.0.len() + 1);
                s.0.insert(at, c);
            }
            s
        })
}

/// Integer literals around the ±1e6 edge, plus small, wide, `-0` and huge ones.
pub fn int_literal() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (999_998i64..=1_000_002).prop_map(|v| v.to_string()),
        3 => (-1_000_002i64..=-999_998).prop_map(|v| v.to_string()),
        3 => (-100i64..=100).prop_map(|v| v.to_string()),
        2 => any::<i64>().prop_map(|v| v.to_string()),
        1 => Just("-0".to_string()),
        1 => "-?[1-9][0-9]{18,30}",
    ]
}

/// Float literals: tricky spellings around 1e6, overflow and underflow, and
/// random doubles in several spellings.
pub fn float_literal() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "7.0", "1e2", "1E2", "100e-2", "1e+6", "1e6", "1.0e6", "-1e6", "1000000.0",
            "-1000000.0", "1000000.0000000001", "1000000.00000000001", "999999.9999999999",
            "1000000.1", "1e400", "-1e400", "1e-400", "0.0", "-0.0", "0.5e-323", "2.5",
            "1E-7", "0e0", "-0E+0",
        ]).prop_map(str::to_string),
        3 => (-2.0e6f64..2.0e6).prop_map(|v| format!("{v:?}")),
        2 => (-2.0e6f64..2.0e6).prop_map(|v| format!("{v:e}")),
        1 => (-2.0e6f64..2.0e6).prop_map(|v| format!("{v:E}")),
        1 => any::<f64>().prop_filter("finite", |v| v.is_finite()).prop_map(|v| format!("{v:e}")),
    ]
}

/// Literals that are not JSON numbers at all.
pub fn bad_number_literal() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "01",
        "+1",
        ".5",
        "1.",
        "NaN",
        "Infinity",
        "-Infinity",
        "-",
        "1e",
        "0x10",
        "1_000",
        "--1",
        "1e+",
        "00",
    ])
    .prop_map(str::to_string)
}

/// Whitespace around tokens: mostly none or JSON whitespace, rarely a
/// non-JSON space (NBSP, form feed, vertical tab).
pub fn whitespace() -> impl Strategy<Value = Vec<&'static str>> {
    prop_oneof![
        6 => Just(Vec::new()),
        3 => prop::collection::vec(prop::sample::select(vec!["", " ", "\n", "\t ", "\r\n", "  "]), 1..5),
        1 => prop::collection::vec(prop::sample::select(vec![" ", "\u{a0}", "\u{c}", "\u{b}", "\u{3000}"]), 1..4),
    ]
}

/// Text after the value: mostly nothing or whitespace, rarely garbage.
pub fn trailing() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        12 => prop::sample::select(vec!["", " ", "\n", "\r\n\t"]),
        1 => prop::sample::select(vec!["x", " {}", ",", "\u{a0}", "null", "]"]),
    ]
}

/// A document around `value`, with a rare BOM, random whitespace and trailing text.
pub fn doc(value: impl Strategy<Value = J>) -> impl Strategy<Value = Doc> {
    (prop::bool::weighted(0.02), whitespace(), value, trailing()).prop_map(
        |(bom, ws, value, trailing)| Doc {
            bom,
            ws,
            value,
            trailing,
        },
    )
}
