use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::mock::{self, ApiServer};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/cozy-fluxcd/leases/shardctl";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/cozy-fluxcd/leases";
/// The renew and acquire time of a lease as first read.
const T0: &str = "2026-01-01T00:00:00.000000Z";

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

/// Runs one attempt while `script` plays the API server.
async fn attempt(
    elector: &mut Elector,
    now: Instant,
    script: impl AsyncFnOnce(&mut ApiServer),
    server: &mut ApiServer,
) -> Result<bool, kube::Error> {
    mock::scripted(elector.try_acquire_or_renew(now), script(server)).await
}

#[tokio::test]
async fn creates_the_lease_when_absent() {
    let (mut e, mut server) = elector("a");
    let held = attempt(
        &mut e,
        Instant::now(),
        async |s| {
            s.fail("GET", PATH, 404, "NotFound").await;
            let sent = s.create(COLLECTION, lease("a", T0, "1", 0)).await;
            assert_eq!(sent["spec"]["holderIdentity"], "a");
            assert_eq!(sent["spec"]["leaseDurationSeconds"], 15);
            assert_eq!(sent["metadata"]["name"], "shardctl");
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
            s.fail("GET", PATH, 404, "NotFound").await;
            s.fail("POST", COLLECTION, 409, "AlreadyExists").await;
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
    // First sight: fresh by our clock, whatever its renewTime says. No write.
    let held_by_a = lease("a", T0, "7", 3);
    let held = attempt(
        &mut e,
        t0,
        async |s| s.get(PATH, held_by_a).await,
        &mut server,
    )
    .await;
    assert!(!held.unwrap());
    // Renewed in between (new renewTime): the clock restarts.
    let renewed = lease("a", "2026-01-01T00:00:10.000000Z", "8", 3);
    for (after, what) in [
        (14, "renewed"),
        (28, "only 14 s since the record last changed"),
    ] {
        let now = t0 + Duration::from_secs(after);
        let read = async |s: &mut ApiServer| s.get(PATH, renewed.clone()).await;
        assert!(
            !attempt(&mut e, now, read, &mut server).await.unwrap(),
            "{what}"
        );
    }
    // Unchanged for a full lease duration: take over, conditional on resourceVersion 8.
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(29),
        async |s| {
            s.get(PATH, renewed.clone()).await;
            let taken = lease("b", "2026-01-01T00:01:00.000000Z", "9", 4);
            let sent = s.conditional("PUT", PATH, "8", taken).await;
            assert_eq!(sent["spec"]["holderIdentity"], "b");
            assert_eq!(sent["spec"]["leaseTransitions"], 4);
            assert_ne!(sent["spec"]["acquireTime"], renewed["spec"]["acquireTime"]);
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
    let stale = lease("a", T0, "7", 0);
    let read = async |s: &mut ApiServer| s.get(PATH, stale.clone()).await;
    attempt(&mut e, t0, read, &mut server).await.unwrap();
    let held = attempt(
        &mut e,
        t0 + Duration::from_secs(15),
        async |s| {
            s.get(PATH, stale.clone()).await;
            s.fail("PUT", PATH, 409, "Conflict").await;
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
            s.get(PATH, lease("a", T0, "3", 2)).await;
            let renewed = lease("a", "2026-01-01T00:00:02.000000Z", "4", 2);
            let sent = s.conditional("PUT", PATH, "3", renewed).await;
            assert_eq!(sent["spec"]["leaseTransitions"], 2);
            assert_eq!(
                sent["spec"]["acquireTime"], T0,
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
            s.get(PATH, lease("", T0, "5", 2)).await;
            let taken = lease("b", "2026-01-01T00:00:01.000000Z", "6", 3);
            s.conditional("PUT", PATH, "5", taken).await;
        },
        &mut server,
    )
    .await;
    assert!(held.unwrap());
}

#[tokio::test]
async fn release_clears_the_holder_only_when_it_is_ours() {
    let (mut e, mut server) = elector("a");
    let result = mock::scripted(e.release(), async {
        server.get(PATH, lease("a", T0, "3", 0)).await;
        let sent = server
            .conditional("PUT", PATH, "3", lease("", T0, "4", 0))
            .await;
        assert!(sent["spec"].get("holderIdentity").is_none());
    })
    .await;
    result.unwrap();
    let result = mock::scripted(e.release(), server.get(PATH, lease("b", T0, "5", 1))).await;
    result.unwrap();
    server.done();
}

#[tokio::test(start_paused = true)]
async fn the_leader_steps_down_when_it_cannot_renew_by_the_deadline() {
    let (e, mut server) = elector("a");
    let (tx, mut rx) = watch::channel(false);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(e, tx, shutdown.clone()));
    server.get(PATH, lease("a", T0, "1", 0)).await;
    let renewed = lease("a", "2026-01-01T00:00:01.000000Z", "2", 0);
    server.conditional("PUT", PATH, "1", renewed).await;
    rx.changed().await.unwrap();
    assert!(*rx.borrow_and_update());
    let elected = Instant::now();
    // From now on the API server fails every call; the leader keeps leading until the renew
    // deadline (10 s) has passed since its last renewal, then steps down.
    loop {
        server.fail("GET", PATH, 500, "InternalError").await;
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

#[tokio::test(start_paused = true)]
async fn the_lead_lapses_at_the_renew_deadline_while_attempts_hang() {
    let (e, mut server) = elector("a");
    let (tx, mut rx) = watch::channel(false);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(e, tx, shutdown.clone()));
    let elected = Instant::now();
    server.get(PATH, lease("a", T0, "1", 0)).await;
    let renewed = lease("a", "2026-01-01T00:00:01.000000Z", "2", 0);
    server.conditional("PUT", PATH, "1", renewed).await;
    rx.changed().await.unwrap();
    assert!(*rx.borrow_and_update());
    // From now on the API server never answers: each attempt runs into its 2 s timeout. The lead
    // lapses 10 s after the start of the renewal that succeeded, not when an attempt ends.
    let mut hung = Vec::new();
    loop {
        tokio::select! {
            (_, held) = server.hold("GET", PATH) => hung.push(held),
            changed = rx.changed() => {
                changed.unwrap();
                break;
            }
        }
    }
    assert!(!*rx.borrow_and_update());
    assert_eq!(elected.elapsed(), Duration::from_secs(10));
    shutdown.cancel();
    drop(hung);
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn paced_steps_each_interval_and_at_once_on_a_leadership_change() {
    let (leader_tx, leader) = watch::channel(false);
    let shutdown = CancellationToken::new();
    let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let task = {
        let (steps, shutdown) = (steps.clone(), shutdown.clone());
        tokio::spawn(paced(
            Duration::from_secs(60),
            leader,
            shutdown,
            async move |leading| {
                steps.lock().unwrap().push((Instant::now(), leading));
            },
        ))
    };
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    leader_tx.send_replace(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    task.await.unwrap();
    let steps: Vec<_> = steps
        .lock()
        .unwrap()
        .iter()
        .map(|(at, leading)| (at.duration_since(start).as_secs(), *leading))
        .collect();
    // The first tick at once, then the change a second later, not a minute later.
    assert_eq!(steps, [(0, false), (1, true)]);
}
