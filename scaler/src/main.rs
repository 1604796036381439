//! `scaler`: one binary (one image) for both servers: the KEDA external scaler (`serve`,
//! `explain`, this crate) and the Flux shard-placement webhook (`webhook`, the webhook crate),
//! plus the shard placement controller (`shard-controller`, `shards plan`: `shardctl`, which
//! reuses the webhook crate's watch index).
use clap::Parser;

mod cli;
mod shardctl;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // kube (ring) and reqwest (no provider) share one rustls provider; install it
    // before either builds a TLS config, or rustls panics choosing one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    cli::Cli::parse().run().await
}
