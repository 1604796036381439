//! Watches that keep the [`Index`] current: HelmRelease and Namespace metadata, and the shard
//! Deployments in the flux namespace, each projected into its part of the index
//! (`runtime::watch`: each restart relists and replaces that part atomically).
use futures::Stream;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use placement::shard::{SHARD_KEY_LABEL, ShardIndex, shard_of_deployment};
use placement::tenant;
use runtime::app::App;
use runtime::watch::{Project, Projected};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::index::{self, Index, Release, SharedIndex, TenantNamespace};

/// The watched kind the webhook admits and the controller relabels.
pub const HELMRELEASE_GROUP: &str = "helm.toolkit.fluxcd.io";
pub const HELMRELEASE_VERSION: &str = "v2";
pub const HELMRELEASE_KIND: &str = "HelmRelease";

struct Releases;
struct Namespaces;
struct Deployments;

/// Where a kind's projection lives in the index.
trait Part<K>: Project<K> {
    fn part(index: &mut Index) -> &mut Projected<Self::Key, Self::Value>;
}

impl Part<PartialObjectMeta<DynamicObject>> for Releases {
    fn part(index: &mut Index) -> &mut Projected<(String, String), Release> {
        &mut index.releases
    }
}

impl Part<PartialObjectMeta<Namespace>> for Namespaces {
    fn part(index: &mut Index) -> &mut Projected<String, TenantNamespace> {
        &mut index.namespaces
    }
}

impl Part<Deployment> for Deployments {
    fn part(index: &mut Index) -> &mut Projected<ShardIndex, bool> {
        &mut index.deployments
    }
}

impl Project<PartialObjectMeta<DynamicObject>> for Releases {
    type Key = (String, String);
    type Value = Release;
    fn key(&self, hr: &PartialObjectMeta<DynamicObject>) -> Option<(String, String)> {
        Some((hr.namespace().unwrap_or_default(), hr.name_any()))
    }
    fn value(&self, hr: &PartialObjectMeta<DynamicObject>) -> Release {
        Release::new(
            &hr.namespace().unwrap_or_default(),
            &hr.name_any(),
            hr.labels(),
        )
    }
}

/// Only tenant namespaces are indexed.
impl Project<PartialObjectMeta<Namespace>> for Namespaces {
    type Key = String;
    type Value = TenantNamespace;
    fn key(&self, ns: &PartialObjectMeta<Namespace>) -> Option<String> {
        Some(ns.name_any()).filter(|name| tenant::is_tenant_namespace(name))
    }
    fn value(&self, ns: &PartialObjectMeta<Namespace>) -> TenantNamespace {
        TenantNamespace::new(ns.labels(), ns.metadata.deletion_timestamp.is_some())
    }
}

/// Only `helm-controller-shard<i>` Deployments are indexed; ready means readyReplicas > 0.
impl Project<Deployment> for Deployments {
    type Key = ShardIndex;
    type Value = bool;
    fn key(&self, d: &Deployment) -> Option<ShardIndex> {
        shard_of_deployment(&d.name_any())
    }
    fn value(&self, d: &Deployment) -> bool {
        d.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
            > 0
    }
}

/// The HelmRelease API (`helm.toolkit.fluxcd.io/v2`), addressed without a compiled-in type.
pub fn helmrelease_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(HELMRELEASE_GROUP, HELMRELEASE_VERSION, HELMRELEASE_KIND);
    ApiResource::from_gvk_with_plural(&gvk, "helmreleases")
}

/// Starts the watches in `app`'s task set. Deployments are watched only when readiness is read
/// from them.
pub fn spawn(app: &mut App, client: Client, index: SharedIndex, flux_namespace: Option<&str>) {
    // `Api<PartialObjectMeta<_>>` makes metadata-only list and watch requests.
    let hrs =
        Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &helmrelease_resource());
    // Only releases carrying the shard key are sharded at all (as the placement controller
    // counts them); the rest belong to the main controller and carry no shard load.
    let releases = watcher::watcher(hrs, watcher::Config::default().labels(SHARD_KEY_LABEL));
    let watch = follow(app.shutdown(), releases, index.clone(), Releases);
    let span = info_span!("helmreleases.helm.toolkit.fluxcd.io");
    app.spawn("HelmRelease watch", watch.instrument(span));
    let namespaces = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
    let namespaces = watcher::watcher(namespaces, watcher::Config::default());
    let watch = follow(app.shutdown(), namespaces, index.clone(), Namespaces);
    app.spawn(
        "Namespace watch",
        watch.instrument(info_span!("namespaces")),
    );
    if let Some(ns) = flux_namespace {
        let deployments = watcher::watcher(
            Api::<Deployment>::namespaced(client, ns),
            watcher::Config::default(),
        );
        let watch = follow(app.shutdown(), deployments, index, Deployments);
        let span = info_span!("deployments", namespace = %ns);
        app.spawn("Deployment watch", watch.instrument(span));
    }
}

/// Applies one watch stream to its part of the index until `shutdown`.
fn follow<K: Send, P: Part<K> + Send>(
    shutdown: CancellationToken,
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send,
    index: SharedIndex,
    project: P,
) -> impl Future<Output = ()> + Send {
    runtime::watch::follow(stream, shutdown, move |event| {
        if let Ok(event) = event {
            P::part(&mut index::write(&index)).apply(&project, event);
        }
    })
}
