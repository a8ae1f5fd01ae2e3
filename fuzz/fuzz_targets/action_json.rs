//! `ActionRef::parse` and `Action::parse` on arbitrary bytes (`SPEC A1`).
//!
//! Never panics; the borrowed view and the owned action give the same
//! verdict (the same error, or the same action); an accepted action
//! re-encodes with `pyjson::encode` and re-parses to an equal action; what
//! the core accepts, serde_json (a different strict reader) accepts too, with
//! the same strings and numbers.
#![no_main]

use budgetgate_core::limits::MAX_TEXT_BYTES;
use budgetgate_core::{pyjson, Action, ActionRef, Scalar};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Equal as JSON, numbers compared by value (serde_json reads `-0` as a float).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn scalar(s: &Scalar) -> Value {
    match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(*b),
        Scalar::Int(i) => Value::from(*i),
        Scalar::Float(f) => Value::from(*f),
        Scalar::Str(t) => Value::from(t.as_str()),
    }
}

fn as_value(action: &Action) -> Value {
    match action {
        Action::Final { text } => serde_json::json!({"kind": "final", "text": text.as_str()}),
        Action::Tool(call) => {
            let args: serde_json::Map<String, Value> = call
                .arguments
                .iter()
                .map(|(k, v)| (k.to_string(), scalar(v)))
                .collect();
            serde_json::json!({"kind": "tool", "call_id": call.call_id.as_str(),
                "name": call.name.as_str(), "arguments": args})
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let view = ActionRef::parse(data);
    let owned = Action::<MAX_TEXT_BYTES>::parse(data);
    let action = match (&view, owned) {
        (Ok(view), Ok(action)) => {
            assert_eq!(
                view.to_action::<MAX_TEXT_BYTES>().as_ref(),
                Ok(&action),
                "view and owned action differ"
            );
            // Read on demand: the arguments read again agree with the copy.
            if let (ActionRef::Tool(v), Action::Tool(a)) = (view, &action) {
                assert_eq!(v.arguments.len(), a.arguments.len());
                for ((vk, vv), (ak, av)) in v.arguments.iter().zip(a.arguments.iter()) {
                    assert!(vk == ak.as_str() && vv == av.as_ref(), "argument differs");
                    assert_eq!(v.arguments.get(ak.as_str()), Some(av.as_ref()));
                }
            }
            // The view encodes to the same bytes as the owned action.
            let mut a = vec![0u8; 128 * 1024];
            let mut b = vec![0u8; 128 * 1024];
            let n = pyjson::encode(view, &mut a).expect("a view encodes");
            let m = pyjson::encode(&action, &mut b).expect("an action encodes");
            assert_eq!(a[..n], b[..m], "view and owned action encode differently");
            action
        }
        (Err(e), Err(f)) => {
            assert_eq!(*e, f, "view and owned action refuse for different reasons");
            return;
        }
        (view, owned) => panic!("view {view:?} but owned {owned:?}"),
    };
    // Re-encode byte-exactly and re-parse.
    let mut buf = vec![0u8; 128 * 1024];
    let n = pyjson::encode(&action, &mut buf).expect("an accepted action encodes");
    assert_eq!(pyjson::encoded_len(&action, usize::MAX), Ok(n));
    let again = Action::<MAX_TEXT_BYTES>::parse(&buf[..n]).expect("its encoding parses");
    assert_eq!(again, action, "round trip");
    // Differential: serde_json reads the same document the same way.
    match serde_json::from_slice::<Value>(data) {
        Ok(theirs) => assert!(
            same(&theirs, &as_value(&action)),
            "serde_json reads {theirs}"
        ),
        Err(e) => panic!("the core accepted what serde_json refuses: {e}"),
    }
});
