//! `scaler shards plan`: the current and planned placement and the autosize recommendation,
//! printed for operators. Reads the cluster (the same watches the controller uses, until they
//! have listed once) and writes nothing.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use placement::plan::{self, Plan, Policy, ShardHealth};
use placement::shard::{ShardIndex, shard_name};

use super::PlacementArgs;
use super::sync::Snapshot;
use crate::{index, watch};

/// How long to wait for the watches' first list.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print current and planned placement, the moves a controller would make, and the
    /// recommended shard count clamp(ceil(H/100), 1, min(16, T)) with its hysteresis.
    Plan(PlanArgs),
}

#[derive(Debug, clap::Args)]
struct PlanArgs {
    #[command(flatten)]
    placement: PlacementArgs,
    /// Plan as if every unready shard had been down past the grace period (this one-shot
    /// command cannot know for how long it has been down).
    #[arg(long)]
    drain_unready: bool,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        let Command::Plan(args) = self.command;
        let client = kube::Client::try_default()
            .await
            .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
        let index = index::Index::shared();
        // Owns the watches: dropped (and they with it) once the lists are in.
        let mut watches = runtime::app::App::new("shards plan");
        watch::spawn(
            &mut watches,
            client,
            index.clone(),
            Some(args.placement.flux_namespace.as_str()),
        );
        tokio::time::timeout(LIST_TIMEOUT, async {
            while !index::read(&index).synced().ready(true) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .with_context(|| {
            format!("the HelmRelease, Namespace and Deployment lists did not arrive within {LIST_TIMEOUT:?}")
        })?;
        drop(watches);
        let snapshot = Snapshot::take(&index);
        let policy = args.placement.policy();
        let down = if args.drain_unready {
            policy.grace
        } else {
            Duration::ZERO
        };
        let health = (0..policy.shard_count)
            .map(|i| {
                let ready = snapshot.deployments.get(&i).copied().unwrap_or(false);
                (
                    i,
                    if ready {
                        ShardHealth::Ready
                    } else {
                        ShardHealth::Down(down)
                    },
                )
            })
            .collect();
        let plan = plan::plan(&snapshot.tenants, &health, &policy, |_| false);
        print!("{}", render(&snapshot, &plan, &policy));
        Ok(())
    }
}

/// The report text.
fn render(snapshot: &Snapshot, plan: &Plan, policy: &Policy) -> String {
    let mut out = String::new();
    shard_table(&mut out, snapshot, plan, policy);
    autosize_line(&mut out, snapshot);
    tenant_table(&mut out, snapshot, plan);
    moves_and_leftovers(&mut out, plan);
    out
}

/// Every shard below K, and any beyond it still running or holding tenants: its state, load
/// now and planned load, then the imbalance.
fn shard_table(out: &mut String, snapshot: &Snapshot, plan: &Plan, policy: &Policy) {
    let k = policy.shard_count;
    let running = snapshot.deployments.len() as u64;
    let state = |i: ShardIndex| match snapshot.deployments.get(&i) {
        Some(true) => "ready",
        Some(false) => "unready",
        None => "missing",
    };
    let mut shards: Vec<ShardIndex> = (0..k).collect();
    shards.extend(snapshot.deployments.keys().filter(|&&i| i >= k));
    let mut current: BTreeMap<ShardIndex, u64> = BTreeMap::new();
    for t in &snapshot.tenants {
        if let Some(c) = t.current {
            *current.entry(c).or_default() += t.weight;
        }
        shards.extend(t.current.filter(|&c| c >= k));
    }
    shards.sort_unstable();
    shards.dedup();
    let _ = writeln!(out, "shards: K={k}, {running} Deployment(s) present");
    let _ = writeln!(
        out,
        "{:<10} {:<8} {:>8} {:>8}",
        "SHARD", "STATE", "LOAD", "PLANNED"
    );
    for &i in &shards {
        let state = if i >= k { "removed" } else { state(i) };
        let planned = plan.placement.loads.get(i as usize).copied().unwrap_or(0);
        let now = current.get(&i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:<10} {:<8} {now:>8} {planned:>8}",
            shard_name(i),
            state
        );
    }
    let _ = writeln!(
        out,
        "imbalance now: {:.2} (threshold {})",
        plan.imbalance, policy.rebalance_threshold
    );
}

/// The shard count the autosize rule recommends, raw and with hysteresis.
fn autosize_line(out: &mut String, snapshot: &Snapshot) {
    let running = snapshot.deployments.len() as u64;
    let tenants = snapshot.tenants.len() as u64;
    let r = plan::recommend(snapshot.keyed_releases, tenants, running);
    let _ = writeln!(
        out,
        "autosize: H={} keyed HelmReleases, T={tenants} tenants -> clamp(ceil(H/100), 1, min(16, T)) = {}; with hysteresis from {running} running: {}",
        snapshot.keyed_releases, r.raw, r.with_hysteresis,
    );
}

fn shard_or_dash(s: Option<ShardIndex>) -> String {
    s.map_or_else(|| "-".to_owned(), shard_name)
}

/// Each tenant's weight, shard now and planned shard.
fn tenant_table(out: &mut String, snapshot: &Snapshot, plan: &Plan) {
    let _ = writeln!(
        out,
        "\n{:<40} {:>6} {:<10} {:<10}",
        "TENANT", "HRS", "CURRENT", "PLANNED"
    );
    for t in &snapshot.tenants {
        let planned = plan.placement.assignments.get(&t.namespace).copied();
        let _ = writeln!(
            out,
            "{:<40} {:>6} {:<10} {:<10}",
            t.namespace,
            t.weight,
            shard_or_dash(t.current),
            shard_or_dash(planned)
        );
    }
}

/// The planned moves, then tenants no live shard reconciles and tenants no ready shard takes.
fn moves_and_leftovers(out: &mut String, plan: &Plan) {
    let _ = writeln!(
        out,
        "\nmoves ({}; a controller makes them a few per sync):",
        plan.moves.len()
    );
    for m in &plan.moves {
        let _ = writeln!(
            out,
            "  {} {} -> {} ({})",
            m.tenant,
            shard_or_dash(m.from),
            shard_name(m.to),
            m.reason.as_str()
        );
    }
    if !plan.stranded.is_empty() {
        let list: Vec<&str> = plan.stranded.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "stranded (no live shard reconciles them): {}",
            list.join(", ")
        );
    }
    if !plan.placement.unplaced.is_empty() {
        let _ = writeln!(
            out,
            "unplaced (no ready shard): {}",
            plan.placement.unplaced.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::TenantInfo;

    #[test]
    fn report_shows_removed_shards_moves_and_the_recommendation() {
        let tenants = vec![
            TenantInfo {
                namespace: "tenant-a".into(),
                weight: 2,
                current: Some(0),
                deleting: false,
            },
            TenantInfo {
                namespace: "tenant-b".into(),
                weight: 1,
                current: Some(2),
                deleting: false,
            },
        ];
        let snapshot = Snapshot {
            tenants,
            deployments: BTreeMap::from([(0, true), (1, true), (2, true)]),
            releases: BTreeMap::new(),
            namespace_labels: BTreeMap::new(),
            keyed_releases: 250,
        };
        let policy = Policy {
            shard_count: 2,
            ..Policy::default()
        };
        let health = BTreeMap::from([(0, ShardHealth::Ready), (1, ShardHealth::Ready)]);
        let plan = plan::plan(&snapshot.tenants, &health, &policy, |_| false);
        let text = render(&snapshot, &plan, &policy);
        assert!(text.contains("shard2     removed"), "{text}");
        assert!(
            text.contains("tenant-b shard2 -> shard1 (shard_removed)"),
            "{text}"
        );
        assert!(
            text.contains("= 2; with hysteresis from 3 running: 3"),
            "{text}"
        );
        assert!(
            text.contains("stranded (no live shard reconciles them): tenant-b"),
            "{text}"
        );
    }
}
