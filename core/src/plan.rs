//! Plans of sub-tasks, their usage, and the bounded workflow (`SPEC B`).
//!
//! A plan is at most 32 rows `{id, parent, tokens, output}`. The whole plan is
//! validated when it is built, so a stop found later never hides an invalid row.

use core::fmt;

use crate::json::Event;
use heapless::Vec;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::ident::{IdentifierError, PlanId};
use crate::json::{JsonError, Number, Reader};
use crate::limits::{MAX_COST_LIMIT, MAX_PLAN_ID_LEN, MAX_ROW_COST, MAX_SHAPE_LIMIT, MAX_STEPS};

/// A field of a plan row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RowField {
    /// `id`
    Id,
    /// `parent`
    Parent,
    /// `tokens`
    Tokens,
    /// `output`
    Output,
}

impl RowField {
    const ALL: [Self; 4] = [Self::Id, Self::Parent, Self::Tokens, Self::Output];

    /// The key as written in JSON.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::Parent => "parent",
            Self::Tokens => "tokens",
            Self::Output => "output",
        }
    }
}

/// The rule a plan row breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RowRule {
    /// The row is not an object.
    NotAnObject,
    /// The row has a key other than `id`, `parent`, `tokens`, `output`.
    UnexpectedKey,
    /// The row lacks this key.
    MissingKey(RowField),
    /// `id` or `parent` is not a string matching `[a-z][a-z0-9-]{0,31}`
    /// (`parent` may also be null).
    InvalidId(RowField, Option<IdentifierError>),
    /// `id` repeats an earlier row's id.
    DuplicateId,
    /// `parent` is not the id of an earlier row.
    UnknownParent,
    /// `tokens` or `output` is not an integer 0..=10000.
    Cost(RowField),
}

/// Why a plan is invalid (`SPEC B`; the reference's `ValueError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PlanError {
    /// The document is not acceptable JSON (includes duplicate keys).
    Json(JsonError),
    /// The plan is not a JSON array.
    NotAList,
    /// The plan has more than 32 rows (or more than this build's capacity).
    TooManyRows,
    /// Row `row` (0-based) breaks `rule`.
    Row {
        /// Position of the row.
        row: u8,
        /// The rule it breaks.
        rule: RowRule,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not acceptable JSON: {e}"),
            Self::NotAList => f.write_str("a plan must be a JSON array of rows"),
            Self::TooManyRows => write!(f, "a plan has at most {MAX_STEPS} rows"),
            Self::Row { row, rule } => {
                write!(f, "row {row}: ")?;
                match rule {
                    RowRule::NotAnObject => f.write_str("must be an object"),
                    RowRule::UnexpectedKey => {
                        f.write_str("unexpected key; a row has exactly id, parent, tokens, output")
                    }
                    RowRule::MissingKey(k) => write!(f, "missing key `{}`", k.key()),
                    RowRule::InvalidId(k, _) => write!(
                        f,
                        "`{}` must be a string matching {}{}",
                        k.key(),
                        PlanId::PATTERN,
                        if *k == RowField::Parent {
                            " or null"
                        } else {
                            ""
                        }
                    ),
                    RowRule::DuplicateId => f.write_str("`id` repeats an earlier row's id"),
                    RowRule::UnknownParent => {
                        f.write_str("`parent` is not the id of an earlier row")
                    }
                    RowRule::Cost(k) => {
                        write!(f, "`{}` must be an integer 0..={MAX_ROW_COST}", k.key())
                    }
                }
            }
        }
    }
}

impl core::error::Error for PlanError {}

impl From<JsonError> for PlanError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// One validated plan row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    id: PlanId,
    parent: Option<u8>,
    tokens: u32,
    output: u32,
    depth: u8,
}

impl PlanRow {
    /// The step's id.
    pub fn id(&self) -> &PlanId {
        &self.id
    }
    /// Index of the parent row, `None` for a root.
    pub fn parent(&self) -> Option<usize> {
        self.parent.map(usize::from)
    }
    /// Tokens the step uses (0..=10000).
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
    /// Output the step produces (0..=10000).
    pub fn output(&self) -> u32 {
        self.output
    }
    /// Depth: 1 for a root, parent's depth + 1 otherwise.
    pub fn depth(&self) -> u32 {
        u32::from(self.depth)
    }
}

/// A validated plan of at most `N` rows (32 by default) (`SPEC B`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<const N: usize = MAX_STEPS> {
    rows: Vec<PlanRow, N>,
}

impl<const N: usize> Default for Plan<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Plan<N> {
    const FITS: () = assert!(N <= MAX_STEPS, "plans hold at most 32 rows");

    /// The empty plan.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Self { rows: Vec::new() }
    }

    /// The rows in order.
    pub fn rows(&self) -> &[PlanRow] {
        &self.rows
    }

    /// Appends a row after checking every rule of `SPEC B` against the rows
    /// already present. On error the plan is unchanged.
    pub fn try_push(
        &mut self,
        id: &str,
        parent: Option<&str>,
        tokens: u32,
        output: u32,
    ) -> Result<(), PlanError> {
        let row = u8::try_from(self.rows.len()).unwrap_or(u8::MAX);
        let fail = |rule| PlanError::Row { row, rule };
        let id = PlanId::new(id).map_err(|e| fail(RowRule::InvalidId(RowField::Id, Some(e))))?;
        let parent = match parent {
            None => None,
            Some(p) => {
                PlanId::new(p).map_err(|e| fail(RowRule::InvalidId(RowField::Parent, Some(e))))?;
                Some(p)
            }
        };
        self.push_checked(id, parent, tokens, output)
    }

    /// [`Self::try_push`] for an id (and parent) already checked against
    /// the id rules: the rules between rows and the costs.
    fn push_checked(
        &mut self,
        id: PlanId,
        parent: Option<&str>,
        tokens: u32,
        output: u32,
    ) -> Result<(), PlanError> {
        let row = u8::try_from(self.rows.len()).unwrap_or(u8::MAX);
        let fail = |rule| PlanError::Row { row, rule };
        if self.position(&id).is_some() {
            return Err(fail(RowRule::DuplicateId));
        }
        let (parent, depth) = match parent {
            None => (None, 1),
            Some(p) => {
                let index = self.position(p).ok_or(fail(RowRule::UnknownParent))?;
                let depth = self.rows.get(index).map_or(0, |r| r.depth);
                (Some(index as u8), depth + 1)
            }
        };
        for (field, value) in [(RowField::Tokens, tokens), (RowField::Output, output)] {
            if value > MAX_ROW_COST {
                return Err(fail(RowRule::Cost(field)));
            }
        }
        self.rows
            .push(PlanRow {
                id,
                parent,
                tokens,
                output,
                depth,
            })
            .map_err(|_| PlanError::TooManyRows)
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.rows.iter().position(|r| r.id.as_str() == id)
    }

    /// Reads and validates a plan from JSON text: an array of row objects.
    pub fn parse(json: &[u8]) -> Result<Self, PlanError> {
        // The reader decodes one escaped string at a time into its scratch,
        // which bounds the longest one it can read: 256 bytes holds every
        // key and id of a valid plan. Only a document with a longer escaped
        // string is read again with the large buffer of round 1, so every
        // answer (errors included) is the one that buffer gives, without
        // clearing 4.8 KiB for every plan.
        let compact = core::str::from_utf8(json).ok().and_then(|text| {
            Compact {
                bytes: json,
                text,
                at: 0,
            }
            .plan()
        });
        if let Some(plan) = compact {
            return Ok(plan);
        }
        let mut small = [0u8; 256];
        match Self::parse_in(json, &mut small) {
            Err(PlanError::Json(JsonError::StringTooLong)) => {
                let mut large = [0u8; MAX_STEPS * (24 + 2 * MAX_PLAN_ID_LEN)];
                Self::parse_in(json, &mut large)
            }
            done => done,
        }
    }

    fn parse_in(json: &[u8], scratch: &mut [u8]) -> Result<Self, PlanError> {
        let mut reader = Reader::new(json, scratch).map_err(PlanError::Json)?;
        match reader.next()? {
            Event::StartArray => {}
            _ => return Err(PlanError::NotAList),
        }
        let mut plan = Self::new();
        loop {
            let row = u8::try_from(plan.rows.len()).unwrap_or(u8::MAX);
            let fail = |rule| PlanError::Row { row, rule };
            match reader.next()? {
                Event::EndArray => break,
                Event::StartObject => {}
                _ => return Err(fail(RowRule::NotAnObject)),
            }
            if plan.rows.is_full() {
                return Err(PlanError::TooManyRows);
            }
            let mut id: Option<PlanId> = None;
            let mut parent: Option<Option<PlanId>> = None;
            let mut costs: [Option<u32>; 2] = [None, None];
            loop {
                let field = match reader.next()? {
                    Event::EndObject => break,
                    Event::Key(k) => RowField::ALL
                        .into_iter()
                        .find(|f| f.key() == k.as_str())
                        .ok_or(fail(RowRule::UnexpectedKey))?,
                    _ => return Err(PlanError::Json(JsonError::Syntax)),
                };
                let present = match field {
                    RowField::Id => id.is_some(),
                    RowField::Parent => parent.is_some(),
                    RowField::Tokens => costs[0].is_some(),
                    RowField::Output => costs[1].is_some(),
                };
                if present {
                    return Err(PlanError::Json(JsonError::DuplicateKey));
                }
                let event = reader.next()?;
                match (field, &event) {
                    (RowField::Id, Event::String(s)) => {
                        id = Some(
                            PlanId::new(s).map_err(|e| fail(RowRule::InvalidId(field, Some(e))))?,
                        )
                    }
                    (RowField::Parent, Event::String(s)) => {
                        parent = Some(Some(
                            PlanId::new(s).map_err(|e| fail(RowRule::InvalidId(field, Some(e))))?,
                        ))
                    }
                    (RowField::Parent, Event::Null) => parent = Some(None),
                    (RowField::Id | RowField::Parent, _) => {
                        return Err(fail(RowRule::InvalidId(field, None)))
                    }
                    (RowField::Tokens | RowField::Output, Event::Number(n)) => {
                        let value = Number::parse(n.as_str())?
                            .as_bounded_int(MAX_ROW_COST)
                            .ok_or(fail(RowRule::Cost(field)))?;
                        let slot = usize::from(field == RowField::Output);
                        if let Some(c) = costs.get_mut(slot) {
                            *c = Some(value);
                        }
                    }
                    (RowField::Tokens | RowField::Output, _) => {
                        return Err(fail(RowRule::Cost(field)))
                    }
                }
            }
            let id = id.ok_or(fail(RowRule::MissingKey(RowField::Id)))?;
            let parent = parent.ok_or(fail(RowRule::MissingKey(RowField::Parent)))?;
            let [tokens, output] = costs;
            let tokens = tokens.ok_or(fail(RowRule::MissingKey(RowField::Tokens)))?;
            let output = output.ok_or(fail(RowRule::MissingKey(RowField::Output)))?;
            plan.push_checked(id, parent.as_deref(), tokens, output)?;
        }
        reader.finish()?;
        Ok(plan)
    }
}

/// Totals and maxima over plan rows (`SPEC B1`); for a workflow, over the
/// accepted prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Usage {
    /// Rows counted.
    pub steps: u32,
    /// Sum of `tokens`.
    pub tokens: u32,
    /// Sum of `output`.
    pub output: u32,
    /// Largest depth (1 for roots); 0 for no rows.
    pub max_depth: u32,
    /// Most children of one parent (roots share one virtual parent); 0 for no rows.
    pub max_fanout: u32,
}

/// Children counted per parent row, plus the roots' shared virtual parent.
struct FanOut<const N: usize> {
    children: [u8; N],
    roots: u8,
}

impl<const N: usize> FanOut<N> {
    const fn new() -> Self {
        Self {
            children: [0; N],
            roots: 0,
        }
    }
    fn slot(&mut self, parent: Option<usize>) -> Option<&mut u8> {
        match parent {
            None => Some(&mut self.roots),
            Some(i) => self.children.get_mut(i),
        }
    }
    /// The parent's count if one more child were accepted.
    fn next(&mut self, parent: Option<usize>) -> u32 {
        self.slot(parent).map_or(0, |c| u32::from(*c)) + 1
    }
    fn add(&mut self, parent: Option<usize>) {
        if let Some(c) = self.slot(parent) {
            *c = c.saturating_add(1);
        }
    }
}

impl<const N: usize> Plan<N> {
    /// Sums and maxima over all rows (`SPEC B1`). An empty plan gives zeros.
    pub fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        let mut fan = FanOut::<N>::new();
        for row in &self.rows {
            let fanout = fan.next(row.parent());
            fan.add(row.parent());
            usage = usage.with(row, fanout);
        }
        usage
    }
}

impl Usage {
    fn with(self, row: &PlanRow, fanout: u32) -> Self {
        Self {
            steps: self.steps + 1,
            tokens: self.tokens + row.tokens,
            output: self.output + row.output,
            max_depth: self.max_depth.max(row.depth()),
            max_fanout: self.max_fanout.max(fanout),
        }
    }
}

/// A limit of the bounded workflow, in the order they are checked (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LimitKey {
    /// `steps` (0..=32)
    Steps,
    /// `tokens` (0..=320000)
    Tokens,
    /// `output` (0..=320000)
    Output,
    /// `depth` (0..=32)
    Depth,
    /// `fanout` (0..=32)
    Fanout,
}

impl LimitKey {
    /// Every limit, in checking order.
    pub const ALL: [Self; 5] = [
        Self::Steps,
        Self::Tokens,
        Self::Output,
        Self::Depth,
        Self::Fanout,
    ];

    /// The key as written in JSON and in `reason`.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Steps => "steps",
            Self::Tokens => "tokens",
            Self::Output => "output",
            Self::Depth => "depth",
            Self::Fanout => "fanout",
        }
    }

    /// Largest value this limit may be set to.
    pub const fn max(self) -> u32 {
        match self {
            Self::Tokens | Self::Output => MAX_COST_LIMIT,
            Self::Steps | Self::Depth | Self::Fanout => MAX_SHAPE_LIMIT,
        }
    }
}

/// Why workflow limits are invalid (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum LimitsError {
    /// The document is not acceptable JSON (includes duplicate keys).
    Json(JsonError),
    /// The limits are not a JSON object.
    NotAnObject,
    /// A key other than the five limits.
    UnexpectedKey,
    /// A limit is missing.
    MissingKey(LimitKey),
    /// A limit is not an integer within its range.
    OutOfRange(LimitKey),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not acceptable JSON: {e}"),
            Self::NotAnObject => f.write_str("limits must be a JSON object"),
            Self::UnexpectedKey => f.write_str(
                "unexpected key; limits are exactly steps, tokens, output, depth, fanout",
            ),
            Self::MissingKey(k) => write!(f, "missing limit `{}`", k.key()),
            Self::OutOfRange(k) => {
                write!(f, "limit `{}` must be an integer 0..={}", k.key(), k.max())
            }
        }
    }
}

impl core::error::Error for LimitsError {}

impl From<JsonError> for LimitsError {
    fn from(e: JsonError) -> Self {
        Self::Json(e)
    }
}

/// The five workflow limits (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    values: [u32; 5],
}

impl Limits {
    /// Checks each limit against its range (`steps`, `depth`, `fanout` 0..=32;
    /// `tokens`, `output` 0..=320000).
    pub fn new(
        steps: u32,
        tokens: u32,
        output: u32,
        depth: u32,
        fanout: u32,
    ) -> Result<Self, LimitsError> {
        let values = [steps, tokens, output, depth, fanout];
        for (key, value) in LimitKey::ALL.into_iter().zip(values) {
            if value > key.max() {
                return Err(LimitsError::OutOfRange(key));
            }
        }
        Ok(Self { values })
    }

    /// The value of one limit.
    pub fn get(&self, key: LimitKey) -> u32 {
        self.values.get(key as usize).copied().unwrap_or(0)
    }

    /// Reads and validates limits from a JSON object with exactly the five keys.
    pub fn parse(json: &[u8]) -> Result<Self, LimitsError> {
        // Every spelling without escapes in one pass; an escape, and every
        // error, is the general reader's (as for plans).
        let compact = core::str::from_utf8(json).ok().and_then(|text| {
            Compact {
                bytes: json,
                text,
                at: 0,
            }
            .limits()
        });
        if let Some(limits) = compact {
            return Ok(limits);
        }
        Self::parse_general(json)
    }

    fn parse_general(json: &[u8]) -> Result<Self, LimitsError> {
        // Holds the five keys even when every one is escaped.
        let mut scratch = [0u8; 64];
        let mut reader = Reader::new(json, &mut scratch)?;
        match reader.next()? {
            Event::StartObject => {}
            _ => return Err(LimitsError::NotAnObject),
        }
        let mut values: [Option<u32>; 5] = [None; 5];
        loop {
            let key = match reader.next().map_err(|e| match e {
                JsonError::StringTooLong => LimitsError::UnexpectedKey,
                other => LimitsError::Json(other),
            })? {
                Event::EndObject => break,
                Event::Key(k) => LimitKey::ALL
                    .into_iter()
                    .find(|l| l.key() == k.as_str())
                    .ok_or(LimitsError::UnexpectedKey)?,
                _ => return Err(LimitsError::Json(JsonError::Syntax)),
            };
            let slot = values
                .get_mut(key as usize)
                .ok_or(LimitsError::UnexpectedKey)?;
            if slot.is_some() {
                return Err(LimitsError::Json(JsonError::DuplicateKey));
            }
            let event = reader.next().map_err(|e| match e {
                JsonError::StringTooLong => LimitsError::OutOfRange(key),
                other => LimitsError::Json(other),
            })?;
            *slot = Some(match &event {
                Event::Number(n) => Number::parse(n.as_str())?
                    .as_bounded_int(key.max())
                    .ok_or(LimitsError::OutOfRange(key))?,
                _ => return Err(LimitsError::OutOfRange(key)),
            });
        }
        reader.finish()?;
        let mut out = [0u32; 5];
        for ((key, value), slot) in LimitKey::ALL.into_iter().zip(values).zip(out.iter_mut()) {
            *slot = value.ok_or(LimitsError::MissingKey(key))?;
        }
        let [steps, tokens, output, depth, fanout] = out;
        Self::new(steps, tokens, output, depth, fanout)
    }
}

/// A plan or limits in any spelling without escapes, read in one pass
/// without the general reader: an array of row objects whose members are
/// `"id"` and `"parent"` with plain strings (no escape, ASCII) or `null`,
/// and `"tokens"` and `"output"` with plain non-negative integers, in any
/// order (keys sorted or not), with any whitespace (compact or Python's
/// `json.dumps` default), at the same speed. Anything else — another spelling, a rule broken, a byte it
/// does not expect — gives `None` and the general reader decides, so the
/// answer (errors included) is always the general reader's; this only ever
/// answers a valid plan. `tests::the_compact_reader_agrees_with_the_general_one`
/// checks both on every vector and on mutants of them.
struct Compact<'a> {
    bytes: &'a [u8],
    /// The same document as text (checked once, whole).
    text: &'a str,
    at: usize,
}

impl<'a> Compact<'a> {
    fn space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn byte(&mut self, b: u8) -> Option<()> {
        self.space();
        (self.bytes.get(self.at) == Some(&b)).then(|| self.at += 1)
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.bytes.get(self.at).copied()
    }

    /// The contents of a string up to its closing quote. Every string this
    /// reader takes is then a key compared with the four known ones or an
    /// id checked against `[a-z][a-z0-9-]{0,31}`, neither of which can hold
    /// a backslash, a control character or a non-ASCII byte: a string with
    /// an escape (even `\"`, where this stops early) is declined there.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let start = self.at;
        while *self.bytes.get(self.at)? != b'"' {
            self.at += 1;
        }
        let text = self.text.get(start..self.at)?;
        self.at += 1;
        Some(text)
    }

    /// A plain integer in `0..=max`: digits, no leading zero.
    fn uint(&mut self, max: u32) -> Option<u32> {
        self.space();
        let rest = self.bytes.get(self.at..)?;
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        let digits = rest.get(..len)?;
        if len == 0 || (len > 1 && digits.first() == Some(&b'0')) {
            return None;
        }
        // A number must end at a delimiter, as the reader requires.
        if !matches!(
            rest.get(len),
            Some(b',' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
        ) {
            return None;
        }
        self.at += len;
        // Beyond u32 is beyond every bound: declined, never wrapped.
        let value = digits.iter().try_fold(0u32, |v, d| {
            v.checked_mul(10)?.checked_add(u32::from(d - b'0'))
        })?;
        (value <= max).then_some(value)
    }

    /// The limits object in its common spelling: the five keys, each once,
    /// with plain integers within their bounds.
    fn limits(mut self) -> Option<Limits> {
        self.byte(b'{')?;
        let mut values: [Option<u32>; 5] = [None; 5];
        loop {
            let key = self.plain_str()?;
            self.byte(b':')?;
            let limit = LimitKey::ALL.into_iter().find(|l| l.key() == key)?;
            let slot = values.get_mut(limit as usize)?;
            if slot.is_some() {
                return None;
            }
            *slot = Some(self.uint(limit.max())?);
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        self.space();
        if self.at != self.bytes.len() {
            return None;
        }
        let [steps, tokens, output, depth, fanout] = values;
        Limits::new(steps?, tokens?, output?, depth?, fanout?).ok()
    }

    fn plan<const N: usize>(mut self) -> Option<Plan<N>> {
        self.byte(b'[')?;
        let mut plan = Plan::new();
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                self.byte(b'{')?;
                let (mut id, mut parent, mut tokens, mut output) = (None, None, None, None);
                loop {
                    let key = self.plain_str()?;
                    self.byte(b':')?;
                    match key {
                        "id" if id.is_none() => id = Some(PlanId::new(self.plain_str()?).ok()?),
                        "parent" if parent.is_none() => {
                            parent = Some(if self.peek()? == b'n' {
                                let null = self.bytes.get(self.at..self.at + 4)?;
                                (null == b"null").then_some(())?;
                                self.at += 4;
                                None
                            } else {
                                Some(PlanId::new(self.plain_str()?).ok()?)
                            })
                        }
                        "tokens" if tokens.is_none() => tokens = Some(self.uint(MAX_ROW_COST)?),
                        "output" if output.is_none() => output = Some(self.uint(MAX_ROW_COST)?),
                        _ => return None,
                    }
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                if plan.rows.is_full() {
                    return None;
                }
                let parent: Option<PlanId> = parent?;
                plan.push_checked(id?, parent.as_deref(), tokens?, output?)
                    .ok()?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.space();
        (self.at == self.bytes.len()).then_some(plan)
    }
}

/// Why a workflow ended (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StopReason {
    /// Every step was accepted: `complete`.
    Complete,
    /// This limit would have been exceeded by the next step.
    Limit(LimitKey),
}

impl StopReason {
    /// `complete` or the limit's key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Limit(k) => k.key(),
        }
    }
}

/// The outcome of a bounded workflow (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Workflow {
    /// How many leading rows were accepted (accepted steps are always a prefix).
    pub accepted: usize,
    /// Index of the row that stopped the run, `None` when complete.
    pub stopped: Option<usize>,
    /// `complete`, or the limit that stopped it.
    pub reason: StopReason,
    /// Usage of the accepted prefix only.
    pub usage: Usage,
}

impl<const N: usize> Plan<N> {
    /// Runs the bounded workflow (`SPEC B2`): before each step the would-be
    /// totals are checked in the order steps, tokens, output, depth, fanout;
    /// the first one over its limit stops the run before that step. Equality
    /// is allowed.
    pub fn bounded_workflow(&self, limits: &Limits) -> Workflow {
        let mut usage = Usage::default();
        let mut fan = FanOut::<N>::new();
        for (index, row) in self.rows.iter().enumerate() {
            let fanout = fan.next(row.parent());
            let next = [
                usage.steps + 1,
                usage.tokens + row.tokens,
                usage.output + row.output,
                row.depth(),
                fanout,
            ];
            if let Some(key) = LimitKey::ALL
                .into_iter()
                .zip(next)
                .find(|(key, value)| *value > limits.get(*key))
                .map(|(key, _)| key)
            {
                return Workflow {
                    accepted: index,
                    stopped: Some(index),
                    reason: StopReason::Limit(key),
                    usage,
                };
            }
            fan.add(row.parent());
            usage = usage.with(row, fanout);
        }
        Workflow {
            accepted: self.rows.len(),
            stopped: None,
            reason: StopReason::Complete,
            usage,
        }
    }

    /// The workflow outcome with ids, serializable as the reference's result
    /// `{accepted: [ids], stopped: id | null, reason, usage}`.
    pub fn report<'p>(&'p self, workflow: &Workflow) -> WorkflowReport<'p, N> {
        WorkflowReport {
            plan: self,
            workflow: *workflow,
        }
    }
}

/// A [`Workflow`] together with its plan, for serialization.
pub struct WorkflowReport<'p, const N: usize> {
    plan: &'p Plan<N>,
    workflow: Workflow,
}

struct AcceptedIds<'p>(&'p [PlanRow]);

impl Serialize for AcceptedIds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for row in self.0 {
            seq.serialize_element(row.id.as_str())?;
        }
        seq.end()
    }
}

impl<const N: usize> Serialize for WorkflowReport<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rows = self.plan.rows();
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry(
            "accepted",
            &AcceptedIds(rows.get(..self.workflow.accepted).unwrap_or(&[])),
        )?;
        map.serialize_entry(
            "stopped",
            &self
                .workflow
                .stopped
                .and_then(|i| rows.get(i))
                .map(|r| r.id.as_str()),
        )?;
        map.serialize_entry("reason", self.workflow.reason.as_str())?;
        map.serialize_entry("usage", &self.workflow.usage)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SPEC B1`, `SPEC B2`: a row's figures read back as written, and
    /// every stop reason and error is spelled as the contract and the docs
    /// spell it (the words `plan --json` prints). Found by cargo-mutants
    /// (the whole-core run, shard 1/4): the accessors and words could
    /// answer anything.
    #[test]
    fn rows_read_back_and_reasons_and_errors_are_spelled() {
        let plan: Plan = Plan::parse(
            br#"[{"id":"a","parent":null,"tokens":7,"output":3},
                 {"id":"b","parent":"a","tokens":0,"output":10000}]"#,
        )
        .unwrap();
        let rows = plan.rows();
        assert_eq!(
            (rows[0].tokens(), rows[0].output(), rows[0].parent()),
            (7, 3, None)
        );
        assert_eq!(
            (rows[1].tokens(), rows[1].output(), rows[1].parent()),
            (0, 10000, Some(0))
        );
        assert_eq!(StopReason::Complete.as_str(), "complete");
        for key in LimitKey::ALL {
            assert_eq!(StopReason::Limit(key).as_str(), key.key());
        }
        assert_eq!(
            PlanError::NotAList.to_string(),
            "a plan must be a JSON array of rows"
        );
        assert_eq!(
            PlanError::TooManyRows.to_string(),
            "a plan has at most 32 rows"
        );
        assert_eq!(
            LimitsError::NotAnObject.to_string(),
            "limits must be a JSON object"
        );
        assert_eq!(
            LimitsError::MissingKey(LimitKey::Steps).to_string(),
            "missing limit `steps`"
        );
        assert_eq!(
            LimitsError::OutOfRange(LimitKey::Steps).to_string(),
            "limit `steps` must be an integer 0..=32"
        );
    }

    fn seed_plan() -> Plan {
        Plan::parse(br#"[{"id":"a","parent":null,"tokens":2,"output":1},{"id":"b","parent":"a","tokens":3,"output":2}]"#)
            .unwrap()
    }

    fn limits(steps: u32, tokens: u32, output: u32, depth: u32, fanout: u32) -> Limits {
        Limits::new(steps, tokens, output, depth, fanout).unwrap()
    }

    #[test]
    fn seed_example_usage() {
        let u = seed_plan().usage();
        assert_eq!(
            u,
            Usage {
                steps: 2,
                tokens: 5,
                output: 3,
                max_depth: 2,
                max_fanout: 1
            }
        );
        assert_eq!(Plan::<32>::new().usage(), Usage::default());
    }

    #[test]
    fn seed_example_workflows() {
        let plan = seed_plan();
        let w = plan.bounded_workflow(&limits(4, 4, 10, 4, 4));
        assert_eq!(
            (w.accepted, w.stopped, w.reason),
            (1, Some(1), StopReason::Limit(LimitKey::Tokens))
        );
        assert_eq!(w.usage.tokens, 2);
        let w = plan.bounded_workflow(&limits(4, 5, 10, 4, 4));
        assert_eq!(
            (w.accepted, w.stopped, w.reason),
            (2, None, StopReason::Complete)
        );
        assert_eq!(w.usage.tokens, 5);
        let z = Plan::<32>::parse(br#"[{"id":"z","parent":null,"tokens":0,"output":0}]"#).unwrap();
        let w = z.bounded_workflow(&limits(0, 0, 0, 0, 0));
        assert_eq!(
            (w.accepted, w.reason),
            (0, StopReason::Limit(LimitKey::Steps))
        );
        let empty = Plan::<32>::new().bounded_workflow(&limits(0, 0, 0, 0, 0));
        assert_eq!(empty.reason, StopReason::Complete);
    }

    /// `SPEC B2`: each limit stops the workflow on its own, before the
    /// first step whose would-be total passes it (equality allowed):
    /// output accumulates over the accepted steps. Found by cargo-mutants
    /// (the whole-core run, shard 1/4): only the tokens and steps limits
    /// were checked alone here.
    #[test]
    fn each_limit_alone_stops_before_the_step_that_passes_it() {
        let plan = seed_plan(); // output 1 then 2, depth 1 then 2
        let w = plan.bounded_workflow(&limits(4, 100, 2, 4, 4));
        assert_eq!(
            (w.accepted, w.stopped, w.reason, w.usage.output),
            (1, Some(1), StopReason::Limit(LimitKey::Output), 1)
        );
        let w = plan.bounded_workflow(&limits(4, 100, 3, 4, 4));
        assert_eq!(
            (w.accepted, w.reason, w.usage.output),
            (2, StopReason::Complete, 3)
        );
        let w = plan.bounded_workflow(&limits(4, 100, 10, 1, 4));
        assert_eq!(
            (w.accepted, w.reason),
            (1, StopReason::Limit(LimitKey::Depth))
        );
        let fan = Plan::<32>::parse(
            br#"[{"id":"a","parent":null,"tokens":0,"output":0},{"id":"b","parent":null,"tokens":0,"output":0}]"#,
        )
        .unwrap();
        let w = fan.bounded_workflow(&limits(4, 0, 0, 4, 1));
        assert_eq!(
            (w.accepted, w.reason),
            (1, StopReason::Limit(LimitKey::Fanout))
        );
    }

    #[test]
    fn stop_order_when_several_limits_break() {
        let plan = seed_plan();
        // Row b breaks tokens, output, depth at once: tokens is reported.
        let w = plan.bounded_workflow(&limits(4, 4, 1, 1, 4));
        assert_eq!(w.reason, StopReason::Limit(LimitKey::Tokens));
        let w = plan.bounded_workflow(&limits(1, 4, 1, 1, 4));
        assert_eq!(w.reason, StopReason::Limit(LimitKey::Steps));
    }

    #[test]
    fn roots_share_one_virtual_parent() {
        let plan = Plan::<32>::parse(
            br#"[{"id":"a","parent":null,"tokens":0,"output":0},{"id":"b","parent":null,"tokens":0,"output":0}]"#,
        )
        .unwrap();
        assert_eq!(plan.usage().max_fanout, 2);
        assert_eq!(
            plan.bounded_workflow(&limits(5, 5, 5, 5, 1)).reason,
            StopReason::Limit(LimitKey::Fanout)
        );
        assert_eq!(
            plan.bounded_workflow(&limits(5, 5, 5, 5, 2)).reason,
            StopReason::Complete
        );
    }

    #[test]
    fn row_rules() {
        let row = |body: &str| Plan::<32>::parse(format!("[{body}]").as_bytes());
        let rule = |r| Err(PlanError::Row { row: 0, rule: r });
        assert_eq!(
            row(r#"{"id":"a","parent":null,"tokens":1.0,"output":0}"#),
            rule(RowRule::Cost(RowField::Tokens))
        );
        assert_eq!(
            row(r#"{"id":"a","parent":null,"tokens":true,"output":0}"#),
            rule(RowRule::Cost(RowField::Tokens))
        );
        assert_eq!(
            row(r#"{"id":"a","parent":null,"tokens":0,"output":10001}"#),
            rule(RowRule::Cost(RowField::Output))
        );
        assert!(row(r#"{"id":"a","parent":null,"tokens":10000,"output":0}"#).is_ok());
        assert_eq!(
            row(r#"{"id":"a","parent":"a","tokens":0,"output":0}"#),
            rule(RowRule::UnknownParent)
        );
        assert_eq!(
            row(r#"{"id":"a","tokens":0,"output":0}"#),
            rule(RowRule::MissingKey(RowField::Parent))
        );
        assert_eq!(
            row(r#"{"id":"a","parent":null,"tokens":0,"output":0,"x":1}"#),
            rule(RowRule::UnexpectedKey)
        );
        assert!(row(&format!(
            r#"{{"id":"{}","parent":null,"tokens":0,"output":0}}"#,
            "a".repeat(32)
        ))
        .is_ok());
        assert!(matches!(
            row(&format!(
                r#"{{"id":"{}","parent":null,"tokens":0,"output":0}}"#,
                "a".repeat(33)
            )),
            Err(PlanError::Row {
                rule: RowRule::InvalidId(RowField::Id, _),
                ..
            })
        ));
        assert_eq!(
            row(r#"{"id":"a","id":"b","parent":null,"tokens":0,"output":0}"#),
            Err(PlanError::Json(JsonError::DuplicateKey))
        );
        assert_eq!(Plan::<32>::parse(b"{}"), Err(PlanError::NotAList));
    }

    #[test]
    fn thirty_two_rows_fit_and_thirty_three_do_not() {
        let rows = |n: usize| {
            let body: std::vec::Vec<_> = (0..n)
                .map(|i| format!(r#"{{"id":"s{i}","parent":null,"tokens":0,"output":0}}"#))
                .collect();
            format!("[{}]", body.join(","))
        };
        assert_eq!(
            Plan::<32>::parse(rows(32).as_bytes()).map(|p| p.rows().len()),
            Ok(32)
        );
        assert_eq!(
            Plan::<32>::parse(rows(33).as_bytes()),
            Err(PlanError::TooManyRows)
        );
    }

    #[test]
    fn escaped_keys_and_ids_are_read_like_plain_ones() {
        let limits = Limits::parse(
            br#"{"\u0073teps":1,"\u0074okens":2,"\u006Futput":3,"\u0064epth":4,"\u0066anout":5}"#,
        );
        assert_eq!(limits, Limits::new(1, 2, 3, 4, 5));
        let rows: std::vec::Vec<_> = (0..32)
            .map(|i| {
                let id = format!("{}{i:02}", r"\u0061".repeat(30));
                let parent = if i == 0 {
                    "null".into()
                } else {
                    format!(r#""{}{:02}""#, r"\u0061".repeat(30), i - 1)
                };
                format!(
                    r#"{{"\u0069d":"{id}","\u0070arent":{parent},"\u0074okens":1,"\u006futput":1}}"#
                )
            })
            .collect();
        let plan = Plan::<32>::parse(format!("[{}]", rows.join(",")).as_bytes()).unwrap();
        assert_eq!(plan.usage().max_depth, 32);
    }

    /// `SPEC A1` (duplicate keys are refused): the one-pass readers decline
    /// a repeated key, whichever it is, and the general reader refuses it.
    #[test]
    fn the_compact_readers_decline_a_repeated_key() {
        let row = r#""id":"a","parent":null,"tokens":1,"output":2"#;
        for extra in [
            r#""id":"b""#,
            r#""parent":null"#,
            r#""tokens":3"#,
            r#""output":4"#,
        ] {
            let doc = format!("[{{{row},{extra}}}]");
            let text = core::str::from_utf8(doc.as_bytes()).unwrap();
            assert!(
                Compact {
                    bytes: doc.as_bytes(),
                    text,
                    at: 0
                }
                .plan::<32>()
                .is_none(),
                "{doc}"
            );
            assert_eq!(
                Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
                PlanError::Json(JsonError::DuplicateKey),
                "{doc}"
            );
        }
        let limits = r#""steps":1,"tokens":2,"output":3,"depth":4,"fanout":5"#;
        for extra in [r#""steps":1"#, r#""fanout":5"#] {
            let doc = format!("{{{limits},{extra}}}");
            let text = core::str::from_utf8(doc.as_bytes()).unwrap();
            assert!(
                Compact {
                    bytes: doc.as_bytes(),
                    text,
                    at: 0
                }
                .limits()
                .is_none(),
                "{doc}"
            );
            assert_eq!(
                Limits::parse(doc.as_bytes()),
                Err(LimitsError::Json(JsonError::DuplicateKey)),
                "{doc}"
            );
        }
    }

    /// `SPEC B1`: `try_push` checks every row rule, as `parse` does.
    #[test]
    fn try_push_checks_each_row_rule() {
        let mut plan: Plan = Plan::new();
        plan.try_push("a", None, 1, 1).unwrap();
        let rule = |e: PlanError| match e {
            PlanError::Row { rule, .. } => rule,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            rule(plan.try_push("a", None, 1, 1).unwrap_err()),
            RowRule::DuplicateId
        );
        assert_eq!(
            rule(plan.try_push("b", Some("zz"), 1, 1).unwrap_err()),
            RowRule::UnknownParent
        );
        assert!(matches!(
            rule(plan.try_push("B", None, 1, 1).unwrap_err()),
            RowRule::InvalidId(RowField::Id, Some(_))
        ));
        assert!(matches!(
            rule(plan.try_push("b", Some("A"), 1, 1).unwrap_err()),
            RowRule::InvalidId(RowField::Parent, Some(_))
        ));
        assert_eq!(
            rule(
                plan.try_push("b", Some("a"), MAX_ROW_COST + 1, 1)
                    .unwrap_err()
            ),
            RowRule::Cost(RowField::Tokens)
        );
        assert_eq!(plan.rows().len(), 1, "nothing was added by a refused row");
        plan.try_push("b", Some("a"), MAX_ROW_COST, 0).unwrap();
        assert_eq!(plan.usage().max_depth, 2);
    }

    /// `SPEC B1`: costs of ten digits or more (beyond `u32`, or just
    /// beyond the cost bound) are refused by the rule, never wrapped.
    #[test]
    fn a_cost_of_many_digits_is_refused_as_a_cost() {
        for cost in ["10001", "999999999", "4294967296", "12345678901234567890"] {
            let doc = format!(r#"[{{"id":"a","parent":null,"tokens":{cost},"output":1}}]"#);
            assert_eq!(
                Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
                PlanError::Row {
                    row: 0,
                    rule: RowRule::Cost(RowField::Tokens)
                },
                "{cost}"
            );
        }
    }

    /// `SPEC B1`: an escaped string too long for the reader's first buffer
    /// is read again with the large one, so it is judged by the plan's own
    /// rules (an id over 64 characters), not refused as a JSON limit; one
    /// too long for both is the JSON limit.
    #[test]
    fn a_long_escaped_id_is_judged_as_an_id() {
        let long = r"\u0061".repeat(300);
        let doc = format!(r#"[{{"id":"{long}","parent":null,"tokens":1,"output":1}}]"#);
        let err = Plan::<32>::parse(doc.as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                PlanError::Row {
                    row: 0,
                    rule: RowRule::InvalidId(RowField::Id, Some(_))
                }
            ),
            "{err:?}"
        );
        // The large buffer holds 2 816 decoded bytes (32 rows of 88), no more.
        let longest = r"\u0061".repeat(2_816);
        let doc = format!(r#"[{{"id":"{longest}","parent":null,"tokens":1,"output":1}}]"#);
        assert!(matches!(
            Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
            PlanError::Row {
                row: 0,
                rule: RowRule::InvalidId(RowField::Id, Some(_))
            }
        ));
        let longer = r"\u0061".repeat(2_817);
        let doc = format!(r#"[{{"id":"{longer}","parent":null,"tokens":1,"output":1}}]"#);
        assert_eq!(
            Plan::<32>::parse(doc.as_bytes()).unwrap_err(),
            PlanError::Json(JsonError::StringTooLong)
        );
    }

    /// `SPEC B1`: the one-pass reader of the common spelling answers only
    /// valid plans, and exactly as the general reader does: on every plan of
    /// the reference vectors (plain and spaced out), and on 60 000 mutants of
    /// them (a byte replaced, deleted or inserted), whenever it answers, the
    /// general reader gives the same plan.
    #[test]
    fn the_compact_reader_agrees_with_the_general_one() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/vectors/plan.jsonl"
        ))
        .unwrap();
        let mut plans: std::vec::Vec<std::vec::Vec<u8>> = std::vec::Vec::new();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(p) = v["request"]["args"].get("plan") {
                plans.push(serde_json::to_vec(p).unwrap());
                plans.push(serde_json::to_vec_pretty(p).unwrap());
            }
        }
        assert!(plans.len() > 50);
        let general = |doc: &[u8]| Plan::<32>::parse_in(doc, &mut [0u8; 4096]);
        let compact = |doc: &[u8]| {
            let text = core::str::from_utf8(doc).ok()?;
            Compact {
                bytes: doc,
                text,
                at: 0,
            }
            .plan::<32>()
        };
        let (mut answered, mut seed) = (0usize, 0x2545_f491_4f6c_dd1du64);
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const BYTES: &[u8] = b"{}[]:,\" \\0123456789-.eEnulabcdfrst\x00\x7f\xc3";
        for doc in &plans {
            // Every valid plan in the common spelling is answered here.
            match (compact(doc), general(doc)) {
                (Some(plan), g) => {
                    assert_eq!(Ok(plan), g, "{}", String::from_utf8_lossy(doc));
                    answered += 1;
                }
                (None, Ok(_)) => panic!("a valid plan declined: {}", String::from_utf8_lossy(doc)),
                (None, Err(_)) => {}
            }
            for _ in 0..500 {
                let mut m = doc.clone();
                let at = (next() as usize) % (m.len() + 1);
                let b = BYTES[(next() as usize) % BYTES.len()];
                match next() % 3 {
                    0 if at < m.len() => m[at] = b,
                    1 if at < m.len() => {
                        m.remove(at);
                    }
                    _ => m.insert(at, b),
                }
                if let Some(plan) = compact(&m) {
                    assert_eq!(Ok(plan), general(&m), "{}", String::from_utf8_lossy(&m));
                }
            }
        }
        assert!(
            answered > plans.len() / 2,
            "the compact reader answered {answered}"
        );
    }

    /// `SPEC B2`: the one-pass reader of limits answers only valid limits,
    /// exactly as the general reader does, on every limits object of the
    /// vectors (plain and spaced out) and on 40 000 mutants of them.
    #[test]
    fn the_compact_limits_reader_agrees_with_the_general_one() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/vectors/plan.jsonl"
        ))
        .unwrap();
        let mut docs: std::vec::Vec<std::vec::Vec<u8>> = std::vec::Vec::new();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(l) = v["request"]["args"].get("limits") {
                docs.push(serde_json::to_vec(l).unwrap());
                docs.push(serde_json::to_vec_pretty(l).unwrap());
            }
        }
        assert!(docs.len() > 20);
        let compact = |doc: &[u8]| {
            let text = core::str::from_utf8(doc).ok()?;
            Compact {
                bytes: doc,
                text,
                at: 0,
            }
            .limits()
        };
        let (mut answered, mut seed) = (0usize, 0x9e37_79b9_7f4a_7c15u64);
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const BYTES: &[u8] = b"{}:,\" \\0123456789-.esptoufd\x00";
        let per_doc = 40_000 / docs.len();
        for doc in &docs {
            if let Some(l) = compact(doc) {
                assert_eq!(Ok(l), Limits::parse_general(doc));
                answered += 1;
            }
            for _ in 0..per_doc {
                let mut m = doc.clone();
                let at = (next() as usize) % (m.len() + 1);
                let b = BYTES[(next() as usize) % BYTES.len()];
                match next() % 3 {
                    0 if at < m.len() => m[at] = b,
                    1 if at < m.len() => {
                        m.remove(at);
                    }
                    _ => m.insert(at, b),
                }
                if let Some(l) = compact(&m) {
                    assert_eq!(
                        Ok(l),
                        Limits::parse_general(&m),
                        "{}",
                        String::from_utf8_lossy(&m)
                    );
                }
            }
        }
        assert!(
            answered > docs.len() / 2,
            "answered {answered} of {}",
            docs.len()
        );
    }

    #[test]
    fn limit_boundaries() {
        assert!(Limits::new(32, 320_000, 320_000, 32, 32).is_ok());
        assert_eq!(
            Limits::new(33, 0, 0, 0, 0),
            Err(LimitsError::OutOfRange(LimitKey::Steps))
        );
        assert_eq!(
            Limits::new(0, 320_001, 0, 0, 0),
            Err(LimitsError::OutOfRange(LimitKey::Tokens))
        );
        assert_eq!(
            Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1}"#),
            Err(LimitsError::MissingKey(LimitKey::Fanout))
        );
        assert_eq!(
            Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1,"fanout":-1}"#),
            Err(LimitsError::OutOfRange(LimitKey::Fanout))
        );
        assert_eq!(
            Limits::parse(br#"{"steps":1,"tokens":1,"output":1,"depth":1,"fanout":false}"#),
            Err(LimitsError::OutOfRange(LimitKey::Fanout))
        );
    }
}
