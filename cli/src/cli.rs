//! Command line: one subcommand per job, each owning its own `Args`.
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// The file name kubectl runs for `kubectl cozy-autoscaling ...`: kubectl looks a plugin up as
/// `kubectl-` + its words joined by `-`, with each `-` inside a word written `_`.
pub const KUBECTL_PLUGIN: &str = "kubectl-cozy_autoscaling";

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
    Explain(scaler_tools::explain::Args),
    /// List every ScaledObject this scaler serves, its decision and its HPA, trouble first.
    Status(scaler_tools::status::Args),
    /// Replay the decision and a simulated HPA over history: table and plot.
    Backtest(scaler_tools::backtest::Args),
    /// Serve the Flux shard-placement admission webhook.
    Webhook(sharding::webhook::Args),
    /// Run the shard placement controller: rescue stranded tenants, rebalance, paced.
    ShardController(sharding::controller::Args),
    /// Inspect shard placement (read-only).
    Shards(sharding::controller::report::Args),
    /// Run the ScaleAdapter controller: write each adapter's /scale count into its target.
    ScaleAdapter(adapter::Args),
}

impl Cli {
    /// Parses the process's arguments; installed as [`KUBECTL_PLUGIN`], help and errors name
    /// the command as kubectl users type it (the subcommands are the same).
    pub fn from_env() -> Self {
        let plugin = std::env::args_os()
            .next()
            .and_then(|argv0| {
                std::path::Path::new(&argv0)
                    .file_stem()
                    .map(|s| s == KUBECTL_PLUGIN)
            })
            .unwrap_or(false);
        let mut command = Self::command();
        if plugin {
            command = command.bin_name("kubectl cozy-autoscaling");
        }
        let matches = command.get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Serve(args) => args.run().await,
            Command::Explain(args) => args.run().await,
            Command::Status(args) => args.run().await,
            Command::Backtest(args) => args.run().await,
            Command::Webhook(args) => args.run().await,
            Command::ShardController(args) => args.run().await,
            Command::Shards(args) => args.run().await,
            Command::ScaleAdapter(args) => args.run().await,
        }
    }
}
