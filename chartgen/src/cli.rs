//! Command line: `chartgen app`, `chartgen shards`, `chartgen package`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::output::{Plan, read};
use crate::render::Renderer;
use crate::{app, package, shards};

const DEFAULT_TEMPLATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../templates");
const DEFAULT_CHARTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts");
const DEFAULT_FLUX: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../templates/package/flux-aio-deployment.yaml"
);

#[derive(Parser)]
#[command(
    name = "chartgen",
    version,
    about = "Generates autoscaling, Flux shard and package chart pieces from minijinja templates"
)]
pub struct Cli {
    /// Directory the minijinja templates are loaded from (nothing outside it is read as a template).
    #[arg(long, global = true, env = "CHARTGEN_TEMPLATES", default_value = DEFAULT_TEMPLATES)]
    templates: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Add KEDA autoscaling to an app chart (idempotent; --check only reports drift).
    App(AppArgs),
    /// Print helm-controller shard Deployments cloned from the flux-aio Deployment.
    Shards(ShardsArgs),
    /// Render the platform package chart and its PackageSource into charts/.
    Package(PackageArgs),
}

#[derive(Args)]
struct AppArgs {
    /// The chart directory (holds Chart.yaml, values.yaml, templates/).
    #[arg(long)]
    chart: PathBuf,
    /// Change nothing; exit 1 when the chart is not up to date.
    #[arg(long)]
    check: bool,
    /// Replica field of the target manifest.
    #[arg(long, default_value = "instances")]
    replica_field: String,
    /// Values path the replica field renders from.
    #[arg(long, default_value = "replicas")]
    values_key: String,
    /// apiVersion of the scale target.
    #[arg(long, default_value = "postgresql.cnpg.io/v1")]
    target_api_version: String,
    /// Kind of the scale target (must expose the /scale subresource).
    #[arg(long, default_value = "Cluster")]
    target_kind: String,
    /// Go-template expression of the target's name.
    #[arg(long, default_value = ".Release.Name")]
    target_name: String,
    /// Values path of the synchronous-replica count ('' when the chart has none).
    #[arg(long, default_value = "quorum.maxSyncReplicas")]
    max_sync_replicas_key: String,
    /// Default gRPC address of the scaler written into values.yaml.
    #[arg(
        long,
        default_value = "cozy-autoscaling-scaler.cozy-autoscaling.svc:6000"
    )]
    scaler_address: String,
}

#[derive(Args)]
struct ShardsArgs {
    /// The flux-aio Deployment (YAML) to clone the helm-controller from.
    #[arg(long)]
    flux_deployment: PathBuf,
    /// Number of shards, or `auto` (needs --helmreleases and --tenants).
    #[arg(long)]
    count: Count,
    /// HelmReleases carrying the shard key (for --count auto).
    #[arg(long)]
    helmreleases: Option<u64>,
    /// Tenants (for --count auto; 0 means no tenant cap).
    #[arg(long)]
    tenants: Option<u64>,
    /// Write into this chart's templates/helm-controller-shards.yaml instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Namespace of the shards (default: the flux Deployment's namespace, else cozy-fluxcd).
    #[arg(long)]
    flux_namespace: Option<String>,
    /// Reconcile workers per shard.
    #[arg(long, default_value_t = 5)]
    concurrent: u32,
    /// Events address for the shards (default: drop flux-aio's localhost address).
    #[arg(long)]
    events_addr: Option<String>,
    /// host:port of a source-controller Service, set as SOURCE_CONTROLLER_LOCALHOST.
    #[arg(long)]
    source_controller_address: Option<String>,
}

#[derive(Args)]
struct PackageArgs {
    /// Change nothing; exit 1 when charts/ is not up to date.
    #[arg(long)]
    check: bool,
    /// The charts directory to render into.
    #[arg(long, default_value = DEFAULT_CHARTS)]
    out: PathBuf,
    /// flux-aio Deployment the shard template is cloned from.
    #[arg(long, default_value = DEFAULT_FLUX)]
    flux_deployment: PathBuf,
}

#[derive(Clone, Copy, Debug)]
enum Count {
    Fixed(u64),
    Auto,
}

/// Most shards `--count` accepts: each is a helm-controller Deployment, and `auto` never asks for
/// more than `placement::autosize::MAX_AUTO_SHARDS`; a larger number is a typo, not a plan.
const MAX_SHARDS: u64 = 64;

impl FromStr for Count {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            n => match n.parse::<u64>() {
                Ok(k) if (1..=MAX_SHARDS).contains(&k) => Ok(Self::Fixed(k)),
                Ok(k) if k > MAX_SHARDS => Err(format!(
                    "{k} shards is more than the {MAX_SHARDS} chartgen generates (each is a helm-controller Deployment); use a smaller number or `auto`"
                )),
                _ => Err(format!(
                    "expected a number from 1 to {MAX_SHARDS} or `auto`, got {n:?}"
                )),
            },
        }
    }
}

impl Cli {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let Self { templates, command } = self;
        match command {
            Command::App(a) => {
                let spec = app::AppSpec {
                    field: a.replica_field,
                    values_key: a.values_key,
                    target_api_version: a.target_api_version,
                    target_kind: a.target_kind,
                    target_name: a.target_name,
                    max_sync_key: a.max_sync_replicas_key,
                    scaler_address: a.scaler_address,
                };
                let plan = app::plan(&a.chart, &spec, &Renderer::new(&templates)?)?;
                finish(&plan, a.check)
            }
            Command::Package(p) => {
                let plan = package::plan(&p.out, &p.flux_deployment, &Renderer::new(&templates)?)?;
                finish(&plan, p.check)
            }
            Command::Shards(s) => s.run(),
        }
    }
}

impl ShardsArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        let text = read(&self.flux_deployment)?;
        let flux: serde_json::Value = serde_norway::from_str(&text).with_context(|| {
            format!(
                "'{}' is not a YAML Deployment",
                self.flux_deployment.display()
            )
        })?;
        let count = match (self.count, self.helmreleases, self.tenants) {
            (Count::Fixed(k), _, _) => k,
            (Count::Auto, Some(h), Some(t)) => shards::auto_count(h, t),
            (Count::Auto, _, _) => bail!("--count auto needs --helmreleases H and --tenants T"),
        };
        let namespace = self
            .flux_namespace
            .or_else(|| {
                flux.pointer("/metadata/namespace")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "cozy-fluxcd".to_owned());
        let cfg = shards::ShardConfig {
            namespace,
            concurrent: self.concurrent.to_string(),
            events_addr: self.events_addr,
            source_controller: self.source_controller_address,
        };
        let mut docs = Vec::new();
        for i in 0..count {
            let d = shards::build_shard(&flux, &i.to_string(), &cfg)
                .with_context(|| format!("in '{}'", self.flux_deployment.display()))?;
            docs.push(format!("---\n{}", serde_norway::to_string(&d)?));
        }
        let yaml = docs.concat();
        match self.out {
            None => print!("{yaml}"),
            Some(chart) => {
                if !chart.join("Chart.yaml").is_file() {
                    bail!(
                        "'{}' is not a chart (no Chart.yaml); pass a chart directory to --out",
                        chart.display()
                    );
                }
                let mut plan = Plan::confined(&chart);
                plan.add(chart.join("templates/helm-controller-shards.yaml"), yaml);
                plan.apply()?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Applies the plan, or with `check` reports drift and exits 1.
fn finish(plan: &Plan, check: bool) -> anyhow::Result<ExitCode> {
    if check {
        let drift = plan.drift()?;
        if drift.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        for path in drift {
            eprintln!("chartgen: out of date: {}", path.display());
        }
        eprintln!("chartgen: run the same command without --check to update");
        return Ok(ExitCode::from(1));
    }
    for path in plan.apply()? {
        eprintln!("chartgen: wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
