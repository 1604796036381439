//! The scaler's Prometheus metrics (served by [`runtime::admin`] on `/metrics`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `scaler_grpc_requests_total` | counter | `rpc`, `code` |
//! | `scaler_grpc_request_duration_seconds` | histogram | `rpc`, `code` |
//! | `scaler_backend_queries_total` | counter | `query` (`decision`, `cluster`), `outcome` (`ok`, `error`, `timeout`, `cancelled`) |
//! | `scaler_backend_query_duration_seconds` | histogram | `query` |
//! | `scaler_backend_query_clusters` | histogram (clusters one decision query answers for) | – |
//! | `scaler_refresh_duration_seconds` | histogram (one refresh tick: every due ScaledObject) | – |
//! | `scaler_decisions_total` | counter | `reason` |
//! | `scaler_decision_desired_instances` | gauge | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_recommended_instances` | gauge | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_reason` | gauge (1 for the current reason) | `namespace`, `scaledobject`, `cluster`, `reason` |
//! | `scaler_decision_current_instances` | gauge | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_load` | gauge | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_target` | gauge | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_replication_lag_seconds` | gauge (absent when unknown) | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_max_replication_lag_seconds` | gauge: the brake's threshold (absent when off) | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_signal` | gauge (1 for the signal whose load decided the count) | `namespace`, `scaledobject`, `cluster`, `signal` |
//! | `scaler_decision_brake` | gauge (1 for the current brake state) | `namespace`, `scaledobject`, `cluster`, `state` |
//! | `scaler_decision_quota_ceiling_instances` | gauge (absent without a limiting quota) | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_decision_convergence_backoff` | gauge (hold number past the deadline, 0 otherwise) | `namespace`, `scaledobject`, `cluster` |
//! | `scaler_scaledobject_errors_total` | counter (failed evaluations; gone with the ScaledObject's gauges) | `namespace`, `scaledobject`, `cluster`, `code` |
//! | `scaler_cache_entries` | gauge | – |
//! | `scaler_cache_evictions_total` | counter | `cache` (`decisions`, `metadata`), `cause` (`idle`, `capacity`) |
//! | `scaler_active_streams` | gauge | – |
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use scaler_core::decision::{Brake, ConvergencePhase, Reason};
use scaler_core::evaluate::Evaluation;
use scaler_core::metadata::Metric;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub rpc: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    pub query: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryNameLabels {
    pub query: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    pub cache: &'static str,
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Identifies one ScaledObject's decision gauges. The names are shared, not copied, by its dozen
/// series: at 20,000 ScaledObjects, copies cost tens of MiB.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub namespace: Arc<str>,
    pub scaledobject: Arc<str>,
    pub cluster: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectReasonLabels {
    namespace: Arc<str>,
    scaledobject: Arc<str>,
    cluster: Arc<str>,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectSignalLabels {
    namespace: Arc<str>,
    scaledobject: Arc<str>,
    cluster: Arc<str>,
    signal: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectBrakeLabels {
    namespace: Arc<str>,
    scaledobject: Arc<str>,
    cluster: Arc<str>,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectCodeLabels {
    namespace: Arc<str>,
    scaledobject: Arc<str>,
    cluster: Arc<str>,
    code: &'static str,
}

/// Every code an evaluation failure is answered with ([`crate::grpc::observe_code`]), so
/// [`Metrics::forget`] can drop each per-ScaledObject error series.
pub const OBSERVE_CODES: [tonic::Code; 3] = [
    tonic::Code::Unavailable,
    tonic::Code::DeadlineExceeded,
    tonic::Code::NotFound,
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Handles to every metric; cheap to clone (all `Arc` inside).
#[derive(Clone, Debug)]
pub struct Metrics {
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: HistogramFamily<RpcLabels>,
    backend_queries: Family<QueryLabels, Counter>,
    backend_duration: HistogramFamily<QueryNameLabels>,
    query_clusters: Histogram,
    refresh_duration: Histogram,
    decisions: Family<ReasonLabels, Counter>,
    desired: Family<ObjectLabels, Gauge>,
    recommended: Family<ObjectLabels, Gauge>,
    reason: Family<ObjectReasonLabels, Gauge>,
    quota_ceiling: Family<ObjectLabels, Gauge>,
    convergence_backoff: Family<ObjectLabels, Gauge>,
    current: Family<ObjectLabels, Gauge>,
    load: Family<ObjectLabels, FloatGauge>,
    target: Family<ObjectLabels, FloatGauge>,
    lag: Family<ObjectLabels, FloatGauge>,
    lag_threshold: Family<ObjectLabels, FloatGauge>,
    brake: Family<ObjectBrakeLabels, Gauge>,
    signal: Family<ObjectSignalLabels, Gauge>,
    object_errors: Family<ObjectCodeLabels, Counter>,
    pub cache_entries: Gauge,
    evictions: Family<EvictionLabels, Counter>,
    pub active_streams: Gauge,
}

fn rpc_histogram() -> Histogram {
    // 50 µs .. ~3.3 s: coalesced answers sit at the bottom, backend-bound ones at the top.
    Histogram::new(exponential_buckets(0.00005, 3.0, 11))
}

fn backend_histogram() -> Histogram {
    // 1 ms .. ~4 s, around the 2 s query timeout.
    Histogram::new(exponential_buckets(0.001, 2.3, 11))
}

impl Metrics {
    /// Registers every metric under the `scaler_` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self {
            rpc_requests: Family::default(),
            rpc_duration: Family::new_with_constructor(rpc_histogram),
            backend_queries: Family::default(),
            backend_duration: Family::new_with_constructor(backend_histogram),
            // 1 .. 1024: the batch of one up to the largest --observe-batch-size.
            query_clusters: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            // 10 ms .. ~40 s: a tick runs its batches a few at a time, each within the timeout.
            refresh_duration: Histogram::new(exponential_buckets(0.01, 2.3, 11)),
            decisions: Family::default(),
            desired: Family::default(),
            recommended: Family::default(),
            reason: Family::default(),
            quota_ceiling: Family::default(),
            convergence_backoff: Family::default(),
            current: Family::default(),
            load: Family::default(),
            target: Family::default(),
            lag: Family::default(),
            lag_threshold: Family::default(),
            brake: Family::default(),
            signal: Family::default(),
            object_errors: Family::default(),
            cache_entries: Gauge::default(),
            evictions: Family::default(),
            active_streams: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("scaler");
        r.register(
            "grpc_requests",
            "gRPC requests by rpc and status code",
            this.rpc_requests.clone(),
        );
        r.register(
            "grpc_request_duration_seconds",
            "gRPC request latency by rpc and status code",
            this.rpc_duration.clone(),
        );
        r.register(
            "backend_queries",
            "Backend queries (PromQL decision query, Kubernetes Cluster read) by outcome",
            this.backend_queries.clone(),
        );
        r.register(
            "backend_query_duration_seconds",
            "Backend query latency",
            this.backend_duration.clone(),
        );
        r.register(
            "backend_query_clusters",
            "CNPG clusters one decision query answers for (a cold ScaledObject's query is 1)",
            this.query_clusters.clone(),
        );
        r.register(
            "refresh_duration_seconds",
            "Duration of one refresh tick (every due ScaledObject, in batched queries)",
            this.refresh_duration.clone(),
        );
        r.register(
            "decisions",
            "Decisions computed, by reason",
            this.decisions.clone(),
        );
        r.register(
            "decision_desired_instances",
            "Instance count currently served per ScaledObject",
            this.desired.clone(),
        );
        r.register(
            "decision_recommended_instances",
            "Instance count load and bounds ask for (differs from desired under brake or dry-run)",
            this.recommended.clone(),
        );
        r.register(
            "decision_reason",
            "1 for the reason of the current decision per ScaledObject",
            this.reason.clone(),
        );
        r.register(
            "decision_quota_ceiling_instances",
            "Largest instance count the namespace's ResourceQuotas fit (max with current and floor)",
            this.quota_ceiling.clone(),
        );
        r.register(
            "decision_convergence_backoff",
            "Hold number of a scale-up that did not converge within the deadline; 0 otherwise",
            this.convergence_backoff.clone(),
        );
        r.register(
            "decision_current_instances",
            "Instance count the decision started from (the Cluster's, else the instance series')",
            this.current.clone(),
        );
        r.register(
            "decision_load",
            "Read load over the replicas the decision used, in the trigger metric's unit",
            this.load.clone(),
        );
        r.register(
            "decision_target",
            "Load per replica the decision aims for (trigger metadata target)",
            this.target.clone(),
        );
        r.register(
            "decision_replication_lag_seconds",
            "Largest replica lag over 5 minutes the decision saw; absent when unknown",
            this.lag.clone(),
        );
        r.register(
            "decision_max_replication_lag_seconds",
            "The lag brake's threshold (trigger metadata maxReplicationLagSeconds); absent when the brake is off",
            this.lag_threshold.clone(),
        );
        r.register(
            "decision_brake",
            "1 for the lag brake's current state (off, clear, idle-lag, engaged) per ScaledObject",
            this.brake.clone(),
        );
        r.register(
            "decision_signal",
            "1 for the signal (metric) whose load asked for the most replicas per ScaledObject",
            this.signal.clone(),
        );
        r.register(
            "scaledobject_errors",
            "Failed evaluations per ScaledObject, by the gRPC code KEDA got; bounded by the \
             decision cache (--max-cached-objects) and dropped with the ScaledObject's gauges",
            this.object_errors.clone(),
        );
        r.register(
            "cache_entries",
            "ScaledObject decisions held in the cache",
            this.cache_entries.clone(),
        );
        r.register(
            "cache_evictions",
            "Entries evicted: ScaledObject decisions or parsed trigger metadata, idle past \
             --cache-ttl or least recently asked past --max-cached-objects",
            this.evictions.clone(),
        );
        r.register(
            "active_streams",
            "Open StreamIsActive streams",
            this.active_streams.clone(),
        );
        this
    }

    pub fn rpc(&self, rpc: &'static str, code: tonic::Code, seconds: f64) {
        let labels = RpcLabels {
            rpc,
            code: code_name(code),
        };
        self.rpc_requests.get_or_create(&labels).inc();
        self.rpc_duration.get_or_create(&labels).observe(seconds);
    }

    pub fn backend(&self, query: &'static str, outcome: &'static str, seconds: f64) {
        self.backend_queries
            .get_or_create(&QueryLabels { query, outcome })
            .inc();
        self.backend_duration
            .get_or_create(&QueryNameLabels { query })
            .observe(seconds);
    }

    /// One decision query is sent for `clusters` CNPG clusters.
    pub fn batch_clusters(&self, clusters: usize) {
        self.query_clusters.observe(clusters as f64);
    }

    /// `count` entries of `cache` were evicted for `cause`.
    pub fn evicted(&self, cache: &'static str, cause: &'static str, count: usize) {
        self.evictions
            .get_or_create(&EvictionLabels { cache, cause })
            .inc_by(count as u64);
    }

    pub fn refresh(&self, seconds: f64) {
        self.refresh_duration.observe(seconds);
    }

    /// Publishes a fresh decision for one ScaledObject.
    pub fn decision(&self, object: &ObjectLabels, evaluation: &Evaluation) {
        let decision = &evaluation.decision;
        let observed = &evaluation.observation;
        self.current
            .get_or_create(object)
            .set(i64::from(observed.current));
        self.load.get_or_create(object).set(observed.load);
        self.target
            .get_or_create(object)
            .set(evaluation.policy.target);
        match observed.max_lag_seconds {
            Some(lag) => _ = self.lag.get_or_create(object).set(lag),
            None => _ = self.lag.remove(object),
        }
        match evaluation.policy.max_lag_seconds {
            threshold if threshold > 0.0 => {
                _ = self.lag_threshold.get_or_create(object).set(threshold)
            }
            _ => _ = self.lag_threshold.remove(object),
        }
        for metric in Metric::ALL {
            let labels = signal_labels(object, metric);
            if metric == decision.signal {
                self.signal.get_or_create(&labels).set(1);
            } else {
                self.signal.remove(&labels);
            }
        }
        for state in BRAKE_STATES {
            let labels = brake_labels(object, state);
            if state == decision.brake {
                self.brake.get_or_create(&labels).set(1);
            } else {
                self.brake.remove(&labels);
            }
        }
        self.decisions
            .get_or_create(&ReasonLabels {
                reason: decision.reason.as_str(),
            })
            .inc();
        self.desired
            .get_or_create(object)
            .set(i64::from(decision.desired));
        self.recommended
            .get_or_create(object)
            .set(i64::from(decision.recommended));
        match decision.quota_ceiling {
            Some(cap) => _ = self.quota_ceiling.get_or_create(object).set(i64::from(cap)),
            None => _ = self.quota_ceiling.remove(object),
        }
        let backoff = match decision.convergence {
            ConvergencePhase::Hold { attempt, .. } | ConvergencePhase::Retry { attempt, .. } => {
                attempt
            }
            _ => 0,
        };
        self.convergence_backoff
            .get_or_create(object)
            .set(i64::from(backoff));
        for reason in Reason::ALL {
            let labels = reason_labels(object, reason);
            if reason == decision.reason {
                self.reason.get_or_create(&labels).set(1);
            } else {
                self.reason.remove(&labels);
            }
        }
    }

    /// One failed evaluation of a ScaledObject the cache holds.
    pub fn object_error(&self, object: &ObjectLabels, code: tonic::Code) {
        self.object_errors
            .get_or_create(&code_labels(object, code))
            .inc();
    }

    /// Drops one ScaledObject's gauges and error counters (after cache eviction).
    pub fn forget(&self, object: &ObjectLabels) {
        for code in OBSERVE_CODES {
            self.object_errors.remove(&code_labels(object, code));
        }
        self.desired.remove(object);
        self.recommended.remove(object);
        self.quota_ceiling.remove(object);
        self.convergence_backoff.remove(object);
        self.current.remove(object);
        self.load.remove(object);
        self.target.remove(object);
        self.lag.remove(object);
        self.lag_threshold.remove(object);
        for state in BRAKE_STATES {
            self.brake.remove(&brake_labels(object, state));
        }
        for metric in Metric::ALL {
            self.signal.remove(&signal_labels(object, metric));
        }
        for reason in Reason::ALL {
            self.reason.remove(&reason_labels(object, reason));
        }
    }
}

fn signal_labels(object: &ObjectLabels, metric: Metric) -> ObjectSignalLabels {
    ObjectSignalLabels {
        namespace: object.namespace.clone(),
        scaledobject: object.scaledobject.clone(),
        cluster: object.cluster.clone(),
        signal: metric.as_str(),
    }
}

fn code_labels(object: &ObjectLabels, code: tonic::Code) -> ObjectCodeLabels {
    ObjectCodeLabels {
        namespace: object.namespace.clone(),
        scaledobject: object.scaledobject.clone(),
        cluster: object.cluster.clone(),
        code: code_name(code),
    }
}

fn reason_labels(object: &ObjectLabels, reason: Reason) -> ObjectReasonLabels {
    ObjectReasonLabels {
        namespace: object.namespace.clone(),
        scaledobject: object.scaledobject.clone(),
        cluster: object.cluster.clone(),
        reason: reason.as_str(),
    }
}

/// grpc-go's spelling of status codes, as `grpc_code` labels usually carry.
const BRAKE_STATES: [Brake; 4] = [Brake::Off, Brake::Clear, Brake::IdleLag, Brake::Engaged];

fn brake_labels(object: &ObjectLabels, state: Brake) -> ObjectBrakeLabels {
    ObjectBrakeLabels {
        namespace: object.namespace.clone(),
        scaledobject: object.scaledobject.clone(),
        cluster: object.cluster.clone(),
        // Exhaustive: a new state fails to compile here until it has a label value.
        state: match state {
            Brake::Off => "off",
            Brake::Clear => "clear",
            Brake::IdleLag => "idle-lag",
            Brake::Engaged => "engaged",
        },
    }
}

pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}
