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
//! | `scaler_warm_start_scaledobjects` | gauge (ScaledObjects naming this scaler that its warm start holds) | – |
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

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

/// One held ScaledObject as its gauges read it, borrowed from the decision cache at scrape time.
pub struct ObjectView<'a> {
    pub namespace: &'a str,
    pub scaledobject: &'a str,
    pub cluster: &'a str,
    /// The last good evaluation; none before the first.
    pub evaluation: Option<&'a Evaluation>,
    /// Failed evaluations by [`OBSERVE_CODES`] index.
    pub errors: &'a ErrorCounts,
}

/// Failed evaluations of one ScaledObject by [`OBSERVE_CODES`] index; zero: no series.
pub type ErrorCounts = [u64; OBSERVE_CODES.len()];

/// Counts one failed evaluation answered with `code` (any other code as Unavailable, the
/// backend's: [`crate::cache::ObserveError::code`] gives only these).
pub fn count_error(errors: &mut ErrorCounts, code: tonic::Code) {
    let index = OBSERVE_CODES.iter().position(|c| *c == code).unwrap_or(0);
    errors[index] += 1;
}

/// What holds the ScaledObjects whose gauges are published: the decision cache. The gauges are
/// read from it at scrape time: a map of their own held a copy of every ScaledObject's names and
/// last decision, about 12 MiB of buckets alone at 50,000 (docs/benchmarks.md).
pub trait ObjectSource: Send + Sync {
    /// What is held now, read once per scrape and walked once per family.
    fn held(&self) -> Box<dyn HeldObjects + '_>;
}

/// A scrape's view of the held ScaledObjects.
pub trait HeldObjects {
    /// Calls `visit` once per `(namespace, scaledobject, cluster)`, stopping at the first error:
    /// one ScaledObject held under two trigger metadata (two triggers, or one changed and the old
    /// one not yet evicted) is one series, with the decision of the metadata asked for last and
    /// both keys' error counts.
    fn each(&self, visit: &mut dyn FnMut(ObjectView<'_>) -> fmt::Result) -> fmt::Result;
}

/// Every code an evaluation failure is answered with ([`crate::cache::ObserveError::code`]), so
/// [`Metrics::forget`] can drop each per-ScaledObject error series.
pub const OBSERVE_CODES: [tonic::Code; 4] = [
    tonic::Code::Unavailable,
    tonic::Code::DeadlineExceeded,
    tonic::Code::NotFound,
    tonic::Code::Internal,
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

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
    /// Every `scaler_decision_*` gauge and `scaler_scaledobject_errors_total`, read from the
    /// source [`Metrics::publish_objects`] gives.
    objects: Arc<Objects>,
    pub cache_entries: Gauge,
    evictions: Family<EvictionLabels, Counter>,
    pub active_streams: Gauge,
    pub warm_start_objects: Gauge,
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
            objects: Arc::default(),
            cache_entries: Gauge::default(),
            evictions: Family::default(),
            active_streams: Gauge::default(),
            warm_start_objects: Gauge::default(),
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
        r.register_collector(Box::new(this.objects.clone()));
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
        r.register(
            "warm_start_scaledobjects",
            "ScaledObjects naming this scaler that its warm start found and holds (evaluated before ready)",
            this.warm_start_objects.clone(),
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

    /// Counts a fresh decision by its reason.
    pub fn decision(&self, reason: Reason) {
        self.decisions
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Publishes the gauges of the ScaledObjects `source` holds, for as long as it lives.
    pub fn publish_objects(&self, source: Weak<dyn ObjectSource>) {
        // One source per registry: a second one is a wiring bug, and keeping the first
        // publishes the same ScaledObjects as before.
        if self.objects.0.set(source).is_err() {
            tracing::error!("a second source of ScaledObject gauges was ignored");
        }
    }
}

/// The per-ScaledObject families, encoded from their source at scrape time.
#[derive(Debug, Default)]
struct Objects(OnceLock<Weak<dyn ObjectSource>>);

/// What one ScaledObject's gauges show, read from its view.
struct ObjectSeries {
    /// The last decision; none before the first.
    decision: Option<Published>,
    errors: ErrorCounts,
}

impl ObjectSeries {
    fn of(view: &ObjectView<'_>) -> Self {
        Self {
            decision: view.evaluation.map(Published::of),
            errors: *view.errors,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Published {
    desired: i64,
    recommended: i64,
    reason: Reason,
    /// Absent without a limiting quota.
    quota_ceiling: Option<i64>,
    backoff: i64,
    current: i64,
    load: f64,
    target: f64,
    /// Absent when unknown.
    lag: Option<f64>,
    /// Absent when the brake is off.
    lag_threshold: Option<f64>,
    brake: Brake,
    signal: Metric,
}

impl Published {
    fn of(evaluation: &Evaluation) -> Self {
        let decision = &evaluation.decision;
        let observed = &evaluation.observation;
        Self {
            desired: i64::from(decision.desired),
            recommended: i64::from(decision.recommended),
            reason: decision.reason,
            quota_ceiling: decision.quota_ceiling.map(i64::from),
            backoff: match decision.convergence {
                ConvergencePhase::Hold { attempt, .. }
                | ConvergencePhase::Retry { attempt, .. } => i64::from(attempt),
                _ => 0,
            },
            current: i64::from(observed.current),
            load: observed.load,
            target: evaluation.policy.target,
            lag: observed.max_lag_seconds,
            lag_threshold: Some(evaluation.policy.max_lag_seconds).filter(|t| *t > 0.0),
            brake: decision.brake,
            signal: decision.signal,
        }
    }
}

/// One sample of a family: its extra label (besides the ScaledObject's) and value.
enum Sample {
    Int(Option<(&'static str, &'static str)>, i64),
    Float(f64),
    Count(&'static str, u64),
}

/// A family's samples for one ScaledObject, given to the sink in turn.
type Samples = fn(&ObjectSeries, &mut dyn FnMut(Sample) -> fmt::Result) -> fmt::Result;

/// Name, help and type of each family, and how one ScaledObject's samples are read.
const FAMILIES: [(&str, &str, MetricType, Samples); 13] = [
    (
        "decision_desired_instances",
        "Instance count currently served per ScaledObject.",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .map_or(Ok(()), |d| out(Sample::Int(None, d.desired)))
        },
    ),
    (
        "decision_recommended_instances",
        "Instance count load and bounds ask for (differs from desired under brake or dry-run).",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .map_or(Ok(()), |d| out(Sample::Int(None, d.recommended)))
        },
    ),
    (
        "decision_reason",
        "1 for the reason of the current decision per ScaledObject.",
        MetricType::Gauge,
        |s, out| {
            s.decision.map_or(Ok(()), |d| {
                out(Sample::Int(Some(("reason", d.reason.as_str())), 1))
            })
        },
    ),
    (
        "decision_quota_ceiling_instances",
        "Largest instance count the namespace's ResourceQuotas fit (max with current and floor).",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .and_then(|d| d.quota_ceiling)
                .map_or(Ok(()), |v| out(Sample::Int(None, v)))
        },
    ),
    (
        "decision_convergence_backoff",
        "Hold number of a scale-up that did not converge within the deadline; 0 otherwise.",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .map_or(Ok(()), |d| out(Sample::Int(None, d.backoff)))
        },
    ),
    (
        "decision_current_instances",
        "Instance count the decision started from (the Cluster's, else the instance series').",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .map_or(Ok(()), |d| out(Sample::Int(None, d.current)))
        },
    ),
    (
        "decision_load",
        "Read load over the replicas the decision used, in the trigger metric's unit.",
        MetricType::Gauge,
        |s, out| s.decision.map_or(Ok(()), |d| out(Sample::Float(d.load))),
    ),
    (
        "decision_target",
        "Load per replica the decision aims for (trigger metadata target).",
        MetricType::Gauge,
        |s, out| s.decision.map_or(Ok(()), |d| out(Sample::Float(d.target))),
    ),
    (
        "decision_replication_lag_seconds",
        "Largest replica lag over 5 minutes the decision saw; absent when unknown.",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .and_then(|d| d.lag)
                .map_or(Ok(()), |v| out(Sample::Float(v)))
        },
    ),
    (
        "decision_max_replication_lag_seconds",
        "The lag brake's threshold (trigger metadata maxReplicationLagSeconds); absent when the brake is off.",
        MetricType::Gauge,
        |s, out| {
            s.decision
                .and_then(|d| d.lag_threshold)
                .map_or(Ok(()), |v| out(Sample::Float(v)))
        },
    ),
    (
        "decision_brake",
        "1 for the lag brake's current state (off, clear, idle-lag, engaged) per ScaledObject.",
        MetricType::Gauge,
        |s, out| {
            s.decision.map_or(Ok(()), |d| {
                out(Sample::Int(Some(("state", brake_name(d.brake))), 1))
            })
        },
    ),
    (
        "decision_signal",
        "1 for the signal (metric) whose load asked for the most replicas per ScaledObject.",
        MetricType::Gauge,
        |s, out| {
            s.decision.map_or(Ok(()), |d| {
                out(Sample::Int(Some(("signal", d.signal.as_str())), 1))
            })
        },
    ),
    (
        "scaledobject_errors",
        "Failed evaluations per ScaledObject, by the gRPC code KEDA got; bounded by the decision \
      cache (--max-cached-objects) and dropped with the ScaledObject's gauges.",
        MetricType::Counter,
        |s, out| {
            for (code, count) in OBSERVE_CODES.iter().zip(s.errors) {
                if count > 0 {
                    out(Sample::Count(code_name(*code), count))?;
                }
            }
            Ok(())
        },
    ),
];

/// A ScaledObject's labels and, for some families, one more.
struct Labelled<'a>(&'a ObjectView<'a>, Option<(&'static str, &'static str)>);

impl EncodeLabelSet for Labelled<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        let object = self.0;
        for label in [
            ("namespace", object.namespace),
            ("scaledobject", object.scaledobject),
            ("cluster", object.cluster),
        ] {
            EncodeLabel::encode(&label, encoder.encode_label())?;
        }
        match self.1 {
            Some(label) => EncodeLabel::encode(&label, encoder.encode_label()),
            None => Ok(()),
        }
    }
}

impl Collector for Objects {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let Some(source) = self.0.get().and_then(Weak::upgrade) else {
            return Ok(());
        };
        let held = source.held();
        for (name, help, kind, samples) in FAMILIES {
            // A family without series is left out, as prometheus-client leaves an empty one out.
            // The search stops at the first sample (a formatting error is how it stops).
            let mut any = false;
            let _ = held.each(&mut |view| {
                samples(&ObjectSeries::of(&view), &mut |_| {
                    any = true;
                    Err(fmt::Error)
                })
            });
            if !any {
                continue;
            }
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            held.each(&mut |view| {
                samples(&ObjectSeries::of(&view), &mut |sample| {
                    let encode = |family: &mut MetricEncoder, extra, metric: &dyn EncodeMetric| {
                        metric.encode(family.encode_family(&Labelled(&view, extra))?)
                    };
                    match sample {
                        Sample::Int(extra, v) => encode(&mut family, extra, &ConstGauge::new(v)),
                        Sample::Float(v) => encode(&mut family, None, &ConstGauge::new(v)),
                        Sample::Count(code, v) => {
                            encode(&mut family, Some(("code", code)), &ConstCounter::new(v))
                        }
                    }
                })
            })?;
        }
        Ok(())
    }
}

/// The lag brake's state as its label value.
fn brake_name(state: Brake) -> &'static str {
    // Exhaustive: a new state fails to compile here until it has a label value.
    match state {
        Brake::Off => "off",
        Brake::Clear => "clear",
        Brake::IdleLag => "idle-lag",
        Brake::Engaged => "engaged",
    }
}

/// grpc-go's spelling of status codes, as `grpc_code` labels usually carry.
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
