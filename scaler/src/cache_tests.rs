use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use scaler_core::promql::QueryError;

/// Counts evaluations and the keys they carried; fails while `failing` is set; each takes `delay`.
#[derive(Default, Clone)]
struct Fake {
    calls: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<usize>>>,
    failing: Arc<AtomicBool>,
    delay: Duration,
    /// `keys_per_call`; `None` = unbounded.
    per_call: Option<usize>,
    /// A broken evaluator: `PANICS` panics, `SHORT` answers one key fewer than it was given.
    broken: Arc<AtomicUsize>,
}

const PANICS: usize = 1;
const SHORT: usize = 2;

impl Fake {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many keys each evaluation carried, in order.
    fn batch_sizes(&self) -> Vec<usize> {
        lock(&self.keys).clone()
    }
}

impl Evaluate for Fake {
    fn keys_per_call(&self) -> usize {
        self.per_call.unwrap_or(usize::MAX)
    }

    fn keys_per_query(&self) -> usize {
        self.keys_per_call()
    }

    async fn evaluate(&self, keys: &[Arc<Key>]) -> Vec<Result<Evaluation, ObserveError>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&self.keys).push(keys.len());
        tokio::time::sleep(self.delay).await;
        let broken = self.broken.load(Ordering::SeqCst);
        assert_ne!(broken, PANICS, "a bug in an evaluation");
        let keys = &keys[..keys.len() - usize::from(broken == SHORT && !keys.is_empty())];
        let failing = self.failing.load(Ordering::SeqCst);
        let inputs = scaler_core::evaluate::Inputs {
            topology: "metrics",
            default_deadline: Duration::from_secs(600),
            now: std::time::SystemTime::now(),
            current: None,
        };
        keys.iter()
            .map(|key| {
                if failing {
                    return Err(QueryError::Unreachable("down".into()).into());
                }
                // The load is the evaluation's number, so tests can tell evaluations apart.
                let parts = [
                    ("instances".to_string(), 3.0),
                    ("load".to_string(), n as f64),
                ]
                .into();
                Ok(scaler_core::evaluate::evaluate(
                    &key.namespace,
                    &key.config,
                    &inputs,
                    &parts,
                    None,
                )?)
            })
            .collect()
    }
}

fn key(name: &str) -> Key {
    let md = [("target", "1"), ("maxReplicas", "100")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Key {
        namespace: "ns".into(),
        name: name.into(),
        config: scaler_core::metadata::parse("pg", &md).unwrap().into(),
    }
}

fn cache(fake: &Fake, refresh_ms: u64, staleness_ms: u64) -> Arc<Cache<Fake>> {
    bounded(fake, refresh_ms, staleness_ms, usize::MAX).0
}

/// A cache whose cold keys gather for up to `window_ms`.
fn gathering(fake: &Fake, window_ms: u64) -> Arc<Cache<Fake>> {
    let timing = Timing {
        refresh: Duration::from_secs(10),
        staleness: Duration::from_secs(20),
        ttl: Duration::from_secs(60),
        capacity: usize::MAX,
        cold_window: Duration::from_millis(window_ms),
    };
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    Cache::new(fake.clone(), timing, metrics).shared()
}

/// A cache of at most `capacity` keys, and the registry of its metrics.
fn bounded(
    fake: &Fake,
    refresh_ms: u64,
    staleness_ms: u64,
    capacity: usize,
) -> (Arc<Cache<Fake>>, prometheus_client::registry::Registry) {
    let timing = Timing {
        refresh: Duration::from_millis(refresh_ms),
        staleness: Duration::from_millis(staleness_ms),
        ttl: Duration::from_millis(200),
        capacity,
        cold_window: Duration::ZERO,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    (Cache::new(fake.clone(), timing, metrics).shared(), registry)
}

async fn load(cache: &Arc<Cache<Fake>>, name: &str) -> f64 {
    cache.get(key(name)).await.unwrap().observation.load
}

#[tokio::test]
async fn concurrent_cold_calls_share_one_evaluation_of_one_key() {
    let fake = Fake {
        delay: Duration::from_millis(50),
        ..Fake::default()
    };
    let cache = cache(&fake, 10_000, 20_000);
    let calls = (0..50).map(|_| {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get(key("so")).await.map(|e| e.observation.load) })
    });
    for call in futures::future::join_all(calls).await {
        assert_eq!(call.unwrap(), Ok(1.0));
    }
    // Another ScaledObject is its own key, and a cold key is a batch of one.
    cache.get(key("other")).await.unwrap();
    assert_eq!(fake.batch_sizes(), [1, 1]);
}

#[tokio::test]
async fn a_tick_refreshes_every_due_key_in_one_evaluation() {
    let fake = Fake::default();
    let cache = cache(&fake, 100, 1_000);
    for name in ["a", "b", "c"] {
        cache.get(key(name)).await.unwrap();
    }
    // Just evaluated: not due yet.
    assert_eq!(cache.refresh_due().await, 0);
    tokio::time::sleep(Duration::from_millis(120)).await;
    // Due, but calls are answered from memory: only the tick evaluates.
    for _ in 0..10 {
        assert_eq!(load(&cache, "a").await, 1.0);
    }
    assert_eq!(fake.calls(), 3);
    assert_eq!(cache.refresh_due().await, 3);
    assert_eq!(fake.batch_sizes(), [1, 1, 1, 3]);
    for name in ["a", "b", "c"] {
        assert_eq!(load(&cache, name).await, 4.0);
    }
    assert_eq!(cache.refresh_due().await, 0);
}

#[tokio::test]
async fn a_refresh_reuses_the_evaluation_nobody_holds_and_never_changes_a_held_one() {
    let fake = Fake::default();
    let cache = cache(&fake, 100, 1_000);
    let first = cache.get(key("a")).await.unwrap();
    let at = Arc::as_ptr(&first);
    drop(first);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cache.refresh_due().await, 1);
    let second = cache.get(key("a")).await.unwrap();
    // Nobody held the first: the second is written into its allocation.
    assert_eq!((Arc::as_ptr(&second), second.observation.load), (at, 2.0));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cache.refresh_due().await, 1);
    // A caller held the second through the refresh: it still reads what it was given.
    assert_eq!(second.observation.load, 2.0);
    let third = cache.get(key("a")).await.unwrap();
    assert_eq!(third.observation.load, 3.0);
    assert!(!Arc::ptr_eq(&second, &third));
}

#[tokio::test]
async fn a_large_tick_is_split_into_calls_of_at_most_keys_per_call() {
    let fake = Fake {
        per_call: Some(3),
        ..Fake::default()
    };
    let cache = cache(&fake, 100, 1_000);
    let names = ["g", "c", "e", "a", "f", "b", "d"];
    for name in names {
        cache.get(key(name)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(cache.refresh_due().await, 7);
    assert_eq!(fake.batch_sizes()[names.len()..], [3, 3, 1]);
    // Every key got its own call's evaluation (the load is the call's number): 8, 9, then 10.
    let mut loads = Vec::new();
    for name in names {
        loads.push(load(&cache, name).await);
    }
    loads.sort_by(f64::total_cmp);
    assert_eq!(loads, [8.0, 8.0, 8.0, 9.0, 9.0, 9.0, 10.0]);
}

#[tokio::test]
async fn a_warm_start_evaluates_its_keys_in_tick_calls_and_callers_wait_for_it() {
    let fake = Fake {
        per_call: Some(3),
        delay: Duration::from_millis(100),
        ..Fake::default()
    };
    let (cache, _registry) = bounded(&fake, 10_000, 20_000, 6);
    // A caller's key first: held and evaluated before the warm start, so not again.
    assert_eq!(load(&cache, "a").await, 1.0);
    let names = ["a", "e", "b", "g", "c", "d", "f"];
    let prime = tokio::spawn({
        let cache = cache.clone();
        async move { cache.prime(names.map(key)).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A caller arriving meanwhile waits for the warm start's flight (no evaluation of its own).
    let caller = tokio::spawn({
        let cache = cache.clone();
        async move { load(&cache, "d").await }
    });
    // Room for six: "f", the last, is left out; the five new ones go in calls of three.
    assert_eq!(prime.await.unwrap(), 5);
    assert_eq!(fake.batch_sizes(), [1, 3, 2]);
    // One of the warm start's two calls answered it (they sort alike, so either).
    assert!([2.0, 3.0].contains(&caller.await.unwrap()));
    assert_eq!(cache.len(), 6);
    assert_eq!(fake.calls(), 3);
    // Held as if just asked for; a prime of held keys evaluates nothing.
    assert_eq!(cache.prime(["a", "b"].map(key)).await, 0);
}

#[tokio::test]
async fn a_cold_key_does_not_wait_for_a_running_tick() {
    let fake = Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    };
    let cache = cache(&fake, 100, 5_000);
    cache.get(key("a")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let tick = tokio::spawn({
        let cache = cache.clone();
        async move { cache.refresh_due().await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The key in the tick answers from memory at once.
    let start = Instant::now();
    assert_eq!(load(&cache, "a").await, 1.0);
    assert!(start.elapsed() < Duration::from_millis(100));
    assert_eq!(load(&cache, "b").await, 3.0);
    // The cold key's own evaluation (300 ms), not the tick's rest and then its own (580 ms).
    assert!(
        start.elapsed() < Duration::from_millis(450),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(tick.await.unwrap(), 1);
    assert_eq!(load(&cache, "a").await, 2.0);
}

#[tokio::test]
async fn failures_serve_the_last_good_answer_until_stale_then_error() {
    let fake = Fake::default();
    let cache = cache(&fake, 50, 300);
    assert!(cache.get(key("so")).await.is_ok());
    fake.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cache.refresh_due().await, 1);
    // The tick failed; the last good answer still serves within staleness.
    assert_eq!(load(&cache, "so").await, 1.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    cache.refresh_due().await;
    assert!(matches!(
        cache.get(key("so")).await,
        Err(ObserveError::Query(QueryError::Unreachable(_)))
    ));
    // The failure is served without evaluating again until the next tick.
    let calls = fake.calls();
    assert!(cache.get(key("so")).await.is_err());
    assert_eq!(fake.calls(), calls);
    fake.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    cache.refresh_due().await;
    assert!(cache.get(key("so")).await.is_ok());
}

#[tokio::test]
async fn nothing_usable_and_no_tick_evaluates_the_key_alone() {
    let fake = Fake::default();
    let cache = cache(&fake, 50, 100);
    cache.get(key("so")).await.unwrap();
    // No tick ran for longer than the staleness: the call evaluates instead of erring.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(load(&cache, "so").await, 2.0);
    assert_eq!(fake.batch_sizes(), [1, 1]);
}

#[tokio::test]
async fn first_failure_is_an_error() {
    let fake = Fake::default();
    fake.failing.store(true, Ordering::SeqCst);
    let cache = cache(&fake, 50, 300);
    assert!(cache.get(key("so")).await.is_err());
}

#[tokio::test]
async fn idle_keys_are_evicted() {
    let fake = Fake::default();
    let cache = cache(&fake, 50, 300);
    cache.get(key("a")).await.unwrap();
    cache.get(key("b")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    cache.get(key("b")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(cache.evict_idle(Instant::now()), 1);
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn past_the_capacity_the_least_recently_asked_keys_go_first() {
    let fake = Fake::default();
    let (cache, registry) = bounded(&fake, 10_000, 20_000, 32);
    for i in 0..32 {
        cache.get(key(&format!("so-{i}"))).await.unwrap();
    }
    // so-0 and so-1 are asked again: the least recently asked are now so-2 and so-3.
    cache.get(key("so-0")).await.unwrap();
    cache.get(key("so-1")).await.unwrap();
    // A flood of made-up keys never grows the cache past its capacity.
    for i in 0..200 {
        cache.get(key(&format!("made-up-{i}"))).await.unwrap();
        assert!(cache.len() <= 32, "{} keys", cache.len());
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let evicted: u64 = text
        .lines()
        .find(|l| {
            l.starts_with("scaler_cache_evictions_total{cache=\"decisions\",cause=\"capacity\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no eviction counter in\n{text}"));
    assert_eq!(evicted as usize, 32 + 200 - cache.len());
    // Gauges go with their keys: /metrics holds the held keys' series only.
    let series = text
        .lines()
        .filter(|l| l.starts_with("scaler_decision_desired_instances{"))
        .count();
    assert_eq!(series, cache.len());

    // The order is by last ask: of 16 keys, the two asked last survive a sixteenth's eviction.
    let (cache, _) = bounded(&fake, 10_000, 20_000, 16);
    for i in 0..16 {
        cache.get(key(&format!("k-{i}"))).await.unwrap();
    }
    cache.get(key("k-0")).await.unwrap();
    cache.get(key("new")).await.unwrap();
    assert_eq!(cache.len(), 16);
    let held = |name: &str| read(&cache.entries).contains_key(&key(name));
    assert!(held("k-0") && held("new") && !held("k-1") && held("k-2"));
}

#[tokio::test]
async fn error_counters_are_per_scaled_object_by_code_and_go_with_their_keys() {
    let fake = Fake::default();
    fake.failing.store(true, Ordering::SeqCst);
    let (cache, registry) = bounded(&fake, 10_000, 20_000, 16);
    for i in 0..100 {
        assert!(cache.get(key(&format!("so-{i}"))).await.is_err());
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("scaler_scaledobject_errors_total{"))
        .collect();
    assert_eq!(series.len(), cache.len(), "{text}");
    assert!(
        series.iter().any(|l| l.starts_with(
            "scaler_scaledobject_errors_total{namespace=\"ns\",scaledobject=\"so-99\",cluster=\"pg\",code=\"Unavailable\"} 1"
        )),
        "{series:?}"
    );
}

#[tokio::test]
async fn the_snapshot_holds_the_last_decision_and_the_last_error() {
    let fake = Fake::default();
    let cache = cache(&fake, 10_000, 20_000);
    cache.get(key("good")).await.unwrap();
    fake.failing.store(true, Ordering::SeqCst);
    assert!(cache.get(key("bad")).await.is_err());
    let mut snapshot = cache.snapshot(Some("ns"));
    snapshot.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    let [bad, good] = &snapshot[..] else {
        panic!("two keys")
    };
    assert!(bad.good.is_none());
    assert!(matches!(&bad.attempt, Some((_, Some(_)))));
    assert!(good.good.is_some() && matches!(&good.attempt, Some((_, None))));
    assert!(cache.snapshot(Some("other")).is_empty());
    let entry = crate::decisions::entry(bad, std::time::SystemTime::now());
    assert_eq!(entry.last_error.unwrap().code, "Unavailable");
    let entry = crate::decisions::entry(good, std::time::SystemTime::now());
    assert_eq!(
        (entry.desired, entry.reason.as_deref()),
        (Some(2), Some("load"))
    );
}

#[tokio::test]
async fn a_burst_of_cold_keys_shares_evaluations_and_a_lone_one_goes_at_once() {
    let fake = Fake {
        delay: Duration::from_millis(20),
        per_call: Some(100),
        ..Fake::default()
    };
    let cache = gathering(&fake, 200);
    // A lone cold key waits for no window.
    let start = Instant::now();
    cache.get(key("first")).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    // A burst: 150 keys at once. A query's worth (the fake's 100) is sent at once, the rest
    // when the window ends.
    let start = Instant::now();
    let calls = (0..150).map(|i| {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get(key(&format!("so-{i}"))).await.map(|_| ()) })
    });
    for call in futures::future::join_all(calls).await {
        assert_eq!(call.unwrap(), Ok(()));
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(350),
        "{elapsed:?}"
    );
    // The burst's first key went alone (nothing was in flight), the others gathered.
    assert_eq!(fake.batch_sizes(), [1, 1, 100, 49]);
    // Nothing in flight: a lone cold key goes at once again.
    let start = Instant::now();
    cache.get(key("last")).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_caller_that_gives_up_leaves_its_answer_for_the_retry() {
    let fake = Fake {
        delay: Duration::from_millis(150),
        ..Fake::default()
    };
    let cache = gathering(&fake, 0);
    // KEDA's deadline drops the call before the evaluation ends; the evaluation goes on.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), cache.get(key("so"))).await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let start = Instant::now();
    assert_eq!(load(&cache, "so").await, 1.0);
    assert!(start.elapsed() < Duration::from_millis(50));
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_key_evicted_during_its_refresh_leaves_no_gauges() {
    let fake = Fake {
        delay: Duration::from_millis(100),
        ..Fake::default()
    };
    let (cache, registry) = bounded(&fake, 100, 1_000, 16);
    cache.get(key("a")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let tick = tokio::spawn({
        let cache = cache.clone();
        async move { cache.refresh_due().await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // While the tick evaluates "a", new keys push it out (it is the least recently asked).
    let calls = (0..16).map(|i| {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get(key(&format!("new-{i}"))).await.map(|_| ()) })
    });
    futures::future::join_all(calls).await;
    assert_eq!(tick.await.unwrap(), 1);
    assert!(!read(&cache.entries).contains_key(&key("a")));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        !text.contains(r#"scaledobject="a""#),
        "gauges of the evicted key:\n{text}"
    );
}

#[tokio::test]
async fn a_decision_publishes_one_series_per_gauge_and_forgetting_drops_them() {
    let fake = Fake::default();
    let (cache, registry) = bounded(&fake, 10_000, 20_000, 16);
    cache.get(key("so")).await.unwrap();
    let encode = || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    };
    let text = encode();
    let object: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("scaledobject=\"so\""))
        .collect();
    let labels = "namespace=\"ns\",scaledobject=\"so\",cluster=\"pg\"";
    let expected = [
        format!("scaler_decision_desired_instances{{{labels}}} 2"),
        format!("scaler_decision_recommended_instances{{{labels}}} 2"),
        format!("scaler_decision_reason{{{labels},reason=\"load\"}} 1"),
        format!("scaler_decision_convergence_backoff{{{labels}}} 0"),
        format!("scaler_decision_current_instances{{{labels}}} 3"),
        format!("scaler_decision_load{{{labels}}} 1.0"),
        format!("scaler_decision_target{{{labels}}} 1.0"),
        format!("scaler_decision_brake{{{labels},state=\"off\"}} 1"),
        format!("scaler_decision_signal{{{labels},signal=\"ReadConnections\"}} 1"),
    ];
    assert_eq!(object, expected, "{text}");
    for family in [
        "decision_desired_instances",
        "decision_load",
        "decision_reason",
    ] {
        assert!(
            text.contains(&format!("# TYPE scaler_{family} gauge\n")),
            "{text}"
        );
    }
    assert!(text.contains("# HELP scaler_decision_desired_instances Instance count currently served per ScaledObject.\n"));
    // Absent series leave their family out, as an empty family is.
    assert!(
        !text.contains("scaler_decision_replication_lag_seconds"),
        "{text}"
    );

    cache.evict_idle(Instant::now() + Duration::from_secs(3600));
    let text = encode();
    assert!(!text.contains("scaledobject=\"so\""), "{text}");
    assert!(!text.contains("# TYPE scaler_decision_load"), "{text}");
}

/// One ScaledObject held under two trigger metadata (two triggers, or changed metadata whose old
/// key is not yet evicted) is one series per gauge: the decision of the metadata asked for last,
/// both keys' errors.
#[tokio::test]
async fn one_scaledobject_under_two_metadata_is_one_series_of_the_metadata_asked_last() {
    let fake = Fake::default();
    let (cache, registry) = bounded(&fake, 10_000, 20_000, 16);
    let other = |target: &str| {
        let md = [("target", target), ("maxReplicas", "100")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Key {
            config: scaler_core::metadata::parse("pg", &md).unwrap().into(),
            ..key("so")
        }
    };
    fake.failing.store(true, Ordering::SeqCst);
    cache.get(other("3")).await.unwrap_err();
    fake.failing.store(false, Ordering::SeqCst);
    cache.get(other("2")).await.unwrap();
    cache.get(key("so")).await.unwrap();
    // From memory: no evaluation, but target 2 is now the metadata asked for last.
    cache.get(other("2")).await.unwrap();
    assert_eq!(fake.calls(), 3);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let series = |family: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("scaler_{family}{{")))
            .collect()
    };
    let labels = "namespace=\"ns\",scaledobject=\"so\",cluster=\"pg\"";
    // Target 2's evaluation (the Fake's load is the evaluation's number: 2) is shown, though
    // target 1's is newer.
    assert_eq!(
        series("decision_load"),
        [format!("scaler_decision_load{{{labels}}} 2.0")],
        "{text}"
    );
    assert_eq!(
        series("decision_target"),
        [format!("scaler_decision_target{{{labels}}} 2.0")],
        "{text}"
    );
    assert_eq!(
        series("scaledobject_errors_total"),
        [format!(
            "scaler_scaledobject_errors_total{{{labels},code=\"Unavailable\"}} 1"
        )],
        "{text}"
    );
}

/// Issue 40: a batch evaluation that panics, or answers fewer keys than it was given, answered
/// every waiting caller with a panic of its own (`expect`) and never reset the cold-batch state.
/// Now each caller gets `Internal`, and the next request is served.
#[tokio::test]
async fn a_batch_that_panics_or_comes_back_short_answers_every_caller_with_an_error() {
    for broken in [PANICS, SHORT] {
        let fake = Fake {
            delay: Duration::from_millis(20),
            ..Fake::default()
        };
        let cache = gathering(&fake, 100);
        fake.broken.store(broken, Ordering::SeqCst);
        // The first key goes alone; the other four gather into one batch.
        let calls = (0..5).map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(key(&format!("so-{i}"))).await })
        });
        let answers: Vec<_> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|joined| joined.expect("no caller panics"))
            .collect();
        let codes: Vec<_> = answers
            .iter()
            .filter_map(|a| a.as_ref().err().map(ObserveError::code))
            .collect();
        match broken {
            // Every key of every call is without an answer.
            PANICS => assert_eq!(codes, [tonic::Code::Internal; 5], "{answers:?}"),
            // One key per call (the lone first key's, and one of the batch's four).
            _ => assert_eq!(codes, [tonic::Code::Internal; 2], "{answers:?}"),
        }
        // The cold-batch state was reset: a repaired evaluator serves the next request at once.
        fake.broken.store(0, Ordering::SeqCst);
        let start = Instant::now();
        assert!(cache.get(key("next")).await.is_ok());
        assert!(
            start.elapsed() < Duration::from_millis(90),
            "{:?}",
            start.elapsed()
        );
    }
}

/// A tick whose evaluation call panics records `Internal` for its keys and goes on.
#[tokio::test]
async fn a_tick_whose_evaluation_panics_records_an_error_and_carries_on() {
    let fake = Fake::default();
    let cache = cache(&fake, 50, 60);
    assert!(cache.get(key("so")).await.is_ok());
    fake.broken.store(PANICS, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(70)).await;
    assert_eq!(cache.refresh_due().await, 1);
    let answer = cache.get(key("so")).await;
    assert_eq!(
        answer.map(|_| ()).map_err(|e| e.code()),
        Err(tonic::Code::Internal)
    );
}

/// Issue 40: the cold evaluations are the cache's tasks. At shutdown `run` waits for the one in
/// flight and its caller gets the answer; a `run` dropped before that (the app's deadline) stops
/// it, and its caller gets an error, not a hang.
#[tokio::test(start_paused = true)]
async fn run_owns_the_cold_evaluations_in_flight() {
    for abandoned in [false, true] {
        let fake = Fake {
            delay: Duration::from_secs(2),
            ..Fake::default()
        };
        let cache = gathering(&fake, 0);
        let shutdown = CancellationToken::new();
        let running = cache.clone().run(shutdown.clone());
        let call = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get(key("so")).await.map_err(|e| e.code()) }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(fake.calls(), 1, "the cold evaluation is in flight");
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        if abandoned {
            let ran = tokio::time::timeout(Duration::from_millis(500), running).await;
            assert!(ran.is_err(), "still waiting for the evaluation");
            let answer = call.await.expect("the caller does not panic");
            assert_eq!(answer.map(|_| ()), Err(tonic::Code::Internal));
        } else {
            running.await;
            assert!(started.elapsed() >= Duration::from_millis(1_900));
            assert!(call.await.expect("the caller does not panic").is_ok());
        }
        assert_eq!(cache.tasks.len(), 0);
    }
}
