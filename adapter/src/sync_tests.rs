//! One sync against the scripted API server (`runtime::mock`): the requests the adapter sends,
//! in order, and what it reports.
use serde_json::{Value, json};

use super::*;
use crate::crd::{ScaleAdapterSpec, TargetRef};
use runtime::mock::{self, ApiServer};

const NS: &str = "tenant";
const DISCOVERY: &str = "/apis/databases.spotahome.com/v1";

fn target_path(name: &str) -> String {
    format!("/apis/databases.spotahome.com/v1/namespaces/{NS}/redisfailovers/{name}")
}

fn status_path(name: &str) -> String {
    format!("/apis/autoscaling.cozystack.io/v1alpha1/namespaces/{NS}/scaleadapters/{name}/status")
}

/// A syncer leading as long as the returned sender says so.
fn syncer() -> (Syncer, ApiServer, watch::Sender<bool>) {
    let (client, server) = mock::client();
    let (lead, leader) = watch::channel(true);
    let settings = Settings {
        min_interval: Duration::from_secs(30),
        api_timeout: Duration::from_secs(5),
        concurrency: 1,
    };
    let syncer = Syncer::new(client, settings, Metrics::default(), leader);
    (syncer, server, lead)
}

/// An adapter asking for `replicas` of the RedisFailover of the same name, as watched.
fn adapter(name: &str, replicas: i32) -> Arc<DynamicObject> {
    let mut a = ScaleAdapter::new(
        name,
        ScaleAdapterSpec {
            target_ref: TargetRef {
                api_version: "databases.spotahome.com/v1".into(),
                kind: "RedisFailover".into(),
                name: name.into(),
            },
            replicas_path: "/spec/redis/replicas".into(),
            replicas: Some(replicas),
            paused: false,
            selector: Some("app=redis".into()),
        },
    );
    a.metadata.namespace = Some(NS.into());
    Arc::new(serde_json::from_value(serde_json::to_value(a).unwrap()).unwrap())
}

fn redis_failover(name: &str, resource_version: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "databases.spotahome.com/v1", "kind": "RedisFailover",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": resource_version},
        "spec": {"redis": {"replicas": replicas}},
    })
}

/// The discovery answer for the RedisFailover kind (asked once per process).
async fn discovery(server: &mut ApiServer) {
    let resources = json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "databases.spotahome.com/v1",
        "resources": [{"name": "redisfailovers", "singularName": "redisfailover", "namespaced": true,
                       "kind": "RedisFailover", "verbs": ["get", "list", "watch", "patch"]}],
    });
    server.get(DISCOVERY, resources).await;
}

/// The `Synced` condition the next request (the status write of `name`) carries.
async fn reported(server: &mut ApiServer, name: &str) -> Value {
    let sent = server
        .expect(
            "PATCH",
            &status_path(name),
            200,
            serde_json::to_value(&*adapter(name, 0)).unwrap(),
        )
        .await;
    sent.body["status"]["conditions"][0].clone()
}

#[tokio::test]
async fn a_target_deleted_or_changed_after_its_read_is_never_created_or_overwritten() {
    for (code, reason, answer) in [
        (404, "NotFound", "TargetMissing"),
        (409, "Conflict", "TargetChanged"),
    ] {
        let (syncer, mut server, _lead) = syncer();
        let sync = syncer.sync(vec![adapter("cache", 4)]);
        mock::scripted(sync, async {
            discovery(&mut server).await;
            server
                .get(&target_path("cache"), redis_failover("cache", "41", 2))
                .await;
            let sent = server
                .expect(
                    "PATCH",
                    &target_path("cache"),
                    code,
                    mock::status(code, reason),
                )
                .await;
            // A merge patch cannot create an object, and the API server checks the version.
            assert_eq!(sent.content_type, "application/merge-patch+json");
            assert_eq!(
                sent.body,
                json!({"metadata": {"resourceVersion": "41"}, "spec": {"redis": {"replicas": 4}}})
            );
            let synced = reported(&mut server, "cache").await;
            assert_eq!(
                (&synced["status"], &synced["reason"]),
                (&json!("False"), &json!(answer))
            );
        })
        .await;
        server.done();
    }
}

#[tokio::test]
async fn a_write_reports_the_count_the_target_holds() {
    let (syncer, mut server, _lead) = syncer();
    let sync = syncer.sync(vec![adapter("cache", 4)]);
    mock::scripted(sync, async {
        discovery(&mut server).await;
        server
            .get(&target_path("cache"), redis_failover("cache", "41", 2))
            .await;
        server
            .expect(
                "PATCH",
                &target_path("cache"),
                200,
                redis_failover("cache", "42", 4),
            )
            .await;
        let synced = reported(&mut server, "cache").await;
        assert_eq!(
            (&synced["status"], &synced["reason"]),
            (&json!("True"), &json!("Synced"))
        );
    })
    .await;
    server.done();
    assert_eq!(syncer.metrics.writes.get(), 1);
}

#[tokio::test]
async fn a_valkey_failover_is_driven_and_an_unknown_engine_is_never_written() {
    let (syncer, mut server, _lead) = syncer();
    let with_engine = |name: &str, engine: &str, rv: &str, replicas: i32| {
        let mut rf = redis_failover(name, rv, replicas);
        rf["spec"]["engine"] = json!(engine);
        rf
    };
    let sync = syncer.sync(vec![adapter("valkey", 4), adapter("keydb", 4)]);
    mock::scripted(sync, async {
        discovery(&mut server).await;
        server
            .get(
                &target_path("valkey"),
                with_engine("valkey", "Valkey", "41", 2),
            )
            .await;
        server
            .expect(
                "PATCH",
                &target_path("valkey"),
                200,
                with_engine("valkey", "Valkey", "42", 4),
            )
            .await;
        let synced = reported(&mut server, "valkey").await;
        assert_eq!(synced["reason"], json!("Synced"), "{synced}");
        // Read, refused, reported: the next request is the status write, never a PATCH.
        server
            .get(&target_path("keydb"), with_engine("keydb", "KeyDB", "7", 2))
            .await;
        let refused = reported(&mut server, "keydb").await;
        assert_eq!(
            (&refused["status"], &refused["reason"]),
            (&json!("False"), &json!("TargetRefused"))
        );
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("spec.engine \"KeyDB\"") && message.contains("Redis or Valkey"),
            "{message}"
        );
    })
    .await;
    server.done();
    assert_eq!(syncer.metrics.writes.get(), 1);
}

#[tokio::test]
async fn a_lead_lost_mid_sync_stops_it_at_once() {
    let (syncer, mut server, lead) = syncer();
    syncer.metrics.leader.set(1);
    let adapters = ["a", "b", "c"].map(|name| adapter(name, 4));
    let sync = syncer.sync(adapters.to_vec());
    let script = async {
        discovery(&mut server).await;
        server
            .get(&target_path("a"), redis_failover("a", "1", 2))
            .await;
        server
            .expect("PATCH", &target_path("a"), 200, redis_failover("a", "2", 4))
            .await;
        reported(&mut server, "a").await;
        // Another replica takes the Lease while b is being read: b's count is wrong, yet
        // neither it nor its status is written, and c is not even read.
        let (_, read_b) = server.hold("GET", &target_path("b")).await;
        lead.send_replace(false);
        read_b.answer(200, &redis_failover("b", "1", 2));
    };
    let stopped = tokio::time::timeout(Duration::from_secs(5), mock::scripted(sync, script)).await;
    assert!(stopped.is_ok(), "the sync went on after the lead was lost");
    server.done();
    assert_eq!(syncer.metrics.writes.get(), 1);
    assert_eq!(
        syncer.metrics.leader.get(),
        0,
        "the leader gauge still says 1"
    );
}

#[tokio::test]
async fn nothing_is_written_without_the_lead() {
    let (syncer, mut server, lead) = syncer();
    lead.send_replace(false);
    // The sync loop itself, without the stop: the check before each write holds on its own.
    let sync = syncer.sync_all(vec![adapter("a", 4)]);
    mock::scripted(sync, async {
        discovery(&mut server).await;
        server
            .get(&target_path("a"), redis_failover("a", "1", 2))
            .await;
    })
    .await;
    server.done();
    assert_eq!(syncer.metrics.writes.get(), 0);
}

/// Log lines written while the guard lives (this thread's tests only).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_adapter_that_does_not_decode_is_reported_on_itself_while_the_others_sync() {
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .finish(),
    );
    let (syncer, mut server, _lead) = syncer();
    let mut bad = (*adapter("bad", 4)).clone();
    bad.data["spec"]["replicas"] = json!("four");
    let mut objects = [bad, (*adapter("good", 4)).clone()];
    // Two syncs: the second finds the statuses the first wrote and writes nothing.
    for round in 0..2 {
        let sync = syncer.sync(objects.iter().cloned().map(Arc::new).collect());
        let script = async {
            if round == 0 {
                discovery(&mut server).await;
            }
            server
                .get(&target_path("good"), redis_failover("good", "1", 4))
                .await;
            if round > 0 {
                return;
            }
            // The adapters that decode first, then the reports of those that do not.
            for object in objects.iter_mut().rev() {
                let name = object.name_any();
                let answer = serde_json::to_value(&*object).unwrap();
                let sent = server
                    .expect("PATCH", &status_path(&name), 200, answer)
                    .await;
                object.data["status"] = sent.body["status"].clone();
            }
        };
        let done = tokio::time::timeout(Duration::from_secs(5), mock::scripted(sync, script));
        assert!(
            done.await.is_ok(),
            "round {round}: more was sent than expected"
        );
    }
    server.done();
    let synced = |i: usize| objects[i].data["status"]["conditions"][0].clone();
    assert_eq!(
        (&synced(1)["status"], &synced(1)["reason"]),
        (&json!("True"), &json!("Synced"))
    );
    assert_eq!(
        (&synced(0)["status"], &synced(0)["reason"]),
        (&json!("False"), &json!("Malformed"))
    );
    let message = synced(0)["message"].as_str().unwrap().to_owned();
    assert!(
        message.starts_with("spec.replicas cannot be read: invalid type: string \"four\""),
        "{message}"
    );
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(logs.matches("does not decode").count(), 1, "{logs}");
}

/// A CNPG Pooler (a `/scale` without a selector the HPA accepts) driven by an adapter that sets
/// no selector: `spec.instances` is written and `status.selector` holds the Pooler's pods' label.
#[tokio::test]
async fn a_pooler_is_driven_at_spec_instances_and_its_pods_are_selected_by_pooler_name() {
    const POOLER: &str = "/apis/postgresql.cnpg.io/v1";
    let path = format!("{POOLER}/namespaces/{NS}/poolers/pg-pooler-rw");
    let pooler = |version: &str, instances: i32| {
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Pooler",
            "metadata": {"name": "pg-pooler-rw", "namespace": NS, "resourceVersion": version},
            "spec": {"cluster": {"name": "pg"}, "instances": instances, "type": "rw"},
        })
    };
    let mut a = ScaleAdapter::new(
        "pg-pooler-rw",
        ScaleAdapterSpec {
            target_ref: TargetRef {
                api_version: "postgresql.cnpg.io/v1".into(),
                kind: "Pooler".into(),
                name: "pg-pooler-rw".into(),
            },
            replicas_path: "/spec/instances".into(),
            replicas: Some(4),
            paused: false,
            selector: None,
        },
    );
    a.metadata.namespace = Some(NS.into());
    let a: Arc<DynamicObject> =
        Arc::new(serde_json::from_value(serde_json::to_value(a).unwrap()).unwrap());
    let (syncer, mut server, _lead) = syncer();
    mock::scripted(syncer.sync(vec![a.clone()]), async {
        let resources = json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "postgresql.cnpg.io/v1",
            "resources": [{"name": "poolers", "singularName": "pooler", "namespaced": true,
                           "kind": "Pooler", "verbs": ["get", "list", "watch", "patch"]}],
        });
        server.get(POOLER, resources).await;
        server.get(&path, pooler("7", 2)).await;
        let sent = server.expect("PATCH", &path, 200, pooler("8", 4)).await;
        assert_eq!(
            sent.body,
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"instances": 4}})
        );
        let status = server
            .expect(
                "PATCH",
                &status_path("pg-pooler-rw"),
                200,
                serde_json::to_value(&*a).unwrap(),
            )
            .await
            .body["status"]
            .clone();
        assert_eq!(status["selector"], json!("cnpg.io/poolerName=pg-pooler-rw"));
        assert_eq!(status["replicas"], json!(4));
        assert_eq!(status["conditions"][0]["reason"], json!("Synced"));
    })
    .await;
    server.done();
}
