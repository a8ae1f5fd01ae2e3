//! The subcommands of `budgetgate` and what they share: reading input files,
//! exit statuses, one-line errors and plain-text tables.

pub mod device;
pub mod eval;
pub mod hook;
pub mod ledger;
pub mod mcp;
pub mod plan;
pub mod proxy;
pub mod replay;
pub mod run;

use std::path::Path;

use budgetgate::input::{read_path, ReadError};
use budgetgate::text::one_line;
pub use budgetgate::text::shorten;
use std::process::ExitCode;

/// How a subcommand ended; the process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 0: the plan completed, or the run ended with `final`.
    Complete,
    /// 1: a limit or budget stopped it (or, for `run`, any status but `final`).
    Stopped,
    /// 2: the input could not be read or is invalid; nothing was decided.
    Invalid,
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        ExitCode::from(match outcome {
            Outcome::Complete => 0,
            Outcome::Stopped => 1,
            Outcome::Invalid => 2,
        })
    }
}

/// A one-line error about an input, reported as `budgetgate CMD: SOURCE: DETAIL`.
#[derive(Debug)]
pub struct InputError {
    /// The file name as given (or `<stdin>`).
    pub source: String,
    /// What is wrong, on one line.
    pub detail: String,
}

impl InputError {
    /// An error about `source`.
    pub fn new(source: &str, detail: impl std::fmt::Display) -> Self {
        Self {
            source: source.to_owned(),
            detail: one_line(&detail.to_string()),
        }
    }

    /// Prints the error on stderr for command `command` and gives exit status 2.
    pub fn report(&self, command: &str) -> Outcome {
        eprintln!("budgetgate {command}: {}: {}", self.source, self.detail);
        Outcome::Invalid
    }
}

/// The name a path is reported under (`<stdin>` for `-`).
pub fn display_name(path: &str) -> String {
    budgetgate::input::display_name(Path::new(path)).into_owned()
}

/// Largest plan, limits or script file read, in bytes. A valid plan is at
/// most 32 rows and a run uses at most 32 proposals, so this is generous; it
/// keeps `/dev/zero` or a runaway file from exhausting memory.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// Reads a whole input file of at most [`MAX_INPUT_BYTES`]; `-` reads
/// standard input. A larger input is refused without being read whole.
pub fn read_input(path: &str) -> Result<Vec<u8>, InputError> {
    let name = display_name(path);
    let bytes = read_path(Path::new(path), MAX_INPUT_BYTES).map_err(|e| match e {
        ReadError::Io(e) => InputError::new(&name, format!("cannot read: {e}")),
        ReadError::TooLarge { limit } => {
            InputError::new(&name, format!("larger than {} MiB; refused", limit >> 20))
        }
    })?;
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(InputError::new(
            &name,
            "starts with a UTF-8 byte-order mark, which JSON input must not have",
        ));
    }
    Ok(bytes)
}

/// Writes a command's output to stdout. A closed pipe (`| head`) ends the
/// command quietly with the outcome it already had; any other write error is
/// reported on stderr and gives exit status 2.
pub fn write_stdout(command: &str, text: &str, outcome: Outcome) -> Outcome {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => outcome,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => outcome,
        Err(e) => {
            eprintln!("budgetgate {command}: writing the output: {e}");
            Outcome::Invalid
        }
    }
}

/// The entries of a JSON object in document order, each value kept as
/// written: numbers are never converted, so a document the core refused for a
/// number out of range (`1e400`) can still be read here to name the key or
/// id at fault. `None` when `json` is not one JSON object.
pub fn object_entries(json: &str) -> Option<Vec<(String, Box<serde_json::value::RawValue>)>> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Vec<(String, Box<serde_json::value::RawValue>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::new();
            while let Some(entry) = map.next_entry()? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    let mut reader = serde_json::Deserializer::from_str(json);
    let entries = serde::Deserializer::deserialize_map(&mut reader, Entries).ok()?;
    reader.end().ok()?;
    Some(entries)
}

/// The value of `key` among `entries` (the first, as written).
pub fn entry<'a>(
    entries: &'a [(String, Box<serde_json::value::RawValue>)],
    key: &str,
) -> Option<&'a str> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.get())
}

/// Where serde_json finds a syntax error, as ` (line L, column C)`, to help a
/// person find it; empty when serde_json accepts the text (the core is
/// stricter: duplicate keys, lone surrogates, a byte-order mark).
pub fn syntax_position(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        Err(e) if e.line() > 0 => format!(" (line {}, column {})", e.line(), e.column()),
        _ => String::new(),
    }
}

/// Text safe to print on a terminal: control characters (including DEL and
/// the C1 range, which JSON does not escape), bidirectional-text controls and
/// U+2028/9 are shown as `\u{..}`; the same rule as `replay` uses.
pub fn printable(text: &str) -> String {
    budgetgate::term::terminal_safe(text).into_owned()
}

/// Alignment of a table column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Number columns.
    Right,
}

/// Renders a table with a header row, columns two spaces apart, every line
/// indented by two spaces and without trailing spaces. Widths count
/// characters.
pub fn table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let head: Vec<String> = header.iter().map(|(h, _)| (*h).to_owned()).collect();
    for row in std::iter::once(&head).chain(rows) {
        let mut line = String::from(" ");
        for ((cell, (_, align)), width) in row.iter().zip(header).zip(&widths) {
            let pad = width.saturating_sub(cell.chars().count());
            line.push(' ');
            match align {
                Align::Left => {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
            }
            line.push(' ');
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_terminal_controls() {
        assert_eq!(printable("a\u{1b}[2Jb\u{9b}c"), "a\\u{1b}[2Jb\\u{9b}c");
        assert_eq!(printable("é ok"), "é ok");
    }

    #[test]
    fn table_aligns_without_trailing_spaces() {
        let text = table(
            &[
                ("name", Align::Left),
                ("n", Align::Right),
                ("note", Align::Left),
            ],
            &[
                vec!["a".into(), "10".into(), String::new()],
                vec!["long".into(), "2".into(), "x".into()],
            ],
        );
        assert_eq!(text, "  name   n  note\n  a     10\n  long   2  x\n");
    }

    #[test]
    fn syntax_position_points_at_the_error() {
        assert_eq!(syntax_position(b"[\n  {,\n]"), " (line 2, column 4)");
        assert_eq!(syntax_position(b"[]"), "");
    }
}
