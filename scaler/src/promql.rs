//! The one PromQL query behind a decision, and the HTTP client that runs it.
//!
//! Every decision costs exactly one instant query: labelled parts joined with `or` (instances and
//! load; replica lag and primary WAL rate only when the lag brake is on), each
//! scoped to the request's namespace and to the cluster's own instance pods
//! (`pod=~"<cluster>-[1-9][0-9]*"`, so `pg` never matches `pg-archive-1`). Replicas are the pods
//! whose `cnpg_pg_replication_in_recovery` is 1, the primary the one where it is 0.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::metadata::Metric;
use crate::metrics::Metrics;

/// Users whose sessions are the platform's own, not client load.
pub const INTERNAL_USERS: &str = "cnpg_metrics_exporter|postgres|streaming_replica";
/// Window for the lag maximum and the WAL rate: the brake's hysteresis.
pub const WINDOW: &str = "5m";

/// Names of the labelled parts of [`decision_query`].
pub mod part {
    pub const INSTANCES: &str = "instances";
    pub const LOAD: &str = "load";
    /// ReadCPUUtilization only: replica pods, and replica pods that have a CPU series.
    pub const REPLICAS: &str = "replicas";
    pub const LOAD_PODS: &str = "load_pods";
    pub const LAG: &str = "lag";
    pub const WAL: &str = "wal";
}

/// Builds the decision query for `cluster` in `namespace`; `brake` adds the lag and WAL parts.
///
/// Series are reduced per pod (or per session identity) with `max by` before summing, so a pod
/// scraped twice (two jobs, HA Prometheus pairs) does not count twice.
pub fn decision_query(namespace: &str, cluster: &str, metric: Metric, brake: bool) -> String {
    let pods = format!("{}-[1-9][0-9]*", regex_escape(cluster));
    let sel = format!(
        "namespace=\"{}\",pod=~\"{}\"",
        string_escape(namespace),
        string_escape(&pods)
    );
    let replicas = format!("(cnpg_pg_replication_in_recovery{{{sel}}} == 1)");
    let primary = format!("(cnpg_pg_replication_in_recovery{{{sel}}} == 0)");
    let mut parts = vec![(
        part::INSTANCES,
        format!("count(count by (pod) (cnpg_pg_replication_in_recovery{{{sel}}}))"),
    )];
    match metric {
        Metric::ReadConnections => parts.push((
            part::LOAD,
            format!(
                "sum(max by (namespace,pod,datname,usename,application_name,state) \
                 (cnpg_backends_total{{{sel},state=\"active\",usename!~\"{INTERNAL_USERS}\"}}) \
                 and on(namespace,pod) {replicas})"
            ),
        )),
        Metric::ReadCpuUtilization => {
            // cAdvisor always exports a running container's counter, so replicas without it
            // mean a scrape gap (an error), unlike CNPG's omitted zero rows.
            let cpu = format!(
                "max by (namespace,pod) (rate(container_cpu_usage_seconds_total{{{sel},container=\"postgres\"}}[{WINDOW}]))"
            );
            parts.extend([
                (
                    part::LOAD,
                    format!("sum({cpu} and on(namespace,pod) {replicas}) * 1000"),
                ),
                (part::REPLICAS, format!("count(count by (pod) {replicas})")),
                (
                    part::LOAD_PODS,
                    format!("count({cpu} and on(namespace,pod) {replicas})"),
                ),
            ]);
        }
    }
    if brake {
        parts.extend([
            (
                part::LAG,
                format!(
                    "max(max_over_time(cnpg_pg_replication_lag{{{sel}}}[{WINDOW}]) and on(namespace,pod) {replicas})"
                ),
            ),
            (
                part::WAL,
                format!(
                    "max(rate(cnpg_collector_wal_bytes{{{sel}}}[{WINDOW}]) and on(namespace,pod) {primary})"
                ),
            ),
        ]);
    }
    let mut query = String::new();
    for (i, (name, expr)) in parts.into_iter().enumerate() {
        if i > 0 {
            query.push_str("\nor ");
        }
        let _ = write!(
            query,
            "label_replace({expr}, \"part\", \"{name}\", \"\", \"\")"
        );
    }
    query
}

/// Escapes RE2 metacharacters so a name matches literally.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Escapes a value for a double-quoted PromQL string literal.
pub fn string_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error("Prometheus query timed out after {0:?}")]
    Timeout(Duration),
    #[error("Prometheus is unreachable: {0}")]
    Unreachable(String),
    #[error("Prometheus answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Prometheus returned an unusable answer: {0}")]
    Garbage(String),
}

/// A Prometheus HTTP API client; one per process (it pools connections).
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    query_url: String,
    timeout: Duration,
    /// Bounds concurrent queries so a slow backend is not buried under retries.
    in_flight: Arc<Semaphore>,
    metrics: Metrics,
}

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: Vec<VectorSample>,
}

#[derive(Deserialize)]
struct VectorSample {
    metric: HashMap<String, String>,
    value: (f64, String),
}

impl Client {
    /// `base` is the Prometheus API root: `http://vm:8428` or `http://vmselect:8481/select/0/prometheus`.
    /// At most `max_in_flight` queries run at once; waiting for a slot counts toward `timeout`.
    pub fn new(
        base: &str,
        timeout: Duration,
        max_in_flight: usize,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            max_in_flight > 0,
            "--max-concurrent-queries must be above 0"
        );
        let parsed = reqwest::Url::parse(base)
            .map_err(|e| anyhow::anyhow!("invalid --prometheus-url {base:?}: {e}"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "http" | "https"),
            "invalid --prometheus-url {base:?}: use an http:// or https:// URL"
        );
        // reqwest is built without a provider (kube brings ring); make sure one is installed
        // even when the library is used without `main` (tests), or building the client panics.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            http,
            query_url: format!("{}/api/v1/query", base.trim_end_matches('/')),
            timeout,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            metrics,
        })
    }

    /// Runs one instant query and returns the value of each `part` label, bounded by the timeout.
    pub async fn parts(&self, query: &str) -> Result<HashMap<String, f64>, QueryError> {
        let start = Instant::now();
        let bounded = async {
            let _slot = self
                .in_flight
                .acquire()
                .await
                .map_err(|_| QueryError::Unreachable("client closed".into()))?;
            self.fetch(query).await
        };
        let result = tokio::time::timeout(self.timeout, bounded)
            .await
            .unwrap_or(Err(QueryError::Timeout(self.timeout)));
        let outcome = match &result {
            Ok(_) => "ok",
            Err(QueryError::Timeout(_)) => "timeout",
            Err(_) => "error",
        };
        self.metrics
            .backend("decision", outcome, start.elapsed().as_secs_f64());
        result
    }

    async fn fetch(&self, query: &str) -> Result<HashMap<String, f64>, QueryError> {
        let response = self
            .http
            .get(&self.query_url)
            .query(&[("query", query)])
            .send()
            .await
            .map_err(|e| QueryError::Unreachable(error_chain(&e)))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| QueryError::Unreachable(error_chain(&e)))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            return Err(QueryError::Status {
                status: status.as_u16(),
                body: text,
            });
        }
        parse_parts(&body)
    }
}

/// Parses a `/api/v1/query` answer into `part` → value; anything unexpected is an error.
pub fn parse_parts(body: &[u8]) -> Result<HashMap<String, f64>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let response: Response = serde_json::from_slice(body)
        .map_err(|e| garbage(format!("not a Prometheus API answer: {e}")))?;
    if response.status != "success" {
        return Err(garbage(format!(
            "status {:?}: {}",
            response.status,
            response.error.unwrap_or_default()
        )));
    }
    let data = response.data.ok_or_else(|| garbage("no data".into()))?;
    if data.result_type != "vector" {
        return Err(garbage(format!(
            "result type {:?}, want vector",
            data.result_type
        )));
    }
    let mut parts = HashMap::with_capacity(data.result.len());
    for sample in data.result {
        let name = sample
            .metric
            .get("part")
            .ok_or_else(|| garbage("a sample without a part label".into()))?;
        let value: f64 = sample.value.1.parse().map_err(|_| {
            garbage(format!(
                "{name}: value {:?} is not a number",
                sample.value.1
            ))
        })?;
        if !value.is_finite() || value < 0.0 {
            return Err(garbage(format!(
                "{name}: value {value} is not a finite number >= 0"
            )));
        }
        if parts.insert(name.clone(), value).is_some() {
            return Err(garbage(format!("{name}: more than one sample")));
        }
    }
    Ok(parts)
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_scopes_every_selector_to_namespace_and_cluster_pods() {
        let q = decision_query("tenant-a", "pg", Metric::ReadConnections, true);
        let selectors = q.matches('{').count();
        let scoped = q
            .matches(r#"{namespace="tenant-a",pod=~"pg-[1-9][0-9]*""#)
            .count();
        assert_eq!(selectors, scoped, "{q}");
        assert_eq!(q.matches("label_replace(").count(), 4);
        assert!(q.contains("max by (namespace,pod,datname,usename,application_name,state)"));
        assert!(q.contains(r#"usename!~"cnpg_metrics_exporter|postgres|streaming_replica""#));
        assert!(q.contains(r#"state="active""#));
        assert!(!q.contains("container_cpu"));
        assert!(
            q.contains("max_over_time(cnpg_pg_replication_lag")
                && q.contains("rate(cnpg_collector_wal_bytes")
        );
    }

    #[test]
    fn lag_and_wal_are_only_queried_for_the_brake() {
        let q = decision_query("ns", "pg", Metric::ReadConnections, false);
        assert_eq!(q.matches("label_replace(").count(), 2);
        assert!(!q.contains("cnpg_pg_replication_lag") && !q.contains("wal_bytes"));
    }

    #[test]
    fn cpu_query_reads_the_postgres_container_in_millicores() {
        let q = decision_query("ns", "db", Metric::ReadCpuUtilization, false);
        assert!(q.contains(r#"container_cpu_usage_seconds_total{namespace="ns",pod=~"db-[1-9][0-9]*",container="postgres"}[5m]"#));
        assert!(q.contains("* 1000"));
        assert!(q.contains(r#"label_replace(count(count by (pod) (cnpg_pg_replication_in_recovery{namespace="ns",pod=~"db-[1-9][0-9]*"} == 1)), "part", "replicas""#), "{q}");
        assert!(q.contains(r#""part", "load_pods""#));
        assert!(!q.contains("cnpg_backends_total"));
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(regex_escape("a.b+c"), r"a\.b\+c");
        let q = decision_query("we\"ird", "a.b", Metric::ReadConnections, true);
        assert!(
            q.contains(r#"namespace="we\"ird",pod=~"a\\.b-[1-9][0-9]*""#),
            "{q}"
        );
    }

    #[test]
    fn parses_labelled_parts() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"part":"instances"},"value":[1,"3"]},
            {"metric":{"part":"load"},"value":[1,"42.5"]}]}}"#;
        let parts = parse_parts(body).unwrap();
        assert_eq!(parts.get("instances"), Some(&3.0));
        assert_eq!(parts.get("load"), Some(&42.5));
    }

    /// A local HTTP server answering every query after `delay`, recording peak concurrency.
    async fn slow_backend(delay: Duration) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, p) = (now.clone(), peak.clone());
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::get(move || {
                let (n, p) = (n.clone(), p.clone());
                async move {
                    p.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"instances"},"value":[1,"2"]}]}}"#
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, peak)
    }

    fn client(url: &str, timeout_ms: u64, max_in_flight: usize) -> Client {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        Client::new(
            url,
            Duration::from_millis(timeout_ms),
            max_in_flight,
            metrics,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn bounds_concurrent_queries_and_times_out_waiting() {
        let (url, peak) = slow_backend(Duration::from_millis(100)).await;
        let c = client(&url, 2_000, 2);
        let answers = futures::future::join_all((0..6).map(|_| c.parts("q"))).await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|p| p["instances"] == 2.0))
        );
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Waiting for a slot counts toward the timeout: the third query cannot finish in 150 ms.
        let c = client(&url, 150, 1);
        let answers = futures::future::join_all((0..3).map(|_| c.parts("q"))).await;
        assert!(answers[0].is_ok());
        assert!(
            answers
                .iter()
                .any(|a| matches!(a, Err(QueryError::Timeout(_))))
        );
    }

    #[test]
    fn rejects_garbage() {
        for body in [
            &b"<html>"[..],
            br#"{"status":"error","error":"bad query"}"#,
            br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"NaN"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"-1"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"1"]},{"metric":{"part":"load"},"value":[1,"2"]}]}}"#,
        ] {
            assert!(matches!(parse_parts(body), Err(QueryError::Garbage(_))), "{}", String::from_utf8_lossy(body));
        }
    }
}
