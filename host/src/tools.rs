//! The built-in demo tools that `budgetgate eval`, `run` and the examples use.

use budgetgate_core::ScalarRef;
use serde_json::{json, Number, Value};

use crate::convert::value_from_arguments_ref;
use crate::driver::{Args, Tool};

/// The kinds of demo tool, under the names a request gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoKind {
    /// `a + b` for exactly two numeric (non-boolean) arguments `a`, `b`.
    Add,
    /// Returns its arguments object unchanged.
    Echo,
    /// Always fails.
    Fail,
    /// `s` repeated `n` times, for exactly `s` (string) and `n` (integer 0..=10000).
    Repeat,
    /// No arguments → `{"count": 15, "items": [1, 2.5, "é", null, true]}`.
    Nested,
}

/// Repeat results above this many bytes are refused by the tool itself
/// without being built; they would be over the 4096-byte result limit anyway.
const REPEAT_BUILD_LIMIT: usize = 1 << 20;

impl DemoKind {
    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "add" => Self::Add,
            "echo" => Self::Echo,
            "fail" => Self::Fail,
            "repeat" => Self::Repeat,
            "nested" => Self::Nested,
            _ => return None,
        })
    }

    /// Every kind's name.
    pub const NAMES: [&'static str; 5] = ["add", "echo", "fail", "repeat", "nested"];

    /// Calls the tool.
    pub fn call(self, args: &Args<'_>) -> Result<Value, String> {
        match self {
            Self::Add => {
                let Some((a, b)) = exactly(args, "a", "b") else {
                    return Err("add takes exactly a and b".into());
                };
                match (a, b) {
                    (ScalarRef::Int(a), ScalarRef::Int(b)) => Ok(Value::from(a + b)),
                    (a, b) => {
                        let (a, b) = (float(&a)?, float(&b)?);
                        Number::from_f64(a + b)
                            .map(Value::Number)
                            .ok_or_else(|| "not finite".into())
                    }
                }
            }
            Self::Echo => Ok(value_from_arguments_ref(args)),
            Self::Fail => Err("this tool always fails".into()),
            Self::Repeat => match exactly(args, "s", "n") {
                Some((ScalarRef::Str(s), ScalarRef::Int(n))) if (0..=10_000).contains(&n) => {
                    let s: String = s.chars().collect();
                    let n = usize::try_from(n).map_err(|e| e.to_string())?;
                    if s.len().saturating_mul(n) > REPEAT_BUILD_LIMIT {
                        return Err("result too large to build".into());
                    }
                    Ok(Value::from(s.repeat(n)))
                }
                _ => Err("repeat takes exactly s (string) and n (integer 0..=10000)".into()),
            },
            Self::Nested => {
                if !args.is_empty() {
                    return Err("nested takes no arguments".into());
                }
                Ok(json!({"count": 15, "items": [1, 2.5, "é", null, true]}))
            }
        }
    }

    /// The tool as a closure for the driver.
    pub fn tool<'t>(self) -> Tool<'t> {
        Box::new(move |args| self.call(args))
    }
}

/// The values of `first` and `second` when they are exactly the arguments
/// (in either order), read in one pass over them.
fn exactly<'a>(
    args: &Args<'a>,
    first: &str,
    second: &str,
) -> Option<(ScalarRef<'a>, ScalarRef<'a>)> {
    if args.len() != 2 {
        return None;
    }
    let (mut one, mut two) = (None, None);
    for (key, value) in args.iter() {
        if key == first {
            one = Some(value);
        } else if key == second {
            two = Some(value);
        }
    }
    one.zip(two)
}

fn float(v: &ScalarRef<'_>) -> Result<f64, String> {
    match v {
        ScalarRef::Int(i) => Ok(*i as f64),
        ScalarRef::Float(f) => Ok(*f),
        _ => Err("not a number".into()),
    }
}
