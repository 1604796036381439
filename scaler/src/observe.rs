//! Asks the backends (Prometheus, the Cluster topology) for many ScaledObjects at once and hands
//! each one's answers to the pure [`scaler_core::evaluate`].
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use scaler_core::evaluate::{self, Evaluation, Inputs};
use scaler_core::promql::{self, Parts, QueryError, Shape, Target};
use tracing::warn;

use crate::backend;
use crate::cache::{Evaluate, Key, ObserveError};
use crate::metrics::Metrics;
use crate::topology::Topology;

/// Default `--observe-batch-size`.
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// Largest `--observe-batch-size`; [`promql::MAX_QUERY_BYTES`] splits long batches further.
pub const MAX_BATCH_SIZE: usize = 1000;

/// Reads Prometheus (in batched queries) and the Clusters, then decides for each key.
#[derive(Clone)]
pub struct Observer {
    pub prometheus: backend::Client,
    pub topology: Topology,
    pub metrics: Metrics,
    /// `--convergence-deadline`, unless the metadata sets one.
    pub convergence_deadline: Duration,
    /// `--observe-batch-size`: most clusters per query.
    pub batch_size: usize,
    /// Most of this evaluation's queries in flight at once (the client's own bound is shared
    /// with the cold keys' queries, which must not wait behind a large tick).
    pub concurrency: usize,
}

impl Evaluate for Observer {
    /// As many as fill every query slot of the tick once: more would not run sooner, only
    /// hold more answers in memory at once.
    fn keys_per_call(&self) -> usize {
        self.batch_size * self.concurrency.max(1)
    }

    fn keys_per_query(&self) -> usize {
        self.batch_size
    }

    async fn evaluate(&self, keys: &[Arc<Key>]) -> Vec<Result<Evaluation, ObserveError>> {
        // Keys that ask the same cluster the same way share a target; each shape is its own query.
        // A Pooler's key also asks for its Cluster's connection budget, a query of its own.
        let mut targets: HashMap<Shape, Vec<Target>> = HashMap::new();
        for key in keys {
            targets
                .entry(Shape::of(&key.config))
                .or_default()
                .push(target(key));
            if let Some((shape, target)) = Shape::budget_of(&key.config, &key.namespace) {
                targets.entry(shape).or_default().push(target);
            }
        }
        let batches: Vec<(Shape, promql::Batch)> = targets
            .into_iter()
            .flat_map(|(shape, targets)| {
                promql::batches(targets, shape, self.batch_size, promql::MAX_QUERY_BYTES)
                    .into_iter()
                    .map(move |batch| (shape, batch))
            })
            .collect();
        // Collected first: a lazy map here trips the compiler's Send check of this future.
        let queries: Vec<_> = batches
            .iter()
            .map(|(_, batch)| self.prometheus.answer(batch))
            .collect();
        let queries = futures::stream::iter(queries)
            .buffered(self.concurrency.max(1))
            .collect::<Vec<_>>();
        // A Pooler key's count is its instance series'; the topology answers `None` for it.
        let lookups = futures::future::join_all(keys.iter().map(|key| {
            self.topology.lookup(
                key.config.engine,
                &key.namespace,
                &key.config.cluster,
                &self.metrics,
            )
        }));
        let (answers, snapshots) = tokio::join!(queries, lookups);
        let answers: Vec<_> = batches
            .iter()
            .zip(answers)
            .map(|((_, batch), answer)| answer.map_err(|error| told(error, batch)))
            .collect();
        let answer_of: HashMap<(Shape, &Target), &Result<backend::Answer, QueryError>> = batches
            .iter()
            .zip(&answers)
            .flat_map(|((shape, batch), answer)| {
                batch.targets.iter().map(move |t| ((*shape, t), answer))
            })
            .collect();
        let inputs = Inputs {
            topology: self.topology.name(),
            default_deadline: self.convergence_deadline,
            now: SystemTime::now(),
            current: None,
        };
        let none = Parts::new();
        keys.iter()
            .zip(snapshots)
            .map(|(key, snapshot)| {
                let target = target(key);
                // A failed query is an error for each of its keys; a cluster absent from a good
                // answer has no parts, which the evaluation turns into "no instance series".
                let parts = match answer_of[&(Shape::of(&key.config), &target)] {
                    Ok(answer) => answer.get(&target).unwrap_or(&none),
                    Err(error) => return Err(error.clone().into()),
                };
                // A Pooler's parts and its Cluster's budget parts have distinct names: one map.
                let joined;
                let parts = match Shape::budget_of(&key.config, &key.namespace) {
                    Some((shape, cluster)) => {
                        let budget = match answer_of[&(shape, &cluster)] {
                            Ok(answer) => answer.get(&cluster).unwrap_or(&none),
                            Err(error) => return Err(error.clone().into()),
                        };
                        joined = parts
                            .iter()
                            .chain(budget)
                            .map(|(k, v)| (k.clone(), *v))
                            .collect::<Parts>();
                        &joined
                    }
                    None => parts,
                };
                Ok(evaluate::evaluate(
                    &key.namespace,
                    &key.config,
                    &inputs,
                    parts,
                    snapshot?.as_ref(),
                )?)
            })
            .collect()
    }
}

/// Said instead of the backend's own text when a query asked for several namespaces.
pub const WITHHELD: &str =
    "withheld: the query also asked for other namespaces; the scaler's log has the text";

/// What a failed query's keys are told. The backend's own text (an error body, a garbled
/// answer's detail, a `Location`) may quote the query, which names every cluster it asked for,
/// and each key's error reaches its tenant (the HPA's conditions and events, `/decisions`): so
/// when the query spans namespaces, they get the HTTP status and the kind of failure only, and
/// the whole error goes to the scaler's own log, once per query.
fn told(error: QueryError, batch: &promql::Batch) -> QueryError {
    let mut namespaces = batch.targets.iter().map(|t| &t.namespace);
    let first = namespaces.next();
    if namespaces.all(|ns| Some(ns) == first) {
        return error;
    }
    let withheld = match &error {
        QueryError::Status { status, .. } => QueryError::Status {
            status: *status,
            body: WITHHELD.into(),
        },
        QueryError::Redirect { status, .. } => QueryError::Redirect {
            status: *status,
            location: WITHHELD.into(),
        },
        QueryError::Garbage(_) => QueryError::Garbage(WITHHELD.into()),
        // Ours (a duration, a limit) or the client's about the configured URL: no backend text.
        QueryError::Timeout(_) | QueryError::TooLarge { .. } | QueryError::Unreachable(_) => {
            return error;
        }
    };
    warn!(clusters = batch.targets.len(), %error, "a batched query failed; its keys are told without the backend's text");
    withheld
}

fn target(key: &Key) -> Target {
    Target {
        namespace: key.namespace.clone(),
        cluster: key.config.cluster.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use scaler_core::evaluate::EvaluateError;

    use super::*;

    /// A backend that answers every query with `body` and `status`, counting queries.
    async fn backend(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
        let queries = Arc::new(AtomicUsize::new(0));
        let counter = queries.clone();
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { (axum::http::StatusCode::from_u16(status).unwrap(), body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, queries)
    }

    fn observer(url: &str, batch_size: usize) -> Observer {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        Observer {
            prometheus: backend::Client::new(
                url,
                Duration::from_secs(2),
                4,
                1 << 20,
                metrics.clone(),
            )
            .unwrap(),
            topology: Topology::Metrics,
            metrics,
            convergence_deadline: Duration::from_secs(600),
            batch_size,
            concurrency: 2,
        }
    }

    fn key(namespace: &str, cluster: &str) -> Arc<Key> {
        let md = [("target", "10"), ("maxReplicas", "9"), ("cluster", cluster)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Arc::new(Key {
            namespace: namespace.into(),
            name: format!("so-{cluster}"),
            config: scaler_core::metadata::parse(cluster, &md).unwrap().into(),
        })
    }

    const ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"namespace":"a","cluster":"pg","part":"instances"},"value":[1,"3"]},
        {"metric":{"namespace":"a","cluster":"pg","part":"load"},"value":[1,"45"]},
        {"metric":{"namespace":"b","cluster":"other","part":"instances"},"value":[1,"2"]}]}}"#;

    #[tokio::test]
    async fn each_key_gets_its_own_clusters_answer_from_a_shared_query() {
        let (url, queries) = backend(200, ANSWER).await;
        let keys = [
            key("a", "pg"),
            key("b", "pg"),
            key("b", "other"),
            key("a", "pg"),
        ];
        let results = observer(&url, 100).evaluate(&keys).await;
        assert_eq!(queries.load(Ordering::SeqCst), 1);
        let desired = |i: usize| results[i].as_ref().map(|e| e.decision.desired);
        assert_eq!(desired(0), Ok(6));
        // b/pg is absent from the answer (a/pg is not b's): no instance series, never zero.
        assert!(matches!(
            results[1],
            Err(ObserveError::Evaluate(EvaluateError::NoInstances { .. }))
        ));
        assert_eq!(desired(2), Ok(2));
        assert_eq!(desired(3), Ok(6));
        // Batches of one: one query per distinct cluster.
        observer(&url, 1).evaluate(&keys).await;
        assert_eq!(queries.load(Ordering::SeqCst), 1 + 3);
    }

    /// A backend that refuses every query with `status`, quoting it back as VictoriaMetrics does.
    async fn echoing_backend(status: u16) -> String {
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(
                move |axum::Form(form): axum::Form<HashMap<String, String>>| async move {
                    let error = format!("error when executing query={:?}", form["query"]);
                    let body = serde_json::json!({"status": "error", "error": error}).to_string();
                    (axum::http::StatusCode::from_u16(status).unwrap(), body)
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn a_query_over_several_namespaces_tells_each_key_none_of_the_backends_text() {
        for status in [422, 200] {
            let url = echoing_backend(status).await;
            let keys = [key("tenant-red", "pg-red"), key("tenant-blue", "pg-blue")];
            for (key, result) in keys.iter().zip(observer(&url, 100).evaluate(&keys).await) {
                let told = result.unwrap_err().to_string();
                assert!(told.contains(WITHHELD), "{told}");
                for name in ["tenant-red", "tenant-blue", "pg-red", "pg-blue", "query="] {
                    assert!(!told.contains(name), "{} told {told}", key.namespace);
                }
            }
            // One namespace's own query: its text is the tenant's own, and kept.
            let keys = [key("tenant-red", "pg-red"), key("tenant-red", "pg-other")];
            for result in observer(&url, 100).evaluate(&keys).await {
                let told = result.unwrap_err().to_string();
                assert!(told.contains("query="), "{told}");
            }
        }
    }

    #[tokio::test]
    async fn a_failed_query_is_an_error_for_each_of_its_keys() {
        let (url, _) = backend(503, "overloaded").await;
        let keys = [key("a", "pg"), key("b", "other")];
        for result in observer(&url, 100).evaluate(&keys).await {
            assert!(
                matches!(
                    result,
                    Err(ObserveError::Query(QueryError::Status { status: 503, .. }))
                ),
                "{result:?}"
            );
        }
    }
}
