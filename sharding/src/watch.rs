//! Watches that keep the [`Index`] current: HelmRelease and Namespace metadata, and the shard
//! Deployments in the flux namespace. Each restart relists and replaces its part of the index.
use std::collections::{BTreeMap, HashMap};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use placement::shard::{SHARD_KEY_LABEL, ShardIndex, shard_of_deployment};
use tracing::{Instrument, info, info_span, warn};

use crate::index::{self, Index, Release, SharedIndex, TenantNamespace};
use crate::mutate::{HELMRELEASE_GROUP, HELMRELEASE_KIND, HELMRELEASE_VERSION};

/// How one watched kind lands in the index.
trait Feed<K> {
    fn apply(index: &mut Index, obj: &K);
    fn delete(index: &mut Index, obj: &K);
    fn reset(index: &mut Index, objs: &[K]);
}

struct Releases;
struct Namespaces;
struct Deployments;

impl Feed<PartialObjectMeta<DynamicObject>> for Releases {
    fn apply(index: &mut Index, hr: &PartialObjectMeta<DynamicObject>) {
        let ns = hr.namespace().unwrap_or_default();
        index.apply_release(
            &ns,
            &hr.name_any(),
            Release::new(&ns, &hr.name_any(), hr.labels()),
        );
    }
    fn delete(index: &mut Index, hr: &PartialObjectMeta<DynamicObject>) {
        index.delete_release(&hr.namespace().unwrap_or_default(), &hr.name_any());
    }
    fn reset(index: &mut Index, hrs: &[PartialObjectMeta<DynamicObject>]) {
        let releases: HashMap<_, _> = hrs
            .iter()
            .map(|hr| {
                let (ns, name) = (hr.namespace().unwrap_or_default(), hr.name_any());
                let release = Release::new(&ns, &name, hr.labels());
                ((ns, name), release)
            })
            .collect();
        index.reset_releases(releases);
        index.synced.releases = true;
    }
}

fn tenant_namespace(ns: &PartialObjectMeta<Namespace>) -> TenantNamespace {
    TenantNamespace::new(ns.labels(), ns.metadata.deletion_timestamp.is_some())
}

impl Feed<PartialObjectMeta<Namespace>> for Namespaces {
    fn apply(index: &mut Index, ns: &PartialObjectMeta<Namespace>) {
        index.apply_namespace(&ns.name_any(), tenant_namespace(ns));
    }
    fn delete(index: &mut Index, ns: &PartialObjectMeta<Namespace>) {
        index.delete_namespace(&ns.name_any());
    }
    fn reset(index: &mut Index, all: &[PartialObjectMeta<Namespace>]) {
        index.reset_namespaces(
            all.iter()
                .map(|ns| (ns.name_any(), tenant_namespace(ns)))
                .collect(),
        );
        index.synced.namespaces = true;
    }
}

/// `(shard, ready)` of a `helm-controller-shard<i>` Deployment; ready means readyReplicas > 0.
fn shard_readiness(d: &Deployment) -> Option<(ShardIndex, bool)> {
    let shard = shard_of_deployment(&d.name_any())?;
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
        > 0;
    Some((shard, ready))
}

impl Feed<Deployment> for Deployments {
    fn apply(index: &mut Index, d: &Deployment) {
        if let Some((shard, ready)) = shard_readiness(d) {
            index.apply_deployment(shard, ready);
        }
    }
    fn delete(index: &mut Index, d: &Deployment) {
        if let Some((shard, _)) = shard_readiness(d) {
            index.delete_deployment(shard);
        }
    }
    fn reset(index: &mut Index, all: &[Deployment]) {
        let deployments: BTreeMap<_, _> = all.iter().filter_map(shard_readiness).collect();
        index.reset_deployments(deployments);
        index.synced.deployments = true;
    }
}

/// The HelmRelease API (`helm.toolkit.fluxcd.io/v2`), addressed without a compiled-in type.
pub fn helmrelease_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(HELMRELEASE_GROUP, HELMRELEASE_VERSION, HELMRELEASE_KIND);
    ApiResource::from_gvk_with_plural(&gvk, "helmreleases")
}

/// Spawns the watches. Deployments are watched only when readiness is read from them.
pub fn spawn(client: Client, index: SharedIndex, flux_namespace: Option<&str>) {
    // `Api<PartialObjectMeta<_>>` makes metadata-only list and watch requests.
    let hrs =
        Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &helmrelease_resource());
    // Only releases carrying the shard key are sharded at all (as the placement controller
    // counts them, §2.5); the rest belong to the main controller and carry no shard load.
    let releases = watcher::watcher(hrs, watcher::Config::default().labels(SHARD_KEY_LABEL));
    let span = info_span!("helmreleases.helm.toolkit.fluxcd.io");
    tokio::spawn(follow::<_, Releases>(releases, index.clone()).instrument(span));
    let namespaces = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
    let namespaces = watcher::watcher(namespaces, watcher::Config::default());
    tokio::spawn(
        follow::<_, Namespaces>(namespaces, index.clone()).instrument(info_span!("namespaces")),
    );
    if let Some(ns) = flux_namespace {
        let deployments = watcher::watcher(
            Api::<Deployment>::namespaced(client, ns),
            watcher::Config::default(),
        );
        tokio::spawn(
            follow::<_, Deployments>(deployments, index)
                .instrument(info_span!("deployments", namespace = %ns)),
        );
    }
}

/// Applies one watch stream to the index for as long as the process runs.
async fn follow<K, F: Feed<K>>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    index: SharedIndex,
) {
    let mut stream = std::pin::pin!(stream.default_backoff());
    let mut relist: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(obj)) => F::apply(&mut index::write(&index), &obj),
            Ok(Event::Delete(obj)) => F::delete(&mut index::write(&index), &obj),
            Ok(Event::Init) => relist.clear(),
            Ok(Event::InitApply(obj)) => relist.push(obj),
            Ok(Event::InitDone) => {
                F::reset(&mut index::write(&index), &relist);
                info!(objects = relist.len(), "synced");
                relist = Vec::new();
            }
            // The backoff delays the retry; the index keeps the last known state meanwhile.
            Err(error) => warn!(%error, "watch failed; retrying"),
        }
    }
}
