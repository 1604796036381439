use serde_json::{Value, json};

use super::*;
use crate::watch::helmrelease_resource;
use runtime::mock::{self, ApiServer};

const NS: &str = "/api/v1/namespaces/tenant-a";

fn hr_path(name: &str) -> String {
    format!("/apis/helm.toolkit.fluxcd.io/v2/namespaces/tenant-a/helmreleases/{name}")
}

fn relabeler() -> (Relabeler, ApiServer) {
    let (client, server) = mock::client();
    let r = Relabeler::new(client, helmrelease_resource(), Duration::from_secs(5));
    (r, server)
}

fn refs(names: &[&str]) -> Vec<ReleaseRef> {
    names
        .iter()
        .map(|n| ReleaseRef {
            namespace: "tenant-a".into(),
            name: (*n).into(),
        })
        .collect()
}

/// Shards 0 and 1 live, K = 2.
fn gate() -> &'static Gate {
    static GATE: std::sync::LazyLock<Gate> = std::sync::LazyLock::new(|| Gate {
        live: BTreeSet::from([0, 1]),
        shard_count: 2,
    });
    &GATE
}

fn hr(name: &str, key: &str, rv: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": "tenant-a", "resourceVersion": rv,
                     "labels": {"sharding.fluxcd.io/key": key}},
        "spec": {"interval": "1m"},
        "status": {"conditions": conditions},
    })
}

fn ready() -> Value {
    json!([{"type": "Ready", "status": "True"}])
}

fn upgrading() -> Value {
    json!([{"type": "Ready", "status": "Unknown"}, {"type": "Reconciling", "status": "True"}])
}

fn namespace(label: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": "tenant-a", "resourceVersion": rv,
                        "labels": {"internal.cozystack.io/flux-shard": label}}})
}

/// The label a conditional relabel wrote.
fn label<'a>(sent: &'a Value, key: &str) -> &'a Value {
    &sent["metadata"]["labels"][key]
}

#[tokio::test]
async fn a_move_relabels_the_namespace_first_then_every_release_conditionally() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app", "db"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        async {
            s.get(&hr_path("app"), hr("app", "shard2", "11", ready()))
                .await;
            // Mid-upgrade, but on removed shard2: nobody runs it, so it moves.
            s.get(&hr_path("db"), hr("db", "shard2", "12", upgrading()))
                .await;
            s.get(NS, namespace("shard2", "5")).await;
            let sent = s
                .conditional("PATCH", NS, "5", namespace("shard0", "6"))
                .await;
            assert_eq!(label(&sent, NAMESPACE_SHARD_LABEL), "shard0");
            let app = hr("app", "shard0", "13", ready());
            let sent = s.conditional("PATCH", &hr_path("app"), "11", app).await;
            assert_eq!(label(&sent, SHARD_KEY_LABEL), "shard0");
            let db = hr("db", "shard0", "14", ready());
            let sent = s.conditional("PATCH", &hr_path("db"), "12", db).await;
            assert_eq!(label(&sent, SHARD_KEY_LABEL), "shard0");
        },
    )
    .await;
    assert_eq!(
        outcome.unwrap(),
        Outcome::Relabelled {
            namespace: true,
            releases: 2,
            skipped: 0
        }
    );
    s.done();
}

#[tokio::test]
async fn a_deleting_release_blocks_the_whole_move_before_any_write() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app", "db"]);
    let mut gone = hr("app", "shard2", "11", ready());
    gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        s.get(&hr_path("app"), gone),
    )
    .await;
    assert_eq!(outcome.unwrap(), Outcome::Blocked(Blocked::Deleting));
    s.done();
}

#[tokio::test]
async fn an_upgrade_running_on_a_live_shard_blocks_a_rebalance() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 1, gate(), Mode::Move),
        s.get(&hr_path("app"), hr("app", "shard0", "11", upgrading())),
    )
    .await;
    assert_eq!(outcome.unwrap(), Outcome::Blocked(Blocked::InProgress));
    s.done();
}

#[tokio::test]
async fn a_namespace_changed_since_read_aborts_the_move_before_releases_are_touched() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        async {
            s.get(&hr_path("app"), hr("app", "shard2", "11", ready()))
                .await;
            s.get(NS, namespace("shard2", "5")).await;
            s.fail("PATCH", NS, 409, "Conflict").await;
        },
    )
    .await;
    assert_eq!(outcome.unwrap(), Outcome::Conflict);
    s.done();
}

#[tokio::test]
async fn a_release_conflict_is_re_read_and_retried_with_the_new_version() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        async {
            s.get(&hr_path("app"), hr("app", "shard2", "11", ready()))
                .await;
            s.get(NS, namespace("shard0", "5")).await;
            s.fail("PATCH", &hr_path("app"), 409, "Conflict").await;
            s.get(&hr_path("app"), hr("app", "shard2", "15", ready()))
                .await;
            let app = hr("app", "shard0", "16", ready());
            let sent = s.conditional("PATCH", &hr_path("app"), "15", app).await;
            assert_eq!(label(&sent, SHARD_KEY_LABEL), "shard0");
        },
    )
    .await;
    assert_eq!(
        outcome.unwrap(),
        Outcome::Relabelled {
            namespace: false,
            releases: 1,
            skipped: 0
        }
    );
    s.done();
}

#[tokio::test]
async fn nothing_is_written_when_everything_is_already_there() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app", "gone"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        async {
            s.get(&hr_path("app"), hr("app", "shard0", "11", ready()))
                .await;
            s.fail("GET", &hr_path("gone"), 404, "NotFound").await;
            s.get(NS, namespace("shard0", "5")).await;
        },
    )
    .await;
    assert_eq!(outcome.unwrap(), Outcome::AlreadyThere);
    s.done();
}

#[tokio::test]
async fn healing_skips_a_blocked_straggler_and_relabels_the_rest() {
    let (r, mut s) = relabeler();
    let releases = refs(&["busy", "app"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Heal),
        async {
            s.get(&hr_path("busy"), hr("busy", "shard1", "11", upgrading()))
                .await;
            s.get(&hr_path("app"), hr("app", "shard1", "12", ready()))
                .await;
            s.get(NS, namespace("shard0", "5")).await;
            let app = hr("app", "shard0", "13", ready());
            s.conditional("PATCH", &hr_path("app"), "12", app).await;
        },
    )
    .await;
    assert_eq!(
        outcome.unwrap(),
        Outcome::Relabelled {
            namespace: false,
            releases: 1,
            skipped: 1
        }
    );
    s.done();
}

#[tokio::test]
async fn an_api_failure_names_the_object() {
    let (r, mut s) = relabeler();
    let releases = refs(&["app"]);
    let outcome = mock::scripted(
        r.relabel("tenant-a", &releases, 0, gate(), Mode::Move),
        s.fail("GET", &hr_path("app"), 403, "Forbidden"),
    )
    .await;
    let error = outcome.unwrap_err().to_string();
    assert!(error.contains("read tenant-a/app"), "{error}");
}

#[test]
fn release_state_reads_conditions_and_deletion() {
    let obj = |v: Value| serde_json::from_value::<DynamicObject>(v).unwrap();
    assert_eq!(
        release_state(&obj(hr("a", "shard0", "1", ready()))),
        ReleaseState::default()
    );
    assert!(release_state(&obj(hr("a", "shard0", "1", upgrading()))).in_progress);
    let reconciling =
        json!([{"type": "Ready", "status": "True"}, {"type": "Reconciling", "status": "True"}]);
    assert!(release_state(&obj(hr("a", "shard0", "1", reconciling))).in_progress);
    let failed =
        json!([{"type": "Ready", "status": "False"}, {"type": "Stalled", "status": "True"}]);
    assert!(!release_state(&obj(hr("a", "shard0", "1", failed))).in_progress);
    let mut never = hr("a", "shard0", "1", json!(null));
    never.as_object_mut().unwrap().remove("status");
    assert_eq!(release_state(&obj(never)), ReleaseState::default());
}
