//! `--verify` for the Poolers' pairs: the modes and guards of `autoscaling.pooler`, and that each
//! rendered pair is whole: a ScaledObject (engine pgbouncer) driving a ScaleAdapter that drives a
//! rendered Pooler at `/spec/instances`, paused together, with the trigger naming that Pooler, its
//! Cluster and the pool sizes its own parameters render.

use anyhow::bail;
use serde_json::Value;

use super::{API_VERSION, FIELD, KIND, POOL_SIZES};
use crate::app::AppSpec;
use crate::app::matrix::{ADAPTER_API, ADAPTER_KIND, Case, Expect};

/// The `autoscaling.pooler` cases, for a chart with Poolers chartgen wired.
pub(in crate::app) fn cases(spec: &AppSpec) -> Vec<Case> {
    if spec.poolers.is_empty() {
        return Vec::new();
    }
    modes().chain(guards(spec)).collect()
}

/// `autoscaling.pooler.enabled` and `more` values.
fn on(more: &[&str]) -> Vec<String> {
    std::iter::once("autoscaling.pooler.enabled=true")
        .chain(more.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// The modes: the pairs render, paused or not; the Cluster's ScaledObject only with its own switch.
fn modes() -> impl Iterator<Item = Case> {
    // (name, more values, the Cluster's ScaledObject renders, the pairs are paused)
    let modes: [(&'static str, &[&str], bool, bool); 5] = [
        ("pooler: on", &[], false, false),
        (
            "pooler: transition",
            &["autoscaling.pooler.transition=true"],
            false,
            true,
        ),
        (
            "pooler: dryRun",
            &["autoscaling.pooler.dryRun=true"],
            false,
            true,
        ),
        (
            "pooler: with the Cluster's",
            &["autoscaling.enabled=true"],
            true,
            false,
        ),
        (
            "pooler: controls: scale-in off and a schedule",
            &[
                "autoscaling.pooler.scaleIn=disabled",
                "autoscaling.pooler.schedules[0].cron=0 8 * * 1-5",
                "autoscaling.pooler.schedules[0].duration=10h",
                "autoscaling.pooler.schedules[0].floor=3",
            ],
            false,
            false,
        ),
    ];
    modes.into_iter().map(|(name, more, scaled, paused)| Case {
        name,
        sets: on(more),
        keda: true,
        expect: Expect::Renders {
            scaled,
            paused: false,
        },
        poolers: Some(paused),
    })
}

/// The guards under `autoscaling.pooler`, each failing the render with its message.
fn guards(spec: &AppSpec) -> impl Iterator<Item = Case> {
    let mut keys: Vec<String> = Vec::new();
    for key in spec.poolers.iter().map(|p| format!("{}=9", p.values_key)) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let count = keys
        .into_iter()
        .chain(on(&["autoscaling.pooler.maxReplicas=8"]));
    // (name, values, KEDA's API declared, the message the render fails with)
    let guards: [(&'static str, Vec<String>, bool, &'static str); 5] = [
        (
            "pooler guard: no KEDA API",
            on(&[]),
            false,
            "autoscaling.pooler.enabled=true needs KEDA",
        ),
        (
            "pooler guard: target < 1",
            on(&["autoscaling.pooler.target=0"]),
            true,
            "autoscaling.pooler.target must be at least 1",
        ),
        (
            "pooler guard: floor > maxReplicas",
            on(&[
                "autoscaling.pooler.minReplicas=5",
                "autoscaling.pooler.maxReplicas=4",
            ]),
            true,
            "autoscaling.pooler.maxReplicas (4) is below the floor 5",
        ),
        (
            "pooler guard: count > maxReplicas",
            count.collect(),
            true,
            "is above autoscaling.pooler.maxReplicas (8)",
        ),
        (
            "pooler guard: maxReplicas > 100",
            on(&["autoscaling.pooler.maxReplicas=101"]),
            true,
            "autoscaling.pooler.maxReplicas (101) is above the hard ceiling of 100",
        ),
    ];
    guards.into_iter().map(|(name, sets, keda, text)| Case {
        name,
        sets,
        keda,
        expect: Expect::Fails(text),
        poolers: None,
    })
}

/// True for a ScaledObject of a Pooler's pair (its trigger's engine is pgbouncer).
pub(in crate::app) fn is_pooler_pair(o: &Value) -> bool {
    o["kind"] == "ScaledObject"
        && o.pointer("/spec/triggers/0/metadata/engine")
            .and_then(Value::as_str)
            .is_some_and(|e| e.eq_ignore_ascii_case("pgbouncer"))
}

/// The Poolers' pairs of one render: none when `expect` is None; else each one whole, paused
/// exactly when `expect` says, one per Pooler, and one for every rendered Pooler when chartgen
/// wired them all.
pub(in crate::app) fn check(
    objects: &[Value],
    spec: &AppSpec,
    release_namespace: &str,
    expect: Option<bool>,
) -> anyhow::Result<()> {
    let ns =
        |o: &Value| str_at(o, "/metadata/namespace").unwrap_or_else(|| release_namespace.into());
    let pairs: Vec<&Value> = objects.iter().filter(|o| is_pooler_pair(o)).collect();
    let adapters = objects.iter().filter(|o| {
        o["kind"] == ADAPTER_KIND && str_at(o, "/spec/targetRef/kind").as_deref() == Some(KIND)
    });
    let Some(paused) = expect else {
        if !pairs.is_empty() || adapters.count() > 0 {
            bail!("a Pooler's ScaledObject or ScaleAdapter rendered with autoscaling.pooler off");
        }
        return Ok(());
    };
    let poolers: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == KIND && o["apiVersion"] == API_VERSION)
        .collect();
    if poolers.is_empty() {
        bail!("no Pooler rendered: pass --values with the chart's own switches of its Poolers on");
    }
    let mut paired = Vec::new();
    for so in &pairs {
        let pooler = pair(objects, &poolers, so, paused, &ns)?;
        let at = (ns(pooler), str_at(pooler, "/metadata/name"));
        if paired.contains(&at) {
            bail!(
                "two ScaledObjects drive the Pooler `{}`",
                at.1.unwrap_or_default()
            );
        }
        paired.push(at);
    }
    if spec.all_poolers_wired
        && let Some(alone) = poolers
            .iter()
            .find(|p| !paired.contains(&(ns(p), str_at(p, "/metadata/name"))))
    {
        bail!(
            "the Pooler `{}` rendered without its ScaleAdapter and ScaledObject",
            str_at(alone, "/metadata/name").unwrap_or_default()
        );
    }
    Ok(())
}

/// The Pooler ScaledObject `so` drives through its adapter, after checking the chain.
fn pair<'a>(
    objects: &[Value],
    poolers: &[&'a Value],
    so: &Value,
    paused: bool,
    ns: &dyn Fn(&Value) -> String,
) -> anyhow::Result<&'a Value> {
    let so_name = str_at(so, "/metadata/name").unwrap_or_default();
    let reference = |p: &str| str_at(so, &format!("/spec/scaleTargetRef/{p}")).unwrap_or_default();
    if (reference("apiVersion").as_str(), reference("kind").as_str()) != (ADAPTER_API, ADAPTER_KIND)
    {
        bail!(
            "the ScaledObject `{so_name}` targets {} {}, not a {ADAPTER_KIND}",
            reference("apiVersion"),
            reference("kind")
        );
    }
    let Some(adapter) = objects.iter().find(|o| {
        o["kind"] == ADAPTER_KIND
            && str_at(o, "/metadata/name") == Some(reference("name"))
            && ns(o) == ns(so)
    }) else {
        bail!(
            "the ScaledObject `{so_name}` targets {ADAPTER_KIND} `{}`, which the chart does not render in its namespace",
            reference("name")
        );
    };
    let target = |p: &str| str_at(adapter, &format!("/spec/targetRef/{p}")).unwrap_or_default();
    if (target("apiVersion").as_str(), target("kind").as_str()) != (API_VERSION, KIND) {
        bail!("the {ADAPTER_KIND} `{so_name}` does not target a {API_VERSION} {KIND}");
    }
    if str_at(adapter, "/spec/replicasPath").as_deref() != Some("/spec/instances") {
        bail!("the {ADAPTER_KIND} `{so_name}` does not drive /spec/{FIELD}");
    }
    if adapter.pointer("/spec/selector").is_some() {
        bail!(
            "the {ADAPTER_KIND} `{so_name}` sets a selector: the controller knows a Pooler's pods"
        );
    }
    let adapter_paused = adapter.pointer("/spec/paused").and_then(Value::as_bool);
    if adapter_paused != Some(paused) || annotated_paused(so) != paused {
        bail!(
            "the pair of `{so_name}` is not {}paused both ways (adapter {adapter_paused:?}, ScaledObject {})",
            if paused { "" } else { "un" },
            annotated_paused(so)
        );
    }
    let name = target("name");
    let Some(pooler) = poolers
        .iter()
        .find(|p| str_at(p, "/metadata/name").as_deref() == Some(&name) && ns(p) == ns(so))
    else {
        bail!(
            "the {ADAPTER_KIND} `{so_name}` drives the Pooler `{name}`, which the chart does not render in its namespace"
        );
    };
    if !pooler.pointer("/spec/instances").is_some_and(Value::is_i64) {
        bail!("the Pooler `{name}` renders no whole spec.{FIELD}");
    }
    trigger(so, pooler, &name)?;
    Ok(pooler)
}

/// The trigger names the Pooler and its Cluster, its floor is the ScaledObject's, and it carries
/// exactly the pool sizes the Pooler's parameters set.
fn trigger(so: &Value, pooler: &Value, name: &str) -> anyhow::Result<()> {
    let md = |k: &str| str_at(so, &format!("/spec/triggers/0/metadata/{k}"));
    if md("pooler").as_deref() != Some(name) {
        bail!(
            "the trigger of `{name}` names the pooler {:?}",
            md("pooler")
        );
    }
    if md("cluster") != str_at(pooler, "/spec/cluster/name") {
        bail!(
            "the trigger of `{name}` names the cluster {:?}, not the Pooler's",
            md("cluster")
        );
    }
    let floor = so
        .pointer("/spec/minReplicaCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if floor < 2 || md("minReplicas") != Some(floor.to_string()) {
        bail!(
            "the ScaledObject of `{name}` has the floor {floor}, its trigger {:?}: at least 2, the same",
            md("minReplicas")
        );
    }
    for (param, key) in POOL_SIZES {
        let set = str_at(pooler, &format!("/spec/pgbouncer/parameters/{param}"));
        if md(key) != set {
            bail!(
                "the Pooler `{name}` sets {param} {set:?}, its trigger {key} {:?}: the connection budget needs the same",
                md(key)
            );
        }
    }
    Ok(())
}

fn annotated_paused(so: &Value) -> bool {
    ["in", "out"].iter().all(|d| {
        so.pointer(&format!(
            "/metadata/annotations/autoscaling.keda.sh~1paused-scale-{d}"
        ))
        .is_some()
    })
}

fn str_at(o: &Value, p: &str) -> Option<String> {
    o.pointer(p).and_then(Value::as_str).map(str::to_owned)
}
