//! Reading one Claude Code transcript line for what the budget counts, and
//! nothing else.
//!
//! A transcript line is written by Claude Code (`JSON.stringify`), and holds
//! what the model and the tools produced: nesting of any depth and lone
//! surrogate escapes are possible there (the model chose the tool input, a
//! tool returned the text), and a strict reader refusing them would stop
//! the session for good. So the line is walked once without recursion,
//! only balancing brackets and strings, and only the fields the budget
//! needs are read strictly: `type`, `requestId`, and in `message` its `id`,
//! `model` and `usage` (with unique keys, as every counted figure is), and
//! of each `message.content` block its `type`, `id` and `tool_use_id`
//! (which tell the lines of one response apart: [`super::OpenResponse`]).
//! One of those given twice is an error (the figure would be ambiguous).

/// The fields of an assistant line that the budget counts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields {
    /// `type`.
    pub kind: Option<String>,
    /// `requestId`.
    pub request_id: Option<String>,
    /// `message.id`.
    pub message_id: Option<String>,
    /// `message.model`.
    pub model: Option<String>,
    /// `message.usage`, as its raw JSON text (read strictly by the caller).
    pub usage: Option<String>,
    /// `requestId` is there but neither a string nor `null` (an error on
    /// an assistant line, as replay reads it).
    pub request_id_invalid: bool,
    /// The line has a `message` (of any value: an assistant line with a
    /// `message` that has no `id`, `null` too, is an error, as replay reads
    /// it; one without is skipped).
    pub message: bool,
    /// The ids of `message.content`'s `tool_use` blocks, in order.
    pub calls: Vec<String>,
    /// When `message.content` is an array: per block, its `tool_use_id`
    /// if it is a `tool_result` block with one, else `None`.
    pub results: Option<Vec<Option<String>>>,
}

/// The members of one content block that tell responses apart.
#[derive(Default)]
struct Block {
    kind: Option<String>,
    id: Option<String>,
    tool_use_id: Option<String>,
}

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected `{}` at byte {}", byte as char, self.at))
        }
    }

    /// Skips a string from its opening quote; returns its raw span.
    fn string(&mut self) -> Result<(usize, usize), String> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match self.bytes.get(self.at) {
                None => return Err("a string does not end".into()),
                Some(b'"') => {
                    self.at += 1;
                    return Ok((start - 1, self.at));
                }
                Some(b'\\') => self.at += 2,
                Some(_) => self.at += 1,
            }
        }
    }

    /// Skips one value of any depth without recursion; returns its span.
    fn value(&mut self) -> Result<(usize, usize), String> {
        self.space();
        let start = self.at;
        let mut depth = 0u64;
        loop {
            self.space();
            match self.bytes.get(self.at) {
                None => return Err("a value does not end".into()),
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.at += 1;
                    continue;
                }
                Some(b'}' | b']') => {
                    if depth == 0 {
                        return Err(format!("unbalanced bracket at byte {}", self.at));
                    }
                    depth -= 1;
                    self.at += 1;
                }
                Some(b',' | b':') if depth > 0 => {
                    self.at += 1;
                    continue;
                }
                Some(_) => {
                    // A number or a literal: up to the next delimiter.
                    let from = self.at;
                    while self.bytes.get(self.at).is_some_and(|b| {
                        !matches!(
                            b,
                            b',' | b':'
                                | b'}'
                                | b']'
                                | b' '
                                | b'\t'
                                | b'\n'
                                | b'\r'
                                | b'"'
                                | b'{'
                                | b'['
                        )
                    }) {
                        self.at += 1;
                    }
                    if self.at == from {
                        return Err(format!("unexpected byte at {}", self.at));
                    }
                }
            }
            if depth == 0 {
                return Ok((start, self.at));
            }
        }
    }

    /// Walks an array, handing the span of each element to `element`.
    fn array(
        &mut self,
        mut element: impl FnMut((usize, usize)) -> Result<(), String>,
    ) -> Result<(), String> {
        self.expect(b'[')?;
        self.space();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            element(self.value()?)?;
            self.space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected `,` or `]` at byte {}", self.at)),
            }
        }
    }

    /// Walks an object, handing each member's key (decoded, without its
    /// quotes) and the span of its value to `member`.
    fn object(
        &mut self,
        mut member: impl FnMut(&[u8], (usize, usize)) -> Result<(), String>,
    ) -> Result<(), String> {
        self.expect(b'{')?;
        self.space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.space();
            let (ks, ke) = self.string()?;
            self.expect(b':')?;
            let span = self.value()?;
            // The key as JSON reads it: `"\u0075sage"` is `usage`.
            let raw = self.bytes.get(ks..ke).unwrap_or_default();
            let decoded;
            let key = if raw.contains(&b'\\') {
                decoded = serde_json::from_slice::<String>(raw)
                    .map_err(|e| format!("the key at byte {ks}: {e}"))?;
                decoded.as_bytes()
            } else {
                raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default()
            };
            member(key, span)?;
            self.space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected `,` or `}}` at byte {}", self.at)),
            }
        }
    }
}

fn text_of(bytes: &[u8], (s, e): (usize, usize)) -> Result<String, String> {
    let raw = std::str::from_utf8(bytes.get(s..e).unwrap_or_default())
        .map_err(|_| "not UTF-8".to_string())?;
    serde_json::from_str::<String>(raw).map_err(|e| format!("{raw:.40}: {e}"))
}

fn set<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    if slot.replace(value).is_some() {
        return Err(format!("`{key}` is given twice"));
    }
    Ok(())
}

/// The counted fields of one line (a JSON object), or why it is not one.
/// A field of another type than expected (a number for `type`) reads as
/// absent: the line is then not an assistant response.
pub fn fields(line: &[u8]) -> Result<Fields, String> {
    let mut out = Fields::default();
    let mut message: Option<(usize, usize)> = None;
    let mut request_seen: Option<()> = None;
    let mut walk = Walk { bytes: line, at: 0 };
    let string = |span: (usize, usize)| line.get(span.0) == Some(&b'"');
    walk.object(|key, span| {
        match key {
            b"type" if string(span) => set(&mut out.kind, text_of(line, span)?, "type")?,
            b"requestId" => {
                set(&mut request_seen, (), "requestId")?;
                if string(span) {
                    out.request_id = Some(text_of(line, span)?);
                } else if line.get(span.0..span.1) != Some(b"null") {
                    out.request_id_invalid = true;
                }
            }
            b"message" => {
                return match message.replace(span) {
                    Some(_) => Err("`message` is given twice".into()),
                    None => Ok(()),
                };
            }
            _ => {}
        }
        Ok(())
    })?;
    walk.space();
    if walk.at != line.len() {
        return Err(format!("text after the line's object at byte {}", walk.at));
    }
    out.message = message.is_some();
    let mut content: Option<(usize, usize)> = None;
    if let Some((s, _)) = message.filter(|(s, _)| line.get(*s) == Some(&b'{')) {
        let mut inner = Walk { bytes: line, at: s };
        inner.object(|key, span| {
            match key {
                b"id" if string(span) => {
                    set(&mut out.message_id, text_of(line, span)?, "message.id")?
                }
                b"model" if string(span) => {
                    set(&mut out.model, text_of(line, span)?, "message.model")?
                }
                b"content" => set(&mut content, span, "message.content")?,
                b"usage" => {
                    let raw = std::str::from_utf8(line.get(span.0..span.1).unwrap_or_default())
                        .map_err(|_| "not UTF-8".to_string())?;
                    set(&mut out.usage, raw.to_owned(), "message.usage")?
                }
                _ => {}
            }
            Ok(())
        })?;
    }
    if let Some((s, _)) = content.filter(|(s, _)| line.get(*s) == Some(&b'[')) {
        let mut blocks = Vec::new();
        Walk { bytes: line, at: s }.array(|span| {
            let block = block(line, span)?;
            if block.kind.as_deref() == Some("tool_use") {
                if let Some(id) = &block.id {
                    out.calls.push(id.clone());
                }
            }
            blocks.push(
                block
                    .tool_use_id
                    .filter(|_| block.kind.as_deref() == Some("tool_result")),
            );
            Ok(())
        })?;
        out.results = Some(blocks);
    }
    Ok(out)
}

/// The members of the content block at `span` that tell responses apart
/// (none when it is not an object).
fn block(line: &[u8], span: (usize, usize)) -> Result<Block, String> {
    let mut block = Block::default();
    if line.get(span.0) != Some(&b'{') {
        return Ok(block);
    }
    let string = |span: (usize, usize)| line.get(span.0) == Some(&b'"');
    Walk {
        bytes: line,
        at: span.0,
    }
    .object(|key, span| {
        match key {
            b"type" if string(span) => set(&mut block.kind, text_of(line, span)?, "type")?,
            b"id" if string(span) => set(&mut block.id, text_of(line, span)?, "id")?,
            b"tool_use_id" if string(span) => {
                set(&mut block.tool_use_id, text_of(line, span)?, "tool_use_id")?
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_fields_are_read_whatever_else_the_line_holds() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let line = format!(
            r#"{{"type":"assistant","requestId":"r1","message":{{"id":"m1","model":"claude-x","content":[{{"type":"tool_use","input":{{"x":{deep},"s":"lone \ud83d here","q":"a\"b}}"}}}}],"usage":{{"input_tokens":5,"output_tokens":2}}}}}}"#
        );
        let f = fields(line.as_bytes()).unwrap();
        assert_eq!(f.kind.as_deref(), Some("assistant"));
        assert_eq!(f.request_id.as_deref(), Some("r1"));
        assert_eq!(f.message_id.as_deref(), Some("m1"));
        assert_eq!(f.model.as_deref(), Some("claude-x"));
        assert_eq!(
            f.usage.as_deref(),
            Some(r#"{"input_tokens":5,"output_tokens":2}"#)
        );
    }

    #[test]
    fn the_blocks_that_tell_responses_apart_are_read() {
        let f = fields(br#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"Read","input":{"id":"no"}},{"id":"t9"},7]}}"#).unwrap();
        assert!(f.message);
        assert_eq!(f.calls, ["t1"]);
        assert_eq!(f.results, Some(vec![None, None, None, None]));
        let f = fields(br#"{"type":"user","message":{"content":[{"tool_use_id":"t1","type":"tool_result","content":[{"tool_use_id":"no"}]},{"type":"text","tool_use_id":"t2"}]}}"#).unwrap();
        assert_eq!(f.results, Some(vec![Some("t1".into()), None]));
        assert!(f.calls.is_empty());
        let f = fields(br#"{"type":"user","message":{"content":"a prompt"}}"#).unwrap();
        assert_eq!(f.results, None);
        assert!(
            fields(br#"{"type":"assistant","message":null}"#)
                .unwrap()
                .message
        );
        assert!(!fields(br#"{"type":"assistant"}"#).unwrap().message);
        assert!(
            fields(br#"{"message":{"content":[{"type":"tool_use","id":"a","id":"b"}]}}"#).is_err()
        );
        assert!(fields(br#"{"message":{"content":[],"content":[]}}"#).is_err());
    }

    #[test]
    fn a_counted_field_given_twice_or_a_broken_line_is_an_error() {
        assert!(fields(br#"{"type":"assistant","type":"user"}"#).is_err());
        assert!(fields(br#"{"message":{"usage":{},"usage":{}}}"#).is_err());
        assert!(fields(br#"{"message":{"id":"a"}"#).is_err());
        assert!(fields(br#"{"a":1} x"#).is_err());
        assert!(fields(br#"{"a":"unterminated}"#).is_err());
        // Other fields may repeat: they are not counted.
        assert!(fields(br#"{"x":1,"x":2,"type":"user"}"#).is_ok());
    }
}
