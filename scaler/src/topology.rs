//! Where the current instance count and the sync quorum come from: the CNPG `Cluster` and Redis
//! `RedisFailover` objects (through the Kubernetes API) or, in metrics-only mode, nothing (the
//! decision then counts instance series).
//!
//! `serve` watches every Cluster and RedisFailover once and answers lookups from memory, so
//! decisions cost no API call; `explain` reads the one object it needs.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher;
use runtime::app::App;
use runtime::lock;
use runtime::watch::{self, Project, Projected};
use tracing::{Instrument as _, info, info_span, warn};

use crate::counted::BackendQuery;
use crate::metrics::Metrics;
use scaler_core::cluster::{ClusterFacts, Snapshot, facts_from, failover_facts_from};
use scaler_core::metadata::Engine;
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

/// Reads a ResourceQuota's hard limits and usage; one that does not parse is kept as
/// unreadable, so it holds growth instead of dropping out of the guard.
pub fn quota_from(object: &ResourceQuota) -> Quota {
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
        .unwrap_or_else(|error| Quota::unreadable(name, scoped, error))
}

/// The kinds whose spec says a database's current count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// CloudNativePG `Cluster`: `spec.instances`.
    Cluster,
    /// Redis `RedisFailover`: `spec.redis.replicas` (what the ScaleAdapter writes).
    Failover,
}

impl Kind {
    /// The kind an engine's count lives in; a Pooler's count is its instance series'.
    pub fn of(engine: Engine) -> Option<Self> {
        match engine {
            Engine::Cnpg => Some(Self::Cluster),
            Engine::Redis => Some(Self::Failover),
            Engine::Pgbouncer => None,
        }
    }

    pub fn resource(self) -> ApiResource {
        match self {
            Self::Cluster => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Cluster"),
                "clusters",
            ),
            Self::Failover => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("databases.spotahome.com", "v1", "RedisFailover"),
                "redisfailovers",
            ),
        }
    }

    fn facts(self, object: &serde_json::Value) -> Result<Arc<ClusterFacts>, String> {
        match self {
            Self::Cluster => facts_from(object),
            Self::Failover => failover_facts_from(object),
        }
        .map(Arc::new)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cluster => "CNPG Cluster",
            Self::Failover => "RedisFailover",
        })
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// The API server said 404, or the watched list does not hold it.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: Kind,
        namespace: String,
        name: String,
    },
    /// `last_error` is the watch's latest failure, if any (e.g. RBAC forbids the list, or the
    /// kind's CRD is not installed).
    #[error("the {kind} and ResourceQuota lists are not loaded yet{}",
        last_error.as_ref().map_or(String::new(), |e| format!(": {e}")))]
    NotSynced {
        kind: Kind,
        last_error: Option<String>,
    },
    #[error("cannot read {kind} {namespace}/{name} or its namespace's ResourceQuotas: {error}")]
    Api {
        kind: Kind,
        namespace: String,
        name: String,
        error: String,
    },
    /// The object exists but what it says cannot be used (e.g. `spec.instances: "three"`).
    #[error("{kind} {namespace}/{name} cannot be read: {error}")]
    Unreadable {
        kind: Kind,
        namespace: String,
        name: String,
        error: String,
    },
    #[error("reading the {kind} and ResourceQuotas timed out after {timeout:?}")]
    Timeout { kind: Kind, timeout: Duration },
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

    /// `Ok(None)` in metrics-only mode and for an engine whose count no object says (a
    /// Pooler's); otherwise the object's facts and its namespace's ResourceQuotas, or an error.
    pub async fn lookup(
        &self,
        engine: Engine,
        namespace: &str,
        name: &str,
        metrics: &Metrics,
    ) -> Result<Option<Snapshot>, TopologyError> {
        let Some(kind) = Kind::of(engine) else {
            return Ok(None);
        };
        match self {
            Self::Metrics => Ok(None),
            Self::Watched(index) => index.get(kind, namespace, name).map(Some),
            // Boxed: inline, the read's state machine (4 KiB) sized every lookup future, and a
            // tick holds one per key at once, whatever the topology.
            Self::Direct { client, timeout } => {
                Box::pin(read_timed(client, *timeout, kind, namespace, name, metrics))
                    .await
                    .map(Some)
            }
        }
    }
}

/// [`read`] within `timeout`, counted as a backend query.
async fn read_timed(
    client: &kube::Client,
    timeout: Duration,
    kind: Kind,
    namespace: &str,
    name: &str,
    metrics: &Metrics,
) -> Result<Snapshot, TopologyError> {
    let mut counted = BackendQuery::start(metrics, "cluster");
    let result = tokio::time::timeout(timeout, read(client, kind, namespace, name))
        .await
        .unwrap_or(Err(TopologyError::Timeout { kind, timeout }));
    counted.outcome(match &result {
        Ok(_) | Err(TopologyError::NotFound { .. }) => "ok",
        Err(TopologyError::Timeout { .. }) => "timeout",
        Err(_) => "error",
    });
    result
}

/// One GET of the object and one ResourceQuota LIST of its namespace, concurrently.
async fn read(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Snapshot, TopologyError> {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kind.resource());
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default();
    let (cluster, quotas) = tokio::join!(clusters.get_opt(name), quotas.list(&params));
    let api = |e: kube::Error| TopologyError::Api {
        kind,
        namespace: namespace.into(),
        name: name.into(),
        error: e.to_string(),
    };
    // `get_opt` is `None` only for a 404; every other failure is the API's error.
    let cluster = cluster
        .map_err(api)?
        .ok_or_else(|| TopologyError::NotFound {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        })?;
    Ok(Snapshot {
        cluster: kind
            .facts(&cluster.data)
            .map_err(|error| TopologyError::Unreadable {
                kind,
                namespace: namespace.into(),
                name: name.into(),
                error,
            })?,
        quotas: quotas.map_err(api)?.items.iter().map(quota_from).collect(),
    })
}

/// Objects of one kind by `(namespace, name)`: a namespace's objects are one range.
type Namespaced<V> = Projected<(String, String), V>;

/// Keys an object by namespace and name; one without either is not indexed.
struct ByName<F>(F);

impl<K: kube::Resource, V, F: Fn(&K) -> V> Project<K> for ByName<F> {
    type Key = (String, String);
    type Value = V;
    fn key(&self, object: &K) -> Option<(String, String)> {
        let meta = object.meta();
        Some((meta.namespace.clone()?, meta.name.clone()?))
    }
    fn value(&self, object: &K) -> V {
        (self.0)(object)
    }
}

/// One watched kind: its objects (readable or not: the value keeps what is wrong with one, so
/// a lookup can say so) and the watch's latest failure (what a lookup says while the list is
/// not loaded).
struct Watched<V> {
    objects: RwLock<Namespaced<V>>,
    last_error: Mutex<Option<String>>,
}

impl<V> Default for Watched<V> {
    fn default() -> Self {
        Self {
            objects: RwLock::default(),
            last_error: Mutex::default(),
        }
    }
}

impl<V> Watched<V> {
    fn apply<K: kube::Resource>(&self, event: watcher::Event<K>, read: impl Fn(&K) -> V) {
        let listed = matches!(event, watcher::Event::InitDone);
        lock::write(&self.objects).apply(&ByName(read), event);
        if listed {
            *lock::lock(&self.last_error) = None;
        }
    }

    fn failed(&self, error: String) {
        *lock::lock(&self.last_error) = Some(error);
    }

    fn is_synced(&self) -> bool {
        lock::read(&self.objects).is_synced()
    }
}

/// What the index holds of a Cluster or RedisFailover: its facts (shared with the evaluations
/// made of them), or why they cannot be read.
type ClusterEntry = Result<Arc<ClusterFacts>, String>;

/// Every Cluster's and RedisFailover's facts and every namespace's ResourceQuotas, kept current
/// by three watches.
#[derive(Clone, Default)]
pub struct ClusterIndex {
    clusters: Arc<Watched<ClusterEntry>>,
    failovers: Arc<Watched<ClusterEntry>>,
    quotas: Arc<Watched<Quota>>,
}

impl ClusterIndex {
    /// Starts watching Clusters, RedisFailovers and ResourceQuotas in all namespaces, in `app`'s
    /// task set. Readiness waits for the Cluster and ResourceQuota lists only: a platform without
    /// the RedisFailover CRD serves CNPG, and its Redis lookups say what is missing.
    pub fn spawn(app: &mut App, client: kube::Client) -> Self {
        let index = Self::default();
        for kind in [Kind::Cluster, Kind::Failover] {
            let this = index.clone();
            let objects = Api::all_with(client.clone(), &kind.resource());
            let follow = watch::follow(
                watcher(objects, Default::default()),
                app.shutdown(),
                move |event| match event {
                    Ok(event) => this.apply(kind, event),
                    Err(error) => this
                        .watched(kind)
                        .failed(format!("watching {kind}s: {error}")),
                },
            );
            let span = info_span!("watch", kind = %kind);
            app.spawn(
                match kind {
                    Kind::Cluster => "CNPG Cluster watch",
                    Kind::Failover => "RedisFailover watch",
                },
                follow.instrument(span),
            );
        }
        let this = index.clone();
        let quotas = Api::<ResourceQuota>::all(client);
        let quotas = watch::follow(
            watcher(quotas, Default::default()),
            app.shutdown(),
            move |event| match event {
                Ok(event) => this.apply_quota(event),
                Err(error) => this
                    .quotas
                    .failed(format!("watching ResourceQuotas: {error}")),
            },
        );
        app.spawn(
            "ResourceQuota watch",
            quotas.instrument(info_span!("resourcequotas")),
        );
        index
    }

    fn watched(&self, kind: Kind) -> &Watched<ClusterEntry> {
        match kind {
            Kind::Cluster => &self.clusters,
            Kind::Failover => &self.failovers,
        }
    }

    pub fn apply(&self, kind: Kind, event: watcher::Event<DynamicObject>) {
        self.watched(kind).apply(event, |object| {
            kind.facts(&object.data).inspect_err(|error| {
                let meta = kube::Resource::meta(object);
                warn!(namespace = ?meta.namespace, name = ?meta.name, %error, "unreadable {kind}");
            })
        });
    }

    pub fn apply_quota(&self, event: watcher::Event<ResourceQuota>) {
        self.quotas.apply(event, |object| {
            let quota = quota_from(object);
            if let Some(error) = &quota.unreadable {
                let meta = kube::Resource::meta(object);
                warn!(namespace = ?meta.namespace, %error, "unreadable ResourceQuota: holding growth in its namespace");
            }
            quota
        });
    }

    /// Whether the lists `serve` waits for before it is ready (Clusters and ResourceQuotas).
    pub fn is_synced(&self) -> bool {
        self.clusters.is_synced() && self.quotas.is_synced()
    }

    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Snapshot, TopologyError> {
        let watched = self.watched(kind);
        if !(watched.is_synced() && self.quotas.is_synced()) {
            let last_error = [&watched.last_error, &self.quotas.last_error]
                .into_iter()
                .find_map(|e| lock::lock(e).clone());
            return Err(TopologyError::NotSynced { kind, last_error });
        }
        let objects = lock::read(&watched.objects);
        let facts = objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .ok_or_else(|| TopologyError::NotFound {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            })?
            .clone()
            .map_err(|error| TopologyError::Unreadable {
                kind,
                namespace: namespace.into(),
                name: name.into(),
                error,
            })?;
        let quotas = lock::read(&self.quotas.objects);
        let in_namespace = (namespace.to_owned(), String::new())..;
        Ok(Snapshot {
            cluster: facts,
            quotas: quotas
                .range(in_namespace)
                .take_while(|((ns, _), _)| ns == namespace)
                .map(|(_, quota)| quota.clone())
                .collect(),
        })
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
