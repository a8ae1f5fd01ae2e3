//! A bounded reader of an SSE stream (`text/event-stream`), for the
//! upstream streams of the MCP gateway's Streamable HTTP transport and of
//! the model proxy.

use bytes::Bytes;

/// Largest SSE event held (16 MiB, the stdio gateway's line bound): a
/// longer one is skipped.
pub const MAX_BODY: usize = 16 << 20;

/// One thing read from an SSE stream.
#[derive(Debug, PartialEq, Eq)]
pub enum SseItem {
    /// An event with data: its bytes as they came (`raw`), its data (lines
    /// joined by `\n`), and its other lines (each with its newline).
    Event {
        /// The event's lines and the blank line ending it, as they came.
        raw: Bytes,
        /// The data.
        data: String,
        /// The lines other than `data:`.
        fields: String,
    },
    /// Lines without data (comments, `retry:`), as they came.
    Other(Bytes),
    /// An event over [`MAX_BODY`] bytes (skipped).
    TooLong,
}

/// A bounded reader of `text/event-stream` (the WHATWG format: lines ended
/// by LF or CRLF, events by a blank line): at most [`MAX_BODY`] bytes of
/// one event are held.
#[derive(Default)]
pub struct SseParser {
    line: Vec<u8>,
    raw: Vec<u8>,
    data: Option<String>,
    fields: String,
    skipping: bool,
    /// Whether the line being read has a byte (kept or skipped).
    in_line: bool,
}

impl SseParser {
    /// Reads `chunk`; the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseItem> {
        let mut out = Vec::new();
        for &b in chunk {
            if !self.skipping {
                self.raw.push(b);
                if self.raw.len() > MAX_BODY {
                    self.skipping = true;
                    self.raw = Vec::new();
                    self.line = Vec::new();
                    self.data = None;
                    self.fields.clear();
                }
            }
            if b != b'\n' {
                if b != b'\r' {
                    self.in_line = true;
                }
                if !self.skipping {
                    self.line.push(b);
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let blank = !self.in_line;
            self.in_line = false;
            if blank {
                if self.skipping {
                    self.skipping = false;
                    out.push(SseItem::TooLong);
                    continue;
                }
                let raw = Bytes::from(std::mem::take(&mut self.raw));
                let fields = std::mem::take(&mut self.fields);
                out.push(match self.data.take() {
                    Some(data) => SseItem::Event { raw, data, fields },
                    None => SseItem::Other(raw),
                });
                continue;
            }
            if self.skipping {
                continue;
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
                    continue;
                }
            }
            self.fields.push_str(&text);
            self.fields.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_are_read_with_their_fields_and_bytes() {
        let mut p = SseParser::default();
        let mut items = p.feed(b"id: 7\nevent: message\ndata: {\"a\":");
        assert!(items.is_empty());
        items.extend(p.feed(b"1}\r\n\r\n: ping\n\ndata:x\ndata: y\n\n"));
        assert_eq!(items.len(), 3, "{items:?}");
        assert_eq!(
            items[0],
            SseItem::Event {
                raw: Bytes::from_static(b"id: 7\nevent: message\ndata: {\"a\":1}\r\n\r\n"),
                data: "{\"a\":1}".into(),
                fields: "id: 7\nevent: message\n".into(),
            }
        );
        assert_eq!(items[1], SseItem::Other(Bytes::from_static(b": ping\n\n")));
        match &items[2] {
            SseItem::Event { data, .. } => assert_eq!(data, "x\ny"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_sse_event_over_the_bound_is_skipped_without_being_held() {
        let mut p = SseParser::default();
        let chunk = vec![b'x'; 1 << 20];
        let mut items = p.feed(b"data: ");
        for _ in 0..(MAX_BODY >> 20) + 1 {
            items.extend(p.feed(&chunk));
            assert!(p.raw.len() <= MAX_BODY && p.line.len() <= MAX_BODY);
        }
        items.extend(p.feed(b"\n\ndata: 1\n\n"));
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(items[0], SseItem::TooLong);
        assert!(matches!(&items[1], SseItem::Event { data, .. } if data == "1"));
    }
}
