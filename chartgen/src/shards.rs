//! helm-controller shard Deployments cloned from the flux-aio Deployment and sanitised the
//! way Cozystack's flux-shard-operator does (docs/design.md §S7).
//!
//! Pure: a parsed Deployment in, shard Deployments out, in two steps. [`sanitise`] gives what
//! every shard shares, with the per-shard flags left as bare slots; [`instantiate`] fills one
//! shard in. `chartgen shards` runs both; the package chart gets the sanitised Deployment as data
//! and fills the slots with a Helm `range` (charts/cozy-autoscaling/templates/shards.yaml).

use placement::shard::{SHARD_KEY_LABEL, ShardIndex, ShardName, deployment_name};
use serde_json::{Map, Value, json};

/// The container that is cloned.
pub const HELM_CONTROLLER: &str = "helm-controller";
/// Shard selector key on HelmReleases (docs/design.md §S1).
pub const SHARD_KEY: &str = SHARD_KEY_LABEL;
/// Bare in a sanitised Deployment's args where each shard's `--watch-label-selector=KEY=shard<i>` goes.
pub const SELECTOR_SLOT: &str = "--watch-label-selector";
/// Bare in a sanitised Deployment's args where each shard's `--concurrent=N` goes.
pub const CONCURRENT_SLOT: &str = "--concurrent";
/// The env var a shard reads the source-controller's artifact address from.
const SOURCE_CONTROLLER_ENV: &str = "SOURCE_CONTROLLER_LOCALHOST";

/// Environment the shard must not inherit: localhost artifact and KubePrism overrides only
/// work inside the hostNetwork flux pod, and proxies are per-installation (#3546).
const DROPPED_ENV: &[&str] = &[
    "SOURCE_CONTROLLER_LOCALHOST",
    "SOURCE_WATCHER_LOCALHOST",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ShardError {
    #[error(
        "the flux Deployment has no '{0}' container under spec.template.spec.containers; pass the flux-aio Deployment"
    )]
    NoHelmController(&'static str),
    #[error("the flux Deployment has no {0}; pass an apps/v1 Deployment")]
    Missing(&'static str),
    #[error("flag {0} has no value in the helm-controller args; write it as {0}=VALUE")]
    FlagWithoutValue(String),
}

/// How every shard differs from the flux helm-controller.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Namespace of the shard Deployments (the flux namespace).
    pub namespace: String,
    /// `--concurrent` value.
    pub concurrent: String,
    /// `--events-addr` for the shard; `None` drops the flag (flux-aio's localhost address is unreachable).
    pub events_addr: Option<String>,
    /// `SOURCE_CONTROLLER_LOCALHOST` for the shard (host:port of a source-controller Service).
    pub source_controller: Option<String>,
}

/// What every shard shares: the flux-aio helm-controller alone in its pod, sanitised, as a
/// Deployment without name or namespace. Its args hold [`SELECTOR_SLOT`] and
/// [`CONCURRENT_SLOT`] bare, in the position the flux-aio args had them; its env has no
/// source-controller address; its labels and selector lack the per-shard name.
pub fn sanitise(flux: &Value, events_addr: Option<&str>) -> Result<Value, ShardError> {
    let pod = flux
        .pointer("/spec/template/spec")
        .ok_or(ShardError::Missing("spec.template.spec"))?;
    let containers = pod
        .get("containers")
        .and_then(Value::as_array)
        .ok_or(ShardError::Missing("spec.template.spec.containers"))?;
    let source = containers
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(HELM_CONTROLLER))
        .ok_or(ShardError::NoHelmController(HELM_CONTROLLER))?;
    let container = shard_container(source, events_addr)?;

    let mut pod_spec = pod.as_object().cloned().unwrap_or_default();
    let volumes = mounted_volumes(&pod_spec, &container);
    pod_spec.insert("containers".into(), json!([container]));
    pod_spec.remove("initContainers");
    pod_spec.insert("hostNetwork".into(), json!(false));
    pod_spec.insert("dnsPolicy".into(), json!("ClusterFirst"));
    pod_spec.remove("tolerations");
    strip_anti_affinity(&mut pod_spec);
    match volumes {
        Some(v) => pod_spec.insert("volumes".into(), v),
        None => pod_spec.remove("volumes"),
    };

    let mut labels = Map::new();
    labels.insert("app.kubernetes.io/part-of".into(), json!("flux"));
    labels.insert("sharding.fluxcd.io/role".into(), json!("shard"));
    if let Some(v) = flux.pointer("/metadata/labels/app.kubernetes.io~1version") {
        labels.insert("app.kubernetes.io/version".into(), v.clone());
    }
    Ok(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"labels": labels},
        "spec": {
            "replicas": 1,
            // Leader election is off in flux-aio's helm-controller: two pods must never overlap.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {
                    "labels": {"sharding.fluxcd.io/role": "shard"},
                    "annotations": {
                        "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                        "prometheus.io/scrape": "true",
                    },
                },
                "spec": pod_spec,
            },
        },
    }))
}

/// Shard `id` of a [`sanitise`]d Deployment: name, namespace and name labels set, the arg slots
/// filled, the source-controller address appended to the env when configured.
pub fn instantiate(base: &Value, id: ShardIndex, cfg: &ShardConfig) -> Value {
    let name = deployment_name(id);
    let mut d = base.clone();
    let mut labels = Map::new();
    labels.insert("app.kubernetes.io/name".into(), json!(name));
    if let Some(shared) = base.pointer("/metadata/labels").and_then(Value::as_object) {
        labels.extend(shared.clone());
    }
    d["metadata"] = json!({"name": name, "namespace": cfg.namespace, "labels": labels});
    d["spec"]["selector"] = json!({"matchLabels": {"app.kubernetes.io/name": name}});
    d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = json!(name);
    if let Some(c) = d
        .pointer_mut("/spec/template/spec/containers/0")
        .and_then(Value::as_object_mut)
    {
        let slots = string_args(c);
        c.insert(
            "args".into(),
            json!(fill_slots(&slots, id, &cfg.concurrent)),
        );
        if let Some(addr) = &cfg.source_controller {
            let entry = json!({"name": SOURCE_CONTROLLER_ENV, "value": addr});
            match c.get_mut("env").and_then(Value::as_array_mut) {
                Some(env) => env.push(entry),
                None => {
                    c.insert("env".into(), json!([entry]));
                }
            }
        }
    }
    d
}

/// A container's args (non-strings skipped).
fn string_args(container: &Map<String, Value>) -> Vec<String> {
    container
        .get("args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn shard_container(source: &Value, events_addr: Option<&str>) -> Result<Value, ShardError> {
    let mut c = source.as_object().cloned().unwrap_or_default();
    let args = string_args(&c);
    c.insert("args".into(), json!(arg_slots(&args, events_addr)?));

    let env: Vec<Value> = c
        .get("env")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .filter(|v| {
                    !DROPPED_ENV.contains(&v.get("name").and_then(Value::as_str).unwrap_or(""))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if env.is_empty() {
        c.remove("env");
    } else {
        c.insert("env".into(), json!(env));
    }

    // hostPort is implied by hostNetwork in flux-aio; a shard pod must not claim node ports.
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("hostPort");
        }
    }
    if !c.contains_key("startupProbe")
        && let Some(live) = c.get("livenessProbe").and_then(Value::as_object)
    {
        let mut probe = live.clone();
        probe.insert("initialDelaySeconds".into(), json!(0));
        probe.insert("periodSeconds".into(), json!(10));
        probe.insert("successThreshold".into(), json!(1));
        probe.insert("failureThreshold".into(), json!(30));
        c.insert("startupProbe".into(), Value::Object(probe));
    }
    Ok(Value::Object(c))
}

/// The args every shard shares: `--events-addr` dropped or replaced, the watch selector and
/// `--concurrent` reduced to one bare slot each (where the first of them stood, else appended),
/// everything else kept in order.
fn arg_slots(args: &[String], events_addr: Option<&str>) -> Result<Vec<String>, ShardError> {
    const HANDLED: &[&str] = &["--events-addr", SELECTOR_SLOT, CONCURRENT_SLOT];
    let events = events_addr.map(|a| format!("--events-addr={a}"));
    let (mut seen_selector, mut seen_concurrent, mut seen_events) = (false, false, false);
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let (flag, inline_value) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (arg.as_str(), None),
        };
        if !HANDLED.contains(&flag) {
            out.push(arg.clone());
            continue;
        }
        if inline_value.is_none() {
            // Two-token form `--flag VALUE`: consume the value.
            match it.peek() {
                Some(v) if !v.starts_with("--") => {
                    it.next();
                }
                _ => return Err(ShardError::FlagWithoutValue(flag.to_owned())),
            }
        }
        let (seen, replacement) = match flag {
            SELECTOR_SLOT => (&mut seen_selector, Some(SELECTOR_SLOT.to_owned())),
            CONCURRENT_SLOT => (&mut seen_concurrent, Some(CONCURRENT_SLOT.to_owned())),
            _ => (&mut seen_events, events.clone()),
        };
        if !*seen && let Some(r) = replacement {
            out.push(r);
        }
        *seen = true;
    }
    if !seen_selector {
        out.push(SELECTOR_SLOT.to_owned());
    }
    if !seen_concurrent {
        out.push(CONCURRENT_SLOT.to_owned());
    }
    if let (false, Some(e)) = (seen_events, events) {
        out.push(e);
    }
    Ok(out)
}

/// The slots of [`arg_slots`] filled for shard `id`.
fn fill_slots(slots: &[String], id: ShardIndex, concurrent: &str) -> Vec<String> {
    slots
        .iter()
        .map(|a| match a.as_str() {
            SELECTOR_SLOT => format!("{SELECTOR_SLOT}={SHARD_KEY}={}", ShardName(id)),
            CONCURRENT_SLOT => format!("{CONCURRENT_SLOT}={concurrent}"),
            _ => a.clone(),
        })
        .collect()
}

/// Only the volumes the shard container mounts; `None` when it mounts none.
fn mounted_volumes(pod: &Map<String, Value>, container: &Value) -> Option<Value> {
    let mounted: Vec<&str> = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let kept: Vec<Value> = pod
        .get("volumes")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| {
                    v.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| mounted.contains(&n))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    (!kept.is_empty()).then(|| Value::Array(kept))
}

/// Drops inherited pod anti-affinity (it targets the flux pod) but keeps node affinity.
fn strip_anti_affinity(pod: &mut Map<String, Value>) {
    let empty = match pod.get_mut("affinity").and_then(Value::as_object_mut) {
        Some(a) => {
            a.remove("podAntiAffinity");
            a.is_empty()
        }
        None => false,
    };
    if empty {
        pod.remove("affinity");
    }
}

/// `--count auto`: Cozystack's `clamp(ceil(H/100), 1, min(16, T))`.
pub fn auto_count(helmreleases: u64, tenants: u64) -> u64 {
    placement::autosize::recommended_shard_count(helmreleases, tenants)
}

#[cfg(test)]
#[path = "shards_tests.rs"]
mod tests;
