//! `scaler serve` end to end: a tonic client over mTLS, StreamIsActive heartbeats and shutdown,
//! cache eviction of decision gauges; backed by a real VictoriaMetrics where data matters.
mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use hyper_util::rt::TokioIo;
use runtime::logging::{LogArgs, LogFormat};
use scaler::proto::external_scaler_client::ExternalScalerClient;
use scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use scaler::serve::Args;
use scaler::topology::Mode;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

fn args(prometheus_url: &str) -> Args {
    Args {
        listen: "127.0.0.1:0".parse().unwrap(),
        prometheus_url: prometheus_url.into(),
        topology: Mode::Metrics,
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        refresh_interval: Duration::from_millis(200),
        staleness: Duration::from_secs(5),
        query_timeout: Duration::from_secs(2),
        max_concurrent_queries: 64,
        max_response_bytes: 1 << 20,
        observe_batch_size: 100,
        max_connections: 64,
        idle_timeout: Duration::from_secs(60),
        max_streams_per_connection: 32,
        cache_ttl: Duration::from_secs(600),
        convergence_deadline: Duration::from_secs(600),
        stream_heartbeat: Duration::from_secs(10),
        max_connection_age: None,
        tls_cert: None,
        tls_key: None,
        tls_client_ca: None,
        log: LogArgs {
            log_format: LogFormat::Plain,
            log_level: "info".into(),
        },
    }
}

struct Running {
    grpc: SocketAddr,
    admin: String,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

async fn start(args: Args) -> Running {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running_grpc = grpc.local_addr().unwrap();
    let admin_url = format!("http://{}", admin.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(args.serve(grpc, admin, shutdown.clone()));
    let client = reqwest::Client::new();
    let start = Instant::now();
    while !client
        .get(format!("{admin_url}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(start.elapsed() < Duration::from_secs(10), "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Running {
        grpc: running_grpc,
        admin: admin_url,
        shutdown,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("serve did not stop within 5 s");
        result.unwrap().unwrap();
    }

    async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

fn reference(name: &str, cluster: &str) -> ScaledObjectRef {
    let metadata: HashMap<String, String> =
        [("cluster", cluster), ("target", "5"), ("maxReplicas", "10")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    ScaledObjectRef {
        name: name.into(),
        namespace: "tenant-a".into(),
        scaler_metadata: metadata,
    }
}

async fn plaintext_client(addr: SocketAddr) -> ExternalScalerClient<Channel> {
    ExternalScalerClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

#[tokio::test]
async fn grpc_over_mtls_and_clean_shutdown() {
    install_provider();
    let dir = TempDir::new("serve-mtls");
    let ca = Ca::new();
    let (cert, key) = ca.leaf();
    write(&dir.path("tls.crt"), &cert);
    write(&dir.path("tls.key"), &key);
    write(&dir.path("ca.crt"), &ca.pem());
    let running = start(Args {
        tls_cert: Some(dir.path("tls.crt")),
        tls_key: Some(dir.path("tls.key")),
        tls_client_ca: Some(dir.path("ca.crt")),
        ..args("http://127.0.0.1:1")
    })
    .await;

    let channel = |client: Option<(String, String)>| {
        let connector = connector(&ca.pem(), client.as_ref(), &[b"h2"]);
        let addr = running.grpc;
        Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
            move |_| {
                let connector = connector.clone();
                async move { tls_connect(&connector, addr).await.map(TokioIo::new) }
            },
        ))
    };
    let mut trusted = ExternalScalerClient::new(channel(Some(ca.leaf())));
    let spec = trusted
        .get_metric_spec(reference("so", "pg"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(spec.metric_specs[0].metric_name, "cnpg-pg-readconnections");
    assert_eq!(spec.metric_specs[0].target_size_float, 5.0);

    let mut anonymous = ExternalScalerClient::new(channel(None));
    assert!(
        anonymous
            .get_metric_spec(reference("so", "pg"))
            .await
            .is_err()
    );
    // Plaintext h2c is refused on a TLS port.
    let plain = Endpoint::from_shared(format!("http://{}", running.grpc))
        .unwrap()
        .connect()
        .await;
    if let Ok(plain) = plain {
        assert!(
            ExternalScalerClient::new(plain)
                .get_metric_spec(reference("so", "pg"))
                .await
                .is_err()
        );
    }
    assert!(
        running
            .metrics()
            .await
            .contains(r#"scaler_grpc_requests_total{rpc="GetMetricSpec",code="OK"} 1"#)
    );
    running.stop().await;
}

const SERIES: &str = r#"
cnpg_pg_replication_in_recovery{namespace="tenant-a",pod="db-1"} 0
cnpg_pg_replication_in_recovery{namespace="tenant-a",pod="db-2"} 1
cnpg_backends_total{namespace="tenant-a",pod="db-2",datname="app",usename="app",application_name="x",state="active"} 12
"#;

#[tokio::test]
async fn stream_is_active_heartbeats_then_ends_ok_on_shutdown() {
    let vm = VictoriaMetrics::start().await;
    vm.import(SERIES, r#"cnpg_backends_total{namespace="tenant-a"}"#)
        .await;
    let running = start(Args {
        stream_heartbeat: Duration::from_millis(200),
        ..args(&vm.url)
    })
    .await;
    let mut client = plaintext_client(running.grpc).await;
    let mut stream = client
        .stream_is_active(reference("so", "db"))
        .await
        .unwrap()
        .into_inner();
    let start = Instant::now();
    for _ in 0..4 {
        let message = tokio::time::timeout(Duration::from_secs(3), stream.message())
            .await
            .unwrap();
        assert!(message.unwrap().unwrap().result);
    }
    // 4 messages: one on open, then one per 200 ms heartbeat.
    assert!(
        start.elapsed() >= Duration::from_millis(550),
        "{:?}",
        start.elapsed()
    );
    assert!(running.metrics().await.contains("scaler_active_streams 1"));

    // A client that goes away stops its stream's task.
    let mut other = client
        .stream_is_active(reference("so2", "db"))
        .await
        .unwrap()
        .into_inner();
    assert!(other.message().await.unwrap().unwrap().result);
    assert!(running.metrics().await.contains("scaler_active_streams 2"));
    drop(other);
    let since = Instant::now();
    while !running.metrics().await.contains("scaler_active_streams 1") {
        assert!(
            since.elapsed() < Duration::from_secs(3),
            "stream task outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    running.shutdown.cancel();
    // The stream finishes with status OK (Ok(None)), not an error, so KEDA resets its backoff.
    let end = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                other => return other.map(|m| m.is_none()),
            }
        }
    })
    .await
    .unwrap();
    assert!(end.unwrap(), "the stream ended with an error, not OK");
    tokio::time::timeout(Duration::from_secs(5), running.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn idle_scaled_objects_are_evicted_with_their_gauges() {
    let vm = VictoriaMetrics::start().await;
    vm.import(SERIES, r#"cnpg_backends_total{namespace="tenant-a"}"#)
        .await;
    let running = start(Args {
        cache_ttl: Duration::from_millis(600),
        ..args(&vm.url)
    })
    .await;
    let mut client = plaintext_client(running.grpc).await;
    let request = GetMetricsRequest {
        scaled_object_ref: Some(reference("so-db", "db")),
        metric_name: "CNPG-DB-READCONNECTIONS".into(),
    };
    let value = client
        .get_metrics(request)
        .await
        .unwrap()
        .into_inner()
        .metric_values;
    // 12 connections / target 5 → 1 + 3 = 4 instances → 4 × 5.
    assert_eq!(
        (
            value.len(),
            value[0].metric_value_float,
            value[0].metric_value
        ),
        (1, 20.0, 20)
    );
    let gauge = r#"scaler_decision_desired_instances{namespace="tenant-a",scaledobject="so-db",cluster="db"} 4"#;
    let text = running.metrics().await;
    assert!(text.contains(gauge), "{text}");
    assert!(text.contains(r#"scaler_decision_reason{namespace="tenant-a",scaledobject="so-db",cluster="db",reason="load"} 1"#));
    assert!(text.contains("scaler_cache_entries 1"));
    // The decision's inputs, for dashboards: load against target, the brake's state.
    let object = r#"namespace="tenant-a",scaledobject="so-db",cluster="db""#;
    for sample in [
        format!("scaler_decision_load{{{object}}} 12.0"),
        format!("scaler_decision_target{{{object}}} 5.0"),
        format!(r#"scaler_decision_brake{{{object},state="off"}} 1"#),
    ] {
        assert!(text.contains(&sample), "{sample} missing from {text}");
    }
    let start = Instant::now();
    loop {
        let text = running.metrics().await;
        if !text.contains("scaledobject=\"so-db\"") && text.contains("scaler_cache_entries 0") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never evicted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await;
}
