//! One input cut into bounded lines ([`Lines`]).

#[allow(unused_imports)]
use super::*;

/// One input of the gateway cut into lines, as its bytes arrive in chunks
/// of any size: a line over `max` bytes is skipped as it is read (at most
/// `max` bytes of a line are ever held) and reported as
/// [`Line::TooLong`]. What a chunk completes waits in order for
/// [`Lines::take_line`].
#[derive(Debug)]
pub struct Lines {
    max: usize,
    partial: Vec<u8>,
    /// While a line over `max` is skipped: its id, read as it passes.
    skipping: Option<IdScan>,
    ended: bool,
    ready: VecDeque<Line>,
}

/// A line from [`Lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A whole line (its newline removed).
    Text(Vec<u8>),
    /// A line longer than the limit, skipped as it was read: the top-level
    /// id of the message it held, when that could be told ([`IdScan`]).
    TooLong(Option<String>),
}

impl Lines {
    /// No line read yet; lines over `max` bytes are skipped.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            partial: Vec::new(),
            skipping: None,
            ended: false,
            ready: VecDeque::new(),
        }
    }

    /// Takes the next bytes of the input.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, rest) = match memchr::memchr(b'\n', chunk) {
                Some(at) => (&chunk[..at], Some(&chunk[at + 1..])),
                None => (chunk, None),
            };
            match &mut self.skipping {
                Some(scan) => scan.feed(part),
                None if self.partial.len() + part.len() > self.max => {
                    let mut scan = IdScan::new();
                    scan.feed(&self.partial);
                    scan.feed(part);
                    self.skipping = Some(scan);
                    self.partial = Vec::new();
                }
                None => self.partial.extend_from_slice(part),
            }
            let Some(rest) = rest else { break };
            self.end_line();
            chunk = rest;
        }
    }

    /// The input ended: an unterminated last line is a line.
    pub fn finish(&mut self) {
        if self.skipping.is_some() || !self.partial.is_empty() {
            self.end_line();
        }
        self.ended = true;
    }

    /// Whether the input ended ([`Lines::finish`]); lines may still wait.
    pub fn ended(&self) -> bool {
        self.ended
    }

    fn end_line(&mut self) {
        let line = match self.skipping.take() {
            Some(scan) => Line::TooLong(scan.id()),
            None => Line::Text(std::mem::take(&mut self.partial)),
        };
        self.ready.push_back(line);
    }

    /// The oldest line not yet taken.
    pub fn take_line(&mut self) -> Option<Line> {
        self.ready.pop_front()
    }

    /// Whether a line waits to be taken.
    pub fn has_next(&self) -> bool {
        !self.ready.is_empty()
    }
}
