//! Puts the board's memory map on the linker search path as `memory.x`
//! (cortex-m-rt's `link.x` INCLUDEs it): `memory-mps2.x` for AN385/AN386,
//! `memory-mps2-an505.x` for the AN505 and checks that exactly one board feature is selected and that the
//! build's target is that board's (`boards.txt`).
#![forbid(unsafe_code)]

use std::{env, error::Error, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("cargo did not set OUT_DIR")?);
    // The AN505's memory map differs (secure aliases); AN385/AN386 share one.
    // (Neither file is called memory.x: the linker would find that in the
    // crate's directory before OUT_DIR.)
    let memory: &[u8] = if env::var_os("CARGO_FEATURE_MPS2_AN505").is_some() {
        include_bytes!("memory-mps2-an505.x")
    } else {
        include_bytes!("memory-mps2.x")
    };
    fs::write(out.join("memory.x"), memory)?;
    // cortex-m-rt's `device` feature INCLUDEs device.x (weak aliases of a
    // PAC's interrupt handlers); every interrupt of this firmware goes to
    // DefaultHandler, so there is nothing to alias.
    fs::write(
        out.join("device.x"),
        "/* no device handlers: every interrupt is DefaultHandler */\n",
    )?;
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory-mps2.x");
    println!("cargo:rerun-if-changed=memory-mps2-an505.x");
    println!("cargo:rerun-if-changed=boards.txt");
    println!("cargo:rerun-if-changed=build.rs");

    let target = env::var("TARGET")?;
    let boards = include_str!("boards.txt");
    let rows: Vec<Vec<&str>> = boards
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let feature = |name: &str| format!("CARGO_FEATURE_{}", name.to_uppercase().replace('-', "_"));
    let selected: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|row| {
            row.first()
                .is_some_and(|name| env::var_os(feature(name)).is_some())
        })
        .collect();
    let names: Vec<&str> = rows.iter().filter_map(|row| row.first().copied()).collect();
    let [board] = selected.as_slice() else {
        return Err(format!(
            "select exactly one board feature (boards.txt: {}); got {}",
            names.join(", "),
            selected.len()
        )
        .into());
    };
    let (name, wanted) = (board.first().copied(), board.get(2).copied());
    if wanted != Some(target.as_str()) {
        return Err(format!(
            "board {} is built for {} (boards.txt), not {target}: \
             cargo build --release --no-default-features --features {0} --target {1}",
            name.unwrap_or("?"),
            wanted.unwrap_or("?"),
        )
        .into());
    }
    Ok(())
}
