//! The harness both leader-elected controllers run in (`scaler shard-controller`,
//! `scaler scale-adapter`): their admin and leader-election flags ([`ControllerArgs`]), the
//! start (app with signals, Kubernetes client, admin server with the controller's metrics), the
//! campaign for the Lease, and the paced sync loop with its readiness and `leader` gauge. What a
//! controller watches and what one sync does stay its own.
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::app::App;
use crate::flags::{Admin, LeaderElection, LeaseFlags};
use crate::{conn, lease};

/// `--admin-listen` and the leader-election flags, with `P`'s defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs<P: LeaseFlags> {
    #[command(flatten)]
    pub admin: Admin,
    #[command(flatten)]
    pub election: LeaderElection<P>,
}

/// A started controller: its app (the admin server already running in it), client and metrics.
pub struct Controller<M> {
    pub app: App,
    pub client: kube::Client,
    pub metrics: M,
    /// This replica's name in the Lease.
    pub identity: String,
    election: lease::Election,
}

impl<P: LeaseFlags> ControllerArgs<P> {
    /// Checks the flags, then starts the app named `component` (stopped by SIGTERM/SIGINT), a
    /// Kubernetes client, and the admin server with the metrics `register` adds.
    pub async fn start<M>(
        self,
        component: &'static str,
        register: impl FnOnce(&mut Registry) -> M,
    ) -> anyhow::Result<Controller<M>> {
        let election = self.election.election()?;
        let mut app = App::new(component).with_signals();
        let (client, metrics) = connect(&mut app, self.admin.admin_listen, register).await?;
        Ok(Controller {
            app,
            client,
            metrics,
            identity: election.identity.clone(),
            election,
        })
    }
}

/// A Kubernetes client (in-cluster or KUBECONFIG), and the admin server on `admin_listen` with the
/// metrics `register` adds, running in `app`. The file limit is raised first: watches and the
/// admin port hold descriptors.
pub async fn connect<M>(
    app: &mut App,
    admin_listen: SocketAddr,
    register: impl FnOnce(&mut Registry) -> M,
) -> anyhow::Result<(kube::Client, M)> {
    conn::raise_fd_limit();
    let client = kube::Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    let mut registry = Registry::default();
    let metrics = register(&mut registry);
    app.admin(admin_listen, registry).await?;
    Ok((client, metrics))
}

impl<M> Controller<M> {
    /// Campaigns for the Lease in the app and returns who leads; with `campaign` false (a dry
    /// run) nothing is written and this replica never leads.
    pub fn elect(&mut self, campaign: bool) -> watch::Receiver<bool> {
        let election = campaign.then(|| self.election.clone());
        lease::elect(&mut self.app, self.client.clone(), election)
    }

    /// Runs the sync loop ([`lease::paced`]) until shutdown, then drains within
    /// [`lease::DRAIN_DEADLINE`]. Each step publishes the lead on `leader_gauge`; until
    /// `synced()` says the watches have their first lists nothing else happens, then the
    /// controller turns ready and `step(leading)` runs.
    pub async fn run(
        self,
        interval: Duration,
        leader: watch::Receiver<bool>,
        leader_gauge: Gauge,
        mut synced: impl FnMut() -> bool,
        mut step: impl AsyncFnMut(bool),
    ) -> anyhow::Result<()> {
        let readiness = self.app.readiness();
        let paced = lease::paced(interval, leader, self.app.shutdown(), async |leading| {
            leader_gauge.set(i64::from(leading));
            if !synced() {
                return;
            }
            readiness.set(true);
            step(leading).await;
        });
        self.app.run(paced, lease::DRAIN_DEADLINE).await
    }
}
