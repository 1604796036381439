//! The scaler's Kubernetes calls, against the scripted API server every crate's tests use
//! (`runtime::mock`, the pattern of kube-rs/controller-rs): the watch-fed index of Clusters, RedisFailovers and
//! ResourceQuotas (three lists, then watch events; unreadable Clusters kept with their error; unsynced until the
//! first lists) and the direct GET + ResourceQuota LIST of `explain` (a Cluster, a RedisFailover, not found,
//! forbidden, timeout). The e2e suite runs
//! the same code against a real kube-apiserver (tests/e2e/test_guards.py).
use std::time::Duration;

use prometheus_client::registry::Registry;
use runtime::mock::{self, list, status};
use scaler::metrics::Metrics;
use scaler::topology::{ClusterIndex, Kind, Topology, TopologyError};
use scaler_core::cluster::Snapshot;
use scaler_core::metadata::Engine;
use scaler_core::quota::Milli;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn cluster(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "5"},
        "spec": spec,
    })
}

fn failover(namespace: &str, name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "databases.spotahome.com/v1",
        "kind": "RedisFailover",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "6"},
        "spec": {"redis": {"replicas": replicas}, "sentinel": {"replicas": 3}},
    })
}

fn quota(namespace: &str, name: &str, hard: Value, used: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "7"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used},
    })
}

/// Polls until `check` holds for the index's answer (the watch tasks apply events concurrently).
async fn until(
    index: &ClusterIndex,
    what: &str,
    check: impl Fn(&Result<Snapshot, TopologyError>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !check(&index.get(Kind::Cluster, "tenant-a", "pg")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {:?}",
            index.get(Kind::Cluster, "tenant-a", "pg")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_index_lists_then_follows_watch_events_of_every_kind() {
    let (client, mut api) = mock::client();
    let shutdown = CancellationToken::new();
    // Owns the watch tasks; dropping it at the end stops them.
    let mut app = runtime::app::App::with_shutdown("test", shutdown.clone());
    let index = ClusterIndex::spawn(&mut app, client);
    assert_eq!(
        index.get(Kind::Cluster, "tenant-a", "pg"),
        Err(TopologyError::NotSynced {
            kind: Kind::Cluster,
            last_error: None
        })
    );

    // Three watches run at once: answer the six requests (three lists, three watches) in any order.
    for _ in 0..6 {
        let (sent, held) = api.next().await;
        let watching = sent.query.contains("watch=true");
        if watching {
            assert!(sent.query.contains("resourceVersion=10"), "{sent:?}");
        }
        match (sent.path.as_str(), watching) {
            ("/apis/postgresql.cnpg.io/v1/clusters", false) => held.answer(200, &list(
                "ClusterList",
                vec![
                    cluster(
                        "tenant-a",
                        "pg",
                        json!({"instances": 3, "postgresql": {"synchronous": {"number": 2}},
                               "resources": {"requests": {"cpu": "500m"}}}),
                    ),
                    cluster("tenant-b", "pg", json!({"maxSyncReplicas": 1})),
                    // Not a count: an error for this Cluster only, and it says why (not "not found").
                    cluster("tenant-c", "broken", json!({"instances": "three"})),
                ],
            )),
            ("/api/v1/resourcequotas", false) => held.answer(200, &list(
                "ResourceQuotaList",
                vec![
                    quota(
                        "tenant-a",
                        "compute",
                        json!({"requests.cpu": "4"}),
                        json!({"requests.cpu": "1500m"}),
                    ),
                    quota(
                        "tenant-b",
                        "compute",
                        json!({"pods": "5"}),
                        json!({"pods": "1"}),
                    ),
                ],
            )),
            ("/apis/postgresql.cnpg.io/v1/clusters", true) => {
                let mut modified = cluster(
                    "tenant-a",
                    "pg",
                    json!({"instances": 5, "resources": {"requests": {"cpu": "500m"}}}),
                );
                modified["status"] = json!({"instances": 5, "readyInstances": 3, "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T19:00:00Z"}]});
                held.answer_events(&[
                    json!({"type": "MODIFIED", "object": modified}),
                    json!({"type": "DELETED", "object": cluster("tenant-b", "pg", json!({}))}),
                ]);
            }
            ("/apis/databases.spotahome.com/v1/redisfailovers", false) => held.answer(
                200,
                &list("RedisFailoverList", vec![failover("tenant-a", "cache", 2)]),
            ),
            ("/apis/databases.spotahome.com/v1/redisfailovers", true) => held.answer_events(&[
                json!({"type": "MODIFIED", "object": failover("tenant-a", "cache", 4)}),
            ]),
            ("/api/v1/resourcequotas", true) => held.answer_events(&[json!({"type": "MODIFIED",
                "object": quota("tenant-a", "compute", json!({"requests.cpu": "4"}), json!({"requests.cpu": "2500m"}))})]),
            _ => panic!("unexpected request {sent:?}"),
        }
    }

    until(&index, "the MODIFIED events", |got| {
        got.as_ref().is_ok_and(|s| {
            s.cluster.instances == 5
                && s.quotas
                    .first()
                    .and_then(|q| q.used.as_ref())
                    .map(|u| u["requests.cpu"])
                    == Some(Milli(2_500))
        })
    })
    .await;
    let snapshot = index.get(Kind::Cluster, "tenant-a", "pg").unwrap();
    let status = snapshot.cluster.status.unwrap();
    assert_eq!(
        (status.ready, status.not_ready_since),
        (3, Some(1_796_065_200))
    );
    assert_eq!(snapshot.cluster.cost.requests_cpu, Some(Milli(500)));
    assert_eq!(snapshot.quotas.len(), 1);
    assert!(matches!(
        index.get(Kind::Cluster, "tenant-c", "broken"),
        Err(TopologyError::Unreadable { .. })
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while index.get(Kind::Cluster, "tenant-b", "pg").is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the DELETED event was not applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The RedisFailover's count, and its namespace's quotas beside it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let failover = loop {
        match index.get(Kind::Failover, "tenant-a", "cache") {
            Ok(snapshot) if snapshot.cluster.instances == 4 => break snapshot,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the RedisFailover's MODIFIED event: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(failover.quotas.len(), 1);
    shutdown.cancel();
}

#[tokio::test]
async fn a_direct_lookup_reads_one_cluster_and_its_quotas_and_bounds_the_wait() {
    let (client, mut api) = mock::client();
    let timeout = Duration::from_millis(300);
    let topology = Topology::Direct { client, timeout };
    let metrics = Metrics::register(&mut Registry::default());

    // Each lookup sends a GET of its object and a ResourceQuota LIST, in either order.
    let gave_up = tokio::sync::Notify::new();
    let server = async {
        for lookup in 0..5 {
            for _ in 0..2 {
                let (sent, held) = api.next().await;
                if sent.path == "/api/v1/namespaces/tenant-a/resourcequotas" {
                    let quotas = vec![quota(
                        "tenant-a",
                        "q",
                        json!({"pods": "6"}),
                        json!({"pods": "4"}),
                    )];
                    held.answer(200, &list("ResourceQuotaList", quotas));
                    continue;
                }
                match lookup {
                    0 => {
                        assert_eq!(
                            sent.path,
                            "/apis/postgresql.cnpg.io/v1/namespaces/tenant-a/clusters/pg"
                        );
                        held.answer(200, &cluster("tenant-a", "pg", json!({"instances": 4})));
                    }
                    1 => {
                        assert_eq!(
                            sent.path,
                            "/apis/databases.spotahome.com/v1/namespaces/tenant-a/redisfailovers/cache"
                        );
                        held.answer(200, &failover("tenant-a", "cache", 5));
                    }
                    2 => held.answer(404, &status(404, "NotFound")),
                    3 => held.answer(403, &status(403, "Forbidden")),
                    // The last GET gets no answer at all.
                    _ => {
                        gave_up.notified().await;
                        drop(held);
                    }
                }
            }
        }
    };
    let lookup = |engine, name| topology.lookup(engine, "tenant-a", name, &metrics);
    let client = async {
        let found = lookup(Engine::Cnpg, "pg").await;
        let redis = lookup(Engine::Redis, "cache").await;
        // A Pooler's count is its instance series': no request at all.
        let pooler = lookup(Engine::Pgbouncer, "pooler").await;
        let missing = lookup(Engine::Cnpg, "gone").await;
        let forbidden = lookup(Engine::Redis, "secret").await;
        let started = tokio::time::Instant::now();
        let silent = lookup(Engine::Cnpg, "slow").await;
        let took = started.elapsed();
        gave_up.notify_one();
        (found, redis, pooler, missing, forbidden, silent, took)
    };
    let ((found, redis, pooler, missing, forbidden, silent, took), ()) =
        tokio::join!(client, server);
    let found = found.unwrap().unwrap();
    assert_eq!((found.cluster.instances, found.cluster.quorum), (4, None));
    assert_eq!(found.quotas.len(), 1);
    let redis = redis.unwrap().unwrap();
    assert_eq!((redis.cluster.instances, redis.quotas.len()), (5, 1));
    assert_eq!(pooler, Ok(None));
    assert_eq!(found.quotas[0].hard["pods"], Milli(6_000));
    assert!(
        matches!(missing, Err(TopologyError::NotFound { .. })),
        "{missing:?}"
    );
    // Only a 404 is "not found": any other failure is the API's error, named.
    let forbidden = forbidden.unwrap_err();
    assert!(
        matches!(&forbidden, TopologyError::Api { error, .. } if error.contains("Forbidden")),
        "{forbidden:?}"
    );
    assert!(
        forbidden
            .to_string()
            .starts_with("cannot read RedisFailover tenant-a/secret"),
        "{forbidden}"
    );
    assert_eq!(
        silent,
        Err(TopologyError::Timeout {
            kind: Kind::Cluster,
            timeout
        })
    );
    // Bounded by the timeout, not by the silent server (generous: the machine may be loaded).
    assert!(took >= timeout && took < timeout * 10, "took {took:?}");
}
