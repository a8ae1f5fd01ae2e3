//! The firmware image of every board (`firmware/boards.txt`) meets the
//! footprint targets of issues 6 and 15: under 96 KiB of flash with the
//! flash store (the default image: the durable run and the audit log), under
//! 64 KiB without it (`--features BOARD` without `flash`), and under 24 KiB
//! of static RAM either way (docs/FIRMWARE.md). Read from the ELF's section
//! headers, so no binutils are needed; QEMU is not.

use std::path::Path;

use budgetgate_tests::qemu::{firmware_image, firmware_image_without_flash, on_every_board};

/// `SHF_ALLOC`: the section occupies memory on the target.
const SHF_ALLOC: u32 = 0x2;
/// `SHT_NOBITS`: the section takes RAM but no bytes in the image (`.bss`).
const SHT_NOBITS: u32 = 8;
/// `SHF_WRITE`: the section is writable (RAM).
const SHF_WRITE: u32 = 0x1;

/// Flash bytes (everything loaded from the image: code, read-only data,
/// initialised data) and static RAM bytes (initialised data and `.bss`) of a
/// 32-bit little-endian ELF.
fn footprint(elf: &[u8]) -> (u64, u64) {
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 1, "not a 32-bit ELF");
    assert_eq!(elf[5], 1, "not little-endian");
    let shoff = u32_at(0x20) as usize;
    let shentsize = u16_at(0x2E);
    let shnum = u16_at(0x30);
    let (mut flash, mut ram) = (0, 0);
    for i in 0..shnum {
        let header = shoff + i * shentsize;
        let kind = u32_at(header + 4);
        let flags = u32_at(header + 8);
        let size = u64::from(u32_at(header + 0x14));
        if flags & SHF_ALLOC == 0 {
            continue;
        }
        if kind != SHT_NOBITS {
            flash += size;
        }
        if flags & SHF_WRITE != 0 {
            ram += size;
        }
    }
    (flash, ram)
}

/// Checks `image` against `flash_kib` of flash and 24 KiB of static RAM.
fn fits(image: &Path, flash_kib: u64) {
    let elf = std::fs::read(image).expect("the firmware image");
    let (flash, ram) = footprint(&elf);
    println!("{}: flash {flash} B, static RAM {ram} B", image.display());
    // Sanity: a few KiB of code at least, and the gate's state in RAM.
    assert!(
        flash > 16 * 1024 && ram > 1024,
        "implausible: {flash} / {ram}"
    );
    assert!(
        flash < flash_kib * 1024,
        "flash {flash} B is over the {flash_kib} KiB target (docs/FIRMWARE.md: the image is built for speed; `z` saves about 10 KiB)"
    );
    assert!(
        ram < 24 * 1024,
        "static RAM {ram} B is over the 24 KiB target"
    );
}

/// Issue 15: the default image of every board, with the flash journal,
/// under 96 KiB of flash and 24 KiB of static RAM.
#[test]
fn the_image_fits_its_flash_and_ram_targets() {
    on_every_board(|board| fits(&firmware_image(board), 96));
}

/// Issue 6: every board's image without flash storage stays under 64 KiB.
#[test]
fn the_image_without_flash_storage_fits_64_kib() {
    on_every_board(|board| fits(&firmware_image_without_flash(board), 64));
}
