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
    /// An event over the reader's bound (skipped), at its end.
    TooLong,
    /// For a [`SseParser::relaying`] reader: bytes of an event over the
    /// bound, as they came (to relay; the event is not read).
    Overflow(Bytes),
}

/// A bounded reader of `text/event-stream` (the WHATWG format: lines ended
/// by CRLF, LF or CR alone, events by a blank line): at most [`MAX_BODY`]
/// bytes of one event are held. Read a line at a time (`memchr`), not a
/// byte at a time: the model proxy relays long streams through it.
///
/// A line ended by a CR that is a chunk's last byte is completed when the
/// next byte is seen (an LF after it is the same line ending) or at the
/// stream's end ([`Self::finish`]), so that the items and their bytes do
/// not depend on how the stream is cut into chunks.
pub struct SseParser {
    /// The part of a line read so far, when a chunk ended inside it.
    line: Vec<u8>,
    /// The event's bytes as they came (not kept by a [`Self::without_raw`]
    /// reader).
    raw: Vec<u8>,
    /// How many bytes the event has had, kept or not.
    raw_len: usize,
    drop_raw: bool,
    /// Hands on the bytes of an event over the bound ([`SseItem::Overflow`]).
    pass_over: bool,
    /// The bound of one event.
    max: usize,
    data: Option<String>,
    fields: String,
    skipping: bool,
    /// Whether the line being read has a byte (kept or skipped).
    in_line: bool,
    /// The line read ended with a CR that was its chunk's last byte: it is
    /// completed by the next byte (an LF then taken with it) or the end.
    after_cr: bool,
}

impl Default for SseParser {
    /// A reader that keeps each event's bytes, bounded at [`MAX_BODY`].
    fn default() -> Self {
        Self {
            line: Vec::new(),
            raw: Vec::new(),
            raw_len: 0,
            drop_raw: false,
            pass_over: false,
            max: MAX_BODY,
            data: None,
            fields: String::new(),
            skipping: false,
            in_line: false,
            after_cr: false,
        }
    }
}

impl SseParser {
    /// A reader whose events come without their bytes (`raw` empty), for a
    /// caller that relays the stream as it came and reads only the data.
    pub fn without_raw() -> Self {
        Self {
            drop_raw: true,
            ..Self::default()
        }
    }

    /// A reader that hands on, as [`SseItem::Overflow`], the bytes of an
    /// event over its bound, for a caller that relays the stream event by
    /// event and must not lose what it cannot read.
    pub fn relaying() -> Self {
        Self {
            pass_over: true,
            ..Self::default()
        }
    }

    /// This reader with a bound of `max` bytes an event instead of
    /// [`MAX_BODY`].
    pub fn with_limit(self, max: usize) -> Self {
        Self { max, ..self }
    }

    /// What a stream that ended held of an event it did not end (its
    /// bytes, for a reader that keeps them; `None` when nothing is held).
    /// Call [`Self::finish`] first.
    pub fn rest(&mut self) -> Option<Bytes> {
        let raw = std::mem::take(&mut self.raw);
        (!raw.is_empty()).then(|| Bytes::from(raw))
    }

    /// The stream ended: the events a line ended by its last byte, a CR,
    /// completes (none when it did not end so).
    pub fn finish(&mut self) -> Vec<SseItem> {
        let mut out = Vec::new();
        if std::mem::take(&mut self.after_cr) {
            self.end_line(&[], &mut out);
        }
        out
    }

    /// Reads `chunk`; the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseItem> {
        let mut out = Vec::new();
        let mut rest = chunk;
        if !rest.is_empty() && std::mem::take(&mut self.after_cr) {
            // The CRLF cut between chunks: its LF is the same line ending.
            if let Some((b'\n', tail)) = rest.split_first() {
                self.take(&rest[..1], &mut out);
                rest = tail;
            }
            self.end_line(&[], &mut out);
        }
        while !rest.is_empty() {
            let (segment, taken) = match memchr::memchr2(b'\r', b'\n', rest) {
                Some(at) => {
                    let mut end = at + 1;
                    if rest[at] == b'\r' {
                        match rest.get(end) {
                            Some(b'\n') => end += 1,
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                    (&rest[..at], &rest[..end])
                }
                None => {
                    // A chunk that ends inside a line.
                    self.take(rest, &mut out);
                    if !rest.is_empty() {
                        self.in_line = true;
                    }
                    if !self.skipping {
                        self.line.extend_from_slice(rest);
                    }
                    break;
                }
            };
            rest = &rest[taken.len()..];
            self.take(taken, &mut out);
            if self.after_cr {
                // Completed by the next byte, or the end.
                if !segment.is_empty() {
                    self.in_line = true;
                }
                if !self.skipping {
                    self.line.extend_from_slice(segment);
                }
                break;
            }
            self.end_line(segment, &mut out);
        }
        out
    }

    /// Counts `taken`, bytes of the stream as they came, against the bound,
    /// keeping them when the reader does; an event that passes the bound
    /// starts being skipped (its bytes so far handed on by a relaying
    /// reader).
    fn take(&mut self, taken: &[u8], out: &mut Vec<SseItem>) {
        if self.skipping {
            if self.pass_over {
                out.push(SseItem::Overflow(Bytes::copy_from_slice(taken)));
            }
            return;
        }
        self.raw_len += taken.len();
        if self.raw_len > self.max {
            self.skipping = true;
            let mut held = std::mem::take(&mut self.raw);
            if self.pass_over {
                held.extend_from_slice(taken);
                out.push(SseItem::Overflow(Bytes::from(held)));
            }
            self.raw_len = 0;
            self.line = Vec::new();
            self.data = None;
            self.fields.clear();
        } else if !self.drop_raw {
            self.raw.extend_from_slice(taken);
        }
    }

    /// A line ended: `segment` is its part in the chunk read (after what
    /// [`Self::line`] holds), without its line ending.
    fn end_line(&mut self, segment: &[u8], out: &mut Vec<SseItem>) {
        let blank = !self.in_line && segment.is_empty();
        self.in_line = false;
        if blank {
            self.line.clear();
            if self.skipping {
                self.skipping = false;
                out.push(SseItem::TooLong);
                return;
            }
            self.raw_len = 0;
            let raw = Bytes::from(std::mem::take(&mut self.raw));
            let fields = std::mem::take(&mut self.fields);
            out.push(match self.data.take() {
                Some(data) => SseItem::Event { raw, data, fields },
                None => SseItem::Other(raw),
            });
            return;
        }
        if self.skipping {
            return;
        }
        let held;
        let line = if self.line.is_empty() {
            segment
        } else {
            self.line.extend_from_slice(segment);
            held = std::mem::take(&mut self.line);
            held.as_slice()
        };
        if let Some(value) = line.strip_prefix(b"data") {
            if value.is_empty() || value.first() == Some(&b':') {
                let value = value.strip_prefix(b":").unwrap_or(value);
                let value = value.strip_prefix(b" ").unwrap_or(value);
                let value = String::from_utf8_lossy(value);
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&value);
                    }
                    None => self.data = Some(value.into_owned()),
                }
                return;
            }
        }
        self.fields.push_str(&String::from_utf8_lossy(line));
        self.fields.push('\n');
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

    /// However the stream is cut into chunks (byte by byte, or at every
    /// place in two), the same events come out, with the same bytes; a
    /// reader without raw bytes gives the same data and fields.
    #[test]
    fn sse_events_do_not_depend_on_how_the_stream_is_cut() {
        let stream: &[u8] = b"event: a\r\ndata: 1\r\n\r\n: c\n\ndata\ndata:2\rx\n\r\nid: 9\ndata: \xff3\n\n\r\r\ndata: tail";
        let mut all = SseParser::default();
        let mut whole = all.feed(stream);
        whole.extend(all.finish());
        assert_eq!(whole.len(), 6, "{whole:?}");
        let mut bytes = SseParser::default();
        let mut one: Vec<SseItem> = stream.iter().flat_map(|b| bytes.feed(&[*b])).collect();
        one.extend(bytes.finish());
        assert_eq!(one, whole);
        for cut in 0..=stream.len() {
            let mut p = SseParser::default();
            let mut items = p.feed(&stream[..cut]);
            items.extend(p.feed(&stream[cut..]));
            items.extend(p.finish());
            assert_eq!(items, whole, "cut at {cut}");
            let mut q = SseParser::without_raw();
            let mut lean = q.feed(&stream[..cut]);
            lean.extend(q.feed(&stream[cut..]));
            lean.extend(q.finish());
            let strip = |items: &[SseItem]| -> Vec<(String, String)> {
                items
                    .iter()
                    .filter_map(|i| match i {
                        SseItem::Event { data, fields, .. } => Some((data.clone(), fields.clone())),
                        _ => None,
                    })
                    .collect()
            };
            assert_eq!(strip(&lean), strip(&whole), "cut at {cut}");
            assert!(lean.iter().all(|i| match i {
                SseItem::Event { raw, .. } => raw.is_empty(),
                SseItem::Other(raw) => raw.is_empty(),
                SseItem::TooLong | SseItem::Overflow(_) => false,
            }));
        }
        // A CR alone ends a line, as CRLF and LF do.
        match &whole[2] {
            SseItem::Event { data, raw, fields } => {
                assert_eq!(data, "\n2");
                assert_eq!(fields, "x\n");
                assert_eq!(&raw[..], b"data\ndata:2\rx\n\r\n");
            }
            other => panic!("{other:?}"),
        }
        match &whole[3] {
            SseItem::Event { data, fields, .. } => {
                assert_eq!(data, "\u{fffd}3");
                assert_eq!(fields, "id: 9\n");
            }
            other => panic!("{other:?}"),
        }
        // `\r\r\n`: a blank line ended by a CR, then one by a CRLF.
        assert_eq!(whole[4], SseItem::Other(Bytes::from_static(b"\r")));
        assert_eq!(whole[5], SseItem::Other(Bytes::from_static(b"\r\n")));
    }

    /// A stream whose lines end with a CR alone (valid SSE) is read as one
    /// with LF: its events come as they end, not one later; the last one's
    /// CR, the stream's last byte, completes it at the end.
    #[test]
    fn a_stream_of_lines_ended_by_cr_alone_is_read_event_by_event() {
        let mut p = SseParser::without_raw();
        let events = |items: Vec<SseItem>| -> Vec<String> {
            items
                .into_iter()
                .filter_map(|i| match i {
                    SseItem::Event { data, .. } => Some(data),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(events(p.feed(b"event: a\rdata: 1\r\rdata: 2\r")), ["1"]);
        assert_eq!(
            events(p.feed(b"\r")),
            Vec::<String>::new(),
            "its CR is the chunk's last byte"
        );
        assert_eq!(
            events(p.feed(b"data: 3")),
            ["2"],
            "completed by the next byte"
        );
        assert_eq!(events(p.feed(b"\r\r")), Vec::<String>::new());
        assert_eq!(events(p.finish()), ["3"], "or by the stream's end");
        assert_eq!(events(p.finish()), Vec::<String>::new(), "once");
        // A CRLF cut between its CR and its LF is one line ending.
        let mut q = SseParser::default();
        let mut items = q.feed(b"data: x\r");
        items.extend(q.feed(b"\n\r"));
        items.extend(q.feed(b"\n"));
        assert_eq!(
            items,
            [SseItem::Event {
                raw: Bytes::from_static(b"data: x\r\n\r\n"),
                data: "x".into(),
                fields: String::new(),
            }]
        );
    }

    /// The bound counts an event's bytes whether or not they are kept.
    #[test]
    fn an_event_of_exactly_the_bound_is_read_and_one_more_byte_is_not() {
        for (extra, long) in [(0, false), (1, true)] {
            let mut p = SseParser::without_raw();
            // "data: " + x… + "\n\n" is MAX_BODY + extra bytes.
            let body = vec![b'x'; MAX_BODY - 8 + extra];
            let mut items = p.feed(b"data: ");
            items.extend(p.feed(&body));
            items.extend(p.feed(b"\n\n"));
            assert_eq!(items.len(), 1);
            assert_eq!(matches!(items[0], SseItem::TooLong), long, "extra {extra}");
        }
    }

    /// A relaying reader loses nothing: every byte comes out once, in
    /// order, in events, over-long events' pieces, or what is held at the
    /// end, however the stream is cut and whatever the bound.
    #[test]
    fn a_relaying_reader_hands_on_every_byte() {
        let stream: &[u8] =
            b"data: short\n\ndata: a long event of many bytes\ndata: more\n\n: c\n\ndata: [DONE]";
        for limit in [1, 8, 16, 40, 1000] {
            for cut in 0..=stream.len() {
                let mut p = SseParser::relaying().with_limit(limit);
                let mut items = p.feed(&stream[..cut]);
                items.extend(p.feed(&stream[cut..]));
                let mut out = Vec::new();
                for item in &items {
                    match item {
                        SseItem::Event { raw, .. }
                        | SseItem::Other(raw)
                        | SseItem::Overflow(raw) => out.extend_from_slice(raw),
                        SseItem::TooLong => {}
                    }
                }
                out.extend_from_slice(&p.rest().unwrap_or_default());
                assert_eq!(out, stream, "limit {limit}, cut at {cut}");
                if limit == 16 {
                    let long = items
                        .iter()
                        .filter(|i| matches!(i, SseItem::TooLong))
                        .count();
                    assert_eq!(long, 1, "{items:?}");
                }
            }
        }
        // A reader that is not relaying hands on no over-long bytes.
        let mut p = SseParser::default().with_limit(8);
        assert_eq!(p.feed(b"data: 0123456789\n\n"), [SseItem::TooLong]);
    }
}
