//! CloudNativePG Poolers next to the chart's Cluster (docs/chartgen.md, "CNPG Poolers"): each
//! `kind: Pooler` the chart's templates render whose `spec.instances` reads a values key of its
//! own gets a ScaleAdapter and a ScaledObject (`engine: pgbouncer`, docs/pooler.md) while
//! `autoscaling.pooler.enabled` is set, with the Cluster's flip safety: its count line becomes
//! static/live like the Cluster's, under `autoscaling.pooler`. A Pooler chartgen cannot follow
//! is named in a note and left as it is; the Cluster's autoscaling never depends on it.

pub(super) mod verify;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};

use super::chart::{Chart, Rewritten, Template};
use super::replica::{Counted, ReplicaLine};
use super::target::{self, Count, Doc, Expr, kind_of, wrap};

pub const API_VERSION: &str = "postgresql.cnpg.io/v1";
pub const KIND: &str = "Pooler";
/// The generated template with the pairs (template name → file name).
pub const FILE: (&str, &str) = ("app/pooler-autoscaling.yaml", "pooler-autoscaling.yaml");
/// The Poolers' helpers, under the chart's name.
const HELPERS: &str = "autoscaling.pooler";
const FIELD: &str = "instances";
/// PgBouncer parameters the scaler's connection budget reads, and their trigger metadata keys.
const POOL_SIZES: [(&str, &str); 3] = [
    ("default_pool_size", "defaultPoolSize"),
    ("reserve_pool_size", "reservePoolSize"),
    ("max_db_connections", "maxDbConnections"),
];

/// A Pooler chartgen wires, as the generated templates take it.
#[derive(Debug, Clone, Serialize)]
pub struct PoolerSpec {
    /// `templates/<file>:<line>` of its `kind:` line in the chart chartgen writes (relative: the
    /// generated files cite only the chart's own).
    pub at: String,
    /// Go-template expressions of its name, namespace and `spec.cluster.name`.
    pub name: String,
    pub namespace: String,
    /// False when it lands in the release namespace (no `namespace:` rendered).
    pub explicit_namespace: bool,
    pub cluster: String,
    pub values_key: String,
    /// Go-template int expression of its count as its own line renders it.
    pub count: String,
    /// The `if`/`with` branches it renders in, each parenthesised.
    pub conditions: Vec<String>,
    pub pool: Vec<PoolSize>,
}

/// A pool size the Pooler's `spec.pgbouncer.parameters` render.
#[derive(Debug, Clone, Serialize)]
pub struct PoolSize {
    /// The trigger metadata key (`defaultPoolSize`).
    pub key: &'static str,
    /// PgBouncer's parameter (`default_pool_size`).
    pub param: &'static str,
    /// Go-template expression of its value; renders empty when unset.
    pub expr: String,
}

/// The Poolers of a chart: those wired, whether every one is, what the author should know, and
/// the templates whose Pooler count lines were rewritten.
pub struct Poolers {
    pub wired: Vec<PoolerSpec>,
    pub all_wired: bool,
    pub notes: Vec<String>,
    pub rewritten: Vec<Rewritten>,
}

/// `autoscaling.pooler`'s defaults, added to the block when the chart renders a Pooler chartgen
/// wires (docs/chartgen.md). A Pooler that goes away drops its clients: scale-down is paced.
pub fn defaults() -> (&'static str, Value) {
    (
        "pooler",
        json!({
            "enabled": false,
            "minReplicas": 2,
            "maxReplicas": 4,
            "target": 100,
            "maxClientWaitSeconds": 1,
            "dryRun": false,
            "transition": false,
            "scaleIn": "enabled",
            "schedules": [],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 60},
                "scaleDown": {
                    "stabilizationWindowSeconds": 600,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                },
            },
        }),
    )
}

/// Finds the Poolers in the chart's templates (each file as `rewritten` left it, else as it is)
/// and rewrites the count line of each one chartgen wires; `cluster_key` is the Cluster's
/// count key, which a Pooler sharing it keeps (its count is the Cluster's by the chart's design).
pub fn wire(chart: &Chart, cluster_key: &str, rewritten: &[Rewritten]) -> anyhow::Result<Poolers> {
    let mut out = Poolers {
        wired: Vec::new(),
        all_wired: true,
        notes: Vec::new(),
        rewritten: Vec::new(),
    };
    for Template { path, text, .. } in chart.sources() {
        let text = rewritten
            .iter()
            .find(|(p, _)| p == path)
            .map_or(text, |(_, t)| t);
        let lines: Vec<&str> = text.lines().collect();
        let mut counts = std::collections::HashMap::new();
        let mut first_key = None;
        // (which Pooler of the file, which of `out.wired`), to place it in the rewritten text.
        let mut placed = Vec::new();
        let kind_lines = |lines: &[&str]| -> Vec<usize> {
            (0..lines.len())
                .filter(|&i| kind_of(lines[i]) == Some(KIND))
                .collect()
        };
        for (nth, kind_line) in kind_lines(&lines).into_iter().enumerate() {
            let at = format!("{}:{}", path.display(), kind_line + 1);
            match read_pooler(text, &lines, kind_line, &at, cluster_key) {
                Ok(Some(Found { spec, line, span })) => {
                    let arg = format!("(list $ {})", out.wired.len());
                    placed.push((nth, out.wired.len()));
                    first_key.get_or_insert_with(|| spec.values_key.clone());
                    counts.insert(line, Counted { span, arg });
                    out.wired.push(spec);
                }
                Ok(None) => {}
                Err(note) => {
                    out.all_wired = false;
                    out.notes.push(note);
                }
            }
        }
        let Some(key) = first_key else { continue };
        let rl = ReplicaLine {
            field: FIELD,
            key: &key,
            chart: &chart.name,
            helpers: HELPERS,
        };
        let rw = rl
            .rewrite(text, &|i| counts.get(&i).cloned())
            .with_context(|| format!("in '{}'", path.display()))?;
        // Named by its line in the chart as written, so a re-run names it the same.
        let after = kind_lines(&rw.text.lines().collect::<Vec<_>>());
        for (nth, wired) in placed {
            out.wired[wired].at = format!("{}:{}", relative(&chart.dir, path), after[nth] + 1);
        }
        out.rewritten.push((path.clone(), rw.text));
    }
    Ok(out)
}

/// A Pooler to wire: what the templates take, and the 0-based line and span of its count.
struct Found {
    spec: PoolerSpec,
    line: usize,
    span: (usize, usize),
}

/// The Pooler whose `kind:` line is 0-based `kind_line` of `text` (at `at`, for the notes): what
/// to wire and its count line and span; None for another group's Pooler; Err(note) when chartgen
/// cannot wire it.
fn read_pooler(
    text: &str,
    lines: &[&str],
    kind_line: usize,
    at: &str,
    cluster_key: &str,
) -> Result<Option<Found>, String> {
    let doc = target::doc_at(text, lines, kind_line);
    if doc.top("apiVersion").is_some_and(|api| api != API_VERSION) {
        return Ok(None);
    }
    let not = |why: String| format!("{at}: the Pooler is not autoscaled: {why}");
    if target::define_at(text, kind_line).is_some() {
        return Err(not(
            "it is rendered inside a `define`, whose `.` is whatever the includer passes".into(),
        ));
    }
    let conditions = target::conditions(text, kind_line).map_err(|why| match why {
        target::Around::Range(over) => not(format!(
            "it is rendered inside `range {over}`, one per entry; give each Pooler a document of its own"
        )),
        target::Around::Unknown(why) => not(why),
    })?;
    let expr = |path: &[&str], field: &str| match doc.field(path, field) {
        Some((_, Expr::Known(e))) => Ok(Some(wrap(&e))),
        Some((line, Expr::Unknown(why))) => Err(not(format!(
            "chartgen cannot read its {}.{field} (line {}): {why}",
            path.join("."),
            line + 1
        ))),
        None => Ok(None),
    };
    let name = expr(&["metadata"], "name")?.ok_or_else(|| not("it has no metadata.name".into()))?;
    let namespace = expr(&["metadata"], "namespace")?;
    let cluster = expr(&["spec", "cluster"], "name")?
        .ok_or_else(|| not("it has no spec.cluster.name, the Cluster its budget needs".into()))?;
    let (line, key, count, span) = count_line(text, lines, &doc, cluster_key).map_err(not)?;
    let spec = PoolerSpec {
        // Where the rewritten template has it: `wire` knows.
        at: String::new(),
        name,
        explicit_namespace: namespace.is_some(),
        namespace: namespace.unwrap_or_else(|| super::DEFAULT_NAMESPACE.to_owned()),
        cluster,
        values_key: key,
        count,
        conditions,
        pool: pool_sizes(&doc, lines),
    };
    Ok(Some(Found { spec, line, span }))
}

/// The Pooler's `spec.instances` line reading a values key of its own: its 0-based line, the
/// key, the count's int expression and the span to rewrite; why not otherwise.
fn count_line(
    text: &str,
    lines: &[&str],
    doc: &Doc,
    cluster_key: &str,
) -> Result<(usize, String, String, (usize, usize)), String> {
    // In a block chartgen wrote, the original line is the first: the live one follows it.
    let found = (doc.first..doc.first + doc.lines.len())
        .filter(|&i| target::ancestors(doc, i) == ["spec"])
        .find_map(|i| Some((i, target::count_at(text, lines, i, FIELD)?)));
    match found {
        None => Err(format!(
            "it has no spec.{FIELD} line (CNPG runs 1); write `{FIELD}: {{{{ .Values.KEY }}}}` to autoscale it"
        )),
        Some((i, Count::Values { key, .. })) if key == cluster_key => Err(format!(
            "its {FIELD} (line {}) reads .Values.{key}, the Cluster's count, so it moves with the Cluster; give it a values key of its own to autoscale it under autoscaling.pooler",
            i + 1
        )),
        Some((i, Count::Values { key, expr, span })) => Ok((
            i,
            key,
            format!("(int {})", wrap(&target::nil_safe(&expr))),
            span,
        )),
        Some((i, Count::Literal { value, .. })) => Err(format!(
            "its {FIELD} is the literal {value} (line {}); write `{FIELD}: {{{{ .Values.KEY }}}}` with `KEY: {value}` in values.yaml to autoscale it",
            i + 1
        )),
        Some((i, Count::Other(why))) => Err(format!(
            "its {FIELD} (line {}): {why}; write `{FIELD}: {{{{ $.Values.KEY }}}}`",
            i + 1
        )),
    }
}

/// The pool sizes the Pooler's `spec.pgbouncer.parameters` render: written out one by one, or
/// the whole map from one values path (`range $k, $v := .Values.X` or `toYaml .Values.X`).
/// What chartgen cannot read is left out: the scaler then assumes PgBouncer's defaults.
fn pool_sizes(doc: &Doc, lines: &[&str]) -> Vec<PoolSize> {
    let parent = ["spec", "pgbouncer", "parameters"];
    let whole = doc
        .line_of(&parent)
        .and_then(|(line, text)| map_source(doc, lines, line, text));
    POOL_SIZES
        .iter()
        .filter_map(|&(param, key)| {
            let expr = match doc.field(&parent, param) {
                Some((_, Expr::Known(e))) => target::nil_safe(unquoted(&e)),
                _ => format!("(index ({} | default dict) \"{param}\")", whole.as_ref()?),
            };
            Some(PoolSize {
                key,
                param,
                expr: wrap(&expr),
            })
        })
        .collect()
}

/// `.Values.X` (nil-safe) when the `parameters:` mapping on 0-based `line` is rendered whole
/// from it, on its line or the next.
fn map_source(doc: &Doc, lines: &[&str], line: usize, text: &str) -> Option<String> {
    let after = text.split_once(':').map_or("", |(_, v)| v.trim());
    let action = if after.starts_with("{{") {
        after
    } else {
        lines.get(line + 1)?.trim()
    };
    let inner = action
        .strip_prefix("{{")?
        .strip_suffix("}}")?
        .trim_matches('-')
        .trim();
    let source = if let Some(range) = inner.strip_prefix("range ") {
        range.split_once(":=")?.1.trim()
    } else if let Some(yaml) = inner.strip_prefix("toYaml ") {
        yaml.split('|').next()?.trim()
    } else {
        inner
            .split('|')
            .next()
            .filter(|_| inner.contains("| toYaml"))?
            .trim()
    };
    match doc.expr_at(line, &format!("{{{{ {source} }}}}")) {
        Expr::Known(e) if e.trim_start_matches('$').starts_with(".Values.") => {
            Some(target::nil_safe(&e))
        }
        _ => None,
    }
}

/// An expression without the trailing `| quote` (`| squote`, `| toString`) CNPG's string map
/// of parameters asks charts for: the trigger quotes it itself.
fn unquoted(expr: &str) -> &str {
    let mut e = expr.trim();
    while let Some((head, last)) = e.rsplit_once('|') {
        if !matches!(last.trim(), "quote" | "squote" | "toString") {
            break;
        }
        e = head.trim_end();
    }
    e
}

/// `path` relative to the chart, for the generated files (which cite only the chart's own).
fn relative(chart: &Path, path: &Path) -> String {
    path.strip_prefix(chart)
        .map_or_else(|_| PathBuf::from(path), Path::to_path_buf)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOLER: &str = "{{- if .Values.pooler.enabled }}\n---\napiVersion: postgresql.cnpg.io/v1\nkind: Pooler\nmetadata:\n  name: {{ .Release.Name }}-pooler-rw\nspec:\n  cluster:\n    name: {{ .Release.Name }}\n  instances: {{ .Values.pooler.instances }}\n  pgbouncer:\n    parameters:\n      default_pool_size: {{ .Values.pooler.defaultPoolSize | quote }}\n      max_client_conn: \"1000\"\n{{- end }}\n";

    fn read(text: &str, cluster_key: &str) -> Result<Option<(PoolerSpec, usize)>, String> {
        let lines: Vec<&str> = text.lines().collect();
        let kind = lines.iter().position(|l| kind_of(l) == Some(KIND)).unwrap();
        read_pooler(text, &lines, kind, "/c/templates/p.yaml:4", cluster_key)
            .map(|found| found.map(|f| (f.spec, f.line)))
    }

    #[test]
    fn a_pooler_with_a_key_of_its_own_is_read_with_its_conditions_cluster_and_pool_sizes() {
        let (spec, line) = read(POOLER, "replicas").unwrap().unwrap();
        assert_eq!(line, 9);
        assert_eq!(spec.values_key, "pooler.instances");
        assert_eq!(spec.name, "(printf \"%v-pooler-rw\" (.Release.Name))");
        assert_eq!(spec.cluster, ".Release.Name");
        assert_eq!(spec.namespace, ".Release.Namespace");
        assert!(!spec.explicit_namespace);
        assert_eq!(spec.conditions, ["(.Values.pooler.enabled)"]);
        let pool: Vec<_> = spec.pool.iter().map(|p| (p.key, p.expr.as_str())).collect();
        assert_eq!(
            pool,
            [(
                "defaultPoolSize",
                "((.Values.pooler | default dict).defaultPoolSize)"
            )],
            "unquoted and nil-safe; the unset sizes are left to the scaler's defaults"
        );
    }

    #[test]
    fn parameters_rendered_whole_from_values_give_each_size_by_index() {
        for parameters in [
            "    parameters:\n      {{- range $k, $v := .Values.ro.parameters }}\n      {{ $k }}: {{ $v | quote }}\n      {{- end }}\n",
            "    parameters: {{- toYaml .Values.ro.parameters | nindent 6 }}\n",
            "    parameters:\n      {{- .Values.ro.parameters | toYaml | nindent 6 }}\n",
        ] {
            let text = format!(
                "kind: Pooler\nmetadata:\n  name: ro\nspec:\n  cluster:\n    name: pg\n  instances: {{{{ .Values.ro.instances }}}}\n  pgbouncer:\n{parameters}"
            );
            let (spec, _) = read(&text, "replicas").unwrap().unwrap();
            assert_eq!(spec.pool.len(), 3, "{parameters}");
            assert_eq!(
                spec.pool[2].expr,
                "(index (((.Values.ro | default dict).parameters) | default dict) \"max_db_connections\")"
            );
        }
    }

    #[test]
    fn a_pooler_chartgen_cannot_wire_is_a_note_saying_why_and_the_fix() {
        let cases = [
            (
                "{{ .Values.pooler.instances }}",
                "pooler.instances",
                "the Cluster's count",
            ),
            ("3", "replicas", "the literal 3"),
            ("{{ .Values.a }}{{ .Values.b }}", "replicas", "$.Values.KEY"),
        ];
        for (count, cluster_key, why) in cases {
            let text = POOLER.replace("{{ .Values.pooler.instances }}", count);
            let note = read(&text, cluster_key).unwrap_err();
            assert!(
                note.starts_with("/c/templates/p.yaml:4: the Pooler is not autoscaled")
                    && note.contains(why),
                "{note}"
            );
        }
        let ranged = POOLER.replace(
            "{{- if .Values.pooler.enabled }}",
            "{{- range .Values.poolers }}",
        );
        assert!(
            read(&ranged, "replicas")
                .unwrap_err()
                .contains("inside `range")
        );
        let nameless = POOLER.replace("  name: {{ .Release.Name }}-pooler-rw\n", "");
        assert!(
            read(&nameless, "replicas")
                .unwrap_err()
                .contains("no metadata.name")
        );
        let helper = format!("{{{{- define \"x.pooler\" }}}}\n{POOLER}{{{{- end }}}}\n");
        assert!(
            read(&helper, "replicas")
                .unwrap_err()
                .contains("inside a `define`")
        );
        let absent = POOLER.replace("  instances: {{ .Values.pooler.instances }}\n", "");
        assert!(
            read(&absent, "replicas")
                .unwrap_err()
                .contains("no spec.instances line")
        );
        let other = POOLER.replace("postgresql.cnpg.io/v1", "example.com/v1");
        assert!(
            read(&other, "replicas").unwrap().is_none(),
            "another group's Pooler"
        );
    }
}
