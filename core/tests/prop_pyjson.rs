//! Property: `pyjson::encoded_len` and `pyjson::encode` reproduce Python's
//! `json.dumps(v, ensure_ascii=False, separators=(',', ':'), allow_nan=False)`
//! byte for byte (`SPEC A2`), checked against an independent model
//! (`prop_common::py_dumps`) and a table of float spellings produced by CPython.
//!
//! Cases per property: 256 (1024 for single floats), or `PROPTEST_CASES`.

// A test states what it expects with `expect`, `unwrap`, `panic!` and
// indexing: a failure is the test failing, as in the core's unit tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod prop_common;

use budgetgate_core::pyjson::{encode, encoded_len, EncodeError};
use prop_common::*;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// `(f64 bits, Python 3.11 repr)`, produced with CPython (`repr(float)`), fixed seed 20261130.
const PYTHON_FLOAT_REPR: &[(u64, &str)] = &[
    (0x3ee4f8b588e368f1, "1e-05"),
    (0x4341c37937e08000, "1e+16"),
    (0x430c6bf526340000, "1000000000000000.0"),
    (0x4132d68700000000, "1234567.0"),
    (0x3f1a36e2eb1c432d, "0.0001"),
    (0x3fb999999999999a, "0.1"),
    (0x8000000000000000, "-0.0"),
    (0x0000000000000000, "0.0"),
    (0x4004000000000000, "2.5"),
    (0x4480f0cf064dd592, "1e+22"),
    (0x3e8421f5f40d8376, "1.5e-07"),
    (0x0000000000000001, "5e-324"),
    (0x7fefffffffffffff, "1.7976931348623157e+308"),
    (0x42dc12218377de66, "123456789012345.6"),
    (0xd4b249ad2594c37d, "-1e+100"),
    (0x3fd3333333333334, "0.30000000000000004"),
    (0x4341c37937e08000, "1e+16"),
    (0x4341c37937e07fff, "9999999999999998.0"),
    (0x3f19f3c70c996b77, "9.900000000000001e-05"),
    (0x405edd2f1a9fbe77, "123.456"),
    (0x3fd5555555555555, "0.3333333333333333"),
    (0x3fe5555555555555, "0.6666666666666666"),
    (0x4059000000000000, "100.0"),
    (0x412e848000000000, "1000000.0"),
    (0xc12e848000000000, "-1000000.0"),
    (0x412e847fffffffff, "999999.9999999999"),
    (0x412e848000000001, "1000000.0000000001"),
    (0x3f201f31f46ed246, "0.000123"),
    (0x3ee9e3abe16fc70d, "1.2345e-05"),
    (0x43e56a95319d63e1, "1.2345678901234567e+19"),
    (0x4340000000000000, "9007199254740992.0"),
    (0x4340000000000001, "9007199254740994.0"),
    (0x3e7ad7f29abcaf48, "1e-07"),
    (0x00003739a252b281, "3e-310"),
    (0x0010000000000000, "2.2250738585072014e-308"),
    (0x4011666666666666, "4.35"),
    (0x3fe9999999999999, "0.7999999999999999"),
    (0x444b1ae4d6e2ef50, "1e+21"),
    (0x7e37e43c8800759c, "1e+300"),
    (0x44dfe185ca57c517, "6.02214076e+23"),
    (0xbe25798ee2308c3a, "-2.5e-09"),
    (0x3fe0000000000000, "0.5"),
    (0x4024000000000000, "10.0"),
    (0x4028000000000000, "12.0"),
    (0x430c6bf526340002, "1000000000000000.2"),
    (0x3ee9e0fcaf9380fc, "1.234e-05"),
    (0x3f202c9dedbc309d, "0.0001234"),
    (0x3f1a36e2eb1c432d, "0.0001"),
    (0x3f18e757928e0c9e, "9.5e-05"),
    (0x239eed24c2c063fe, "4.155186703770596e-137"),
    (0xf768064f958507ad, "-1.5493276596893557e+267"),
    (0x55113dc30e9a8df5, "6.033752503594958e+101"),
    (0x5966eb44e0c67744, "4.734610875454951e+122"),
    (0x4ca82984fcb042d9, "1.9413567533350407e+61"),
    (0xb9c48cb01720800e, "-2.026343252790744e-30"),
    (0xd6c93f01a9f18630, "-1.1858317169172704e+110"),
    (0xa83c546dbc4d13dc, "-7.1899383220287395e-115"),
    (0xa3966023df2d5c05, "-3.0063231000714837e-137"),
    (0xace970fccddba416, "-2.4393359722187145e-92"),
    (0x4fe2c4e12b5eadad, "6.791589889097515e+76"),
    (0x00633256e25fe71d, "8.542787587741869e-307"),
    (0x34c6049fa9998118, "1.7959319186620425e-54"),
    (0xe66c0e9819428e8a, "-2.3843428951958722e+185"),
    (0xa62d2465be71c2d9, "-8.610211252232095e-125"),
    (0x3c19c840d9f9bacd, "3.4941450171141172e-19"),
    (0xf5a6b47b57a73cab, "-5.4546631221766884e+258"),
    (0xe7f137f5a11b5c7d, "-4.909925150375343e+192"),
    (0x60a8a1e2fdbc4be2, "4.227405874484781e+157"),
    (0x12f034c143d2ba11, "1.836373244701896e-217"),
    (0xd6567964cfbaa4dd, "-8.247125440860612e+107"),
    (0x83de0b93946a0998, "-4.8172544458004544e-290"),
    (0x9f777337923fe54e, "-4.269985049367663e-157"),
    (0x068c193bf65cc902, "3.962764273852618e-277"),
    (0x3379782e12806dcc, "9.906049698865113e-61"),
    (0xc85ad6ff6546e4be, "-3.653248968352573e+40"),
    (0x33ba20d253c80a75, "1.6259624590264039e-59"),
    (0x10cc80422fb71eac, "9.399257344261154e-228"),
    (0xf7453614dba55617, "-3.419735846128075e+266"),
    (0x333931383701003f, "6.123900151741344e-62"),
    (0xca927d725879f224, "-1.7294850118808994e+51"),
    (0x4223d05b17b98c28, "42550004700.77374"),
    (0xf3ddcd46e156ceb2, "-1.3335823206566807e+250"),
    (0xc67e2041df70b032, "-3.8189248497391126e+31"),
    (0xcd191c7ccf4d7c58, "-2.5825452980397165e+63"),
    (0xb40a5b86968a2fa3, "-5.248744466737039e-58"),
    (0x4f9e9d91d95996e3, "3.4619467649079436e+75"),
    (0x90bc4c1046597fc8, "-4.6660091173009587e-228"),
    (0xfdd471d22152b5cf, "-1.3370714326238627e+298"),
    (0x9fdcc21c11570c3f, "-3.3513868525695728e-155"),
    (0x413d58a7141d5406, "1923239.078572513"),
    (0x41246bd017bf6220, "669160.0463820137"),
    (0xc1090eba8a152d20, "-205271.31742320303"),
    (0xc12588df01a46cb4, "-705647.5032075853"),
    (0x413cff1bbc49bb6e, "1900315.7355000633"),
    (0xc12a5e2e0e9e064c, "-864023.028549382"),
    (0x41379ec4a432e9d8, "1547972.6414018776"),
    (0xc1205b4784af7a86, "-535971.7591512955"),
    (0x41082c826da8ba00, "198032.30354447663"),
    (0x410a4c30ef1225d0, "215430.11673383275"),
    (0xc114a141d21fa1a8, "-338000.4551987895"),
    (0xc13368614e81c150, "-1271905.306667406"),
    (0x40e026088f0bf4e0, "33072.26746175601"),
    (0x412afa2b3e9cee28, "883989.6222910332"),
    (0xc138383fcc2f46ad, "-1587263.7975963757"),
    (0xc11442b951b38f38, "-331950.32978652744"),
    (0xc139bfd4caa4325a, "-1687508.7915679426"),
    (0x4128ba5f7caffad0, "810287.7435301188"),
    (0x413cdbbf4cc56988, "1891263.2998872716"),
    (0xc13aa928225fe844, "-1747240.134275929"),
    (0xc25bc4b4f112b126, "-477057238090.76794"),
    (0x4218843158a21efd, "26324260392.530262"),
    (0xc3aa3c2157520dc8, "-9.45211301255636e+17"),
    (0x3fe4ac150cbcdc66, "0.6460061310562082"),
    (0x438457012e36e735, "1.832051877167039e+17"),
    (0x3f8b7da6a2f92e54, "0.013423253868629782"),
    (0xc3bc85ffe20dab79, "-2.0553301513215327e+18"),
    (0xc2d4e3cef2fc136b, "-91874648649805.67"),
    (0xc15eff0260bbe530, "-8125449.511468217"),
    (0xc123219a05b54556, "-626893.0111486118"),
    (0xc15a23a35920b17b, "-6852237.39262044"),
    (0xbea02f8d1b0ab9f4, "-4.823728457415298e-07"),
    (0xc2947528788fc960, "-5623355679730.344"),
    (0xc0f3877e7e8b5dc9, "-79991.90589462886"),
    (0xc0df8066ed8401cf, "-32257.608246804968"),
    (0x40462ff40e54e7fe, "44.37463549753009"),
    (0xc1c774cde6ee4f31, "-787061709.8617917"),
    (0xc3743979f4806298, "-9.108312784149952e+16"),
    (0xbf180856197f5d15, "-9.167695532085283e-05"),
    (0xc1279bbfd5584fe4, "-773599.9166893926"),
];

fn core_encode<T: serde::Serialize + ?Sized>(v: &T) -> String {
    let mut buf = vec![0u8; 1 << 20];
    let n = encode(v, &mut buf).expect("encodes");
    String::from_utf8(buf[..n].to_vec()).expect("UTF-8")
}

/// Strings that exercise every escaping rule: controls, quotes, backslash,
/// DEL, U+2028/2029, non-ASCII of every width, lone-surrogate-free.
fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "\\PC{0,12}",
        3 => prop::collection::vec(
            prop::sample::select(vec![
                '\0', '\u{1}', '\u{8}', '\t', '\n', '\u{b}', '\u{c}', '\r', '\u{1f}', ' ', '"',
                '\\', '/', '\u{7f}', '\u{80}', 'é', '\u{2028}', '\u{2029}', '€', '\u{fffd}',
                '😀', 'a',
            ]),
            0..16,
        )
        .prop_map(|v| v.into_iter().collect()),
        1 => any::<String>(),
    ]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        // Every bit pattern that is a finite double.
        4 => any::<u64>().prop_map(f64::from_bits).prop_filter("finite", |f| f.is_finite()),
        // Around the fixed/exponent switch: 1e-5..1e-4 and 1e15..1e17.
        2 => (-6i32..=-3, 1.0f64..10.0).prop_map(|(e, m)| m * 10f64.powi(e)),
        2 => (14i32..=17, 1.0f64..10.0).prop_map(|(e, m)| m * 10f64.powi(e)),
        // Exact powers of ten and integers stored as floats.
        1 => (-330i32..=308).prop_map(|e| format!("1e{e}").parse().unwrap_or(0.0)),
        // Halves and quarters of large integers (ties between two spellings).
        1 => (1i64 << 40..1i64 << 52, 0u8..4).prop_map(|(i, q)| i as f64 + f64::from(q) * 0.25),
        1 => any::<i64>().prop_map(|i| i as f64),
        1 => -1.0e6f64..1.0e6,
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => any::<i64>().prop_map(Value::from),
        1 => (i64::MAX as u64..=u64::MAX).prop_map(Value::from),
        2 => float().prop_map(|f| Value::Number(Number::from_f64(f).expect("finite"))),
        3 => json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((json_string(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A string whose encoding is `bytes` long give or take a few: `unit`
/// repeated around the 4096-byte edge.
fn near_edge() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "x", "é", "€", "😀", "\n", "\u{1}", "\"", "\u{7f}", "\u{2028}",
    ])
    .prop_flat_map(|unit| {
        let width = py_str(unit).len() - 2;
        let centre = 4094 / width;
        (Just(unit), centre.saturating_sub(3)..=centre + 3)
    })
    .prop_map(|(unit, n)| unit.repeat(n))
}

proptest! {
    #![proptest_config(config(256))]

    /// Whole values: the exact bytes and the exact count.
    #[test]
    fn values_encode_as_python_does(v in value()) {
        let want = py_dumps(&v);
        prop_assert_eq!(encoded_len(&v, usize::MAX), Ok(want.len()));
        prop_assert_eq!(core_encode(&v), want);
    }

    /// The limit is exact: a value fits when its encoding is at most `limit`
    /// bytes, and `TooLarge` is reported otherwise.
    #[test]
    fn the_limit_is_exact(v in value(), slack in -3i64..=3) {
        let len = py_dumps(&v).len();
        let limit = (len as i64 + slack).max(0) as usize;
        let got = encoded_len(&v, limit);
        if len <= limit {
            prop_assert_eq!(got, Ok(len));
        } else {
            prop_assert_eq!(got, Err(EncodeError::TooLarge));
        }
        // A buffer of exactly `limit` bytes behaves the same.
        let mut buf = vec![0u8; limit];
        prop_assert_eq!(encode(&v, &mut buf).is_ok(), len <= limit);
    }

    /// Strings around the 4096-byte result limit of a run (`SPEC A2`).
    #[test]
    fn strings_at_the_4096_byte_edge(s in near_edge()) {
        let len = py_str(&s).len();
        let got = encoded_len(s.as_str(), 4096);
        prop_assert_eq!(got, if len <= 4096 { Ok(len) } else { Err(EncodeError::TooLarge) });
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// Single floats: Python's repr layout around every exponent.
    #[test]
    fn floats_are_spelled_as_python_repr(f in float()) {
        prop_assert_eq!(core_encode(&f), py_float_repr(f));
    }
}

/// Found by `floats_are_spelled_as_python_repr` (fixed in 7fb6654): doubles
/// exactly halfway between two shortest spellings. CPython: `repr(1e15 + 0.3)`
/// is `'1000000000000000.2'`; `core::fmt`'s `{:e}` gave `...0.3`.
#[test]
fn ties_between_two_shortest_spellings_follow_python() {
    assert_eq!(core_encode(&(1e15 + 0.3)), "1000000000000000.2");
    assert_eq!(
        core_encode(&(764842383340062.0 + 0.25)),
        "764842383340062.2"
    );
}

/// And their byte counts.
#[test]
fn ties_do_not_change_the_byte_count() {
    assert_eq!(encoded_len(&(1e15 + 0.3), 4096), Ok(18));
    assert_eq!(encoded_len(&(764842383340062.0 + 0.25), 4096), Ok(17));
}

/// The table from CPython itself, for the model and the core alike.
#[test]
fn floats_match_cpython_table() {
    for &(bits, python) in PYTHON_FLOAT_REPR {
        let f = f64::from_bits(bits);
        assert_eq!(py_float_repr(f), python, "model, {f:e}");
        assert_eq!(core_encode(&f), python, "core, {f:e}");
    }
}

/// `allow_nan=False`: NaN and infinities anywhere refuse the whole value.
#[test]
fn non_finite_floats_are_refused_anywhere() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(encoded_len(&bad, 4096), Err(EncodeError::NonFinite));
        assert_eq!(
            encoded_len(&vec![1.0, bad], 4096),
            Err(EncodeError::NonFinite)
        );
        let nested: std::collections::BTreeMap<&str, Vec<f64>> = [("k", vec![bad])].into();
        assert_eq!(encoded_len(&nested, 4096), Err(EncodeError::NonFinite));
    }
}

/// The seed's example: `"é" * 2200` is 2202 characters but 4402 bytes.
#[test]
fn byte_count_is_utf8_not_characters() {
    let s = "é".repeat(2200);
    assert_eq!(encoded_len(s.as_str(), usize::MAX), Ok(4402));
    assert_eq!(encoded_len(s.as_str(), 4096), Err(EncodeError::TooLarge));
    let edge = "é".repeat(2047);
    assert_eq!(encoded_len(edge.as_str(), 4096), Ok(4096));
}
