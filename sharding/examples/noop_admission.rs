//! A STAND-IN baseline for the webhook benchmark (tests/webhook/bench.py), never a product part:
//! an HTTPS AdmissionReview endpoint that allows everything unchanged. It shares the webhook's
//! transport exactly (the same reloading rustls config, connection limits and hyper HTTP/1.1
//! serving loop) and replaces only the decision, so the benchmark's ratio is the cost of stamping.
//!
//! `cargo run --release -p sharding --example noop_admission -- --listen 127.0.0.1:8443 \
//!   --tls-cert tls.crt --tls-key tls.key`
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use axum::Json;
use axum::Router;
use axum::routing::post;
use clap::Parser;
use runtime::{conn, tls};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The webhook's own defaults for the transport settings this stand-in shares.
const MAX_CONNECTIONS: usize = 256;
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "No-op admission webhook: the stand-in baseline of the webhook benchmark")]
struct Args {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    tls_cert: PathBuf,
    #[arg(long)]
    tls_key: PathBuf,
}

/// Echoes the uid (the API server rejects an answer without it) and allows, patching nothing.
async fn allow(Json(review): Json<Value>) -> Json<Value> {
    let uid = review["request"]["uid"].clone();
    Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true},
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let shutdown = CancellationToken::new();
    let files = tls::TlsFiles {
        cert: args.tls_cert,
        key: args.tls_key,
        client: None,
    };
    let (tls, poller) = tls::Reloading::load(files, &[b"http/1.1"], shutdown.clone())
        .context("loading the certificate")?;
    tokio::spawn(poller);
    let socket = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding --listen {}", args.listen))?;
    let limits = conn::Limits {
        max_connections: MAX_CONNECTIONS,
        max_connections_per_peer: MAX_CONNECTIONS,
        handshake_timeout: HEADER_READ_TIMEOUT,
        idle_timeout: IDLE_TIMEOUT,
        protocol: conn::Protocol::Http1,
    };
    let incoming = tls.incoming(socket, limits, shutdown.clone());
    let router = Router::new().route(sharding::webhook::server::PATH, post(allow));
    tokio::spawn(runtime::shutdown::cancel_on_signal(shutdown.clone()));
    runtime::http1::serve(
        incoming,
        router,
        HEADER_READ_TIMEOUT,
        shutdown,
        "noop webhook",
    )
    .await;
    Ok(())
}
