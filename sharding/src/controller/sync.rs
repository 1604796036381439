//! One placement sync: snapshot the watch index, plan with the `placement` library, then (as
//! leader) make at most `moves_per_sync` moves and heal stragglers of settled tenants.
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use placement::TenantInfo;
use placement::plan::{self, DownSince, Move, Plan, Policy};
use placement::shard::{ShardIndex, shard_name};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::metrics::Metrics;
use super::relabel::{Gate, Mode, Outcome, Relabeler, ReleaseRef};
use crate::index::{self, SharedIndex};

/// Straggler heals per sync: each costs a read per release; bounded so a cluster-wide mislabel
/// is healed over a few syncs instead of one burst of API calls.
const HEALS_PER_SYNC: usize = 50;
/// Move attempts per allowed move: blocked tenants are skipped, but each attempt reads the
/// tenant's releases, so the reads per sync stay bounded too.
const ATTEMPTS_PER_MOVE: usize = 4;

/// Pacing and safety knobs of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    pub policy: Policy,
    pub moves_per_sync: usize,
    pub cooldown: Duration,
    /// Plan and report, write nothing.
    pub dry_run: bool,
}

/// Everything a sync reads from the index, copied out so no lock is held across API calls.
pub struct Snapshot {
    pub tenants: Vec<TenantInfo>,
    pub deployments: BTreeMap<ShardIndex, bool>,
    pub releases: BTreeMap<String, Vec<(String, String, Option<String>)>>,
    /// Tenant → its namespace label (`None`: unlabelled); tenants without a namespace absent.
    pub namespace_labels: BTreeMap<String, Option<String>>,
    pub keyed_releases: u64,
}

impl Snapshot {
    pub fn take(index: &SharedIndex) -> Self {
        let index = index::read(index);
        let tenants = index.tenants();
        let namespace_labels = tenants
            .iter()
            .filter_map(|t| {
                let ns = index.tenant_namespace(&t.namespace)?;
                Some((t.namespace.clone(), ns.label.clone()))
            })
            .collect();
        Self {
            deployments: index.shard_deployments().clone(),
            releases: index.releases_by_tenant(),
            keyed_releases: index.totals().keyed_releases,
            namespace_labels,
            tenants,
        }
    }

    fn release_refs(&self, tenant: &str) -> Vec<ReleaseRef> {
        self.releases
            .get(tenant)
            .map(|rs| {
                rs.iter()
                    .map(|(namespace, name, _)| ReleaseRef {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Settled tenants (no move planned) on a live shard with a release or a namespace label not
/// saying so: left behind by a move that failed half-way, or stamped by an older webhook.
pub fn stragglers(plan: &Plan, snapshot: &Snapshot) -> Vec<(String, ShardIndex)> {
    let moving: Vec<&str> = plan.moves.iter().map(|m| m.tenant.as_str()).collect();
    snapshot
        .tenants
        .iter()
        .filter(|t| !t.deleting && !moving.contains(&t.namespace.as_str()))
        .filter_map(|t| {
            let target = *plan.placement.assignments.get(&t.namespace)?;
            let name = shard_name(target);
            let off = |key: &Option<String>| key.as_deref() != Some(name.as_str());
            let releases_off = snapshot
                .releases
                .get(&t.namespace)
                .is_some_and(|rs| rs.iter().any(|(_, _, key)| off(key)));
            let namespace_off = snapshot.namespace_labels.get(&t.namespace).is_some_and(off);
            (plan.live.contains(&target) && (releases_off || namespace_off))
                .then(|| (t.namespace.clone(), target))
        })
        .take(HEALS_PER_SYNC)
        .collect()
}

pub struct Controller {
    pub index: SharedIndex,
    pub relabeler: Relabeler,
    pub recorder: Recorder,
    pub settings: Settings,
    pub metrics: Metrics,
    /// Where the shard Deployments live (the Events' related object).
    pub flux_namespace: String,
    down: DownSince,
    last_moved: HashMap<String, Instant>,
    syncs: u64,
}

/// What one sync did, for logs and tests.
#[derive(Debug, Default)]
pub struct Report {
    pub moved: Vec<Move>,
    pub planned: usize,
    pub healed: usize,
}

impl Controller {
    pub fn new(
        index: SharedIndex,
        relabeler: Relabeler,
        recorder: Recorder,
        settings: Settings,
        metrics: Metrics,
        flux_namespace: String,
    ) -> Self {
        Self {
            index,
            relabeler,
            recorder,
            settings,
            metrics,
            flux_namespace,
            down: DownSince::default(),
            last_moved: HashMap::new(),
            syncs: 0,
        }
    }

    /// Plans and updates the gauges; every replica does this, so a new leader's shard-down
    /// clocks are already running.
    pub fn observe(&mut self, now: Instant) -> (Plan, Snapshot) {
        let snapshot = Snapshot::take(&self.index);
        let policy = &self.settings.policy;
        let health = self
            .down
            .observe(now.into_std(), policy.shard_count, &snapshot.deployments);
        let cooldown = self.settings.cooldown;
        self.last_moved
            .retain(|_, at| now.duration_since(*at) < cooldown);
        let plan = plan::plan(&snapshot.tenants, &health, policy, |t| {
            self.last_moved.contains_key(t)
        });
        let running = snapshot.deployments.len() as u64;
        let recommendation = plan::recommend(
            snapshot.keyed_releases,
            snapshot.tenants.len() as u64,
            running,
        );
        let m = &self.metrics;
        m.stranded.set(plan.stranded.len() as i64);
        m.imbalance.set(plan.imbalance);
        m.set_loads(&plan.placement.loads);
        m.recommended.set(gauge(recommendation.with_hysteresis));
        m.configured.set(i64::from(policy.shard_count));
        m.running.set(gauge(running));
        m.pending
            .set((plan.moves.len() + plan.placement.unplaced.len()) as i64);
        (plan, snapshot)
    }

    /// One sync as leader (or dry run): moves within the budget, then heals.
    pub async fn sync(&mut self, now: Instant, leading: &watch::Receiver<bool>) -> Report {
        let (plan, snapshot) = self.observe(now);
        self.syncs += 1;
        self.metrics.syncs.inc();
        let gate = Gate {
            live: plan.live.clone(),
            shard_count: self.settings.policy.shard_count,
        };
        let mut report = Report {
            planned: plan.moves.len(),
            ..Report::default()
        };
        let budget = self.settings.moves_per_sync;
        let may_write = || self.settings.dry_run || *leading.borrow();
        for m in plan
            .moves
            .iter()
            .take(budget.saturating_mul(ATTEMPTS_PER_MOVE))
        {
            if report.moved.len() >= budget || !may_write() {
                break;
            }
            if self.settings.dry_run {
                info!(tenant = %m.tenant, from = ?m.from.map(shard_name), to = %shard_name(m.to),
                      reason = m.reason.as_str(), "would move tenant (dry run)");
                report.moved.push(m.clone());
                continue;
            }
            let releases = snapshot.release_refs(&m.tenant);
            match self
                .relabeler
                .relabel(&m.tenant, &releases, m.to, &gate, Mode::Move)
                .await
            {
                Ok(Outcome::Relabelled { releases, .. }) => {
                    self.moved(m, releases, report.moved.len() + 1).await;
                    self.last_moved.insert(m.tenant.clone(), now);
                    report.moved.push(m.clone());
                }
                Ok(Outcome::AlreadyThere) => {}
                Ok(Outcome::Blocked(why)) => {
                    info!(tenant = %m.tenant, reason = why.as_str(), "move deferred");
                    self.metrics.blocked(why.as_str());
                }
                Ok(Outcome::Conflict) => self.metrics.blocked("conflict"),
                Err(error) => {
                    warn!(%error, tenant = %m.tenant, "move failed");
                    self.metrics.blocked("error");
                }
            }
        }
        self.metrics
            .pending
            .set((plan.moves.len() - report.moved.len() + plan.placement.unplaced.len()) as i64);
        // Rescued tenants are reconciled again from now on (a dry run rescued nobody).
        let rescued = report
            .moved
            .iter()
            .filter(|m| !self.settings.dry_run && plan.stranded.contains(&m.tenant))
            .count();
        self.metrics
            .stranded
            .set((plan.stranded.len() - rescued) as i64);
        if !self.settings.dry_run {
            report.healed = self.heal(&plan, &snapshot, &gate, leading).await;
        }
        if report.planned > 0 || report.healed > 0 {
            info!(
                sync = self.syncs,
                planned = report.planned,
                moved = report.moved.len(),
                healed = report.healed,
                stranded = plan.stranded.len(),
                "sync"
            );
        }
        report
    }

    async fn heal(
        &self,
        plan: &Plan,
        snapshot: &Snapshot,
        gate: &Gate,
        leading: &watch::Receiver<bool>,
    ) -> usize {
        let mut healed = 0;
        for (tenant, target) in stragglers(plan, snapshot) {
            if !*leading.borrow() {
                break;
            }
            let releases = snapshot.release_refs(&tenant);
            match self
                .relabeler
                .relabel(&tenant, &releases, target, gate, Mode::Heal)
                .await
            {
                Ok(Outcome::Relabelled { .. }) => {
                    info!(%tenant, shard = %shard_name(target), "healed stragglers");
                    self.metrics.heals.inc();
                    healed += 1;
                }
                Ok(_) => {}
                Err(error) => warn!(%error, %tenant, "healing stragglers failed"),
            }
        }
        healed
    }

    /// Records a move: metric, the index (ahead of the watch), an Event on the Namespace.
    async fn moved(&self, m: &Move, releases: usize, nth: usize) {
        self.metrics.moved(m.reason.as_str());
        index::write(&self.index).record_label(&m.tenant, m.to);
        let from = m.from.map_or_else(|| "no shard".to_owned(), shard_name);
        let note = format!(
            "moved from {from} to {} ({}): {releases} HelmRelease(s) relabelled; sync {}, move {nth} of at most {}",
            shard_name(m.to),
            m.reason.as_str(),
            self.syncs,
            self.settings.moves_per_sync,
        );
        info!(tenant = %m.tenant, %from, to = %shard_name(m.to), reason = m.reason.as_str(),
              releases, "moved tenant");
        let event = Event {
            type_: EventType::Normal,
            reason: "ShardMoved".into(),
            note: Some(note),
            action: "Relabel".into(),
            // The shard now reconciling the tenant. Also keeps the Recorder from folding a later
            // move of the same tenant into this event as a series (its key has no note).
            secondary: Some(ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                namespace: Some(self.flux_namespace.clone()),
                name: Some(placement::shard::deployment_name(m.to)),
                ..ObjectReference::default()
            }),
        };
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(m.tenant.clone()),
            ..ObjectReference::default()
        };
        if let Err(error) = self.recorder.publish(&event, &regarding).await {
            warn!(%error, tenant = %m.tenant, "cannot record the move event");
        }
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, Release, TenantNamespace};
    use kube::runtime::events::Reporter;
    use placement::plan::ShardHealth;
    use runtime::mock;
    use std::collections::BTreeMap as Map;

    /// An index with `n` tenants stranded on removed shard5 and two ready shards.
    fn stranded_index(n: usize) -> SharedIndex {
        let index = Index::shared();
        {
            let mut ix = index::write(&index);
            for i in 0..n {
                let ns = format!("tenant-{i:02}");
                let labels = Map::from([(
                    placement::shard::NAMESPACE_SHARD_LABEL.to_owned(),
                    "shard5".to_owned(),
                )]);
                ix.apply_namespace(&ns, TenantNamespace::new(&labels, false));
                let keys = Map::from([(
                    placement::shard::SHARD_KEY_LABEL.to_owned(),
                    "shard5".to_owned(),
                )]);
                ix.apply_release(&ns, "app", Release::new(&ns, "app", &keys));
            }
            ix.apply_deployment(0, true);
            ix.apply_deployment(1, true);
        }
        index
    }

    #[tokio::test]
    async fn a_dry_run_paces_the_plan_and_sends_nothing() {
        let (client, server) = mock::client();
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        let settings = Settings {
            policy: Policy {
                shard_count: 2,
                ..Policy::default()
            },
            moves_per_sync: 5,
            cooldown: Duration::from_secs(600),
            dry_run: true,
        };
        let mut controller = Controller::new(
            stranded_index(12),
            Relabeler::new(
                client.clone(),
                crate::watch::helmrelease_resource(),
                Duration::from_secs(1),
            ),
            Recorder::new(client, reporter),
            settings,
            Metrics::default(),
            "cozy-fluxcd".into(),
        );
        // Not the leader: a dry run still reports, because it writes nothing.
        let (_tx, leading) = watch::channel(false);
        let report = controller.sync(Instant::now(), &leading).await;
        assert_eq!(report.planned, 12);
        assert_eq!(report.moved.len(), 5, "paced to --moves-per-sync");
        assert!(
            report
                .moved
                .iter()
                .all(|m| m.reason == plan::MoveReason::ShardRemoved)
        );
        assert_eq!(
            controller.metrics.stranded.get(),
            12,
            "a dry run rescues nobody"
        );
        server.done();
    }

    fn tenant(ns: &str, current: Option<ShardIndex>) -> TenantInfo {
        TenantInfo {
            namespace: ns.into(),
            weight: 1,
            current,
            deleting: false,
        }
    }

    #[test]
    fn stragglers_are_settled_tenants_with_a_release_or_label_elsewhere() {
        let snapshot = Snapshot {
            tenants: vec![
                tenant("tenant-ok", Some(0)),
                tenant("tenant-half", Some(0)),
                tenant("tenant-unlabelled", Some(1)),
                tenant("tenant-moving", Some(5)),
            ],
            deployments: BTreeMap::new(),
            releases: BTreeMap::from([
                (
                    "tenant-ok".into(),
                    vec![("tenant-ok".into(), "a".into(), Some("shard0".into()))],
                ),
                (
                    "tenant-half".into(),
                    vec![
                        ("tenant-half".into(), "a".into(), Some("shard0".into())),
                        ("tenant-half".into(), "b".into(), Some("shard5".into())),
                    ],
                ),
                (
                    "tenant-unlabelled".into(),
                    vec![(
                        "tenant-unlabelled".into(),
                        "a".into(),
                        Some("shard1".into()),
                    )],
                ),
                (
                    "tenant-moving".into(),
                    vec![("tenant-moving".into(), "a".into(), Some("shard5".into()))],
                ),
            ]),
            namespace_labels: BTreeMap::from([
                ("tenant-ok".into(), Some("shard0".into())),
                ("tenant-half".into(), Some("shard0".into())),
                ("tenant-unlabelled".into(), None),
                ("tenant-moving".into(), Some("shard5".into())),
            ]),
            keyed_releases: 5,
        };
        let health = BTreeMap::from([(0, ShardHealth::Ready), (1, ShardHealth::Ready)]);
        let policy = Policy {
            shard_count: 2,
            ..Policy::default()
        };
        let plan = plan::plan(&snapshot.tenants, &health, &policy, |_| false);
        assert_eq!(plan.moves.len(), 1, "{:?}", plan.moves);
        assert_eq!(
            stragglers(&plan, &snapshot),
            vec![("tenant-half".into(), 0), ("tenant-unlabelled".into(), 1)]
        );
    }
}
