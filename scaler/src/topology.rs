//! Where the current instance count and the sync quorum come from: the CNPG `Cluster` objects
//! (through the Kubernetes API) or, in metrics-only mode, nothing (the decision then counts
//! instance series).
//!
//! `serve` watches every Cluster once and answers lookups from memory, so decisions cost no API
//! call; `explain` reads the one Cluster it needs.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::Metrics;

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

/// What a Cluster says about its size and sync quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterFacts {
    /// `spec.instances` (what the HPA compares against).
    pub instances: u32,
    /// Legacy `spec.maxSyncReplicas`, else `spec.postgresql.synchronous.number`.
    pub quorum: Option<u32>,
}

/// Reads [`ClusterFacts`] from a Cluster's JSON.
pub fn facts_from(object: &serde_json::Value) -> Result<ClusterFacts, String> {
    let spec = object.get("spec").ok_or("no spec")?;
    let count = |v: Option<&serde_json::Value>| {
        v.and_then(|v| v.as_u64())
            .and_then(|n| u32::try_from(n).ok())
    };
    // CNPG defaults spec.instances to 1.
    let instances = match spec.get("instances") {
        None => 1,
        Some(v) => count(Some(v)).ok_or_else(|| format!("spec.instances {v} is not a count"))?,
    };
    let legacy = count(spec.get("maxSyncReplicas")).filter(|n| *n > 0);
    let explicit = count(spec.pointer("/postgresql/synchronous/number"));
    Ok(ClusterFacts {
        instances,
        quorum: legacy.or(explicit),
    })
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    #[error("CNPG Cluster {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("the CNPG Cluster list is not loaded yet")]
    NotSynced,
    #[error("cannot read CNPG Cluster: {0}")]
    Api(String),
    #[error("reading the CNPG Cluster timed out after {0:?}")]
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

    /// `Ok(None)` in metrics-only mode; otherwise the Cluster's facts or an error.
    pub async fn lookup(
        &self,
        namespace: &str,
        name: &str,
        metrics: &Metrics,
    ) -> Result<Option<ClusterFacts>, TopologyError> {
        match self {
            Self::Metrics => Ok(None),
            Self::Watched(index) => index.get(namespace, name).map(Some),
            Self::Direct { client, timeout } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &cluster_resource());
                let start = Instant::now();
                let result = match tokio::time::timeout(*timeout, api.get_opt(name)).await {
                    Err(_) => Err(TopologyError::Timeout(*timeout)),
                    Ok(Err(e)) => Err(TopologyError::Api(e.to_string())),
                    Ok(Ok(None)) => Err(TopologyError::NotFound {
                        namespace: namespace.into(),
                        name: name.into(),
                    }),
                    Ok(Ok(Some(object))) => facts_from(&object.data)
                        .map(Some)
                        .map_err(TopologyError::Api),
                };
                let outcome = match &result {
                    Ok(_) | Err(TopologyError::NotFound { .. }) => "ok",
                    Err(TopologyError::Timeout(_)) => "timeout",
                    Err(_) => "error",
                };
                metrics.backend("cluster", outcome, start.elapsed().as_secs_f64());
                result
            }
        }
    }
}

type Key = (String, String);

/// Every Cluster's facts, kept current by a watch.
#[derive(Clone, Default)]
pub struct ClusterIndex {
    clusters: Arc<RwLock<HashMap<Key, ClusterFacts>>>,
    synced: Arc<AtomicBool>,
}

impl ClusterIndex {
    /// Starts watching Clusters in all namespaces; the index is synced after the first full list.
    pub fn spawn(client: kube::Client, shutdown: CancellationToken) -> Self {
        let index = Self::default();
        let api: Api<DynamicObject> = Api::all_with(client, &cluster_resource());
        let this = index.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut pending = HashMap::new();
            loop {
                let event = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    event = events.next() => event,
                };
                match event {
                    None => return,
                    Some(Ok(event)) => this.apply(event, &mut pending),
                    Some(Err(error)) => warn!(%error, "watching CNPG Clusters failed; retrying"),
                }
            }
        });
        index
    }

    /// Applies one watch event; `pending` buffers a relist until it is complete.
    pub fn apply(
        &self,
        event: watcher::Event<DynamicObject>,
        pending: &mut HashMap<Key, ClusterFacts>,
    ) {
        let entry = |object: &DynamicObject| -> Option<(Key, ClusterFacts)> {
            let key = (
                object.metadata.namespace.clone()?,
                object.metadata.name.clone()?,
            );
            match facts_from(&object.data) {
                Ok(facts) => Some((key, facts)),
                Err(error) => {
                    warn!(namespace = %key.0, name = %key.1, %error, "skipping unreadable Cluster");
                    None
                }
            }
        };
        let mut clusters = match self.clusters.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        match event {
            watcher::Event::Init => pending.clear(),
            watcher::Event::InitApply(object) => pending.extend(entry(&object)),
            watcher::Event::InitDone => {
                *clusters = std::mem::take(pending);
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(object) => clusters.extend(entry(&object)),
            watcher::Event::Delete(object) => {
                if let (Some(ns), Some(name)) = (&object.metadata.namespace, &object.metadata.name)
                {
                    clusters.remove(&(ns.clone(), name.clone()));
                }
            }
        }
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Result<ClusterFacts, TopologyError> {
        if !self.is_synced() {
            return Err(TopologyError::NotSynced);
        }
        let clusters = match self.clusters.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        clusters
            .get(&(namespace.to_owned(), name.to_owned()))
            .copied()
            .ok_or_else(|| TopologyError::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cluster(ns: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new(name, &cluster_resource()).within(ns);
        object.data = json!({ "spec": spec });
        object
    }

    #[test]
    fn facts_read_instances_and_either_quorum_field() {
        let f = facts_from(&json!({"spec": {"instances": 3, "maxSyncReplicas": 1}})).unwrap();
        assert_eq!(
            f,
            ClusterFacts {
                instances: 3,
                quorum: Some(1)
            }
        );
        let f = facts_from(&json!({"spec": {"instances": 4, "postgresql": {"synchronous": {"method": "any", "number": 2}}}})).unwrap();
        assert_eq!(
            f,
            ClusterFacts {
                instances: 4,
                quorum: Some(2)
            }
        );
        let f = facts_from(&json!({"spec": {"instances": 2, "maxSyncReplicas": 0}})).unwrap();
        assert_eq!(
            f,
            ClusterFacts {
                instances: 2,
                quorum: None
            }
        );
        assert_eq!(facts_from(&json!({"spec": {}})).unwrap().instances, 1);
        assert!(facts_from(&json!({"spec": {"instances": "three"}})).is_err());
        assert!(facts_from(&json!({})).is_err());
    }

    #[test]
    fn index_follows_watch_events_and_waits_for_the_first_list() {
        let index = ClusterIndex::default();
        let mut pending = HashMap::new();
        assert_eq!(index.get("ns", "pg"), Err(TopologyError::NotSynced));
        index.apply(watcher::Event::Init, &mut pending);
        index.apply(
            watcher::Event::InitApply(cluster("ns", "pg", json!({"instances": 3}))),
            &mut pending,
        );
        assert_eq!(index.get("ns", "pg"), Err(TopologyError::NotSynced));
        index.apply(watcher::Event::InitDone, &mut pending);
        assert_eq!(index.get("ns", "pg").unwrap().instances, 3);
        index.apply(
            watcher::Event::Apply(cluster("ns", "pg", json!({"instances": 5}))),
            &mut pending,
        );
        assert_eq!(index.get("ns", "pg").unwrap().instances, 5);
        assert!(matches!(
            index.get("other", "pg"),
            Err(TopologyError::NotFound { .. })
        ));
        index.apply(
            watcher::Event::Delete(cluster("ns", "pg", json!({}))),
            &mut pending,
        );
        assert!(matches!(
            index.get("ns", "pg"),
            Err(TopologyError::NotFound { .. })
        ));
        // A relist replaces everything at once.
        index.apply(
            watcher::Event::Apply(cluster("ns", "old", json!({"instances": 2}))),
            &mut pending,
        );
        index.apply(watcher::Event::Init, &mut pending);
        index.apply(
            watcher::Event::InitApply(cluster("ns", "new", json!({"instances": 2}))),
            &mut pending,
        );
        assert!(index.get("ns", "old").is_ok());
        index.apply(watcher::Event::InitDone, &mut pending);
        assert!(index.get("ns", "old").is_err());
        assert!(index.get("ns", "new").is_ok());
    }
}
