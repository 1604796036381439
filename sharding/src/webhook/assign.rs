//! Resolving a tenant's shard at admission time: the namespace label when recorded,
//! otherwise a fresh placement recorded on the namespace with an optimistic-concurrency
//! patch, so concurrent creates for one tenant (in this replica or another) agree.
use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use placement::PlacementConfig;
use placement::shard::{NAMESPACE_SHARD_LABEL, ShardIndex, shard_name};
use serde_json::json;
use tokio::time::timeout;
use tracing::{debug, info, warn};

use super::metrics::Metrics;
use super::mutate::{Pending, Reason};
use crate::index::{self, Index, SharedIndex, TenantNamespace};

/// Placement locks: a tenant hashes to one of these, so concurrent creates for one tenant in this
/// replica place it once, with memory fixed however many tenant names reviews carry.
const LOCK_STRIPES: usize = 64;

/// Label writes per admission: a conflict means another writer just labelled the namespace,
/// and the re-read adopts its choice, so a second conflict in a row is already unusual.
const WRITE_ATTEMPTS: usize = 3;

/// Result of a conditional namespace write.
enum Write {
    Done,
    /// The namespace changed since it was read (409).
    Conflict,
}

/// Fixed placement policy of this webhook.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Shard count K.
    pub shards: u32,
    /// Tenant → shard pins, used when a tenant is first placed.
    pub pinned: BTreeMap<String, ShardIndex>,
    /// Treat every shard `< K` as ready instead of reading the shard Deployments.
    pub assume_ready: bool,
}

impl Policy {
    pub fn config(&self, index: &Index) -> PlacementConfig {
        PlacementConfig {
            shard_count: self.shards,
            pinned: self.pinned.clone(),
            unready: if self.assume_ready {
                Default::default()
            } else {
                index.unready_shards(self.shards)
            },
            rebalance_threshold: 0.0,
        }
    }
}

pub struct Resolver {
    index: SharedIndex,
    namespaces: Api<Namespace>,
    policy: Policy,
    api_timeout: Duration,
    metrics: Metrics,
    /// [`LOCK_STRIPES`] locks, a tenant's chosen by hash of its name.
    locks: Vec<tokio::sync::Mutex<()>>,
}

// === impl Resolver ===

impl Resolver {
    pub fn new(
        index: SharedIndex,
        namespaces: Api<Namespace>,
        policy: Policy,
        api_timeout: Duration,
        metrics: Metrics,
    ) -> Self {
        Self {
            index,
            namespaces,
            policy,
            api_timeout,
            metrics,
            locks: (0..LOCK_STRIPES).map(|_| Default::default()).collect(),
        }
    }

    /// The shard the pending release's tenant lives on; `Err` says why it stays unchanged.
    pub async fn shard_for(&self, pending: &Pending) -> Result<ShardIndex, Reason> {
        let tenant = pending.tenant.as_str();
        if !index::read(&self.index)
            .synced()
            .ready(!self.policy.assume_ready)
        {
            return Err(Reason::NotSynced);
        }
        if let Some(shard) = self.recorded(tenant) {
            return Ok(shard);
        }
        let _placing = self.tenant_lock(tenant).lock().await;
        // Another request may have placed the tenant while this one waited.
        if let Some(shard) = self.recorded(tenant) {
            return Ok(shard);
        }
        for _ in 0..WRITE_ATTEMPTS {
            let Some(ns) = self.get_namespace(tenant).await? else {
                // A parent Tenant release arrives before its namespace exists. Place it anyway:
                // the stamped release label carries the choice, and the namespace adopts it
                // (majority of its releases) on the next create. Nothing is recorded in the
                // index: shard load comes only from watched state, never from a review (a
                // forged review for a namespace that does not exist must not weigh anywhere).
                let shard = self.choose(tenant)?;
                debug!(%tenant, shard = %shard_name(shard), "placed tenant without namespace");
                return Ok(shard);
            };
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            let deleting = ns.metadata.deletion_timestamp.is_some();
            index::write(&self.index)
                .apply_namespace(tenant, TenantNamespace::new(&labels, deleting));
            if let Some(shard) = self.recorded(tenant) {
                return Ok(shard);
            }
            let shard = self.choose(tenant)?;
            if pending.dry_run {
                return Ok(shard);
            }
            match self
                .record(tenant, ns.metadata.resource_version, shard)
                .await?
            {
                Write::Done => return Ok(shard),
                // Someone labelled the namespace since the read: re-read and adopt.
                Write::Conflict => continue,
            }
        }
        Err(Reason::ApiError)
    }

    fn recorded(&self, tenant: &str) -> Option<ShardIndex> {
        index::read(&self.index).recorded_shard(tenant, self.policy.shards)
    }

    fn choose(&self, tenant: &str) -> Result<ShardIndex, Reason> {
        let index = index::read(&self.index);
        index
            .place(tenant, &self.policy.config(&index))
            .ok_or(Reason::NoReadyShard)
    }

    fn tenant_lock(&self, tenant: &str) -> &tokio::sync::Mutex<()> {
        let mut hasher = std::hash::DefaultHasher::new();
        tenant.hash(&mut hasher);
        &self.locks[hasher.finish() as usize % self.locks.len()]
    }

    async fn get_namespace(&self, name: &str) -> Result<Option<Namespace>, Reason> {
        match timeout(self.api_timeout, self.namespaces.get_opt(name)).await {
            Ok(Ok(ns)) => Ok(ns),
            Ok(Err(error)) => {
                warn!(%error, namespace = %name, "cannot read tenant namespace");
                Err(Reason::ApiError)
            }
            Err(_) => {
                warn!(namespace = %name, timeout = ?self.api_timeout, "reading tenant namespace timed out");
                Err(Reason::Timeout)
            }
        }
    }

    /// Writes the label, conditional on `resource_version`.
    async fn record(
        &self,
        tenant: &str,
        resource_version: Option<String>,
        shard: ShardIndex,
    ) -> Result<Write, Reason> {
        // A merge patch carrying metadata.resourceVersion is rejected with 409 Conflict when the
        // namespace changed since it was read: the optimistic-concurrency precondition.
        let body = json!({
            "metadata": {
                "resourceVersion": resource_version,
                "labels": { NAMESPACE_SHARD_LABEL: shard_name(shard) },
            }
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let write = self.namespaces.patch(tenant, &params, &patch);
        match timeout(self.api_timeout, write).await {
            Ok(Ok(_)) => {
                self.metrics.label_write("ok");
                self.metrics.placed();
                index::write(&self.index).record_label(tenant, shard);
                info!(%tenant, shard = %shard_name(shard), "placed tenant");
                Ok(Write::Done)
            }
            Ok(Err(kube::Error::Api(status))) if status.is_conflict() => {
                self.metrics.label_write("conflict");
                debug!(%tenant, "namespace changed while placing; re-reading");
                Ok(Write::Conflict)
            }
            Ok(Err(error)) => {
                self.metrics.label_write("error");
                warn!(%error, %tenant, "cannot record the tenant's shard");
                Err(Reason::ApiError)
            }
            Err(_) => {
                self.metrics.label_write("timeout");
                warn!(%tenant, timeout = ?self.api_timeout, "recording the tenant's shard timed out");
                Err(Reason::Timeout)
            }
        }
    }
}
