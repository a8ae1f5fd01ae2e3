//! `budgetgate eval`: JSON Lines on stdin, one answer line per request line
//! (see [`budgetgate::eval`]).

use std::io::{BufRead, Write};

use super::Outcome;

/// Answers every line of stdin, in order, until end of input. Exit status 0
/// at end of input, 2 when stdin cannot be read or stdout cannot be written;
/// a bad request line is answered, never fatal.
pub fn main() -> Outcome {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => return Outcome::Complete,
            Ok(_) => {}
            Err(e) => {
                eprintln!("budgetgate eval: reading stdin: {e}");
                return Outcome::Invalid;
            }
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let answer = budgetgate::eval::answer_line(body);
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return Outcome::Invalid;
        }
    }
}
