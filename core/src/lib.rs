//! The core of budgetgate: decides, step by step, whether what an AI agent
//! proposes may happen, and enforces the budgets of its run.
//!
//! `no_std`, no allocator, no `unsafe`, fixed capacities (see [`limits`]), and
//! sans-IO: it never reads a clock or calls a tool or a policy; the caller
//! feeds it proposals and outcomes and gets verdicts back.
//!
//! `SPEC X` in these docs names section X of docs/CONTRACT.md, the
//! behaviour contract kept in the repository.
//!
//! What it implements of that contract:
//! * [`ActionRef::parse`]: action validation in one pass, stricter than the
//!   reference at the JSON level, with every string left in the document
//!   (`SPEC A1`); [`ActionRef::validate`] keeps, for an invalid one, the
//!   rule broken and the byte offset where; [`Action::parse`] adds an owned
//!   copy;
//! * [`Run`]: the bounded run as a state machine (`SPEC A2`), with results
//!   measured byte-exactly by [`pyjson`]; its [`Verdict`] hands back the
//!   call it is about, borrowed from the proposal, with a [`Pending`] token
//!   that [`Run::complete`] consumes;
//! * [`tools::ToolTable`]: the one tool table — per tool a rule (run, ask a
//!   person, deny as `unknown-tool`), an optional call cap and an optional
//!   typed signature, and a rule for every other name — which the run
//!   (through [`ToolSet`]), the turn gate and the device gate read
//!   (`SPEC A2`, `SPEC C`, `SPEC E`);
//! * [`approval`]: the one approval state machine — an answer (approve,
//!   refuse, later) and a question with its deadline, after which an
//!   approval never runs its call — which the turn gate, the device gate and
//!   the MCP gateway share (`SPEC C`);
//! * [`word`]: every word the contract and the device protocol spell
//!   (statuses, reasons, observation data), which every front-end uses;
//! * [`trace_work`]: the work units of a trace (`SPEC A3`);
//! * [`Plan::usage`] and [`Plan::bounded_workflow`]: plan usage and the
//!   bounded workflow (`SPEC B1`, `SPEC B2`);
//! * [`TurnGate`]: stop conditions and approval around a real model — steps,
//!   tokens, time, repetitions, stop reasons, one result per tool call
//!   (`SPEC C`);
//! * [`budget::Ledger`]: used and maximum per limit, reserve → commit →
//!   roll back, per-tool caps, and a fixed-size checksummed record that
//!   front-ends store between decisions (`SPEC E`);
//! * [`device::DeviceGate`]: the device gate, sans-IO — agent frames in,
//!   replies and actuator commands out, time passed in: the time budget,
//!   operator approval with its timeout, the safe state on every stop
//!   (`SPEC C` on a co-processor);
//! * [`link`]: the framed serial protocol between an agent's host and the
//!   gating co-processor, and [`registry`]: typed, range-checked tool
//!   signatures for a device.
//!
//! Sizes with the default capacities (x86_64, checked by the `state_sizes`
//! test): [`Run`] 4064 bytes, [`device::DeviceGate`] 6960 bytes (its two
//! 1 KiB frame buffers, a run and four duty windows, with actuators of no
//! size), [`Plan`] 1800 bytes, [`TurnGate`] 6112 bytes,
//! [`ActionRef`] 120 bytes whatever the action holds; an owned [`Action`]
//! 64560 bytes (its strings hold 2000 characters of 4-byte UTF-8 each; a
//! smaller capacity such as `Action<256>` refuses longer strings).
//!
//! ```
//! use budgetgate_core::{Plan, Limits, StopReason, LimitKey};
//!
//! let plan: Plan = Plan::parse(br#"[
//!     {"id": "a", "parent": null, "tokens": 2, "output": 1},
//!     {"id": "b", "parent": "a", "tokens": 3, "output": 2}]"#).unwrap();
//! let limits = Limits::new(4, 4, 10, 4, 4).unwrap();
//! let outcome = plan.bounded_workflow(&limits);
//! assert_eq!(outcome.reason, StopReason::Limit(LimitKey::Tokens));
//! assert_eq!(outcome.accepted, 1);
//! ```
//!
//! # Non-features
//! * No tool execution, no clock, no I/O: those belong to the host or firmware.
//! * No general JSON value type: documents are read straight into the
//!   validated types, and anything else is refused.
//! * No `alloc`: every buffer has a capacity fixed at compile time; a value
//!   that does not fit is refused, never truncated.
//! * No `serde-json-core`, though the design names it: as a reader it takes
//!   `null` for a float (NaN), leaves escapes undecoded in borrowed strings
//!   and lets a lone surrogate escape through; as a writer it spells floats
//!   unlike Python's `json.dumps`, whose bytes the 4096-byte result rule
//!   counts (`0.00001` for `1e-05`, `1e16` for `1e+16`), and writes NaN as
//!   `null` where the reference refuses it. `tests::why_not_serde_json_core`
//!   shows each on the version in use (a dev-dependency only), so a release
//!   that changes one is noticed. The core reads with its own strict scanner
//!   and pull reader and writes with [`pyjson`].
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod action;
pub mod approval;
pub mod budget;
mod bytes;
pub mod device;
pub mod engine;
pub mod ident;
pub mod json;
pub mod limits;
pub mod plan;
pub mod pyjson;
pub mod registry;
pub mod resume;
pub mod run;
pub mod tools;
pub mod turn;
pub mod word;
pub mod work;

#[doc(inline)]
pub use device::link;

pub use action::{
    Action, ActionError, ActionRef, Arguments, ArgumentsRef, Field, InvalidAction, JsonStr,
    Proposal, Scalar, ScalarRef, Shape, ToolCall, ToolCallRef,
};
pub use ident::{ArgumentKey, Identifier, IdentifierError, PlanId};
pub use json::JsonError;
pub use plan::{
    LimitKey, Limits, LimitsError, Plan, PlanError, PlanRow, RowField, RowRule, StopReason, Usage,
    Workflow, WorkflowReport,
};
pub use run::{
    Completed, ObservationData, Pending, Progress, RejectReason, Run, RunError, RunLimits,
    RunLimitsError, Status, ToolSet, ToolSetError, TraceRow, Verdict,
};
pub use turn::{RunStatus, TokenMode, TokenUsage, TurnGate, TurnLimits};
pub use work::{run_trace_work, trace_work, TraceWorkError, Work, WorkRow};

/// `docs/ON-YOUR-BOARD.md`, compiled and run as a doctest so the one-page
/// integration guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/ON-YOUR-BOARD.md")]
pub struct OnYourBoard;

#[cfg(test)]
mod tests {
    use super::*;

    /// Why serde-json-core reads and writes nothing in the core (see the
    /// crate docs): each assertion is a difference from the contract, on the
    /// version in use, so a release that changes one is noticed.
    #[test]
    fn why_not_serde_json_core() {
        #[derive(serde::Deserialize, Debug)]
        struct F {
            x: f64,
        }
        #[derive(serde::Deserialize, Debug)]
        struct S<'a> {
            s: &'a str,
        }
        // `null` is read as a float (NaN): the contract's numbers are finite.
        let null = serde_json_core::from_str::<F>(r#"{"x":null}"#).map(|(f, _)| f.x.is_nan());
        assert_eq!(null, Ok(true));
        // Escapes are not decoded, and a lone surrogate escape passes.
        let text = serde_json_core::from_str::<S>(r#"{"s":"\ud800"}"#).map(|(v, _)| v.s);
        assert_eq!(text, Ok(r"\ud800"));
        // Floats are not spelled as Python's json.dumps spells them, whose
        // bytes the 4096-byte result rule counts; NaN becomes null.
        let spell = |v: f64| {
            let mut buf = [0u8; 32];
            let n = serde_json_core::to_slice(&v, &mut buf).unwrap();
            std::string::String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        let python = |v: f64| {
            let mut buf = [0u8; 32];
            let n = pyjson::encode(&v, &mut buf).unwrap();
            std::string::String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        assert_eq!(
            (spell(1e-5), python(1e-5)),
            ("0.00001".into(), "1e-05".into())
        );
        assert_eq!((spell(1e16), python(1e16)), ("1e16".into(), "1e+16".into()));
        assert_eq!(spell(f64::NAN), "null");
        assert!(pyjson::encode(&f64::NAN, &mut [0u8; 8]).is_err());
    }

    /// An actuator of no size, to size the device gate alone.
    struct Lamp;

    /// A command of no size (its only call turns the lamp on).
    struct On;

    impl device::Command for On {
        fn parse(
            _: usize,
            _: &registry::CheckedArguments<'_>,
        ) -> Result<Self, device::CommandError> {
            Ok(On)
        }
    }

    impl device::Actuators for Lamp {
        type Command = On;
        type Result = ();
        fn execute(&mut self, _: On) -> Result<(), device::ToolFailure> {
            Ok(())
        }
        fn safe_state(&mut self) {}
        fn read_back(&mut self) -> u32 {
            0
        }
    }

    /// Sizes of the main state types with default capacities, so a device
    /// maker knows what a `static` costs. Printed with `--nocapture`.
    #[test]
    fn state_sizes() {
        let run = core::mem::size_of::<Run>();
        let action = core::mem::size_of::<Action>();
        let view = core::mem::size_of::<ActionRef>();
        let plan = core::mem::size_of::<Plan>();
        let gate = core::mem::size_of::<TurnGate>();
        let device = core::mem::size_of::<device::DeviceGate<Lamp>>();
        println!("DeviceGate = {device} B");
        println!(
            "loop Window<32> = {} B, Window<8> = {} B",
            core::mem::size_of::<engine::Window<32>>(),
            core::mem::size_of::<engine::Window<8>>()
        );
        assert!(device <= 8192, "DeviceGate grew to {device} bytes");
        println!(
            "Run = {run} B, ActionRef = {view} B, Action = {action} B, Plan = {plan} B, TurnGate = {gate} B"
        );
        assert!(view <= 128, "ActionRef grew to {view} bytes");
        assert!(run <= 4096, "Run grew to {run} bytes");
        assert!(plan <= 2048, "Plan grew to {plan} bytes");
        // With the loop window (32 calls): see `turn::tests::gate_size_is_modest`.
        assert!(gate <= 10 * 1024 + 512, "TurnGate grew to {gate} bytes");
        assert!(core::mem::size_of::<Action<256>>() <= 4096);
    }
}
