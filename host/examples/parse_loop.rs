//! Validates one action document N times, for counting instructions per
//! validation (docs/BENCHMARKS.md):
//!
//! ```sh
//! cargo build --release -p budgetgate --example parse_loop
//! for n in 1000 2000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$n target/release/examples/parse_loop $n
//! done   # (Collected at 2000) - (Collected at 1000) = 1000 validations
//! ```
//!
//! The document is the benchmarks' typical 113-byte action unless a second
//! argument names a file.

use std::hint::black_box;

use budgetgate_core::ActionRef;

/// The typical action of `benches/hot_paths.rs`.
const TYPICAL: &[u8] = br#"{"kind":"tool","call_id":"call-0001","name":"move_arm","arguments":{"joint":3,"angle":-12.5,"speed":0.8,"unit":"deg"}}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let times: usize = args.next().map_or(Ok(1000), |n| n.parse())?;
    let document = match args.next() {
        Some(path) => std::fs::read(path)?,
        None => TYPICAL.to_vec(),
    };
    let mut valid = 0usize;
    for _ in 0..times {
        if black_box(ActionRef::parse(black_box(&document))).is_ok() {
            valid += 1;
        }
    }
    println!("{valid} of {times} valid");
    Ok(())
}
