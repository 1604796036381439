//! The `externalscaler.ExternalScaler` gRPC service: proto ↔ cache, and the one error → status map.
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{FutureExt as _, StreamExt as _};
use prometheus_client::metrics::gauge::Gauge;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::debug;

use crate::cache::{Cache, Key};
use crate::cache::{Evaluate, ObserveError};
use crate::counted;
use crate::metrics::Metrics;
use crate::parsed::MetadataCache;
use crate::proto::external_scaler_server::ExternalScaler;
use crate::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use scaler_core::metadata::MetadataError;

/// One StreamIsActive stream's state: it answers `true` every `tick` while the key evaluates.
struct Heartbeat<E> {
    cache: Arc<Cache<E>>,
    key: Key,
    tick: tokio::time::Interval,
    shutdown: CancellationToken,
    _open: OpenStream,
}

/// Counts an open stream in `scaler_active_streams` for as long as it lives.
struct OpenStream(Gauge);

impl OpenStream {
    fn new(metrics: &Metrics) -> Self {
        metrics.active_streams.inc();
        Self(metrics.active_streams.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Everything an rpc can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("scaledObjectRef is missing or has no name/namespace")]
    MissingRef,
    /// `value` is a bounded [`names::echo`].
    #[error("scaledObjectRef.{field} {value} is not {rule}")]
    InvalidName {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// `requested` is a bounded [`names::echo`].
    #[error("unknown metric name {requested}; this trigger serves {served:?}")]
    UnknownMetricName { requested: String, served: String },
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// A bug: the rpc's body panicked (logged at error and counted in
    /// `runtime_task_panics_total`); answered, not dropped.
    #[error("the scaler failed internally answering {rpc}: {message}")]
    Panicked { rpc: &'static str, message: String },
}

/// The only place errors become gRPC statuses (an evaluation failure's code is
/// [`ObserveError::code`], beside the type, so the cache and `/decisions` report it too).
pub fn status(error: &RpcError) -> Status {
    let message = error.to_string();
    match error {
        RpcError::MissingRef
        | RpcError::InvalidName { .. }
        | RpcError::Metadata(_)
        | RpcError::UnknownMetricName { .. } => Status::invalid_argument(message),
        RpcError::Observe(e) => Status::new(e.code(), message),
        RpcError::Panicked { .. } => Status::internal(message),
    }
}

/// The service.
pub struct Scaler<E> {
    pub cache: Arc<Cache<E>>,
    pub metadata: Arc<MetadataCache>,
    pub metrics: Metrics,
    pub shutdown: CancellationToken,
    /// How often StreamIsActive repeats `true`.
    pub heartbeat: Duration,
}

/// `body`, a panic in it becoming [`RpcError::Panicked`]: tonic runs each rpc on a task of its
/// own that nothing here owns, where a panic would end the call with no status and no count.
async fn caught<T>(
    rpc: &'static str,
    body: impl Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    AssertUnwindSafe(body)
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| {
            let message = runtime::tasks::panicked(rpc, &*payload);
            Err(RpcError::Panicked { rpc, message })
        })
}

/// The deprecated int target: `max(1, ceil(target))`.
fn target_size(target: f64) -> i64 {
    target.ceil().max(1.0) as i64
}

/// The cache key of a request (or of a ScaledObject the warm start found): names checked,
/// metadata parsed (once per distinct content).
pub(crate) async fn key(
    parsed: &MetadataCache,
    scaled_object: Option<ScaledObjectRef>,
) -> Result<Key, RpcError> {
    let r = scaled_object.ok_or(RpcError::MissingRef)?;
    if r.name.is_empty() || r.namespace.is_empty() {
        return Err(RpcError::MissingRef);
    }
    // Names reach PromQL, the cache, metric labels and logs: only what Kubernetes accepts.
    if !names::is_dns_label(&r.namespace) {
        return Err(invalid_name(
            "namespace",
            &r.namespace,
            names::NAMESPACE_RULE,
        ));
    }
    if !names::is_dns_subdomain(&r.name) {
        return Err(invalid_name("name", &r.name, names::OBJECT_RULE));
    }
    let config = parsed
        .parse(&r.namespace, &r.name, &r.scaler_metadata)
        .await?;
    Ok(Key {
        namespace: r.namespace,
        name: r.name,
        config,
    })
}

fn invalid_name(field: &'static str, value: &str, rule: &'static str) -> RpcError {
    RpcError::InvalidName {
        field,
        value: names::echo(value),
        rule,
    }
}

impl<E: Evaluate> Scaler<E> {
    /// Runs one rpc body, recording its count and latency by code, also when the client gives
    /// up first (`headers` carry its deadline).
    async fn instrumented<T>(
        &self,
        rpc: &'static str,
        headers: &tonic::metadata::MetadataMap,
        body: impl Future<Output = Result<T, RpcError>>,
    ) -> Result<Response<T>, Status> {
        let counted = counted::Rpc::start(&self.metrics, rpc, headers);
        let result = caught(rpc, body).await.map_err(|error| {
            debug!(rpc, %error, "rpc failed");
            status(&error)
        });
        counted.finish(
            result
                .as_ref()
                .map_or_else(|s| s.code(), |_| tonic::Code::Ok),
        );
        result.map(Response::new)
    }

    async fn metric_value(
        &self,
        request: GetMetricsRequest,
    ) -> Result<GetMetricsResponse, RpcError> {
        let key = key(&self.metadata, request.scaled_object_ref).await?;
        let served = key.config.metric_name();
        if !request.metric_name.eq_ignore_ascii_case(&served) {
            return Err(RpcError::UnknownMetricName {
                requested: names::echo(&request.metric_name),
                served,
            });
        }
        let target = key.config.target;
        let evaluation = self.cache.get(key).await?;
        let desired = evaluation.decision.desired;
        // The HPA computes ceil(value / target) = desired for an AverageValue target. KEDA ≥ 2.17
        // uses the float pair; older KEDA only the int pair, so that one is desired × targetSize.
        // Bounded by metadata limits (1000 × 1e9), far inside i64.
        Ok(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: served,
                metric_value: i64::from(desired) * target_size(target),
                metric_value_float: f64::from(desired) * target,
            }],
        })
    }
}

#[tonic::async_trait]
impl<E: Evaluate> ExternalScaler for Scaler<E> {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let headers = request.metadata().clone();
        self.instrumented("IsActive", &headers, async {
            let key = key(&self.metadata, Some(request.into_inner())).await?;
            // Any successful evaluation saw at least one instance: the cluster exists.
            self.cache.get(key).await?;
            Ok(IsActiveResponse { result: true })
        })
        .await
    }

    type StreamIsActiveStream = BoxStream<'static, Result<IsActiveResponse, Status>>;

    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let headers = request.metadata().clone();
        let key = self
            .instrumented(
                "StreamIsActive",
                &headers,
                key(&self.metadata, Some(request.into_inner())),
            )
            .await?
            .into_inner();
        // The stream is its own state, polled by the connection that serves it: no task of its
        // own, so nothing outlives the client, and a panic is the connection's.
        let heartbeat = Heartbeat {
            cache: self.cache.clone(),
            key,
            tick: tokio::time::interval(self.heartbeat),
            shutdown: self.shutdown.clone(),
            _open: OpenStream::new(&self.metrics),
        };
        let stream = futures::stream::unfold(heartbeat, |mut beat| async move {
            loop {
                // The first tick is immediate: `true` on open.
                tokio::select! {
                    _ = beat.shutdown.cancelled() => return None,
                    _ = beat.tick.tick() => {}
                }
                match beat.cache.get(beat.key.clone()).await {
                    Ok(_) => return Some((Ok(IsActiveResponse { result: true }), beat)),
                    // KEDA ignores `false`; errors surface through the polled rpcs.
                    Err(error) => debug!(%error, "StreamIsActive: no answer this tick"),
                }
            }
            // Ending the stream ends it with status OK, which resets KEDA's backoff.
        });
        Ok(Response::new(stream.boxed()))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let headers = request.metadata().clone();
        self.instrumented("GetMetricSpec", &headers, async {
            let key = key(&self.metadata, Some(request.into_inner())).await?;
            let target = key.config.target;
            Ok(GetMetricSpecResponse {
                metric_specs: vec![MetricSpec {
                    metric_name: key.config.metric_name(),
                    target_size: target_size(target),
                    target_size_float: target,
                }],
            })
        })
        .await
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let headers = request.metadata().clone();
        self.instrumented(
            "GetMetrics",
            &headers,
            self.metric_value(request.into_inner()),
        )
        .await
    }

    type StreamMetricSpecStream = ReceiverStream<Result<GetMetricSpecResponse, Status>>;

    async fn stream_metric_spec(
        &self,
        _request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let start = Instant::now();
        self.metrics.rpc(
            "StreamMetricSpec",
            tonic::Code::Unimplemented,
            start.elapsed().as_secs_f64(),
        );
        // Specs never change for a given metadata; KEDA falls back to GetMetricSpec.
        Err(Status::unimplemented(
            "StreamMetricSpec: metric specs are static; use GetMetricSpec",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Kind, TopologyError};
    use scaler_core::evaluate::EvaluateError;
    use scaler_core::promql::QueryError;

    #[test]
    fn errors_map_to_the_documented_codes() {
        use tonic::Code;
        let cases: Vec<(RpcError, Code)> = vec![
            (RpcError::MissingRef, Code::InvalidArgument),
            (
                invalid_name("namespace", "x/..", names::NAMESPACE_RULE),
                Code::InvalidArgument,
            ),
            (
                MetadataError::Missing {
                    key: "target",
                    allowed: "x",
                }
                .into(),
                Code::InvalidArgument,
            ),
            (
                RpcError::UnknownMetricName {
                    requested: "a".into(),
                    served: "b".into(),
                },
                Code::InvalidArgument,
            ),
            (
                ObserveError::Query(QueryError::Timeout(Duration::from_secs(2))).into(),
                Code::DeadlineExceeded,
            ),
            (
                ObserveError::Query(QueryError::Unreachable("x".into())).into(),
                Code::Unavailable,
            ),
            (
                ObserveError::Query(QueryError::Garbage("x".into())).into(),
                Code::Unavailable,
            ),
            (
                ObserveError::Evaluate(EvaluateError::NoInstances {
                    namespace: "n".into(),
                    cluster: "c".into(),
                })
                .into(),
                Code::Unavailable,
            ),
            (
                ObserveError::Topology(TopologyError::NotFound {
                    kind: Kind::Cluster,
                    namespace: "n".into(),
                    name: "c".into(),
                })
                .into(),
                Code::NotFound,
            ),
            (
                ObserveError::Topology(TopologyError::NotSynced {
                    kind: Kind::Failover,
                    last_error: None,
                })
                .into(),
                Code::Unavailable,
            ),
            // Only a real 404 is NOT_FOUND: an API failure or an unreadable object says what.
            (
                ObserveError::Topology(TopologyError::Api {
                    kind: Kind::Cluster,
                    namespace: "n".into(),
                    name: "c".into(),
                    error: "forbidden".into(),
                })
                .into(),
                Code::Unavailable,
            ),
            (
                ObserveError::Topology(TopologyError::Unreadable {
                    kind: Kind::Cluster,
                    namespace: "n".into(),
                    name: "c".into(),
                    error: "spec.instances \"five\" is not a count".into(),
                })
                .into(),
                Code::Unavailable,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(status(&error).code(), code, "{error}");
            if let RpcError::Observe(e) = &error {
                // Else its per-ScaledObject error series would outlive the ScaledObject.
                assert!(crate::metrics::OBSERVE_CODES.contains(&e.code()), "{e}");
            }
        }
    }

    fn reference(namespace: &str, name: &str) -> ScaledObjectRef {
        ScaledObjectRef {
            name: name.into(),
            namespace: namespace.into(),
            scaler_metadata: [("target", "5"), ("maxReplicas", "4"), ("cluster", "pg")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }

    /// Issue 40: a panic in an rpc's body is answered INTERNAL, naming the rpc, and counted.
    #[tokio::test]
    async fn a_panicking_rpc_body_is_answered_internal_and_counted() {
        let before = runtime::tasks::panics().get();
        let answer = caught::<()>("GetMetrics", async { panic!("a bug in a handler") }).await;
        let status = status(&answer.unwrap_err());
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(
            status.message(),
            "the scaler failed internally answering GetMetrics: a bug in a handler"
        );
        assert!(runtime::tasks::panics().get() > before);
    }

    #[tokio::test]
    async fn names_must_be_kubernetes_names_and_are_echoed_bounded() {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let parsed = MetadataCache::new(100, metrics);
        let key = async |r| key(&parsed, Some(r)).await;
        assert!(key(reference("tenant-a", "pg.scaler")).await.is_ok());
        let huge = "a".repeat(3 << 20);
        for (namespace, name, field) in [
            ("tenant-x/../../../api/v1/secrets", "pg", "namespace"),
            ("tenant-x?labelSelector=a&watch=true", "pg", "namespace"),
            ("Tenant", "pg", "namespace"),
            (huge.as_str(), "pg", "namespace"),
            ("tenant-a", "pg\n level=ERROR forged", "name"),
            ("tenant-a", "a/b", "name"),
            ("tenant-a", huge.as_str(), "name"),
        ] {
            let error = key(reference(namespace, name)).await.unwrap_err();
            let status = status(&error);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{error}");
            let message = status.message();
            assert!(
                message.contains(&format!("scaledObjectRef.{field}")),
                "{message}"
            );
            assert!(message.len() < 400, "{} bytes", message.len());
            assert!(!message.contains('\n'), "{message}");
        }
    }
}
