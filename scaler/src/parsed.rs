//! Trigger metadata parsed once per distinct content, not on every rpc.
//!
//! KEDA sends the same metadata about nine times per ScaledObject every 30 s; parsing it each time
//! put the validation of `schedules` (cron patterns, time zones) on the async workers for every
//! call. Here each distinct `(ScaledObject name, metadata)` is parsed once and its outcome (the
//! config, or the error) kept, at most `capacity` entries of at most [`MAX_CACHED_BYTES`] each,
//! the least recently asked evicted first. Metadata with `schedules` is parsed on the blocking
//! pool, one at a time: a flood of new schedules takes at most one core and never an async
//! worker, so cached answers for other keys stay fast.
use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hash as _, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use siphasher::sip128::{Hasher128 as _, SipHasher13};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use runtime::lock::lock;

use crate::events::{self, Events};
use crate::lru;
use crate::metrics::Metrics;
use scaler_core::metadata::{self, MetadataError, ScalerConfig};

/// Largest metadata (keys and values, in bytes) kept: a trigger's metadata is a few hundred
/// bytes, a `schedules` value at most 4 KiB. Larger metadata is parsed every time (the parser
/// refuses over-long values first, cheaply).
pub const MAX_CACHED_BYTES: usize = 8 * 1024;

/// What a parse gave: shared by every rpc with the same metadata.
pub type Parsed = Result<Arc<ScalerConfig>, MetadataError>;

/// The content a parse depends on: the ScaledObject's name (the default cluster) and the
/// metadata, sorted; and its namespace, so an invalid one is reported (logged at warn, an
/// Event) once per ScaledObject and metadata. Held as a 128-bit SipHash under the cache's own
/// random keys: a cache holds one per ScaledObject, and the text itself cost 150 bytes each
/// (docs/benchmarks.md). Without the keys no tenant can aim a collision at another's content,
/// and by chance one is about 2⁻⁸⁹ likely among a million contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Content(u128);

impl Content {
    fn new(keys: (u64, u64), namespace: &str, name: &str, raw: &HashMap<String, String>) -> Self {
        let mut metadata: Vec<(&String, &String)> = raw.iter().collect();
        metadata.sort_unstable();
        let mut digest = SipHasher13::new_with_keys(keys.0, keys.1);
        // `str`'s Hash ends each part with 0xff, a byte UTF-8 never holds, and the Vec's
        // starts with its length: no two contents feed the same bytes.
        (namespace, name, metadata).hash(&mut digest);
        Self(digest.finish128().as_u128())
    }
}

struct Slot {
    /// The error boxed, as in no [`Parsed`]: a cache holds one slot per ScaledObject, and
    /// inline the error (64 bytes) sized every slot.
    parsed: Result<Arc<ScalerConfig>, Box<MetadataError>>,
    /// A tick of [`MetadataCache::clock`]: larger is more recent.
    asked: AtomicU64,
}

pub struct MetadataCache {
    entries: Mutex<HashMap<Content, Slot>>,
    /// The digest's keys, random per process.
    keys: (u64, u64),
    capacity: usize,
    clock: AtomicU64,
    /// One schedule validation at a time, on the blocking pool.
    expensive: Semaphore,
    metrics: Metrics,
    events: Option<Events>,
}

impl MetadataCache {
    pub fn new(capacity: usize, metrics: Metrics) -> Self {
        Self {
            entries: Mutex::default(),
            capacity: capacity.max(1),
            clock: AtomicU64::new(0),
            keys: (
                RandomState::new().hash_one(0),
                RandomState::new().hash_one(1),
            ),
            expensive: Semaphore::new(1),
            metrics,
            events: None,
        }
    }

    /// Records an Event on each ScaledObject whose metadata is invalid (once per content held).
    pub fn with_events(mut self, events: Option<Events>) -> Self {
        self.events = events;
        self
    }

    /// The parsed metadata of the ScaledObject `namespace/name`, from memory when this content
    /// was seen. A new invalid content is logged at warn and recorded as an Event.
    pub async fn parse(
        &self,
        namespace: &str,
        name: &str,
        raw: &HashMap<String, String>,
    ) -> Parsed {
        let size: usize = name.len() + raw.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if size > MAX_CACHED_BYTES {
            // Not kept, so parsed on every rpc: logging each would flood the log.
            let parsed = parse_now(name, raw);
            if let Err(error) = &parsed {
                debug!(%namespace, scaledobject = %name, %error, "invalid trigger metadata (too large to remember)");
            }
            return parsed;
        }
        let content = Content::new(self.keys, namespace, name, raw);
        if let Some(parsed) = self.cached(&content) {
            return parsed;
        }
        let parsed = if raw.contains_key("schedules") {
            // Waiting for the one slot: another caller may have parsed the same content meanwhile.
            let _slot = self.expensive.acquire().await;
            if let Some(parsed) = self.cached(&content) {
                return parsed;
            }
            let (name, raw) = (name.to_owned(), raw.clone());
            // A panic in the parser goes on in the rpc, which answers it INTERNAL
            // (`grpc::caught`); its outcome is not kept, so it is not cached either.
            tokio::task::spawn_blocking(move || parse_now(&name, &raw))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        } else {
            parse_now(name, raw)
        };
        if let Err(error) = &parsed {
            warn!(%namespace, scaledobject = %name, %error, "invalid trigger metadata");
            if let Some(events) = &self.events {
                events.send(
                    namespace,
                    name,
                    events::invalid_metadata(&error.to_string()),
                );
            }
        }
        self.insert(content, parsed.clone());
        parsed
    }

    fn cached(&self, content: &Content) -> Option<Parsed> {
        let entries = lock(&self.entries);
        let slot = entries.get(content)?;
        slot.asked.store(self.tick(), Ordering::Relaxed);
        Some(match &slot.parsed {
            Ok(config) => Ok(config.clone()),
            Err(error) => Err((**error).clone()),
        })
    }

    fn insert(&self, content: Content, parsed: Parsed) {
        let mut entries = lock(&self.entries);
        if !entries.contains_key(&content) && entries.len() >= self.capacity {
            let asked = |slot: &Slot| slot.asked.load(Ordering::Relaxed);
            let oldest = lru::least_recent(&entries, self.capacity, asked);
            for c in &oldest {
                entries.remove(c);
            }
            self.metrics.evicted("metadata", "capacity", oldest.len());
        }
        let asked = AtomicU64::new(self.tick());
        let parsed = parsed.map_err(Box::new);
        entries.insert(content, Slot { parsed, asked });
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn parse_now(name: &str, raw: &HashMap<String, String>) -> Parsed {
    metadata::parse(name, raw).map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cache(capacity: usize) -> MetadataCache {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        MetadataCache::new(capacity, metrics)
    }

    #[tokio::test]
    async fn each_distinct_metadata_is_parsed_once_errors_included() {
        let c = cache(100);
        let good = md(&[
            ("target", "5"),
            ("maxReplicas", "4"),
            ("schedules", "0 8 * * * for 1h floor 3"),
        ]);
        let a = c.parse("ns", "pg", &good).await.unwrap();
        let b = c.parse("ns", "pg", &good).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the second rpc reuses the first parse");
        // The name is part of the content: it is the default cluster.
        let other = c.parse("ns", "pg-two", &good).await.unwrap();
        assert_eq!(other.cluster, "pg-two");
        let never = md(&[
            ("target", "5"),
            ("maxReplicas", "4"),
            ("schedules", "0 0 31 2 * for 1h floor 3"),
        ]);
        let e1 = c.parse("ns", "pg", &never).await.unwrap_err();
        assert_eq!(c.parse("ns", "pg", &never).await.unwrap_err(), e1);
        assert_eq!(c.len(), 3);
    }

    const KEYS: (u64, u64) = (7, 11);

    #[test]
    fn contents_differ_whenever_their_parts_do() {
        let a = Content::new(
            KEYS,
            "ns",
            "pg",
            &md(&[("target", "5"), ("maxReplicas", "4")]),
        );
        let same = Content::new(
            KEYS,
            "ns",
            "pg",
            &md(&[("maxReplicas", "4"), ("target", "5")]),
        );
        assert_eq!(a, same, "the order of the keys does not matter");
        // Parts that join into the same text stay apart.
        assert_ne!(
            Content::new(KEYS, "ns", "pg", &md(&[("ab", "c")])),
            Content::new(KEYS, "ns", "pg", &md(&[("a", "bc")]))
        );
        assert_ne!(
            Content::new(KEYS, "n", "spg", &md(&[])),
            Content::new(KEYS, "ns", "pg", &md(&[]))
        );
        assert_ne!(a, Content::new(KEYS, "ns", "pg", &md(&[("target", "5")])));
    }

    #[tokio::test]
    async fn the_count_is_bounded_least_recently_asked_first_and_large_metadata_is_not_kept() {
        let c = cache(16);
        let keep = md(&[("target", "5"), ("maxReplicas", "4")]);
        let original = c.parse("ns", "keep", &keep).await.unwrap();
        for i in 0..100 {
            c.parse("ns", "keep", &keep).await.unwrap();
            let made_up = md(&[("target", &format!("{}", i + 1)), ("maxReplicas", "4")]);
            c.parse("ns", "pg", &made_up).await.unwrap();
            assert!(c.len() <= 16, "{} entries", c.len());
        }
        // Asked all along, so never the least recent: still the first parse.
        assert!(Arc::ptr_eq(
            &original,
            &c.parse("ns", "keep", &keep).await.unwrap()
        ));
        let before = c.len();
        let huge = md(&[
            ("target", "5"),
            ("maxReplicas", "4"),
            ("cluster", &"x".repeat(MAX_CACHED_BYTES)),
        ]);
        assert!(c.parse("ns", "pg", &huge).await.is_err());
        assert_eq!(c.len(), before);
    }
}
