//! Coalesces KEDA's many calls per ScaledObject into one evaluation per refresh interval, and
//! the evaluations of all ScaledObjects into a few batched backend queries per interval.
//!
//! Key: (namespace, ScaledObject name, parsed metadata). Every `refresh` a tick evaluates every
//! key whose last attempt is at least half an interval old, in as few [`Evaluate`] calls as fill
//! the query slots (each batches its keys into a few queries). Per key:
//! * calls are answered from memory: the last good evaluation while it is within `staleness`,
//!   else the last failure (for up to two intervals, so retries do not hammer a sick backend);
//! * a cold key (first call), or one with nothing usable, is evaluated at once: alone while no
//!   other cold evaluation is in flight, else together with the cold keys arriving within the
//!   cold window
//!   ([`crate::gather`]), so a burst of them (a scaler start) costs batched queries, not one per
//!   key. The evaluation runs on a task of its own, owned by the cache ([`Cache::run`] waits for
//!   them at shutdown; a panic is logged and counted): a caller that gives up (KEDA's deadline)
//!   cancels neither the query nor its recording, and the answer serves the retry. One
//!   evaluation runs at a time per key (single-flight): a caller finding the key in a tick or in
//!   another caller's flight waits for it;
//! * a failed refresh keeps serving the last good answer until it is `staleness` old, then the
//!   error;
//! * keys not asked for during `ttl` are evicted, with their decision gauges (read from the cache
//!   at scrape time: [`ObjectSource`]);
//! * at most `capacity` keys are held (callers choose the keys: made-up names must not grow the
//!   process): a new key past it evicts the least recently asked, a sixteenth of the capacity at
//!   once so the scan is amortised, with their gauges. Each key has at most a dozen gauges, so
//!   this bounds the per-ScaledObject series on `/metrics` too.
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt;
use runtime::lock::{lock, read, write};
use runtime::tasks::Tracker;
use std::panic::AssertUnwindSafe;
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::events::{Events, transition};
use crate::gather::{Arrival, Gathering};
use crate::lru;
use crate::metrics::{self, ErrorCounts, HeldObjects, Metrics, ObjectSource, ObjectView};
use crate::topology::TopologyError;
use scaler_core::evaluate::{EvaluateError, Evaluation};
use scaler_core::metadata::ScalerConfig;
use scaler_core::promql::QueryError;

/// Default `--max-cached-objects`: a fleet of this many ScaledObjects fits (about 1.4 KiB each,
/// docs/benchmarks.md); larger fleets raise it.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// Why an evaluation failed: what the cache keeps and the gRPC layer maps to a status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Evaluate(#[from] EvaluateError),
    /// The evaluation call panicked or answered fewer keys than it was given: a bug in the
    /// scaler, answered as one (never a hang, never a number) and retried at the next refresh.
    #[error(
        "the scaler's evaluation of this ScaledObject failed internally ({0}); it is retried at the next refresh"
    )]
    Internal(&'static str),
}

impl ObserveError {
    /// The gRPC code this failure is answered with: `/decisions` and the per-ScaledObject error
    /// counters report the same code KEDA got.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::Query(QueryError::Timeout(_)) | Self::Topology(TopologyError::Timeout { .. }) => {
                tonic::Code::DeadlineExceeded
            }
            Self::Topology(TopologyError::NotFound { .. }) => tonic::Code::NotFound,
            Self::Internal(_) => tonic::Code::Internal,
            _ => tonic::Code::Unavailable,
        }
    }
}

/// What the cache asks of an evaluator: the real [`crate::observe::Observer`], or a fake in
/// cache tests. Defined here, where it is consumed, so the cache depends on no evaluator.
pub trait Evaluate: Send + Sync + 'static {
    /// One result per key, in the keys' order.
    fn evaluate(
        &self,
        keys: &[Arc<Key>],
    ) -> impl Future<Output = Vec<Result<Evaluation, ObserveError>>> + Send;

    /// Most keys a refresh tick hands to one [`Evaluate::evaluate`] call.
    fn keys_per_call(&self) -> usize;

    /// Most keys one backend query answers for: a gathering of cold keys that reaches it is
    /// sent at once.
    fn keys_per_query(&self) -> usize;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
    /// Shared with the metadata cache ([`crate::parsed`]): not copied per rpc.
    pub config: Arc<ScalerConfig>,
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub refresh: Duration,
    pub staleness: Duration,
    pub ttl: Duration,
    /// Most keys held (`--max-cached-objects`).
    pub capacity: usize,
    /// How long cold keys arriving together are gathered into one evaluation
    /// (`--cold-batch-window`; zero: each alone).
    pub cold_window: Duration,
}

#[derive(Default)]
struct State {
    /// Last successful evaluation and when it was made.
    good: Option<(Instant, Arc<Evaluation>)>,
    /// When the last attempt finished, and its error if it failed. Boxed: an entry is held per
    /// ScaledObject, and inline the error (88 bytes) took an allocator size class up for all.
    attempt: Option<(Instant, Option<Box<ObserveError>>)>,
    last_asked: Option<Instant>,
    /// Failed evaluations by code, for `scaler_scaledobject_errors_total`.
    errors: ErrorCounts,
}

#[derive(Default)]
struct Entry {
    state: Mutex<State>,
    /// Held while refreshing: the single flight.
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

/// One key's state as [`Cache::snapshot`] reads it.
pub struct Snapshot {
    pub key: Arc<Key>,
    /// The last good evaluation and when it was made.
    pub good: Option<(SystemTime, Arc<Evaluation>)>,
    /// When the last attempt finished, and its error if it failed.
    pub attempt: Option<(SystemTime, Option<ObserveError>)>,
}

/// A cached answer: an evaluation, or the error that replaced it.
type Answer = Result<Arc<Evaluation>, ObserveError>;

/// A cold key waiting in the gathering window: its flight held, and where its answer goes.
type Waiting = (
    Arc<Key>,
    Arc<Entry>,
    OwnedMutexGuard<()>,
    oneshot::Sender<Answer>,
);

pub struct Cache<E> {
    evaluator: E,
    timing: Timing,
    metrics: Metrics,
    entries: RwLock<HashMap<Arc<Key>, Arc<Entry>>>,
    events: Option<Events>,
    /// Cold keys gathered by namespace: a query's namespace matcher is what the backend's
    /// search starts from (crate::gather).
    cold: Mutex<Gathering<String, Waiting>>,
    /// The cold evaluations and the gathering windows' timers.
    tasks: Tracker,
}

impl<E: Evaluate> Cache<E> {
    pub fn new(evaluator: E, timing: Timing, metrics: Metrics) -> Self {
        let cold = Gathering::new(timing.cold_window, evaluator.keys_per_query());
        Self {
            evaluator,
            timing,
            metrics,
            entries: RwLock::default(),
            events: None,
            cold: Mutex::new(cold),
            tasks: Tracker::new("cold evaluations"),
        }
    }

    /// Records an Event on the ScaledObject when a decision's reason enters or leaves a guard.
    pub fn with_events(mut self, events: Option<Events>) -> Self {
        self.events = events;
        self
    }

    /// The cache, shared, publishing its ScaledObjects' gauges for as long as it lives.
    pub fn shared(self) -> Arc<Self> {
        let cache = Arc::new(self);
        let source: Weak<dyn ObjectSource> = Arc::downgrade(&cache) as _;
        cache.metrics.publish_objects(source);
        cache
    }

    /// The current evaluation for `key`; evaluates it (alone, or with the cold keys arriving
    /// with it) when nothing usable is cached.
    pub async fn get(self: &Arc<Self>, key: Key) -> Answer {
        let (key, entry) = self.entry(key);
        if let Some(answer) = self.usable(&entry, Instant::now(), true) {
            return answer;
        }
        // Nothing usable: wait for the flight in progress (a tick's or another caller's), which
        // may settle it, else evaluate this key.
        let flight = entry.refreshing.clone().lock_owned().await;
        if let Some(answer) = self.usable(&entry, Instant::now(), false) {
            return answer;
        }
        let (answer, answered) = oneshot::channel();
        let namespace = key.namespace.clone();
        let arrival =
            lock(&self.cold).arrive(namespace, (key, entry, flight, answer), Instant::now());
        match arrival {
            Arrival::Send(batch) => self.send(batch),
            Arrival::Opened(window) => self.tasks.spawn(self.clone().close_window(window)),
            Arrival::Joined => {}
        }
        // The sender goes without an answer only when its task was dropped (stopped at shutdown,
        // or a panic): an error, never a panic on the request path.
        answered
            .await
            .unwrap_or(Err(ObserveError::Internal("its evaluation was cancelled")))
    }

    /// Sends gathering window `window`'s keys when it closes (those of groups that filled a
    /// query went before).
    async fn close_window(self: Arc<Self>, window: u64) {
        loop {
            let Some(at) = lock(&self.cold).closes_at(window) else {
                return;
            };
            tokio::time::sleep_until(at.into()).await;
            let batches = lock(&self.cold).close(window, Instant::now());
            if let Some(batches) = batches {
                return batches.into_iter().for_each(|batch| self.send(batch));
            }
        }
    }

    /// Evaluates cold keys together on a task of its own, records each outcome and answers its
    /// caller: a caller that stopped waiting changes nothing, its retry finds the answer.
    fn send(self: &Arc<Self>, mut batch: Vec<Waiting>) {
        batch.sort_unstable_by(|(a, ..), (b, ..)| {
            (&a.namespace, &a.config.cluster).cmp(&(&b.namespace, &b.config.cluster))
        });
        let cache = self.clone();
        self.tasks.spawn(async move {
            let _done = Sent(&cache.cold);
            let keys: Vec<Arc<Key>> = batch.iter().map(|(key, ..)| key.clone()).collect();
            let results = cache.evaluate_whole(&keys).await;
            for ((key, entry, _flight, answer), result) in batch.into_iter().zip(results) {
                let _ = answer.send(cache.record(&key, &entry, result));
            }
        });
    }

    /// One [`Evaluate::evaluate`] call with exactly one result per key: a panic, or an answer
    /// short of keys, becomes an `Internal` error for each key left without one (logged), so
    /// every waiting caller is answered and the cold-batch bookkeeping is reset.
    async fn evaluate_whole(&self, keys: &[Arc<Key>]) -> Vec<Result<Evaluation, ObserveError>> {
        let (mut results, cause) = match AssertUnwindSafe(self.evaluator.evaluate(keys))
            .catch_unwind()
            .await
        {
            Ok(results) => (
                results,
                "the evaluation answered fewer keys than it was given",
            ),
            Err(_) => (Vec::new(), "the evaluation panicked"),
        };
        if results.len() != keys.len() {
            error!(
                keys = keys.len(),
                answered = results.len(),
                "{cause}: the keys without an answer get an internal error"
            );
            results.truncate(keys.len());
            results.resize_with(keys.len(), || Err(ObserveError::Internal(cause)));
        }
        results
    }

    /// One refresh tick: evaluates every due key and records each outcome, in calls of at most
    /// [`Evaluate::keys_per_call`] keys taken in (namespace, cluster) order, so one call's
    /// answers and new evaluations are all a tick holds at once, whatever the fleet's size.
    /// Cold keys (never attempted) are their first caller's, and keys in a flight are skipped.
    /// Returns how many keys were evaluated.
    pub async fn refresh_due(&self) -> usize {
        let now = Instant::now();
        self.evaluate_held(|entry| self.is_due(entry, now)).await
    }

    /// A warm start ([`crate::warm`]): holds `keys` (as many as the capacity has room for; none
    /// is evicted for them) as if just asked for, then evaluates every held key never attempted
    /// the way a tick does. A caller asking for one meanwhile waits for its flight instead of
    /// evaluating it again. Returns how many keys were evaluated.
    pub async fn prime(&self, keys: impl IntoIterator<Item = Key>) -> usize {
        let now = Instant::now();
        {
            let mut entries = write(&self.entries);
            for key in keys {
                if entries.len() >= self.timing.capacity.max(1) {
                    break;
                }
                let entry = entries.entry(Arc::new(key)).or_default();
                lock(&entry.state).last_asked.get_or_insert(now);
            }
            self.metrics.cache_entries.set(entries.len() as i64);
        }
        self.evaluate_held(|entry| lock(&entry.state).attempt.is_none())
            .await
    }

    /// Evaluates the held keys `wanted` picks and no flight holds, taking their flights at once.
    async fn evaluate_held(&self, wanted: impl Fn(&Entry) -> bool) -> usize {
        let mut due: Vec<_> = read(&self.entries)
            .iter()
            .filter(|(_, entry)| wanted(entry))
            .filter_map(|(key, entry)| {
                let flight = entry.refreshing.clone().try_lock_owned().ok()?;
                Some((key.clone(), entry.clone(), flight))
            })
            .collect();
        let evaluated = due.len();
        // Neighbours in one call share batched queries (the batches are cut in this order too).
        due.sort_unstable_by(|(a, _, _), (b, _, _)| {
            (&a.namespace, &a.config.cluster).cmp(&(&b.namespace, &b.config.cluster))
        });
        let per_call = self.evaluator.keys_per_call().max(1);
        while !due.is_empty() {
            let rest = due.split_off(per_call.min(due.len()));
            let keys: Vec<Arc<Key>> = due.iter().map(|(key, _, _)| key.clone()).collect();
            let results = self.evaluate_whole(&keys).await;
            // Recorded, and their flights released, before the next call starts.
            for ((key, entry, _flight), result) in due.drain(..).zip(results) {
                let _ = self.record(&key, &entry, result);
            }
            due = rest;
        }
        evaluated
    }

    fn is_due(&self, entry: &Entry, now: Instant) -> bool {
        lock(&entry.state)
            .attempt
            .as_ref()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= self.timing.refresh / 2)
    }

    /// Records an evaluation's outcome; the caller holds the entry's flight lock. Returns what
    /// callers get now: the new evaluation, else the last good one within staleness, else the error.
    fn record(&self, key: &Key, entry: &Entry, result: Result<Evaluation, ObserveError>) -> Answer {
        let now = Instant::now();
        let mut state = lock(&entry.state);
        match result {
            Ok(evaluation) => {
                let d = &evaluation.decision;
                let previous = state.good.as_ref().map(|(_, e)| e.decision);
                // Changes (and the first decision) at info, repeats at debug: logs show transitions.
                // A guard's events follow a change of reason, so they are only looked for here.
                if previous.is_none_or(|p| {
                    (p.desired, p.recommended, p.reason) != (d.desired, d.recommended, d.reason)
                }) {
                    let summary = evaluation.summary();
                    info!(namespace = %key.namespace, scaledobject = %key.name, cluster = %key.config.cluster, desired = d.desired, recommended = d.recommended, reason = %d.reason, %summary, "decision");
                    if let Some(events) = &self.events {
                        for notice in transition(previous.map(|p| p.reason), d.reason, &summary) {
                            events.send(&key.namespace, &key.name, notice);
                        }
                    }
                } else {
                    debug!(namespace = %key.namespace, scaledobject = %key.name, desired = d.desired, reason = %d.reason, "decision unchanged");
                }
                self.metrics.decision(d.reason);
                let evaluation = reuse(state.good.take(), evaluation);
                state.good = Some((now, evaluation.clone()));
                state.attempt = Some((now, None));
                Ok(evaluation)
            }
            Err(error) => {
                // The first failure after a success (or a new kind of failure) at warn, repeats at debug.
                let repeated =
                    matches!(&state.attempt, Some((_, Some(previous))) if **previous == error);
                if repeated {
                    debug!(namespace = %key.namespace, scaledobject = %key.name, %error, "evaluation still failing");
                } else {
                    warn!(namespace = %key.namespace, scaledobject = %key.name, %error, "evaluation failed");
                }
                metrics::count_error(&mut state.errors, error.code());
                state.attempt = Some((now, Some(Box::new(error.clone()))));
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
        if !entries.contains_key(&key) && entries.len() >= self.timing.capacity.max(1) {
            let evicted = self.evict_least_recent(&mut entries);
            self.metrics.evicted("decisions", "capacity", evicted);
        }
        let key = Arc::new(key);
        let entry = entries.entry(key.clone()).or_default().clone();
        self.metrics.cache_entries.set(entries.len() as i64);
        (key, entry)
    }

    /// Evicts the least recently asked sixteenth of the capacity (at least one key), with their
    /// gauges; keys never asked yet (a first caller is evaluating them) count as the newest.
    fn evict_least_recent(&self, entries: &mut HashMap<Arc<Key>, Arc<Entry>>) -> usize {
        let now = Instant::now();
        let asked = |entry: &Arc<Entry>| lock(&entry.state).last_asked.unwrap_or(now);
        let oldest = lru::least_recent(entries, self.timing.capacity, asked);
        for key in &oldest {
            entries.remove(key);
        }
        oldest.len()
    }

    /// What a caller gets without evaluating: the last good evaluation within staleness, else a
    /// failure from the last two intervals (the tick replaces it); `None` when nothing is usable.
    fn usable(&self, entry: &Entry, now: Instant, touch: bool) -> Option<Answer> {
        let mut state = lock(&entry.state);
        if touch {
            state.last_asked = Some(now);
        }
        let age = |at: &Instant| now.saturating_duration_since(*at);
        if let Some((at, good)) = &state.good
            && age(at) <= self.timing.staleness
        {
            return Some(Ok(good.clone()));
        }
        match &state.attempt {
            Some((at, Some(error))) if age(at) < 2 * self.timing.refresh => {
                Some(Err((**error).clone()))
            }
            _ => None,
        }
    }

    /// Evicts keys nobody asked for during `ttl`; returns how many.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let mut entries = write(&self.entries);
        let before = entries.len();
        entries.retain(|_, entry| {
            let last = lock(&entry.state).last_asked;
            last.is_some_and(|at| now.saturating_duration_since(at) < self.timing.ttl)
        });
        self.metrics.cache_entries.set(entries.len() as i64);
        let evicted = before - entries.len();
        self.metrics.evicted("decisions", "idle", evicted);
        evicted
    }

    pub fn len(&self) -> usize {
        read(&self.entries).len()
    }

    /// What every held key (of `namespace`, when given) last got, for `/decisions`
    /// ([`crate::decisions`]); times converted to the wall clock. The map's lock is held only
    /// to clone its `Arc`s (a new key's insertion, and the calls queued behind it, wait for no
    /// more), then each key's state is locked alone.
    pub fn snapshot(&self, namespace: Option<&str>) -> Vec<Snapshot> {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let at = |t: &Instant| wall - now.saturating_duration_since(*t);
        let held: Vec<(Arc<Key>, Arc<Entry>)> = read(&self.entries)
            .iter()
            .filter(|(key, _)| namespace.is_none_or(|ns| key.namespace == ns))
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect();
        held.into_iter()
            .map(|(key, entry)| {
                let state = lock(&entry.state);
                Snapshot {
                    key,
                    good: state.good.as_ref().map(|(t, e)| (at(t), e.clone())),
                    attempt: state
                        .attempt
                        .as_ref()
                        .map(|(t, e)| (at(t), e.as_deref().cloned())),
                }
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `refresh` until `shutdown`: evicts idle keys, then refreshes the due ones. Ticks
    /// never overlap: a tick that overruns the interval delays the next. At shutdown, waits for
    /// the cold evaluations in flight (their callers are being drained); dropped before they end
    /// (the app's deadline), it stops them.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.timing.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return self.tasks.join_all().await,
                _ = tick.tick() => {
                    let evicted = self.evict_idle(Instant::now());
                    let start = Instant::now();
                    let refreshed = self.refresh_due().await;
                    if refreshed > 0 {
                        self.metrics.refresh(start.elapsed().as_secs_f64());
                    }
                    if evicted + refreshed > 0 {
                        debug!(evicted, refreshed, seconds = start.elapsed().as_secs_f64(), "refresh tick");
                    }
                }
            }
        }
    }
}

impl<E: Evaluate> ObjectSource for Cache<E> {
    /// The entries' `Arc`s, cloned under the map's lock (a new key's insertion waits for no
    /// more), sorted so that one ScaledObject's entries are neighbours.
    fn held(&self) -> Box<dyn HeldObjects + '_> {
        let mut held: Vec<(Arc<Key>, Arc<Entry>)> = read(&self.entries)
            .iter()
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect();
        held.sort_unstable_by(|(a, _), (b, _)| object_of(a).cmp(&object_of(b)));
        Box::new(Held(held))
    }
}

/// The ScaledObject a key's gauges are published for.
fn object_of(key: &Key) -> (&str, &str, &str) {
    (&key.namespace, &key.name, &key.config.cluster)
}

fn view<'a>(
    key: &'a Key,
    evaluation: Option<&'a Evaluation>,
    errors: &'a ErrorCounts,
) -> ObjectView<'a> {
    let (namespace, scaledobject, cluster) = object_of(key);
    ObjectView {
        namespace,
        scaledobject,
        cluster,
        evaluation,
        errors,
    }
}

/// A scrape's entries, sorted by [`object_of`].
struct Held(Vec<(Arc<Key>, Arc<Entry>)>);

impl HeldObjects for Held {
    /// No entry's lock is held while `visit` runs: a streamed scrape's `visit` can wait for its
    /// scraper, and the entry's lock is what its GetMetrics calls take.
    fn each(&self, visit: &mut dyn FnMut(ObjectView<'_>) -> fmt::Result) -> fmt::Result {
        for group in self
            .0
            .chunk_by(|(a, _), (b, _)| object_of(a) == object_of(b))
        {
            // One ScaledObject under several keys: the decision of the metadata asked for last
            // (a changed metadata's old key is refreshed until it is evicted, but no longer
            // asked), and every key's errors.
            let mut errors = ErrorCounts::default();
            let mut latest: Option<(Option<Instant>, Arc<Evaluation>)> = None;
            for (_, entry) in group {
                let state = lock(&entry.state);
                for (sum, count) in errors.iter_mut().zip(state.errors) {
                    *sum += count;
                }
                if let Some((_, evaluation)) = &state.good
                    && latest
                        .as_ref()
                        .is_none_or(|(asked, _)| state.last_asked > *asked)
                {
                    latest = Some((state.last_asked, evaluation.clone()));
                }
            }
            let evaluation = latest.as_ref().map(|(_, e)| &**e);
            visit(view(&group[0].0, evaluation, &errors))?;
        }
        Ok(())
    }
}

/// Marks a sent cold evaluation done when dropped: after its answers, and after a panic or a stop
/// too, so later cold keys are never held behind an evaluation that ended.
struct Sent<'a>(&'a Mutex<Gathering<String, Waiting>>);

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        lock(self.0).done();
    }
}

/// The new evaluation, in the old one's allocation when no caller holds that any more: every
/// tick replaces the whole fleet's evaluations, and allocating them anew raised the resident set
/// 10–17 MiB at every tick at 20,000 ScaledObjects, the old ones' pages not yet given back
/// (docs/benchmarks.md).
fn reuse(old: Option<(Instant, Arc<Evaluation>)>, new: Evaluation) -> Arc<Evaluation> {
    match old {
        Some((_, mut held)) => match Arc::get_mut(&mut held) {
            Some(slot) => {
                *slot = new;
                held
            }
            None => Arc::new(new),
        },
        None => Arc::new(new),
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
