//! What the webhook knows about the cluster, fed by watch events (see `watch.rs`) and read
//! synchronously when placing a tenant. No I/O here.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use placement::shard::{NAMESPACE_SHARD_LABEL, SHARD_KEY_LABEL, ShardIndex, parse_shard_index};
use placement::{Placement, PlacementConfig, TenantInfo, compute_placement, tenant};
use runtime::watch::Projected;

pub type SharedIndex = Arc<RwLock<Index>>;

/// Reads the shared index. Writers never panic while holding the lock, so a poisoned lock
/// still holds consistent data.
pub fn read(index: &SharedIndex) -> RwLockReadGuard<'_, Index> {
    runtime::lock::read(index)
}

pub fn write(index: &SharedIndex) -> RwLockWriteGuard<'_, Index> {
    runtime::lock::write(index)
}

/// One HelmRelease, reduced to what placement needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Tenant namespace it is attributed to; `None` for non-tenant releases.
    pub tenant: Option<String>,
    /// Value of `sharding.fluxcd.io/key`, if any.
    pub key: Option<String>,
}

impl Release {
    pub fn new(namespace: &str, name: &str, labels: &BTreeMap<String, String>) -> Self {
        Self {
            tenant: tenant::tenant_namespace_for_hr(namespace, name, labels),
            key: labels.get(SHARD_KEY_LABEL).cloned(),
        }
    }
}

/// One tenant Namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantNamespace {
    /// Value of `internal.cozystack.io/flux-shard`, if any.
    pub label: Option<String>,
    /// Has a deletionTimestamp.
    pub deleting: bool,
}

impl TenantNamespace {
    pub fn new(labels: &BTreeMap<String, String>, deleting: bool) -> Self {
        Self {
            label: labels.get(NAMESPACE_SHARD_LABEL).cloned(),
            deleting,
        }
    }

    /// The recorded shard when it is canonical.
    fn shard(&self) -> Option<ShardIndex> {
        self.label
            .as_deref()
            .and_then(|l| parse_shard_index(l).ok())
    }
}

/// Which watches have delivered their initial list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    pub releases: bool,
    pub namespaces: bool,
    pub deployments: bool,
}

impl Synced {
    /// Whether placement may trust the index; Deployments matter only when readiness is read.
    pub fn ready(&self, need_deployments: bool) -> bool {
        self.releases && self.namespaces && (self.deployments || !need_deployments)
    }
}

/// Counts for the gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub tenants: u64,
    /// HelmReleases attributed to tenants.
    pub tenant_releases: u64,
    /// HelmReleases carrying the shard key at all (what autosizing counts, docs/design.md §S6).
    pub keyed_releases: u64,
}

/// The watched kinds, each projected by `watch.rs` (relists applied atomically, see
/// `runtime::watch`).
#[derive(Debug, Default)]
pub struct Index {
    /// `(namespace, name)` → release.
    pub releases: Projected<(String, String), Release>,
    /// Only `tenant-*` namespaces are kept.
    pub namespaces: Projected<String, TenantNamespace>,
    /// Shard index → ready (readyReplicas > 0) of `helm-controller-shard<i>`.
    pub deployments: Projected<ShardIndex, bool>,
}

// === impl Index ===

impl Index {
    pub fn shared() -> SharedIndex {
        Arc::new(RwLock::new(Self::default()))
    }

    pub fn synced(&self) -> Synced {
        Synced {
            releases: self.releases.is_synced(),
            namespaces: self.namespaces.is_synced(),
            deployments: self.deployments.is_synced(),
        }
    }

    pub fn apply_release(&mut self, namespace: &str, name: &str, release: Release) {
        self.releases
            .insert((namespace.to_owned(), name.to_owned()), release);
    }

    pub fn delete_release(&mut self, namespace: &str, name: &str) {
        self.releases
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Only `tenant-*` namespaces are kept.
    pub fn apply_namespace(&mut self, name: &str, ns: TenantNamespace) {
        if tenant::is_tenant_namespace(name) {
            self.namespaces.insert(name.to_owned(), ns);
        }
    }

    /// Records the label this replica just wrote, ahead of the watch event.
    pub fn record_label(&mut self, namespace: &str, shard: ShardIndex) {
        let entry = self.namespaces.entry(namespace.to_owned()).or_default();
        entry.label = Some(placement::shard_name(shard));
    }

    pub fn apply_deployment(&mut self, shard: ShardIndex, ready: bool) {
        self.deployments.insert(shard, ready);
    }

    pub fn delete_deployment(&mut self, shard: ShardIndex) {
        self.deployments.remove(&shard);
    }

    /// The tenant's recorded shard when it is canonical and below `k`.
    pub fn recorded_shard(&self, tenant: &str, k: u32) -> Option<ShardIndex> {
        self.namespaces
            .get(tenant)
            .and_then(TenantNamespace::shard)
            .filter(|&s| s < k)
    }

    /// Shard index → ready, of every `helm-controller-shard<i>` Deployment seen.
    pub fn shard_deployments(&self) -> &BTreeMap<ShardIndex, bool> {
        &self.deployments
    }

    /// The tenant Namespace, if it exists.
    pub fn tenant_namespace(&self, tenant: &str) -> Option<&TenantNamespace> {
        self.namespaces.get(tenant)
    }

    /// Every tenant's HelmReleases as `(namespace, name, shard key)`, in one pass.
    pub fn releases_by_tenant(&self) -> BTreeMap<String, Vec<(String, String, Option<String>)>> {
        let mut by_tenant: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for ((ns, name), release) in self.releases.iter() {
            if let Some(tenant) = &release.tenant {
                by_tenant.entry(tenant.clone()).or_default().push((
                    ns.clone(),
                    name.clone(),
                    release.key.clone(),
                ));
            }
        }
        by_tenant
    }

    /// Shards below `k` without a ready Deployment.
    pub fn unready_shards(&self, k: u32) -> BTreeSet<ShardIndex> {
        (0..k)
            .filter(|i| !self.deployments.get(i).copied().unwrap_or(false))
            .collect()
    }

    /// Every known tenant with its weight, current shard and deletion state.
    ///
    /// * Weight = attributed HelmReleases; a tenant with a recorded shard counts at least 1, so
    ///   a burst of new tenants (whose first release is still in flight) spreads out instead of
    ///   piling onto one shard.
    /// * Current = the namespace label if canonical, else the majority canonical key among the
    ///   tenant's releases (ties to the lowest index), as the placement controller reads it.
    pub fn tenants(&self) -> Vec<TenantInfo> {
        let mut weights: BTreeMap<&str, u64> = BTreeMap::new();
        let mut votes: BTreeMap<&str, BTreeMap<ShardIndex, u64>> = BTreeMap::new();
        for release in self.releases.values() {
            let Some(tenant) = release.tenant.as_deref() else {
                continue;
            };
            *weights.entry(tenant).or_default() += 1;
            if let Some(shard) = release
                .key
                .as_deref()
                .and_then(|k| parse_shard_index(k).ok())
            {
                *votes.entry(tenant).or_default().entry(shard).or_default() += 1;
            }
        }
        for name in self.namespaces.keys() {
            weights.entry(name).or_default();
        }
        weights
            .into_iter()
            .map(|(tenant, weight)| {
                let ns = self.namespaces.get(tenant);
                let recorded = ns.and_then(TenantNamespace::shard);
                let majority = || {
                    let votes = votes.get(tenant)?;
                    votes
                        .iter()
                        .max_by_key(|&(&shard, &n)| (n, std::cmp::Reverse(shard)))
                        .map(|(&s, _)| s)
                };
                TenantInfo {
                    namespace: tenant.to_owned(),
                    weight: if recorded.is_some() {
                        weight.max(1)
                    } else {
                        weight
                    },
                    current: recorded.or_else(majority),
                    deleting: ns.is_some_and(|n| n.deleting),
                }
            })
            .collect()
    }

    /// The shard for `tenant`, which is about to get one more HelmRelease: its current shard
    /// if valid, else the least-loaded ready shard. Never moves other tenants (no rebalance).
    pub fn place(&self, tenant: &str, config: &PlacementConfig) -> Option<ShardIndex> {
        let mut tenants = self.tenants();
        match tenants.iter_mut().find(|t| t.namespace == tenant) {
            Some(t) => t.weight += 1,
            None => tenants.push(TenantInfo {
                namespace: tenant.to_owned(),
                weight: 1,
                current: None,
                deleting: false,
            }),
        }
        let config = PlacementConfig {
            rebalance_threshold: 0.0,
            ..config.clone()
        };
        let placed = compute_placement(&tenants, &config, |_| false)
            .assignments
            .get(tenant)
            .copied();
        placed.filter(|&s| s < config.shard_count.max(1))
    }

    /// The desired placement of every known tenant (for the load gauges).
    pub fn placement(&self, config: &PlacementConfig) -> Placement {
        compute_placement(&self.tenants(), config, |_| false)
    }

    pub fn totals(&self) -> Totals {
        let tenant_releases = self
            .releases
            .values()
            .filter(|r| r.tenant.is_some())
            .count() as u64;
        let keyed_releases = self.releases.values().filter(|r| r.key.is_some()).count() as u64;
        Totals {
            tenants: self.tenants().len() as u64,
            tenant_releases,
            keyed_releases,
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
