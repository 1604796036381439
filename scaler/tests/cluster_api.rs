//! The scaler's Kubernetes calls, against a scripted API server (tower-test, the pattern of
//! kube-rs/controller-rs): the watch-fed Cluster index (list, then watch events; unreadable
//! Clusters skipped; unsynced until the first full list) and the direct Cluster GET of `explain`
//! (found, not found, timeout). The e2e suite runs the same code against a real kube-apiserver.
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use prometheus_client::registry::Registry;
use scaler::metrics::Metrics;
use scaler::topology::{ClusterFacts, ClusterIndex, Topology, TopologyError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn client() -> (kube::Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

fn cluster(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "5"},
        "spec": spec,
    })
}

fn respond(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

async fn next(api: &mut ApiHandle) -> (Request<Body>, mock::SendResponse<Response<Body>>) {
    tokio::time::timeout(Duration::from_secs(2), api.next_request())
        .await
        .expect("no request reached the API server")
        .expect("the mock service closed")
}

async fn wait_for(
    index: &ClusterIndex,
    ns: &str,
    name: &str,
) -> Result<ClusterFacts, TopologyError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let got = index.get(ns, name);
        if got.is_ok() || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_index_lists_then_follows_watch_events() {
    let (client, mut api) = client();
    let shutdown = CancellationToken::new();
    let index = ClusterIndex::spawn(client, shutdown.clone());
    assert_eq!(index.get("tenant-a", "pg"), Err(TopologyError::NotSynced));

    let (list, send) = next(&mut api).await;
    assert_eq!(list.uri().path(), "/apis/postgresql.cnpg.io/v1/clusters");
    assert!(!list.uri().query().unwrap_or("").contains("watch=true"));
    let items = json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "ClusterList",
        "metadata": {"resourceVersion": "10"},
        "items": [
            cluster("tenant-a", "pg", json!({"instances": 3, "postgresql": {"synchronous": {"number": 2}}})),
            cluster("tenant-b", "pg", json!({"maxSyncReplicas": 1})),
            // Not a count: skipped with a warning, never an error for the other Clusters.
            cluster("tenant-c", "broken", json!({"instances": "three"})),
        ],
    });
    send.send_response(respond(StatusCode::OK, serde_json::to_vec(&items).unwrap()));

    let (watch, send) = next(&mut api).await;
    let query = watch.uri().query().unwrap_or("").to_owned();
    assert!(
        query.contains("watch=true") && query.contains("resourceVersion=10"),
        "{query}"
    );
    assert_eq!(
        index.get("tenant-a", "pg"),
        Ok(ClusterFacts {
            instances: 3,
            quorum: Some(2)
        })
    );
    // CNPG's default of one instance when `instances` is absent; the legacy quorum field.
    assert_eq!(
        index.get("tenant-b", "pg"),
        Ok(ClusterFacts {
            instances: 1,
            quorum: Some(1)
        })
    );
    assert!(matches!(
        index.get("tenant-c", "broken"),
        Err(TopologyError::NotFound { .. })
    ));

    let mut events = Vec::new();
    for event in [
        json!({"type": "MODIFIED", "object": cluster("tenant-a", "pg", json!({"instances": 5}))}),
        json!({"type": "DELETED", "object": cluster("tenant-b", "pg", json!({}))}),
    ] {
        events.extend(serde_json::to_vec(&event).unwrap());
        events.push(b'\n');
    }
    send.send_response(respond(StatusCode::OK, events));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while index.get("tenant-a", "pg").map(|f| f.instances) != Ok(5) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the MODIFIED event was not applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(
        wait_for(&index, "tenant-b", "pg").await,
        Err(TopologyError::NotFound { .. })
    ));
    shutdown.cancel();
}

#[tokio::test]
async fn a_direct_lookup_reads_one_cluster_and_bounds_the_wait() {
    let (client, mut api) = client();
    let timeout = Duration::from_millis(300);
    let topology = Topology::Direct { client, timeout };
    let metrics = Metrics::register(&mut Registry::default());

    // The server holds the third request until the client has given up on it.
    let gave_up = tokio::sync::Notify::new();
    let server = async {
        let (get, send) = next(&mut api).await;
        assert_eq!(
            get.uri().path(),
            "/apis/postgresql.cnpg.io/v1/namespaces/tenant-a/clusters/pg"
        );
        let body = cluster("tenant-a", "pg", json!({"instances": 4}));
        send.send_response(respond(StatusCode::OK, serde_json::to_vec(&body).unwrap()));
        let (_, send) = next(&mut api).await;
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found"});
        send.send_response(respond(
            StatusCode::NOT_FOUND,
            serde_json::to_vec(&status).unwrap(),
        ));
        // The third lookup gets no answer at all.
        let (_, send) = next(&mut api).await;
        gave_up.notified().await;
        drop(send);
    };
    let client = async {
        let found = topology.lookup("tenant-a", "pg", &metrics).await;
        let missing = topology.lookup("tenant-a", "gone", &metrics).await;
        let started = tokio::time::Instant::now();
        let silent = topology.lookup("tenant-a", "slow", &metrics).await;
        gave_up.notify_one();
        (found, missing, silent, started.elapsed())
    };
    let ((found, missing, silent, took), ()) = tokio::join!(client, server);
    assert_eq!(
        found,
        Ok(Some(ClusterFacts {
            instances: 4,
            quorum: None
        }))
    );
    assert!(
        matches!(missing, Err(TopologyError::NotFound { .. })),
        "{missing:?}"
    );
    assert_eq!(silent, Err(TopologyError::Timeout(timeout)));
    // Bounded by the timeout, not by the silent server (generous: the machine may be loaded).
    assert!(took >= timeout && took < timeout * 10, "took {took:?}");
}
