//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! * Expiry is judged by *this* process's clock: a holder's lease counts as expired once its
//!   record (holder, renewTime) has not changed for `leaseDurationSeconds` since we first saw it,
//!   so clock skew between nodes does not matter.
//! * Every write is a replace carrying the read `resourceVersion`: of two candidates taking over
//!   an expired lease, the API server accepts one and answers 409 to the other.
//! * The leader steps down (publishes `false`) `renew_deadline` after the start of its last
//!   successful renewal, to the instant (a hanging attempt does not delay it); that is shorter
//!   than the lease duration, so it stops acting before anyone can take over.
//! * On shutdown the leader releases the lease (empty holder), so a successor need not wait.
//!
//! kube-runtime has no leader election; kube-lease-manager (which builds with kube 5) judges
//! expiry against the holder's wall-clock renewTime and takes over with unconditional patches.
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::app::App;

/// Timings, as client-go's defaults (15 s / 10 s / 2 s); also the controllers' `--lease-duration`,
/// `--renew-deadline` and `--retry-period` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Timing {
    /// How long a lease stays valid after its last renewal, for others.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// The leader steps down when it could not renew for this long (< --lease-duration).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    /// Pause between lease attempts; also each attempt's timeout (< --renew-deadline).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
}

/// A replica's identity when none is given: `HOSTNAME` (the pod name in a pod, else `component`)
/// plus the process id, unique per replica.
pub fn default_identity(component: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| component.into());
    format!("{host}-{}", std::process::id())
}

impl Timing {
    /// Refuses timings under which a leader could outlive its lease in another replica's eyes.
    pub fn check(&self) -> anyhow::Result<()> {
        let Self {
            lease_duration,
            renew_deadline,
            retry_period,
        } = self;
        anyhow::ensure!(
            renew_deadline < lease_duration && retry_period < renew_deadline,
            "need --retry-period < --renew-deadline < --lease-duration (got {retry_period:?}, {renew_deadline:?}, {lease_duration:?})"
        );
        Ok(())
    }
}

/// The holder record: changes on every renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        }
    }
}

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// The last record seen and when (by our clock) it was first seen.
    observed: Option<(Record, Instant)>,
}

impl Elector {
    pub fn new(api: Api<Lease>, name: String, identity: String, timing: Timing) -> Self {
        Self {
            api,
            name,
            identity,
            timing,
            observed: None,
        }
    }

    /// One attempt: `Ok(true)` when we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&mut self, now: Instant) -> Result<bool, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            return self.create(now).await;
        };
        let record = Record::of(&lease);
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record.clone(), now));
        }
        let mine = record.holder.as_deref() == Some(self.identity.as_str());
        if !mine && record.holder.is_some() && !self.expired(&lease, now) {
            debug!(holder = ?record.holder, "lease held by another replica");
            return Ok(false);
        }
        let mut next = lease.clone();
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        let stamp = MicroTime(Timestamp::now());
        if !mine {
            spec.acquire_time = Some(stamp.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(stamp);
        self.replace(next, now).await
    }

    /// Gives the lease up so a successor can take it at once (best effort).
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        if Record::of(&lease).holder.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    fn expired(&self, lease: &Lease, now: Instant) -> bool {
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        self.observed
            .as_ref()
            .is_some_and(|(_, seen)| now.saturating_duration_since(*seen) >= duration)
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    async fn create(&mut self, now: Instant) -> Result<bool, kube::Error> {
        let stamp = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: Some(stamp.clone()),
                renew_time: Some(stamp),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.observed = Some((Record::of(&created), now));
                Ok(true)
            }
            // Another candidate created it first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replaces the lease, conditional on the resourceVersion it was read with.
    async fn replace(&mut self, lease: Lease, now: Instant) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observed = Some((Record::of(&written), now));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Campaigns for the lease until `shutdown`, publishing leadership on `leader`; releases the
/// lease on the way out. The lead is published lost `renew_deadline` after the start of the last
/// successful attempt, to the instant, whether an attempt is in flight or the loop is pausing:
/// a leader that checks it before each write never writes once a successor may hold the Lease.
pub async fn run(mut elector: Elector, leader: watch::Sender<bool>, shutdown: CancellationToken) {
    let timing = elector.timing.clone();
    let identity = elector.identity.clone();
    let publish = |leading: bool| {
        if leader.send_if_modified(|was| std::mem::replace(was, leading) != leading) {
            info!(%identity, leading, "leadership changed");
        }
    };
    let mut renewed: Option<Instant> = None;
    loop {
        let now = Instant::now();
        tokio::select! {
            biased;
            () = lapse(renewed, timing.renew_deadline) => renewed = None,
            attempt = timeout(timing.retry_period, elector.try_acquire_or_renew(now)) => match attempt {
                Ok(Ok(true)) => renewed = Some(now),
                // Someone else holds it: step down at once.
                Ok(Ok(false)) => renewed = None,
                // Transient: a leader keeps leading until the renew deadline.
                Ok(Err(error)) => warn!(%error, "lease attempt failed"),
                Err(_) => warn!(timeout = ?timing.retry_period, "lease attempt timed out"),
            },
        }
        publish(renewed.is_some());
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(timing.retry_period) => {}
            () = lapse(renewed, timing.renew_deadline) => {
                renewed = None;
                publish(false);
            }
        }
    }
    if leader.send_replace(false) {
        match timeout(timing.retry_period, elector.release()).await {
            Ok(Ok(())) => info!("lease released"),
            Ok(Err(error)) => warn!(%error, "cannot release the lease"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }
}

/// Resolves when a lead renewed at `renewed` lapses; never while there is none.
async fn lapse(renewed: Option<Instant>, renew_deadline: Duration) {
    match renewed {
        Some(at) => tokio::time::sleep_until(at + renew_deadline).await,
        None => std::future::pending().await,
    }
}

/// At a leader-elected controller's shutdown, how long a sync in flight, and then the lease
/// release, may take: well within the pod's default 30 s termination grace period.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// Which Lease a controller campaigns for, and as whom.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
}

/// Campaigns for the Lease in a task `app` owns (it releases the Lease at shutdown, within the
/// app's drain deadline) and returns who leads. Nothing ever sends when `election` is `None`
/// (a dry run): this replica never leads.
pub fn elect(
    app: &mut App,
    client: kube::Client,
    election: Option<Election>,
) -> watch::Receiver<bool> {
    let (leader_tx, leader) = watch::channel(false);
    if let Some(Election {
        namespace,
        name,
        identity,
        timing,
    }) = election
    {
        let elector = Elector::new(
            Api::namespaced(client, &namespace),
            name,
            identity.clone(),
            timing,
        );
        let campaign = run(elector, leader_tx, app.shutdown());
        app.spawn("lease", campaign.instrument(info_span!("lease", %identity)));
    }
    leader
}

/// The leader-elected controllers' loop: `step(leading)` every `interval` and, at once, whenever
/// leadership changes (a new leader acts without an interval's wait, and a `leader` gauge never
/// reports a lead that moved), until `shutdown`. A step in flight runs to its end.
pub async fn paced(
    interval: Duration,
    mut leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    mut step: impl AsyncFnMut(bool),
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            // When nothing can send (a dry run) the branch is simply off.
            Ok(()) = leader.changed() => {}
        }
        let leading = *leader.borrow_and_update();
        step(leading).await;
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
