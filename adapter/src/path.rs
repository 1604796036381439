//! `replicasPath`: a JSON pointer to the target's count, restricted to what a merge patch can set
//! alone (it replaces an array whole): object keys (no array indices, no escapes) under `/spec`, bounded in
//! length and depth. Reading and the patch are pure.
use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value, json};

/// Longest accepted pointer; the CRD schema says the same.
pub const MAX_LEN: usize = 256;
/// Most keys below the root (`/spec/redis/replicas` has 3).
pub const MAX_DEPTH: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicasPath(Vec<String>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("replicasPath is longer than {MAX_LEN} characters")]
    TooLong,
    #[error("replicasPath {0} is not under /spec: write a pointer like /spec/redis/replicas")]
    NotUnderSpec(String),
    #[error("replicasPath {0} has more than {MAX_DEPTH} keys")]
    TooDeep(String),
    #[error(
        "replicasPath {path} has the key {key}: keys are letters, digits, '-' and '_' (no array indices, no '~' escapes), e.g. /spec/redis/replicas"
    )]
    BadKey { path: String, key: String },
}

impl FromStr for ReplicasPath {
    type Err = PathError;

    fn from_str(s: &str) -> Result<Self, PathError> {
        if s.len() > MAX_LEN {
            return Err(PathError::TooLong);
        }
        let echo = || names::echo(s);
        let Some(rest) = s.strip_prefix("/spec/") else {
            return Err(PathError::NotUnderSpec(echo()));
        };
        let keys: Vec<&str> = std::iter::once("spec").chain(rest.split('/')).collect();
        if keys.len() > MAX_DEPTH {
            return Err(PathError::TooDeep(echo()));
        }
        for key in &keys {
            let ok = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !key.bytes().all(|b| b.is_ascii_digit());
            if !ok {
                return Err(PathError::BadKey {
                    path: echo(),
                    key: names::echo(key),
                });
            }
        }
        Ok(Self(keys.into_iter().map(str::to_owned).collect()))
    }
}

impl fmt::Display for ReplicasPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for key in &self.0 {
            write!(f, "/{key}")?;
        }
        Ok(())
    }
}

/// The counts the adapter reads and writes: a count outside is never written, whatever asks.
pub const COUNTS: std::ops::RangeInclusive<i32> = 0..=i32::MAX;

/// Why the target's count could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("the target has no {0}")]
    Missing(String),
    #[error("the target's {path} is {found}, not an integer count in 0..=2147483647")]
    NotANumber { path: String, found: String },
}

impl ReplicasPath {
    /// The integer at the path in `object` (a whole target); a float with no fraction counts.
    pub fn read(&self, object: &Value) -> Result<i32, ReadError> {
        let mut at = object;
        for (depth, key) in self.0.iter().enumerate() {
            at = at
                .get(key)
                .ok_or_else(|| ReadError::Missing(self.prefix(depth + 1)))?;
        }
        let number = match at {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
            _ => None,
        };
        number
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| COUNTS.contains(n))
            .ok_or_else(|| ReadError::NotANumber {
                path: self.to_string(),
                found: describe(at),
            })
    }

    /// The JSON merge patch that sets only this field of the target read at `resource_version`.
    /// A merge patch never creates an object (only an apply does), and the API server refuses
    /// one whose resourceVersion is not the stored one (409): a target deleted, recreated or
    /// changed since it was read is never written.
    pub fn merge_patch(&self, resource_version: &str, replicas: i32) -> Value {
        let mut value = json!(replicas);
        for key in self.0.iter().rev() {
            let mut object = Map::new();
            object.insert(key.clone(), value);
            value = Value::Object(object);
        }
        let Value::Object(mut body) = value else {
            unreachable!("a path has at least one key")
        };
        body.insert(
            "metadata".into(),
            json!({ "resourceVersion": resource_version }),
        );
        Value::Object(body)
    }

    fn prefix(&self, depth: usize) -> String {
        self.0[..depth].iter().map(|k| format!("/{k}")).collect()
    }
}

/// A short, escaped description of a JSON value (never the whole of a huge one).
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {}", names::echo(s)),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(o) => format!("an object of {} keys", o.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> ReplicasPath {
        s.parse().unwrap()
    }

    #[test]
    fn accepts_object_keys_under_spec() {
        for ok in ["/spec/replicas", "/spec/redis/replicas", "/spec/a_b/c-d/x1"] {
            assert_eq!(path(ok).to_string(), ok);
        }
    }

    #[test]
    fn refuses_what_apply_cannot_own_or_is_outside_spec() {
        let long = format!("/spec/{}", "a".repeat(MAX_LEN));
        let deep = format!("/spec{}", "/a".repeat(MAX_DEPTH));
        for (bad, fix) in [
            ("", "not under /spec"),
            ("/spec", "not under /spec"),
            ("/status/replicas", "not under /spec"),
            ("/metadata/labels", "not under /spec"),
            (".spec.redis.replicas", "not under /spec"),
            ("spec/replicas", "not under /spec"),
            ("/spec/", "has the key"),
            ("/spec//replicas", "has the key"),
            ("/spec/nodes/0/replicas", "has the key \"0\""),
            ("/spec/a~1b", "has the key"),
            ("/spec/a b", "has the key"),
            ("/spec/ä", "has the key"),
            (long.as_str(), "longer than"),
            (deep.as_str(), "more than 16 keys"),
        ] {
            let error = bad.parse::<ReplicasPath>().unwrap_err().to_string();
            assert!(error.contains(fix), "{bad:?}: {error}");
        }
        assert!(
            format!("/spec{}", "/a".repeat(MAX_DEPTH - 1))
                .parse::<ReplicasPath>()
                .is_ok()
        );
    }

    #[test]
    fn reads_the_count_or_says_what_is_there() {
        let p = path("/spec/redis/replicas");
        assert_eq!(p.read(&json!({"spec": {"redis": {"replicas": 3}}})), Ok(3));
        assert_eq!(
            p.read(&json!({"spec": {"redis": {"replicas": 3.0}}})),
            Ok(3)
        );
        assert_eq!(p.read(&json!({"spec": {"redis": {"replicas": 0}}})), Ok(0));
        assert_eq!(
            p.read(&json!({"spec": {}})),
            Err(ReadError::Missing("/spec/redis".into()))
        );
        assert_eq!(p.read(&json!({})), Err(ReadError::Missing("/spec".into())));
        // A scalar in the middle is a missing key, not a panic.
        assert_eq!(
            p.read(&json!({"spec": {"redis": 5}})),
            Err(ReadError::Missing("/spec/redis/replicas".into()))
        );
        for (value, found) in [
            (json!("3"), "the string \"3\""),
            (json!(3.5), "3.5"),
            (json!(-1), "-1"),
            (json!(4_294_967_296_i64), "4294967296"),
            (json!(null), "null"),
            (json!(true), "true"),
            (json!([1, 2]), "an array of 2"),
            (json!({"a": 1}), "an object of 1 keys"),
        ] {
            let error = p
                .read(&json!({"spec": {"redis": {"replicas": value}}}))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(found) && error.contains("/spec/redis/replicas"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_huge_string_is_echoed_bounded() {
        let p = path("/spec/replicas");
        let huge = "x".repeat(1 << 20);
        let error = p
            .read(&json!({"spec": {"replicas": huge}}))
            .unwrap_err()
            .to_string();
        assert!(error.len() < 1024, "{} bytes", error.len());
    }

    #[test]
    fn the_patch_sets_only_the_field_of_the_version_read() {
        let patch = path("/spec/redis/replicas").merge_patch("4711", 4);
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "4711"}, "spec": {"redis": {"replicas": 4}}})
        );
        assert_eq!(path("/spec/redis/replicas").read(&patch), Ok(4));
    }
}
