//! Prometheus metrics of the scale adapter, on its admin port (`cozy_scale_adapter_*`).
use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Every reason an adapter can be unsynced for, so each series exists (at 0) from the start.
const REASONS: &[&str] = &[
    "Malformed",
    "InvalidSpec",
    "Conflict",
    "TargetMissing",
    "TargetChanged",
    "KindUnknown",
    "PathMissing",
    "NotANumber",
    "TargetRefused",
    "Forbidden",
    "ApiError",
    "InvalidCount",
    "Paused",
    "Paced",
    "Writing",
    "NotApplied",
];

#[derive(Clone, Default)]
pub struct Metrics {
    pub writes: Counter,
    pub syncs: Counter,
    pub leader: Gauge,
    pub adapters: Gauge,
    unsynced: Family<ReasonLabels, Gauge>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("cozy_scale_adapter");
        r.register("writes", "Counts written into targets", m.writes.clone());
        r.register("syncs", "Syncs run by the leader", m.syncs.clone());
        r.register(
            "leader",
            "1 while this replica holds the Lease",
            m.leader.clone(),
        );
        r.register("adapters", "ScaleAdapters watched", m.adapters.clone());
        r.register(
            "unsynced",
            "Adapters whose target does not hold spec.replicas, by reason",
            m.unsynced.clone(),
        );
        for reason in REASONS {
            let _ = m.unsynced.get_or_create(&ReasonLabels { reason });
        }
        m
    }

    /// Sets every reason's gauge from one sync's counts (absent reasons to 0).
    pub fn set_unsynced(&self, counts: &BTreeMap<&'static str, i64>) {
        for reason in REASONS {
            let n = counts.get(reason).copied().unwrap_or(0);
            self.unsynced.get_or_create(&ReasonLabels { reason }).set(n);
        }
    }
}
