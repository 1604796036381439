//! Coalesces KEDA's many calls per ScaledObject into one evaluation per refresh interval.
//!
//! Key: (namespace, ScaledObject name, parsed metadata). Per key:
//! * an evaluation younger than `refresh` answers every call without touching a backend;
//! * the first call after that starts a refresh in the background and, like every call until it
//!   lands, gets the previous good answer (if within `staleness`) at memory speed; without a
//!   usable answer callers wait for the refresh. One refresh runs at a time (single-flight);
//! * a failed refresh keeps serving the last good answer until it is `staleness` old, then the
//!   error; failures are cached for `refresh` too, so retries do not hammer a sick backend;
//! * keys not asked for during `ttl` are evicted, with their decision gauges.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::{Metrics, ObjectLabels};
use crate::observe::{Evaluate, ObserveError};
use scaler_core::evaluate::Evaluation;
use scaler_core::metadata::ScalerConfig;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
    pub config: ScalerConfig,
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub refresh: Duration,
    pub staleness: Duration,
    pub ttl: Duration,
}

#[derive(Default)]
struct State {
    /// Last successful evaluation and when it was made.
    good: Option<(Instant, Arc<Evaluation>)>,
    /// When the last attempt finished, and its error if it failed.
    attempt: Option<(Instant, Option<ObserveError>)>,
    last_asked: Option<Instant>,
}

#[derive(Default)]
struct Entry {
    state: Mutex<State>,
    /// Held while refreshing: the single flight.
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

/// What the cache can tell without refreshing.
enum Peek {
    Fresh(Result<Arc<Evaluation>, ObserveError>),
    /// Needs a refresh; carries a good answer still within staleness, if any.
    Refresh(Option<Arc<Evaluation>>),
}

pub struct Cache<E> {
    evaluator: E,
    timing: Timing,
    metrics: Metrics,
    entries: RwLock<HashMap<Arc<Key>, Arc<Entry>>>,
}

impl<E: Evaluate> Cache<E> {
    pub fn new(evaluator: E, timing: Timing, metrics: Metrics) -> Self {
        Self {
            evaluator,
            timing,
            metrics,
            entries: RwLock::default(),
        }
    }

    /// The current evaluation for `key`, refreshing it when due.
    pub async fn get(self: &Arc<Self>, key: Key) -> Result<Arc<Evaluation>, ObserveError> {
        let (key, entry) = self.entry(key);
        let fallback = match self.peek(&entry, Instant::now(), true) {
            Peek::Fresh(answer) => return answer,
            Peek::Refresh(fallback) => fallback,
        };
        if let Some(good) = fallback {
            // Stale-while-revalidate: answer from memory now and refresh in the background,
            // unless a refresh is already running.
            if let Ok(flight) = entry.refreshing.clone().try_lock_owned() {
                let this = self.clone();
                tokio::spawn(async move {
                    let _flight = flight;
                    let _ = this.refresh(&key, &entry).await;
                });
            }
            return Ok(good);
        }
        // Nothing usable: wait for the single flight, which may already have settled it.
        let _flight = entry.refreshing.lock().await;
        if let Peek::Fresh(answer) = self.peek(&entry, Instant::now(), false) {
            return answer;
        }
        self.refresh(&key, &entry).await
    }

    /// Evaluates `key` and records the outcome; the caller holds the entry's flight lock.
    async fn refresh(&self, key: &Key, entry: &Entry) -> Result<Arc<Evaluation>, ObserveError> {
        let result = self.evaluator.evaluate(&key.namespace, &key.config).await;
        let now = Instant::now();
        let mut state = lock(&entry.state);
        match result {
            Ok(evaluation) => {
                let evaluation = Arc::new(evaluation);
                let d = &evaluation.decision;
                let previous = state.good.as_ref().map(|(_, e)| &e.decision);
                // Changes (and the first decision) at info, repeats at debug: logs show transitions.
                if previous.is_none_or(|p| {
                    (p.desired, p.recommended, p.reason) != (d.desired, d.recommended, d.reason)
                }) {
                    info!(namespace = %key.namespace, scaledobject = %key.name, cluster = %key.config.cluster, desired = d.desired, recommended = d.recommended, reason = %d.reason, summary = %evaluation.summary, "decision");
                } else {
                    debug!(namespace = %key.namespace, scaledobject = %key.name, desired = d.desired, reason = %d.reason, "decision unchanged");
                }
                self.metrics.decision(&object_labels(key), &evaluation);
                state.good = Some((now, evaluation.clone()));
                state.attempt = Some((now, None));
                Ok(evaluation)
            }
            Err(error) => {
                // The first failure after a success (or a new kind of failure) at warn, repeats at debug.
                let repeated =
                    matches!(&state.attempt, Some((_, Some(previous))) if previous == &error);
                if repeated {
                    debug!(namespace = %key.namespace, scaledobject = %key.name, %error, "evaluation still failing");
                } else {
                    warn!(namespace = %key.namespace, scaledobject = %key.name, %error, "evaluation failed");
                }
                state.attempt = Some((now, Some(error.clone())));
                match &state.good {
                    Some((at, good))
                        if now.saturating_duration_since(*at) <= self.timing.staleness =>
                    {
                        Ok(good.clone())
                    }
                    _ => Err(error),
                }
            }
        }
    }

    fn entry(&self, key: Key) -> (Arc<Key>, Arc<Entry>) {
        if let Some((k, e)) = read(&self.entries).get_key_value(&key) {
            return (k.clone(), e.clone());
        }
        let mut entries = write(&self.entries);
        let key = Arc::new(key);
        let entry = entries.entry(key.clone()).or_default().clone();
        self.metrics.cache_entries.set(entries.len() as i64);
        (key, entry)
    }

    fn peek(&self, entry: &Entry, now: Instant, touch: bool) -> Peek {
        let mut state = lock(&entry.state);
        if touch {
            state.last_asked = Some(now);
        }
        let good = state
            .good
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) <= self.timing.staleness)
            .map(|(_, evaluation)| evaluation.clone());
        match &state.attempt {
            Some((at, error)) if now.saturating_duration_since(*at) < self.timing.refresh => {
                Peek::Fresh(match (good, error) {
                    (Some(good), _) => Ok(good),
                    (None, Some(error)) => Err(error.clone()),
                    // A success older than staleness but younger than refresh: refresh > staleness.
                    (None, None) => return Peek::Refresh(None),
                })
            }
            _ => Peek::Refresh(good),
        }
    }

    /// Evicts keys nobody asked for during `ttl`; returns how many.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let mut entries = write(&self.entries);
        let before = entries.len();
        entries.retain(|key, entry| {
            let last = lock(&entry.state).last_asked;
            let keep = last.is_some_and(|at| now.saturating_duration_since(at) < self.timing.ttl);
            if !keep {
                self.metrics.forget(&object_labels(key));
            }
            keep
        });
        self.metrics.cache_entries.set(entries.len() as i64);
        before - entries.len()
    }

    pub fn len(&self) -> usize {
        read(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs [`Cache::evict_idle`] periodically until `shutdown`.
    pub async fn run_eviction(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    let evicted = self.evict_idle(Instant::now());
                    if evicted > 0 {
                        debug!(evicted, "evicted idle ScaledObjects");
                    }
                }
            }
        }
    }
}

fn object_labels(key: &Key) -> ObjectLabels {
    ObjectLabels {
        namespace: key.namespace.clone(),
        scaledobject: key.name.clone(),
        cluster: key.config.cluster.clone(),
    }
}

// Poisoning only follows a panic while holding the lock; the data is still consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
