//! Adds `properties.autoscaling` to values.schema.json as a text edit: every byte outside the
//! added property stays as the author (or the chart's schema generator) wrote it, escapes such
//! as `\u003c` included.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    #[error("values.schema.json is not valid JSON: {0}; fix it before running chartgen app")]
    Parse(String),
    #[error("values.schema.json: {0} must be a JSON object")]
    NotObject(&'static str),
}

/// What to do with an `autoscaling` property the schema already has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Existing {
    /// Replace it when it differs from ours.
    Replace,
    /// Keep it: the chart's schema generator owns it (cozyvalues-gen charts).
    Keep,
}

/// Returns the new schema text. `existing` is `None` when the chart has no schema yet.
pub fn merge(
    existing: Option<&str>,
    autoscaling: &Value,
    policy: Existing,
) -> Result<String, SchemaError> {
    let Some(text) = existing else {
        let root = json!({"$schema": "http://json-schema.org/schema#", "type": "object", "properties": {"autoscaling": autoscaling}});
        return Ok(pretty(&root, "  ", "") + "\n");
    };
    let top = members(text)?.ok_or(SchemaError::NotObject("the top level"))?;
    let unit = indent_unit(text);
    let Some(props) = top.get("properties").copied() else {
        let member = format!(
            "\"properties\": {}",
            pretty(&json!({"autoscaling": autoscaling}), &unit, &unit)
        );
        return Ok(insert_member(
            text,
            span(text, root_raw(text)?),
            &member,
            &unit,
        ));
    };
    let children = members(props.get())?.ok_or(SchemaError::NotObject("`properties`"))?;
    let props_span = span(text, props);
    let child_indent = format!("{}{unit}", line_indent(text, props_span.0));
    match children.get("autoscaling") {
        Some(have) => {
            let same = serde_json::from_str::<Value>(have.get()).ok().as_ref() == Some(autoscaling);
            if same || policy == Existing::Keep {
                return Ok(text.to_owned());
            }
            let (start, end) = span(text, have);
            Ok(format!(
                "{}{}{}",
                &text[..start],
                pretty(autoscaling, &unit, &child_indent),
                &text[end..]
            ))
        }
        None => {
            let member = format!(
                "\"autoscaling\": {}",
                pretty(autoscaling, &unit, &child_indent)
            );
            Ok(insert_member(text, props_span, &member, &unit))
        }
    }
}

/// The object's members as raw slices of `text`, or None when `raw` is not an object.
fn members(raw: &str) -> Result<Option<BTreeMap<String, &RawValue>>, SchemaError> {
    if !raw.trim_start().starts_with('{') {
        return Ok(None);
    }
    serde_json::from_str(raw)
        .map(Some)
        .map_err(|e| SchemaError::Parse(e.to_string()))
}

fn root_raw(text: &str) -> Result<&RawValue, SchemaError> {
    serde_json::from_str(text).map_err(|e| SchemaError::Parse(e.to_string()))
}

/// Byte range of a raw value borrowed from `text`.
fn span(text: &str, raw: &RawValue) -> (usize, usize) {
    let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
    (start, start + raw.get().len())
}

/// Inserts `member` as the last member of the object at `span` (`{ ... }`).
fn insert_member(text: &str, (start, end): (usize, usize), member: &str, unit: &str) -> String {
    let inner = &text[start + 1..end - 1];
    let obj_indent = line_indent(text, start);
    if inner.trim().is_empty() {
        return format!(
            "{}{{\n{obj_indent}{unit}{member}\n{obj_indent}}}{}",
            &text[..start],
            &text[end..]
        );
    }
    // After the last member's last character, before the whitespace leading to `}`.
    let last = start + 1 + inner.trim_end().len();
    let sibling_indent = inner
        .lines()
        .skip(1)
        .find(|l| !l.trim().is_empty())
        .map(|l| l[..l.len() - l.trim_start().len()].to_owned());
    match sibling_indent {
        Some(ind) => format!("{},\n{ind}{member}{}", &text[..last], &text[last..]),
        None => format!("{}, {member}{}", &text[..last], &text[last..]),
    }
}

/// The whitespace at the start of the line holding byte `at`.
fn line_indent(text: &str, at: usize) -> String {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text[line_start..]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// Pretty JSON with `unit` indentation, every line after the first prefixed with `base`.
fn pretty(value: &Value, unit: &str, base: &str) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    value
        .serialize(&mut ser)
        .expect("a Value always serializes");
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.replace('\n', &format!("\n{base}"))
}

/// The whitespace before the first indented line (two spaces when nothing is indented).
fn indent_unit(text: &str) -> String {
    text.lines()
        .map(|l| {
            l.chars()
                .take_while(|c| *c == ' ' || *c == '\t')
                .collect::<String>()
        })
        .find(|w| !w.is_empty())
        .unwrap_or_else(|| "  ".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROP: &str = r#"{"type": "object", "properties": {"enabled": {"type": "boolean"}}}"#;

    fn prop() -> Value {
        serde_json::from_str(PROP).unwrap()
    }

    #[test]
    fn only_the_added_property_changes() {
        let src = "{\n    \"type\": \"object\",\n    \"properties\": {\n        \"zeta\": {\"type\": \"integer\", \"description\": \"a \\u003c b \\u0026 c\"},\n        \"alpha\": {\"type\": \"string\"}\n    }\n}\n";
        let once = merge(Some(src), &prop(), Existing::Replace).unwrap();
        let parsed: Value = serde_json::from_str(&once).unwrap();
        let keys: Vec<&String> = parsed["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["zeta", "alpha", "autoscaling"]);
        assert!(
            once.starts_with(&src[..src.find("\n    }\n}").unwrap()]),
            "{once}"
        );
        assert!(once.contains("\\u003c b \\u0026 c"), "escapes kept: {once}");
        assert!(
            once.contains(",\n        \"autoscaling\": {\n            \"type\": \"object\""),
            "{once}"
        );
        assert!(once.ends_with("\n    }\n}\n"));
        assert_eq!(
            merge(Some(&once), &prop(), Existing::Replace).unwrap(),
            once
        );
        let changed = serde_json::json!({"type": "object"});
        let replaced = merge(Some(&once), &changed, Existing::Replace).unwrap();
        assert!(
            replaced
                .contains("\"autoscaling\": {\n            \"type\": \"object\"\n        }\n    }"),
            "{replaced}"
        );
        assert_eq!(merge(Some(&once), &changed, Existing::Keep).unwrap(), once);
    }

    #[test]
    fn empty_or_missing_properties_and_no_schema() {
        let empty = "{\n  \"properties\": {}\n}";
        let out = merge(Some(empty), &prop(), Existing::Replace).unwrap();
        assert!(
            out.starts_with("{\n  \"properties\": {\n    \"autoscaling\": {"),
            "{out}"
        );
        assert!(!out.ends_with('\n'), "no newline added");
        let none = "{\"type\": \"object\"}\n";
        let out = merge(Some(none), &prop(), Existing::Replace).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["properties"]["autoscaling"],
            prop()
        );
        let created = merge(None, &prop(), Existing::Replace).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&created).unwrap()["properties"]["autoscaling"],
            prop()
        );
        assert!(matches!(
            merge(Some("{"), &prop(), Existing::Replace),
            Err(SchemaError::Parse(_))
        ));
        assert!(matches!(
            merge(Some("[]"), &prop(), Existing::Replace),
            Err(SchemaError::NotObject(_))
        ));
    }
}
