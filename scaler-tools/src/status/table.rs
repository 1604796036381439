//! `scaler status`'s rows, from what was read (pure: no I/O, the clock passed in).
//!
//! One row per ScaledObject this scaler serves, joined with its Cluster (a CNPG trigger's), its
//! HPA and the scaler's decision (`/decisions`), sorted trouble first: broken (invalid metadata,
//! failing, no decision), then degraded (serving a stale answer, the HPA unable to scale), then
//! held by a guard (brake, stuck, quota, connection budget), then held on purpose (dry run,
//! scale-in hold, schedule, quorum floor), then fine; by namespace and name within each. A
//! source that could not be read leaves its columns empty (`?`) and is named in [`missing`].
use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use scaler::decisions::{Entry, Page};
use scaler::scaledobject::Trigger;
use scaler_core::metadata::{self, Engine};

/// A ScaledObject whose trigger names this scaler: what its row needs, the metadata parsed.
#[derive(Debug, Clone)]
pub struct Object {
    pub namespace: String,
    pub name: String,
    /// The trigger's scalerAddress, cut just past what a row shows.
    pub address: String,
    /// The object the metadata names (a Cluster, RedisFailover or Pooler, as its engine says),
    /// or why the metadata is invalid.
    pub cluster: Result<(Engine, String), String>,
    /// The HPA KEDA made for it.
    pub hpa: String,
}

impl Object {
    /// Parses the trigger's metadata at once, so a list of ScaledObjects keeps no metadata
    /// however much each holds (the tenant writes it); the texts kept are cut one character
    /// past their bound, so [`escaped`] still marks them cut.
    pub fn new(namespace: String, name: String, trigger: &Trigger, hpa: String) -> Self {
        let cut = |s: &str, max: usize| s.chars().take(max + 1).collect::<String>();
        // The same parser as serve: an error here is the INVALID_ARGUMENT KEDA gets.
        let cluster = metadata::parse(&name, &trigger.metadata)
            .map(|config| (config.engine, config.cluster))
            .map_err(|e| cut(&e.to_string(), ERROR_MAX));
        Object {
            namespace,
            name,
            address: cut(&trigger.address, FIELD_MAX),
            cluster,
            hpa,
        }
    }
}

/// What a CNPG Cluster says.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub namespace: String,
    pub name: String,
    pub instances: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub reason: Option<String>,
}

/// What an HPA says.
#[derive(Debug, Clone)]
pub struct Hpa {
    pub namespace: String,
    pub name: String,
    pub desired: Option<i32>,
    pub last_scale: Option<jiff::Timestamp>,
    pub conditions: Vec<Condition>,
}

/// Everything read; `Err` says why a source is missing.
pub struct Inputs {
    pub objects: Result<Vec<Object>, String>,
    pub clusters: Result<Vec<Cluster>, String>,
    pub hpas: Result<Vec<Hpa>, String>,
    pub decisions: Result<Page, String>,
    pub now: jiff::Timestamp,
}

/// How much a row needs a look; the order rows are listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// No usable decision: KEDA gets errors (or never asked).
    Broken,
    /// A decision, but stale behind a failing evaluation, or the HPA cannot act on it.
    Degraded,
    /// A guard holds the count against the load: brake, stuck, quota.
    Guarded,
    /// Held by the operator's settings: dry run, scale-in hold, schedule, quorum floor.
    Held,
    Ok,
    /// The decision source is missing: nothing is known.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HpaState {
    pub name: String,
    pub desired: Option<i32>,
    pub last_scale_time: Option<String>,
    pub last_scale_age_seconds: Option<u64>,
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    /// The name of the object whose count is decided, of the engine's kind.
    pub cluster: Option<String>,
    /// `None` with invalid metadata.
    pub engine: Option<Engine>,
    pub current: Option<u32>,
    pub desired: Option<u32>,
    pub recommended: Option<u32>,
    /// The decision's reason, or `invalid-metadata`, `error` (no good decision), `no-decision`
    /// (the scaler holds none: KEDA has not asked it), `unknown` (no decision source).
    pub reason: String,
    pub severity: Severity,
    pub scaler_address: Option<String>,
    pub hpa: Option<HpaState>,
    pub last_error: Option<String>,
    pub last_error_age_seconds: Option<u64>,
}

fn severity_of(reason: &str) -> Severity {
    match reason {
        "brake" | "stuck" | "quota" | "quota-unreadable" | "connection-budget" => Severity::Guarded,
        "dry-run" | "scale-in-hold" | "schedule" | "quorum" => Severity::Held,
        _ => Severity::Ok,
    }
}

fn hpa_state(hpa: &Hpa, now: jiff::Timestamp) -> HpaState {
    HpaState {
        name: hpa.name.clone(),
        desired: hpa.desired,
        last_scale_time: hpa.last_scale.map(|t| t.to_string()),
        last_scale_age_seconds: hpa.last_scale.map(|t| age(t, now)),
        conditions: hpa.conditions.clone(),
    }
}

fn age(t: jiff::Timestamp, now: jiff::Timestamp) -> u64 {
    u64::try_from(now.duration_since(t).as_secs()).unwrap_or(0)
}

/// The HPA cannot act: AbleToScale or ScalingActive is False.
fn hpa_stuck(hpa: Option<&HpaState>) -> bool {
    hpa.is_some_and(|h| {
        h.conditions.iter().any(|c| {
            matches!(c.kind.as_str(), "AbleToScale" | "ScalingActive") && c.status == "False"
        })
    })
}

/// Every row, sorted trouble first.
pub fn rows(inputs: &Inputs) -> Vec<Row> {
    let clusters: HashMap<(&str, &str), &Cluster> = inputs
        .clusters
        .iter()
        .flatten()
        .map(|c| ((c.namespace.as_str(), c.name.as_str()), c))
        .collect();
    let hpas: HashMap<(&str, &str), &Hpa> = inputs
        .hpas
        .iter()
        .flatten()
        .map(|h| ((h.namespace.as_str(), h.name.as_str()), h))
        .collect();
    let decisions: HashMap<(&str, &str), &Entry> = inputs
        .decisions
        .iter()
        .flat_map(|p| &p.entries)
        .map(|e| ((e.namespace.as_str(), e.scaled_object.as_str()), e))
        .collect();
    let mut rows: Vec<Row> = match &inputs.objects {
        Ok(objects) => objects
            .iter()
            .map(|o| {
                let key = (o.namespace.as_str(), o.name.as_str());
                let hpa = hpas
                    .get(&(o.namespace.as_str(), o.hpa.as_str()))
                    .map(|h| hpa_state(h, inputs.now));
                object_row(o, decisions.get(&key).copied(), hpa, &clusters, inputs)
            })
            .collect(),
        // Without the ScaledObjects, what the scaler holds is all there is.
        Err(_) => decisions
            .values()
            .map(|e| decision_row(e, None, None, &clusters))
            .collect(),
    };
    rows.sort_by(|a, b| {
        (a.severity, &a.namespace, &a.name).cmp(&(b.severity, &b.namespace, &b.name))
    });
    rows.into_iter().map(escaped).collect()
}

/// Longest name, reason or address a row holds (a DNS subdomain's bound), in characters.
const FIELD_MAX: usize = names::SUBDOMAIN_MAX;
/// Longest error text a row holds, in characters (the scaler cuts its own at 512 bytes).
const ERROR_MAX: usize = 512;

/// `row` with every text escaped and bounded ([`names::escape`]): the ScaledObject's address
/// and metadata are the tenant's, the decisions and the API's answers whoever serves them, and
/// every output (the table, JSON, YAML) may end on a terminal.
fn escaped(row: Row) -> Row {
    let field = |s: String| names::escape(&s, FIELD_MAX);
    Row {
        namespace: field(row.namespace),
        name: field(row.name),
        cluster: row.cluster.map(field),
        reason: field(row.reason),
        scaler_address: row.scaler_address.map(field),
        hpa: row.hpa.map(|h| HpaState {
            name: field(h.name),
            conditions: h
                .conditions
                .into_iter()
                .map(|c| Condition {
                    kind: field(c.kind),
                    status: field(c.status),
                    reason: c.reason.map(field),
                })
                .collect(),
            ..h
        }),
        last_error: row.last_error.map(|e| names::escape(&e, ERROR_MAX)),
        ..row
    }
}

fn object_row(
    object: &Object,
    decision: Option<&Entry>,
    hpa: Option<HpaState>,
    clusters: &HashMap<(&str, &str), &Cluster>,
    inputs: &Inputs,
) -> Row {
    let address = Some(object.address.clone());
    let (engine, cluster) = match &object.cluster {
        Ok((engine, cluster)) => (*engine, cluster),
        Err(error) => {
            return Row {
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                cluster: None,
                engine: None,
                current: None,
                desired: None,
                recommended: None,
                reason: "invalid-metadata".into(),
                severity: Severity::Broken,
                scaler_address: address,
                hpa,
                last_error: Some(error.clone()),
                last_error_age_seconds: None,
            };
        }
    };
    match decision {
        Some(entry) => decision_row(entry, address, hpa, clusters),
        None => {
            let current = cluster_count(clusters, engine, &object.namespace, cluster);
            let (reason, severity) = match inputs.decisions {
                Ok(_) => ("no-decision", Severity::Broken),
                Err(_) => ("unknown", Severity::Unknown),
            };
            Row {
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                cluster: Some(cluster.clone()),
                engine: Some(engine),
                current,
                desired: None,
                recommended: None,
                reason: reason.into(),
                severity,
                scaler_address: address,
                hpa,
                last_error: None,
                last_error_age_seconds: None,
            }
        }
    }
}

/// The CNPG Cluster's `spec.instances`, for a trigger that decides a Cluster's count: a Pooler
/// or RedisFailover named like a Cluster of its namespace is not that Cluster.
fn cluster_count(
    clusters: &HashMap<(&str, &str), &Cluster>,
    engine: Engine,
    namespace: &str,
    name: &str,
) -> Option<u32> {
    (engine == Engine::Cnpg)
        .then(|| clusters.get(&(namespace, name)))
        .flatten()
        .and_then(|c| c.instances)
}

fn decision_row(
    entry: &Entry,
    scaler_address: Option<String>,
    hpa: Option<HpaState>,
    clusters: &HashMap<(&str, &str), &Cluster>,
) -> Row {
    let current = entry
        .current
        .or_else(|| cluster_count(clusters, entry.engine, &entry.namespace, &entry.cluster));
    let (reason, mut severity) = match &entry.reason {
        Some(reason) => (reason.clone(), severity_of(reason)),
        None => ("error".to_owned(), Severity::Broken),
    };
    if severity != Severity::Broken && (entry.last_error.is_some() || hpa_stuck(hpa.as_ref())) {
        severity = Severity::Degraded;
    }
    Row {
        namespace: entry.namespace.clone(),
        name: entry.scaled_object.clone(),
        cluster: Some(entry.cluster.clone()),
        engine: Some(entry.engine),
        current,
        desired: entry.desired,
        recommended: entry.recommended,
        reason,
        severity,
        scaler_address,
        hpa,
        last_error: entry
            .last_error
            .as_ref()
            .map(|e| format!("{}: {}", e.code, e.message)),
        last_error_age_seconds: entry.last_error.as_ref().map(|e| e.age_seconds),
    }
}

/// One line per missing source, naming it, why (the error escaped and bounded: it may hold the
/// API server's or the decision source's text), and which columns it leaves empty.
pub fn missing(inputs: &Inputs) -> Vec<String> {
    let mut notes = Vec::new();
    let escape = |e: &String| names::escape(e, ERROR_MAX);
    if let Err(e) = inputs.objects.as_ref().map_err(escape) {
        notes.push(format!(
            "ScaledObjects: cannot list them ({e}); listing the scaler's decisions only"
        ));
    }
    if let Err(e) = inputs.clusters.as_ref().map_err(escape) {
        notes.push(format!(
            "Clusters: cannot list them ({e}); CURRENT comes from decisions only"
        ));
    }
    if let Err(e) = inputs.hpas.as_ref().map_err(escape) {
        notes.push(format!(
            "HPAs: cannot list them ({e}); HPA columns are empty"
        ));
    }
    match inputs.decisions.as_ref().map_err(escape) {
        Err(e) => notes.push(format!(
            "decisions: cannot read the scaler's /decisions ({e}); DESIRED, RECOMMENDED and \
             REASON are unknown (port-forward the scaler's admin port and pass --decisions-url)"
        )),
        Ok(page) if page.truncated => notes.push(format!(
            "decisions: the scaler returned {} of {} entries; narrow with -n",
            page.entries.len(),
            page.total
        )),
        Ok(_) => {}
    }
    notes
}

/// kubectl's short ages: 45s, 12m, 3h, 4d.
pub fn short_age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The conditions that say the HPA is in trouble (AbleToScale or ScalingActive False,
/// ScalingLimited True), `Type=Status(Reason)`, or every condition (`all`); `ok` when none.
fn conditions(hpa: &HpaState, all: bool) -> String {
    let trouble = |c: &Condition| match c.kind.as_str() {
        "AbleToScale" | "ScalingActive" => c.status == "False",
        "ScalingLimited" => c.status == "True",
        _ => false,
    };
    let shown: Vec<String> = hpa
        .conditions
        .iter()
        .filter(|c| all || trouble(c))
        .map(|c| match &c.reason {
            Some(r) => format!("{}={}({r})", c.kind, c.status),
            None => format!("{}={}", c.kind, c.status),
        })
        .collect();
    if shown.is_empty() {
        "ok".into()
    } else {
        shown.join(",")
    }
}

/// Longest error text in the table; wide, JSON and YAML carry it whole (up to [`ERROR_MAX`]).
const ERROR_WIDTH: usize = 120;

/// The table, kubectl-style: columns padded to their widest cell.
pub fn text(rows: &[Row], wide: bool) -> String {
    let mut header = vec![
        "NAMESPACE",
        "NAME",
        "CLUSTER",
        "CURRENT",
        "DESIRED",
        "RECOMMENDED",
        "REASON",
        "HPA-DESIRED",
        "LAST-SCALE",
        "HPA-CONDITIONS",
    ];
    if wide {
        header.push("SCALER");
    }
    header.extend(["ERROR-AGE", "LAST-ERROR"]);
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for r in rows {
        let hpa = r.hpa.as_ref();
        let mut line = vec![
            r.namespace.clone(),
            r.name.clone(),
            or_dash(r.cluster.as_ref().map(|name| match r.engine {
                // Another kind than a Cluster says so: `Pooler/pg-pooler-rw`.
                Some(engine) if engine != Engine::Cnpg => format!("{}/{name}", engine.kind()),
                _ => name.clone(),
            })),
            or_dash(r.current),
            or_dash(r.desired),
            or_dash(r.recommended),
            r.reason.clone(),
            or_dash(hpa.and_then(|h| h.desired)),
            or_dash(hpa.and_then(|h| h.last_scale_age_seconds).map(short_age)),
            hpa.map_or_else(|| "-".to_owned(), |h| conditions(h, wide)),
        ];
        if wide {
            line.push(or_dash(r.scaler_address.as_ref()));
        }
        line.push(or_dash(r.last_error_age_seconds.map(short_age)));
        // Already escaped ([`escaped`]): a line break is `\n` here.
        let error = r.last_error.as_deref().map(|e| {
            if wide || e.chars().count() <= ERROR_WIDTH {
                e.to_owned()
            } else {
                format!("{}…", e.chars().take(ERROR_WIDTH).collect::<String>())
            }
        });
        line.push(or_dash(error));
        cells.push(line);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|i| {
            cells
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &cells {
        let last = line.len() - 1;
        for (i, cell) in line.iter().enumerate() {
            if i == last {
                let _ = writeln!(out, "{cell}");
            } else {
                let _ = write!(out, "{cell:<width$}   ", width = widths[i]);
            }
        }
    }
    out
}

/// The machine-readable output: the rows and what could not be read.
#[derive(Serialize)]
struct Report<'a> {
    missing: &'a [String],
    items: &'a [Row],
}

/// `-o json`: the rows and the missing sources, every text as [`rows`] and [`missing`] escaped it.
pub fn json(rows: &[Row], missing: &[String]) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Report {
        missing,
        items: rows,
    })
}

/// `-o yaml`, as [`json`].
pub fn yaml(rows: &[Row], missing: &[String]) -> Result<String, serde_norway::Error> {
    serde_norway::to_string(&Report {
        missing,
        items: rows,
    })
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
