//! Where the current instance count and the sync quorum come from: the CNPG `Cluster` objects
//! (through the Kubernetes API) or, in metrics-only mode, nothing (the decision then counts
//! instance series).
//!
//! `serve` watches every Cluster once and answers lookups from memory, so decisions cost no API
//! call; `explain` reads the one Cluster it needs.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::Metrics;
use scaler_core::cluster::{ClusterFacts, Snapshot, facts_from};
use scaler_core::quota::Quota;

/// `--topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Use the Kubernetes API when a client can be built (kubeconfig or in-cluster), else metrics.
    Auto,
    /// Require the Kubernetes API.
    Kube,
    /// Never touch a Kubernetes API; count instance series instead.
    Metrics,
}

/// Reads a ResourceQuota's hard limits and usage.
pub fn quota_from(object: &ResourceQuota) -> Result<Quota, String> {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let spec = object.spec.as_ref();
    let scoped = spec.is_some_and(|s| {
        s.scopes.as_ref().is_some_and(|v| !v.is_empty()) || s.scope_selector.is_some()
    });
    fn pairs(map: &BTreeMap<String, Quantity>) -> Vec<(&str, &str)> {
        map.iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect()
    }
    let empty = Default::default();
    let hard = spec.and_then(|s| s.hard.as_ref()).unwrap_or(&empty);
    let used = object.status.as_ref().and_then(|s| s.used.as_ref());
    Quota::parse(name, scoped, pairs(hard), used.map(pairs))
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    #[error("CNPG Cluster {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("the CNPG Cluster and ResourceQuota lists are not loaded yet")]
    NotSynced,
    #[error("cannot read CNPG Cluster or ResourceQuotas: {0}")]
    Api(String),
    #[error("reading the CNPG Cluster and ResourceQuotas timed out after {0:?}")]
    Timeout(Duration),
}

pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Cluster"),
        "clusters",
    )
}

/// The chosen source of Cluster facts.
#[derive(Clone)]
pub enum Topology {
    Metrics,
    /// A watch-fed index of every Cluster (serve).
    Watched(ClusterIndex),
    /// One GET per lookup (explain).
    Direct {
        client: kube::Client,
        timeout: Duration,
    },
}

impl Topology {
    /// Resolves `mode` into a client, or metrics-only; `Kube` fails without a client.
    pub async fn client(mode: Mode) -> anyhow::Result<Option<kube::Client>> {
        match mode {
            Mode::Metrics => Ok(None),
            Mode::Kube => Ok(Some(kube::Client::try_default().await.map_err(|e| {
                anyhow::anyhow!("--topology kube: cannot build a Kubernetes client: {e}")
            })?)),
            Mode::Auto => match kube::Client::try_default().await {
                Ok(client) => Ok(Some(client)),
                Err(error) => {
                    info!(%error, "no Kubernetes client; using metrics-only topology");
                    Ok(None)
                }
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Metrics => "metrics",
            Self::Watched(_) | Self::Direct { .. } => "kube",
        }
    }

    /// `Ok(None)` in metrics-only mode; otherwise the Cluster's facts and its namespace's
    /// ResourceQuotas, or an error.
    pub async fn lookup(
        &self,
        namespace: &str,
        name: &str,
        metrics: &Metrics,
    ) -> Result<Option<Snapshot>, TopologyError> {
        match self {
            Self::Metrics => Ok(None),
            Self::Watched(index) => index.get(namespace, name).map(Some),
            Self::Direct { client, timeout } => {
                let start = Instant::now();
                let result = tokio::time::timeout(*timeout, read(client, namespace, name))
                    .await
                    .unwrap_or(Err(TopologyError::Timeout(*timeout)));
                let outcome = match &result {
                    Ok(_) | Err(TopologyError::NotFound { .. }) => "ok",
                    Err(TopologyError::Timeout(_)) => "timeout",
                    Err(_) => "error",
                };
                metrics.backend("cluster", outcome, start.elapsed().as_secs_f64());
                result.map(Some)
            }
        }
    }
}

/// One Cluster GET and one ResourceQuota LIST of its namespace, concurrently.
async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Snapshot, TopologyError> {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default();
    let (cluster, quotas) = tokio::join!(clusters.get_opt(name), quotas.list(&params));
    let api = |e: kube::Error| TopologyError::Api(e.to_string());
    let cluster = cluster
        .map_err(api)?
        .ok_or_else(|| TopologyError::NotFound {
            namespace: namespace.into(),
            name: name.into(),
        })?;
    Ok(Snapshot {
        cluster: facts_from(&cluster.data).map_err(TopologyError::Api)?,
        quotas: quotas
            .map_err(api)?
            .items
            .iter()
            .map(quota_from)
            .collect::<Result<_, _>>()
            .map_err(TopologyError::Api)?,
    })
}

/// Objects of one kind by namespace, then name.
pub type Namespaced<V> = HashMap<String, BTreeMap<String, V>>;

/// One watched kind: its objects, and whether the first full list has landed.
struct Watched<V> {
    objects: RwLock<Namespaced<V>>,
    synced: AtomicBool,
}

impl<V> Default for Watched<V> {
    fn default() -> Self {
        Self {
            objects: RwLock::default(),
            synced: AtomicBool::default(),
        }
    }
}

impl<V> Watched<V> {
    /// Applies one watch event; `pending` buffers a relist until it is complete. Objects `read`
    /// cannot understand are skipped with a warning.
    fn apply<K: kube::Resource>(
        &self,
        event: watcher::Event<K>,
        pending: &mut Namespaced<V>,
        kind: &'static str,
        read: impl Fn(&K) -> Result<V, String>,
    ) {
        let entry = |object: &K| -> Option<(String, String, V)> {
            let (ns, name) = (
                object.meta().namespace.clone()?,
                object.meta().name.clone()?,
            );
            match read(object) {
                Ok(value) => Some((ns, name, value)),
                Err(error) => {
                    warn!(namespace = %ns, %name, %kind, %error, "skipping unreadable object");
                    None
                }
            }
        };
        let insert = |map: &mut Namespaced<V>, (ns, name, value): (String, String, V)| {
            map.entry(ns).or_default().insert(name, value);
        };
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Init => pending.clear(),
            watcher::Event::InitApply(object) => {
                if let Some(e) = entry(&object) {
                    insert(pending, e);
                }
            }
            watcher::Event::InitDone => {
                *objects = std::mem::take(pending);
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(object) => match entry(&object) {
                Some(e) => insert(&mut objects, e),
                None => remove(&mut objects, object.meta()),
            },
            watcher::Event::Delete(object) => remove(&mut objects, object.meta()),
        }
    }

    fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

fn remove<V>(objects: &mut Namespaced<V>, meta: &kube::api::ObjectMeta) {
    if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name)
        && let Some(names) = objects.get_mut(ns)
    {
        names.remove(name);
        if names.is_empty() {
            objects.remove(ns);
        }
    }
}

/// Every Cluster's facts and every namespace's ResourceQuotas, kept current by two watches.
#[derive(Clone, Default)]
pub struct ClusterIndex {
    clusters: Arc<Watched<ClusterFacts>>,
    quotas: Arc<Watched<Quota>>,
}

impl ClusterIndex {
    /// Starts watching Clusters and ResourceQuotas in all namespaces; the index is synced after
    /// the first full list of both.
    pub fn spawn(client: kube::Client, shutdown: CancellationToken) -> Self {
        let index = Self::default();
        let this = index.clone();
        spawn_watch(
            Api::all_with(client.clone(), &cluster_resource()),
            "CNPG Clusters",
            shutdown.clone(),
            move |event, pending| this.apply_cluster(event, pending),
        );
        let this = index.clone();
        spawn_watch(
            Api::all(client),
            "ResourceQuotas",
            shutdown,
            move |event, pending| this.apply_quota(event, pending),
        );
        index
    }

    pub fn apply_cluster(
        &self,
        event: watcher::Event<DynamicObject>,
        pending: &mut Namespaced<ClusterFacts>,
    ) {
        self.clusters
            .apply(event, pending, "Cluster", |object| facts_from(&object.data));
    }

    pub fn apply_quota(
        &self,
        event: watcher::Event<ResourceQuota>,
        pending: &mut Namespaced<Quota>,
    ) {
        self.quotas
            .apply(event, pending, "ResourceQuota", quota_from);
    }

    pub fn is_synced(&self) -> bool {
        self.clusters.is_synced() && self.quotas.is_synced()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Result<Snapshot, TopologyError> {
        if !self.is_synced() {
            return Err(TopologyError::NotSynced);
        }
        let clusters = self
            .clusters
            .objects
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let cluster = clusters
            .get(namespace)
            .and_then(|names| names.get(name))
            .copied()
            .ok_or_else(|| TopologyError::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let quotas = self
            .quotas
            .objects
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Ok(Snapshot {
            cluster,
            quotas: quotas
                .get(namespace)
                .map(|names| names.values().cloned().collect())
                .unwrap_or_default(),
        })
    }
}

/// Runs a watch until `shutdown`, feeding each event (with its relist buffer) to `apply`.
fn spawn_watch<K, V: Send + 'static>(
    api: Api<K>,
    what: &'static str,
    shutdown: CancellationToken,
    mut apply: impl FnMut(watcher::Event<K>, &mut Namespaced<V>) + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut pending = Namespaced::new();
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                None => return,
                Some(Ok(event)) => apply(event, &mut pending),
                Some(Err(error)) => warn!(%error, "watching {what} failed; retrying"),
            }
        }
    });
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
