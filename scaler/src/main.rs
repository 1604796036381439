//! `scaler`: KEDA external scaler for CloudNativePG clusters and Flux shard-placement webhook.
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // kube (ring) and reqwest (no provider) share one rustls provider; install it
    // before either builds a TLS config, or rustls panics choosing one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    scaler::cli::Cli::parse().run().await
}
