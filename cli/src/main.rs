//! `scaler`: one binary (one image) for every job, each a library crate's: the KEDA external
//! scaler (`serve`: crate scaler; its operator tools `explain`, `status`, `backtest`: crate
//! scaler-tools), Flux shard placement (crate sharding): the admission webhook (`webhook`) and
//! the placement controller (`shard-controller`, `shards plan`); and the scale adapter
//! (`scale-adapter`, crate adapter).
mod cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Threads of tokio's blocking pool (its default is 512). Its work here is parsing backend
/// answers, DNS lookups and file reads: CPU-bound or brief, so more threads than cores buy
/// nothing, and each thread keeps allocator pages of its own (a refresh tick at 20,000
/// ScaledObjects grew the process to 16 threads; docs/benchmarks.md).
const MAX_BLOCKING_THREADS: usize = 4;

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()?
        .block_on(async {
            // kube (ring) and reqwest (no provider) share one rustls provider; install it
            // before either builds a TLS config, or rustls panics choosing one.
            let _ = rustls::crypto::ring::default_provider().install_default();
            cli::Cli::from_env().run().await
        })
}
