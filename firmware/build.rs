//! Puts `memory.x` on the linker search path (cortex-m-rt's `link.x` INCLUDEs
//! it) and checks that exactly one board feature is selected and that the
//! build's target is that board's (`boards.txt`).
#![forbid(unsafe_code)]

use std::{env, error::Error, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("cargo did not set OUT_DIR")?);
    fs::write(out.join("memory.x"), include_bytes!("memory.x"))?;
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
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
