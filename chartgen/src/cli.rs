//! Command line: `chartgen app`, `chartgen shards`, `chartgen package`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::output::{Plan, read};
use crate::render::Renderer;
use crate::{app, package, shards};

/// `chartgen package` defaults to the checkout chartgen was built from.
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
    /// Directory of the minijinja templates (app/), for developing them; `app` uses its built-in
    /// templates without it.
    #[arg(long, global = true, env = "CHARTGEN_TEMPLATES")]
    templates: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Add KEDA autoscaling to an app chart (idempotent; --check only reports drift).
    App(AppArgs),
    /// Print helm-controller shard Deployments cloned from the flux-aio Deployment.
    Shards(ShardsArgs),
    /// Stamp the platform package chart's version and write its shard data (charts/cozy-autoscaling).
    Package(PackageArgs),
}

#[derive(Args)]
struct AppArgs {
    /// The chart directory (holds Chart.yaml, values.yaml, templates/).
    #[arg(long)]
    chart: PathBuf,
    /// Change nothing; exit 1 when the chart is not up to date.
    #[arg(long, conflicts_with = "verify")]
    check: bool,
    /// Change nothing; render every autoscaling mode and guard with each --helm and validate the
    /// objects against the CRDs in --crds (exit 1 on any failure). For a chart repository's CI.
    #[arg(long)]
    verify: bool,
    /// With --verify: a helm binary to render with (repeat for Helm 3 and Helm 4).
    #[arg(long = "helm", default_value = "helm", requires = "verify")]
    helms: Vec<PathBuf>,
    /// With --verify: a CRD file or a directory of CRD files (KEDA's ScaledObject, the target's).
    #[arg(long = "crds", requires = "verify")]
    crds: Vec<PathBuf>,
    /// With --verify: a values file every render gets (`helm -f`), e.g. values a platform injects.
    #[arg(long = "values", requires = "verify")]
    values: Vec<PathBuf>,
    /// With --verify: seconds one `helm template` may run before it is killed (its output is
    /// capped at 64 MiB too).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600), requires = "verify")]
    helm_timeout: u64,
    /// With --verify: MiB of data memory one `helm template` may use (its RLIMIT_DATA, what Go's
    /// heap counts against); a render that needs more fails its case.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=65536), requires = "verify")]
    helm_max_memory: u64,
    /// With --verify: the release name and namespace to render as.
    #[arg(long, num_args = 2, value_names = ["RELEASE", "NAMESPACE"], default_values = ["verify", "verify"], requires = "verify")]
    release: Vec<String>,
    /// Replica field of the target manifest [default: the kind's: instances for a CNPG Cluster,
    /// replicas under spec.redis for a RedisFailover].
    #[arg(long)]
    replica_field: Option<String>,
    /// First rewrite a literal count line (`instances: 2`) to read this new top-level values key,
    /// added to values.yaml with the literal as its default (the chart renders as before).
    #[arg(long, value_name = "KEY", conflicts_with_all = ["check", "verify"])]
    lift_literal_count: Option<String>,
    /// Values path the replica field renders from [default: read from the count line].
    #[arg(long)]
    values_key: Option<String>,
    /// apiVersion of the scale target [default: the kind's: postgresql.cnpg.io/v1,
    /// databases.spotahome.com/v1].
    #[arg(long)]
    target_api_version: Option<String>,
    /// Kind of the scale target [default: discovered: the one of Cluster (CNPG) and RedisFailover
    /// (driven through a generated ScaleAdapter) the chart's templates render]. Another kind must
    /// expose the /scale subresource.
    #[arg(long)]
    target_kind: Option<String>,
    /// Go-template expression of the target's name [default: read from the target's template].
    #[arg(long)]
    target_name: Option<String>,
    /// Go-template expression of the target's namespace [default: read from the target's
    /// template, else the release namespace].
    #[arg(long)]
    target_namespace: Option<String>,
    /// Values path of the synchronous quorum; '' when the chart has none [default: read from the
    /// target's `maxSyncReplicas` / `postgresql.synchronous.number`]. May be absent from values.yaml.
    #[arg(long)]
    max_sync_replicas_key: Option<String>,
    /// Default gRPC address of the scaler written into values.yaml
    /// [default: cozy-autoscaling-scaler.cozy-autoscaling.svc:6000].
    #[arg(long)]
    scaler_address: Option<String>,
}

impl AppArgs {
    /// The settings given as flags (the rest comes from the chart's chartgen.yaml or defaults).
    fn settings(&self) -> app::settings::Settings {
        app::settings::Settings {
            replica_field: self.replica_field.clone(),
            values_key: self.values_key.clone(),
            target_api_version: self.target_api_version.clone(),
            target_kind: self.target_kind.clone(),
            target_name: self.target_name.clone(),
            target_namespace: self.target_namespace.clone(),
            max_sync_replicas_key: self.max_sync_replicas_key.clone(),
            scaler_address: self.scaler_address.clone(),
        }
    }
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
    /// Change nothing; exit 1 when the version or the shard data is not up to date.
    #[arg(long)]
    check: bool,
    /// The charts directory holding the package chart.
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
            Command::App(a) => a.run(templates.as_deref()),
            Command::Package(p) => {
                let plan = package::plan(&p.out, &p.flux_deployment)?;
                finish(&plan, p.check)
            }
            Command::Shards(s) => s.run(),
        }
    }
}

impl AppArgs {
    fn run(&self, templates: Option<&Path>) -> anyhow::Result<ExitCode> {
        if let Some(key) = &self.lift_literal_count {
            let lift = warned(|w| app::lift_literal(&self.chart, self.settings(), key, w))?;
            for path in lift.apply()? {
                eprintln!("chartgen: wrote {}", path.display());
            }
        }
        let r = Renderer::new(templates)?;
        let out = warned(|w| app::plan(&self.chart, self.settings(), &r, w))?;
        if self.verify {
            let target = app::verify::Target {
                chart: &self.chart,
                values: &self.values,
                release: &self.release[0],
                namespace: &self.release[1],
                timeout: std::time::Duration::from_secs(self.helm_timeout),
                max_memory: self.helm_max_memory << 20,
            };
            return app::verify::run(&target, &out, &self.helms, &self.crds);
        }
        let wrote = !self.check && !out.plan.drift()?.is_empty();
        let code = finish(&out.plan, self.check)?;
        if wrote {
            for note in &out.notes {
                eprintln!("chartgen: {note}");
            }
            eprintln!("chartgen: {}", app::next_steps(&self.chart, &out.spec));
        }
        Ok(code)
    }
}

/// Runs `step`, then prints the warnings it gathered, whether it succeeded or not (a warning
/// often explains the error that follows).
fn warned<T>(step: impl FnOnce(&mut Vec<app::Note>) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let mut warnings = Vec::new();
    let result = step(&mut warnings);
    for warning in &warnings {
        eprintln!("chartgen: {warning}");
    }
    result
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
        let base = shards::sanitise(&flux, cfg.events_addr.as_deref())
            .with_context(|| format!("in '{}'", self.flux_deployment.display()))?;
        let mut docs = Vec::new();
        for i in 0..u32::try_from(count)? {
            let d = shards::instantiate(&base, i, &cfg);
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
