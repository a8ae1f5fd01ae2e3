//! The device's budget in flash: the core's ledger record
//! ([`budgetgate_core::budget::Record`]) kept in NOR flash with
//! `sequential-storage`, so that a reset or a power cut never gives budget
//! back (`SPEC E`, durable state; issue 15). `SPEC X` in these docs names
//! section X of docs/CONTRACT.md.
//!
//! The ledger is stored after every decision, before the decision's effect
//! (an actuator command) is released. `sequential-storage` writes each
//! version as a new CRC-protected item (no erase per write: pages are erased
//! only when full, in turn, for wear levelling), and on start-up it finds
//! the newest complete item and repairs what a cut left half-written. On top
//! of that the record carries its own version and CRC, which the core checks.
//! A power cut at any byte of a save therefore leaves the ledger of before
//! or after that save — `tests::a_power_cut_at_every_byte_leaves_before_or_after`
//! cuts at every byte position of the first saves and checks exactly that.
//!
//! ```
//! # use budgetgate_core::budget::{Ledger, Limit};
//! # use budgetgate_storage::FlashLedger;
//! # type Flash = sequential_storage::mock_flash::MockFlashBase<4, 4, 1024>;
//! # futures::executor::block_on(async {
//! let flash = Flash::new(sequential_storage::mock_flash::WriteCountCheck::Twice, None, false);
//! let mut store = FlashLedger::new(flash, Flash::FULL_FLASH_RANGE).unwrap();
//! let mut ledger: Ledger = Ledger::new(0);
//! ledger.record(Limit::ToolCalls, 1);
//! store.save(&ledger).await.unwrap();
//! assert_eq!(store.load().await.unwrap(), Some(ledger));
//! # });
//! ```
//!
//! The device gate's run and its append-only audit log are kept by
//! [`FlashJournal`] (module [`journal`]), the same way, in two ranges of
//! their own.
//!
//! # Non-features
//! * No blocking API: `sequential-storage` is async over
//!   `embedded-storage-async`; a firmware without an executor runs the futures
//!   with a trivial `block_on` (they never wait on anything but the flash).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use core::fmt;
use core::ops::Range;

use budgetgate_core::budget::{Ledger, RecordError, RECORD_LEN};
use budgetgate_core::resume::ResumeError;

pub mod journal;
use embedded_storage_async::nor_flash::NorFlash;
pub use journal::{FlashJournal, JournalError};
use sequential_storage::cache::{Cache, Uncached};
use sequential_storage::map::{MapConfig, MapStorage};

/// The map key the ledger is stored under.
const LEDGER_KEY: u8 = 0;

/// The working buffer: the key and the record, rounded up to the largest
/// flash word `sequential-storage` supports (32 bytes).
const BUFFER: usize = (1 + RECORD_LEN).div_ceil(32) * 32;

/// Why the flash store could not do what was asked. The gate refuses to
/// decide (fail closed) on any of them.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError<E> {
    /// The flash range does not suit a map (not page-aligned, fewer than two
    /// pages, pages too small).
    Config,
    /// `sequential-storage` failed (the flash driver, a full or corrupted
    /// store).
    Flash(sequential_storage::Error<E>),
    /// The stored bytes are not a ledger record this build reads.
    Record(RecordError),
    /// The stored bytes are not a device run record (or audit entry) this
    /// build reads.
    Run(ResumeError),
}

impl<E: fmt::Debug> fmt::Display for StoreError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config => f.write_str("the flash range does not suit the ledger store"),
            Self::Flash(e) => write!(f, "flash: {e:?}"),
            Self::Record(e) => write!(f, "stored ledger: {e}"),
            Self::Run(e) => write!(f, "stored run: {e}"),
        }
    }
}

/// The ledger in a range of NOR flash.
pub struct FlashLedger<S: NorFlash> {
    map: MapStorage<u8, S, Cache<Uncached, Uncached, Uncached, u8>>,
    buffer: [u8; BUFFER],
}

impl<S: NorFlash> FlashLedger<S> {
    /// The store over `range` of `flash` (page-aligned, at least two pages;
    /// the store never touches flash outside it).
    pub fn new(flash: S, range: Range<u32>) -> Result<Self, StoreError<S::Error>> {
        let config = MapConfig::try_new(range).map_err(|_| StoreError::Config)?;
        Ok(Self {
            map: MapStorage::new(flash, config, Cache::new_uncached()),
            buffer: [0; BUFFER],
        })
    }

    /// Stores `ledger` (its fixed-size record) as the newest version.
    pub async fn save(&mut self, ledger: &Ledger) -> Result<(), StoreError<S::Error>> {
        let record = ledger.to_record();
        self.map
            .store_item(&mut self.buffer, &LEDGER_KEY, &record.as_bytes())
            .await
            .map_err(StoreError::Flash)
    }

    /// The newest stored ledger, `None` on a flash that never held one. A
    /// record that does not decode is an error, never an empty ledger.
    pub async fn load(&mut self) -> Result<Option<Ledger>, StoreError<S::Error>> {
        let bytes: Option<&[u8]> = self
            .map
            .fetch_item(&mut self.buffer, &LEDGER_KEY)
            .await
            .map_err(StoreError::Flash)?;
        bytes
            .map(|b| Ledger::from_record(b).map_err(StoreError::Record))
            .transpose()
    }

    /// Gives the flash back.
    pub fn into_flash(self) -> S {
        self.map.destroy().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use budgetgate_core::budget::Limit;
    use futures::executor::block_on;
    use sequential_storage::mock_flash::{MockFlashBase, WriteCountCheck};

    /// 4 pages of 4 KiB with 4-byte words, as many MCU flashes have.
    type Flash = MockFlashBase<4, 4, 1024>;

    fn ledger(step: u64) -> Ledger {
        let mut l: Ledger = Ledger::new(1_000);
        l.set_max(Limit::ToolCalls, Some(100));
        l.record(Limit::ToolCalls, step);
        l.record(Limit::Tokens, step * 1_000);
        l
    }

    fn store(flash: Flash) -> FlashLedger<Flash> {
        FlashLedger::new(flash, Flash::FULL_FLASH_RANGE).unwrap()
    }

    #[test]
    fn the_newest_save_is_loaded_after_a_restart() {
        let mut s = store(Flash::new(WriteCountCheck::Twice, None, false));
        assert!(block_on(s.load()).unwrap().is_none());
        for step in 0..40 {
            block_on(s.save(&ledger(step))).unwrap();
            let flash = s.into_flash();
            s = store(flash);
            assert_eq!(block_on(s.load()).unwrap(), Some(ledger(step)));
        }
    }

    /// Cuts the power at every byte a save writes or erases, for each of the
    /// first saves (over two page turns): after each cut the flash holds the
    /// ledger of before or after that save, decoded, never lower than before.
    #[test]
    fn a_power_cut_at_every_byte_leaves_before_or_after() {
        let mut flash = Flash::new(WriteCountCheck::Twice, None, false);
        {
            let mut s = store(flash);
            block_on(s.save(&ledger(0))).unwrap();
            flash = s.into_flash();
        }
        let mut cuts = 0;
        for step in 1..=12u64 {
            let mut position = 0;
            loop {
                let mut cut = flash.clone();
                cut.bytes_until_shutoff = Some(position);
                let mut s = store(cut);
                let saved = block_on(s.save(&ledger(step)));
                let mut after = s.into_flash();
                let finished = saved.is_ok() && after.bytes_until_shutoff.is_some();
                after.bytes_until_shutoff = None;
                let mut rebooted = store(after);
                let loaded = block_on(rebooted.load())
                    .unwrap_or_else(|e| panic!("save {step}, cut at byte {position}: {e}"))
                    .unwrap_or_else(|| {
                        panic!("save {step}, cut at byte {position}: nothing loaded")
                    });
                assert!(
                    loaded == ledger(step - 1) || loaded == ledger(step),
                    "save {step}, cut at byte {position}: {} tool calls",
                    loaded.used(Limit::ToolCalls)
                );
                if finished {
                    assert_eq!(loaded, ledger(step));
                    break;
                }
                cuts += 1;
                position += 1;
            }
            let mut s = store(flash);
            block_on(s.save(&ledger(step))).unwrap();
            flash = s.into_flash();
        }
        std::println!("{cuts} power cuts over 12 saves");
        assert!(cuts > 12 * RECORD_LEN, "only {cuts} cut positions tried");
    }

    /// Flash wear: bytes written and pages erased per decision, over 1 000
    /// saves on 4 pages of 4 KiB. Printed with `--nocapture`; the figures
    /// are in docs/FIRMWARE.md.
    #[test]
    fn flash_wear_per_decision() {
        let mut s = store(Flash::new(WriteCountCheck::Twice, None, false));
        block_on(s.save(&ledger(0))).unwrap();
        let mut flash = s.into_flash();
        let before = flash.stats_snapshot();
        let mut s = store(flash);
        let saves = 1_000u64;
        for step in 1..=saves {
            block_on(s.save(&ledger(step))).unwrap();
        }
        flash = s.into_flash();
        let used = before.compare_to(flash.stats_snapshot());
        let per_save = used.bytes_written / saves;
        let saves_per_erase = saves / used.erases.max(1);
        std::println!(
            "{saves} saves: {} bytes written ({per_save} per decision), {} page erases (one per {saves_per_erase} decisions)",
            used.bytes_written, used.erases
        );
        // One record and its item header per decision, no more.
        assert!(
            per_save < RECORD_LEN as u64 + 64,
            "{per_save} bytes per decision"
        );
        assert!(
            saves_per_erase >= 4,
            "a page erased every {saves_per_erase} decisions"
        );
    }

    #[test]
    fn a_damaged_record_is_an_error_not_an_empty_ledger() {
        let mut s = store(Flash::new(WriteCountCheck::Twice, None, false));
        // A well-formed item whose bytes are not a ledger record.
        block_on(
            s.map
                .store_item(&mut s.buffer, &LEDGER_KEY, &&[7u8; 12][..]),
        )
        .unwrap();
        assert!(matches!(block_on(s.load()), Err(StoreError::Record(_))));
    }

    #[test]
    fn a_range_that_is_not_page_aligned_is_refused() {
        let flash = Flash::new(WriteCountCheck::Twice, None, false);
        assert!(matches!(
            FlashLedger::new(flash, 100..8192),
            Err(StoreError::Config)
        ));
    }
}
