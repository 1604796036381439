//! What to wire, read from the target's document: the count expression, the conditions, the
//! name and namespace (checked against the flags) and the synchronous quorum.

use anyhow::bail;

use super::CountLines;
use crate::app::engine::Engine;
use crate::app::settings::{self, Settings};
use crate::app::target::{self, Around, Doc, Expr, wrap};
use crate::app::{AppSpec, DEFAULT_NAMESPACE, values};

/// What to wire, read from the target's document (the first count line's): the count
/// expression, the conditions, the name and namespace, the quorum; and the quorum expression.
pub(super) fn target_spec(
    c: &CountLines<'_>,
    settings: &Settings,
    values_root: &serde_json::Map<String, serde_json::Value>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(AppSpec, String)> {
    let (kind, field, values_key) = (&c.kind, &c.field, &c.values_key);
    let target = c
        .found
        .first()
        .expect("rewrite_replica_lines finds at least one");
    let lines: Vec<&str> = target.text.lines().collect();
    let doc = target::doc_at(target.text, &lines, target.line);
    let at = |line: usize| format!("{}:{}", target.path.display(), line + 1);
    let count = count_expr(c, values_root, &at)?;
    let kind_line = doc.top_line("kind").unwrap_or(doc.first);
    let conditions = target::conditions(target.text, kind_line).map_err(|why| match why {
        Around::Unknown(why) => anyhow::anyhow!(
            "{}: the {kind} renders under a condition chartgen cannot give the ScaledObject: {why}",
            at(kind_line)
        ),
        Around::Range(over) => anyhow::anyhow!(
            "{}: the {kind} is rendered inside `range {over}`, one per entry; chartgen scales one {kind} per chart",
            at(kind_line)
        ),
    })?;
    let (target_name, target_namespace) = identity(c, &doc, &at, settings)?;
    let max_sync = match c.known.engine {
        Engine::Cnpg => quorum(&doc, settings, values_root, &at, notes),
        // Redis replication is asynchronous: no quorum (the scaler refuses maxSyncReplicas).
        Engine::Redis => {
            redis_engine(&doc).map_err(|(line, e)| anyhow::anyhow!("{}: {e}", at(line)))?;
            String::new()
        }
    };
    let path = c.known.parents().iter().map(|p| (*p).to_owned());
    let spec = AppSpec {
        engine: c.known.engine,
        explicit_namespace: target_namespace != DEFAULT_NAMESPACE,
        path: path.chain([field.clone()]).collect(),
        field: field.clone(),
        values_key: values_key.clone(),
        target_api_version: settings
            .target_api_version
            .clone()
            .unwrap_or_else(|| c.known.api_version.into()),
        target_kind: kind.clone(),
        target_name,
        target_namespace,
        scaler_address: settings
            .scaler_address
            .clone()
            .unwrap_or_else(|| "cozy-autoscaling-scaler.cozy-autoscaling.svc:6000".into()),
        count,
        conditions,
        poolers: Vec::new(),
        all_poolers_wired: true,
    };
    if let Some(api) = doc.top("apiVersion")
        && api != spec.target_api_version
    {
        notes.push(format!(
            "{} declares apiVersion `{api}`, the ScaledObject targets `{}`; pass --target-api-version if that is wrong",
            at(doc.first),
            spec.target_api_version
        ));
    }
    Ok((spec, max_sync))
}

/// The Go-template int expression of the count, as the target's first count line renders it;
/// refused when it reads a values key values.yaml lacks and has no template default.
fn count_expr(
    c: &CountLines<'_>,
    values_root: &serde_json::Map<String, serde_json::Value>,
    at: &dyn Fn(usize) -> String,
) -> anyhow::Result<String> {
    let (target, values_key) = (&c.found[0], &c.values_key);
    let lines: Vec<&str> = target.text.lines().collect();
    let Some(target::Count::Values { expr: count, .. }) =
        target::count_at(target.text, &lines, target.line, &c.field)
    else {
        unreachable!("rewrite_replica_lines found a count line reading a values key here")
    };
    // A template default (`| default 3`) is the count while the value is unset.
    if !count.contains("default") && !values::has_path(values_root, values_key) {
        bail!(
            "{}: `{}` reads `.Values.{values_key}`, which values.yaml does not have, so the chart has no count to start from (the ScaledObject's floor and the disabled render need it); add {} of values.yaml, with the count the chart runs by default, and run chartgen app again",
            at(target.line),
            lines[target.line].trim(),
            yaml_key(values_key, "3")
        );
    }
    Ok(format!("(int {})", wrap(&target::nil_safe(&count))))
}

/// A literal `spec.engine` of the RedisFailover must be one its operator runs (Redis or Valkey:
/// both are driven alike); one the template computes is checked where it renders, by --verify.
fn redis_engine(doc: &Doc) -> Result<(), (usize, String)> {
    let Some((line, value)) = doc.spec("engine") else {
        return Ok(());
    };
    // A literal, bare, quoted or in an action, reads back as a Go string literal; anything
    // else (`"x" | lower` too) is computed.
    match target::value_expr(value) {
        Expr::Known(e) => match serde_json::from_str::<String>(&e) {
            Ok(literal) => names::redis_failover::check_engine(&literal).map_err(|why| (line, why)),
            Err(_) => Ok(()),
        },
        Expr::Unknown(_) => Ok(()),
    }
}

/// The target's name and namespace expressions, checked against the flags, and every other
/// count line's document naming the same object.
fn identity(
    c: &CountLines<'_>,
    doc: &Doc,
    at: &dyn Fn(usize) -> String,
    settings: &Settings,
) -> anyhow::Result<(String, String)> {
    let name = resolve(
        "name",
        doc.metadata("name").map(|(l, e)| (at(l), e)),
        None,
        settings.target_name.as_deref(),
        "--target-name",
    )?;
    let namespace = resolve(
        "namespace",
        doc.metadata("namespace").map(|(l, e)| (at(l), e)),
        Some(DEFAULT_NAMESPACE),
        settings.target_namespace.as_deref(),
        "--target-namespace",
    )?;
    for other in &c.found[1..] {
        let other_lines: Vec<&str> = other.text.lines().collect();
        let other_doc = target::doc_at(other.text, &other_lines, other.line);
        if other_doc.metadata("name").map(|(_, e)| e) != doc.metadata("name").map(|(_, e)| e) {
            bail!(
                "{} and {}:{} both render `{}` from .Values.{} for differently named {}s; chartgen scales one target per chart",
                at(c.found[0].line),
                other.path.display(),
                other.line + 1,
                c.field,
                c.values_key,
                c.kind
            );
        }
    }
    Ok((name, namespace))
}

/// The expression to use for the target's `what`: the template's own (`derived`, located at a
/// file:line), else `fallback` when the template has no such field, checked against `given`.
fn resolve(
    what: &str,
    derived: Option<(String, Expr)>,
    fallback: Option<&str>,
    given: Option<&str>,
    flag: &str,
) -> anyhow::Result<String> {
    let derived = match derived {
        Some((at, Expr::Known(e))) => Some((at, e)),
        Some((at, Expr::Unknown(why))) => {
            return given.map(str::to_owned).ok_or_else(|| {
                anyhow::anyhow!(
                    "cannot tell the target's metadata.{what} from {at}: {why}; pass {flag} with the Go-template expression that renders it (for example {flag} 'include \"mychart.fullname\" .')"
                )
            });
        }
        None => fallback.map(|f| {
            (
                "(no metadata.".to_owned() + what + " in the template)",
                f.to_owned(),
            )
        }),
    };
    match (derived, given) {
        (Some((_, e)), None) => Ok(wrap(&e)),
        (Some((_, e)), Some(g)) if same_expr(&e, g) => Ok(wrap(g)),
        (Some((at, e)), Some(g)) => bail!(
            "{flag} '{g}' disagrees with the template's metadata.{what} `{e}` at {at}; drop {flag} (and its entry in {}) or fix the template",
            settings::FILE
        ),
        (None, Some(g)) => Ok(wrap(g)),
        (None, None) => bail!(
            "the target's template has no metadata.{what} chartgen can read; pass {flag} with the Go-template expression that renders it"
        ),
    }
}

fn same_expr(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let mut s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
        while s.starts_with('(') && s.ends_with(')') {
            s = s[1..s.len() - 1].trim().to_owned();
        }
        s
    };
    norm(a) == norm(b)
}

/// The Go-template int expression of the synchronous quorum, from `--max-sync-replicas-key`
/// or from wherever the target template sets it; empty when the chart has no quorum setting.
fn quorum(
    doc: &Doc,
    settings: &Settings,
    values_root: &serde_json::Map<String, serde_json::Value>,
    at: &dyn Fn(usize) -> String,
    notes: &mut Vec<String>,
) -> String {
    let exprs: Vec<String> = match settings.max_sync_replicas_key.as_deref() {
        Some("") => Vec::new(),
        Some(key) => {
            if !values::has_path(values_root, key) {
                notes.push(format!(
                    "values.yaml has no `{key}`: the quorum reads as 0 until it is set"
                ));
            }
            vec![target::chain("", key)]
        }
        None => doc
            .quorum()
            .into_iter()
            .filter_map(|(line, e)| match e {
                Expr::Known(e) => Some(wrap(&target::nil_safe(&e))),
                Expr::Unknown(why) => {
                    notes.push(format!(
                        "{}: the synchronous quorum is set here but chartgen cannot read it ({why}); the floor leaves it out and the scaler reads it from the live {}; pass --max-sync-replicas-key KEY to include it",
                        at(line),
                        doc.top("kind").unwrap_or("target")
                    ));
                    None
                }
            })
            .collect(),
    };
    match exprs.as_slice() {
        [] => String::new(),
        [one] => format!("(int {one})"),
        many => format!(
            "(max {})",
            many.iter()
                .map(|e| format!("(int {e})"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Where to add `path` with `value` in values.yaml, in words: "`b: 3` under `a:`".
fn yaml_key(path: &str, value: &str) -> String {
    match path.rsplit_once('.') {
        None => format!("`{path}: {value}` at the top level"),
        Some((parent, last)) => format!("`{last}: {value}` under `{parent}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_redis_engine_is_checked_and_a_computed_one_left_to_the_render() {
        let engine = |line: &str| {
            let text = format!("kind: RedisFailover\nspec:\n  {line}\n  redis:\n    replicas: 3\n");
            let lines: Vec<&str> = text.lines().collect();
            redis_engine(&target::doc_at(&text, &lines, 0))
        };
        for ok in [
            "sentinel: {}",
            "engine: Valkey",
            "engine: \"Redis\" # quoted",
            "engine: {{ .Values.engine }}",
            "engine: {{ \"VALKEY\" | title }}",
        ] {
            assert_eq!(engine(ok), Ok(()), "{ok}");
        }
        for bad in ["engine: valkey", "engine: '{{ \"KeyDB\" }}'"] {
            let (line, why) = engine(bad).unwrap_err();
            assert_eq!(line, 2, "{bad}");
            assert!(
                why.starts_with("spec.engine ") && why.contains("Redis or Valkey"),
                "{why}"
            );
        }
    }

    #[test]
    fn target_expressions_are_checked_against_the_flag() {
        let derived = || {
            Some((
                "t.yaml:4".to_owned(),
                Expr::Known("include \"pg.fullname\" .".into()),
            ))
        };
        assert_eq!(
            resolve("name", derived(), None, None, "--target-name").unwrap(),
            "(include \"pg.fullname\" .)"
        );
        assert!(
            resolve(
                "name",
                derived(),
                None,
                Some("(include  \"pg.fullname\" .)"),
                "--target-name"
            )
            .is_ok()
        );
        let err = resolve(
            "name",
            derived(),
            None,
            Some(".Release.Name"),
            "--target-name",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(".Release.Name")
                && err.contains("pg.fullname")
                && err.contains("t.yaml:4"),
            "{err}"
        );
        let unknown = Some(("t.yaml:4".to_owned(), Expr::Unknown("why".into())));
        let err = resolve("name", unknown.clone(), None, None, "--target-name")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--target-name") && err.contains("t.yaml:4"),
            "{err}"
        );
        assert_eq!(
            resolve("name", unknown, None, Some("$.Values.n"), "--target-name").unwrap(),
            "$.Values.n"
        );
        assert_eq!(
            resolve(
                "namespace",
                None,
                Some(DEFAULT_NAMESPACE),
                None,
                "--target-namespace"
            )
            .unwrap(),
            DEFAULT_NAMESPACE
        );
    }
}
