//! The Python package `budgetgate`'s native module (`budgetgate._budgetgate`):
//! the host's gate, in-process, through PyO3.
//!
//! This crate adapts; it decides nothing itself (one rule book). A tool call
//! is decided by the MCP gateway's ledger gate ([`LedgerGate`]: reserve →
//! commit → roll back, [`budgetgate::gate::decide_tool_call`] in the core's
//! check order), a model call by the model proxy's gate ([`ModelGate`]: the
//! engine's check before a model call, its worst case reserved in reserve
//! mode, its response counted after), both over the ledger the CLI opens
//! ([`open_ledger_in_process`]: SQLite, a state folder or Redis), so
//! `budgetgate ledger show SESSION` shows what a Python agent used; or over
//! `memory:`, a ledger in this process alone, for tests and single-process
//! agents. The Python interpreter's
//! lock is released while a decision waits on the store.
//!
//! Approval: a call of a `needs_approval` tool is held reserved while the
//! `Gate`'s `approver` callable is asked, and refused `approval-refused`
//! when it declines, fails or is not given. Non-features: no renewal of
//! reservations (a call running longer than the reservation's lifetime is
//! counted as spent by the next decision, never given back). Loop
//! detection (`[loops]`): `after_tool`'s `ok` and `output` are the call's
//! outcome (see `report_outcome`).

use std::sync::Mutex;
use std::time::Duration;

use budgetgate::gate::backend::open_ledger_in_process;
use budgetgate::gate::budget_file::{read_budget_file, ReplayBudget, BUDGET_TOOLS};
use budgetgate::gate::clock::now_ms;
use budgetgate::gate::loops;
use budgetgate::gate::model_gate::{Admission, ModelCall, ModelGate, Outcome, Ticket};
use budgetgate::gate::usage::usage_from_value;
use budgetgate::gate::{Refusal, ToolCall, Verdict};
use budgetgate::mcp::{CallGate, LedgerGate};
use budgetgate::store::Durability;
use budgetgate_core::budget::{Ledger, Limit};
use budgetgate_core::engine::ModelStop;
use budgetgate_core::tools::ToolTable;
use budgetgate_core::turn::TokenMode;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString};
use serde_json::Value;

pyo3::create_exception!(
    _budgetgate,
    Error,
    PyException,
    "Every budgetgate error; the call it was about is not let through (fail closed)."
);
pyo3::create_exception!(
    _budgetgate,
    BudgetError,
    Error,
    "The budget file cannot be read or applied."
);
pyo3::create_exception!(
    _budgetgate,
    LedgerError,
    Error,
    "The ledger cannot be opened, reached or read; nothing is let through."
);
pyo3::create_exception!(
    _budgetgate,
    InputError,
    Error,
    "An argument cannot be decided on (not JSON, nested too deeply, a usage that is not counts); nothing changed in the ledger."
);
pyo3::create_exception!(
    _budgetgate,
    CallError,
    Error,
    "An after_* call for a call that is not pending (never let through, already ended, or of another Gate)."
);
pyo3::create_exception!(_budgetgate, ClosedError, Error, "The Gate was closed.");

/// How long a reservation outlives a process that stopped without ending
/// its call, by default: longer than a model or tool call should last.
const DEFAULT_RESERVATION_TTL_S: f64 = 600.0;

/// The answer before a model or tool call.
#[pyclass(frozen, module = "budgetgate._budgetgate", get_all)]
#[derive(Debug, Clone)]
pub struct Decision {
    /// Whether the call may be made.
    allowed: bool,
    /// The contract's refusal word (`tool-budget`, `steps`, …), `None` when allowed.
    reason: Option<String>,
    /// What the model (or the person) should read; `None` when allowed.
    message: Option<String>,
    /// The limit's key (`tool_calls`, `model_calls`, `tokens`, `cost_micros`,
    /// `max_calls.TOOL`, `per_minute`, …) when a limit refused.
    limit: Option<String>,
    /// Used (with what is reserved) when it refused.
    used: Option<u64>,
    /// The limit's maximum.
    max: Option<u64>,
    /// Seconds until a rate window reopens.
    retry_after: Option<f64>,
    /// The session's own budget is spent: every next model call is refused
    /// too, so the agent should stop.
    ends_session: bool,
}

#[pymethods]
impl Decision {
    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        if self.allowed {
            return "Decision(allowed=True)".to_owned();
        }
        // Python's spelling: a missing figure is None, a word is quoted.
        fn shown<T: std::fmt::Display>(v: Option<T>) -> String {
            v.map_or_else(|| "None".to_owned(), |v| v.to_string())
        }
        format!(
            "Decision(allowed=False, reason={}, limit={}, used={}, max={}, retry_after={})",
            shown(self.reason.as_deref().map(|r| format!("{r:?}"))),
            shown(self.limit.as_deref().map(|l| format!("{l:?}"))),
            shown(self.used),
            shown(self.max),
            shown(self.retry_after)
        )
    }
}

impl Decision {
    fn allowed() -> Self {
        Self {
            allowed: true,
            reason: None,
            message: None,
            limit: None,
            used: None,
            max: None,
            retry_after: None,
            ends_session: false,
        }
    }

    fn of_refusal(r: &Refusal) -> Self {
        Self {
            allowed: false,
            reason: Some(r.reason.to_owned()),
            message: Some(r.text.clone()),
            limit: r.limit.clone(),
            used: r.used,
            max: r.max,
            retry_after: r.retry_after_ms.map(|ms| ms as f64 / 1000.0),
            ends_session: r.ends_session,
        }
    }

    /// The refusal of a model call of `model`.
    fn of_stop(stop: &ModelStop, model: &str) -> Self {
        Self {
            allowed: false,
            reason: Some(stop.reason.as_str().to_owned()),
            message: Some(stop.detail_for(model).to_string()),
            limit: Some(stop.exceeded.limit.key().to_owned()),
            used: Some(stop.exceeded.used),
            max: Some(stop.exceeded.max),
            retry_after: None,
            ends_session: true,
        }
    }
}

/// A tool call let through and not yet ended.
struct HeldTool {
    call_id: String,
    name: String,
    /// Its key for loop detection (the tool and canonical arguments).
    call: Option<budgetgate_core::turn::CallFingerprint>,
}

/// What an open gate holds.
struct Open {
    model: ModelGate,
    tools: LedgerGate,
    table: Box<ToolTable<BUDGET_TOOLS>>,
    /// Model calls let through, oldest first.
    tickets: Vec<Ticket>,
    /// Tool calls let through, oldest first.
    held: Vec<HeldTool>,
    /// Outcomes loop detection has not been told yet (the report failed):
    /// reported again before the next decision, which is refused while one
    /// is not (fail closed).
    unreported: Vec<(
        budgetgate_core::turn::CallFingerprint,
        Option<budgetgate_core::engine::Outcome>,
    )>,
    /// This gate's model-call keys: unique among the processes on a session.
    key_prefix: String,
    next_key: u64,
}

/// Where an error of the ledger gates goes: a budget the gate cannot apply
/// is a [`BudgetError`], anything else the ledger's.
fn gate_error(e: String) -> PyErr {
    if e.starts_with("budget ") {
        BudgetError::new_err(e)
    } else {
        LedgerError::new_err(e)
    }
}

/// A session's gate over one budget and one ledger.
#[pyclass(frozen, module = "budgetgate._budgetgate")]
pub struct Gate {
    session: String,
    reserves_tokens: bool,
    /// Asked about each call of a `needs_approval` tool: `approver(tool,
    /// arguments, call_id) -> bool`; `None`: such calls are refused.
    approver: Option<Py<PyAny>>,
    open: Mutex<Option<Open>>,
}

impl Gate {
    /// Runs `f` on the open gate with the interpreter's lock released (the
    /// store may wait on a lock or a network); the gate's own lock is
    /// taken only after, so a thread holding it never waits for the
    /// interpreter's.
    fn with_open<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Open) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self
                .open
                .lock()
                .map_err(|_| LedgerError::new_err("the gate's lock was poisoned"))?;
            let open = guard
                .as_mut()
                .ok_or_else(|| ClosedError::new_err("the Gate is closed"))?;
            f(open)
        })
    }
}

fn durability_of(word: &str) -> PyResult<Durability> {
    match word {
        "full" => Ok(Durability::Full),
        "normal" => Ok(Durability::Normal),
        other => Err(PyValueError::new_err(format!(
            "durability {other:?}: \"full\" or \"normal\""
        ))),
    }
}

fn seconds_to_ms(name: &str, s: f64) -> PyResult<u64> {
    if !(s.is_finite() && (0.0..=1e12).contains(&s)) {
        return Err(PyValueError::new_err(format!(
            "{name} must be a finite number of seconds, 0 or more"
        )));
    }
    Ok((s * 1000.0) as u64)
}

/// JSON text of a Python value: a `str` is taken as JSON text already,
/// anything else is written by the standard library's `json.dumps`.
fn json_of(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text: String = if let Ok(s) = value.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else {
        let dumps = py.import("json")?.getattr("dumps")?;
        match dumps.call1((value,)) {
            Ok(t) => t.extract()?,
            Err(e) => {
                return Err(InputError::new_err(format!(
                    "{what} is not JSON-serialisable: {e}"
                )))
            }
        }
    };
    serde_json::from_str(&text).map_err(|e| InputError::new_err(format!("{what} is not JSON: {e}")))
}

fn to_python(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    let loads = py.import("json")?.getattr("loads")?;
    Ok(loads.call1((value.to_string(),))?.unbind())
}

/// Reports what tool call `call` (its loop key) did to loop detection
/// (`[loops]`; nothing is kept without it): `Some(outcome)` what it
/// returned, `None` it did not run after all (forgotten). Kept in
/// `unreported` when the ledger cannot take it; `Err` then.
fn report_outcome(
    gate: &mut Open,
    call: Option<budgetgate_core::turn::CallFingerprint>,
    outcome: Option<budgetgate_core::engine::Outcome>,
) -> Result<(), String> {
    let Some(call) = call else {
        return Ok(());
    };
    gate.unreported.push((call, outcome));
    report_pending(gate)
}

/// Reports the outcomes loop detection has not been told yet; `Err` while
/// one cannot be (kept for the next try).
fn report_pending(gate: &mut Open) -> Result<(), String> {
    for (call, outcome) in std::mem::take(&mut gate.unreported) {
        if let Err(e) = gate.tools.report_outcome(call, outcome, now_ms()) {
            gate.unreported.push((call, outcome));
            return Err(format!(
                "an earlier tool call's outcome could not be reported to loop detection yet: {e}"
            ));
        }
    }
    Ok(())
}

#[pymethods]
impl Gate {
    /// Opens `ledger` for `session` with the budget file `budget`.
    #[new]
    #[pyo3(signature = (budget, ledger, session, *, durability = "full", wait = 5.0, reservation_ttl = DEFAULT_RESERVATION_TTL_S, approver = None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn new(
        py: Python<'_>,
        budget: std::path::PathBuf,
        ledger: String,
        session: String,
        durability: &str,
        wait: f64,
        reservation_ttl: f64,
        approver: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let approver = approver.filter(|a| !a.is_none());
        if let Some(a) = &approver {
            if !a.is_callable() {
                return Err(PyTypeError::new_err(
                    "approver must be callable: approver(tool, arguments, call_id) -> bool",
                ));
            }
        }
        let durability = durability_of(durability)?;
        let wait = Duration::from_millis(seconds_to_ms("wait", wait)?);
        let ttl = seconds_to_ms("reservation_ttl", reservation_ttl)?.max(1);
        if session.is_empty() {
            return Err(PyValueError::new_err("session must not be empty"));
        }
        let open = py.detach(|| -> PyResult<Open> {
            // Read once: both gates apply the same budget.
            let for_tools: ReplayBudget =
                read_budget_file(&budget).map_err(BudgetError::new_err)?;
            let for_models = for_tools.clone();
            let table = for_tools
                .tool_table()
                .map_err(|e| BudgetError::new_err(format!("{}: {e}", budget.display())))?;
            let opened =
                || open_ledger_in_process(&ledger, wait, durability).map_err(LedgerError::new_err);
            let for_model_calls = opened()?;
            // One ledger for both gates: `memory:` is shared, not opened twice.
            let for_tool_calls = match for_model_calls.share() {
                Some(same) => same,
                None => opened()?,
            };
            let model = ModelGate::new(for_model_calls, for_models, ttl);
            let tools = LedgerGate::on(for_tool_calls, for_tools, session.clone(), ttl);
            Ok(Open {
                model,
                tools,
                table,
                tickets: Vec::new(),
                held: Vec::new(),
                unreported: Vec::new(),
                key_prefix: format!("py-{}-{}", std::process::id(), now_ms()),
                next_key: 0,
            })
        })?;
        let reserves_tokens = open.model.budget().limits.token_mode == TokenMode::Reserve;
        Ok(Self {
            session,
            reserves_tokens,
            approver: approver.map(Bound::unbind),
            open: Mutex::new(Some(open)),
        })
    }

    /// The session's id.
    #[getter]
    fn session(&self) -> &str {
        &self.session
    }

    /// Whether the budget reserves each model call's worst case (`token_mode
    /// = "reserve"`): only then does `before_model_call` need
    /// `input_tokens`, and an adapter serialises the request to bound it.
    #[getter]
    fn reserves_tokens(&self) -> bool {
        self.reserves_tokens
    }

    /// Decides the next model call: the engine's check before a model
    /// call; in reserve mode `input_tokens` + `max_tokens` (or the budget's
    /// `reserve_max_tokens`) reserved. Let through, it is held until
    /// `after_model_call`.
    #[pyo3(signature = (*, model, max_tokens = None, input_tokens = None))]
    fn before_model_call(
        &self,
        py: Python<'_>,
        model: String,
        max_tokens: Option<u64>,
        input_tokens: Option<u64>,
    ) -> PyResult<Decision> {
        if model.is_empty() {
            return Err(InputError::new_err("model must not be empty"));
        }
        let session = self.session.as_str();
        self.with_open(py, |open| {
            open.next_key += 1;
            let key = format!("{}-{}", open.key_prefix, open.next_key);
            let call = ModelCall {
                model: &model,
                max_output: max_tokens,
                input_bound: input_tokens.unwrap_or(0),
                // An adapter passes the request on as the framework built
                // it: a call that does not fit is refused, never lowered.
                can_set_max_output: false,
                choices: 1,
            };
            match open.model.admit(session, &key, &call, now_ms()) {
                Ok(Admission::Go(ticket)) => {
                    open.tickets.push(ticket);
                    Ok(Decision::allowed())
                }
                Ok(Admission::Stop(stop)) => Ok(Decision::of_stop(&stop, &model)),
                Err(e) => Err(gate_error(e)),
            }
        })
    }

    /// Counts how the oldest pending call of `model` ended: `usage` (the
    /// four counts: `input_tokens`, `output_tokens`,
    /// `cache_read_input_tokens`, `cache_creation_input_tokens`) when the
    /// provider reported it, else its reservation; `ok=False`: it failed
    /// before any answer and cannot have been billed, so it is given back.
    #[pyo3(signature = (*, model, usage = None, ok = true))]
    fn after_model_call(
        &self,
        py: Python<'_>,
        model: String,
        usage: Option<Bound<'_, PyAny>>,
        ok: bool,
    ) -> PyResult<()> {
        let usage = match usage {
            Some(u) if !u.is_none() => {
                let value = json_of(py, "usage", &u)?;
                Some(usage_from_value(&value).map_err(InputError::new_err)?)
            }
            _ => None,
        };
        self.with_open(py, |open| {
            let at = open
                .tickets
                .iter()
                .position(|t| t.model == model)
                .ok_or_else(|| {
                    CallError::new_err(format!("no model call of {model:?} is pending"))
                })?;
            let outcome = match (ok, usage) {
                (false, _) => Outcome::NotBilled,
                (true, Some(u)) => Outcome::Billed(u),
                (true, None) => Outcome::Unknown,
            };
            // Kept pending while it could not be counted: the caller may
            // try again; if it never does, the reservation expires and is
            // counted as spent.
            open.model
                .finish(&open.tickets[at], outcome, now_ms())
                .map_err(gate_error)?;
            open.tickets.remove(at);
            Ok(())
        })
    }

    /// Decides tool call `call_id` of tool `name` with `arguments` (a JSON
    /// object, or its JSON text): the core's check order; let through, it
    /// is reserved until `after_tool` (or `cancel_tool`). A call of a
    /// `needs_approval` tool is held reserved while the gate's `approver`
    /// is asked (with the interpreter's lock, the gate's own released), and
    /// refused `approval-refused` without one.
    fn before_tool(
        &self,
        py: Python<'_>,
        name: String,
        arguments: Bound<'_, PyAny>,
        call_id: String,
    ) -> PyResult<Decision> {
        let input = json_of(py, "arguments", &arguments)?;
        if call_id.is_empty() {
            return Err(InputError::new_err("call_id must not be empty"));
        }
        let asks = self.approver.is_some();
        let first = self.with_open(py, |open| {
            if open.held.iter().any(|h| h.call_id == call_id) {
                return Err(CallError::new_err(format!(
                    "tool call {call_id:?} is already pending"
                )));
            }
            // Outcomes not yet reported first: no decision without them.
            report_pending(open).map_err(gate_error)?;
            let shown = format!("the call id {call_id:?}");
            let call = ToolCall {
                name: &name,
                input: &input,
                call_id: &call_id,
                shown_id: &shown,
                id_scope: "in this session",
                reused: false,
            };
            let verdict = open.tools.decide(&call, now_ms()).map_err(gate_error)?;
            if matches!(verdict, Verdict::Run | Verdict::Ask(_)) {
                // Held from here: closing the gate while the approver is
                // asked counts it (it may run), never gives it back.
                open.held.push(HeldTool {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    call: open
                        .tools
                        .loops_on()
                        .then(|| loops::call_key(&name, &input))
                        .flatten(),
                });
            }
            match verdict {
                Verdict::Run => Ok(Ok(Decision::allowed())),
                Verdict::Refuse(r) => Ok(Ok(Decision::of_refusal(&r))),
                Verdict::Ask(_) if asks => Ok(Err(())),
                Verdict::Ask(_) => {
                    refuse_unapproved(open, &call_id, "this process has no approver").map(Ok)
                }
            }
        })?;
        if let Ok(decision) = first {
            return Ok(decision);
        }
        // Asked with the interpreter's lock; the gate's own is free meanwhile.
        let answer = match &self.approver {
            Some(approver) => approver
                .bind(py)
                .call1((name.as_str(), &arguments, call_id.as_str()))
                .and_then(|yes| {
                    yes.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
                        PyTypeError::new_err(format!(
                            "the approver answered {} for {name}, not True or False (an async approver is not awaited)",
                            yes.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
                        ))
                    })
                }),
            None => Ok(false),
        };
        self.with_open(py, |open| {
            held_at(open, &call_id)?;
            match &answer {
                Ok(true) => Ok(Decision::allowed()),
                Ok(false) => refuse_unapproved(open, &call_id, "the approver declined it"),
                Err(_) => refuse_unapproved(open, &call_id, "the approver failed (it raised)"),
            }
        })
        .and_then(|decision| answer.map(|_| decision))
    }

    /// Ends tool call `call_id`, let through by `before_tool`: it
    /// ran (`ok`: whether it succeeded; `output`: what it returned), so it
    /// counts either way.
    #[pyo3(signature = (call_id, *, ok = true, output = None))]
    fn after_tool(
        &self,
        py: Python<'_>,
        call_id: String,
        ok: bool,
        output: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let output = match output {
            Some(o) if !o.is_none() => Some(match json_of(py, "output", &o) {
                Ok(v) => v,
                // Not JSON: its text is what was returned.
                Err(_) => Value::String(o.str()?.to_str()?.to_owned()),
            }),
            _ => None,
        };
        self.with_open(py, |open| {
            let at = held_at(open, &call_id)?;
            let tool = open.held[at].name.clone();
            open.tools
                .commit(&call_id, &tool, now_ms())
                .map_err(gate_error)?;
            let held = open.held.remove(at);
            // Counted already. What it returned is its outcome; with no
            // `output` nothing is said of it (a result not seen matches no
            // pattern). A report that fails is kept, and refuses the next
            // decision until it lands.
            let outcome = output.as_ref().map(|o| loops::outcome_of(o, !ok));
            if outcome.is_some() {
                report_outcome(open, held.call, outcome).map_err(gate_error)?;
            }
            Ok(())
        })
    }

    /// Gives back tool call `call_id`, let through but known not to have
    /// run (another guard stopped it, the framework dropped it).
    fn cancel_tool(&self, py: Python<'_>, call_id: String) -> PyResult<()> {
        self.with_open(py, |open| {
            let at = held_at(open, &call_id)?;
            open.tools
                .roll_back(&call_id, now_ms())
                .map_err(gate_error)?;
            let held = open.held.remove(at);
            // It did not run: forgotten from the loop window.
            report_outcome(open, held.call, None).map_err(gate_error)?;
            Ok(())
        })
    }

    /// The session's figures as `budgetgate ledger show SESSION --json`
    /// has them: `limits` (each `used`, `reserved`, `max`) and `caps` (each
    /// capped tool's `used` and `max`).
    fn usage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let session = self.session.as_str();
        let value = self.with_open(py, |open| {
            let ledger = open.model.ledger(session, now_ms()).map_err(gate_error)?;
            Ok(usage_json(&ledger, &open.table))
        })?;
        to_python(py, &value)
    }

    /// Closes the gate: every call still pending is counted as spent (it
    /// may have run; never given back), then the ledger is closed. Closing
    /// again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let mut guard = self
                .open
                .lock()
                .map_err(|_| LedgerError::new_err("the gate's lock was poisoned"))?;
            let Some(open) = guard.as_mut() else {
                return Ok(());
            };
            let now = now_ms();
            let mut failed = None;
            for ticket in std::mem::take(&mut open.tickets) {
                if let Err(e) = open.model.finish(&ticket, Outcome::Unknown, now) {
                    failed.get_or_insert(e);
                }
            }
            for held in std::mem::take(&mut open.held) {
                if let Err(e) = open.tools.commit(&held.call_id, &held.name, now) {
                    failed.get_or_insert(e);
                }
            }
            *guard = None;
            // What could not be counted stays reserved: it expires and is
            // counted as spent by a later decision.
            failed.map_or(Ok(()), |e| Err(gate_error(e)))
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

/// Refuses held call `call_id`, whose approval was not had (`answer`: how):
/// the attempt counts, as the gateway's, and it is forgotten from the loop
/// window (it never ran).
fn refuse_unapproved(open: &mut Open, call_id: &str, answer: &str) -> PyResult<Decision> {
    let at = held_at(open, call_id)?;
    let held = open.held.remove(at);
    let r = Refusal::approval_refused(&held.name, answer);
    open.tools
        .refused(call_id, &held.name, r.reason, &r.text, now_ms())
        .map_err(gate_error)?;
    report_outcome(open, held.call, None).map_err(gate_error)?;
    Ok(Decision::of_refusal(&r))
}

fn held_at(open: &Open, call_id: &str) -> PyResult<usize> {
    open.held
        .iter()
        .position(|h| h.call_id == call_id)
        .ok_or_else(|| CallError::new_err(format!("no tool call {call_id:?} is pending")))
}

fn usage_json(ledger: &Ledger, table: &ToolTable<BUDGET_TOOLS>) -> Value {
    let limits: serde_json::Map<String, Value> = Limit::ALL
        .iter()
        .map(|&l| {
            (
                l.key().to_owned(),
                serde_json::json!({"used": ledger.used(l), "reserved": ledger.reserved(l),
                    "max": ledger.max(l)}),
            )
        })
        .collect();
    let caps: serde_json::Map<String, Value> = table
        .caps()
        .map(|(name, max)| {
            let name = name.as_str();
            (
                name.to_owned(),
                serde_json::json!({"used": ledger.tool_used(name), "max": max}),
            )
        })
        .collect();
    serde_json::json!({"limits": limits, "caps": caps})
}

/// Tokens a model call's input cannot be billed above, from its request
/// body (JSON text or bytes): every byte as one token, plus the provider's
/// overhead and a bound per image or document, as the model proxy counts.
#[pyfunction]
fn input_bound(body: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(b) = body.cast::<PyBytes>() {
        return Ok(budgetgate::proxy::api::input_bound(b.as_bytes()));
    }
    if let Ok(s) = body.cast::<PyString>() {
        return Ok(budgetgate::proxy::api::input_bound(s.to_str()?.as_bytes()));
    }
    Err(InputError::new_err("input_bound takes str or bytes"))
}

/// The module.
#[pymodule]
fn _budgetgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Gate>()?;
    m.add_class::<Decision>()?;
    m.add_function(wrap_pyfunction!(input_bound, m)?)?;
    for (name, ty) in [
        ("Error", py.get_type::<Error>()),
        ("BudgetError", py.get_type::<BudgetError>()),
        ("LedgerError", py.get_type::<LedgerError>()),
        ("InputError", py.get_type::<InputError>()),
        ("CallError", py.get_type::<CallError>()),
        ("ClosedError", py.get_type::<ClosedError>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
