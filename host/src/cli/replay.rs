//! `budgetgate replay`: its arguments ([`ReplayArgs`]) and its command
//! ([`command`], exit statuses 0, 1 and 2) stay in the library, at
//! `budgetgate::replay`, and are named here so that every subcommand's glue
//! is found in `cli/`. They cannot move into this binary: the replay's own
//! loader reads `ReplayArgs` (`replay/load.rs`), and the tests in `tests/`
//! call `budgetgate::replay::command_to` with a `ReplayArgs` they build.

pub use budgetgate::replay::{command, ReplayArgs};
