use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use scaler_core::promql::QueryError;

/// Counts evaluations; fails while `failing` is set; each takes `delay`.
#[derive(Default, Clone)]
struct Fake {
    calls: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
    delay: Duration,
}

impl Evaluate for Fake {
    async fn evaluate(
        &self,
        namespace: &str,
        config: &ScalerConfig,
    ) -> Result<Evaluation, ObserveError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        if self.failing.load(Ordering::SeqCst) {
            return Err(QueryError::Unreachable("down".into()).into());
        }
        // The load grows with each call, so tests can tell evaluations apart.
        let parts = [
            ("instances".to_string(), 3.0),
            ("load".to_string(), n as f64),
        ]
        .into();
        let inputs = scaler_core::evaluate::Inputs {
            topology: "metrics",
            default_deadline: Duration::from_secs(600),
            now: std::time::SystemTime::now(),
        };
        Ok(scaler_core::evaluate::evaluate(
            namespace, config, &inputs, &parts, None,
        )?)
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
        config: scaler_core::metadata::parse("pg", &md).unwrap(),
    }
}

fn cache(fake: &Fake, refresh_ms: u64, staleness_ms: u64) -> Arc<Cache<Fake>> {
    let timing = Timing {
        refresh: Duration::from_millis(refresh_ms),
        staleness: Duration::from_millis(staleness_ms),
        ttl: Duration::from_millis(200),
    };
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    Arc::new(Cache::new(fake.clone(), timing, metrics))
}

#[tokio::test]
async fn concurrent_calls_share_one_evaluation() {
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
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    // Another ScaledObject is its own key.
    cache.get(key("other")).await.unwrap();
    assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn refreshes_once_per_interval() {
    let fake = Fake::default();
    let cache = cache(&fake, 100, 1_000);
    for _ in 0..10 {
        assert_eq!(cache.get(key("so")).await.unwrap().observation.load, 1.0);
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    // Due: this call still gets the previous answer at once and starts one background refresh.
    for _ in 0..10 {
        assert_eq!(cache.get(key("so")).await.unwrap().observation.load, 1.0);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(cache.get(key("so")).await.unwrap().observation.load, 2.0);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn failures_serve_the_last_good_answer_until_stale_then_error() {
    let fake = Fake::default();
    let cache = cache(&fake, 50, 300);
    assert!(cache.get(key("so")).await.is_ok());
    fake.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cache.get(key("so")).await.unwrap().observation.load, 1.0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The background refresh failed; the last good answer still serves within staleness.
    assert_eq!(cache.get(key("so")).await.unwrap().observation.load, 1.0);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        cache.get(key("so")).await,
        Err(ObserveError::Query(QueryError::Unreachable(_)))
    ));
    let calls = fake.calls.load(Ordering::SeqCst);
    // The failure is cached for the refresh interval too.
    assert!(cache.get(key("so")).await.is_err());
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls);
    fake.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(cache.get(key("so")).await.is_ok());
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
