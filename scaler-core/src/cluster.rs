//! What the scaler reads from a CloudNativePG `Cluster` object and its namespace's quotas.
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

/// One instance's pod resources and volumes (data, WAL, tablespaces), from a Cluster spec.
fn cost_from(spec: &serde_json::Value) -> Result<InstanceCost, String> {
    let quantity = |pointer: &str, within: &serde_json::Value| -> Result<Option<Milli>, String> {
        let Some(value) = within.pointer(pointer) else {
            return Ok(None);
        };
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => return Err(format!("spec{pointer} {other} is not a quantity")),
        };
        parse_quantity(&text, Rounding::Up)
            .map(Some)
            .map_err(|e| format!("spec{pointer}: {e}"))
    };
    // A volume's size, or its pvcTemplate's storage request.
    let volume = |storage: &serde_json::Value| -> Result<Milli, String> {
        Ok(quantity("/size", storage)?
            .or(quantity(
                "/pvcTemplate/resources/requests/storage",
                storage,
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
    Ok(InstanceCost {
        requests_cpu: quantity("/resources/requests/cpu", spec)?,
        limits_cpu: quantity("/resources/limits/cpu", spec)?,
        requests_memory: quantity("/resources/requests/memory", spec)?,
        limits_memory: quantity("/resources/limits/memory", spec)?,
        storage: Some(storage).filter(|s| s.0 > 0),
        // CNPG always gives an instance its data PVC.
        pvcs: pvcs.max(1),
    })
}

/// A Cluster and the ResourceQuotas of its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub cluster: ClusterFacts,
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
