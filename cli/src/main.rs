//! `scaler`: one binary (one image) for every job, each a library crate's: the KEDA external
//! scaler (`serve`, `explain`, `status`, `backtest`: crate scaler), Flux shard placement (crate
//! sharding): the admission webhook (`webhook`) and the placement controller (`shard-controller`,
//! `shards plan`); and the scale adapter (`scale-adapter`, crate adapter).
mod cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // kube (ring) and reqwest (no provider) share one rustls provider; install it
    // before either builds a TLS config, or rustls panics choosing one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    cli::Cli::from_env().run().await
}
