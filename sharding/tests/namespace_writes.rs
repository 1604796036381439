//! The webhook's Kubernetes calls, against the scripted API server every crate's tests use
//! (`runtime::mock`, the pattern of kube-rs/controller-rs): the resourceVersion-conditioned namespace label write, adoption of a
//! concurrent writer's choice after a 409, the bounded number of attempts, and the API timeout.
//! The real kube-apiserver runs the same paths in tests/webhook; this pins the exact requests.
use std::time::Duration;

use prometheus_client::registry::Registry;
use runtime::mock::{self, ApiServer, Held, status};
use serde_json::{Value, json};
use sharding::index::{self, Index};
use sharding::webhook::assign::{Policy, Resolver};
use sharding::webhook::metrics::Metrics;
use sharding::webhook::mutate::{Admit, Pending, Reason, admit};
use sharding::webhook::review::AdmissionReview;

const TENANT: &str = "tenant-foo";
const API_TIMEOUT: Duration = Duration::from_millis(300);
const NAMESPACE_PATH: &str = "/api/v1/namespaces/tenant-foo";

fn pending(dry_run: bool) -> Pending {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b9d7a3e-2f1c-4a55-9c1e-000000000001",
            "kind": {"group": "helm.toolkit.fluxcd.io", "version": "v2", "kind": "HelmRelease"},
            "resource": {"group": "helm.toolkit.fluxcd.io", "version": "v2", "resource": "helmreleases"},
            "namespace": TENANT,
            "operation": "CREATE",
            "object": {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": "postgres-db", "namespace": TENANT,
                             "labels": {"sharding.fluxcd.io/key": "tenants"}},
                "spec": {"interval": "5m"}
            },
            "dryRun": dry_run
        }
    });
    let review = AdmissionReview::from_slice(&serde_json::to_vec(&body).unwrap()).unwrap();
    match admit(&review.request) {
        Admit::NeedsShard(p) => p,
        Admit::Done(o) => panic!("expected a shard lookup, got {:?}", o.reason),
    }
}

/// A resolver over a synced, empty index with three shards, talking to the mock API server.
fn resolver() -> (Resolver, ApiServer) {
    let (client, api) = mock::client();
    let index = Index::shared();
    {
        let mut index = index::write(&index);
        index.releases.set_synced();
        index.namespaces.set_synced();
    }
    let policy = Policy {
        shards: 3,
        pinned: Default::default(),
        assume_ready: true,
    };
    let metrics = Metrics::register(&mut Registry::default());
    let resolver = Resolver::new(index, kube::Api::all(client), policy, API_TIMEOUT, metrics);
    (resolver, api)
}

fn namespace(resource_version: &str, shard_label: Option<&str>) -> Value {
    let mut ns = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": TENANT, "resourceVersion": resource_version, "labels": {}},
    });
    if let Some(label) = shard_label {
        ns["metadata"]["labels"]["internal.cozystack.io/flux-shard"] = json!(label);
    }
    ns
}

/// Expects one request with `method` on the tenant namespace: what it sent, and its answer.
async fn expect(api: &mut ApiServer, method: &str) -> (Value, Held) {
    let (sent, held) = api.hold(method, NAMESPACE_PATH).await;
    (sent.body, held)
}

#[tokio::test]
async fn places_an_unlabelled_tenant_with_a_conditional_write() {
    let (resolver, mut api) = resolver();
    let p = pending(false);
    let server = async {
        let (_, send) = expect(&mut api, "GET").await;
        send.answer(200, &namespace("41", None));
        let (patch, send) = expect(&mut api, "PATCH").await;
        // The precondition: the write names the resourceVersion it read.
        assert_eq!(patch["metadata"]["resourceVersion"], "41");
        let label = patch["metadata"]["labels"]["internal.cozystack.io/flux-shard"].clone();
        send.answer(200, &namespace("42", label.as_str()));
        label
    };
    let (shard, label) = tokio::join!(resolver.shard_for(&p), server);
    let shard = shard.expect("placed");
    assert_eq!(label, json!(format!("shard{shard}")));
    // Recorded: the next create of this tenant needs no API call (the mock would hang it).
    assert_eq!(resolver.shard_for(&p).await, Ok(shard));
}

#[tokio::test]
async fn a_conflict_adopts_the_concurrent_writers_choice() {
    let (resolver, mut api) = resolver();
    let p = pending(false);
    let server = async {
        let (_, send) = expect(&mut api, "GET").await;
        send.answer(200, &namespace("7", None));
        let (_, send) = expect(&mut api, "PATCH").await;
        send.answer(409, &status(409, "Conflict"));
        // Re-read: another replica labelled the namespace meanwhile.
        let (_, send) = expect(&mut api, "GET").await;
        send.answer(200, &namespace("8", Some("shard2")));
    };
    let (shard, ()) = tokio::join!(resolver.shard_for(&p), server);
    assert_eq!(
        shard,
        Ok(2),
        "the winner's label is adopted, not overwritten"
    );
}

#[tokio::test]
async fn repeated_conflicts_give_up_after_a_bounded_number_of_writes() {
    let (resolver, mut api) = resolver();
    let p = pending(false);
    let server = async {
        let mut writes = 0;
        while let Some((sent, held)) = api.next_within(Duration::from_millis(500)).await {
            if sent.method == "PATCH" {
                writes += 1;
                held.answer(409, &status(409, "Conflict"));
            } else {
                held.answer(200, &namespace(&writes.to_string(), None));
            }
        }
        writes
    };
    let (shard, writes) = tokio::join!(resolver.shard_for(&p), server);
    assert_eq!(shard, Err(Reason::ApiError));
    assert_eq!(writes, 3);
}

#[tokio::test]
async fn a_silent_api_server_times_out_within_the_api_timeout() {
    let (resolver, mut api) = resolver();
    let p = pending(false);
    let resolve = async {
        let started = tokio::time::Instant::now();
        (resolver.shard_for(&p).await, started.elapsed())
    };
    let hold = async {
        // Accept the GET and never answer it (a generous hold: the machine may be loaded).
        let (_, send) = expect(&mut api, "GET").await;
        tokio::time::sleep(API_TIMEOUT * 10).await;
        drop(send);
    };
    let ((shard, took), ()) = tokio::join!(resolve, hold);
    assert_eq!(shard, Err(Reason::Timeout));
    assert!(
        took >= API_TIMEOUT && took < API_TIMEOUT * 10,
        "took {took:?}"
    );
}

#[tokio::test]
async fn a_dry_run_reads_but_never_writes() {
    let (resolver, mut api) = resolver();
    let p = pending(true);
    let server = async {
        let (_, send) = expect(&mut api, "GET").await;
        send.answer(200, &namespace("3", None));
        // No PATCH may follow.
        api.silent_for(Duration::from_millis(300)).await;
    };
    let (shard, ()) = tokio::join!(resolver.shard_for(&p), server);
    assert!(shard.is_ok());
}
