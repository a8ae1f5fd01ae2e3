//! The SSE reader the model proxy and the MCP gateway's Streamable HTTP
//! transport read upstream streams with (`host/src/net/sse.rs`), on
//! arbitrary bytes.
//!
//! Input: `CUTS STREAM`. `CUTS` (one byte) seeds the chunk sizes (1 to 64
//! bytes) the stream is fed in.
//!
//! Checks, against an independent model written here (byte by byte, every
//! byte pushed into the event's bytes and the line; a line ended by LF, by
//! CRLF, or by a CR alone, which is completed when the next byte is seen
//! or at the stream's end; an event ended by an empty line):
//! - no panic;
//! - fed whole, in chunks, and byte by byte (then finished), the reader
//!   gives exactly the model's items (their bytes, data and other fields);
//! - a reader without raw bytes gives the same items with empty bytes;
//! - the items' bytes, joined, are a prefix of the stream (nothing made up,
//!   nothing dropped, nothing reordered);
//! - a relaying reader with a bound of 1 to 64 bytes an event hands on
//!   every byte of the stream once, in order.
#![no_main]

use budgetgate::net::sse::{SseItem, SseParser};
use libfuzzer_sys::fuzz_target;

/// The model: byte by byte, in the WHATWG format's words (no event here
/// comes near the reader's 16 MiB bound).
#[derive(Default)]
struct Model {
    line: Vec<u8>,
    raw: Vec<u8>,
    data: Option<String>,
    fields: String,
    after_cr: bool,
    out: Vec<SseItem>,
}

impl Model {
    fn run(stream: &[u8]) -> Vec<SseItem> {
        let mut m = Self::default();
        for &b in stream {
            if std::mem::take(&mut m.after_cr) {
                if b == b'\n' {
                    m.raw.push(b);
                    m.end_line();
                    continue;
                }
                m.end_line();
            }
            m.raw.push(b);
            match b {
                b'\n' => m.end_line(),
                b'\r' => m.after_cr = true,
                _ => m.line.push(b),
            }
        }
        if m.after_cr {
            m.end_line();
        }
        m.out
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            let raw = std::mem::take(&mut self.raw).into();
            let fields = std::mem::take(&mut self.fields);
            self.out.push(match self.data.take() {
                Some(data) => SseItem::Event { raw, data, fields },
                None => SseItem::Other(raw),
            });
            return;
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(value) = text.strip_prefix("data") {
            if value.is_empty() || value.starts_with(':') {
                let value = value.strip_prefix(':').unwrap_or(value);
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
                return;
            }
        }
        self.fields.push_str(&text);
        self.fields.push('\n');
    }
}

fn lean(items: &[SseItem]) -> Vec<SseItem> {
    items
        .iter()
        .map(|i| match i {
            SseItem::Event { data, fields, .. } => SseItem::Event {
                raw: Default::default(),
                data: data.clone(),
                fields: fields.clone(),
            },
            SseItem::Other(_) => SseItem::Other(Default::default()),
            other => panic!("{other:?} from a reader that does not relay"),
        })
        .collect()
}

fuzz_target!(|input: &[u8]| {
    let Some((&cuts, stream)) = input.split_first() else {
        return;
    };
    let expected = Model::run(stream);
    let mut whole = SseParser::default();
    let mut all = whole.feed(stream);
    all.extend(whole.finish());
    assert_eq!(all, expected, "fed whole");
    let mut bytes = SseParser::default();
    let mut one: Vec<SseItem> = stream.iter().flat_map(|b| bytes.feed(&[*b])).collect();
    one.extend(bytes.finish());
    assert_eq!(one, expected, "fed byte by byte");
    let (mut chunked, mut without) = (SseParser::default(), SseParser::without_raw());
    let (mut got, mut got_lean) = (Vec::new(), Vec::new());
    let mut seed = u32::from(cuts) | 1;
    let mut rest = stream;
    while !rest.is_empty() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let n = (seed as usize % 64 + 1).min(rest.len());
        let (chunk, after) = rest.split_at(n);
        got.extend(chunked.feed(chunk));
        got_lean.extend(without.feed(chunk));
        rest = after;
    }
    got.extend(chunked.finish());
    got_lean.extend(without.finish());
    assert_eq!(got, expected, "fed in chunks");
    assert_eq!(got_lean, lean(&expected), "without raw bytes");
    let joined: Vec<u8> = expected
        .iter()
        .flat_map(|i| match i {
            SseItem::Event { raw, .. } | SseItem::Other(raw) => raw.to_vec(),
            other => panic!("{other:?} from a reader that does not relay"),
        })
        .collect();
    assert!(stream.starts_with(&joined), "the items' bytes are the stream's");
    // A relaying reader with a small bound (1 to 64 bytes an event) hands
    // on every byte once, in order: events, over-long pieces, and what it
    // holds at the end.
    let mut relay = SseParser::relaying().with_limit(usize::from(cuts % 64) + 1);
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let n = (usize::from(cuts) % 7 + 1).min(rest.len());
        let (chunk, after) = rest.split_at(n);
        for item in relay.feed(chunk) {
            match item {
                SseItem::Event { raw, .. } | SseItem::Other(raw) | SseItem::Overflow(raw) => {
                    out.extend_from_slice(&raw)
                }
                SseItem::TooLong => {}
            }
        }
        rest = after;
    }
    for item in relay.finish() {
        match item {
            SseItem::Event { raw, .. } | SseItem::Other(raw) | SseItem::Overflow(raw) => {
                out.extend_from_slice(&raw)
            }
            SseItem::TooLong => {}
        }
    }
    out.extend_from_slice(&relay.rest().unwrap_or_default());
    assert_eq!(out, stream, "a relaying reader hands on every byte");
});
