use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::controller::mock::{self, ApiServer};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/cozy-fluxcd/leases/shardctl";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/cozy-fluxcd/leases";

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    }
}

fn elector(me: &str) -> (Elector, ApiServer) {
    let (client, server) = mock::client();
    let api = Api::namespaced(client, "cozy-fluxcd");
    (
        Elector::new(api, "shardctl".into(), me.into(), timing()),
        server,
    )
}

fn lease(holder: &str, renew: &str, rv: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "shardctl", "namespace": "cozy-fluxcd", "resourceVersion": rv},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "renewTime": renew, "acquireTime": renew, "leaseTransitions": transitions},
    })
}

/// Runs one attempt against the scripted server.
async fn attempt(
    elector: &mut Elector,
    now: Instant,
    script: impl AsyncFnOnce(&mut ApiServer),
    server: &mut ApiServer,
) -> Result<bool, kube::Error> {
    let (result, ()) = tokio::join!(elector.try_acquire_or_renew(now), script(server));
    result
}

#[tokio::test]
async fn creates_the_lease_when_absent() {
    let (mut e, mut server) = elector("a");
    let held = attempt(
        &mut e,
        Instant::now(),
        async |s| {
            s.expect("GET", PATH, 404, mock::status(404, "NotFound"))
                .await;
            let sent = s
                .expect(
                    "POST",
                    COLLECTION,
                    201,
                    lease("a", "2026-01-01T00:00:00.000000Z", "1", 0),
                )
                .await;
            assert_eq!(sent.body["spec"]["holderIdentity"], "a");
            assert_eq!(sent.body["spec"]["leaseDurationSeconds"], 15);
            assert_eq!(sent.body["metadata"]["name"], "shardctl");
        },
        &mut server,
    )
    .await;
    assert!(held.unwrap());
    server.done();
}

#[tokio::test]
async fn losing_the_create_race_is_not_an_error() {
    let (mut e, mut server) = elector("a");
    let held = attempt(
        &mut e,
        Instant::now(),
        async |s| {
            s.expect("GET", PATH, 404, mock::status(404, "NotFound"))
                .await;
            s.expect("POST", COLLECTION, 409, mock::status(409, "AlreadyExists"))
                .await;
        },
        &mut server,
    )
    .await;
    assert!(!held.unwrap());
}

#[tokio::test]
async fn a_live_holder_is_respected_and_an_expired_one_taken_over_conditionally() {
    let (mut e, mut server) = elector("b");
    let t0 = Instant::now();
    let held_by_a = lease("a", "2026-01-01T00:00:00.000000Z", "7", 3);
    // First sight: fresh by our clock, whatever its renewTime says. No write.
    let held = attempt(
        &mut e,
        t0,
        async |s| {
            s.expect("GET", PATH, 200, held_by_a.clone()).await;
        },
        &mut server,
    )
    .await;
    assert!(!held.unwrap());
    // Renewed in between (new renewTime): the clock restarts.
    let renewed = lease("a", "2026-01-01T00:00:10.000000Z", "8", 3);
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(14),
        async |s| {
            s.expect("GET", PATH, 200, renewed.clone()).await;
        },
        &mut server,
    )
    .await;
    assert!(!held.unwrap());
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(28),
        async |s| {
            s.expect("GET", PATH, 200, renewed.clone()).await;
        },
        &mut server,
    )
    .await;
    assert!(!held.unwrap(), "only 14 s since the record last changed");
    // Unchanged for a full lease duration: take over, conditional on resourceVersion 8.
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(29),
        async |s| {
            s.expect("GET", PATH, 200, renewed.clone()).await;
            let sent = s
                .expect(
                    "PUT",
                    PATH,
                    200,
                    lease("b", "2026-01-01T00:01:00.000000Z", "9", 4),
                )
                .await;
            assert_eq!(sent.body["metadata"]["resourceVersion"], "8");
            assert_eq!(sent.body["spec"]["holderIdentity"], "b");
            assert_eq!(sent.body["spec"]["leaseTransitions"], 4);
            assert_ne!(
                sent.body["spec"]["acquireTime"],
                renewed["spec"]["acquireTime"]
            );
        },
        &mut server,
    )
    .await;
    assert!(held.unwrap());
    server.done();
}

#[tokio::test]
async fn a_takeover_conflict_means_someone_else_won() {
    let (mut e, mut server) = elector("b");
    let t0 = Instant::now();
    let stale = lease("a", "2026-01-01T00:00:00.000000Z", "7", 0);
    attempt(
        &mut e,
        t0,
        async |s| {
            s.expect("GET", PATH, 200, stale.clone()).await;
        },
        &mut server,
    )
    .await
    .unwrap();
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(15),
        async |s| {
            s.expect("GET", PATH, 200, stale.clone()).await;
            s.expect("PUT", PATH, 409, mock::status(409, "Conflict"))
                .await;
        },
        &mut server,
    )
    .await;
    assert!(!held.unwrap());
}

#[tokio::test]
async fn the_holder_renews_without_a_new_transition_and_an_empty_holder_is_free() {
    let (mut e, mut server) = elector("a");
    let held = attempt(
        &mut e,
        Instant::now(),
        async |s| {
            s.expect(
                "GET",
                PATH,
                200,
                lease("a", "2026-01-01T00:00:00.000000Z", "3", 2),
            )
            .await;
            let sent = s
                .expect(
                    "PUT",
                    PATH,
                    200,
                    lease("a", "2026-01-01T00:00:02.000000Z", "4", 2),
                )
                .await;
            assert_eq!(sent.body["metadata"]["resourceVersion"], "3");
            assert_eq!(sent.body["spec"]["leaseTransitions"], 2);
            assert_eq!(
                sent.body["spec"]["acquireTime"], "2026-01-01T00:00:00.000000Z",
                "renewal keeps the acquire time"
            );
        },
        &mut server,
    )
    .await;
    assert!(held.unwrap());
    // A released lease (no holder) is taken at once, even on first sight.
    let (mut e, mut server) = elector("b");
    let held = attempt(
        &mut e,
        Instant::now(),
        async |s| {
            s.expect(
                "GET",
                PATH,
                200,
                lease("", "2026-01-01T00:00:00.000000Z", "5", 2),
            )
            .await;
            s.expect(
                "PUT",
                PATH,
                200,
                lease("b", "2026-01-01T00:00:01.000000Z", "6", 3),
            )
            .await;
        },
        &mut server,
    )
    .await;
    assert!(held.unwrap());
}

#[tokio::test]
async fn release_clears_the_holder_only_when_it_is_ours() {
    let (mut e, mut server) = elector("a");
    let (result, ()) = tokio::join!(e.release(), async {
        server
            .expect(
                "GET",
                PATH,
                200,
                lease("a", "2026-01-01T00:00:00.000000Z", "3", 0),
            )
            .await;
        let sent = server
            .expect(
                "PUT",
                PATH,
                200,
                lease("", "2026-01-01T00:00:00.000000Z", "4", 0),
            )
            .await;
        assert!(sent.body["spec"].get("holderIdentity").is_none());
        assert_eq!(sent.body["metadata"]["resourceVersion"], "3");
    });
    result.unwrap();
    let (result, ()) = tokio::join!(e.release(), async {
        server
            .expect(
                "GET",
                PATH,
                200,
                lease("b", "2026-01-01T00:00:00.000000Z", "5", 1),
            )
            .await;
    });
    result.unwrap();
    server.done();
}

#[tokio::test(start_paused = true)]
async fn the_leader_steps_down_when_it_cannot_renew_by_the_deadline() {
    let (e, mut server) = elector("a");
    let (tx, mut rx) = watch::channel(false);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(e, tx, shutdown.clone()));
    server
        .expect(
            "GET",
            PATH,
            200,
            lease("a", "2026-01-01T00:00:00.000000Z", "1", 0),
        )
        .await;
    server
        .expect(
            "PUT",
            PATH,
            200,
            lease("a", "2026-01-01T00:00:01.000000Z", "2", 0),
        )
        .await;
    rx.changed().await.unwrap();
    assert!(*rx.borrow_and_update());
    let elected = Instant::now();
    // From now on the API server fails every call; the leader keeps leading until the renew
    // deadline (10 s) has passed since its last renewal, then steps down.
    loop {
        server
            .expect("GET", PATH, 500, mock::status(500, "InternalError"))
            .await;
        if rx.has_changed().unwrap() {
            break;
        }
    }
    assert!(!*rx.borrow_and_update());
    let stepped_down = elected.elapsed();
    assert!(
        (Duration::from_secs(10)..=Duration::from_secs(14)).contains(&stepped_down),
        "{stepped_down:?}"
    );
    shutdown.cancel();
    task.await.unwrap();
}
