//! Reading an action document with the scanner (`SPEC A1`): its members,
//! each field's value, the arguments object, and the arguments read again
//! in order ([`Members`]).

use heapless::{String, Vec};

use super::{Other, Scanner, KEY_MAX, L_Q, TOOL};
use crate::action::view::{ActionRef, ArgumentsRef, JsonStr, ScalarRef, ToolCallRef};
use crate::action::{ActionError, Field, InvalidAction};
use crate::ident::{ArgumentKey, Identifier};
use crate::json::{self, JsonError};
use crate::limits::{
    MAX_ARGUMENTS, MAX_ARGUMENT_KEY_LEN, MAX_ARGUMENT_MAGNITUDE, MAX_IDENTIFIER_LEN, MAX_TEXT_CHARS,
};

impl<'a> Scanner<'a> {
    /// The value of `kind`: `true` for `"final"`, `false` for `"tool"`.
    fn kind(&mut self) -> Result<bool, ActionError> {
        self.skip_space();
        // The common spelling, compared whole.
        if self.word(self.at) == TOOL && self.pair(self.at + 4) == L_Q {
            self.at += 6;
            return Ok(false);
        }
        let value = self.string_or(ActionError::NotAString(Field::Kind))?;
        if value == "final" {
            Ok(true)
        } else if value == "tool" {
            Ok(false)
        } else {
            Err(ActionError::UnknownKind)
        }
    }

    /// The value of `call_id` or `name` (`field`): an identifier.
    fn identifier(&mut self, field: Field) -> Result<Identifier, ActionError> {
        self.skip_space();
        match self.plain(true) {
            // Every byte is allowed after the first: the rest of the rule is
            // the first byte and the length.
            Some(plain)
                if plain.len() <= MAX_IDENTIFIER_LEN
                    && plain
                        .as_bytes()
                        .first()
                        .is_some_and(u8::is_ascii_alphabetic) =>
            {
                Identifier::from_checked(plain)
            }
            Some(plain) => Identifier::new(plain),
            None => Identifier::from_chars(self.string_or(ActionError::NotAString(field))?.chars()),
        }
        .map_err(|reason| ActionError::InvalidIdentifier(field, reason))
    }

    /// The arguments object at the cursor, validated: every key and value,
    /// and no key twice.
    fn arguments(&mut self, values: &mut Values<'a>) -> Result<ArgumentsRef<'a>, ActionError> {
        self.skip_space();
        if self.peek() != Some(b'{') {
            if self.peek() == Some(b'"') {
                self.string()?;
            } else {
                self.other()?;
            }
            return Err(ActionError::ArgumentsNotObject);
        }
        let start = self.at;
        self.at += 1;
        // The members so far: the keys for the duplicate check, the values
        // for a caller that checks them against a signature next
        // ([`action_into`]).
        values.clear();
        let keys = values;
        let mut more = self.first_member()?;
        while more {
            self.mark = self.at;
            let index = u8::try_from(keys.len()).unwrap_or(u8::MAX);
            let (key, checked) = self.argument_key()?;
            if keys.is_full() {
                return Err(ActionError::TooManyArguments);
            }
            if !checked {
                ArgumentKey::check_chars(key.chars())
                    .map_err(|reason| ActionError::InvalidArgumentKey { index, reason })?;
            }
            // `any` rather than `contains`: the closure inlines, `contains`
            // calls a generic slice search for each key.
            #[allow(clippy::manual_contains)]
            let duplicate = keys.iter().any(|(k, _)| *k == key);
            if duplicate {
                return Err(ActionError::Json(JsonError::DuplicateKey));
            }
            let value = self.argument_value(index)?;
            keys.push((key, value))
                .map_err(|_| ActionError::TooManyArguments)?;
            more = self.next_member()?;
        }
        let raw = self.text.get(start..self.at).ok_or(JsonError::Syntax)?;
        Ok(ArgumentsRef::validated(
            raw,
            u8::try_from(keys.len()).unwrap_or(u8::MAX),
        ))
    }

    /// An argument's key, its opening quote at the cursor, and whether it is
    /// already known to match the key rule.
    #[inline(always)]
    fn argument_key(&mut self) -> Result<(JsonStr<'a>, bool), JsonError> {
        Ok(match self.plain(false) {
            // Every byte is allowed after the first: the rest of the rule is
            // the first byte and the length.
            Some(plain) => (
                JsonStr::plain(plain),
                plain.len() <= MAX_ARGUMENT_KEY_LEN
                    && plain
                        .as_bytes()
                        .first()
                        .is_some_and(u8::is_ascii_alphabetic),
            ),
            None => (self.string()?, false),
        })
    }

    /// `:` and the value of argument `index`, checked: a scalar, a string of
    /// at most 2000 characters, a finite number of magnitude at most 1e6.
    #[inline(always)]
    fn argument_value(&mut self, index: u8) -> Result<ScalarRef<'a>, ActionError> {
        self.expect(b':')?;
        self.skip_space();
        if self.peek() == Some(b'"') {
            let text = self.string()?;
            if text.raw_len() > MAX_TEXT_CHARS && text.char_count() > MAX_TEXT_CHARS {
                return Err(ActionError::ArgumentTooLong { index });
            }
            return Ok(ScalarRef::Str(text));
        }
        // The common case first: a small integer, in range by its length.
        let start = self.at;
        if let Some(small) = self.small_integer() {
            if self.at_value_end() && small.unsigned_abs() <= MAX_ARGUMENT_MAGNITUDE as u64 {
                return Ok(ScalarRef::Int(small));
            }
            self.at = start;
        }
        let out_of_range = ActionError::ArgumentOutOfRange { index };
        Ok(match self.other()? {
            Other::Open => return Err(ActionError::ArgumentNotScalar { index }),
            Other::Null => ScalarRef::Null,
            Other::Bool(b) => ScalarRef::Bool(b),
            // Magnitude first: a huge literal is out of range, never a crash.
            Other::Int(v) => ScalarRef::Int(
                v.filter(|v| v.unsigned_abs() <= MAX_ARGUMENT_MAGNITUDE as u64)
                    .ok_or(out_of_range)?,
            ),
            Other::Float(value) => {
                let v = value?;
                if !(v.is_finite() && v.abs() <= MAX_ARGUMENT_MAGNITUDE) {
                    return Err(out_of_range);
                }
                ScalarRef::Float(v)
            }
        })
    }
}

/// The members of an arguments object that [`ActionRef::parse`] validated,
/// read again in order: what [`ArgumentsRef::iter`] returns.
#[derive(Debug, Clone)]
pub struct Members<'a> {
    scanner: Scanner<'a>,
    index: u8,
    done: bool,
}

impl<'a> Members<'a> {
    /// The members of `raw`, a validated object (`{` at its start).
    pub(crate) fn new(raw: &'a str) -> Self {
        Self {
            scanner: Scanner {
                text: raw,
                bytes: raw.as_bytes(),
                at: 1,
                mark: 1,
            },
            index: 0,
            done: false,
        }
    }

    fn member(&mut self) -> Option<(JsonStr<'a>, ScalarRef<'a>)> {
        let s = &mut self.scanner;
        s.skip_space();
        if s.peek() == Some(b',') {
            s.at += 1;
            s.skip_space();
        }
        if s.peek() != Some(b'"') {
            return None;
        }
        let (key, _) = s.argument_key().ok()?;
        let value = s.argument_value(self.index).ok()?;
        Some((key, value))
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (JsonStr<'a>, ScalarRef<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // The object was validated, so reading it again cannot fail; if it
        // somehow did, the members simply end there.
        let member = self.member();
        match member {
            Some(_) => self.index = self.index.saturating_add(1),
            None => self.done = true,
        }
        member
    }
}

/// Decodes a short string: `None` if it is longer than `N` bytes.
fn short<const N: usize>(text: JsonStr<'_>) -> Option<String<N>> {
    let mut out = String::new();
    text.decode_into(&mut out).ok()?;
    Some(out)
}

fn field(key: JsonStr<'_>) -> Option<Field> {
    let decoded: String<KEY_MAX>;
    let name = match key.as_str() {
        Some(plain) => plain,
        None => {
            decoded = short(key)?;
            decoded.as_str()
        }
    };
    Some(match name {
        "kind" => Field::Kind,
        "text" => Field::Text,
        "call_id" => Field::CallId,
        "name" => Field::Name,
        "arguments" => Field::Arguments,
        _ => return None,
    })
}

/// The members of a tool call's arguments object as [`action_into`] read
/// them: each key and its value, in the document's order.
pub(crate) type Values<'a> = Vec<(JsonStr<'a>, ScalarRef<'a>), MAX_ARGUMENTS>;

/// Reads and validates one action document (`SPEC A1`); see
/// [`ActionRef::validate`] (and there, what the offset of an error is).
pub(in crate::action) fn action(bytes: &[u8]) -> Result<ActionRef<'_>, InvalidAction> {
    action_into(bytes, &mut Values::new())
}

/// [`action`], leaving in `values` the members of a tool call's arguments
/// as it read them: what [`ArgumentsRef::iter`] would read again. Emptied
/// first; on an error, or for an action that has no arguments object, it
/// holds at most the members read before the end.
pub(in crate::action) fn action_into<'a>(
    bytes: &'a [u8],
    values: &mut Values<'a>,
) -> Result<ActionRef<'a>, InvalidAction> {
    values.clear();
    let text = json::check_document(bytes).map_err(|e| InvalidAction {
        error: ActionError::Json(e),
        offset: match e {
            JsonError::InvalidUtf8 { offset } => offset,
            _ => 0,
        },
    })?;
    let mut s = Scanner {
        text,
        bytes,
        at: 0,
        mark: 0,
    };
    document(&mut s, values).map_err(|error| InvalidAction {
        error,
        offset: match error {
            // Syntax is wrong where reading stopped; a repeated key, like
            // every rule of the contract, at the member it is about.
            ActionError::Json(JsonError::DuplicateKey) => s.mark,
            ActionError::Json(_) => s.at,
            _ => s.mark,
        },
    })
}

/// The action document at the cursor, to its end. On an error the scanner
/// says where (see [`action`]): `mark` is the member a rule is about.
fn document<'a>(
    s: &mut Scanner<'a>,
    values: &mut Values<'a>,
) -> Result<ActionRef<'a>, ActionError> {
    s.skip_space();
    s.mark = s.at;
    match s.peek() {
        Some(b'{') => s.at += 1,
        Some(b'"') => {
            s.string()?;
            return Err(ActionError::NotAnObject);
        }
        _ => {
            s.other()?;
            return Err(ActionError::NotAnObject);
        }
    }
    let mut seen = 0u8;
    // Where each field's member starts, by `Field as usize`, for the rules
    // checked after the object's end.
    let mut members = [0usize; 5];
    // Some(true) = final, Some(false) = tool.
    let mut kind: Option<bool> = None;
    let mut text = None;
    let mut call_id = None;
    let mut name = None;
    let mut arguments = None;
    let mut more = s.first_member()?;
    while more {
        s.mark = s.at;
        let field = match s.known_field() {
            Some(field) => field,
            None => field(s.string()?).ok_or(ActionError::UnexpectedKey)?,
        };
        if seen & field.bit() != 0 {
            return Err(ActionError::Json(JsonError::DuplicateKey));
        }
        seen |= field.bit();
        if let Some(at) = members.get_mut(field as usize) {
            *at = s.mark;
        }
        s.expect(b':')?;
        match field {
            Field::Arguments => arguments = Some(s.arguments(values)?),
            Field::Text => {
                let value = s.string_or(ActionError::NotAString(field))?;
                if value.raw_len() > MAX_TEXT_CHARS && value.char_count() > MAX_TEXT_CHARS {
                    return Err(ActionError::TextTooLong);
                }
                text = Some(value);
            }
            Field::Kind => kind = Some(s.kind()?),
            Field::CallId => call_id = Some(s.identifier(field)?),
            Field::Name => name = Some(s.identifier(field)?),
        }
        more = s.next_member()?;
    }
    // The closing brace: where a missing key would have been written.
    s.mark = s.at.saturating_sub(1);
    s.skip_space();
    if s.at != s.bytes.len() {
        return Err(ActionError::Json(JsonError::TrailingData));
    }
    let member = |field: Field| members.get(field as usize).copied().unwrap_or(0);
    match kind {
        None => Err(ActionError::MissingKey(Field::Kind)),
        Some(true) => {
            let tool_keys = [Field::CallId, Field::Name, Field::Arguments];
            if let Some(first) = tool_keys
                .into_iter()
                .filter(|f| seen & f.bit() != 0)
                .map(member)
                .min()
            {
                s.mark = first;
                return Err(ActionError::UnexpectedKey);
            }
            let text = text.ok_or(ActionError::MissingKey(Field::Text))?;
            if text.is_blank() {
                s.mark = member(Field::Text);
                return Err(ActionError::TextBlank);
            }
            Ok(ActionRef::Final { text })
        }
        Some(false) => {
            if text.is_some() {
                s.mark = member(Field::Text);
                return Err(ActionError::UnexpectedKey);
            }
            Ok(ActionRef::Tool(ToolCallRef {
                call_id: call_id.ok_or(ActionError::MissingKey(Field::CallId))?,
                name: name.ok_or(ActionError::MissingKey(Field::Name))?,
                arguments: arguments.ok_or(ActionError::MissingKey(Field::Arguments))?,
            }))
        }
    }
}
