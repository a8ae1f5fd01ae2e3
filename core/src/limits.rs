//! Every capacity and contract bound of the core, gathered in one place.
//!
//! Contract bounds (`SPEC A`, `SPEC B`) are fixed numbers that decide whether an
//! input is valid. Capacities are the defaults of the const generics that size
//! the fixed buffers; a build may choose smaller ones (the firmware does), in
//! which case an input that is valid by the contract but does not fit is
//! refused with a capacity error, never truncated.

/// Most decision rounds in one run, trace rows in one trace and rows in one plan (`SPEC A2`, `SPEC A3`, `SPEC B`).
pub const MAX_STEPS: usize = 32;
/// Most tools registered for one run, and most cost entries in `tool_units` (`SPEC A2`, `SPEC A3`).
pub const MAX_TOOLS: usize = 8;
/// Most arguments in one tool call (`SPEC A1`).
pub const MAX_ARGUMENTS: usize = 8;
/// Most characters (Unicode scalar values) in a final text or a string argument (`SPEC A1`).
pub const MAX_TEXT_CHARS: usize = 2000;
/// Bytes needed to hold [`MAX_TEXT_CHARS`] characters of UTF-8 (four bytes each at most).
///
/// This is the default string capacity of an action.
pub const MAX_TEXT_BYTES: usize = MAX_TEXT_CHARS * 4;
/// Most UTF-8 bytes of a tool result's compact JSON encoding, quotes included (`SPEC A2`).
pub const MAX_RESULT_BYTES: usize = 4096;
/// Longest call id or tool name, in ASCII characters (`SPEC A1`).
pub const MAX_IDENTIFIER_LEN: usize = 40;
/// Longest argument key, in ASCII characters (`SPEC A1`).
pub const MAX_ARGUMENT_KEY_LEN: usize = 32;
/// Largest magnitude of a numeric argument (`SPEC A1`).
pub const MAX_ARGUMENT_MAGNITUDE: f64 = 1e6;
/// Largest `max_decisions` of a run (`SPEC A2`).
pub const MAX_DECISIONS: u32 = 32;
/// Largest `max_tool_calls` of a run (`SPEC A2`).
pub const MAX_TOOL_CALLS: u32 = 16;
/// Default `max_decisions` of a run (`SPEC A2`).
pub const DEFAULT_MAX_DECISIONS: u32 = 8;
/// Default `max_tool_calls` of a run (`SPEC A2`).
pub const DEFAULT_MAX_TOOL_CALLS: u32 = 4;
/// Largest `decision_units` and largest per-tool cost in trace work (`SPEC A3`).
pub const MAX_WORK_UNITS: u32 = 1000;
/// Longest plan step id, in ASCII characters (`SPEC B`).
pub const MAX_PLAN_ID_LEN: usize = 32;
/// Largest `tokens` or `output` of one plan row (`SPEC B`).
pub const MAX_ROW_COST: u32 = 10_000;
/// Largest `tokens` or `output` limit of a bounded workflow (`SPEC B2`).
pub const MAX_COST_LIMIT: u32 = 320_000;
/// Largest `steps`, `depth` or `fanout` limit of a bounded workflow (`SPEC B2`).
pub const MAX_SHAPE_LIMIT: u32 = 32;
/// Default most model calls of a turn-gated run (`SPEC C`, the reference's `max_pasos`).
pub const DEFAULT_MAX_MODEL_CALLS: u32 = 15;
/// Default most accumulated tokens of a turn-gated run (`SPEC C`, `max_tokens_totales`).
pub const DEFAULT_MAX_RUN_TOKENS: u64 = 150_000;
/// Default most wall time of a turn-gated run, in milliseconds (`SPEC C`, `max_segundos`).
pub const DEFAULT_MAX_RUN_MILLIS: u64 = 120_000;
/// Default most identical tool calls (same name, same arguments) of a run (`SPEC C`, `max_repeticiones`).
pub const DEFAULT_MAX_REPEATS: u32 = 2;
/// Most tool calls tracked in one model turn; more are refused, never dropped (`SPEC C`).
pub const MAX_TURN_CALLS: usize = 16;
/// Most distinct (tool, arguments) fingerprints one run remembers for the repetition rule (`SPEC C`).
pub const MAX_DISTINCT_CALLS: usize = 64;
/// Slots of the table of call ids one turn-gated run remembers (`SPEC E`: a call id seen
/// earlier in the run is refused); three quarters of them (96) can be filled, then a new id
/// is refused `call-id-capacity`, never forgotten.
pub const MAX_RUN_CALL_IDS: usize = 128;
/// Longest tool call id (a `tool_use` block's `id`), in ASCII characters (`SPEC C`).
pub const MAX_CALL_ID_LEN: usize = 64;
/// Longest tool name in the tool rules of the turn gate, in ASCII characters (`SPEC C`).
pub const MAX_TOOL_NAME_LEN: usize = 64;
/// Deepest nesting of objects and arrays the arguments fingerprint follows (`SPEC C`).
pub const MAX_FINGERPRINT_DEPTH: usize = 16;
/// Most object keys in one raw JSON arguments document, for duplicate-key detection (`SPEC C`).
pub const MAX_FINGERPRINT_KEYS: usize = 64;
/// Most actuators with a duty window on one device gate, numbered from 0
/// (`device::DeviceGate::set_duty_window`; issue 15).
pub const MAX_DUTY_WINDOWS: usize = 4;
/// On-spans one duty window keeps (`budget::DutyWindow`); when more must be
/// kept the two oldest merge, which only counts more on-time (issue 15).
pub const DUTY_SPANS: usize = 8;

const _: () = assert!(MAX_DECISIONS as usize <= MAX_STEPS);
const _: () = assert!(MAX_TOOL_CALLS as usize <= MAX_STEPS);
const _: () = assert!(MAX_STEPS < u8::MAX as usize);
const _: () = assert!(MAX_DUTY_WINDOWS <= 16 && DUTY_SPANS >= 2 && DUTY_SPANS < u8::MAX as usize);
