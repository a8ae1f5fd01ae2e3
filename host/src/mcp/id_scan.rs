//! The id of a message too long to hold (`SPEC E`: a call that ran is
//! counted): [`IdScan`] reads a JSON-RPC message byte by byte as it is
//! skipped and keeps only its top-level `"id"` member, in bounded memory,
//! so that an answer over the line bound can still be matched to the call
//! it answers (counted, and answered with a withheld result) instead of
//! leaving the call unanswered.

/// The longest id kept (compact JSON bytes); a longer one is not read.
const MAX_ID: usize = 256;

/// The longest member name kept while reading names: enough to tell `"id"`.
const MAX_NAME: usize = 4;

/// Reads the top-level `"id"` of one JSON object, fed in pieces of any
/// size ([`IdScan::feed`]); [`IdScan::id`] at its end. Nothing but the
/// scanner's state and at most 256 bytes (`MAX_ID`) are held, whatever the
/// input. An id that cannot be told for certain (no object, an `"id"` given
/// twice, spelled with escapes, longer than that, or not closed) is `None`:
/// the caller then treats the message as answering no known request.
#[derive(Debug, Default)]
pub struct IdScan {
    /// How deep in objects and arrays the next byte is.
    depth: u32,
    /// Inside a string.
    in_string: bool,
    /// The byte before was a backslash inside a string.
    escaped: bool,
    /// At depth 1, a member's name is expected next (after `{` or `,`).
    expect_name: bool,
    /// Reading a member name at depth 1: its bytes (at most [`MAX_NAME`]).
    name: Option<Vec<u8>>,
    /// The last name read, waiting for its `:`.
    named: Option<Vec<u8>>,
    /// The value of `"id"` being read.
    value: Option<Vec<u8>>,
    /// The id, once its value ended.
    found: Option<Vec<u8>>,
    /// Seen something that makes the id uncertain.
    spoiled: bool,
    /// Any byte other than white space seen.
    started: bool,
}

impl IdScan {
    /// A scanner before the message's first byte.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.spoiled {
            return;
        }
        for &b in bytes {
            self.byte(b);
            if self.spoiled {
                return;
            }
        }
    }

    /// The id's compact JSON, when it could be told for certain.
    pub fn id(&self) -> Option<String> {
        if self.spoiled || self.depth != 0 {
            return None;
        }
        let raw = std::str::from_utf8(self.found.as_deref()?).ok()?;
        let raw: &serde_json::value::RawValue = serde_json::from_str(raw).ok()?;
        let id = super::normal_id(raw);
        // Only a string or a number is an id of a request the gateway sent.
        (id.starts_with('"') || id.starts_with(|c: char| c == '-' || c.is_ascii_digit()))
            .then_some(id)
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        if b.is_ascii_whitespace() {
            return;
        }
        if !self.started {
            self.started = true;
            if b != b'{' {
                self.spoiled = true;
                return;
            }
        } else if self.depth == 0 {
            // Something after the object ended.
            self.spoiled = true;
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_name {
                    self.name = Some(Vec::new());
                    self.expect_name = false;
                } else {
                    self.keep(b);
                }
            }
            b'{' | b'[' => {
                if self.value.is_some() {
                    // An id is a string or a number.
                    self.spoiled = true;
                    return;
                }
                self.depth = self.depth.saturating_add(1);
                if self.depth == 1 {
                    self.expect_name = true;
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.end_value();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                if let Some(name) = self.named.take() {
                    if name == b"id" {
                        if self.found.is_some() {
                            // Given twice: which one would be meant?
                            self.spoiled = true;
                            return;
                        }
                        self.value = Some(Vec::new());
                    }
                }
            }
            b',' if self.depth == 1 => {
                self.end_value();
                self.expect_name = true;
            }
            _ => self.keep(b),
        }
    }

    fn string_byte(&mut self, b: u8) {
        if let Some(name) = &mut self.name {
            if self.escaped || b == b'\\' {
                // A name spelled with escapes is not read as "id": the id
                // stays unknown (the safe side: the call stays counted).
                name.clear();
                name.extend_from_slice(b"\\");
            }
        }
        if self.escaped {
            self.escaped = false;
            self.keep(b);
            return;
        }
        match b {
            b'\\' => {
                self.escaped = true;
                self.keep(b);
            }
            b'"' => {
                self.in_string = false;
                if let Some(name) = self.name.take() {
                    self.named = Some(name);
                } else {
                    self.keep(b);
                }
            }
            _ => {
                if let Some(name) = &mut self.name {
                    if name.len() < MAX_NAME {
                        name.push(b);
                    } else {
                        name.clear();
                        name.extend_from_slice(b"long");
                    }
                }
                self.keep(b);
            }
        }
    }

    /// Keeps `b` when it is part of the id's value.
    fn keep(&mut self, b: u8) {
        if self.name.is_some() {
            return;
        }
        if let Some(value) = &mut self.value {
            if value.len() >= MAX_ID {
                self.spoiled = true;
                return;
            }
            value.push(b);
        }
    }

    fn end_value(&mut self) {
        if let Some(value) = self.value.take() {
            self.found = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in(text: &str, piece: usize) -> Option<String> {
        let mut s = IdScan::new();
        for chunk in text.as_bytes().chunks(piece.max(1)) {
            s.feed(chunk);
        }
        s.id()
    }

    fn scan(text: &str) -> Option<String> {
        let whole = scan_in(text, usize::MAX);
        for piece in [1, 2, 3, 7] {
            assert_eq!(scan_in(text, piece), whole, "{text} in pieces of {piece}");
        }
        whole
    }

    #[test]
    fn the_top_level_id_is_read_wherever_it_stands() {
        assert_eq!(
            scan(r#"{"jsonrpc":"2.0","id":7,"result":{"id":9}}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            scan(r#"{"result":{"content":[{"id":1,"text":"}\"{"}]},"id" : "a,b" }"#).as_deref(),
            Some(r#""a,b""#)
        );
        assert_eq!(
            scan(r#" { "id" : -12 , "result" : [ ] } "#).as_deref(),
            Some("-12")
        );
    }

    #[test]
    fn an_id_that_cannot_be_told_for_certain_is_none() {
        for text in [
            r#"{"result":{"id":1}}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"i\u0064":1}"#,
            r#"[{"id":1}]"#,
            r#"{"id":{"a":1}}"#,
            r#"{"id":null}"#,
            r#"{"id":1,"result":{"#,
            r#"{"id":1} {"id":2}"#,
            "",
        ] {
            assert_eq!(scan(text), None, "{text}");
        }
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(MAX_ID));
        assert_eq!(scan(&long), None);
    }

    #[test]
    fn names_longer_than_id_or_starting_like_it_are_not_id() {
        assert_eq!(scan(r#"{"idx":1,"id":2}"#).as_deref(), Some("2"));
        assert_eq!(scan(r#"{"i":1,"id":"3"}"#).as_deref(), Some("\"3\""));
        assert_eq!(scan(r#"{"idid":1}"#), None);
    }
}
