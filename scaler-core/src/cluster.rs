//! What the scaler reads from a CloudNativePG `Cluster` object and its namespace's quotas.
use std::sync::Arc;

use jiff::Timestamp;
use serde::Serialize;

use crate::quantity::{Milli, Rounding, parse_quantity};
use crate::quota::{InstanceCost, Quota};

/// What a Cluster says about its size, sync quorum, convergence and per-instance cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterFacts {
    /// `spec.instances` (what the HPA compares against).
    pub instances: u32,
    /// Legacy `spec.maxSyncReplicas`, else `spec.postgresql.synchronous.number`.
    pub quorum: Option<u32>,
    /// `None` until CNPG has written a status with `readyInstances`.
    pub status: Option<ClusterStatus>,
    /// What one more instance costs against a ResourceQuota.
    pub cost: InstanceCost,
}

/// The convergence facts of a Cluster's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// `status.instances`: instance pods CNPG has created.
    pub instances: u32,
    /// `status.readyInstances`.
    pub ready: u32,
    /// `lastTransitionTime` (Unix seconds) of the `Ready` condition while it is `False`.
    pub not_ready_since: Option<i64>,
}

/// Reads [`ClusterFacts`] from a Cluster's JSON.
pub fn facts_from(object: &serde_json::Value) -> Result<ClusterFacts, String> {
    let spec = object.get("spec").ok_or("no spec")?;
    let count = |v: Option<&serde_json::Value>| {
        v.and_then(|v| v.as_u64())
            .and_then(|n| u32::try_from(n).ok())
    };
    // CNPG defaults spec.instances to 1.
    let instances = match spec.get("instances") {
        None => 1,
        Some(v) => count(Some(v)).ok_or_else(|| format!("spec.instances {v} is not a count"))?,
    };
    let legacy = count(spec.get("maxSyncReplicas")).filter(|n| *n > 0);
    let explicit = count(spec.pointer("/postgresql/synchronous/number"));
    let status = object.get("status").and_then(|status| {
        let ready = count(status.get("readyInstances"))?;
        let not_ready_since = status
            .get("conditions")
            .and_then(|c| c.as_array())
            .and_then(|conditions| {
                conditions
                    .iter()
                    .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))
            })
            .filter(|c| c.get("status").and_then(|s| s.as_str()) == Some("False"))
            .and_then(|c| {
                c.get("lastTransitionTime")?
                    .as_str()?
                    .parse::<Timestamp>()
                    .ok()
            })
            .map(|t| t.as_second());
        Some(ClusterStatus {
            instances: count(status.get("instances")).unwrap_or(ready),
            ready,
            not_ready_since,
        })
    });
    Ok(ClusterFacts {
        instances,
        quorum: legacy.or(explicit),
        status,
        cost: cost_from(spec)?,
    })
}

/// The redis-operator's count when `spec.redis.replicas` is absent or not positive.
pub const FAILOVER_DEFAULT_REPLICAS: u32 = 3;

/// Reads [`ClusterFacts`] from a RedisFailover's JSON (`databases.spotahome.com/v1`): the Redis
/// pods (master included) of `spec.redis.replicas` and what one costs. No quorum (replication is
/// asynchronous) and no status (the operator writes no ready count).
pub fn failover_facts_from(object: &serde_json::Value) -> Result<ClusterFacts, String> {
    let spec = object.get("spec").ok_or("no spec")?;
    let redis = spec.get("redis").unwrap_or(&serde_json::Value::Null);
    let instances = match redis.get("replicas") {
        None | Some(serde_json::Value::Null) => FAILOVER_DEFAULT_REPLICAS,
        Some(v) => match v.as_i64() {
            // The operator's defaulting turns 0 and below into its default.
            Some(n) if n <= 0 => FAILOVER_DEFAULT_REPLICAS,
            Some(n) => {
                u32::try_from(n).map_err(|_| format!("spec.redis.replicas {v} is not a count"))?
            }
            None => return Err(format!("spec.redis.replicas {v} is not a count")),
        },
    };
    let claim = redis.pointer("/storage/persistentVolumeClaim");
    let storage = match claim {
        Some(claim) => quantity(
            claim,
            "spec.redis.storage.persistentVolumeClaim",
            "/spec/resources/requests/storage",
        )?,
        None => None,
    };
    let mut cost = pod_cost(redis, "spec.redis", storage, u32::from(claim.is_some()))?;
    // The exporter is a second container of every Redis pod: its resources count too.
    if redis.pointer("/exporter/enabled").and_then(|e| e.as_bool()) == Some(true) {
        let exporter = redis.get("exporter").unwrap_or(&serde_json::Value::Null);
        let sidecar = pod_cost(exporter, "spec.redis.exporter", None, 0)?;
        cost.requests_cpu = add(cost.requests_cpu, sidecar.requests_cpu);
        cost.limits_cpu = add(cost.limits_cpu, sidecar.limits_cpu);
        cost.requests_memory = add(cost.requests_memory, sidecar.requests_memory);
        cost.limits_memory = add(cost.limits_memory, sidecar.limits_memory);
    }
    Ok(ClusterFacts {
        instances,
        quorum: None,
        status: None,
        cost,
    })
}

fn add(a: Option<Milli>, b: Option<Milli>) -> Option<Milli> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Milli(a.0.saturating_add(b.0))),
        (a, b) => a.or(b),
    }
}

/// The quantity at `pointer` inside `within` (which errors name `at`), if there is one.
fn quantity(within: &serde_json::Value, at: &str, pointer: &str) -> Result<Option<Milli>, String> {
    let Some(value) = within.pointer(pointer) else {
        return Ok(None);
    };
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(format!("{at}{pointer} {other} is not a quantity")),
    };
    parse_quantity(&text, Rounding::Up)
        .map(Some)
        .map_err(|e| format!("{at}{pointer}: {e}"))
}

/// A container's `resources` (inside `within`, which errors name `at`), with the pod's volumes.
fn pod_cost(
    within: &serde_json::Value,
    at: &str,
    storage: Option<Milli>,
    pvcs: u32,
) -> Result<InstanceCost, String> {
    Ok(InstanceCost {
        requests_cpu: quantity(within, at, "/resources/requests/cpu")?,
        limits_cpu: quantity(within, at, "/resources/limits/cpu")?,
        requests_memory: quantity(within, at, "/resources/requests/memory")?,
        limits_memory: quantity(within, at, "/resources/limits/memory")?,
        storage: storage.filter(|s| s.0 > 0),
        pvcs,
    })
}

/// One instance's pod resources and volumes (data, WAL, tablespaces), from a Cluster spec.
fn cost_from(spec: &serde_json::Value) -> Result<InstanceCost, String> {
    // A volume's size, or its pvcTemplate's storage request.
    let volume = |storage: &serde_json::Value| -> Result<Milli, String> {
        Ok(quantity(storage, "spec", "/size")?
            .or(quantity(
                storage,
                "spec",
                "/pvcTemplate/resources/requests/storage",
            )?)
            .unwrap_or_default())
    };
    let mut storage = Milli::default();
    let mut pvcs = 0u32;
    let tablespaces = spec.get("tablespaces").and_then(|t| t.as_array());
    let volumes = [spec.get("storage"), spec.get("walStorage")]
        .into_iter()
        .flatten()
        .chain(
            tablespaces
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("storage")),
        );
    for v in volumes {
        storage.0 = storage.0.saturating_add(volume(v)?.0);
        pvcs = pvcs.saturating_add(1);
    }
    // CNPG always gives an instance its data PVC.
    pod_cost(spec, "spec", Some(storage), pvcs.max(1))
}

/// A Cluster and the ResourceQuotas of its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Shared with the index it came from and every evaluation made of it: a scaler holds an
    /// evaluation per ScaledObject, and the facts are 224 bytes.
    pub cluster: Arc<ClusterFacts>,
    pub quotas: Vec<Quota>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn milli(text: &str) -> Option<Milli> {
        Some(parse_quantity(text, Rounding::Up).unwrap())
    }

    #[test]
    fn facts_read_instances_and_either_quorum_field() {
        let f = facts_from(&json!({"spec": {"instances": 3, "maxSyncReplicas": 1}})).unwrap();
        assert_eq!((f.instances, f.quorum, f.status), (3, Some(1), None));
        let f = facts_from(&json!({"spec": {"instances": 4, "postgresql": {"synchronous": {"method": "any", "number": 2}}}})).unwrap();
        assert_eq!((f.instances, f.quorum), (4, Some(2)));
        let f = facts_from(&json!({"spec": {"instances": 2, "maxSyncReplicas": 0}})).unwrap();
        assert_eq!((f.instances, f.quorum), (2, None));
        assert_eq!(facts_from(&json!({"spec": {}})).unwrap().instances, 1);
        assert!(facts_from(&json!({"spec": {"instances": "three"}})).is_err());
        assert!(facts_from(&json!({})).is_err());
    }

    #[test]
    fn facts_read_the_instance_cost() {
        let f = facts_from(&json!({"spec": {
            "instances": 3,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "2Gi"}},
            "storage": {"size": "10Gi"},
            "walStorage": {"pvcTemplate": {"resources": {"requests": {"storage": "5Gi"}}}},
            "tablespaces": [{"name": "t", "storage": {"size": "1Gi"}}],
        }}))
        .unwrap();
        assert_eq!(
            f.cost,
            InstanceCost {
                requests_cpu: milli("500m"),
                limits_cpu: milli("1"),
                requests_memory: milli("1Gi"),
                limits_memory: milli("2Gi"),
                storage: milli("16Gi"),
                pvcs: 3,
            }
        );
        let bare = facts_from(&json!({"spec": {"instances": 1}})).unwrap();
        assert_eq!(
            bare.cost,
            InstanceCost {
                pvcs: 1,
                ..InstanceCost::default()
            }
        );
        let err =
            facts_from(&json!({"spec": {"resources": {"requests": {"cpu": "lots"}}}})).unwrap_err();
        assert!(err.contains("/resources/requests/cpu"), "{err}");
    }

    #[test]
    fn failover_facts_read_the_redis_pods_and_what_one_costs() {
        let f = failover_facts_from(&json!({"spec": {
            "redis": {
                "replicas": 4,
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                "storage": {"persistentVolumeClaim": {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}},
                "exporter": {"enabled": true, "resources": {"requests": {"cpu": "50m"}}},
            },
            "sentinel": {"replicas": 3},
        }}))
        .unwrap();
        assert_eq!((f.instances, f.quorum, f.status), (4, None, None));
        assert_eq!(
            f.cost,
            InstanceCost {
                requests_cpu: milli("150m"),
                limits_cpu: None,
                requests_memory: milli("256Mi"),
                limits_memory: milli("512Mi"),
                storage: milli("2Gi"),
                pvcs: 1,
            }
        );
        // The operator's default for an absent or non-positive count; no claim, no PVC.
        for redis in [json!({}), json!({"replicas": 0}), json!({"replicas": -2})] {
            let f = failover_facts_from(&json!({"spec": {"redis": redis}})).unwrap();
            assert_eq!((f.instances, f.cost.pvcs, f.cost.storage), (3, 0, None));
        }
        assert_eq!(
            failover_facts_from(&json!({"spec": {}})).unwrap().instances,
            3
        );
        // A disabled exporter's resources are not a container of the pod.
        let f = failover_facts_from(
            &json!({"spec": {"redis": {"exporter": {"resources": {"requests": {"cpu": "1"}}}}}}),
        )
        .unwrap();
        assert_eq!(f.cost.requests_cpu, None);
        for (spec, field) in [
            (
                json!({"redis": {"replicas": "four"}}),
                "spec.redis.replicas",
            ),
            (
                json!({"redis": {"replicas": 1u64 << 40}}),
                "spec.redis.replicas",
            ),
            (
                json!({"redis": {"resources": {"limits": {"cpu": "lots"}}}}),
                "spec.redis/resources/limits/cpu",
            ),
            (
                json!({"redis": {"storage": {"persistentVolumeClaim": {"spec": {"resources": {"requests": {"storage": []}}}}}}}),
                "spec.redis.storage.persistentVolumeClaim/spec/resources/requests/storage",
            ),
        ] {
            let err = failover_facts_from(&json!({ "spec": spec })).unwrap_err();
            assert!(err.contains(field), "{err}");
        }
        assert!(failover_facts_from(&json!({})).is_err());
    }

    #[test]
    fn facts_read_readiness_and_when_it_was_lost() {
        let f = facts_from(&json!({
            "spec": {"instances": 5},
            "status": {"instances": 4, "readyInstances": 3, "conditions": [
                {"type": "ContinuousArchiving", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T19:00:00Z"},
            ]},
        }))
        .unwrap();
        assert_eq!(
            f.status,
            Some(ClusterStatus {
                instances: 4,
                ready: 3,
                not_ready_since: Some(1_796_065_200),
            })
        );
        // Ready: no not-ready time; no readyInstances: no status to judge by.
        let ready = facts_from(
            &json!({"spec": {}, "status": {"readyInstances": 2, "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T19:00:00Z"}]}}),
        )
        .unwrap();
        assert_eq!(
            ready.status,
            Some(ClusterStatus {
                instances: 2,
                ready: 2,
                not_ready_since: None
            })
        );
        let early =
            facts_from(&json!({"spec": {}, "status": {"phase": "Setting up primary"}})).unwrap();
        assert_eq!(early.status, None);
    }
}
