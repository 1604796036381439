//! The HTTP client that runs decision queries against a Prometheus-compatible API: bounded in
//! time (the timeout covers the wait for a slot, the body and the parse), in size (answers are read
//! while streaming and abandoned past the cap) and in concurrency. Queries are sent as POST form
//! bodies, so a batch's long query meets no URL limit. The query itself and the parsing of the
//! answer are pure and live in [`scaler_core::promql`].
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::counted::BackendQuery;
use crate::metrics::Metrics;
use scaler_core::promql::{Batch, Parts, QueryError, Target, parse_answer, parse_matrix};

/// What one query answered: each cluster's parts.
pub type Answer = HashMap<Target, Parts>;

/// Default `--max-response-bytes`: a cluster's answer is about a hundred bytes per part.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;
/// How much of an error answer's body goes into the error message.
const ERROR_BODY_PREFIX: usize = 300;
/// A Prometheus HTTP API client; one per process (it pools connections).
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    query_url: String,
    range_url: String,
    timeout: Duration,
    /// Bounds concurrent queries so a slow backend is not buried under retries.
    in_flight: Arc<Semaphore>,
    /// Answers are read while streaming and abandoned past this size.
    max_response_bytes: usize,
    metrics: Metrics,
}

impl Client {
    /// `base` is the Prometheus API root: `http://vm:8428` or `http://vmselect:8481/select/0/prometheus`.
    /// At most `max_in_flight` queries run at once; waiting for a slot counts toward `timeout`.
    /// An answer larger than `max_response_bytes` is an error.
    pub fn new(
        base: &str,
        timeout: Duration,
        max_in_flight: usize,
        max_response_bytes: usize,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            max_in_flight > 0,
            "--max-concurrent-queries must be above 0"
        );
        anyhow::ensure!(
            max_response_bytes > 0,
            "--max-response-bytes must be above 0"
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
            // A redirect would put another server's answer in place of the cluster's load.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            http,
            query_url: format!("{}/api/v1/query", base.trim_end_matches('/')),
            range_url: format!("{}/api/v1/query_range", base.trim_end_matches('/')),
            timeout,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_response_bytes,
            metrics,
        })
    }

    /// Runs one batch's instant query and returns each cluster's parts, bounded by the timeout.
    pub async fn answer(&self, batch: &Batch) -> Result<Answer, QueryError> {
        self.metrics.batch_clusters(batch.targets.len());
        self.query(&batch.query).await
    }

    async fn query(&self, query: &str) -> Result<Answer, QueryError> {
        let params = [("query", query.to_owned())];
        self.bounded(
            "decision",
            self.fetch(&self.query_url, &params, parse_answer),
        )
        .await
    }

    /// Runs one range query (`/api/v1/query_range`, Unix seconds) and returns, per evaluation
    /// time, the value of each `part` label; bounded like [`Client::answer`].
    /// Series of another namespace or cluster than `target` make the answer an error.
    pub async fn range_parts(
        &self,
        query: &str,
        target: &Target,
        start: i64,
        end: i64,
        step_seconds: u64,
    ) -> Result<BTreeMap<i64, HashMap<String, f64>>, QueryError> {
        let params = [
            ("query", query.to_owned()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", format!("{step_seconds}s")),
        ];
        let target = target.clone();
        let parse = move |body: &[u8]| parse_matrix(body, &target, start..=end);
        self.bounded("range", self.fetch(&self.range_url, &params, parse))
            .await
    }

    /// Waits for a slot and runs `fetch`, all within the timeout, and counts the outcome (also
    /// when the caller drops this future first: `cancelled`).
    async fn bounded<T>(
        &self,
        name: &'static str,
        fetch: impl Future<Output = Result<T, QueryError>>,
    ) -> Result<T, QueryError> {
        let mut counted = BackendQuery::start(&self.metrics, name);
        let bounded = async {
            let _slot = self
                .in_flight
                .acquire()
                .await
                .map_err(|_| QueryError::Unreachable("client closed".into()))?;
            fetch.await
        };
        let result = tokio::time::timeout(self.timeout, bounded)
            .await
            .unwrap_or(Err(QueryError::Timeout(self.timeout)));
        counted.outcome(match &result {
            Ok(_) => "ok",
            Err(QueryError::Timeout(_)) => "timeout",
            Err(_) => "error",
        });
        result
    }

    /// Sends the query, reads the answer while streaming (never past the cap) and parses it on
    /// the blocking pool, so a big answer never holds up an async worker and other rpcs.
    async fn fetch<T: Send + 'static>(
        &self,
        url: &str,
        params: &[(&str, String)],
        parse: impl FnOnce(&[u8]) -> Result<T, QueryError> + Send + 'static,
    ) -> Result<T, QueryError> {
        let unreachable = |e: reqwest::Error| QueryError::Unreachable(error_chain(&e));
        let mut response = self
            .http
            .post(url)
            .form(params)
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map_or("(no Location header)".into(), |l| {
                    names::echo(&String::from_utf8_lossy(l.as_bytes()))
                });
            return Err(QueryError::Redirect {
                status: status.as_u16(),
                location,
            });
        }
        if !status.is_success() {
            let (head, _) = read_at_most(&mut response, ERROR_BODY_PREFIX)
                .await
                .unwrap_or_default();
            return Err(QueryError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&head).escape_debug().to_string(),
            });
        }
        let limit = self.max_response_bytes;
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(QueryError::TooLarge { limit });
        }
        let (body, complete) = read_at_most(&mut response, limit)
            .await
            .map_err(unreachable)?;
        if !complete {
            return Err(QueryError::TooLarge { limit });
        }
        tokio::task::spawn_blocking(move || parse(&body))
            .await
            .unwrap_or_else(|e| Err(QueryError::Garbage(format!("parser failed: {e}"))))
    }
}

/// Reads at most `limit` bytes of the body; `false` when more were coming (the rest is dropped
/// with the connection).
async fn read_at_most(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    // Sized once when the length is announced (it is within the limit, checked above): growing
    // by doubling would copy the body several times over.
    let announced = response
        .content_length()
        .map_or(0, |n| n.min(limit as u64) as usize);
    let mut body = Vec::with_capacity(announced);
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            body.extend_from_slice(&chunk[..limit - body.len()]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
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
    use std::sync::Arc;

    use super::*;

    async fn slow_backend(delay: Duration) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, p) = (now.clone(), peak.clone());
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(move || {
                let (n, p) = (n.clone(), p.clone());
                async move {
                    p.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"instances"},"value":[1,"2"]}]}}"#
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, peak)
    }

    fn pg() -> Target {
        Target {
            namespace: "ns".into(),
            cluster: "pg".into(),
        }
    }

    fn client(url: &str, timeout_ms: u64, max_in_flight: usize) -> Client {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        Client::new(
            url,
            Duration::from_millis(timeout_ms),
            max_in_flight,
            DEFAULT_MAX_RESPONSE_BYTES,
            metrics,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn bounds_concurrent_queries_and_times_out_waiting() {
        let (url, peak) = slow_backend(Duration::from_millis(100)).await;
        let c = client(&url, 2_000, 2);
        let answers = futures::future::join_all((0..6).map(|_| c.query("q"))).await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|p| p[&pg()]["instances"] == 2.0))
        );
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Waiting for a slot counts toward the timeout: one slot, 100 ms a query, so the eleventh
        // cannot finish within 1 s, while the first has ten times its need (a loaded machine).
        let c = client(&url, 1_000, 1);
        let answers = futures::future::join_all((0..11).map(|_| c.query("q"))).await;
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
        assert!(
            matches!(answers[10], Err(QueryError::Timeout(_))),
            "{:?}",
            answers[10]
        );
    }

    /// A local HTTP server answering every query with `body`, chunked (no Content-Length).
    async fn streaming_backend(body: Vec<u8>) -> String {
        let body = axum::body::Bytes::from(body);
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(move || {
                let body = body.clone();
                async move {
                    let chunks = body
                        .chunks(64 * 1024)
                        .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::copy_from_slice(c)))
                        .collect::<Vec<_>>();
                    axum::body::Body::from_stream(futures::stream::iter(chunks))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn redirects_are_errors_naming_the_status_and_location_never_followed() {
        // The redirect's target answers like a healthy Prometheus: following it would serve
        // another server's numbers as this cluster's load.
        let (elsewhere, asked) = slow_backend(Duration::ZERO).await;
        let location = format!("{elsewhere}/api/v1/query");
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(move || {
                let location = location.clone();
                async move {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, location)],
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let error = client(&url, 2_000, 1).query("q").await.unwrap_err();
        assert!(
            matches!(&error, QueryError::Redirect { status: 307, location } if location.contains(&elsewhere)),
            "{error:?}"
        );
        assert!(error.to_string().contains("HTTP 307"), "{error}");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn answers_past_the_size_cap_are_abandoned_while_streaming() {
        let mut body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"instances","pad":""#.to_vec();
        body.extend(std::iter::repeat_n(b'x', 3 << 20));
        body.extend(br#""},"value":[1,"2"]}]}}"#);
        let url = streaming_backend(body.clone()).await;
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let small = Client::new(&url, Duration::from_secs(2), 1, 1 << 20, metrics.clone()).unwrap();
        let error = small.query("q").await.unwrap_err();
        assert_eq!(error, QueryError::TooLarge { limit: 1 << 20 });
        assert!(
            error
                .to_string()
                .contains("--max-response-bytes (1048576 bytes)"),
            "{error}"
        );
        let big = Client::new(&url, Duration::from_secs(2), 1, 4 << 20, metrics).unwrap();
        assert_eq!(big.query("q").await.unwrap()[&pg()]["instances"], 2.0);
    }
}
