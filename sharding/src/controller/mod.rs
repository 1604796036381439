//! `scaler shard-controller` and `scaler shards plan`: the shard placement controller
//! (docs/design.md S5). It keeps the webhook's watch index (HelmRelease and Namespace
//! metadata, shard Deployments), plans with `placement::plan`, and, as the holder of a Lease,
//! moves tenants off removed or failed shards and evens out load, paced.
//!
//! `sync` runs one pass, `relabel` makes a move's conditional writes, `report` prints a plan for
//! operators, `metrics` the gauges; `runtime::controller` is the harness (flags, Lease, admin
//! port, sync loop) it shares with the scale adapter.
use std::collections::BTreeMap;
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use placement::plan::Policy;
use tracing::{Instrument, info, info_span};

use crate::{Pin, index, watch};
use runtime::controller::ControllerArgs;
use runtime::flags::LeaseFlags;
use runtime::logging::ShardControllerLogArgs;

pub mod metrics;
pub mod relabel;
pub mod report;
pub mod sync;

/// Name of the reporting controller on Events.
const CONTROLLER_NAME: &str = "cozy-flux-shard-controller";

/// What the controller and `shards plan` both need to plan.
#[derive(Debug, Clone, clap::Args)]
pub struct PlacementArgs {
    /// Number of helm-controller shards K; tenants on shards ≥ K are moved to shard0..shard<K-1>.
    #[arg(long, env = "SHARD_CONTROLLER_SHARDS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    shards: u32,
    /// Namespace of the helm-controller-shard<i> Deployments.
    #[arg(long, default_value = "cozy-fluxcd")]
    flux_namespace: String,
    /// How long a shard below K may be unready or missing before its tenants are moved off it.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Rebalance while (max − min) / average shard load exceeds this; 0 disables rebalancing.
    #[arg(long, default_value = "0.25", value_parser = parse_threshold)]
    rebalance_threshold: f64,
    /// Pin a tenant to a shard, e.g. `--pin tenant-big=shard0` (repeatable; ignored if ≥ K).
    #[arg(long = "pin", value_name = "TENANT=SHARD")]
    pins: Vec<Pin>,
}

impl PlacementArgs {
    fn policy(&self) -> Policy {
        Policy {
            shard_count: self.shards,
            pinned: self
                .pins
                .iter()
                .map(|Pin(t, s)| (t.clone(), *s))
                .collect::<BTreeMap<_, _>>(),
            rebalance_threshold: self.rebalance_threshold,
            grace: self.grace,
        }
    }
}

fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a ratio ≥ 0 (e.g. 0.25; 0 disables rebalancing)"
        )),
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    // Boxed: the flags are many, and the CLI enum should stay small (clippy large_enum_variant).
    #[command(flatten)]
    settings: Box<Settings>,
}

/// The shard controller's Lease and identity defaults.
#[derive(Debug, Clone, Copy)]
struct Lease;

impl LeaseFlags for Lease {
    const COMPONENT: &'static str = "shard-controller";
    const LEASE_NAMESPACE: &'static str = "cozy-fluxcd";
    const LEASE_NAME: &'static str = "cozy-flux-shard-controller";
    const IDENTITY_HELP: &'static str =
        "This replica's identity in the Lease and on Events (the pod name in the chart)";
}

#[derive(Debug, clap::Args)]
struct Settings {
    #[command(flatten)]
    placement: PlacementArgs,
    /// Tenant moves per sync (pacing); rescues of stranded tenants come first.
    #[arg(long, default_value = "5", value_parser = clap::value_parser!(u32).range(1..=1000))]
    moves_per_sync: u32,
    /// A moved tenant is not moved again for rebalancing within this time.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    cooldown: Duration,
    /// Time between syncs (also the delay before a watch change is acted on).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    sync_interval: Duration,
    /// Report each sync's moves in the log and write nothing (no Lease, labels or Events).
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    controller: ControllerArgs<Lease>,
    /// Timeout of each Kubernetes API call of a move.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    api_timeout: Duration,
    #[command(flatten)]
    log: ShardControllerLogArgs,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        let Settings {
            placement,
            moves_per_sync,
            cooldown,
            sync_interval,
            dry_run,
            controller,
            api_timeout,
            log,
        } = *self.settings;
        log.init()?;
        let register = metrics::Metrics::register;
        let mut controller = controller.start("shard controller", register).await?;
        let flux_namespace = placement.flux_namespace.clone();
        let client = controller.client.clone();
        let index = crate::follow(&mut controller.app, client.clone(), Some(&flux_namespace));
        let leader = controller.elect(!dry_run);
        let identity = controller.identity.clone();
        let reporter = Reporter {
            controller: CONTROLLER_NAME.into(),
            instance: Some(identity.clone()),
        };
        let relabeler =
            relabel::Relabeler::new(client.clone(), watch::helmrelease_resource(), api_timeout);
        let settings = sync::Settings {
            policy: placement.policy(),
            moves_per_sync: moves_per_sync as usize,
            cooldown,
            dry_run,
        };
        let recorder = Recorder::new(client, reporter);
        let mut sync = sync::Controller::new(
            index.clone(),
            relabeler,
            recorder,
            settings,
            controller.metrics.clone(),
            flux_namespace,
        );
        info!(%identity, shards = placement.shards, dry_run, "running the shard controller");

        let synced = || index::read(&index).synced().ready(true);
        let gauge = controller.metrics.leader.clone();
        let lead = leader.clone();
        let step = async |leading| {
            let now = tokio::time::Instant::now();
            if dry_run || leading {
                sync.sync(now, &lead).instrument(info_span!("sync")).await;
            } else {
                sync.observe(now);
            }
        };
        controller
            .run(sync_interval, leader, gauge, synced, step)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn defaults_follow_the_design() {
        let cli = Cli::try_parse_from(["shard-controller", "--shards", "3"]).unwrap();
        let s = &cli.args.settings;
        assert_eq!(s.moves_per_sync, 5);
        assert_eq!(s.cooldown, Duration::from_secs(600));
        assert_eq!(s.placement.rebalance_threshold, 0.25);
        assert_eq!(s.placement.flux_namespace, "cozy-fluxcd");
        assert!(!s.dry_run);
    }

    #[test]
    fn bad_flags_name_the_fix() {
        for (flag, value) in [
            ("--rebalance-threshold", "-1"),
            ("--rebalance-threshold", "NaN"),
            ("--moves-per-sync", "0"),
            ("--pin", "tenant-a=shard01"),
            ("--grace", "soon"),
        ] {
            let arg = format!("{flag}={value}");
            let error = Cli::try_parse_from(["shard-controller", "--shards", "3", &arg])
                .err()
                .unwrap_or_else(|| panic!("{flag} {value} accepted"))
                .to_string();
            assert!(error.contains(flag), "{error}");
        }
    }
}
