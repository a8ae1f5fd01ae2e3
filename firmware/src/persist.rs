//! The durable run and the audit log (issue 15; `SPEC E`, durable state):
//! the gate's [`budgetgate_core::device::Actuators::journal`] records go to
//! NOR flash through `budgetgate-storage`'s [`FlashJournal`], which the board
//! loads at boot to resume the run ([`boot`]).
//!
//! Under QEMU the board's flash is a host file, read and written with
//! semihosting file I/O ([`FileFlash`], an `embedded-storage-async`
//! [`NorFlash`]: 4 KiB pages, 4-byte words, erase writes `0xFF`); a real
//! board passes its HAL's `NorFlash` instead. The file is named on the
//! semihosting command line as `flash=PATH` (QEMU `-append flash=PATH`;
//! `qemu-run.sh` does it for `BUDGETGATE_FLASH=PATH`); it is created and
//! erased if it does not exist. Without one, nothing is stored and the device
//! runs as a build without the `flash` feature does (the banner says
//! `flash=none`).
//!
//! Layout of the [`FLASH_LEN`] bytes: [`MAP_PAGES`] pages for the run record
//! (a `sequential-storage` map), then [`LOG_PAGES`] pages for the audit log (a
//! queue that drops its oldest page when full).
#![forbid(unsafe_code)]

use core::ffi::CStr;
use core::future::Future;
use core::mem::MaybeUninit;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

use budgetgate_core::device::JournalFailure;
use budgetgate_core::resume::{AuditEntry, AuditRecord, RunView, RUN_RECORD_MAX};
use budgetgate_storage::FlashJournal;
use embedded_io::Write;
use embedded_storage_async::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use semihosting::fs::{File, OpenOptions};
use semihosting::io::{Read as _, Seek as _, SeekFrom, Write as _};

use crate::console::write_decimal;
use crate::{board, Gate};

/// A flash page (erase unit), bytes.
pub const PAGE: u32 = 4096;
/// Pages of the run record's map.
pub const MAP_PAGES: u32 = 4;
/// Pages of the audit log's queue.
pub const LOG_PAGES: u32 = 4;
/// Bytes of the flash (the file): 32 KiB.
pub const FLASH_LEN: u32 = (MAP_PAGES + LOG_PAGES) * PAGE;

/// The journal over the two ranges of the file.
pub type Journal = FlashJournal<FileFlash, FileFlash>;

/// A semihosting file access failed, or an access was out of range or not
/// aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashError(NorFlashErrorKind);

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

/// `len` bytes of the host file from `base`, as NOR flash.
pub struct FileFlash {
    file: &'static File,
    base: u32,
    len: u32,
}

impl FileFlash {
    fn at(&self, offset: u32, len: usize) -> Result<u64, FlashError> {
        let end = u64::from(offset) + len as u64;
        if end > u64::from(self.len) {
            return Err(FlashError(NorFlashErrorKind::OutOfBounds));
        }
        let mut file = self.file;
        let at = u64::from(self.base) + u64::from(offset);
        file.seek(SeekFrom::Start(at))
            .map_err(|_| FlashError(NorFlashErrorKind::Other))
    }

    fn put(&self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        self.at(offset, bytes.len())?;
        let mut file = self.file;
        file.write_all(bytes)
            .map_err(|_| FlashError(NorFlashErrorKind::Other))
    }
}

impl ErrorType for FileFlash {
    type Error = FlashError;
}

impl ReadNorFlash for FileFlash {
    const READ_SIZE: usize = 1;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        self.at(offset, bytes.len())?;
        let mut file = self.file;
        file.read_exact(bytes)
            .map_err(|_| FlashError(NorFlashErrorKind::Other))
    }

    fn capacity(&self) -> usize {
        self.len as usize
    }
}

impl NorFlash for FileFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE as usize;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        if !from.is_multiple_of(PAGE) || !to.is_multiple_of(PAGE) || from > to {
            return Err(FlashError(NorFlashErrorKind::NotAligned));
        }
        let ones = [0xFFu8; 256];
        let mut at = from;
        while at < to {
            self.put(at, &ones)?;
            at += ones.len() as u32;
        }
        Ok(())
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        if !offset.is_multiple_of(4) || !bytes.len().is_multiple_of(4) {
            return Err(FlashError(NorFlashErrorKind::NotAligned));
        }
        self.put(offset, bytes)
    }
}

/// Runs a storage future to completion: every await in it is a blocking
/// semihosting call, so it is ready at the first poll (the loop is for a
/// driver that is not).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Stores the run and the entry ([`budgetgate_core::device::Actuators::journal`]).
/// Not inlined: the storage futures' state lives in this frame, only while
/// a save runs, not in the frames of the gate's decision paths.
#[inline(never)]
pub fn save(
    journal: &mut Journal,
    run: &RunView<'_>,
    entry: &AuditEntry<'_>,
) -> Result<(), JournalFailure> {
    block_on(journal.save(run, entry)).map_err(|e| {
        // The error's kind only: its `Debug` would bring `core::fmt` in.
        match e {
            budgetgate_storage::JournalError::Run(_) => {
                defmt::error!("flash: run record not stored")
            }
            budgetgate_storage::JournalError::Log(_) => {
                defmt::error!("flash: audit entry not stored")
            }
        }
        JournalFailure
    })
}

/// Copies the newest stored record into `record`: its length, `None` on an
/// empty flash, `Err` if it does not read or decode. Not inlined: the load
/// future's state lives here, not in [`boot`]'s frame.
#[inline(never)]
fn load(journal: &mut Journal, record: &mut [u8; RUN_RECORD_MAX]) -> Result<Option<usize>, ()> {
    match block_on(journal.load()) {
        Ok(Some(bytes)) => {
            let dst = record.get_mut(..bytes.len()).ok_or(())?;
            dst.copy_from_slice(bytes);
            Ok(Some(bytes.len()))
        }
        Ok(None) => Ok(None),
        Err(_) => {
            defmt::error!("flash: the stored run does not read");
            Err(())
        }
    }
}

/// The `flash=PATH` argument of the semihosting command line, as a C
/// string in `buf`.
fn flash_path(buf: &mut [u8; 128]) -> Option<&CStr> {
    let args = semihosting::experimental::env::args::<256>().ok()?;
    let path = (&args)
        .filter_map(Result::ok)
        .find_map(|arg| arg.strip_prefix("flash="))?;
    let dst = buf.get_mut(..path.len())?;
    dst.copy_from_slice(path.as_bytes());
    *buf.get_mut(path.len())? = 0;
    CStr::from_bytes_with_nul(buf.get(..=path.len())?).ok()
}

/// Opens (or creates and erases) the flash file and builds the journal in
/// its static. `None`, logged, without a `flash=` argument or if the file
/// cannot be opened or sized.
#[inline(never)]
fn open(
    file_slot: &'static mut MaybeUninit<File>,
    slot: &'static mut MaybeUninit<Journal>,
) -> Option<&'static mut Journal> {
    let mut buf = [0u8; 128];
    let Some(path) = flash_path(&mut buf) else {
        defmt::warn!("flash: no flash=PATH argument; nothing is stored");
        return None;
    };
    let existing = OpenOptions::new().read(true).write(true).open(path);
    let fresh = existing.is_err();
    let file = match existing.or_else(|_| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }) {
        Ok(file) => &*file_slot.write(file),
        Err(_) => {
            defmt::error!("flash: cannot open the flash file; nothing is stored");
            return None;
        }
    };
    let map_len = MAP_PAGES * PAGE;
    let flash = |base, len| FileFlash { file, base, len };
    if fresh || file.metadata().map(|m| m.len()).ok() != Some(u64::from(FLASH_LEN)) {
        defmt::info!("flash: erasing a new {=u32}-byte flash file", FLASH_LEN);
        let mut all = flash(0, FLASH_LEN);
        if block_on(all.erase(0, FLASH_LEN)).is_err() {
            defmt::error!("flash: cannot erase the flash file; nothing is stored");
            return None;
        }
    }
    let journal = FlashJournal::new(
        flash(0, map_len),
        0..map_len,
        flash(map_len, LOG_PAGES * PAGE),
        0..LOG_PAGES * PAGE,
    )
    .ok()?;
    Some(slot.write(journal))
}

/// At boot: opens the flash, hands the journal to the gate's actuators,
/// and resumes the stored run, if any (a reset never gives budget back; a
/// call found executing is recorded interrupted, its actuator safe). Says
/// what it found on the console: `flash: resumed run N STATE decisions=D
/// interrupted=ID|none`, `flash: empty`, or `flash: error: …` when the
/// stored run does not decode (the gate then stays idle: nothing runs until
/// the operator starts a new run); nothing without a flash file.
#[inline(never)]
pub fn boot<W: Write>(
    slots: (
        &'static mut MaybeUninit<File>,
        &'static mut MaybeUninit<Journal>,
    ),
    gate: &mut Gate,
    console: &mut W,
) -> Result<(), W::Error> {
    let (file_slot, slot) = slots;
    let Some(journal) = open(file_slot, slot) else {
        // Nothing on the console: a device without flash says what it
        // always said (the defmt log has the reason).
        return Ok(());
    };
    let mut record = [0u8; RUN_RECORD_MAX];
    let loaded = match load(journal, &mut record) {
        Ok(loaded) => loaded,
        Err(()) => {
            gate.actuators_mut().attach(journal);
            return console
                .write_all(b"flash: error: the stored run does not decode; type start\n");
        }
    };
    gate.actuators_mut().attach(journal);
    let Some(len) = loaded else {
        return console.write_all(b"flash: empty\n");
    };
    match gate.resume(record.get(..len).unwrap_or_default(), board::now_ms()) {
        Ok(resumed) => {
            console.write_all(b"flash: resumed run ")?;
            write_decimal(console, u64::from(resumed.run))?;
            console.write_all(b" ")?;
            console.write_all(resumed.state.as_bytes())?;
            console.write_all(b" decisions=")?;
            write_decimal(console, u64::from(resumed.decisions))?;
            console.write_all(b" interrupted=")?;
            let id = resumed
                .interrupted
                .as_ref()
                .map_or("none", |id| id.as_str());
            console.write_all(id.as_bytes())?;
            console.write_all(b"\n")
        }
        Err(e) => {
            defmt::error!("flash: stored run refused: {}", e);
            console.write_all(b"flash: error: the stored run does not decode; type start\n")
        }
    }
}

/// The console's `audit`: one line per stored entry, oldest first,
/// `audit run=R step=S call=ID tool=NAME verdict=WORD time_ms=T` (`-` for
/// an empty call id or tool), then `audit end entries=N`; or
/// `error: no flash (boot with flash=PATH)`.
#[inline(never)]
pub fn write_audit<W: Write>(journal: Option<&mut Journal>, out: &mut W) -> Result<(), W::Error> {
    let Some(journal) = journal else {
        return out.write_all(b"error: no flash (boot with flash=PATH)\n");
    };
    let mut written = Ok(());
    let read = block_on(journal.audit(|e| {
        if written.is_ok() {
            written = line(out, e);
        }
    }));
    written?;
    match read {
        Ok(n) => {
            out.write_all(b"audit end entries=")?;
            write_decimal(out, n as u64)?;
            out.write_all(b"\n")
        }
        Err(_) => {
            defmt::error!("flash: the audit log does not read");
            out.write_all(b"error: the audit log does not read\n")
        }
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

fn line<W: Write>(out: &mut W, e: &AuditRecord) -> Result<(), W::Error> {
    out.write_all(b"audit run=")?;
    write_decimal(out, u64::from(e.run))?;
    out.write_all(b" step=")?;
    write_decimal(out, u64::from(e.step))?;
    out.write_all(b" call=")?;
    out.write_all(or_dash(&e.call_id).as_bytes())?;
    out.write_all(b" tool=")?;
    out.write_all(or_dash(&e.tool).as_bytes())?;
    out.write_all(b" verdict=")?;
    out.write_all(e.verdict.as_str().as_bytes())?;
    out.write_all(b" time_ms=")?;
    write_decimal(out, e.time_ms)?;
    out.write_all(b"\n")
}
