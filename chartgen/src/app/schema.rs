//! Adds `properties.autoscaling` to values.schema.json, keeping the author's key order and
//! indentation.

use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    #[error("values.schema.json is not valid JSON: {0}; fix it before running chartgen app")]
    Parse(String),
    #[error("values.schema.json: {0} must be a JSON object")]
    NotObject(&'static str),
}

/// Returns the new schema text. `existing` is `None` when the chart has no schema yet.
pub fn merge(existing: Option<&str>, autoscaling: Value) -> Result<String, SchemaError> {
    let (mut root, indent, newline) = match existing {
        Some(text) => {
            let root: Value =
                serde_json::from_str(text).map_err(|e| SchemaError::Parse(e.to_string()))?;
            (root, detect_indent(text), text.ends_with('\n'))
        }
        None => (
            json!({"$schema": "http://json-schema.org/schema#", "type": "object", "properties": {}}),
            "  ".to_owned(),
            true,
        ),
    };
    let obj = root
        .as_object_mut()
        .ok_or(SchemaError::NotObject("the top level"))?;
    let props = obj.entry("properties").or_insert_with(|| json!({}));
    props
        .as_object_mut()
        .ok_or(SchemaError::NotObject("`properties`"))?
        .insert("autoscaling".into(), autoscaling);

    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    root.serialize(&mut ser)
        .map_err(|e| SchemaError::Parse(e.to_string()))?;
    let mut out = String::from_utf8_lossy(&buf).into_owned();
    if newline {
        out.push('\n');
    }
    Ok(out)
}

/// The whitespace before the first indented line (two spaces when nothing is indented).
fn detect_indent(text: &str) -> String {
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

    #[test]
    fn keeps_order_and_indent_and_is_idempotent() {
        let src = "{\n    \"type\": \"object\",\n    \"properties\": {\n        \"zeta\": {\"type\": \"integer\"},\n        \"alpha\": {\"type\": \"string\"}\n    }\n}\n";
        let once = merge(Some(src), json!({"type": "object"})).unwrap();
        let keys: Vec<String> = serde_json::from_str::<Value>(&once).unwrap()["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["zeta", "alpha", "autoscaling"]);
        assert!(
            once.contains("\n    \"type\""),
            "four-space indent kept: {once}"
        );
        assert_eq!(merge(Some(&once), json!({"type": "object"})).unwrap(), once);
    }

    #[test]
    fn creates_a_schema_when_absent_and_rejects_bad_json() {
        let out = merge(None, json!({"type": "object"})).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["properties"]["autoscaling"]["type"],
            "object"
        );
        assert!(matches!(
            merge(Some("{"), json!({})),
            Err(SchemaError::Parse(_))
        ));
    }
}
