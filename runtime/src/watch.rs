//! A watched kind projected into an in-memory map, relists applied atomically: the one index the
//! scaler's Cluster/ResourceQuota topology and the webhook's HelmRelease/Namespace/Deployment
//! index are both built from.
//!
//! A watch (re)starts with `Init`, the full list as `InitApply`s, then `InitDone`. The list is
//! buffered and replaces the map only at `InitDone`: readers see the old state or the new one,
//! never half a list, and an object deleted while the watch was down is gone after the relist.
//! Changes outside a relist (`Apply`, `Delete`) land at once.
use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube::runtime::utils::Backoff as _;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How one watched kind `K` lands in a [`Projected`] map.
pub trait Project<K> {
    type Key: Ord;
    type Value;
    /// Where the object is kept; `None` leaves it out of the index (an `Apply` of it removes
    /// nothing either).
    fn key(&self, object: &K) -> Option<Self::Key>;
    /// What is kept of it.
    fn value(&self, object: &K) -> Self::Value;
}

/// The projected objects of one watched kind, and whether its first full list has landed.
#[derive(Debug)]
pub struct Projected<Key, V> {
    objects: BTreeMap<Key, V>,
    /// The relist under way (between `Init` and `InitDone`), in list order. Built into the map
    /// at once at `InitDone`: a map built in one go has full nodes, about half the memory of one
    /// filled by inserts in key order (each split leaves a node half empty), which is how a
    /// list arrives.
    relist: Option<Vec<(Key, V)>>,
    synced: bool,
}

impl<Key, V> Default for Projected<Key, V> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<Key: Ord, V> Projected<Key, V> {
    /// Applies one watch event through `project`.
    pub fn apply<K, P>(&mut self, project: &P, event: Event<K>)
    where
        P: Project<K, Key = Key, Value = V>,
    {
        match event {
            Event::Init => self.relist = Some(Vec::new()),
            Event::InitApply(object) => {
                if let Some(key) = project.key(&object) {
                    let value = project.value(&object);
                    self.relist.get_or_insert_default().push((key, value));
                }
            }
            Event::InitDone => {
                // Dropped first: the old map, the list and the new map are never all held.
                self.objects = BTreeMap::new();
                // `from_iter` keeps the last of equal keys, as inserting them in turn would.
                self.objects = self.relist.take().unwrap_or_default().into_iter().collect();
                self.synced = true;
            }
            Event::Apply(object) => {
                if let Some(key) = project.key(&object) {
                    let value = project.value(&object);
                    self.objects.insert(key, value);
                }
            }
            Event::Delete(object) => {
                if let Some(key) = project.key(&object) {
                    self.objects.remove(&key);
                }
            }
        }
    }

    /// Whether the first full list has landed (later relists keep it true).
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Marks the kind synced without a watch (tests, and kinds nobody watches).
    pub fn set_synced(&mut self) {
        self.synced = true;
    }

    /// Inserts or replaces one entry by hand (tests, and what this replica read or wrote
    /// itself), as [`Projected::entry`] does.
    pub fn insert(&mut self, key: Key, value: V) -> Option<V> {
        self.objects.insert(key, value)
    }

    /// Inserts or replaces one entry by hand (what this replica just wrote, ahead of its watch
    /// event); the next event or relist for the object supersedes it.
    pub fn entry(&mut self, key: Key) -> std::collections::btree_map::Entry<'_, Key, V> {
        self.objects.entry(key)
    }

    pub fn remove(&mut self, key: &Key) -> Option<V> {
        self.objects.remove(key)
    }
}

/// Reads see the current objects (never a relist under way).
impl<Key, V> Deref for Projected<Key, V> {
    type Target = BTreeMap<Key, V>;

    fn deref(&self) -> &Self::Target {
        &self.objects
    }
}

/// Follows one watch stream until `shutdown`, handing each event or failure to `apply`. A
/// failure is logged and the next attempt waits out kube's default back-off (0.8 s doubling to
/// 30 s); the index keeps the last known state meanwhile.
///
/// The back-off is kept here, not by kube's `default_backoff()`: that resets on every event, and
/// a watcher yields `Init` before each list, so a list that always fails (a CRD not installed,
/// RBAC missing) was retried every second for ever. Here only progress resets it: a list done,
/// or a change seen.
pub async fn follow<K>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    shutdown: CancellationToken,
    mut apply: impl FnMut(watcher::Result<Event<K>>),
) {
    let mut stream = std::pin::pin!(stream);
    let mut backoff = watcher::DefaultBackoff::default();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = stream.next() => event,
        };
        match event {
            None => return,
            Some(Err(error)) => {
                let delay = backoff.next().unwrap_or(MAX_RETRY_DELAY);
                warn!(%error, retry_in = ?delay, "watch failed");
                apply(Err(error));
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
            Some(Ok(event)) => {
                if matches!(event, Event::InitDone) {
                    info!("synced");
                }
                // Progress: a whole list, or a change seen by a running watch.
                if matches!(event, Event::InitDone | Event::Apply(_) | Event::Delete(_)) {
                    backoff.reset();
                }
                apply(Ok(event));
            }
        }
    }
}

/// What `follow` waits if the back-off ever ends (kube's default never does).
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects are `(name, version)`; names starting with `_` are not indexed.
    struct ByName;

    impl Project<(&'static str, u32)> for ByName {
        type Key = &'static str;
        type Value = u32;
        fn key(&self, (name, _): &(&'static str, u32)) -> Option<&'static str> {
            (!name.starts_with('_')).then_some(*name)
        }
        fn value(&self, (_, version): &(&'static str, u32)) -> u32 {
            *version
        }
    }

    fn state(p: &Projected<&'static str, u32>) -> Vec<(&'static str, u32)> {
        p.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn listed(p: &mut Projected<&'static str, u32>, objects: &[(&'static str, u32)]) {
        p.apply(&ByName, Event::Init);
        for o in objects {
            p.apply(&ByName, Event::InitApply(*o));
        }
        p.apply(&ByName, Event::InitDone);
    }

    #[test]
    fn unsynced_until_the_first_list_is_done() {
        let mut p = Projected::default();
        p.apply(&ByName, Event::Init);
        p.apply(&ByName, Event::InitApply(("a", 1)));
        assert!(!p.is_synced());
        assert!(p.is_empty(), "half a list is never visible");
        p.apply(&ByName, Event::InitDone);
        assert!(p.is_synced());
        assert_eq!(state(&p), [("a", 1)]);
        // An empty first list syncs too.
        let mut empty = Projected::<&'static str, u32>::default();
        listed(&mut empty, &[]);
        assert!(empty.is_synced() && empty.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_state_atomically() {
        let mut p = Projected::default();
        listed(&mut p, &[("a", 1), ("b", 1)]);
        p.apply(&ByName, Event::Init);
        p.apply(&ByName, Event::InitApply(("b", 2)));
        p.apply(&ByName, Event::InitApply(("c", 1)));
        // Until InitDone readers keep the old state, and stay synced.
        assert_eq!(state(&p), [("a", 1), ("b", 1)]);
        assert!(p.is_synced());
        p.apply(&ByName, Event::InitDone);
        // `a` was deleted while the watch was down: gone after the relist.
        assert_eq!(state(&p), [("b", 2), ("c", 1)]);
    }

    #[test]
    fn a_restarted_relist_drops_the_half_list_before_it() {
        let mut p = Projected::default();
        listed(&mut p, &[("a", 1)]);
        p.apply(&ByName, Event::Init);
        p.apply(&ByName, Event::InitApply(("stale", 1)));
        // The watch failed mid-list and starts over.
        p.apply(&ByName, Event::Init);
        p.apply(&ByName, Event::InitApply(("c", 1)));
        p.apply(&ByName, Event::InitApply(("b", 1)));
        // Listed twice (a list is not promised to be duplicate-free): the later one holds.
        p.apply(&ByName, Event::InitApply(("c", 2)));
        p.apply(&ByName, Event::InitDone);
        assert_eq!(state(&p), [("b", 1), ("c", 2)]);
    }

    #[test]
    fn changes_between_relists_land_at_once_and_deletes_during_a_relist_hold() {
        let mut p = Projected::default();
        listed(&mut p, &[("a", 1), ("b", 1)]);
        p.apply(&ByName, Event::Apply(("a", 2)));
        p.apply(&ByName, Event::Apply(("c", 1)));
        p.apply(&ByName, Event::Delete(("b", 1)));
        p.apply(&ByName, Event::Delete(("missing", 1)));
        assert_eq!(state(&p), [("a", 2), ("c", 1)]);
        // Objects the projection leaves out are never indexed.
        p.apply(&ByName, Event::Apply(("_skip", 1)));
        listed(&mut p, &[("_skip", 1), ("a", 3)]);
        assert_eq!(state(&p), [("a", 3)]);
        // A delete delivered while a relist is under way applies to the current state, and the
        // relist (which no longer lists the object) does not bring it back.
        p.apply(&ByName, Event::Init);
        p.apply(&ByName, Event::Delete(("a", 3)));
        assert!(p.is_empty());
        p.apply(&ByName, Event::InitDone);
        assert!(p.is_empty());
    }

    #[tokio::test]
    async fn follow_applies_every_event_and_stops_at_shutdown() {
        let events = futures::stream::iter([
            Ok(Event::Init),
            Ok(Event::InitApply(("a", 1))),
            Ok(Event::InitDone),
            Ok(Event::Apply(("b", 1))),
        ])
        .chain(futures::stream::pending());
        let mut p = Projected::default();
        let shutdown = CancellationToken::new();
        {
            let follow = follow(events, shutdown.clone(), |event| {
                if let Ok(event) = event {
                    p.apply(&ByName, event);
                }
            });
            tokio::pin!(follow);
            // The stream stays open: only the shutdown ends `follow`.
            assert!(
                tokio::time::timeout(std::time::Duration::from_millis(50), &mut follow)
                    .await
                    .is_err()
            );
            shutdown.cancel();
            follow.await;
        }
        assert_eq!(state(&p), [("a", 1), ("b", 1)]);
    }

    /// A list that always fails: the watcher yields `Init` before each attempt, which must not
    /// reset the back-off (kube's `default_backoff()` did: a retry every second for ever).
    #[tokio::test(start_paused = true)]
    async fn a_list_that_always_fails_backs_off_and_progress_resets_it() {
        let failed_list =
            || futures::stream::iter([Ok(Event::Init), Err(watcher::Error::NoResourceVersion)]);
        let events = futures::stream::iter(0..6)
            .flat_map(move |_| failed_list())
            .chain(futures::stream::iter([
                Ok(Event::Init),
                Ok(Event::InitDone),
                Err(watcher::Error::NoResourceVersion),
                Err(watcher::Error::NoResourceVersion),
            ]));
        let start = tokio::time::Instant::now();
        let mut failures = Vec::new();
        follow(
            events,
            CancellationToken::new(),
            |event: watcher::Result<Event<(&str, u32)>>| {
                if event.is_err() {
                    failures.push(start.elapsed());
                }
            },
        )
        .await;
        let gaps: Vec<f64> = failures
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        // 0.8 s doubling, each with up to as much again of jitter: at least 0.8, 1.6, 3.2, ...
        for (gap, least) in gaps.iter().zip([0.8, 1.6, 3.2, 6.4, 12.8]) {
            assert!(*gap >= least, "gaps {gaps:?}");
        }
        // The list that succeeded reset it: the failure after it waited the first step only.
        assert!(gaps[6] < 1.6 + 1e-3, "gaps {gaps:?}");
    }
}
