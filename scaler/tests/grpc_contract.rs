//! The KEDA external-scaler contract from Rust, in one process: the real server (`serve::Args`,
//! every default but the flags below, on loopback ports) against a fake Prometheus API (axum,
//! canned answers), called through the tonic client generated from the same proto. The Python
//! suite (tests/scaler) checks the same contract from KEDA's side against real VictoriaMetrics;
//! this one runs in `cargo test` and can make the backend fail on cue.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use scaler::proto::external_scaler_client::ExternalScalerClient;
use scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use scaler::serve::Args;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

/// What the fake Prometheus API answers next.
#[derive(Clone, Copy)]
enum Backend {
    /// `tenant-a/pg`: three instances, two replicas with 25 active sessions.
    Healthy,
    /// An HTTP error with a body, as a refusing backend sends.
    Fails,
    /// Answers after 2 s, past the server's --query-timeout.
    Slow,
}

const HEALTHY: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
{"metric":{"namespace":"tenant-a","cluster":"pg","part":"instances"},"value":[1,"3"]},
{"metric":{"namespace":"tenant-a","cluster":"pg","part":"replicas"},"value":[1,"2"]},
{"metric":{"namespace":"tenant-a","cluster":"pg","part":"connection_pods"},"value":[1,"2"]},
{"metric":{"namespace":"tenant-a","cluster":"pg","part":"load"},"value":[1,"25"]}]}}"#;

/// The target and bounds every ScaledObject here has: 25 sessions at 10 a replica need
/// 1 + ceil(2.5) = 4 instances, so GetMetrics answers 4 × 10.
const TARGET: f64 = 10.0;
const DESIRED: f64 = 4.0;

struct Server {
    client: ExternalScalerClient<Channel>,
    backend: Arc<Mutex<Backend>>,
    shutdown: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn fake_prometheus(backend: Arc<Mutex<Backend>>) -> String {
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::post(move || {
            let mode = *backend.lock().unwrap();
            async move {
                match mode {
                    Backend::Healthy => (http::StatusCode::OK, HEALTHY),
                    Backend::Fails => (
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "vmselect: too many concurrent requests",
                    ),
                    Backend::Slow => {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        (http::StatusCode::OK, HEALTHY)
                    }
                }
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// `scaler serve` with its metrics topology (no Kubernetes), a short refresh and query timeout.
async fn serve(mode: Backend) -> Server {
    let backend = Arc::new(Mutex::new(mode));
    let url = fake_prometheus(backend.clone()).await;
    let cli = Cli::try_parse_from([
        "scaler",
        "--prometheus-url",
        &url,
        "--topology",
        "metrics",
        "--refresh-interval",
        "200ms",
        "--query-timeout",
        "500ms",
        "--events",
        "false",
    ])
    .unwrap();
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", grpc.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(cli.args.serve(grpc, admin, shutdown.clone()));
    let client = ExternalScalerClient::connect(address).await.unwrap();
    Server {
        client,
        backend,
        shutdown,
    }
}

fn scaled_object(cluster: &str, metadata: &[(&str, &str)]) -> ScaledObjectRef {
    let mut scaler_metadata: std::collections::HashMap<String, String> =
        [("cluster", cluster), ("target", "10"), ("maxReplicas", "6")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    for (k, v) in metadata {
        scaler_metadata.insert((*k).to_owned(), (*v).to_owned());
    }
    ScaledObjectRef {
        name: cluster.to_owned(),
        namespace: "tenant-a".to_owned(),
        scaler_metadata,
    }
}

fn metrics_request(so: ScaledObjectRef, name: &str) -> GetMetricsRequest {
    GetMetricsRequest {
        scaled_object_ref: Some(so),
        metric_name: name.to_owned(),
    }
}

#[tokio::test]
async fn spec_metrics_and_is_active_follow_the_decision() {
    let mut s = serve(Backend::Healthy).await;
    let so = scaled_object("pg", &[]);
    let spec = s.client.get_metric_spec(so.clone()).await.unwrap();
    let [spec] = spec.into_inner().metric_specs.try_into().unwrap();
    assert_eq!(spec.metric_name, "cnpg-pg-readconnections");
    // Both fields filled: KEDA before 2.17 reads only the integer one.
    assert_eq!((spec.target_size, spec.target_size_float), (10, TARGET));
    let value = s
        .client
        .get_metrics(metrics_request(so.clone(), &spec.metric_name))
        .await
        .unwrap();
    let [value] = value.into_inner().metric_values.try_into().unwrap();
    assert_eq!(value.metric_name, spec.metric_name);
    assert_eq!(
        (value.metric_value, value.metric_value_float),
        ((DESIRED * TARGET) as i64, DESIRED * TARGET)
    );
    // The HPA lowercases the name it asks with; KEDA may not.
    let upper = metrics_request(so.clone(), &spec.metric_name.to_uppercase());
    assert!(s.client.get_metrics(upper).await.is_ok());
    assert!(
        s.client
            .is_active(so.clone())
            .await
            .unwrap()
            .into_inner()
            .result
    );
    let mut stream = s
        .client
        .stream_is_active(so.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().unwrap().result);
    let status = s.client.stream_metric_spec(so).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

#[tokio::test]
async fn malformed_requests_are_invalid_argument_naming_what_to_fix() {
    let mut s = serve(Backend::Healthy).await;
    let mut so = scaled_object("pg", &[]);
    so.scaler_metadata.remove("target");
    let status = s.client.get_metric_spec(so).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("\"target\""), "{status:?}");
    let status = s
        .client
        .get_metrics(metrics_request(scaled_object("pg", &[]), "cnpg-pg-other"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("cnpg-pg-readconnections"),
        "{status:?}"
    );
    let status = s
        .client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: None,
            metric_name: "cnpg-pg-readconnections".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn a_cluster_without_series_is_unavailable_never_zero_or_inactive() {
    let mut s = serve(Backend::Healthy).await;
    let so = scaled_object("other", &[]);
    let request = metrics_request(so.clone(), "cnpg-other-readconnections");
    let status = s.client.get_metrics(request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let status = s.client.is_active(so).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test]
async fn a_failing_or_slow_backend_gets_its_code_and_the_next_answer_is_served() {
    let mut s = serve(Backend::Fails).await;
    let request = || metrics_request(scaled_object("pg", &[]), "cnpg-pg-readconnections");
    let status = s.client.get_metrics(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    *s.backend.lock().unwrap() = Backend::Slow;
    // A new key (other metadata) is evaluated now, against the slow backend.
    let slow = metrics_request(
        scaled_object("pg", &[("minReplicas", "3")]),
        "cnpg-pg-readconnections",
    );
    let status = s.client.get_metrics(slow).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    *s.backend.lock().unwrap() = Backend::Healthy;
    // An error is not kept: within a few refresh intervals the same ScaledObject is answered.
    let start = Instant::now();
    let value = loop {
        match s.client.get_metrics(request()).await {
            Ok(answer) => break answer.into_inner().metric_values[0].metric_value_float,
            Err(status) if start.elapsed() < Duration::from_secs(10) => {
                // A refresh tick may have asked the slow backend meanwhile.
                assert!(
                    matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded),
                    "{status:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("still failing after 10 s: {status:?}"),
        }
    };
    assert_eq!(value, DESIRED * TARGET);
}
