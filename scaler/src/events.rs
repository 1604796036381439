//! Kubernetes Events on ScaledObjects: a decision's reason entering or leaving a guard, and
//! invalid trigger metadata (the message names the key and the fix).
//!
//! [`transition`] (pure) says which events a change of reason makes. [`Events`] queues them
//! (a bounded channel: when full, new ones are dropped, never waited for, so no rpc or refresh
//! tick slows down) for one task that rate limits them per ScaledObject ([`Limiter`]: kube's
//! recorder deduplicates repeats into a series but does not rate limit), reads the
//! ScaledObject's uid (so `kubectl describe` finds them) and publishes with kube-runtime's
//! `events::Recorder`. RBAC: `events.k8s.io` events create and patch, `keda.sh` scaledobjects
//! get.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::Resource as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use scaler_core::decision::Reason;

/// Events waiting for the publisher; past it new ones are dropped.
pub const QUEUE: usize = 256;
/// Events one ScaledObject may get at once, then one per [`REFILL`].
pub const BURST: u32 = 4;
pub const REFILL: Duration = Duration::from_secs(60);
/// The `reportingController` of every event.
pub const CONTROLLER: &str = "cozy-autoscaling-scaler";

/// A guard: a reason that holds the count away from what the load asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    Brake,
    QuorumFloor,
    Quota,
    QuotaUnreadable,
    Stuck,
    Schedule,
    ScaleInHold,
    DryRun,
    ConnectionBudget,
}

impl Guard {
    pub fn of(reason: Reason) -> Option<Self> {
        match reason {
            Reason::Brake => Some(Self::Brake),
            Reason::Quorum => Some(Self::QuorumFloor),
            Reason::Quota => Some(Self::Quota),
            Reason::QuotaUnreadable => Some(Self::QuotaUnreadable),
            Reason::Stuck => Some(Self::Stuck),
            Reason::Schedule => Some(Self::Schedule),
            Reason::ScaleInHold => Some(Self::ScaleInHold),
            Reason::DryRun => Some(Self::DryRun),
            Reason::ConnectionBudget => Some(Self::ConnectionBudget),
            // The pooler's wait raise and paced scale-in follow its load, as `load` does.
            Reason::Load
            | Reason::Floor
            | Reason::Max
            | Reason::ClientWait
            | Reason::ScaleInPace => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Brake => "LagBrake",
            Self::QuorumFloor => "QuorumFloor",
            Self::Quota => "QuotaCeiling",
            Self::QuotaUnreadable => "QuotaUnreadable",
            Self::Stuck => "ConvergenceHold",
            Self::Schedule => "ScheduleWindow",
            Self::ScaleInHold => "ScaleInHold",
            Self::DryRun => "DryRun",
            Self::ConnectionBudget => "ConnectionBudget",
        }
    }

    /// Guards that hold growth the load asks for are warnings; chosen holds are normal.
    fn engaged_type(self) -> EventType {
        match self {
            Self::Brake
            | Self::Quota
            | Self::QuotaUnreadable
            | Self::Stuck
            | Self::ConnectionBudget => EventType::Warning,
            _ => EventType::Normal,
        }
    }
}

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    /// PascalCase, e.g. `LagBrakeEngaged`.
    pub reason: String,
    pub note: String,
}

/// The events a decision whose reason went from `previous` (`None`: the first decision) to
/// `next` makes: leaving one guard, entering another (both when one replaces the other).
pub fn transition(previous: Option<Reason>, next: Reason, summary: &str) -> Vec<Notice> {
    let (was, is) = (previous.and_then(Guard::of), Guard::of(next));
    let mut notices = Vec::new();
    if was == is {
        return notices;
    }
    if let Some(guard) = was {
        notices.push(Notice {
            warning: false,
            reason: format!("{}Released", guard.name()),
            note: format!("reason is now {next}: {summary}"),
        });
    }
    if let Some(guard) = is {
        notices.push(Notice {
            warning: guard.engaged_type() == EventType::Warning,
            reason: format!("{}Engaged", guard.name()),
            note: format!("reason {next}: {summary}"),
        });
    }
    notices
}

/// The invalid-metadata event: the parser's message names the key and what is allowed.
pub fn invalid_metadata(error: &str) -> Notice {
    Notice {
        warning: true,
        reason: "InvalidMetadata".into(),
        note: format!("{error}; KEDA gets INVALID_ARGUMENT until the trigger metadata is fixed"),
    }
}

/// Per-ScaledObject token buckets, at most `capacity` objects (the longest quiet go first).
pub struct Limiter {
    buckets: HashMap<(String, String), (f64, Instant)>,
    capacity: usize,
}

impl Limiter {
    pub fn new(capacity: usize) -> Self {
        Self {
            buckets: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Whether one more event for `namespace/name` may go out at `now`.
    pub fn allow(&mut self, namespace: &str, name: &str, now: Instant) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.capacity {
            // A forgotten object starts with a full bucket: at most BURST more, so still bounded.
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
        let (tokens, at) = self.buckets.entry(key).or_insert((f64::from(BURST), now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() / REFILL.as_secs_f64();
        *tokens = (*tokens + refilled).min(f64::from(BURST));
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

struct Queued {
    namespace: String,
    name: String,
    notice: Notice,
}

/// The queue to the publisher; cheap to clone.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Queued>,
}

impl Events {
    /// The queue and its publisher, which the caller runs until `shutdown` (an app's task set,
    /// so a panic in it is never silent); `capacity` bounds the rate limiter's objects.
    pub fn new(
        client: kube::Client,
        capacity: usize,
        shutdown: CancellationToken,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let publisher = publish(client, rx, Limiter::new(capacity), shutdown);
        (Self { tx }, publisher)
    }

    /// Queues `notice` for the ScaledObject `namespace/name`; dropped when the queue is full.
    pub fn send(&self, namespace: &str, name: &str, notice: Notice) {
        let queued = Queued {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            notice,
        };
        if let Err(error) = self.tx.try_send(queued) {
            debug!(%error, "event queue full; event dropped");
        }
    }
}

async fn publish(
    client: kube::Client,
    mut rx: mpsc::Receiver<Queued>,
    mut limiter: Limiter,
    shutdown: CancellationToken,
) {
    let reporter = Reporter {
        controller: CONTROLLER.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let resource = crate::scaledobject::resource();
    loop {
        let queued = tokio::select! {
            _ = shutdown.cancelled() => return,
            queued = rx.recv() => match queued {
                Some(queued) => queued,
                None => return,
            },
        };
        let Queued {
            namespace,
            name,
            notice,
        } = queued;
        if !limiter.allow(&namespace, &name, Instant::now()) {
            debug!(%namespace, scaledobject = %name, reason = %notice.reason, "event rate limited");
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let result = async {
            let object = tokio::time::timeout(Duration::from_secs(5), api.get(&name))
                .await
                .map_err(|_| "reading the ScaledObject timed out".to_owned())?
                .map_err(|e| format!("reading the ScaledObject: {e}"))?;
            let mut reference = object.object_ref(&resource);
            reference.field_path = None;
            let event = Event {
                type_: if notice.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: notice.reason.clone(),
                note: Some(cut(&notice.note, 1000)),
                action: "Scale".into(),
                secondary: None,
            };
            tokio::time::timeout(Duration::from_secs(5), recorder.publish(&event, &reference))
                .await
                .map_err(|_| "publishing timed out".to_owned())?
                .map_err(|e| e.to_string())
        }
        .await;
        if let Err(error) = result {
            warn!(%namespace, scaledobject = %name, reason = %notice.reason, %error, "cannot record event");
        }
    }
}

/// Events' notes are at most 1 kB.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(notices: &[Notice]) -> Vec<(&str, bool)> {
        notices
            .iter()
            .map(|n| (n.reason.as_str(), n.warning))
            .collect()
    }

    #[test]
    fn entering_and_leaving_a_guard_make_one_event_each() {
        let t = |p, n| transition(p, n, "why");
        assert_eq!(
            reasons(&t(Some(Reason::Load), Reason::Brake)),
            [("LagBrakeEngaged", true)]
        );
        assert_eq!(
            reasons(&t(Some(Reason::Brake), Reason::Load)),
            [("LagBrakeReleased", false)]
        );
        assert!(t(Some(Reason::Brake), Reason::Brake).is_empty());
        assert!(t(Some(Reason::Load), Reason::Max).is_empty());
        assert!(t(None, Reason::Load).is_empty());
        assert_eq!(
            reasons(&t(None, Reason::DryRun)),
            [("DryRunEngaged", false)]
        );
        // One guard replacing another: released, then engaged.
        assert_eq!(
            reasons(&t(Some(Reason::Schedule), Reason::Quota)),
            [
                ("ScheduleWindowReleased", false),
                ("QuotaCeilingEngaged", true)
            ]
        );
        let note = &t(Some(Reason::Brake), Reason::Load)[0].note;
        assert!(note.contains("load") && note.contains("why"), "{note}");
    }

    #[test]
    fn every_reason_is_classified() {
        let guarded: Vec<Reason> = Reason::ALL
            .into_iter()
            .filter(|r| Guard::of(*r).is_some())
            .collect();
        assert_eq!(guarded.len(), 9, "{guarded:?}");
        for r in guarded {
            assert_eq!(transition(Some(Reason::Load), r, "").len(), 1, "{r}");
            assert_eq!(transition(Some(r), Reason::Load, "").len(), 1, "{r}");
        }
    }

    #[test]
    fn the_limiter_allows_a_burst_then_one_per_refill_per_object_and_is_bounded() {
        let mut l = Limiter::new(3);
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert!(l.allow("ns", "a", t0));
        }
        assert!(!l.allow("ns", "a", t0));
        assert!(l.allow("ns", "b", t0), "another object has its own bucket");
        assert!(!l.allow("ns", "a", t0 + REFILL / 2));
        assert!(l.allow("ns", "a", t0 + REFILL * 2));
        for i in 0..100 {
            l.allow("ns", &format!("x-{i}"), t0 + REFILL * 3);
            assert!(l.len() <= 3);
        }
    }

    #[test]
    fn the_invalid_metadata_note_keeps_the_key_and_notes_are_cut_to_1_kb() {
        let n = invalid_metadata("metadata key \"target\" is required: a number");
        assert!(n.warning && n.note.contains("\"target\""));
        assert_eq!(cut(&"é".repeat(1000), 1000).len(), 1000);
        assert_eq!(cut(&"é".repeat(1000), 999).len(), 998);
    }
}
