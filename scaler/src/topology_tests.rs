use serde_json::json;

use super::*;

fn cluster(ns: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &cluster_resource()).within(ns);
    object.data = json!({ "spec": spec });
    object
}

fn quota(ns: &str, name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> ResourceQuota {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"hard": hard.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "status": {"used": used.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
    }))
    .unwrap()
}

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

#[test]
fn index_follows_watch_events_and_waits_for_both_lists() {
    let index = ClusterIndex::default();
    let (mut clusters, mut quotas) = (Namespaced::new(), Namespaced::new());
    assert_eq!(index.get("ns", "pg"), Err(TopologyError::NotSynced));
    index.apply_cluster(watcher::Event::Init, &mut clusters);
    index.apply_cluster(
        watcher::Event::InitApply(cluster("ns", "pg", json!({"instances": 3}))),
        &mut clusters,
    );
    index.apply_cluster(watcher::Event::InitDone, &mut clusters);
    // Clusters listed, quotas not yet: still not synced.
    assert_eq!(index.get("ns", "pg"), Err(TopologyError::NotSynced));
    index.apply_quota(watcher::Event::Init, &mut quotas);
    index.apply_quota(
        watcher::Event::InitApply(quota("ns", "q", &[("pods", "10")], &[("pods", "3")])),
        &mut quotas,
    );
    index.apply_quota(
        watcher::Event::InitApply(quota("other", "q", &[("pods", "1")], &[])),
        &mut quotas,
    );
    index.apply_quota(watcher::Event::InitDone, &mut quotas);
    let snapshot = index.get("ns", "pg").unwrap();
    assert_eq!(snapshot.cluster.instances, 3);
    assert_eq!(snapshot.quotas.len(), 1, "only the Cluster's namespace");
    assert_eq!(snapshot.quotas[0].hard["pods"], Milli(10_000));

    index.apply_cluster(
        watcher::Event::Apply(cluster("ns", "pg", json!({"instances": 5}))),
        &mut clusters,
    );
    assert_eq!(index.get("ns", "pg").unwrap().cluster.instances, 5);
    index.apply_quota(
        watcher::Event::Delete(quota("ns", "q", &[], &[])),
        &mut quotas,
    );
    assert!(index.get("ns", "pg").unwrap().quotas.is_empty());
    assert!(matches!(
        index.get("other", "pg"),
        Err(TopologyError::NotFound { .. })
    ));
    // An update that turns unreadable drops the stale facts.
    index.apply_cluster(
        watcher::Event::Apply(cluster("ns", "pg", json!({"instances": "five"}))),
        &mut clusters,
    );
    assert!(matches!(
        index.get("ns", "pg"),
        Err(TopologyError::NotFound { .. })
    ));
    // A relist replaces everything at once.
    index.apply_cluster(
        watcher::Event::Apply(cluster("ns", "old", json!({"instances": 2}))),
        &mut clusters,
    );
    index.apply_cluster(watcher::Event::Init, &mut clusters);
    index.apply_cluster(
        watcher::Event::InitApply(cluster("ns", "new", json!({"instances": 2}))),
        &mut clusters,
    );
    assert!(index.get("ns", "old").is_ok());
    index.apply_cluster(watcher::Event::InitDone, &mut clusters);
    assert!(index.get("ns", "old").is_err());
    assert!(index.get("ns", "new").is_ok());
}
