//! Reading a plan from JSON text (`SPEC B1`): a one-pass reader for the
//! common spelling, and the general reader, whose answer is the one given.

use super::{LimitKey, Limits, Plan, PlanError, RowField, RowRule};
use crate::ident::PlanId;
use crate::json::{Event, JsonError, Number, Reader};
use crate::limits::{MAX_PLAN_ID_LEN, MAX_ROW_COST, MAX_STEPS};

impl<const N: usize> Plan<N> {
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

    pub(super) fn parse_in(json: &[u8], scratch: &mut [u8]) -> Result<Self, PlanError> {
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
pub(super) struct Compact<'a> {
    pub(super) bytes: &'a [u8],
    /// The same document as text (checked once, whole).
    pub(super) text: &'a str,
    pub(super) at: usize,
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
        // Beyond u32 is beyond every bound: declined, never wrapped.
        let (value, len) = crate::json::plain_uint(self.bytes.get(self.at..)?)?;
        self.at += len;
        (value <= max).then_some(value)
    }

    /// The limits object in its common spelling: the five keys, each once,
    /// with plain integers within their bounds.
    pub(super) fn limits(mut self) -> Option<Limits> {
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

    pub(super) fn plan<const N: usize>(mut self) -> Option<Plan<N>> {
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
