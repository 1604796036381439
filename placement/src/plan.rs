//! One sync of the placement controller, decided without I/O (docs/design.md S4, S5).
//!
//! The controller observes tenants and shard health, and this module says which tenants to move
//! where and why: tenants of removed shards (index ≥ K) and of shards down longer than the grace
//! period are rescued onto ready shards, legacy/unplaced tenants are placed, and the rebalance
//! pass of [`compute_placement`] evens the loads out (cooldown per tenant). The caller paces the
//! moves (a budget per sync) and checks each release's live state with [`release_gate`].
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::autosize::{effective_shard_count, recommended_shard_count};
use crate::placement::{Placement, PlacementConfig, TenantInfo, compute_placement};
use crate::shard::{ShardIndex, parse_shard_index};

/// Health of one shard below K, as the controller has observed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardHealth {
    Ready,
    /// Unready or missing for this long (since this process first saw it so).
    Down(Duration),
}

/// Remembers since when each shard has been down, so a brief outage is tolerated and a long one
/// drained. Observed locally: a restarted controller starts the clock again (it never drains
/// early).
#[derive(Debug, Default)]
pub struct DownSince {
    since: BTreeMap<ShardIndex, Instant>,
}

impl DownSince {
    /// The health of shards `0..k` given which shard Deployments exist and are ready.
    pub fn observe(
        &mut self,
        now: Instant,
        k: u32,
        ready: &BTreeMap<ShardIndex, bool>,
    ) -> BTreeMap<ShardIndex, ShardHealth> {
        self.since.retain(|&i, _| i < k);
        (0..k)
            .map(|i| {
                let health = if ready.get(&i).copied().unwrap_or(false) {
                    self.since.remove(&i);
                    ShardHealth::Ready
                } else {
                    let since = *self.since.entry(i).or_insert(now);
                    ShardHealth::Down(now.saturating_duration_since(since))
                };
                (i, health)
            })
            .collect()
    }
}

/// The controller's fixed knobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Shard count K: shards `0..K` should exist; tenants on shards ≥ K are moved.
    pub shard_count: u32,
    /// Tenant namespace → pinned shard.
    pub pinned: BTreeMap<String, ShardIndex>,
    /// Rebalance while `(max − min) / avg` exceeds this; 0 disables rebalancing.
    pub rebalance_threshold: f64,
    /// How long a shard below K may be down before its tenants are moved off it.
    pub grace: Duration,
}

/// Why a tenant moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MoveReason {
    /// Its shard is ≥ K: removed.
    ShardRemoved,
    /// Its shard has been down longer than the grace period.
    ShardDown,
    /// It had no canonical shard (legacy `tenants` key, or never placed).
    Unassigned,
    /// The loads were too uneven.
    Rebalance,
}

impl MoveReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ShardRemoved => "shard_removed",
            Self::ShardDown => "shard_down",
            Self::Unassigned => "unassigned",
            Self::Rebalance => "rebalance",
        }
    }
}

/// One tenant to relabel from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub tenant: String,
    pub from: Option<ShardIndex>,
    pub to: ShardIndex,
    pub reason: MoveReason,
}

/// The outcome of one planning pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Desired placement of every tenant.
    pub placement: Placement,
    /// Moves in the order to try them: rescues (removed, down, unassigned) first, then
    /// rebalance; within a reason by tenant name.
    pub moves: Vec<Move>,
    /// Tenants on a removed shard or a shard down past the grace period: nobody reconciles them.
    pub stranded: BTreeSet<String>,
    /// Shards that reconcile their tenants: below K and ready.
    pub live: BTreeSet<ShardIndex>,
    /// `(max − min) / avg` of the current loads over shards below K (0 without load).
    pub imbalance: f64,
}

/// Plans one sync. `health` covers shards `0..K` (a shard missing from it counts as just gone
/// down); `cooling(tenant)` says the tenant moved recently and may not be rebalanced yet.
pub fn plan(
    tenants: &[TenantInfo],
    health: &BTreeMap<ShardIndex, ShardHealth>,
    policy: &Policy,
    cooling: impl Fn(&str) -> bool,
) -> Plan {
    let k = policy.shard_count.max(1);
    let health_of = |i: ShardIndex| {
        health
            .get(&i)
            .copied()
            .unwrap_or(ShardHealth::Down(Duration::ZERO))
    };
    let drained = |i: ShardIndex| matches!(health_of(i), ShardHealth::Down(d) if d >= policy.grace);
    let live: BTreeSet<ShardIndex> = (0..k)
        .filter(|&i| health_of(i) == ShardHealth::Ready)
        .collect();
    let reason_for = |t: &TenantInfo| match t.current {
        None => MoveReason::Unassigned,
        Some(c) if c >= k => MoveReason::ShardRemoved,
        Some(c) if drained(c) => MoveReason::ShardDown,
        Some(_) => MoveReason::Rebalance,
    };
    let stranded = tenants
        .iter()
        .filter(|t| {
            matches!(
                reason_for(t),
                MoveReason::ShardRemoved | MoveReason::ShardDown
            )
        })
        .map(|t| t.namespace.clone())
        .collect();

    // Tenants on a drained shard are placed afresh, like those of a removed shard; deleting
    // tenants keep their shard (compute_placement never moves them).
    let inputs: Vec<TenantInfo> = tenants
        .iter()
        .map(|t| TenantInfo {
            current: t.current.filter(|&c| t.deleting || c >= k || !drained(c)),
            ..t.clone()
        })
        .collect();
    let config = PlacementConfig {
        shard_count: k,
        pinned: policy.pinned.clone(),
        unready: (0..k).filter(|i| !live.contains(i)).collect(),
        rebalance_threshold: policy.rebalance_threshold,
    };
    let placement = compute_placement(&inputs, &config, |t| !cooling(t));

    let mut moves: Vec<Move> = tenants
        .iter()
        // Deleting tenants never move; an empty tenant never placed has nothing to reconcile
        // (the webhook places it with its first release).
        .filter(|t| !t.deleting && (t.weight > 0 || t.current.is_some()))
        .filter_map(|t| {
            let to = *placement.assignments.get(&t.namespace)?;
            (Some(to) != t.current && to < k).then(|| Move {
                tenant: t.namespace.clone(),
                from: t.current,
                to,
                reason: reason_for(t),
            })
        })
        .collect();
    moves.sort_by(|a, b| (a.reason, &a.tenant).cmp(&(b.reason, &b.tenant)));

    Plan {
        imbalance: imbalance(tenants, k),
        placement,
        moves,
        stranded,
        live,
    }
}

/// `(max − min) / avg` of the loads the tenants put on shards `0..k` now.
fn imbalance(tenants: &[TenantInfo], k: u32) -> f64 {
    let mut loads = vec![0u64; k as usize];
    for t in tenants {
        if let Some(load) = t.current.and_then(|c| loads.get_mut(c as usize)) {
            *load += t.weight;
        }
    }
    let total: u64 = loads.iter().sum();
    let (Some(max), Some(min)) = (loads.iter().max(), loads.iter().min()) else {
        return 0.0;
    };
    if total == 0 {
        return 0.0;
    }
    (max - min) as f64 / (total as f64 / f64::from(k))
}

/// What a fresh read of one HelmRelease says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReleaseState {
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// Ready is Unknown or Reconciling is True: an install, upgrade or rollback is running.
    pub in_progress: bool,
}

/// Why a release may not be relabelled now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// Being deleted: its current controller must finish the uninstall.
    Deleting,
    /// Mid install/upgrade on a shard that is still running it.
    InProgress,
}

impl Blocked {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleting => "deleting",
            Self::InProgress => "in_progress",
        }
    }
}

/// Whether a release carrying shard key `key` may be relabelled. A deleting release never is.
/// One in progress is left alone while a live shard (or an unknown controller, for a
/// non-canonical key) may still be running it; on a removed or drained shard nobody is, and
/// its status is stale, so waiting would strand it forever (the new shard's helm-controller
/// unlocks a release left pending).
pub fn release_gate(
    key: Option<&str>,
    state: ReleaseState,
    live: &BTreeSet<ShardIndex>,
    shard_count: u32,
) -> Result<(), Blocked> {
    if state.deleting {
        return Err(Blocked::Deleting);
    }
    let running_elsewhere = match key.map(parse_shard_index) {
        Some(Ok(shard)) => shard < shard_count.max(1) && live.contains(&shard),
        _ => true,
    };
    if state.in_progress && running_elsewhere {
        return Err(Blocked::InProgress);
    }
    Ok(())
}

/// The autosize signal for operators (docs/design.md §S6): the raw recommendation and the count a controller
/// sizing automatically would run, given the shards running now (hysteresis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    pub raw: u64,
    pub with_hysteresis: u64,
}

pub fn recommend(helmreleases: u64, tenants: u64, running: u64) -> Recommendation {
    Recommendation {
        raw: recommended_shard_count(helmreleases, tenants),
        with_hysteresis: effective_shard_count(helmreleases, tenants, running),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
