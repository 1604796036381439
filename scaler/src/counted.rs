//! Counts every rpc and every backend query however it ends. A future that is dropped before it
//! finishes records nothing after its `.await`, and that is how a call ends when the other side
//! gives up first: tonic drops an rpc's handler when the client's deadline passes or the client
//! resets the stream (KEDA's 3 s HPA deadline). So the count is a guard recorded on drop.
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

/// A client's RST_STREAM at its deadline reaches the handler before the deadline the server
/// computes from `grpc-timeout`: the client started counting first, and the handler starts after
/// the request waited for a worker (tens of ms on a loaded machine, measured by
/// tests/scaler/test_counting.py). So an rpc dropped with less than a fifth of its deadline
/// left, or 50 ms, counts as DeadlineExceeded: mistaking a late cancel for a deadline hides
/// nothing, the reverse would hide deadlines.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);
const DEADLINE_SLACK_DIVISOR: u32 = 5;

/// One backend query; counted on drop with its outcome, `cancelled` when none was set.
pub struct BackendQuery {
    metrics: Metrics,
    query: &'static str,
    start: Instant,
    outcome: &'static str,
}

impl BackendQuery {
    pub fn start(metrics: &Metrics, query: &'static str) -> Self {
        Self {
            metrics: metrics.clone(),
            query,
            start: Instant::now(),
            outcome: "cancelled",
        }
    }

    /// `ok`, `error` or `timeout`.
    pub fn outcome(&mut self, outcome: &'static str) {
        self.outcome = outcome;
    }
}

impl Drop for BackendQuery {
    fn drop(&mut self) {
        let seconds = self.start.elapsed().as_secs_f64();
        self.metrics.backend(self.query, self.outcome, seconds);
    }
}

/// One rpc; counted on drop with its status code. Dropped without one, the client gave up:
/// `DeadlineExceeded` when its deadline (`grpc-timeout`) has passed, else `Cancelled`.
pub struct Rpc {
    metrics: Metrics,
    rpc: &'static str,
    start: Instant,
    deadline: Option<Duration>,
    code: Option<tonic::Code>,
}

impl Rpc {
    pub fn start(
        metrics: &Metrics,
        rpc: &'static str,
        headers: &tonic::metadata::MetadataMap,
    ) -> Self {
        Self {
            metrics: metrics.clone(),
            rpc,
            start: Instant::now(),
            deadline: headers
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(grpc_timeout),
            code: None,
        }
    }

    pub fn finish(mut self, code: tonic::Code) {
        self.code = Some(code);
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed();
        let code = self.code.unwrap_or(match self.deadline {
            Some(deadline)
                if elapsed + DEADLINE_SLACK.max(deadline / DEADLINE_SLACK_DIVISOR) >= deadline =>
            {
                tonic::Code::DeadlineExceeded
            }
            _ => tonic::Code::Cancelled,
        });
        self.metrics.rpc(self.rpc, code, elapsed.as_secs_f64());
    }
}

/// The gRPC `grpc-timeout` header: at most 8 digits and a unit (H, M, S, m, u, n).
fn grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_protocol_spells_them() {
        assert_eq!(grpc_timeout("2999m"), Some(Duration::from_millis(2999)));
        assert_eq!(grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(grpc_timeout("5H"), Some(Duration::from_secs(18_000)));
        assert_eq!(grpc_timeout("100u"), Some(Duration::from_micros(100)));
        for bad in ["", "m", "123456789m", "12x", "-1S", "1.5S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
    }

    fn counted(registry: &prometheus_client::registry::Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with("scaler_grpc_requests_total{")
                    || l.starts_with("scaler_backend_queries_total{")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn dropped_calls_are_counted_with_who_gave_up() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let mut headers = tonic::metadata::MetadataMap::new();
        headers.insert("grpc-timeout", "20m".parse().unwrap());
        let work = async {
            let _query = BackendQuery::start(&metrics, "decision");
            let rpc = Rpc::start(&metrics, "GetMetrics", &headers);
            tokio::time::sleep(Duration::from_secs(5)).await;
            rpc.finish(tonic::Code::Ok);
        };
        // The client's deadline (20 ms) drops the future, as tonic does.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), work)
                .await
                .is_err()
        );
        // Dropped early, without a deadline: cancelled.
        drop(Rpc::start(
            &metrics,
            "IsActive",
            &tonic::metadata::MetadataMap::new(),
        ));
        Rpc::start(&metrics, "GetMetricSpec", &headers).finish(tonic::Code::Ok);
        let text = counted(&registry);
        for line in [
            r#"scaler_grpc_requests_total{rpc="GetMetrics",code="DeadlineExceeded"} 1"#,
            r#"scaler_grpc_requests_total{rpc="IsActive",code="Canceled"} 1"#,
            r#"scaler_grpc_requests_total{rpc="GetMetricSpec",code="OK"} 1"#,
            r#"scaler_backend_queries_total{query="decision",outcome="cancelled"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
