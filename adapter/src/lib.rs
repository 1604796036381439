//! `scaler scale-adapter`: the ScaleAdapter controller (docs/scale-adapter.md). A ScaleAdapter
//! gives a target without a `/scale` subresource (a RedisFailover) one: the HPA or `kubectl
//! scale` sets the adapter's `spec.replicas`, and the leader (a Lease; the harness is
//! `runtime::controller`) writes it into the target at `replicasPath` with a merge patch
//! conditional on the version read (never creating a target), paced, never while paused.
//!
//! `crd` is the API, `path` the pointer, `target` the checks before any call, `decide` and
//! `status` the pure decision, `sync` the I/O, `metrics` the gauges.
use std::time::Duration;

use futures::Stream;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{reflector, watcher};
use kube::{Api, Client};
use tracing::{Instrument, info, info_span};

use runtime::controller::ControllerArgs;
use runtime::flags::LeaseFlags;
use runtime::logging::ScaleAdapterLogArgs;

pub mod crd;
pub mod decide;
pub mod metrics;
pub mod path;
pub mod status;
pub mod sync;
pub mod target;

#[derive(Debug, clap::Args)]
pub struct Args {
    // Boxed: the flags are many, and the CLI enum should stay small (clippy large_enum_variant).
    #[command(flatten)]
    settings: Box<Settings>,
}

/// The ScaleAdapter controller's Lease and identity defaults.
#[derive(Debug, Clone, Copy)]
struct Lease;

impl LeaseFlags for Lease {
    const COMPONENT: &'static str = "scale-adapter";
    const LEASE_NAMESPACE: &'static str = "cozy-autoscaling";
    const LEASE_NAME: &'static str = "cozy-scale-adapter";
    const IDENTITY_HELP: &'static str =
        "This replica's identity in the Lease (the pod name in the chart)";
}

#[derive(Debug, clap::Args)]
struct Settings {
    /// Least time between two writes to one target (pacing).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    min_write_interval: Duration,
    /// Time between syncs of every adapter.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    sync_interval: Duration,
    /// Adapters synced at once.
    #[arg(long, default_value = "8", value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Timeout of each Kubernetes API call.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    api_timeout: Duration,
    #[command(flatten)]
    controller: ControllerArgs<Lease>,
    #[command(flatten)]
    log: ScaleAdapterLogArgs,
}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        let s = *self.settings;
        s.log.init()?;
        let register = metrics::Metrics::register;
        let mut controller = s.controller.start("scale adapter", register).await?;
        let (store, reflected) = watch(controller.client.clone());
        let watch = runtime::watch::follow(reflected, controller.app.shutdown(), |_| {});
        controller.app.spawn(
            "ScaleAdapter watch",
            watch.instrument(info_span!("scaleadapters")),
        );
        let leader = controller.elect(true);
        let settings = sync::Settings {
            min_interval: s.min_write_interval,
            api_timeout: s.api_timeout,
            concurrency: usize::from(s.concurrency),
        };
        let metrics = controller.metrics.clone();
        let client = controller.client.clone();
        let syncer = sync::Syncer::new(client, settings, metrics.clone(), leader.clone());
        let identity = &controller.identity;
        info!(%identity, field_manager = sync::FIELD_MANAGER, "running the scale adapter");

        let synced = || store.wait_until_ready().now_or_never_ready();
        let gauge = metrics.leader.clone();
        let step = async |leading| {
            let snapshot = store.state();
            let adapters = i64::try_from(snapshot.len()).unwrap_or(i64::MAX);
            metrics.adapters.set(adapters);
            if leading {
                metrics.syncs.inc();
                syncer.sync(snapshot).instrument(info_span!("sync")).await;
            }
        };
        controller
            .run(s.sync_interval, leader, gauge, synced, step)
            .await
    }
}

/// The ScaleAdapters, watched untyped: the typed watch failed the whole list on one object it
/// could not decode (nothing synced, the controller stayed unready, and kube logged the list body
/// at each retry). [`sync::Syncer`] decodes each object on its own and reports a bad one on it.
pub fn watch(
    client: Client,
) -> (
    reflector::Store<DynamicObject>,
    impl Stream<Item = watcher::Result<watcher::Event<DynamicObject>>> + Send,
) {
    let resource = ApiResource::erase::<crd::ScaleAdapter>(&());
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let adapters = Api::<DynamicObject>::all_with(client, &resource);
    let stream = reflector(writer, watcher(adapters, watcher::Config::default()));
    (store, stream)
}

/// Whether a future is ready at once (the reflector's first list has arrived).
trait NowOrNeverReady {
    fn now_or_never_ready(self) -> bool;
}

impl<F: Future> NowOrNeverReady for F {
    fn now_or_never_ready(self) -> bool {
        futures::FutureExt::now_or_never(self).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// The case: one object the typed API cannot decode in the list of all adapters.
    #[tokio::test]
    async fn one_bad_object_does_not_fail_the_watch() {
        let (client, mut server) = runtime::mock::client();
        let (store, stream) = watch(client);
        let object = |name: &str, replicas: serde_json::Value| {
            serde_json::json!({
                "apiVersion": "autoscaling.cozystack.io/v1alpha1", "kind": "ScaleAdapter",
                "metadata": {"name": name, "namespace": "tenant", "resourceVersion": "5"},
                "spec": {"targetRef": {"apiVersion": "databases.spotahome.com/v1",
                                       "kind": "RedisFailover", "name": name},
                         "replicasPath": "/spec/redis/replicas", "replicas": replicas,
                         "selector": "app=redis"},
            })
        };
        let list = serde_json::json!({
            "apiVersion": "autoscaling.cozystack.io/v1alpha1", "kind": "ScaleAdapterList",
            "metadata": {"resourceVersion": "9"},
            "items": [object("bad", serde_json::json!("three")), object("good", serde_json::json!(3))],
        });
        let listed = async {
            let mut stream = std::pin::pin!(stream);
            loop {
                match futures::StreamExt::next(&mut stream).await {
                    Some(Ok(watcher::Event::InitDone)) => return Ok(()),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error.to_string()),
                    None => return Err("the watch ended".into()),
                }
            }
        };
        let path = "/apis/autoscaling.cozystack.io/v1alpha1/scaleadapters";
        let listed = runtime::mock::scripted(listed, async {
            server.get(path, list).await;
        })
        .await;
        assert_eq!(listed, Ok(()));
        assert!(store.wait_until_ready().now_or_never_ready(), "unready");
        let mut names: Vec<_> = store
            .state()
            .iter()
            .map(|o| kube::ResourceExt::name_any(&**o))
            .collect();
        names.sort();
        assert_eq!(names, ["bad", "good"]);
        server.done();
    }

    #[test]
    fn defaults_and_bad_flags() {
        let cli = Cli::try_parse_from(["scale-adapter"]).unwrap();
        assert_eq!(
            cli.args.settings.min_write_interval,
            Duration::from_secs(30)
        );
        assert_eq!(
            cli.args.settings.controller.election.lease_name,
            "cozy-scale-adapter"
        );
        for (flag, value) in [
            ("--concurrency", "0"),
            ("--min-write-interval", "soon"),
            ("--sync-interval", "-1s"),
        ] {
            let arg = format!("{flag}={value}");
            let error = Cli::try_parse_from(["scale-adapter", &arg])
                .err()
                .unwrap_or_else(|| panic!("{flag} {value} accepted"))
                .to_string();
            assert!(error.contains(flag), "{error}");
        }
    }
}
