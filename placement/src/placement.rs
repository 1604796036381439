//! Least-loaded tenant placement with an optional rebalance plan
//! (docs/design.md §S3, §S4).
//!
//! Settled tenants stay where they are; only unassigned tenants (new, legacy, or on a removed
//! shard) are placed, heaviest first, each on the currently least-loaded ready shard. So
//! scale-down moves only tenants of removed shards and scale-up never touches settled tenants.
//! The rebalance pass then moves single tenants off the heaviest shard while the relative
//! spread exceeds the threshold and a move strictly narrows it.
use std::collections::{BTreeMap, BTreeSet};

use crate::shard::ShardIndex;

/// What placement knows about one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantInfo {
    /// Tenant namespace (the unit of placement).
    pub namespace: String,
    /// HelmReleases attributed to the tenant (parent + children).
    pub weight: u64,
    /// Current canonical shard, `None` when unassigned or legacy (`tenants`).
    pub current: Option<ShardIndex>,
    /// The namespace is being deleted: the tenant is never moved.
    pub deleting: bool,
}

/// Knobs of one placement run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlacementConfig {
    /// Shard count K; 0 is treated as 1.
    pub shard_count: u32,
    /// Tenant namespace → pinned shard. A pin to a shard ≥ K is ignored.
    pub pinned: BTreeMap<String, ShardIndex>,
    /// Shards that must not receive tenants (not ready). Settled tenants stay on them.
    pub unready: BTreeSet<ShardIndex>,
    /// Rebalance while `(max − min) / avg` exceeds this; 0 disables rebalancing.
    pub rebalance_threshold: f64,
}

/// The desired placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Tenant namespace → target shard. Deleting tenants may keep a shard ≥ K.
    pub assignments: BTreeMap<String, ShardIndex>,
    /// Load (sum of weights) of each shard `0..K`.
    pub loads: Vec<u64>,
    /// Tenants that needed a shard while no shard `< K` was ready.
    pub unplaced: Vec<String>,
}

/// Computes the desired placement. `can_rebalance(ns)` says whether a tenant may be moved by
/// the rebalance pass now (the caller's cooldown).
pub fn compute_placement(
    tenants: &[TenantInfo],
    config: &PlacementConfig,
    can_rebalance: impl Fn(&str) -> bool,
) -> Placement {
    let k = config.shard_count.max(1);
    let mut sorted: Vec<&TenantInfo> = tenants.iter().collect();
    sorted.sort_by(|a, b| a.namespace.cmp(&b.namespace));

    let valid_pin = |t: &TenantInfo| {
        config
            .pinned
            .get(&t.namespace)
            .copied()
            .filter(|&pin| !t.deleting && pin < k)
    };
    let mut placement = Placement {
        loads: vec![0; k as usize],
        ..Placement::default()
    };
    let mut unassigned = Vec::new();
    for t in &sorted {
        let kept = match (valid_pin(t), t.current) {
            (Some(pin), _) => Some(pin),
            (None, Some(cur)) if cur < k || t.deleting => Some(cur),
            _ => None,
        };
        match kept {
            Some(shard) => placement.assign(t, shard),
            None => unassigned.push(*t),
        }
    }

    // LPT: heaviest first, ties by name (the sort above is stable).
    unassigned.sort_by_key(|t| std::cmp::Reverse(t.weight));
    let ready = |i: usize| !config.unready.contains(&(i as ShardIndex));
    for t in unassigned {
        match argmin(&placement.loads, ready) {
            Some(shard) => placement.assign(t, shard),
            None => placement.unplaced.push(t.namespace.clone()),
        }
    }

    if k >= 2 && config.rebalance_threshold > 0.0 {
        let movable = |t: &TenantInfo| {
            !t.deleting && t.weight > 0 && valid_pin(t).is_none() && can_rebalance(&t.namespace)
        };
        let candidates: Vec<&TenantInfo> = sorted.into_iter().filter(|t| movable(t)).collect();
        placement.rebalance(&candidates, config.rebalance_threshold, ready);
    }
    placement
}

// === impl Placement ===

impl Placement {
    fn assign(&mut self, t: &TenantInfo, shard: ShardIndex) {
        self.assignments.insert(t.namespace.clone(), shard);
        if let Some(load) = self.loads.get_mut(shard as usize) {
            *load += t.weight;
        }
    }

    /// Moves one tenant at a time from the heaviest shard to the lightest ready one.
    fn rebalance(
        &mut self,
        candidates: &[&TenantInfo],
        threshold: f64,
        ready: impl Fn(usize) -> bool,
    ) {
        let total: u64 = self.loads.iter().sum();
        if total == 0 {
            return;
        }
        let avg = total as f64 / self.loads.len() as f64;
        for _ in 0..candidates.len() {
            let (Some(max), Some(min)) = (argmax(&self.loads), argmin(&self.loads, &ready)) else {
                return;
            };
            let (l_max, l_min) = (self.loads[max as usize], self.loads[min as usize]);
            if max == min || (l_max - l_min) as f64 / avg <= threshold {
                return;
            }
            // The tenant whose move leaves the two shards closest; ties to the lighter one.
            let after = |w: u64| (l_max - w).abs_diff(l_min + w);
            let best = candidates
                .iter()
                .filter(|t| self.assignments.get(&t.namespace) == Some(&max))
                .min_by_key(|t| (after(t.weight), t.weight));
            let Some(best) = best.filter(|t| after(t.weight) < l_max - l_min) else {
                return;
            };
            self.loads[max as usize] -= best.weight;
            self.assign(best, min);
        }
    }
}

/// Least-loaded shard accepted by `ok`, ties to the lowest index.
fn argmin(loads: &[u64], ok: impl Fn(usize) -> bool) -> Option<ShardIndex> {
    (0..loads.len())
        .filter(|&i| ok(i))
        .min_by_key(|&i| (loads[i], i))
        .map(|i| i as ShardIndex)
}

/// Most-loaded shard, ties to the lowest index.
fn argmax(loads: &[u64]) -> Option<ShardIndex> {
    (0..loads.len())
        .max_by_key(|&i| (loads[i], std::cmp::Reverse(i)))
        .map(|i| i as ShardIndex)
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
