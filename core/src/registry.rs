//! Typed, range-checked tool signatures for a device's tool registry.
//!
//! `SPEC A1` only asks that arguments be scalars; a device that moves hardware
//! needs more: each tool declares its parameters, their types and ranges, and
//! whether a human must approve the call. [`ToolSpec::check`] refuses any call
//! whose arguments do not fit, naming the parameter and the rule, and hands
//! back those that fit as [`CheckedArguments`], each value read once and
//! kept with its parameter (what a device's command is parsed from);
//! [`tool_set`] registers a list of specs with a [`Run`](crate::Run) so that
//! the run's tool index is the spec's index. A spec is how a device
//! declares a tool in a `static`; the run keeps it as an entry of the one
//! tool table ([`crate::tools::ToolTable`]: name, approval rule, signature).

use core::fmt;

use heapless::Vec;

use crate::action::{ArgumentsRef, JsonStr, ScalarRef, Values};
use crate::limits::MAX_ARGUMENTS;
use crate::run::{ToolSet, ToolSetError};

/// The type and range of one parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// An integer (never a float or a boolean) in `min..=max`.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// `true` or `false`.
    Bool,
    /// A number: an integer or a float (never a boolean), any value an action
    /// may carry (finite, `|x| <= 1e6`, `SPEC A1`).
    Number,
    /// One of these exact strings.
    Choice(&'static [&'static str]),
}

/// One parameter of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// The argument key.
    pub key: &'static str,
    /// Its type and range.
    pub kind: ParamKind,
    /// Whether the argument must be present.
    pub required: bool,
}

/// A tool a device offers: its name, parameters and whether it needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    /// The tool name (as in `SPEC A1`).
    pub name: &'static str,
    /// What the tool does, for listings.
    pub description: &'static str,
    /// Its parameters.
    pub params: &'static [Param],
    /// Whether the operator must approve each call before it runs (`SPEC C`).
    pub needs_approval: bool,
}

/// Why a call's arguments do not fit its tool's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ArgumentError {
    /// A required parameter is absent.
    Missing(&'static str),
    /// Argument `index` has a key the tool does not take.
    Unexpected {
        /// Position of the argument in the proposal.
        index: u8,
    },
    /// The parameter has the wrong JSON type.
    WrongType(&'static str),
    /// The integer parameter is outside its range.
    OutOfRange(&'static str),
    /// The string parameter is not one of the allowed choices.
    NotAChoice(&'static str),
}

impl ArgumentError {
    /// A short machine-readable word for replies.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Missing(_) => "missing-argument",
            Self::Unexpected { .. } => "unexpected-argument",
            Self::WrongType(_) => "wrong-type",
            Self::OutOfRange(_) => "out-of-range",
            Self::NotAChoice(_) => "not-a-choice",
        }
    }
}

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(p) => write!(f, "missing argument `{p}`"),
            Self::Unexpected { index } => {
                write!(f, "argument {index} is not a parameter of this tool")
            }
            Self::WrongType(p) => write!(f, "argument `{p}` has the wrong type"),
            Self::OutOfRange(p) => write!(f, "argument `{p}` is out of range"),
            Self::NotAChoice(p) => write!(f, "argument `{p}` is not one of the allowed values"),
        }
    }
}

impl core::error::Error for ArgumentError {}

/// A call's arguments that fit their tool's signature ([`ToolSpec::check`]):
/// each value with the parameter it fits, in the call's order, read from the
/// proposal once. Parse, then trust: what a device's command is parsed from
/// ([`crate::device::Command::parse`]); a lookup is a comparison of keys,
/// never another pass over the frame.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedArguments<'a> {
    /// The signature's parameters.
    params: &'static [Param],
    /// `(index in params, value)`, in the call's order.
    values: Vec<(usize, ScalarRef<'a>), MAX_ARGUMENTS>,
}

impl<'a> CheckedArguments<'a> {
    /// None yet: what [`check_arguments`] fills.
    pub(crate) const fn new() -> Self {
        Self {
            params: &[],
            values: Vec::new(),
        }
    }

    /// The value of parameter `key`; `None` if the call left that (optional)
    /// parameter out, or the tool has none of that name.
    pub fn get(&self, key: &str) -> Option<ScalarRef<'a>> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The integer parameter `key` ([`ParamKind::Int`]: within its range).
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.get(key) {
            Some(ScalarRef::Int(v)) => Some(v),
            _ => None,
        }
    }

    /// The boolean parameter `key` ([`ParamKind::Bool`]).
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.get(key) {
            Some(ScalarRef::Bool(v)) => Some(v),
            _ => None,
        }
    }

    /// The numeric parameter `key` ([`ParamKind::Number`]) as an `f64`.
    /// Exact: every integer an action may carry (`|x| <= 1e6`) is an `f64`.
    pub fn number(&self, key: &str) -> Option<f64> {
        match self.get(key) {
            Some(ScalarRef::Int(v)) => Some(v as f64),
            Some(ScalarRef::Float(v)) => Some(v),
            _ => None,
        }
    }

    /// The string parameter `key` ([`ParamKind::Choice`]: one of its
    /// choices).
    pub fn text(&self, key: &str) -> Option<JsonStr<'a>> {
        match self.get(key) {
            Some(ScalarRef::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The parameters the call gave, `(key, value)`, in the call's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, ScalarRef<'a>)> + '_ {
        self.values
            .iter()
            .filter_map(|(p, v)| Some((self.params.get(*p)?.key, *v)))
    }

    /// How many parameters the call gave.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the call gave none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl ToolSpec {
    /// Checks `args` against the signature ([`check_arguments`] with this
    /// spec's parameters).
    pub fn check<'a>(
        &self,
        args: &ArgumentsRef<'a>,
    ) -> Result<CheckedArguments<'a>, ArgumentError> {
        check_arguments(self.params, args)
    }
}

/// Checks `args` against the signature `params` (a [`ToolSpec`]'s, or a
/// [`crate::tools::ToolEntry`]'s): no unknown keys, every required
/// parameter present, each value of its type and within its range. The
/// arguments that fit come back with their parameters
/// ([`CheckedArguments`]); the first that does not is the error.
pub fn check_arguments<'a>(
    params: &'static [Param],
    args: &ArgumentsRef<'a>,
) -> Result<CheckedArguments<'a>, ArgumentError> {
    let mut members = Values::new();
    for (index, member) in args.iter().enumerate() {
        // Never: a validated object has at most `MAX_ARGUMENTS` members.
        members
            .push(member)
            .map_err(|_| ArgumentError::Unexpected { index: index as u8 })?;
    }
    let mut checked = CheckedArguments::new();
    check_into(params, &members, &mut checked)?;
    Ok(checked)
}

/// [`check_arguments`] of the members `args` (an arguments object's, in
/// order: [`ArgumentsRef::iter`], or the values the device gate's reading
/// of the document kept) into `checked` (emptied first; left partly filled
/// on an error): the device gate keeps the checked arguments in its own
/// frame, where a returned value would be copied in with `memcpy`
/// (about 200 bytes on a 32-bit board, as many instructions before the
/// verdict).
// Kept out of line and not generic: inlined into a caller built for size
// (the firmware), or instantiated there, its moves would become calls to
// `memcpy`.
#[inline(never)]
pub(crate) fn check_into<'a>(
    params: &'static [Param],
    args: &[(JsonStr<'a>, ScalarRef<'a>)],
    checked: &mut CheckedArguments<'a>,
) -> Result<(), ArgumentError> {
    checked.params = params;
    checked.values.clear();
    // One pass over the arguments (a lookup per parameter would be a
    // pass each): every argument is matched to its parameter, then the
    // parameters are checked in their order. The matches are what the
    // call's command is parsed from.
    let found = &mut checked.values;
    for (index, &(key, value)) in args.iter().enumerate() {
        let param = params
            .iter()
            .position(|p| key == p.key)
            .ok_or(ArgumentError::Unexpected { index: index as u8 })?;
        // Cannot fail: there are at most MAX_ARGUMENTS arguments.
        let _ = found.push((param, value));
    }
    for (at, param) in params.iter().enumerate() {
        let value = found.iter().find(|(p, _)| *p == at).map(|(_, v)| *v);
        let Some(value) = value else {
            if param.required {
                return Err(ArgumentError::Missing(param.key));
            }
            continue;
        };
        match (param.kind, value) {
            (ParamKind::Int { min, max }, ScalarRef::Int(v)) => {
                if !(min..=max).contains(&v) {
                    return Err(ArgumentError::OutOfRange(param.key));
                }
            }
            (ParamKind::Bool, ScalarRef::Bool(_)) => {}
            (ParamKind::Number, ScalarRef::Int(_) | ScalarRef::Float(_)) => {}
            (ParamKind::Choice(choices), ScalarRef::Str(s)) => {
                if !choices.iter().any(|c| s == *c) {
                    return Err(ArgumentError::NotAChoice(param.key));
                }
            }
            _ => return Err(ArgumentError::WrongType(param.key)),
        }
    }
    Ok(())
}

/// The tools of `specs`, registered in order ([`ToolSet::from_specs`]):
/// tool index `i` of a run built with this set is `specs[i]`. Fails as
/// [`ToolSet::try_add`] does (an invalid or repeated name, more than `N`
/// tools).
pub fn tool_set<const N: usize>(specs: &[ToolSpec]) -> Result<ToolSet<N>, ToolSetError> {
    ToolSet::from_specs(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15 (typed signatures): each argument error has its own word
    /// and names the parameter (or the argument's position) and the rule
    /// in its text. Found by cargo-mutants (the whole-core run, shard 1/4).
    #[test]
    fn argument_errors_have_a_word_each_and_say_which_parameter() {
        let cases = [
            (
                ArgumentError::Missing("name"),
                "missing-argument",
                "missing argument `name`",
            ),
            (
                ArgumentError::Unexpected { index: 2 },
                "unexpected-argument",
                "argument 2 is not a parameter of this tool",
            ),
            (
                ArgumentError::WrongType("a"),
                "wrong-type",
                "argument `a` has the wrong type",
            ),
            (
                ArgumentError::OutOfRange("brightness"),
                "out-of-range",
                "argument `brightness` is out of range",
            ),
            (
                ArgumentError::NotAChoice("name"),
                "not-a-choice",
                "argument `name` is not one of the allowed values",
            ),
        ];
        for (error, word, text) in cases {
            assert_eq!((error.as_str(), error.to_string().as_str()), (word, text));
        }
    }
    use crate::action::ActionRef;

    const LIGHT_SET: ToolSpec = ToolSpec {
        name: "HassLightSet",
        description: "set a light's brightness",
        params: &[
            Param {
                key: "name",
                kind: ParamKind::Choice(&["lamp", "fan"]),
                required: true,
            },
            Param {
                key: "brightness",
                kind: ParamKind::Int { min: 0, max: 100 },
                required: true,
            },
        ],
        needs_approval: false,
    };

    /// Runs `f` on the arguments object `json`, read as a proposal's.
    fn with_args<R>(json: &str, f: impl FnOnce(&ArgumentsRef<'_>) -> R) -> R {
        let text =
            format!(r#"{{"kind":"tool","call_id":"c","name":"HassLightSet","arguments":{json}}}"#);
        match ActionRef::parse(text.as_bytes()).unwrap() {
            ActionRef::Tool(call) => f(&call.arguments),
            ActionRef::Final { .. } => unreachable!(),
        }
    }

    fn check(spec: &ToolSpec, json: &str) -> Result<(), ArgumentError> {
        with_args(json, |args| spec.check(args).map(|_| ()))
    }

    #[test]
    fn ranges_are_checked_on_both_sides() {
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":0}"#),
            Ok(())
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":100}"#),
            Ok(())
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":101}"#),
            Err(ArgumentError::OutOfRange("brightness"))
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":-1}"#),
            Err(ArgumentError::OutOfRange("brightness"))
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":50.0}"#),
            Err(ArgumentError::WrongType("brightness"))
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"door","brightness":5}"#),
            Err(ArgumentError::NotAChoice("name"))
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp"}"#),
            Err(ArgumentError::Missing("brightness"))
        );
        assert_eq!(
            check(&LIGHT_SET, r#"{"name":"lamp","brightness":5,"x":1}"#),
            Err(ArgumentError::Unexpected { index: 2 })
        );
    }

    const ADD: ToolSpec = ToolSpec {
        name: "add",
        description: "a + b",
        params: &[
            Param {
                key: "a",
                kind: ParamKind::Number,
                required: true,
            },
            Param {
                key: "b",
                kind: ParamKind::Number,
                required: true,
            },
        ],
        needs_approval: false,
    };

    #[test]
    fn numbers_take_integers_and_floats_but_not_booleans() {
        assert_eq!(check(&ADD, r#"{"a":7,"b":8}"#), Ok(()));
        assert_eq!(check(&ADD, r#"{"a":2.5,"b":-1e6}"#), Ok(()));
        assert_eq!(
            check(&ADD, r#"{"a":true,"b":1}"#),
            Err(ArgumentError::WrongType("a"))
        );
        assert_eq!(
            check(&ADD, r#"{"a":1,"b":"2"}"#),
            Err(ArgumentError::WrongType("b"))
        );
        assert_eq!(
            check(&ADD, r#"{"a":1,"b":null}"#),
            Err(ArgumentError::WrongType("b"))
        );
        with_args(r#"{"a":7,"b":0.5}"#, |both| {
            let both = ADD.check(both).unwrap();
            assert_eq!(both.number("a"), Some(7.0));
            assert_eq!(both.number("b"), Some(0.5));
            assert_eq!(both.number("c"), None);
        });
    }

    #[test]
    fn tool_set_indices_follow_the_specs() {
        let set: ToolSet = tool_set(&[ADD, LIGHT_SET]).unwrap();
        assert_eq!(set.position("add"), Some(0));
        assert_eq!(set.position("HassLightSet"), Some(1));
        assert_eq!(tool_set::<8>(&[ADD, ADD]), Err(ToolSetError::Duplicate));
        assert_eq!(tool_set::<1>(&[ADD, LIGHT_SET]), Err(ToolSetError::Full));
    }

    /// A timer's signature: every kind, one parameter optional.
    const TIMER: ToolSpec = ToolSpec {
        name: "Timer",
        description: "every kind of parameter",
        params: &[
            Param {
                key: "name",
                kind: ParamKind::Choice(&["lamp", "valve"]),
                required: true,
            },
            Param {
                key: "minutes",
                kind: ParamKind::Int { min: 1, max: 90 },
                required: true,
            },
            Param {
                key: "repeat",
                kind: ParamKind::Bool,
                required: false,
            },
            Param {
                key: "gain",
                kind: ParamKind::Number,
                required: false,
            },
        ],
        needs_approval: false,
    };

    /// Issue 15 (parse, then trust): the check hands back the values it
    /// read, each with its parameter, in the call's order; each typed
    /// reader answers only for its own kind, and a parameter the call left
    /// out, or one the tool lacks, is `None`.
    #[test]
    fn a_check_hands_back_the_arguments_it_read() {
        let json = r#"{"minutes":25,"name":"valve","gain":0.5}"#;
        with_args(json, |args| {
            let checked = TIMER.check(args).unwrap();
            assert_eq!(checked.len(), 3);
            assert!(!checked.is_empty());
            let keys: std::vec::Vec<&str> = checked.iter().map(|(k, _)| k).collect();
            assert_eq!(keys, ["minutes", "name", "gain"]);
            assert_eq!(checked.get("minutes"), Some(ScalarRef::Int(25)));
            assert_eq!(checked.int("minutes"), Some(25));
            assert_eq!(checked.number("minutes"), Some(25.0));
            assert_eq!(checked.number("gain"), Some(0.5));
            assert!(checked.text("name").is_some_and(|t| t == "valve"));
            assert_eq!(checked.int("name"), None);
            assert_eq!(checked.number("name"), None);
            assert_eq!(checked.bool("name"), None);
            assert_eq!(checked.int("gain"), None);
            assert!(checked.text("minutes").is_none());
            // Left out, and not a parameter at all.
            assert_eq!(checked.get("repeat"), None);
            assert_eq!(checked.get("seconds"), None);
        });
        with_args(r#"{"repeat":true,"name":"lamp","minutes":1}"#, |args| {
            let checked = TIMER.check(args).unwrap();
            assert_eq!(checked.bool("repeat"), Some(true));
            assert_eq!(checked.int("repeat"), None);
        });
        with_args("{}", |args| {
            let none = ToolSpec {
                params: &[],
                ..TIMER
            };
            assert!(none.check(args).unwrap().is_empty());
            assert_eq!(TIMER.check(args), Err(ArgumentError::Missing("name")));
        });
    }
}
