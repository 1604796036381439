use scaler_core::quota::Milli;
use serde_json::json;

use super::*;

fn cluster(ns: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &Kind::Cluster.resource()).within(ns);
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

/// A full list of Clusters, as a watch (re)start delivers it.
fn list_clusters(index: &ClusterIndex, objects: impl IntoIterator<Item = DynamicObject>) {
    index.apply(Kind::Cluster, watcher::Event::Init);
    for object in objects {
        index.apply(Kind::Cluster, watcher::Event::InitApply(object));
    }
    index.apply(Kind::Cluster, watcher::Event::InitDone);
}

#[test]
fn index_follows_watch_events_and_waits_for_both_lists() {
    let index = ClusterIndex::default();
    assert_eq!(
        index.get(Kind::Cluster, "ns", "pg"),
        Err(TopologyError::NotSynced {
            kind: Kind::Cluster,
            last_error: None
        })
    );
    list_clusters(&index, [cluster("ns", "pg", json!({"instances": 3}))]);
    // Clusters listed, quotas not yet: still not synced.
    assert_eq!(
        index.get(Kind::Cluster, "ns", "pg"),
        Err(TopologyError::NotSynced {
            kind: Kind::Cluster,
            last_error: None
        })
    );
    index.apply_quota(watcher::Event::Init);
    index.apply_quota(watcher::Event::InitApply(quota(
        "ns",
        "q",
        &[("pods", "10")],
        &[("pods", "3")],
    )));
    index.apply_quota(watcher::Event::InitApply(quota(
        "other",
        "q",
        &[("pods", "1")],
        &[],
    )));
    index.apply_quota(watcher::Event::InitDone);
    let snapshot = index.get(Kind::Cluster, "ns", "pg").unwrap();
    assert_eq!(snapshot.cluster.instances, 3);
    assert_eq!(snapshot.quotas.len(), 1, "only the Cluster's namespace");
    assert_eq!(snapshot.quotas[0].hard["pods"], Milli(10_000));

    index.apply(
        Kind::Cluster,
        watcher::Event::Apply(cluster("ns", "pg", json!({"instances": 5}))),
    );
    assert_eq!(
        index
            .get(Kind::Cluster, "ns", "pg")
            .unwrap()
            .cluster
            .instances,
        5
    );
    index.apply_quota(watcher::Event::Delete(quota("ns", "q", &[], &[])));
    assert!(
        index
            .get(Kind::Cluster, "ns", "pg")
            .unwrap()
            .quotas
            .is_empty()
    );
    assert!(matches!(
        index.get(Kind::Cluster, "other", "pg"),
        Err(TopologyError::NotFound { .. })
    ));
    // An update that turns unreadable drops the stale facts, and a lookup says why: it is
    // not "not found".
    index.apply(
        Kind::Cluster,
        watcher::Event::Apply(cluster("ns", "pg", json!({"instances": "five"}))),
    );
    let error = index.get(Kind::Cluster, "ns", "pg").unwrap_err();
    assert!(
        matches!(&error, TopologyError::Unreadable { error, .. } if error.contains("spec.instances")),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("ns/pg cannot be read"),
        "{error}"
    );
    // Relists (replaced at once, never half-visible) are `runtime::watch`'s, tested there.
}

#[test]
fn an_unreadable_quota_is_kept_and_a_watch_failure_is_said() {
    let index = ClusterIndex::default();
    index
        .clusters
        .failed("watching CNPG Clusters: 403 forbidden".into());
    let error = index.get(Kind::Cluster, "ns", "pg").unwrap_err();
    assert!(error.to_string().contains("403 forbidden"), "{error}");
    list_clusters(&index, [cluster("ns", "pg", json!({"instances": 3}))]);
    index.apply_quota(watcher::Event::Init);
    index.apply_quota(watcher::Event::InitApply(quota(
        "ns",
        "q",
        &[("requests.cpu", "lots")],
        &[],
    )));
    index.apply_quota(watcher::Event::InitDone);
    let snapshot = index.get(Kind::Cluster, "ns", "pg").unwrap();
    assert_eq!(snapshot.quotas.len(), 1, "kept, not skipped");
    let why = snapshot.quotas[0].unreadable.as_deref().unwrap();
    assert!(why.contains("requests.cpu"), "{why}");
}

fn failover(ns: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &Kind::Failover.resource()).within(ns);
    object.data = json!({ "spec": spec });
    object
}

#[test]
fn failovers_are_their_own_list_and_never_hold_readiness() {
    let index = ClusterIndex::default();
    list_clusters(&index, []);
    index.apply_quota(watcher::Event::Init);
    index.apply_quota(watcher::Event::InitDone);
    assert!(index.is_synced(), "ready without a RedisFailover list");
    // No CRD on the platform: the watch fails, and a Redis lookup says so.
    index
        .failovers
        .failed("watching RedisFailovers: 404 page not found".into());
    let error = index.get(Kind::Failover, "ns", "cache").unwrap_err();
    assert!(
        matches!(
            &error,
            TopologyError::NotSynced {
                kind: Kind::Failover,
                ..
            }
        ),
        "{error:?}"
    );
    let said = error.to_string();
    assert!(
        said.contains("RedisFailover and ResourceQuota lists") && said.contains("404"),
        "{said}"
    );
    index.apply(Kind::Failover, watcher::Event::Init);
    index.apply(
        Kind::Failover,
        watcher::Event::InitApply(failover("ns", "cache", json!({"redis": {"replicas": 4}}))),
    );
    index.apply(Kind::Failover, watcher::Event::InitDone);
    assert_eq!(
        index
            .get(Kind::Failover, "ns", "cache")
            .unwrap()
            .cluster
            .instances,
        4
    );
    // Same name, other kind: a Cluster named like the RedisFailover is not it.
    assert!(matches!(
        index.get(Kind::Cluster, "ns", "cache"),
        Err(TopologyError::NotFound {
            kind: Kind::Cluster,
            ..
        })
    ));
    index.apply(
        Kind::Failover,
        watcher::Event::Apply(failover("ns", "cache", json!({"redis": {"replicas": "4"}}))),
    );
    let error = index.get(Kind::Failover, "ns", "cache").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("RedisFailover ns/cache cannot be read: spec.redis.replicas"),
        "{error}"
    );
}

/// A tick holds one lookup future per key at once (1,600 with the defaults): the Kubernetes
/// read's state machine, kilobytes, is boxed inside, allocated only when a read happens.
#[test]
fn a_lookup_future_is_small() {
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    let lookup = Topology::Metrics.lookup(Engine::Cnpg, "ns", "pg", &metrics);
    let size = std::mem::size_of_val(&lookup);
    assert!(size <= 128, "a lookup future is {size} bytes");
}
