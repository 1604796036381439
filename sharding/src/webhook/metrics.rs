//! Prometheus metrics of the webhook (docs/design.md S9), served on the admin port.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::mutate::Reason;
use crate::index::{Index, Totals};
use placement::PlacementConfig;
use placement::autosize::recommended_shard_count;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Handles to every webhook metric; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    load: Family<ShardLabels, Gauge>,
    tenants: Gauge,
    helmreleases: Gauge,
    recommended: Gauge,
    placements: Counter,
    label_writes: Family<ResultLabels, Counter>,
    admissions: Family<ReasonLabels, Counter>,
    latency: Histogram,
}

impl Metrics {
    /// Registers under `cozy_flux_shard_*`.
    pub fn register(registry: &mut Registry) -> Self {
        // 0.5 ms … ~4 s: the interesting range is far below the API server's 5 s webhook timeout.
        let latency = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        let this = Self {
            load: Family::default(),
            tenants: Gauge::default(),
            helmreleases: Gauge::default(),
            recommended: Gauge::default(),
            placements: Counter::default(),
            label_writes: Family::default(),
            admissions: Family::default(),
            latency,
        };
        let r = registry.sub_registry_with_prefix("cozy_flux_shard");
        r.register(
            "load",
            "Tenant HelmReleases per shard (desired placement)",
            this.load.clone(),
        );
        r.register("tenants", "Known tenants", this.tenants.clone());
        r.register(
            "helmreleases",
            "Known tenant HelmReleases",
            this.helmreleases.clone(),
        );
        r.register(
            "recommended_count",
            "Raw recommended shard count ceil(H/100) capped by tenants and 16, before hysteresis",
            this.recommended.clone(),
        );
        r.register(
            "placements",
            "Tenants placed and recorded on their namespace",
            this.placements.clone(),
        );
        r.register(
            "namespace_label_writes",
            "Namespace label writes by result (ok, conflict, error, timeout)",
            this.label_writes.clone(),
        );
        r.register(
            "admissions",
            "Admission reviews answered, by outcome reason",
            this.admissions.clone(),
        );
        r.register(
            "admission_duration_seconds",
            "Time to answer one admission review",
            this.latency.clone(),
        );
        // Every reason shows up at 0 from the start, so rate() works on the first event.
        for reason in Reason::ALL {
            let _ = this.admissions.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        this
    }

    pub fn admission(&self, reason: Reason, seconds: f64) {
        self.admissions
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
        self.latency.observe(seconds);
    }

    pub fn placed(&self) {
        self.placements.inc();
    }

    pub fn label_write(&self, result: &'static str) {
        self.label_writes
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Refreshes the gauges from the index.
    pub fn observe(&self, index: &Index, config: &PlacementConfig) {
        let Totals {
            tenants,
            tenant_releases,
            keyed_releases,
        } = index.totals();
        self.tenants.set(to_i64(tenants));
        self.helmreleases.set(to_i64(tenant_releases));
        self.recommended
            .set(to_i64(recommended_shard_count(keyed_releases, tenants)));
        let loads = index.placement(config).loads;
        self.load.clear();
        for (shard, load) in loads.into_iter().enumerate() {
            self.load
                .get_or_create(&ShardLabels {
                    shard: placement::shard_name(shard as u32),
                })
                .set(to_i64(load));
        }
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
