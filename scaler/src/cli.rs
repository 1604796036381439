//! Command line: one subcommand per job, each owning its own `Args`.
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "scaler", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the KEDA external-scaler gRPC API.
    Serve(scaler::serve::Args),
    /// Print one decision with every input and guard that shaped it.
    Explain(scaler::explain::Args),
    /// Replay the decision and a simulated HPA over history: table and plot.
    Backtest(scaler::backtest::Args),
    /// Serve the Flux shard-placement admission webhook.
    Webhook(webhook::Args),
    /// Run the shard placement controller: rescue stranded tenants, rebalance, paced.
    ShardController(webhook::controller::Args),
    /// Inspect shard placement (read-only).
    Shards(webhook::controller::report::Args),
    /// Run the ScaleAdapter controller: write each adapter's /scale count into its target.
    ScaleAdapter(adapter::Args),
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Serve(args) => args.run().await,
            Command::Explain(args) => args.run().await,
            Command::Backtest(args) => args.run().await,
            Command::Webhook(args) => args.run().await,
            Command::ShardController(args) => args.run().await,
            Command::Shards(args) => args.run().await,
            Command::ScaleAdapter(args) => args.run().await,
        }
    }
}
