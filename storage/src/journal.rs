//! The device run and its audit log in flash (`SPEC E`, durable state;
//! issue 15): what the device gate hands to
//! `budgetgate_core::device::Actuators::journal` after every decision.
//!
//! Two ranges of NOR flash, each its own `sequential-storage` structure:
//! * the run record ([`budgetgate_core::resume::RunView`], at most
//!   [`RUN_RECORD_MAX`] bytes) as the one item of a map: every save is a new
//!   CRC-protected item, the newest complete one is what [`FlashJournal::load`]
//!   finds, and pages are erased in turn only when full;
//! * the audit log, a `sequential-storage` queue of
//!   [`budgetgate_core::resume::AuditEntry`] items (at most
//!   [`AUDIT_ENTRY_MAX`] bytes each), append-only: nothing pops it. When it is
//!   full, the page holding the oldest entries is erased to make room (a
//!   push with `allow_overwrite_old_data`), so the log keeps the newest
//!   entries — at least all but one page of them — and says so by starting
//!   later.
//!
//! [`FlashJournal::save`] writes the record first, then the entry. A power
//! cut at any byte leaves the record of before or after the decision (the
//! map's guarantee, and the record's own CRC), and the log either without the
//! decision's entry or with it whole; a cut between the two leaves the new
//! record and no entry for it — never an entry for a decision whose record
//! was not stored. `tests::a_power_cut_at_every_byte_of_a_save` cuts at every
//! byte of every write of the first saves and checks exactly that.
//!
//! The map and the log take a flash each: a board splits its flash into two
//! handles over disjoint ranges (the firmware's file-backed flash does), or
//! gives two chips.

use core::ops::Range;

use budgetgate_core::resume::{
    self, AuditEntry, AuditRecord, ResumeError, RunView, AUDIT_ENTRY_MAX, RUN_RECORD_MAX,
};
use embedded_storage_async::nor_flash::NorFlash;
use sequential_storage::cache::{Cache, Uncached};
use sequential_storage::map::{MapConfig, MapStorage, SerializationError, Value};
use sequential_storage::queue::{QueueConfig, QueueStorage};

use crate::StoreError;

/// The map key the run record is stored under.
const RUN_KEY: u8 = 1;

/// The map's working buffer: the key and the longest record, rounded up to
/// the largest flash word `sequential-storage` supports (32 bytes).
const RUN_BUFFER: usize = (1 + RUN_RECORD_MAX).div_ceil(32) * 32;

/// The log's working buffer for reading: the longest entry, rounded up.
const ENTRY_BUFFER: usize = AUDIT_ENTRY_MAX.div_ceil(32) * 32;

/// A run view as a map value: encoded straight into the map's buffer.
struct Stored<'a, 'b>(&'a RunView<'b>);

impl<'d> Value<'d> for Stored<'_, '_> {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        self.0.encode(buffer).map_err(|e| match e {
            ResumeError::Length(_) => SerializationError::BufferTooSmall,
            _ => SerializationError::InvalidData,
        })
    }

    fn deserialize_from(_buffer: &'d [u8]) -> Result<(Self, usize), SerializationError> {
        // Read back as bytes (`&[u8]`), never as a view.
        Err(SerializationError::InvalidFormat)
    }
}

/// The run record and the audit log in two ranges of NOR flash.
pub struct FlashJournal<M: NorFlash, L: NorFlash> {
    map: MapStorage<u8, M, Cache<Uncached, Uncached, Uncached, u8>>,
    log: QueueStorage<L, Cache<Uncached, Uncached, Uncached, ()>>,
    buffer: [u8; RUN_BUFFER],
}

impl<M: NorFlash, L: NorFlash> FlashJournal<M, L> {
    /// The journal: the run record over `map_range` of `map_flash`, the
    /// audit log over `log_range` of `log_flash` (each page-aligned, at
    /// least two pages, pages of at least 2 KiB so that a record fits one;
    /// nothing outside them is touched).
    pub fn new(
        map_flash: M,
        map_range: Range<u32>,
        log_flash: L,
        log_range: Range<u32>,
    ) -> Result<Self, StoreError<M::Error>> {
        if M::ERASE_SIZE < 2 * RUN_BUFFER {
            return Err(StoreError::Config);
        }
        let map = MapConfig::try_new(map_range).map_err(|_| StoreError::Config)?;
        let log = QueueConfig::try_new(log_range).map_err(|_| StoreError::Config)?;
        Ok(Self {
            map: MapStorage::new(map_flash, map, Cache::new_uncached()),
            log: QueueStorage::new(log_flash, log, Cache::new_uncached()),
            buffer: [0; RUN_BUFFER],
        })
    }

    /// Stores `run` as the newest record, then appends `entry` to the log
    /// (dropping the oldest page of entries if the log is full). Either
    /// error means the decision must not take effect (fail closed).
    pub async fn save(
        &mut self,
        run: &RunView<'_>,
        entry: &AuditEntry<'_>,
    ) -> Result<(), JournalError<M::Error, L::Error>> {
        self.map
            .store_item(&mut self.buffer, &RUN_KEY, &Stored(run))
            .await
            .map_err(|e| JournalError::Run(StoreError::Flash(e)))?;
        let mut bytes = [0u8; AUDIT_ENTRY_MAX];
        let n = entry
            .encode(&mut bytes)
            .map_err(|e| JournalError::Log(StoreError::Run(e)))?;
        self.log
            .push(bytes.get(..n).unwrap_or_default(), true)
            .await
            .map_err(|e| JournalError::Log(StoreError::Flash(e)))
    }

    /// The newest stored run record, checked ([`resume::decode`]); `None`
    /// on a flash that never held one. A record that does not decode is an
    /// error, never a fresh run.
    pub async fn load(&mut self) -> Result<Option<&[u8]>, StoreError<M::Error>> {
        let bytes: Option<&[u8]> = self
            .map
            .fetch_item(&mut self.buffer, &RUN_KEY)
            .await
            .map_err(StoreError::Flash)?;
        match bytes {
            None => Ok(None),
            Some(b) => {
                resume::decode(b).map_err(StoreError::Run)?;
                Ok(Some(b))
            }
        }
    }

    /// Reads the audit log, oldest entry first, handing each to `each`;
    /// returns how many were read. An entry that does not decode stops the
    /// read with its error (the flash items are CRC-checked, so that is a
    /// log written by another version).
    pub async fn audit(
        &mut self,
        mut each: impl FnMut(&AuditRecord),
    ) -> Result<usize, StoreError<L::Error>> {
        let mut buf = [0u8; ENTRY_BUFFER];
        let mut iter = self.log.iter().await.map_err(StoreError::Flash)?;
        let mut count = 0;
        while let Some(entry) = iter.next(&mut buf).await.map_err(StoreError::Flash)? {
            let record = AuditRecord::decode(&entry[..]).map_err(StoreError::Run)?;
            each(&record);
            count += 1;
        }
        Ok(count)
    }

    /// Gives the two flashes back.
    pub fn into_flash(self) -> (M, L) {
        (self.map.destroy().0, self.log.destroy().0)
    }
}

/// Why [`FlashJournal::save`] failed: the run record (`M`'s error) or the
/// audit entry (`L`'s) could not be stored.
#[derive(Debug)]
pub enum JournalError<M, L> {
    /// The run record was not stored: the flash holds the one before.
    Run(StoreError<M>),
    /// The record was stored, its audit entry was not.
    Log(StoreError<L>),
}

impl<M: core::fmt::Debug, L: core::fmt::Debug> core::fmt::Display for JournalError<M, L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Run(e) => write!(f, "run record: {e}"),
            Self::Log(e) => write!(f, "audit log: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use budgetgate_core::resume::{AuditVerdict, Phase, Stage};
    use budgetgate_core::{Identifier, RunLimits, TraceRow};
    use futures::executor::block_on;
    use sequential_storage::mock_flash::{MockFlashBase, WriteCountCheck};

    /// 4 pages of 4 KiB with 4-byte words, as many MCU flashes have.
    type Flash = MockFlashBase<4, 4, 1024>;

    fn flash() -> Flash {
        Flash::new(WriteCountCheck::Twice, None, false)
    }

    fn journal(map: Flash, log: Flash) -> FlashJournal<Flash, Flash> {
        FlashJournal::new(map, Flash::FULL_FLASH_RANGE, log, Flash::FULL_FLASH_RANGE).unwrap()
    }

    /// Save `k` of a run: `k / 2` calls done, and on odd `k` one more
    /// executing (the two saves of one tool call).
    fn rows(k: usize) -> Vec<TraceRow> {
        (0..k.div_ceil(2))
            .map(|i| TraceRow::Tool {
                step: i as u8,
                call_id: Identifier::new(&format!("call-{i}")).unwrap(),
                name: Identifier::new("HassTurnOn").unwrap(),
                executed: true,
                ok: i < k / 2,
            })
            .collect()
    }

    static NO_DUTY: budgetgate_core::budget::DutyWindows = [const { None }; 4];

    fn view(k: usize, trace: &[TraceRow]) -> RunView<'_> {
        RunView {
            run: 1,
            phase: Phase::Running,
            stage: if k % 2 == 1 {
                Stage::Executing
            } else {
                Stage::AwaitingProposal
            },
            status: None,
            used_ms: k as u64 * 10,
            limits: RunLimits::new(32, 16).unwrap(),
            tool_attempts: trace.len() as u8,
            trace,
            duty: &NO_DUTY,
            duty_clock_ms: 0,
        }
    }

    fn entry(k: usize) -> AuditEntry<'static> {
        AuditEntry {
            run: 1,
            step: (k.saturating_sub(1) / 2) as u8,
            call_id: "call",
            tool: "HassTurnOn",
            verdict: if k % 2 == 1 {
                AuditVerdict::Executing
            } else {
                AuditVerdict::Executed
            },
            time_ms: k as u64,
        }
    }

    fn record(k: usize) -> Vec<u8> {
        let trace = rows(k);
        let mut buf = [0u8; RUN_RECORD_MAX];
        let n = view(k, &trace).encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    fn save(j: &mut FlashJournal<Flash, Flash>, k: usize) -> Result<(), String> {
        let trace = rows(k);
        block_on(j.save(&view(k, &trace), &entry(k))).map_err(|e| e.to_string())
    }

    fn times(j: &mut FlashJournal<Flash, Flash>) -> Vec<u64> {
        let mut out = Vec::new();
        block_on(j.audit(|e| out.push(e.time_ms))).unwrap();
        out
    }

    #[test]
    fn the_newest_record_and_every_entry_are_read_after_a_restart() {
        let mut j = journal(flash(), flash());
        assert!(block_on(j.load()).unwrap().is_none());
        for k in 1..=32 {
            save(&mut j, k).unwrap();
            let (m, l) = j.into_flash();
            j = journal(m, l);
            assert_eq!(block_on(j.load()).unwrap(), Some(&record(k)[..]));
            assert_eq!(times(&mut j), (1..=k as u64).collect::<Vec<_>>());
        }
    }

    /// Issue 15, power-cut evidence: cuts the power at every byte the save
    /// of the record writes or erases, then at every byte of its audit
    /// entry, for each of the first 32 saves (16 tool calls, two saves
    /// each). After each cut the stored record is the one of before or after
    /// the interrupted save, decodes, and never holds fewer tool attempts
    /// than the one before; the log holds the entries before, plus the new
    /// one whole or not at all, and never an entry whose record is missing.
    #[test]
    fn a_power_cut_at_every_byte_of_a_save() {
        let (mut map, mut log) = (flash(), flash());
        let mut cuts = 0;
        for k in 1..=32usize {
            let before = (k > 1).then(|| record(k - 1));
            // Cuts in the record's write (the entry is never reached).
            for position in 0.. {
                let mut m = map.clone();
                m.bytes_until_shutoff = Some(position);
                let mut j = journal(m, log.clone());
                let saved = save(&mut j, k);
                let (mut m, l) = j.into_flash();
                let finished = saved.is_ok() && m.bytes_until_shutoff.is_some();
                m.bytes_until_shutoff = None;
                let mut back = journal(m, l);
                let loaded = block_on(back.load())
                    .unwrap_or_else(|e| panic!("save {k}, record cut at {position}: {e}"))
                    .map(<[u8]>::to_vec);
                let entries = times(&mut back);
                if finished {
                    assert_eq!(loaded, Some(record(k)));
                    break;
                }
                cuts += 1;
                assert!(
                    loaded == before || loaded == Some(record(k)),
                    "save {k}, record cut at byte {position}"
                );
                if let (Some(now), Some(b)) = (&loaded, &before) {
                    let (now, b) = (resume::decode(now).unwrap(), resume::decode(b).unwrap());
                    assert!(now.tool_attempts >= b.tool_attempts);
                }
                assert_eq!(entries, (1..k as u64).collect::<Vec<_>>(), "save {k}");
            }
            // The record stored; cuts in the entry's write.
            let mut j = journal(map.clone(), log.clone());
            let trace = rows(k);
            block_on(
                j.map
                    .store_item(&mut j.buffer, &RUN_KEY, &Stored(&view(k, &trace))),
            )
            .unwrap();
            let (m_after, _) = j.into_flash();
            for position in 0.. {
                let mut l = log.clone();
                l.bytes_until_shutoff = Some(position);
                let mut j = journal(m_after.clone(), l);
                let mut bytes = [0u8; AUDIT_ENTRY_MAX];
                let n = entry(k).encode(&mut bytes).unwrap();
                let pushed = block_on(j.log.push(&bytes[..n], true));
                let (m, mut l) = j.into_flash();
                let finished = pushed.is_ok() && l.bytes_until_shutoff.is_some();
                l.bytes_until_shutoff = None;
                let mut back = journal(m, l);
                assert_eq!(block_on(back.load()).unwrap(), Some(&record(k)[..]));
                let entries = times(&mut back);
                let old: Vec<u64> = (1..k as u64).collect();
                let new: Vec<u64> = (1..=k as u64).collect();
                if finished {
                    assert_eq!(entries, new);
                    break;
                }
                cuts += 1;
                assert!(
                    entries == old || entries == new,
                    "save {k}, entry cut at byte {position}: {entries:?}"
                );
            }
            let mut j = journal(map, log);
            save(&mut j, k).unwrap();
            (map, log) = j.into_flash();
        }
        std::println!("{cuts} power cuts over 32 saves");
        assert!(cuts > 32 * 40, "only {cuts} cut positions tried");
    }

    /// When the log is full, the oldest page of entries is dropped and the
    /// newest are kept, in order.
    #[test]
    fn a_full_log_drops_its_oldest_entries() {
        let mut j = journal(flash(), flash());
        let saves = 2_000;
        for k in 1..=saves {
            save(&mut j, (k - 1) % 32 + 1).unwrap();
        }
        let mut seen = Vec::new();
        let read = block_on(j.audit(|e| seen.push(e.time_ms))).unwrap();
        assert!(read > 200 && read < saves, "{read} entries kept");
        assert_eq!(seen.last(), Some(&(((saves - 1) % 32 + 1) as u64)));
        std::println!("{read} of {saves} entries kept in 4 pages of 4 KiB");
    }

    /// Flash wear: bytes written and pages erased per saved decision (a
    /// tool call is two saves: executing, then its outcome), over 1 000
    /// saves of a run of up to 16 calls. Printed with `--nocapture`; the
    /// figures are in docs/FIRMWARE.md.
    #[test]
    fn flash_wear_per_save() {
        let mut j = journal(flash(), flash());
        let saves = 1_000usize;
        for k in 1..=saves {
            save(&mut j, (k - 1) % 32 + 1).unwrap();
        }
        let (m, l) = j.into_flash();
        let (m, l) = (m.stats_snapshot(), l.stats_snapshot());
        let zero = flash().stats_snapshot();
        let (m, l) = (zero.compare_to(m), zero.compare_to(l));
        std::println!(
            "{saves} saves: record {} bytes written ({} per save), {} page erases; log {} bytes ({} per save), {} page erases",
            m.bytes_written,
            m.bytes_written / saves as u64,
            m.erases,
            l.bytes_written,
            l.bytes_written / saves as u64,
            l.erases
        );
        // A record of up to 16 rows is at most 28 + 16 * 26 bytes here.
        assert!(m.bytes_written / (saves as u64) < 500);
        assert!(l.bytes_written / (saves as u64) < 64);
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_fresh_run() {
        let mut j = journal(flash(), flash());
        block_on(j.map.store_item(&mut j.buffer, &RUN_KEY, &&[7u8; 40][..])).unwrap();
        assert!(matches!(block_on(j.load()), Err(StoreError::Run(_))));
    }

    /// Fail closed (issue 15, duty windows bumped the record to version 2):
    /// a flash holding a version 1 record loads as an error,
    /// never as a fresh run or a run without its windows; the firmware then
    /// stays idle until the operator starts a run, whose save replaces it.
    #[test]
    fn a_record_of_an_older_version_is_an_error_until_a_new_save() {
        // The version is read before the checksum: a version 1 record is
        // refused as such whatever follows it.
        let mut old = record(2);
        old[3] = 1;
        let mut j = journal(flash(), flash());
        block_on(j.map.store_item(&mut j.buffer, &RUN_KEY, &&old[..])).unwrap();
        let (m, l) = j.into_flash();
        let mut j = journal(m, l);
        assert!(matches!(
            block_on(j.load()),
            Err(StoreError::Run(ResumeError::Version(1)))
        ));
        save(&mut j, 1).unwrap();
        assert_eq!(block_on(j.load()).unwrap(), Some(&record(1)[..]));
    }

    #[test]
    fn pages_too_small_for_a_record_are_refused() {
        type Small = MockFlashBase<4, 4, 256>;
        let f = || Small::new(WriteCountCheck::Twice, None, false);
        assert!(matches!(
            FlashJournal::new(f(), Small::FULL_FLASH_RANGE, f(), Small::FULL_FLASH_RANGE),
            Err(StoreError::Config)
        ));
    }
}
