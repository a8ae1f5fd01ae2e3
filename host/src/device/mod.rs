//! `budgetgate device`: runs a script of proposals through the gate on a
//! co-processor, over its agent link (`docs/PROTOCOL.md`), and optionally
//! acts as the operator on its console.
//!
//! The host is only the agent's messenger: every decision is the device's.
//! It sends one `PROPOSE` at a time, waits for the verdict, and prints it.
//! The frame codec is the core's ([`budgetgate_core::link`]), so host and
//! device read and write the same bytes.
//!
//! * [`Session`]: a script run through the device over any [`Port`] (what
//!   `budgetgate device` runs; the QEMU end-to-end tests use it too). The
//!   subcommand's arguments, set-up and exit statuses are the command's
//!   glue, in the binary (`host/src/cli/device.rs`).
//! * [`AgentLink`]: framed requests and verified replies; [`DeviceReply`]: a
//!   reply read back into a Rust value; [`Expected`]: what a reply must be to
//!   belong to its request; [`minify`]: a proposal made into one line without
//!   changing a byte of its meaning.
//!
//! Whatever the peer sends, the host holds a few frames of memory at most: a
//! reply line longer than [`FRAME_MAX`](budgetgate_core::link::FRAME_MAX) is
//! reported at once and discarded to its line end, and so is a console line
//! longer than [`CONSOLE_LINE_MAX`]. Every text printed from a script or a
//! device goes through [`terminal_safe`](crate::term::terminal_safe) (or,
//! for `--json`, [`json_terminal_safe`]).
//!
//! Replies have one schema, the core's
//! [`link::Reply`](budgetgate_core::link::Reply): the device writes it
//! with borrowed words (`Reply<&str, _>`), the host reads it with owned ones
//! ([`DeviceReply`], `Reply<String, Value>`: an owned string can hold what a
//! peer escaped). A test writes every kind of reply with the core's codec
//! and reads it back here.
//!
//! The rooms of this folder: `link.rs` the byte links (TCP, serial), the
//! agent link's framing and [`DeviceError`]; `console.rs` the operator
//! console; `script.rs` the script file; `session.rs` a script run through
//! the device; `expected.rs` what a reply must be to belong to its request;
//! `report.rs` the readable report; [`audit`] the device's audit log;
//! `tests.rs` the unit tests.

mod console;
mod expected;
mod link;
mod report;
mod script;
mod session;

pub mod audit;

pub use console::*;
pub use expected::*;
pub use link::*;
pub use report::*;
pub use script::*;
pub use session::*;

#[cfg(test)]
mod tests;
