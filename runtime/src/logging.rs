//! Logging flags and initialisation shared by every subcommand (`#[command(flatten)] LogArgs`).
use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, value_enum, default_value = "plain", env = "SCALER_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter: a level (`info`, `debug`, ...) or tracing directives like `scaler=debug,warn`.
    #[arg(long, default_value = "info", env = "SCALER_LOG_LEVEL")]
    pub log_level: String,
}

impl LogArgs {
    /// Installs the global subscriber; logs go to stderr so stdout stays for command output.
    pub fn init(&self) -> anyhow::Result<()> {
        let filter = EnvFilter::try_new(&self.log_level)
            .with_context(|| format!("invalid --log-level {:?}", self.log_level))?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        let result = match self.log_format {
            LogFormat::Plain => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        result.map_err(|error| anyhow::anyhow!("cannot install the logger: {error}"))
    }
}
