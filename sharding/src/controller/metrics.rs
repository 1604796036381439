//! Prometheus metrics of the shard controller (docs/design.md S9), on its admin port.
//! Only the leader moves tenants; every replica reports what it observes.
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

/// Handles to every controller metric; cheap to clone.
#[derive(Clone, Default)]
pub struct Metrics {
    moves: Family<ReasonLabels, Counter>,
    blocked: Family<ReasonLabels, Counter>,
    pub heals: Counter,
    pub syncs: Counter,
    pub leader: Gauge,
    pub stranded: Gauge,
    pub pending: Gauge,
    pub imbalance: Gauge<f64, AtomicU64>,
    load: Family<ShardLabels, Gauge>,
    pub recommended: Gauge,
    pub configured: Gauge,
    pub running: Gauge,
}

impl Metrics {
    /// Registers under `cozy_flux_shard_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        let r = registry.sub_registry_with_prefix("cozy_flux_shard");
        r.register(
            "moves",
            "Tenants moved to another shard, by reason (shard_removed, shard_down, unassigned, rebalance)",
            this.moves.clone(),
        );
        r.register(
            "blocked_moves",
            "Moves not made this sync, by reason (deleting, in_progress, conflict, no_live_shard, error)",
            this.blocked.clone(),
        );
        r.register(
            "heals",
            "Tenants whose straggling releases or namespace label were put back on the tenant's shard",
            this.heals.clone(),
        );
        r.register(
            "syncs",
            "Placement syncs run by the leader",
            this.syncs.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the lease",
            this.leader.clone(),
        );
        r.register(
            "stranded_tenants",
            "Tenants on a removed shard or a shard down past the grace period",
            this.stranded.clone(),
        );
        r.register(
            "pending_moves",
            "Planned moves not made yet (budget, cooldown, blocked, no live shard)",
            this.pending.clone(),
        );
        r.register(
            "imbalance",
            "(max - min) / avg tenant HelmReleases over the configured shards",
            this.imbalance.clone(),
        );
        r.register(
            "load",
            "Tenant HelmReleases per shard (desired placement)",
            this.load.clone(),
        );
        r.register(
            "recommended_shards",
            "Shard count autosizing recommends: clamp(ceil(H/100), 1, min(16, T)) with hysteresis",
            this.recommended.clone(),
        );
        r.register(
            "configured_shards",
            "Shard count K the controller places on (--shards)",
            this.configured.clone(),
        );
        r.register(
            "running_shards",
            "helm-controller-shard<i> Deployments present",
            this.running.clone(),
        );
        this
    }

    pub fn moved(&self, reason: &'static str) {
        self.moves.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn blocked(&self, reason: &'static str) {
        self.blocked.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn set_loads(&self, loads: &[u64]) {
        self.load.clear();
        for (i, load) in loads.iter().enumerate() {
            let shard = placement::shard_name(i as u32);
            self.load
                .get_or_create(&ShardLabels { shard })
                .set(i64::try_from(*load).unwrap_or(i64::MAX));
        }
    }
}
