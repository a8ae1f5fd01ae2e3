//! Property: action validation (`SPEC A1`) agrees with an independent model
//! of the seed's `validate_agent_action` on valid actions and near misses,
//! and every accepted action re-encodes (byte-exactly as Python would) and
//! re-parses to itself.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

// A test states what it expects with `expect`, `unwrap`, `panic!` and
// indexing: a failure is the test failing, as in the core's unit tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
// The models read every float exactly, as the default build does.
#![cfg(feature = "exact-floats")]

mod prop_common;

use budgetgate_core::limits::MAX_TEXT_BYTES;
use budgetgate_core::{pyjson, Action, ActionRef, Scalar};
use prop_common::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// A validated scalar in the model.
#[derive(Debug, Clone)]
enum MScalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl PartialEq for MScalar {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Null, Self::Null) => true,
            (Self::Bool(a), Self::Bool(b)) => a == b,
            (Self::Int(a), Self::Int(b)) => a == b,
            // Bit-exact: -0.0 and 0.0 are different spellings in Python.
            (Self::Float(a), Self::Float(b)) => a.to_bits() == b.to_bits(),
            (Self::Str(a), Self::Str(b)) => a == b,
            _ => false,
        }
    }
}

/// A validated action in the model.
#[derive(Debug, Clone, PartialEq)]
enum MAction {
    Final(String),
    Tool {
        call_id: String,
        name: String,
        args: Vec<(String, MScalar)>,
    },
}

impl MAction {
    /// The action as the core serializes it (fixed key order), as a JSON value.
    fn to_value(&self) -> Value {
        match self {
            MAction::Final(text) => json!({"kind": "final", "text": text}),
            MAction::Tool {
                call_id,
                name,
                args,
            } => {
                let mut map = Map::new();
                for (k, v) in args {
                    map.insert(
                        k.clone(),
                        match v {
                            MScalar::Null => Value::Null,
                            MScalar::Bool(b) => Value::Bool(*b),
                            MScalar::Int(i) => Value::from(*i),
                            MScalar::Float(f) => Value::from(*f),
                            MScalar::Str(s) => Value::from(s.as_str()),
                        },
                    );
                }
                json!({"kind": "tool", "call_id": call_id, "name": name, "arguments": map})
            }
        }
    }
}

/// The seed's `validate_agent_action`, line by line, over the strict reading.
fn model_validate(doc: &Doc) -> Result<MAction, ()> {
    let value = decode(doc)?;
    let MV::Obj(_) = value else { return Err(()) };
    let keys = value.keys().unwrap_or_default();
    let kind = value.get("kind");
    if kind == Some(&MV::Str("final".into())) {
        let Some(MV::Str(text)) = value.get("text") else {
            return Err(());
        };
        if keys != ["kind", "text"] || py_blank(text) || text.chars().count() > 2000 {
            return Err(());
        }
        return Ok(MAction::Final(text.clone()));
    }
    if kind != Some(&MV::Str("tool".into())) || keys != ["arguments", "call_id", "kind", "name"] {
        return Err(());
    }
    let ident = |key: &str| match value.get(key) {
        Some(MV::Str(s)) if is_identifier(s) => Ok(s.clone()),
        _ => Err(()),
    };
    let (call_id, name) = (ident("call_id")?, ident("name")?);
    let Some(MV::Obj(members)) = value.get("arguments") else {
        return Err(());
    };
    if members.len() > 8 {
        return Err(());
    }
    let mut args = Vec::new();
    for (key, item) in members {
        if !is_argument_key(key) {
            return Err(());
        }
        let scalar = match item {
            MV::Str(s) if s.chars().count() <= 2000 => MScalar::Str(s.clone()),
            MV::Int(i) if i.abs() <= 1_000_000 => MScalar::Int(*i as i64),
            MV::Float(f) if f.abs() <= 1e6 && f.is_finite() => MScalar::Float(*f),
            MV::Null => MScalar::Null,
            MV::Bool(b) => MScalar::Bool(*b),
            _ => return Err(()),
        };
        args.push((key.clone(), scalar));
    }
    Ok(MAction::Tool {
        call_id,
        name,
        args,
    })
}

/// The core's action in the model's terms.
fn from_core(action: &Action) -> MAction {
    match action {
        Action::Final { text } => MAction::Final(text.to_string()),
        Action::Tool(call) => MAction::Tool {
            call_id: call.call_id.to_string(),
            name: call.name.to_string(),
            args: call
                .arguments
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        match v {
                            Scalar::Null => MScalar::Null,
                            Scalar::Bool(b) => MScalar::Bool(*b),
                            Scalar::Int(i) => MScalar::Int(*i),
                            Scalar::Float(f) => MScalar::Float(*f),
                            Scalar::Str(s) => MScalar::Str(s.to_string()),
                        },
                    )
                })
                .collect(),
        },
    }
}

// ---------------------------------------------------------------------------
// Generators

/// Characters for whitespace-only and near-whitespace texts: Python's spaces,
/// and look-alikes that are not spaces to Python (ZWSP, U+180E, BOM, NEL's
/// neighbour U+0086).
fn near_space() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => prop::sample::select(PY_SPACE.to_vec()),
        1 => prop::sample::select(vec!['\u{200b}', '\u{180e}', '\u{feff}', '\u{86}', 'x']),
    ]
}

/// Final texts: short Unicode, whitespace-ish, and lengths around 2000
/// characters made of 1- to 4-byte characters and escaped ones.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "\\PC{1,24}",
        2 => prop::collection::vec(near_space(), 0..6).prop_map(|v| v.into_iter().collect()),
        1 => ("\\PC{1,4}", prop::collection::vec(near_space(), 1..4))
            .prop_map(|(t, sp)| { let s: String = sp.into_iter().collect(); format!("{s}{t}{s}") }),
        3 => (prop::sample::select(vec!["a", "é", "€", "😀", "\n", "\"", "\u{1}", "\u{2028}"]), 1996usize..=2004)
            .prop_map(|(u, n)| u.repeat(n)),
        1 => any::<String>(),
    ]
}

/// Call ids and tool names: valid ones of every length up to 40, and near
/// misses (41 characters, bad first or later character, empty).
fn identifier() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[A-Za-z][A-Za-z0-9_-]{0,5}",
        4 => "[A-Za-z][A-Za-z0-9_-]{38,39}",
        1 => "[A-Za-z][A-Za-z0-9_-]{40}",
        1 => "[A-Za-z0-9_-]{0,2}",
        1 => "[a-z]{1,3}[ é.+/\n][a-z]{0,2}",
    ]
}

/// Argument keys: valid, at the 32-character edge, and near misses; the
/// one-letter alphabet `[a-c]` makes duplicate keys happen now and then.
fn argument_key() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => "[a-c]",
        12 => "[A-Za-z][A-Za-z0-9_]{1,6}",
        3 => "[A-Za-z][A-Za-z0-9_]{30,31}",
        1 => "[A-Za-z][A-Za-z0-9_]{32}",
        1 => "[A-Za-z0-9_-]{0,3}",
    ]
}

/// Valid scalars, weighted to the edges.
fn good_scalar() -> impl Strategy<Value = J> {
    prop_oneof![
        1 => Just(J::Null),
        1 => any::<bool>().prop_map(J::Bool),
        2 => prop_oneof![
            (999_990i64..=1_000_000).prop_map(|v| v.to_string()),
            (-1_000_000i64..=-999_990).prop_map(|v| v.to_string()),
            (-1_000_000i64..=1_000_000).prop_map(|v| v.to_string()),
            Just("-0".to_string()),
        ].prop_map(J::Num),
        2 => prop_oneof![
            (-1.0e6f64..=1.0e6).prop_map(|v| format!("{v:?}")),
            (-1.0e6f64..=1.0e6).prop_map(|v| format!("{v:e}")),
            prop::sample::select(vec!["1e6", "-1E+6", "1000000.0", "1000000.00000000001",
                "1e-400", "-0.0", "7.0", "1e2", "100e-2", "0e0"]).prop_map(str::to_string),
        ].prop_map(J::Num),
        3 => styled_or_broken(text(), 1).prop_map(J::Str),
    ]
}

/// Near misses: out-of-range or non-JSON numbers, arrays, objects.
fn bad_scalar() -> impl Strategy<Value = J> {
    prop_oneof![
        3 => int_literal().prop_map(J::Num),
        3 => float_literal().prop_map(J::Num),
        1 => bad_number_literal().prop_map(J::Num),
        1 => prop::collection::vec(Just(J::int(1)), 0..2).prop_map(J::Arr),
        1 => Just(J::obj(vec![("a", J::int(1))])),
    ]
}

fn scalar() -> impl Strategy<Value = J> {
    prop_oneof![40 => good_scalar(), 1 => bad_scalar()]
}

fn arguments() -> impl Strategy<Value = J> {
    prop_oneof![
        4 => prop::collection::vec((styled_or_broken(argument_key(), 1), scalar()), 0..=3),
        2 => prop::collection::vec((styled_or_broken(argument_key(), 1), scalar()), 7..=9),
    ]
    .prop_map(J::Obj)
}

/// A change that turns a well-formed action into a near miss.
#[derive(Debug, Clone)]
enum Mutation {
    None,
    Drop(prop::sample::Index),
    Extra(&'static str, J),
    Kind(J),
    Retype(prop::sample::Index, J),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let odd_value = prop_oneof![
        Just(J::Null),
        Just(J::int(1)),
        Just(J::Arr(vec![])),
        Just(J::obj(vec![])),
        Just(J::s("x")),
    ];
    prop_oneof![
        20 => Just(Mutation::None),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Drop),
        1 => (prop::sample::select(vec!["text", "call_id", "name", "arguments", "extra", "kind"]), odd_value.clone())
            .prop_map(|(k, v)| Mutation::Extra(k, v)),
        1 => prop::sample::select(vec![J::s("other"), J::s("Final"), J::s("tool "), J::Null, J::int(1), J::Bool(true)])
            .prop_map(Mutation::Kind),
        1 => (any::<prop::sample::Index>(), odd_value).prop_map(|(i, v)| Mutation::Retype(i, v)),
    ]
}

fn action() -> impl Strategy<Value = J> {
    let key = |k: &'static str| styled(Just(k.to_string()));
    let final_ = (key("kind"), key("text"), styled_or_broken(text(), 3))
        .prop_map(|(k, t, text)| vec![(k, J::s("final")), (t, J::Str(text))]);
    let tool = (
        (key("kind"), key("call_id"), key("name"), key("arguments")),
        styled_or_broken(identifier(), 1),
        styled_or_broken(identifier(), 1),
        arguments(),
    )
        .prop_map(|((k, c, n, a), call_id, name, args)| {
            vec![
                (k, J::s("tool")),
                (c, J::Str(call_id)),
                (n, J::Str(name)),
                (a, args),
            ]
        });
    let object = (prop_oneof![final_, tool], mutation())
        .prop_map(|(mut fields, m)| {
            match m {
                Mutation::None => {}
                Mutation::Drop(i) => {
                    fields.remove(i.index(fields.len()));
                }
                Mutation::Extra(k, v) => fields.push((JStr::plain(k), v)),
                Mutation::Kind(v) => fields[0].1 = v,
                Mutation::Retype(i, v) => {
                    let i = i.index(fields.len());
                    fields[i].1 = v;
                }
            }
            fields
        })
        .prop_shuffle()
        .prop_map(J::Obj);
    prop_oneof![
        30 => object,
        1 => prop::sample::select(vec![J::Null, J::s("final"), J::int(7), J::Arr(vec![])]),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// The core accepts exactly what the model accepts, and yields the same action.
    #[test]
    fn validation_matches_the_model(d in doc(action())) {
        let bytes = d.text();
        let got = Action::parse(&bytes);
        let want = model_validate(&d);
        match (&got, &want) {
            (Ok(a), Ok(m)) => prop_assert_eq!(&from_core(a), m),
            (Err(_), Err(())) => {}
            _ => prop_assert!(false, "core {:?} but model {:?} for {}",
                got.map(|a| from_core(&a)), want, shown(&bytes)),
        }
        // The borrowed view is the same validation: same verdict, same
        // error, and the owned action is its copy.
        let view = ActionRef::parse(&bytes);
        match (&view, &got) {
            (Ok(v), Ok(a)) => prop_assert_eq!(&v.to_action::<MAX_TEXT_BYTES>(), &Ok(a.clone())),
            (Err(e), Err(f)) => prop_assert_eq!(e, f),
            _ => prop_assert!(false, "view {:?} but owned {:?} for {}", view, got, shown(&bytes)),
        }
    }

    /// An accepted action encodes as Python's json.dumps would, and that
    /// encoding parses back to the same action.
    #[test]
    fn accepted_actions_reencode_and_reparse(d in doc(action())) {
        let Ok(action) = Action::parse(&d.text()) else { return Ok(()) };
        let mut buf = vec![0u8; 64 * 1024];
        let n = pyjson::encode(&action, &mut buf).expect("an action always encodes");
        let encoded = &buf[..n];
        prop_assert_eq!(pyjson::encoded_len(&action, usize::MAX), Ok(n));
        prop_assert_eq!(
            std::str::from_utf8(encoded).expect("UTF-8"),
            py_dumps(&from_core(&action).to_value())
        );
        let again = Action::parse(encoded).expect("re-parses");
        prop_assert_eq!(from_core(&again), from_core(&action));
    }
}

/// The generator reaches both sides often enough for the property to mean
/// something (a property that only ever sees rejections proves little).
#[test]
fn generator_reaches_valid_and_invalid_actions() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = doc(action());
    let (mut ok, mut finals, mut tools, mut full) = (0, 0, 0, 0);
    // 1000: actions with 7 or more valid arguments are about 1 in 80.
    for _ in 0..1000 {
        let d = strategy.new_tree(&mut runner).expect("tree").current();
        if let Ok(a) = model_validate(&d) {
            ok += 1;
            match a {
                MAction::Final(_) => finals += 1,
                MAction::Tool { args, .. } => {
                    tools += 1;
                    full += usize::from(args.len() >= 7);
                }
            }
        }
    }
    assert!((200..900).contains(&ok), "valid {ok} of 1000");
    assert!(
        finals > 50 && tools > 50 && full > 3,
        "{finals} finals, {tools} tools, {full} with 7+ args"
    );
}

/// Hand-picked edges the generator might visit rarely, checked the same way.
#[test]
fn model_and_core_agree_on_fixed_edges() {
    let tool = |args: &str| {
        format!(r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{args}}}}}"#)
    };
    let cases = [
        tool(r#""x":1000000"#),
        tool(r#""x":1000001"#),
        tool(r#""x":-1000000.0"#),
        tool(r#""x":1000000.0000000001"#),
        tool(r#""x":1000000.00000000001"#),
        tool(r#""x":99999999999999999999"#),
        tool(r#""x":1e400"#),
        tool(r#""x":-0"#),
        tool(r#""x":-0.0"#),
        tool(r#""x":true"#),
        tool(
            &(0..8)
                .map(|i| format!(r#""k{i}":{i}"#))
                .collect::<Vec<_>>()
                .join(","),
        ),
        tool(
            &(0..9)
                .map(|i| format!(r#""k{i}":{i}"#))
                .collect::<Vec<_>>()
                .join(","),
        ),
        format!(
            r#"{{"kind":"tool","call_id":"{}","name":"n","arguments":{{}}}}"#,
            "c".repeat(40)
        ),
        format!(
            r#"{{"kind":"tool","call_id":"{}","name":"n","arguments":{{}}}}"#,
            "c".repeat(41)
        ),
        format!(r#"{{"kind":"final","text":"{}"}}"#, "😀".repeat(2000)),
        format!(r#"{{"kind":"final","text":"{}"}}"#, "😀".repeat(2001)),
        r#"{"kind":"final","text":"\u2028\u3000\u0085"}"#.to_string(),
        r#"{"kind":"final","text":"\u200b"}"#.to_string(),
    ];
    for text in cases {
        let got = Action::parse(text.as_bytes()).map(|a| from_core(&a));
        let want = model_from_text(&text);
        assert_eq!(got.is_ok(), want.is_ok(), "{text}");
        if let (Ok(g), Ok(w)) = (got, want) {
            assert_eq!(g, w, "{text}");
        }
    }
}

/// Turns JSON text (without duplicate keys) into the model's tree, keeping
/// number literals as written.
fn model_from_text(text: &str) -> Result<MAction, ()> {
    fn tree(raw: &serde_json::value::RawValue) -> J {
        let t = raw.get().trim();
        match t.as_bytes()[0] {
            b'{' => {
                let m: Vec<(String, Box<serde_json::value::RawValue>)> =
                    serde_json::from_str::<indexmap_like::Pairs>(t)
                        .expect("object")
                        .0;
                J::Obj(m.iter().map(|(k, v)| (JStr::plain(k), tree(v))).collect())
            }
            b'[' => {
                let items: Vec<Box<serde_json::value::RawValue>> =
                    serde_json::from_str(t).expect("array");
                J::Arr(items.iter().map(|v| tree(v)).collect())
            }
            b'"' => J::Str(JStr::plain(
                &serde_json::from_str::<String>(t).expect("string"),
            )),
            b't' => J::Bool(true),
            b'f' => J::Bool(false),
            b'n' => J::Null,
            _ => J::Num(t.to_string()),
        }
    }
    let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text).map_err(|_| ())?;
    model_validate(&Doc::bare(tree(&raw)))
}

mod indexmap_like {
    //! An object read as its member list, in order.
    use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
    use serde_json::value::RawValue;

    pub struct Pairs(pub Vec<(String, Box<RawValue>)>);

    impl<'de> Deserialize<'de> for Pairs {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Pairs;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                    let mut out = Vec::new();
                    while let Some(entry) = map.next_entry()? {
                        out.push(entry);
                    }
                    Ok(Pairs(out))
                }
            }
            d.deserialize_map(V)
        }
    }
}

// ---------------------------------------------------------------------------
// Found by `validation_matches_the_model` (fixed in 9da87db): picojson keeps
// every escaped string of a document in its scratch buffer, and the core gave
// it one string's worth, so escaped strings together were limited to 8000 bytes.

/// Shrunk from the property: an escaped key before a 2000-character text of
/// 4-byte characters, itself escaped once. Python accepts it (2000 characters).
#[test]
fn a_final_text_of_2000_characters_is_accepted_after_an_escaped_key() {
    let doc = format!(
        r#"{{"kind":"final","\u0074ext":"\uD83D\uDE00{}"}}"#,
        "😀".repeat(1999)
    );
    let got = Action::<MAX_TEXT_BYTES>::parse(doc.as_bytes());
    assert!(got.is_ok(), "{:?}", got.map(|_| ()));
}

/// Five string arguments of 2000 ASCII characters, each with one `\n`:
/// every string is valid alone, as Python's `json.dumps` would send them.
#[test]
fn escaped_string_arguments_are_measured_one_by_one() {
    let value = format!("\\n{}", "a".repeat(1999));
    let args: Vec<String> = (0..5).map(|i| format!(r#""k{i}":"{value}""#)).collect();
    let doc = format!(
        r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{}}}}}"#,
        args.join(",")
    );
    let got = Action::<MAX_TEXT_BYTES>::parse(doc.as_bytes());
    assert!(got.is_ok(), "{:?}", got.map(|_| ()));
}

/// Eight arguments of 2000 escaped characters each (96 KB of escapes, 64 KB
/// decoded): the largest escaped action the contract allows.
#[test]
fn the_largest_escaped_action_is_accepted() {
    let value = "\\u00e9".repeat(2000);
    let args: Vec<String> = (0..8).map(|i| format!(r#""k{i}":"{value}""#)).collect();
    let doc = format!(
        r#"{{"kind":"tool","call_id":"c","name":"n","arguments":{{{}}}}}"#,
        args.join(",")
    );
    let got = Action::<MAX_TEXT_BYTES>::parse(doc.as_bytes());
    assert!(got.is_ok(), "{:?}", got.map(|_| ()));
}

/// Found by `validation_matches_the_model`: a lone high-surrogate escape
/// followed by a two-character escape was accepted (picojson), and the text
/// then held the six characters `\ud800` literally. The contract refuses lone
/// surrogates (`SPEC A1`, stricter than the reference).
#[test]
fn a_lone_surrogate_escape_before_a_short_escape_is_refused() {
    let got = Action::<MAX_TEXT_BYTES>::parse(br#"{"kind":"final","text":"\ud800\n"}"#);
    assert!(got.is_err(), "accepted as {got:?}");
}
