//! YAML recordings (VCR cassettes): checked for depth and alias expansion
//! before anything is built, then made JSON values.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Most nesting of collections in a YAML recording (as serde_json's limit
/// for JSON).
pub const MAX_YAML_DEPTH: usize = 128;

/// What aliases may add to a YAML recording, in weight: 64 per node plus
/// the bytes of each scalar, about the memory the copies take. An alias
/// copies its anchor's whole tree, so a few hundred bytes of nested aliases
/// ("billion laughs") could otherwise expand to gigabytes.
pub const MAX_YAML_ALIAS_WEIGHT: u64 = 64 << 20;

const YAML_NODE_WEIGHT: u64 = 64;

/// Runs the YAML event parser over `text` before anything is built:
/// refuses nesting deeper than [`MAX_YAML_DEPTH`] and aliases that would
/// expand past [`MAX_YAML_ALIAS_WEIGHT`]. Costs one pass, no tree.
pub(super) fn check_yaml(text: &str) -> Result<(), String> {
    use yaml_rust2::parser::Parser;
    use yaml_rust2::Event;
    let mut parser = Parser::new_from_str(text);
    // The weight of each complete anchored node, by anchor id.
    let mut anchored: HashMap<usize, u64> = HashMap::new();
    // Open collections: (anchor id, weight so far).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut aliased: u64 = 0;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            format!("not a recognised recording (not JSON, JSON Lines or YAML: {e}); expected a Claude Code session log, Anthropic Messages API exchanges, a VCR cassette or a SWE-agent .traj")
        })?;
        let line = mark.line();
        let complete = match event {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() >= MAX_YAML_DEPTH {
                    return Err(format!(
                        "line {line}: the YAML nests deeper than {MAX_YAML_DEPTH} levels"
                    ));
                }
                open.push((anchor, YAML_NODE_WEIGHT));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => open.pop(),
            Event::Scalar(value, _, anchor, _) => {
                Some((anchor, YAML_NODE_WEIGHT.saturating_add(value.len() as u64)))
            }
            Event::Alias(id) => {
                let weight = *anchored.get(&id).ok_or_else(|| {
                    format!("line {line}: a YAML alias refers to a node that is not complete")
                })?;
                aliased = aliased.saturating_add(weight);
                if aliased > MAX_YAML_ALIAS_WEIGHT {
                    return Err(format!(
                        "line {line}: YAML aliases expand the recording past {} MiB (an alias bomb?); refused",
                        MAX_YAML_ALIAS_WEIGHT >> 20
                    ));
                }
                Some((0, weight))
            }
            _ => None,
        };
        if let Some((anchor, weight)) = complete {
            if anchor > 0 {
                anchored.insert(anchor, weight);
            }
            if let Some(parent) = open.last_mut() {
                parent.1 = parent.1.saturating_add(weight);
            }
        }
    }
}

/// The YAML path of a node, for errors: `interactions[0].response.body`.
fn yaml_path(path: &[String]) -> String {
    if path.is_empty() {
        "the document".into()
    } else {
        path.concat().trim_start_matches('.').to_owned()
    }
}

pub(super) fn yaml_to_json(
    yaml: &yaml_rust2::Yaml,
    path: &mut Vec<String>,
) -> Result<Value, String> {
    use yaml_rust2::Yaml;
    let at = |path: &[String], what: String| format!("{}: {what}", yaml_path(path));
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(text) => {
            let x: f64 = match text.as_str() {
                ".inf" | ".Inf" | ".INF" | "+.inf" => f64::INFINITY,
                "-.inf" | "-.Inf" | "-.INF" => f64::NEG_INFINITY,
                _ => text
                    .parse()
                    .map_err(|_| at(path, format!("YAML number `{text}` cannot be read")))?,
            };
            serde_json::Number::from_f64(x)
                .map(Value::Number)
                .ok_or_else(|| at(path, format!("YAML number `{text}` is not finite")))?
        }
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                path.push(format!("[{index}]"));
                out.push(yaml_to_json(item, path)?);
                path.pop();
            }
            Value::Array(out)
        }
        Yaml::Hash(map) => {
            let mut object = Map::new();
            for (k, v) in map {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    Yaml::Real(r) => r.clone(),
                    Yaml::Null => "null".into(),
                    _ => return Err(at(path, "a YAML mapping key is not a scalar".into())),
                };
                // `1:` and `"1":` are two YAML keys but one JSON key: refused,
                // never read as the last value.
                if object.contains_key(&key) {
                    return Err(at(path, format!("duplicate key `{key}` in a YAML mapping")));
                }
                path.push(format!(".{key}"));
                let value = yaml_to_json(v, path)?;
                path.pop();
                object.insert(key, value);
            }
            Value::Object(object)
        }
        Yaml::Alias(_) => return Err(at(path, "YAML aliases are not supported".into())),
        Yaml::BadValue => return Err(at(path, "a YAML value cannot be read".into())),
    })
}
