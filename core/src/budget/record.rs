//! The ledger's stored form: [`Ledger::to_record`] encodes it into a
//! fixed-size, versioned, checksummed [`Record`]; [`Ledger::from_record`]
//! reads it back or refuses it (`SPEC E`, durable state).

use core::fmt;

use super::{Ledger, Limit, ToolCount};
use crate::bytes::{Malformed, CRC};
use crate::limits::MAX_TOOLS;
use crate::tools::ToolName;

/// The record's version; a record of another version is refused. Version
/// 2: a capped tool's slot keeps its calls counted, no longer its cap (the
/// cap is the tool table's, issue 11); a version-1 record is refused.
pub const RECORD_VERSION: u8 = 2;
const MAGIC: [u8; 3] = *b"BGL";
const COUNT_BYTES: usize = 1 + crate::limits::MAX_TOOL_NAME_LEN + 4;
const HEADER: usize = 3 + 1 + 1 + 8;
const LIMIT_BYTES: usize = Limit::COUNT * (8 + 8 + 8 + 1);

/// Bytes of the record of a ledger with count capacity `tools`: header,
/// per-limit used / reserved / maximum, the tool counts, a CRC-32.
pub const fn record_len(tools: usize) -> usize {
    HEADER + LIMIT_BYTES + 1 + tools * COUNT_BYTES + 4
}

/// The record of a ledger with the default capacity.
pub const RECORD_LEN: usize = record_len(MAX_TOOLS);

/// A version-1 record's length: each tool slot also kept the tool's cap
/// (a `u32`), which the tool table holds now ([`Ledger::from_record`]
/// still reads it).
const RECORD_V1_LEN: usize = RECORD_LEN + MAX_TOOLS * 4;

/// A ledger's stored form: fixed size (so a flash slot or a database column
/// always holds the same bytes), little-endian, CRC-32 (ISO-HDLC) last.
///
/// Layout, version 2: `"BGL"`, version, count capacity, `started_ms` (u64);
/// per limit in [`Limit::ALL`] order: used, reserved, maximum (u64 each) and
/// a flag (1: the maximum is set); the number of tool counts, then per slot
/// the tool's name length, the name padded with zeros to 64 bytes, and its
/// calls counted (u32); the CRC of everything before it. (Version 1 also
/// kept each tool's cap; caps are configuration now, in the tool table.) Postcard is not used: its
/// variable-length integers make the size depend on the values, and a
/// fixed-size slot is what flash pages and atomic database updates want.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    bytes: [u8; RECORD_LEN],
}

impl Record {
    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Record({} bytes)", self.bytes.len())
    }
}

/// Why stored bytes are not a ledger; the store must refuse to decide
/// (fail closed), never start from an empty ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RecordError {
    /// Not `RECORD_LEN` bytes.
    Length(usize),
    /// Not a budgetgate ledger record.
    Magic,
    /// A record of another version.
    Version(u8),
    /// The checksum does not match: a torn or corrupted write.
    Checksum,
    /// A field is out of its range (a cap name, a count, reserved above what
    /// a limit allows).
    Field(&'static str),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "a ledger record is {RECORD_LEN} bytes, not {n}"),
            Self::Magic => f.write_str("not a budgetgate ledger record"),
            Self::Version(v) => write!(
                f,
                "ledger record version {v}; this build reads version {RECORD_VERSION}"
            ),
            Self::Checksum => f.write_str("ledger record checksum mismatch (torn or corrupted)"),
            Self::Field(what) => write!(f, "ledger record field out of range: {what}"),
        }
    }
}

impl core::error::Error for RecordError {}

/// A cursor writing into a fixed buffer (lengths are checked by `const`
/// sizes, so every write is in bounds; `get_mut` keeps it panic-free).
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        self.at += bytes.len();
    }
}

impl Malformed for RecordError {
    fn length(len: usize) -> Self {
        Self::Length(len)
    }
    fn field(what: &'static str) -> Self {
        Self::Field(what)
    }
}

type Cursor<'a> = crate::bytes::Cursor<'a, RecordError>;

impl Ledger<MAX_TOOLS> {
    /// The ledger as its fixed-size, versioned, checksummed record.
    pub fn to_record(&self) -> Record {
        let mut bytes = [0u8; RECORD_LEN];
        let mut w = Writer {
            buf: &mut bytes,
            at: 0,
        };
        w.put(&MAGIC);
        w.put(&[RECORD_VERSION, MAX_TOOLS as u8]);
        w.put(&self.started_ms.to_le_bytes());
        for limit in Limit::ALL {
            w.put(&self.used(limit).to_le_bytes());
            w.put(&self.reserved(limit).to_le_bytes());
            w.put(&self.max(limit).unwrap_or(0).to_le_bytes());
            w.put(&[u8::from(self.max(limit).is_some())]);
        }
        w.put(&[self.counts.len() as u8]);
        for slot in 0..MAX_TOOLS {
            let mut name = [0u8; crate::limits::MAX_TOOL_NAME_LEN];
            let (len, used) = match self.counts.get(slot) {
                Some(count) => {
                    let n = count.name.as_str().as_bytes();
                    if let Some(dst) = name.get_mut(..n.len()) {
                        dst.copy_from_slice(n);
                    }
                    (n.len() as u8, count.used)
                }
                None => (0, 0),
            };
            w.put(&[len]);
            w.put(&name);
            w.put(&used.to_le_bytes());
        }
        let body = w.at;
        let crc = CRC.checksum(bytes.get(..body).unwrap_or_default());
        if let Some(dst) = bytes.get_mut(body..body + 4) {
            dst.copy_from_slice(&crc.to_le_bytes());
        }
        Record { bytes }
    }

    /// Reads a record written by [`Self::to_record`], or by a build of
    /// version 1 (before the caps moved to the tool table): its caps'
    /// maxima are dropped (the tool table's count now) and their calls kept
    /// as the tools' counts, so a ledger an older build stored carries its
    /// budget over, never less. Refuses another length (for its version),
    /// magic or version, a bad checksum and any field out of range.
    pub fn from_record(bytes: &[u8]) -> Result<Self, RecordError> {
        // Version 1's slots also held the cap (a u32 after the count).
        let v1 = bytes.get(3) == Some(&1);
        let len = if v1 { RECORD_V1_LEN } else { RECORD_LEN };
        if bytes.len() != len {
            return Err(RecordError::Length(bytes.len()));
        }
        let (body, crc) = bytes.split_at(len - 4);
        let mut c = Cursor::new(body, 0);
        if c.take(3)? != MAGIC {
            return Err(RecordError::Magic);
        }
        let version = c.u8()?;
        if version != RECORD_VERSION && !v1 {
            return Err(RecordError::Version(version));
        }
        let mut stored = [0u8; 4];
        stored.copy_from_slice(crc);
        if CRC.checksum(body) != u32::from_le_bytes(stored) {
            return Err(RecordError::Checksum);
        }
        if usize::from(c.u8()?) != MAX_TOOLS {
            return Err(RecordError::Field("cap capacity"));
        }
        let mut ledger = Self::new(c.u64()?);
        for limit in Limit::ALL {
            let (used, reserved, max, set) = (c.u64()?, c.u64()?, c.u64()?, c.u8()?);
            let max = match set {
                0 if max == 0 => None,
                1 => Some(max),
                _ => return Err(RecordError::Field("maximum flag")),
            };
            let i = limit.index();
            if let (Some(u), Some(r), Some(m)) = (
                ledger.used.get_mut(i),
                ledger.reserved.get_mut(i),
                ledger.max.get_mut(i),
            ) {
                *u = used;
                *r = reserved;
                *m = max;
            }
        }
        let count = usize::from(c.u8()?);
        if count > MAX_TOOLS {
            return Err(RecordError::Field("cap count"));
        }
        for slot in 0..MAX_TOOLS {
            let len = usize::from(c.u8()?);
            let name = c.take(crate::limits::MAX_TOOL_NAME_LEN)?;
            let used = c.u32()?;
            let old_cap = if v1 { c.u32()? } else { 0 };
            if slot >= count {
                if len != 0 || used != 0 || old_cap != 0 || name.iter().any(|&b| b != 0) {
                    return Err(RecordError::Field("unused cap slot"));
                }
                continue;
            }
            let text = name
                .get(..len)
                .and_then(|n| core::str::from_utf8(n).ok())
                .ok_or(RecordError::Field("cap name"))?;
            let name = ToolName::new(text).map_err(|_| RecordError::Field("cap name"))?;
            ledger
                .counts
                .push(ToolCount { name, used })
                .map_err(|_| RecordError::Field("cap count"))?;
            if ledger
                .counts
                .iter()
                .filter(|c| c.name.as_str() == text)
                .count()
                > 1
            {
                return Err(RecordError::Field("cap name given twice"));
            }
        }
        Ok(ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::tests::{ledger, BASH};

    #[test]
    fn a_record_decodes_to_the_same_ledger() {
        let mut l = ledger();
        l.set_max(Limit::CostMicros, Some(5_000_000));
        l.record(Limit::Tokens, 123);
        let _held = l.try_reserve(Limit::ToolCalls, 1).unwrap();
        l.try_count_tool("Bash", BASH).unwrap();
        let record = l.to_record();
        assert_eq!(record.as_bytes().len(), RECORD_LEN);
        assert_eq!(Ledger::from_record(record.as_bytes()), Ok(l.clone()));
        let empty: Ledger = Ledger::new(0);
        assert_eq!(Ledger::from_record(empty.to_record().as_bytes()), Ok(empty));
    }

    #[test]
    fn a_damaged_record_is_refused_never_read_as_empty() {
        let good = ledger().to_record();
        let bytes = good.as_bytes();
        assert_eq!(
            Ledger::from_record(&bytes[..10]),
            Err(RecordError::Length(10))
        );
        // Every single-bit flip is caught (CRC-32 detects all of them).
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.to_vec();
                bad[at] ^= 1 << bit;
                assert!(Ledger::from_record(&bad).is_err(), "flip at {at}.{bit}");
            }
        }
        let mut other = bytes.to_vec();
        other[3] = RECORD_VERSION + 1;
        assert_eq!(
            Ledger::from_record(&other),
            Err(RecordError::Version(RECORD_VERSION + 1))
        );
        let zeros = [0u8; RECORD_LEN];
        assert_eq!(Ledger::from_record(&zeros), Err(RecordError::Magic));
    }

    #[test]
    fn a_well_checksummed_record_with_a_bad_field_is_refused() {
        let good = ledger().to_record();
        let mut bad = good.as_bytes().to_vec();
        // The first cap's name length: longer than a name can be.
        let at = HEADER + LIMIT_BYTES + 1;
        bad[at] = 200;
        let body = RECORD_LEN - 4;
        let crc = CRC.checksum(&bad[..body]);
        bad[body..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Ledger::from_record(&bad),
            Err(RecordError::Field("cap name"))
        );
    }

    /// A record whose CRC is right but whose fields are not a ledger (forged,
    /// or written by a faulty build) is refused field by field.
    #[test]
    fn every_field_of_a_forged_record_is_checked() {
        let seal = |mut bytes: std::vec::Vec<u8>| {
            let body = RECORD_LEN - 4;
            let crc = CRC.checksum(&bytes[..body]);
            bytes[body..].copy_from_slice(&crc.to_le_bytes());
            bytes
        };
        let good = ledger().to_record().as_bytes().to_vec();
        let limit_at = |i: usize| HEADER + i * (8 + 8 + 8 + 1);
        let caps_at = HEADER + LIMIT_BYTES;
        let slot_at = |i: usize| caps_at + 1 + i * COUNT_BYTES;
        let cases: std::vec::Vec<(&str, std::vec::Vec<u8>)> = std::vec![
            ("maximum flag", {
                // No maximum, yet a maximum written.
                let mut b = good.clone();
                let flag = limit_at(0) + 24;
                b[flag] = 0;
                b[limit_at(0) + 16] = 1;
                b
            }),
            ("maximum flag", {
                let mut b = good.clone();
                b[limit_at(0) + 24] = 2;
                b
            }),
            ("cap count", {
                let mut b = good.clone();
                b[caps_at] = (MAX_TOOLS + 1) as u8;
                b
            }),
            ("unused cap slot", {
                // Slot 1 is unused (one cap): any byte in it is refused.
                let mut b = good.clone();
                b[slot_at(1) + 1 + crate::limits::MAX_TOOL_NAME_LEN + 2] = 1;
                b
            }),
            ("unused cap slot", {
                let mut b = good.clone();
                b[slot_at(1)] = 1;
                b
            }),
            ("unused cap slot", {
                let mut b = good.clone();
                b[slot_at(1) + 3] = b'x';
                b
            }),
            ("unused cap slot", {
                let mut b = good.clone();
                b[slot_at(1) + 1 + crate::limits::MAX_TOOL_NAME_LEN + 3] = 1;
                b
            }),
            ("cap name given twice", {
                // Slot 1 a copy of slot 0, and two caps counted.
                let mut b = good.clone();
                let (s0, s1) = (slot_at(0), slot_at(1));
                let slot: std::vec::Vec<u8> = b[s0..s0 + COUNT_BYTES].to_vec();
                b[s1..s1 + COUNT_BYTES].copy_from_slice(&slot);
                b[caps_at] = 2;
                b
            }),
            ("cap capacity", {
                let mut b = good.clone();
                b[4] = (MAX_TOOLS + 1) as u8;
                b
            }),
        ];
        for (what, bytes) in cases {
            assert_eq!(
                Ledger::from_record(&seal(bytes)),
                Err(RecordError::Field(what)),
                "{what}"
            );
        }
        // The unforged record still reads, and shows its size in Debug.
        assert!(Ledger::from_record(&good).is_ok());
        assert_eq!(
            std::format!("{:?}", ledger().to_record()),
            std::format!("Record({RECORD_LEN} bytes)")
        );
    }

    /// Issue 11, `SPEC E` (a stored budget is never lost): a record of
    /// version 1, which kept each tool's cap beside its count, is read:
    /// the calls counted are kept, the cap (the tool table's now) dropped;
    /// it is checked as strictly as a version-2 record (its own length,
    /// checksum, unused slots empty), and a record of another version is
    /// refused.
    #[test]
    fn a_version_1_record_is_read_with_its_counts() {
        // A version-1 record: header, limits (tool calls: 3 used of 5),
        // one cap (Bash: 2 calls of 4) and seven empty 73-byte slots (name
        // length, name, used, max), then its CRC.
        let v1 = |caps: &[(&str, u32, u32)], tail: u32| {
            let mut v = std::vec::Vec::new();
            v.extend_from_slice(b"BGL");
            v.extend_from_slice(&[1, MAX_TOOLS as u8]);
            v.extend_from_slice(&7u64.to_le_bytes());
            for limit in Limit::ALL {
                let (used, max) = if limit == Limit::ToolCalls {
                    (3u64, Some(5u64))
                } else {
                    (0, None)
                };
                v.extend_from_slice(&used.to_le_bytes());
                v.extend_from_slice(&0u64.to_le_bytes());
                v.extend_from_slice(&max.unwrap_or(0).to_le_bytes());
                v.push(u8::from(max.is_some()));
            }
            v.push(caps.len() as u8);
            for slot in 0..MAX_TOOLS {
                let (name, used, max) = caps.get(slot).copied().unwrap_or(("", 0, 0));
                let mut padded = [0u8; 64];
                padded[..name.len()].copy_from_slice(name.as_bytes());
                v.push(name.len() as u8);
                v.extend_from_slice(&padded);
                v.extend_from_slice(&used.to_le_bytes());
                let max = if slot + 1 == MAX_TOOLS { tail } else { max };
                v.extend_from_slice(&max.to_le_bytes());
            }
            let crc = CRC.checksum(&v);
            v.extend_from_slice(&crc.to_le_bytes());
            v
        };
        let old = v1(&[("Bash", 2, 4)], 0);
        assert_eq!(old.len(), RECORD_V1_LEN);
        let back = Ledger::from_record(&old).unwrap();
        assert_eq!(back.used(Limit::ToolCalls), 3);
        assert_eq!(back.max(Limit::ToolCalls), Some(5));
        assert_eq!(back.started_ms, 7);
        assert_eq!(
            back.counts()
                .iter()
                .map(|c| (c.name.as_str(), c.used))
                .collect::<std::vec::Vec<_>>(),
            [("Bash", 2)]
        );
        // Stored again, it is a version-2 record with the same figures.
        let again = back.to_record();
        assert_eq!(again.as_bytes()[3], RECORD_VERSION);
        assert_eq!(Ledger::from_record(again.as_bytes()), Ok(back));
        // As strict as version 2: a cap in an unused slot, a bad checksum,
        // the other version's length.
        assert_eq!(
            Ledger::from_record(&v1(&[("Bash", 2, 4)], 9)),
            Err(RecordError::Field("unused cap slot"))
        );
        let mut flipped = old.clone();
        flipped[20] ^= 1;
        assert_eq!(Ledger::from_record(&flipped), Err(RecordError::Checksum));
        assert_eq!(
            Ledger::from_record(&old[..RECORD_LEN]),
            Err(RecordError::Length(RECORD_LEN))
        );
        // Any other version is refused, whatever its length.
        for version in [0u8, 3, 9] {
            let mut other = ledger().to_record().as_bytes().to_vec();
            other[3] = version;
            assert_eq!(
                Ledger::from_record(&other),
                Err(RecordError::Version(version))
            );
        }
        assert_eq!(RECORD_VERSION, 2);
    }
}
