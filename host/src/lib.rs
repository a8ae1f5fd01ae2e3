//! The std host shim of budgetgate: the same decisions as the `no_std` core,
//! with std conveniences around them (closures as policy and tools, JSON values,
//! the `budgetgate` command).
//!
//! `SPEC X` in these docs names section X of docs/CONTRACT.md.
//!
//! * [`driver::run_bounded_agent`]: the bounded run with closures (`SPEC A2`);
//! * [`eval`]: the JSON Lines machine interface of `budgetgate eval`;
//! * [`tools::DemoKind`]: the demo tools used by `eval`, `run` and the examples.

/// The commonest `eval` answers written as JSON bytes (`eval`'s hot path).
pub mod answer;
pub mod convert;
pub mod device;
/// The device's audit log (`budgetgate device audit`), now `device::audit`;
/// kept at this path for its callers.
pub use device::audit as device_audit;
pub mod driver;
pub mod eval;
pub mod gate;
pub mod hook;
pub mod hook_install;
pub mod input;
/// The stores, at their old path (`store`), kept for their callers.
pub use store as ledger;
/// The Redis store, at its old path (`store::redis`), kept for its callers.
pub use store::redis as ledger_redis;
pub mod mcp;
pub mod net;
pub mod proxy;
pub mod replay;
pub mod store;
pub mod strict;
pub mod term;
pub mod text;
pub mod tools;
pub mod transcript;
