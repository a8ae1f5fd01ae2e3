//! A long recording's responses kept in a temporary file, not in memory
//! (issue 14, memory): a Claude Code log of [`STREAM_FROM_BYTES`] or more
//! is read line by line, and each response, once no later line can change
//! it, is written to an unnamed temporary file in a compact binary form. The
//! replay then reads them back in order, once to decide and once to write
//! the report. What stays in memory per response is a few words of index
//! (where its record starts, the turns of its `message.id`) and the results
//! by their ids' hashes: a gigabyte of short lines (half a million
//! responses) no longer holds each response's ids, names and strings until
//! the report is written.
//!
//! [`STREAM_FROM_BYTES`]: super::STREAM_FROM_BYTES

use std::borrow::Cow;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{self, Write};

use budgetgate_core::engine::loops::Outcome;
use budgetgate_core::turn::{ArgsFingerprint, TokenUsage};

use super::session::{RecordedArguments, RecordedCall, RecordedTurn, UsageIteration};
use crate::gate::digest::TextDigest;

/// Records are written to the file in batches of about this many bytes.
const BATCH: usize = 64 << 10;

/// The responses of a session written to a temporary file, in order, with
/// what applies to every one of them when it is read back: the recorded
/// results of the calls and the instant the times count from.
pub struct SpilledTurns {
    file: File,
    /// Where each record starts, and the file's end last.
    offsets: Vec<u64>,
    /// The results of the calls, by call id.
    results: HashedResults,
    /// Subtracted from each response's `requested_at_ms` (kept absolute in
    /// the file).
    origin: Option<u64>,
}

impl std::fmt::Debug for SpilledTurns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpilledTurns")
            .field("turns", &self.len())
            .field("bytes", &self.offsets.last().copied().unwrap_or(0))
            .finish_non_exhaustive()
    }
}

/// Two spills are the same only if they are one: their responses are not
/// compared (a session read into memory compares its turns).
impl PartialEq for SpilledTurns {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl SpilledTurns {
    /// How many responses.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The responses in order, each read back as the reader made it, with
    /// its calls' results and its time counted from the origin.
    pub fn iter(&self) -> impl Iterator<Item = io::Result<RecordedTurn>> + '_ {
        let mut next = 0usize;
        let mut chunk: Vec<u8> = Vec::new();
        // The records of `chunk`: `[chunk_first, chunk_end)`.
        let (mut chunk_first, mut chunk_end) = (0usize, 0usize);
        std::iter::from_fn(move || {
            if next >= self.len() {
                return None;
            }
            if next >= chunk_end {
                // As many whole records as fit in a batch, one at least.
                let start = self.offsets[next];
                let mut end = next + 1;
                while end < self.len() && self.offsets[end + 1] - start <= BATCH as u64 {
                    end += 1;
                }
                let bytes = usize::try_from(self.offsets[end] - start).unwrap_or(usize::MAX);
                chunk.resize(bytes, 0);
                if let Err(e) = read_exact_at(&self.file, &mut chunk, start) {
                    next = self.len();
                    return Some(Err(e));
                }
                (chunk_first, chunk_end) = (next, end);
            }
            let base = self.offsets[chunk_first];
            let at = usize::try_from(self.offsets[next] - base).unwrap_or(usize::MAX);
            let to = usize::try_from(self.offsets[next + 1] - base).unwrap_or(usize::MAX);
            next += 1;
            Some(
                chunk
                    .get(at..to)
                    .ok_or_else(corrupt)
                    .and_then(decode)
                    .map(|turn| self.finished(turn)),
            )
        })
    }

    /// A response read back with what applies to all of them.
    fn finished(&self, mut turn: RecordedTurn) -> RecordedTurn {
        for call in &mut turn.calls {
            call.recorded = self.results.get(&call.id);
        }
        if let Some(origin) = self.origin {
            turn.requested_at_ms = turn.requested_at_ms.map(|t| t.saturating_sub(origin));
        }
        turn
    }
}

/// Writes the responses a reader is done with, and reads any of them back
/// while it reads (as it made them: no results, absolute times).
pub struct SpillWriter {
    file: File,
    offsets: Vec<u64>,
    /// Records not yet written to the file, from `written`.
    pending: Vec<u8>,
    written: u64,
}

impl SpillWriter {
    /// A writer to a new unnamed temporary file (gone when dropped).
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            file: tempfile::tempfile()?,
            offsets: vec![0],
            pending: Vec::with_capacity(BATCH + (BATCH >> 2)),
            written: 0,
        })
    }

    /// How many responses are written.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Writes the next response.
    pub fn push(&mut self, turn: &RecordedTurn) -> io::Result<()> {
        encode(turn, &mut self.pending);
        self.offsets.push(self.written + self.pending.len() as u64);
        if self.pending.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.write_all(&self.pending)?;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// The response at `index` (below [`len`](Self::len)) as it was
    /// written.
    pub fn get(&self, index: usize) -> io::Result<RecordedTurn> {
        let (start, end) = match (self.offsets.get(index), self.offsets.get(index + 1)) {
            (Some(&start), Some(&end)) => (start, end),
            _ => return Err(corrupt()),
        };
        if start >= self.written {
            // Records are flushed whole: this one is still pending.
            let at = usize::try_from(start - self.written).unwrap_or(usize::MAX);
            let to = usize::try_from(end - self.written).unwrap_or(usize::MAX);
            return self
                .pending
                .get(at..to)
                .ok_or_else(corrupt)
                .and_then(decode);
        }
        let mut bytes = vec![0; usize::try_from(end - start).unwrap_or(usize::MAX)];
        read_exact_at(&self.file, &mut bytes, start)?;
        decode(&bytes)
    }

    /// The written responses, to be read back with `results` and `origin`.
    pub fn finish(
        mut self,
        results: HashedResults,
        origin: Option<u64>,
    ) -> io::Result<SpilledTurns> {
        self.flush()?;
        self.offsets.shrink_to_fit();
        Ok(SpilledTurns {
            file: self.file,
            offsets: self.offsets,
            results,
            origin,
        })
    }
}

/// The recorded results of a long log's calls: whether each was an error
/// and its content's digest (loop detection), by its call id, the last
/// result recorded for an id winning (as a map keyed by the id gives).
/// Each is kept as 24 bytes: 88 bits of a keyed 128-bit hash of the id (two
/// SipHash keys drawn for this process), the result's place in the log and
/// the flag, and the digest (by place); not the id itself. Two ids of
/// one such hash are about as likely as two arguments of one
/// [`ArgsFingerprint`] (one in 10^15 for a million results), which the gate
/// counts repeats by already.
#[derive(Default)]
pub struct HashedResults {
    keys: (std::hash::RandomState, std::hash::RandomState),
    /// `hash << 40 | place << 1 | error`; sorted by [`finish`](Self::finish).
    entries: Vec<u128>,
    /// Each result's content digest, by its place.
    digests: Vec<u64>,
    sorted: bool,
}

impl HashedResults {
    const PLACE_BITS: u32 = 39;

    fn hash(&self, id: &str) -> u128 {
        let high = u128::from(self.keys.0.hash_one(id));
        let low = u128::from(self.keys.1.hash_one(id));
        // The top 88 bits.
        ((high << 64) | low) >> (Self::PLACE_BITS + 1)
    }

    /// Records a result for `id`.
    pub fn insert(&mut self, id: &str, outcome: Outcome) {
        let error = outcome.error;
        // Past 2^39 results the places stop growing: results of one id
        // beyond it keep no order among themselves (never reached: a log of
        // that many results is far beyond a terabyte).
        let place = (self.entries.len() as u128).min((1 << Self::PLACE_BITS) - 1);
        self.entries
            .push(self.hash(id) << (Self::PLACE_BITS + 1) | place << 1 | u128::from(error));
        self.digests.push(outcome.digest);
        self.sorted = false;
    }

    /// Sorts the results by id, keeping only the last of each id. Needed
    /// before [`get`](Self::get).
    pub fn finish(&mut self) {
        self.entries.sort_unstable();
        let shift = Self::PLACE_BITS + 1;
        // Sorted by hash, then place: the last of each run is the latest.
        let mut kept = 0;
        for at in 0..self.entries.len() {
            let entry = self.entries[at];
            let last_of_run = self
                .entries
                .get(at + 1)
                .is_none_or(|next| next >> shift != entry >> shift);
            if last_of_run {
                self.entries[kept] = entry;
                kept += 1;
            }
        }
        self.entries.truncate(kept);
        self.entries.shrink_to_fit();
        self.sorted = true;
    }

    /// The last result recorded for `id`, `None` if none is. Only after
    /// [`finish`](Self::finish).
    pub fn get(&self, id: &str) -> Option<Outcome> {
        debug_assert!(self.sorted);
        let shift = Self::PLACE_BITS + 1;
        let hash = self.hash(id);
        let at = self.entries.partition_point(|e| e >> shift < hash);
        self.entries
            .get(at)
            .filter(|e| *e >> shift == hash)
            .map(|e| {
                let place = (e >> 1) & ((1 << Self::PLACE_BITS) - 1);
                Outcome {
                    digest: usize::try_from(place)
                        .ok()
                        .and_then(|p| self.digests.get(p))
                        .copied()
                        .unwrap_or(0),
                    error: e & 1 == 1,
                }
            })
    }
}

fn corrupt() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "a response read back from the temporary file is not the one written",
    )
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut at: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, at) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(not(any(unix, windows)))]
fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    // One reader at a time on these platforms: the writer appends at the
    // end again after.
    let mut file = file;
    file.seek(SeekFrom::Start(at))?;
    let read = file.read_exact(buf);
    file.seek(SeekFrom::End(0))?;
    read
}

// ------------------------------------------------------------ the records

fn put_u64(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
    }
}

fn put_opt_u64(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        None => out.push(0),
        Some(n) => {
            out.push(1);
            put_u64(out, n);
        }
    }
}

fn put_usage(out: &mut Vec<u8>, u: &TokenUsage) {
    put_u64(out, u.input_tokens);
    put_u64(out, u.output_tokens);
    put_u64(out, u.cache_read_input_tokens);
    put_u64(out, u.cache_creation_input_tokens);
}

fn put_fingerprint(out: &mut Vec<u8>, f: ArgsFingerprint) {
    out.extend_from_slice(&f.as_u128().to_le_bytes());
}

/// Appends `turn`'s record to `out`: every field, so that reading it back
/// gives the same turn.
fn encode(turn: &RecordedTurn, out: &mut Vec<u8>) {
    put_opt_str(out, turn.message_id.as_deref());
    put_opt_str(out, turn.stop_reason.as_deref());
    match &turn.usage {
        None => out.push(0),
        Some(u) => {
            out.push(1);
            put_usage(out, u);
        }
    }
    put_u64(out, turn.calls.len() as u64);
    for call in &turn.calls {
        put_str(out, &call.id);
        put_str(out, &call.name);
        match call.arguments {
            RecordedArguments::Unreadable => out.push(0),
            RecordedArguments::TooDeep => out.push(1),
            RecordedArguments::Read(f) => {
                out.push(2);
                put_fingerprint(out, f);
            }
            RecordedArguments::ReadWithNegativeZero {
                fingerprint,
                unsigned_zeros,
            } => {
                out.push(3);
                put_fingerprint(out, fingerprint);
                put_fingerprint(out, unsigned_zeros);
            }
        }
        match call.recorded {
            None => out.push(0),
            Some(o) => {
                out.push(if o.error { 2 } else { 1 });
                out.extend_from_slice(&o.digest.to_le_bytes());
            }
        }
    }
    put_u64(out, turn.text_chars as u64);
    put_u64(out, turn.text_digest.get());
    put_opt_u64(out, turn.requested_at_ms);
    put_opt_u64(out, turn.max_tokens);
    put_u64(out, turn.iterations.len() as u64);
    for iteration in &turn.iterations {
        put_str(out, &iteration.kind);
        put_usage(out, &iteration.usage);
    }
    put_opt_str(out, turn.cut_off.as_deref());
    put_u64(out, turn.server_calls.len() as u64);
    for name in &turn.server_calls {
        put_str(out, name);
    }
    put_opt_str(out, turn.agent.as_deref());
    put_opt_str(out, turn.model.as_deref());
}

/// Reads a record [`encode`] wrote.
struct Record<'a>(&'a [u8]);

impl Record<'_> {
    fn byte(&mut self) -> io::Result<u8> {
        let (&b, rest) = self.0.split_first().ok_or_else(corrupt)?;
        self.0 = rest;
        Ok(b)
    }

    fn u64(&mut self) -> io::Result<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(n);
            }
        }
        Err(corrupt())
    }

    fn len(&mut self) -> io::Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| corrupt())
    }

    fn str(&mut self) -> io::Result<String> {
        let len = self.len()?;
        if len > self.0.len() {
            return Err(corrupt());
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(bytes.to_vec()).map_err(|_| corrupt())
    }

    fn opt<T>(&mut self, read: impl FnOnce(&mut Self) -> io::Result<T>) -> io::Result<Option<T>> {
        match self.byte()? {
            0 => Ok(None),
            1 => read(self).map(Some),
            _ => Err(corrupt()),
        }
    }

    fn usage(&mut self) -> io::Result<TokenUsage> {
        Ok(TokenUsage {
            input_tokens: self.u64()?,
            output_tokens: self.u64()?,
            cache_read_input_tokens: self.u64()?,
            cache_creation_input_tokens: self.u64()?,
        })
    }

    fn fingerprint(&mut self) -> io::Result<ArgsFingerprint> {
        let Some((bytes, rest)) = self.0.split_first_chunk::<16>() else {
            return Err(corrupt());
        };
        self.0 = rest;
        Ok(ArgsFingerprint::from_u128(u128::from_le_bytes(*bytes)))
    }

    /// A count of items, each at least one byte: never more than are left.
    fn count(&mut self) -> io::Result<usize> {
        let n = self.len()?;
        if n > self.0.len() {
            return Err(corrupt());
        }
        Ok(n)
    }
}

fn decode(bytes: &[u8]) -> io::Result<RecordedTurn> {
    let mut r = Record(bytes);
    let message_id = r.opt(Record::str)?;
    let stop_reason = r.opt(Record::str)?;
    let usage = r.opt(Record::usage)?;
    let count = r.count()?;
    let mut calls = Vec::with_capacity(count);
    for _ in 0..count {
        let id = r.str()?;
        let name = r.str()?;
        let arguments = match r.byte()? {
            0 => RecordedArguments::Unreadable,
            1 => RecordedArguments::TooDeep,
            2 => RecordedArguments::Read(r.fingerprint()?),
            3 => RecordedArguments::ReadWithNegativeZero {
                fingerprint: r.fingerprint()?,
                unsigned_zeros: r.fingerprint()?,
            },
            _ => return Err(corrupt()),
        };
        let recorded = match r.byte()? {
            0 => None,
            tag @ (1 | 2) => {
                let mut digest = [0u8; 8];
                for b in &mut digest {
                    *b = r.byte()?;
                }
                Some(Outcome {
                    digest: u64::from_le_bytes(digest),
                    error: tag == 2,
                })
            }
            _ => return Err(corrupt()),
        };
        calls.push(RecordedCall {
            id,
            name,
            arguments,
            recorded,
        });
    }
    let text_chars = r.len()?;
    let text_digest = TextDigest::from_raw(r.u64()?);
    let requested_at_ms = r.opt(Record::u64)?;
    let max_tokens = r.opt(Record::u64)?;
    let iterations = (0..r.count()?)
        .map(|_| {
            Ok(UsageIteration {
                kind: r.str()?,
                usage: r.usage()?,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    let cut_off = r.opt(Record::str)?;
    let server_calls = (0..r.count()?)
        .map(|_| r.str())
        .collect::<io::Result<Vec<_>>>()?;
    let agent = r.opt(Record::str)?;
    let model = r.opt(Record::str)?;
    if !r.0.is_empty() {
        return Err(corrupt());
    }
    Ok(RecordedTurn {
        message_id,
        stop_reason,
        usage,
        calls,
        text_chars,
        text_digest,
        requested_at_ms,
        max_tokens,
        iterations,
        cut_off,
        server_calls,
        agent,
        model,
    })
}

/// The turns a caller sees: borrowed from memory or read back.
pub type TurnRef<'a> = Cow<'a, RecordedTurn>;

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(n: u128) -> ArgsFingerprint {
        ArgsFingerprint::from_u128(n)
    }

    /// A result of call `id`, its digest from the id (every digest bit
    /// pattern kept through the record).
    fn result(id: &str, error: bool) -> Outcome {
        Outcome::of(id.as_bytes(), error)
    }

    /// Every field of a response, each kind of kept arguments among its
    /// calls, and one with nothing but defaults.
    fn turns() -> Vec<RecordedTurn> {
        let call = |id: &str, arguments, recorded: Option<bool>| RecordedCall {
            id: id.into(),
            name: "Bäsh".into(),
            arguments,
            recorded: recorded.map(|error| result(id, error)),
        };
        vec![
            RecordedTurn {
                message_id: Some("msg_1".into()),
                stop_reason: Some("tool_use".into()),
                usage: Some(TokenUsage {
                    input_tokens: u64::MAX,
                    output_tokens: 0,
                    cache_read_input_tokens: 127,
                    cache_creation_input_tokens: 128,
                }),
                calls: vec![
                    call("a", RecordedArguments::Unreadable, None),
                    call("b", RecordedArguments::TooDeep, Some(false)),
                    call(
                        "",
                        RecordedArguments::Read(fingerprint(u128::MAX)),
                        Some(true),
                    ),
                    call(
                        "d",
                        RecordedArguments::ReadWithNegativeZero {
                            fingerprint: fingerprint(1),
                            unsigned_zeros: fingerprint(2 << 100),
                        },
                        None,
                    ),
                ],
                text_chars: 12_345,
                text_digest: TextDigest::of("the answer"),
                requested_at_ms: Some(1_767_607_200_000),
                max_tokens: Some(0),
                iterations: vec![UsageIteration {
                    kind: "compaction".into(),
                    usage: TokenUsage {
                        input_tokens: 55_000,
                        ..TokenUsage::ZERO
                    },
                }],
                cut_off: Some("the stream ended without message_stop".into()),
                server_calls: vec!["web_search".into(), String::new()],
                agent: Some("agent-x".into()),
                model: Some("claude-example-1".into()),
            },
            RecordedTurn::default(),
        ]
    }

    /// Issue 14 (memory): a response written to the temporary file is read
    /// back as it was, every field, whether it is still in the writer's
    /// batch or already in the file; read back in order, each call gets the
    /// results' answer for its id and each time is counted from the origin.
    #[test]
    fn a_spilled_response_reads_back_as_it_was_written() {
        let mut writer = SpillWriter::new().unwrap();
        let turns = turns();
        // Past one batch, so that some are in the file and some pending.
        let many = BATCH / 100;
        for at in 0..many {
            writer.push(&turns[at % 2]).unwrap();
        }
        assert!(writer.written > 0 && !writer.pending.is_empty());
        for at in [0, 1, many - 2, many - 1] {
            assert_eq!(writer.get(at).unwrap(), turns[at % 2], "{at}");
        }
        assert!(writer.get(many).is_err());
        let mut results = HashedResults::default();
        results.insert("a", result("a", true));
        results.insert("b", result("b", true));
        results.insert("a", result("a", false));
        results.finish();
        let spilled = writer.finish(results, Some(1_767_607_000_000)).unwrap();
        assert_eq!(spilled.len(), many);
        let mut expected = turns;
        expected[0].requested_at_ms = Some(200_000);
        for (call, recorded) in
            expected[0]
                .calls
                .iter_mut()
                .zip([Some(false), Some(true), None, None])
        {
            call.recorded = recorded.map(|error| result(&call.id, error));
        }
        let read: Vec<RecordedTurn> = spilled.iter().map(Result::unwrap).collect();
        assert_eq!(read.len(), many);
        for (at, turn) in read.iter().enumerate() {
            assert_eq!(turn, &expected[at % 2], "{at}");
        }
    }

    /// Issue 14 (memory): the results kept by their ids' hashes answer as a
    /// map from the id did: the last result of an id wins, whatever came
    /// between, and an id without one has none.
    #[test]
    fn hashed_results_answer_as_the_map_of_ids_did() {
        let mut hashed = HashedResults::default();
        let mut map = std::collections::HashMap::new();
        for at in 0..10_000u32 {
            let id = format!("toolu_{}", at % 3_000);
            let outcome = Outcome::of(format!("{at}").as_bytes(), at % 7 == 0);
            hashed.insert(&id, outcome);
            map.insert(id, outcome);
        }
        hashed.finish();
        assert_eq!(hashed.entries.len(), 3_000);
        for at in 0..4_000 {
            let id = format!("toolu_{at}");
            assert_eq!(hashed.get(&id), map.get(&id).copied(), "{id}");
        }
        assert_eq!(hashed.get(""), None);
    }
}
