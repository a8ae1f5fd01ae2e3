//! Text for a terminal: the one escaping rule every report of the command
//! uses (`run`, `plan`, `replay`, `device`, errors on stderr).
//!
//! A recording, a script or a device can carry characters that change what
//! a terminal shows: escape sequences (ESC, CSI), bidirectional-text controls
//! that reorder a line, and invisible format characters (U+200B) that make
//! `Bash\u{200b}` look like `Bash`. They are shown escaped, never raw.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;

use serde::Serialize;

/// Whether `c` must not reach a terminal raw: control characters (C0, DEL,
/// C1), bidirectional-text controls (which reorder what is shown), the
/// Unicode line and paragraph separators, and invisible format characters
/// (zero-width space, joiners, word joiner, invisible operators, byte-order
/// mark, soft hyphen, Mongolian vowel separator, tag characters), which would
/// let two different names look the same.
pub fn unsafe_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// Whether `text` is all printable ASCII (space to `~`), where
/// [`unsafe_on_terminal`] holds for no character.
fn is_printable_ascii(text: &str) -> bool {
    text.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// `text` made safe to print on a terminal: every character for which
/// [`unsafe_on_terminal`] holds is shown as `\u{..}`, as Rust's `{:?}` shows
/// them; everything else is unchanged. Every report the command prints from
/// outside input (a recording, a script, a device, a file name) goes
/// through it.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if is_printable_ascii(text) || !text.chars().any(unsafe_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_on_terminal(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// serde_json's compact output with every character for which
/// [`unsafe_on_terminal`] holds written as a JSON escape (serde_json escapes
/// only C0): the same JSON value, safe on a terminal.
struct TerminalSafeJson;

impl serde_json::ser::Formatter for TerminalSafeJson {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        // Printable ASCII is never unsafe: the usual fragment is written
        // without decoding it (issue 14: a long replay's report).
        if is_printable_ascii(fragment) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut from = 0;
        for (at, c) in fragment.char_indices() {
            if unsafe_on_terminal(c) {
                writer.write_all(&fragment.as_bytes()[from..at])?;
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{unit:04x}")?;
                }
                from = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[from..])
    }
}

/// `value` as one line of compact JSON, safe on a terminal (see
/// [`unsafe_on_terminal`]); what every `--json` output prints.
pub fn to_safe_json<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    let mut bytes = Vec::new();
    write_safe_json(value, &mut bytes).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// [`to_safe_json`] written to `writer` as it is made, never held whole
/// (a long replay's report). An error is the writer's, or, if `value`
/// cannot be written as JSON, one of kind `InvalidData`.
pub fn write_safe_json<T: Serialize + ?Sized>(
    value: &T,
    writer: impl Write,
) -> std::io::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, TerminalSafeJson);
    value
        .serialize(&mut serializer)
        .map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_bidi_characters_are_escaped_on_a_terminal() {
        assert_eq!(terminal_safe("Bash\u{200b}"), "Bash\\u{200b}");
        assert_eq!(
            terminal_safe("a\u{1b}[2J\u{202e}X"),
            "a\\u{1b}[2J\\u{202e}X"
        );
        assert_eq!(terminal_safe("\u{feff}x\u{e0041}"), "\\u{feff}x\\u{e0041}");
        assert_eq!(terminal_safe("é ok ✓"), "é ok ✓");
    }

    /// The printable-ASCII fast path is the rule's: no character from space
    /// to `~` is unsafe, and every other ASCII one (C0 and DEL) is.
    #[test]
    fn printable_ascii_is_exactly_the_safe_ascii() {
        for b in 0u8..=0x7f {
            let c = char::from(b);
            let printable = is_printable_ascii(c.encode_utf8(&mut [0; 4]));
            assert_eq!(printable, !unsafe_on_terminal(c), "{b:#x}");
        }
        assert!(is_printable_ascii(""));
        assert!(!is_printable_ascii("abc\u{7f}"));
        assert!(!is_printable_ascii("é"));
        assert_eq!(to_safe_json("a\u{7f}b").unwrap(), "\"a\\u007fb\"");
        assert_eq!(terminal_safe("a\u{7f}b"), "a\\u{7f}b");
    }

    #[test]
    fn safe_json_escapes_what_the_terminal_must_not_see_and_stays_json() {
        let value = serde_json::json!({"name": "Bash\u{200b}", "tag": "\u{e0041}", "ok": "é"});
        let text = to_safe_json(&value).unwrap();
        assert!(text.contains("Bash\\u200b"), "{text}");
        assert!(text.contains("\\udb40\\udc41"), "{text}");
        assert!(text.chars().all(|c| !unsafe_on_terminal(c)));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
