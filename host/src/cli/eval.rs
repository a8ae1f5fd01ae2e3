//! `budgetgate eval`: JSON Lines on stdin, one answer line per request line
//! (see [`budgetgate::eval`]).

use std::io::{BufRead, Write};

use super::Outcome;

/// Longest request line kept, in bytes. A valid request is far smaller (a run
/// uses at most 32 proposals); a longer line is skipped up to its newline
/// without being stored and answered with `bad-request`.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// One line of input, or how much of an over-long one was skipped.
enum Line {
    Kept,
    TooLong,
    End,
}

/// Reads the next line into `line` (without its `\n`), keeping at most
/// [`MAX_LINE_BYTES`]; the rest of a longer line is consumed and dropped.
fn next_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    let mut seen_any = false;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(match (seen_any, too_long) {
                (false, _) => Line::End,
                (true, true) => Line::TooLong,
                (true, false) => Line::Kept,
            });
        }
        seen_any = true;
        let (part, newline) = match memchr::memchr(b'\n', chunk) {
            Some(at) => (&chunk[..at], true),
            None => (chunk, false),
        };
        if !too_long {
            if line.len() + part.len() > MAX_LINE_BYTES {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(part);
            }
        }
        let used = part.len() + usize::from(newline);
        input.consume(used);
        if newline {
            return Ok(if too_long { Line::TooLong } else { Line::Kept });
        }
    }
}

/// Answers every line of stdin, in order, until end of input. Exit status 0
/// at end of input or when the reader closes its end of stdout (`| head`), as
/// every subcommand treats a closed pipe; 2, with the reason on stderr, when
/// stdin cannot be read or stdout cannot be written (a full disk); a bad
/// request line is answered, never fatal.
pub fn main() -> Outcome {
    let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    // Answers are buffered and written when no more input is waiting: a
    // program that sends one line and waits gets its answer at once, and a
    // stream of lines costs one write per buffer, not one per line.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut line = Vec::new();
    let mut answer = Vec::with_capacity(1 << 10);
    loop {
        answer.clear();
        match next_line(&mut input, &mut line) {
            Ok(Line::End) => {
                return match out.flush() {
                    Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                        eprintln!("budgetgate eval: writing the answers to stdout: {e}");
                        Outcome::Invalid
                    }
                    _ => Outcome::Complete,
                };
            }
            Ok(Line::Kept) => {
                let body = line.strip_suffix(b"\r").unwrap_or(&line);
                budgetgate::eval::write_answer(body, &mut answer);
            }
            Ok(Line::TooLong) => {
                let _ = serde_json::to_writer(
                    &mut answer,
                    &serde_json::json!({
                        "error": "bad-request",
                        "detail": format!("line longer than {} MiB", MAX_LINE_BYTES >> 20),
                    }),
                );
            }
            Err(e) => {
                eprintln!("budgetgate eval: reading stdin: {e}");
                return Outcome::Invalid;
            }
        };
        answer.push(b'\n');
        let written = out.write_all(&answer).and_then(|()| {
            if input.buffer().is_empty() {
                out.flush()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {}
            // The reader stopped reading (`| head`): no one is left to answer,
            // which is an end of the stream as `replay`, `plan` and `run` treat it.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Outcome::Complete,
            Err(e) => {
                eprintln!("budgetgate eval: writing the answers to stdout: {e}");
                return Outcome::Invalid;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut reader = std::io::BufReader::with_capacity(7, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            match next_line(&mut reader, &mut line).unwrap() {
                Line::End => return out,
                Line::Kept => out.push(String::from_utf8_lossy(&line).into_owned()),
                Line::TooLong => out.push("<too long>".into()),
            }
        }
    }

    #[test]
    fn lines_are_split_on_newlines_across_buffer_refills() {
        assert_eq!(
            lines(b"abc\n\nlonger line here\nlast"),
            ["abc", "", "longer line here", "last"]
        );
        assert_eq!(lines(b""), Vec::<String>::new());
    }

    #[test]
    fn an_over_long_line_is_skipped_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 1];
        input.extend_from_slice(b"\nok\n");
        assert_eq!(lines(&input), ["<too long>", "ok"]);
        let mut exact = vec![b'y'; MAX_LINE_BYTES];
        exact.push(b'\n');
        assert_eq!(lines(&exact).len(), 1);
        assert_ne!(lines(&exact)[0], "<too long>");
    }
}
