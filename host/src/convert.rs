//! Conversions between the core's fixed-capacity types and
//! [`serde_json::Value`], for std programs that already hold JSON values.
//!
//! Reading goes through one mechanism only: the value is written out as
//! compact JSON text and handed to the core's own parser ([`Action::parse`],
//! [`Plan::parse`], [`Limits::parse`]). So a value is accepted here exactly
//! when the same document would be accepted by `budgetgate eval` or by the
//! firmware, and every error is the core's error, whose `Display` names the
//! rule and the bound (`"a plan has at most 32 rows"`, `"`arguments` has more
//! than 8 entries"`, `"row 3: `parent` is not the id of an earlier row"`).
//!
//! A `Value` cannot hold a duplicate key, `NaN` or invalid UTF-8, so the
//! core's JSON-level refusals of those never fire here; integers and floats
//! stay distinct (`Value::from(7)` is the integer 7, `Value::from(7.0)` is
//! written `7.0` and read as a float), as the contract requires.
//!
//! The functions use the default capacities of [`budgetgate_core::limits`],
//! which hold anything the contract allows, so [`ActionError::Capacity`] is
//! never returned. A build with smaller capacities can call
//! `Action::<S>::parse(value.to_string().as_bytes())` itself.
//!
//! Writing goes the other way without loss: [`value_from_scalar`],
//! [`value_from_arguments`] and [`value_from_action`] build the same JSON as
//! the core's `Serialize` impls (what `budgetgate eval` prints). Results
//! ([`budgetgate_core::Usage`], [`budgetgate_core::WorkflowReport`],
//! [`budgetgate_core::Work`], [`crate::driver::RunResult`]) are `Serialize`
//! already; use [`serde_json::to_value`] on them.
//!
//! ```
//! use budgetgate::convert::{action_from_value, plan_from_value, limits_from_value};
//! use budgetgate_core::{Action, StopReason, LimitKey};
//! use serde_json::json;
//!
//! let action = action_from_value(&json!({
//!     "kind": "tool", "call_id": "c1", "name": "add", "arguments": {"a": 7, "b": 8}
//! })).unwrap();
//! assert!(matches!(action, Action::Tool(_)));
//!
//! let plan = plan_from_value(&json!([
//!     {"id": "a", "parent": null, "tokens": 2, "output": 1},
//!     {"id": "b", "parent": "a", "tokens": 3, "output": 2}
//! ])).unwrap();
//! let limits = limits_from_value(&json!(
//!     {"steps": 4, "tokens": 4, "output": 10, "depth": 4, "fanout": 4}
//! )).unwrap();
//! let outcome = plan.bounded_workflow(&limits);
//! assert_eq!(outcome.reason, StopReason::Limit(LimitKey::Tokens));
//!
//! let self_parent = plan_from_value(&json!([{"id": "a", "parent": "a", "tokens": 1, "output": 1}]));
//! assert_eq!(
//!     self_parent.unwrap_err().to_string(),
//!     "row 0: `parent` is not the id of an earlier row"
//! );
//! ```

use budgetgate_core::{
    Action, ActionError, Arguments, ArgumentsRef, Limits, LimitsError, Plan, PlanError, Scalar,
    ScalarRef,
};
use serde_json::{Map, Number, Value};

/// Reads and validates one proposal from a JSON value (`SPEC A1`).
///
/// Takes any value; only an object of exactly one of the two shapes is an
/// action: `{"kind": "final", "text": STRING}` (non-blank, at most 2000
/// characters) or `{"kind": "tool", "call_id": ID, "name": ID, "arguments":
/// {KEY: SCALAR, ...}}` (ids `[A-Za-z][A-Za-z0-9_-]{0,39}`, at most 8
/// arguments, keys `[A-Za-z][A-Za-z0-9_]{0,31}`, scalars: strings of at most
/// 2000 characters, finite numbers with `|x| <= 1e6`, booleans, null).
///
/// The returned action is an independent copy of the value.
///
/// # Errors
/// The [`ActionError`] that [`Action::parse`] gives for the value's compact
/// JSON text: which key is missing or unexpected, which argument (by
/// position) is not a scalar, too long or out of range, and so on.
pub fn action_from_value(value: &Value) -> Result<Action, ActionError> {
    Action::parse(value.to_string().as_bytes())
}

/// Writes an action as the JSON object it was read from (`SPEC A1`):
/// `{"kind": "final", "text"}` or `{"kind": "tool", "call_id", "name",
/// "arguments"}`, arguments in proposal order. The same value as
/// `serde_json::to_value(action)`, without a `Result`.
pub fn value_from_action<const S: usize>(action: &Action<S>) -> Value {
    let mut object = Map::new();
    match action {
        Action::Final { text } => {
            object.insert("kind".into(), Value::from("final"));
            object.insert("text".into(), Value::from(text.as_str()));
        }
        Action::Tool(call) => {
            object.insert("kind".into(), Value::from("tool"));
            object.insert("call_id".into(), Value::from(call.call_id.as_str()));
            object.insert("name".into(), Value::from(call.name.as_str()));
            object.insert("arguments".into(), value_from_arguments(&call.arguments));
        }
    }
    Value::Object(object)
}

/// Writes one validated argument value as JSON (`SPEC A1`): `Int` stays an
/// integer, `Float` stays a float (`7.0`), strings and booleans as they are.
///
/// A `Float` that is not finite cannot come out of validation; if one was
/// built by hand, it becomes `null`, since JSON has no spelling for it.
pub fn value_from_scalar<const S: usize>(scalar: &Scalar<S>) -> Value {
    match scalar {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(*b),
        Scalar::Int(i) => Value::from(*i),
        Scalar::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Scalar::Str(s) => Value::from(s.as_str()),
    }
}

/// Writes the arguments of a tool call as a JSON object (`SPEC A1`): at most
/// 8 entries, in the order the proposal gave them.
pub fn value_from_arguments<const S: usize>(arguments: &Arguments<S>) -> Value {
    Value::Object(
        arguments
            .iter()
            .map(|(key, scalar)| (key.to_string(), value_from_scalar(scalar)))
            .collect(),
    )
}

/// One borrowed argument value as JSON (`SPEC A1`); see [`value_from_scalar`].
pub fn value_from_scalar_ref(scalar: &ScalarRef<'_>) -> Value {
    match scalar {
        ScalarRef::Null => Value::Null,
        ScalarRef::Bool(b) => Value::Bool(*b),
        ScalarRef::Int(i) => Value::from(*i),
        ScalarRef::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        ScalarRef::Str(s) => Value::String(s.chars().collect()),
    }
}

/// The borrowed arguments of a tool call as a JSON object, in the order the
/// proposal gave them (`SPEC A1`).
pub fn value_from_arguments_ref(arguments: &ArgumentsRef<'_>) -> Value {
    Value::Object(
        arguments
            .iter()
            .map(|(key, scalar)| (key.to_string(), value_from_scalar_ref(&scalar)))
            .collect(),
    )
}

/// Reads and validates a plan from a JSON value (`SPEC B`).
///
/// Shape: an array of at most 32 rows, each exactly `{"id": ID, "parent": ID
/// or null, "tokens": INT, "output": INT}`; ids match `[a-z][a-z0-9-]{0,31}`
/// and are unique, `parent` names an earlier row, `tokens` and `output` are
/// integers 0..=10000 (never floats or booleans). The whole plan is checked.
///
/// # Errors
/// The [`PlanError`] of [`Plan::parse`]: [`PlanError::NotAList`],
/// [`PlanError::TooManyRows`] (more than 32 rows, the contract bound and the
/// plan's capacity), or [`PlanError::Row`] with the row's position (from 0)
/// and the rule it breaks.
pub fn plan_from_value(value: &Value) -> Result<Plan, PlanError> {
    Plan::parse(value.to_string().as_bytes())
}

/// Reads and validates workflow limits from a JSON value (`SPEC B2`).
///
/// Shape: an object with exactly the keys `steps`, `tokens`, `output`,
/// `depth`, `fanout`, each a non-negative integer; `steps`, `depth` and
/// `fanout` at most 32, `tokens` and `output` at most 320000.
///
/// # Errors
/// The [`LimitsError`] of [`Limits::parse`]: not an object, an unexpected or
/// missing key, or [`LimitsError::OutOfRange`] naming the limit and its range.
pub fn limits_from_value(value: &Value) -> Result<Limits, LimitsError> {
    Limits::parse(value.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use budgetgate_core::{Field, LimitKey, RowRule};
    use serde_json::json;

    #[test]
    fn integers_and_floats_stay_distinct_both_ways() {
        let action = action_from_value(&json!({
            "kind": "tool", "call_id": "c1", "name": "echo",
            "arguments": {"i": 7, "f": 7.0, "e": 1e2, "b": true, "n": null, "s": "é"}
        }))
        .unwrap();
        let Action::Tool(call) = &action else {
            panic!("not a tool action")
        };
        assert_eq!(call.arguments.get("i"), Some(&Scalar::Int(7)));
        assert_eq!(call.arguments.get("f"), Some(&Scalar::Float(7.0)));
        assert_eq!(call.arguments.get("e"), Some(&Scalar::Float(100.0)));
        let back = value_from_arguments(&call.arguments);
        assert_eq!(
            back.to_string(),
            r#"{"i":7,"f":7.0,"e":100.0,"b":true,"n":null,"s":"é"}"#
        );
    }

    #[test]
    fn value_from_action_matches_the_core_serialization() {
        for v in [
            json!({"kind": "final", "text": "15"}),
            json!({"kind": "tool", "call_id": "c1", "name": "add", "arguments": {"b": 8, "a": 7.5}}),
        ] {
            let action = action_from_value(&v).unwrap();
            assert_eq!(value_from_action(&action), v);
            assert_eq!(serde_json::to_value(&action).unwrap(), v);
        }
    }

    #[test]
    fn action_errors_are_the_core_errors() {
        assert_eq!(
            action_from_value(&json!({"kind": "final"})),
            Err(ActionError::MissingKey(Field::Text))
        );
        assert_eq!(
            action_from_value(&json!([1])),
            Err(ActionError::NotAnObject)
        );
        let nine: Map<String, Value> = (0..9).map(|i| (format!("k{i}"), json!(i))).collect();
        let err = action_from_value(
            &json!({"kind": "tool", "call_id": "c", "name": "n", "arguments": nine}),
        )
        .unwrap_err();
        assert_eq!(err, ActionError::TooManyArguments);
        assert_eq!(err.to_string(), "`arguments` has more than 8 entries");
        // A u64 beyond i64 is an integer literal out of range, never a crash.
        assert_eq!(
            action_from_value(&json!({"kind": "tool", "call_id": "c", "name": "n",
                "arguments": {"x": u64::MAX}})),
            Err(ActionError::ArgumentOutOfRange { index: 0 })
        );
    }

    #[test]
    fn plan_capacity_and_row_errors_name_the_bound() {
        let rows = |n: usize| {
            Value::Array(
                (0..n)
                    .map(|i| json!({"id": format!("s{i}"), "parent": null, "tokens": 0, "output": 0}))
                    .collect(),
            )
        };
        assert_eq!(plan_from_value(&rows(32)).map(|p| p.rows().len()), Ok(32));
        let err = plan_from_value(&rows(33)).unwrap_err();
        assert_eq!(err, PlanError::TooManyRows);
        assert_eq!(err.to_string(), "a plan has at most 32 rows");
        let float = json!([{"id": "a", "parent": null, "tokens": 1.0, "output": 0}]);
        assert_eq!(
            plan_from_value(&float),
            Err(PlanError::Row {
                row: 0,
                rule: RowRule::Cost(budgetgate_core::RowField::Tokens)
            })
        );
        assert_eq!(plan_from_value(&json!({})), Err(PlanError::NotAList));
    }

    #[test]
    fn limits_need_exactly_five_integers_in_range() {
        let ok = json!({"steps": 32, "tokens": 320000, "output": 0, "depth": 1, "fanout": 2});
        assert_eq!(
            limits_from_value(&ok).map(|l| l.get(LimitKey::Tokens)),
            Ok(320_000)
        );
        let over = json!({"steps": 33, "tokens": 0, "output": 0, "depth": 0, "fanout": 0});
        let err = limits_from_value(&over).unwrap_err();
        assert_eq!(err, LimitsError::OutOfRange(LimitKey::Steps));
        assert_eq!(err.to_string(), "limit `steps` must be an integer 0..=32");
        assert_eq!(
            limits_from_value(&json!({"steps": 1})),
            Err(LimitsError::MissingKey(LimitKey::Tokens))
        );
    }
}
