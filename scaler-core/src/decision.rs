//! The guarded instance count: a pure function of the policy and one observation.
//!
//! Each step is a function of [`decide`]'s chain:
//! 1. `raw`: `1 + ceil(load / target)`, one primary plus the read replicas the load needs; with
//!    several signals (`metric` plus `signals`), the largest `raw` wins and names its signal.
//! 2. `bounds`: `floor = max(minReplicas, quorum + 1, 2)`, `ceiling = max(maxReplicas, floor)`;
//!    the quorum wins over `maxReplicas`.
//! 3. `clamp`: `clamp(raw, floor, ceiling)`, named for the bound that decided.
//! 4. `schedule`: an open window's floor raises it, capped at the ceiling (maxReplicas wins).
//! 5. `quota`: a growing count is capped at the largest count the namespace's ResourceQuotas
//!    fit, but never below the current count or the floor (quorum and floor win; the quota wins
//!    over a schedule). A quota that cannot be read fits nothing more: growth is held (reason
//!    `quota-unreadable`), never left unguarded.
//! 6. `scale_in_hold` (`scaleIn: disabled`, or an open window that says so): never below
//!    `min(current, ceiling)` (a lowered maxReplicas still wins). This is `recommended`.
//! 7. `stuck`, the convergence hold: when `spec.instances` has been above the ready count for
//!    longer than the deadline, a `recommended` above the ready count is held at
//!    `max(ready, floor)`, in back-off windows (see [`convergence_phase`]).
//! 8. `brake_hold` and `dry_run` both hold the current count, clamped into `[floor, ceiling]`.
//!    The brake engages while the primary writes and, for CNPG (threshold > 0), replica lag over
//!    5 min is above `maxReplicationLagSeconds`; for Redis, a replica's link is down, a replica
//!    is in a full sync, or (threshold > 0) its offset lag is above `maxReplicationLagBytes`.
//!    Each engine reads only its own unit: a byte offset never meets a seconds threshold.
//!    Unknown is never fine: a replica whose lag is unknown counts as lagging, and write activity
//!    that is unknown (no rate yet: a series younger than two samples, or none) counts as
//!    writing. Only a primary known to be idle releases a lagging replica's brake.
//!
//! `engine: pgbouncer` (docs/pooler.md) has no primary, quorum, brake or convergence hold:
//! `raw = ceil(clients / target)`; after the schedule, clients waiting longer than
//! `maxClientWaitSeconds` raise the count to `current + 1` (`client-wait`); any waiting client
//! holds scale-in like `scaleIn: disabled` does; a scale-in goes one instance per decision
//! (`scale-in-pace`); last, the count never exceeds what the database's connection budget
//! fits, nor goes below 1 (`connection-budget`).
//!
//! Precedence, strongest first: dry-run > stuck > brake > connection budget > scale-in pace >
//! scale-in hold > quota > client wait > schedule > quorum > minReplicas/maxReplicas. The stuck hold wins over the scale-in hold: the instances it
//! gives back never became ready, so they never served.
use std::fmt;

use serde::Serialize;

use crate::metadata::{Engine, MAX_EXTRA_SIGNALS, Metric, Signal};
use crate::pooler::ConnectionBudget;

/// Why the count is what it is; one label value per variant for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The load asked for this count, within bounds.
    Load,
    /// Raised to `minReplicas` (or the absolute minimum of 2).
    Floor,
    /// Raised to the synchronous quorum + 1, possibly above `maxReplicas`.
    Quorum,
    /// Capped at `maxReplicas`.
    Max,
    /// Held by the lag brake.
    Brake,
    /// Held because of `dryRun`.
    DryRun,
    /// Growth capped by the namespace's ResourceQuota.
    Quota,
    /// Growth held: a ResourceQuota of the namespace cannot be read, so what fits is unknown.
    QuotaUnreadable,
    /// Held at the ready count: a scale-up did not converge within the deadline.
    Stuck,
    /// Raised to the floor of an open schedule window.
    Schedule,
    /// Kept at the current count: scale-in is disabled (always, or by an open window), or
    /// (PgBouncer) clients are waiting.
    ScaleInHold,
    /// PgBouncer: raised by one, clients wait longer than `maxClientWaitSeconds`.
    ClientWait,
    /// PgBouncer: a scale-in limited to one instance per decision.
    ScaleInPace,
    /// PgBouncer: capped at the instances whose pools the database's connections fit.
    ConnectionBudget,
}

impl Reason {
    pub const ALL: [Reason; 14] = [
        Self::Load,
        Self::Floor,
        Self::Quorum,
        Self::Max,
        Self::Brake,
        Self::DryRun,
        Self::Quota,
        Self::QuotaUnreadable,
        Self::Stuck,
        Self::Schedule,
        Self::ScaleInHold,
        Self::ClientWait,
        Self::ScaleInPace,
        Self::ConnectionBudget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::Floor => "floor",
            Self::Quorum => "quorum",
            Self::Max => "max",
            Self::Brake => "brake",
            Self::DryRun => "dry-run",
            Self::Quota => "quota",
            Self::QuotaUnreadable => "quota-unreadable",
            Self::Stuck => "stuck",
            Self::Schedule => "schedule",
            Self::ScaleInHold => "scale-in-hold",
            Self::ClientWait => "client-wait",
            Self::ScaleInPace => "scale-in-pace",
            Self::ConnectionBudget => "connection-budget",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bounds and switches for one ScaledObject, with the quorum already resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Policy {
    /// Which brake applies (and what the other fields count).
    pub engine: Engine,
    /// The trigger's `metric` and its `target` (the target also encodes GetMetrics).
    pub metric: Metric,
    pub target: f64,
    /// The `signals` besides `metric`, in order; `Observation::extra_loads` holds their loads.
    pub extra: [Option<Signal>; MAX_EXTRA_SIGNALS],
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Synchronous quorum (`maxSyncReplicas` or the Cluster's `synchronous.number`).
    pub quorum: u32,
    /// CNPG lag brake threshold in seconds; 0 = off. Never read for Redis.
    pub max_lag_seconds: f64,
    /// Redis replica offset lag threshold in bytes; 0 = that part off. Never read for CNPG.
    pub max_lag_bytes: f64,
    pub dry_run: bool,
    /// How long `spec.instances` may stay above the ready count before the hold; 0 = off.
    pub convergence_deadline_seconds: f64,
    /// The floor of the open schedule windows at this instant; 0 = none.
    pub schedule_floor: u32,
    /// Scale-in is off (`scaleIn: disabled`, or an open window says so).
    pub scale_in_disabled: bool,
    /// PgBouncer: a longest client wait above this raises the count; 0 = off. Never read for
    /// other engines.
    pub max_client_wait_seconds: f64,
}

/// A Pooler's clients and the database's connection budget (CNPG's pooler exporter).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoolerLoad {
    /// Clients waiting for a server connection now (SHOW POOLS `cl_waiting`, summed).
    pub waiting: u32,
    /// How long the oldest waiting client of any pool has waited, in seconds.
    pub max_wait_seconds: f64,
    pub budget: ConnectionBudget,
}

/// The largest total instance count the namespace's ResourceQuotas fit, and the resource that
/// binds (e.g. `requests.cpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QuotaCeiling {
    pub instances: u32,
    pub resource: &'static str,
    /// The binding quota could not be read: `instances` is what exists, growth is held.
    pub unreadable: bool,
}

/// The Cluster's convergence, from its status (the same for every scaler replica).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Convergence {
    /// `status.readyInstances`.
    pub ready: u32,
    /// Seconds since the Cluster's `Ready` condition turned `False` while `spec.instances` is above
    /// `ready`; `None` when it is converged or the condition says nothing.
    pub not_ready_seconds: Option<f64>,
}

/// The replicas' replication health of a Redis master and its replicas (redis_exporter).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct RedisReplication {
    /// Replicas whose link to the master is down (`redis_master_link_up` 0).
    pub links_down: u32,
    /// Replicas loading a full sync (`redis_master_sync_in_progress` 1).
    pub syncing: u32,
    /// Largest offset lag of a replica behind the master over the window, in bytes; `None`
    /// without the master's per-replica offsets.
    pub max_lag_bytes: Option<f64>,
}

/// What was measured, turned into plain numbers at the I/O edge.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observation {
    /// Instances the scale target has now (Cluster `spec.instances`, or instance series).
    pub current: u32,
    /// Σ read load over replicas of `Policy::metric` (connections, CPU millicores, or connection
    /// usage in percent); finite and ≥ 0.
    pub load: f64,
    /// The loads of `Policy::extra`, slot by slot (0 where there is no signal).
    pub extra_loads: [f64; MAX_EXTRA_SIGNALS],
    /// Largest replica lag over the last 5 minutes, in seconds; `None` when no replica lags
    /// (or none has a lag series: see `lag_unknown`).
    pub max_lag_seconds: Option<f64>,
    /// Some replica's lag is unknown: CNPG, a replica without a lag series; Redis (with a byte
    /// threshold), replicas but none of the master's per-replica offsets.
    pub lag_unknown: bool,
    /// Whether the primary wrote recently: CNPG `rate(cnpg_collector_wal_bytes[5m]) > 0`, Redis
    /// its replication offset advancing faster than its own pings to replicas. `None`: unknown
    /// (no rate: the series is missing or younger than two samples).
    pub primary_writing: Option<bool>,
    /// Redis replication health; `None` for CNPG.
    pub redis: Option<RedisReplication>,
    /// PgBouncer's waits and budget; `None` for other engines.
    pub pooler: Option<PoolerLoad>,
    /// `None` without a Kubernetes topology or without a ResourceQuota that limits instances.
    pub quota: Option<QuotaCeiling>,
    /// `None` without a Kubernetes topology or without Cluster status.
    pub convergence: Option<Convergence>,
}

/// Where a non-converging scale-up stands, reported even when it does not decide the count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ConvergencePhase {
    /// No status to judge by, or the hold is off.
    Unknown,
    /// `spec.instances` is not above the ready count (or the Cluster has not said otherwise).
    Converged,
    /// Above the ready count for `seconds`, still within the deadline.
    Converging { seconds: f64 },
    /// Past the deadline: hold number `attempt` (its length doubles, capped at 8× the deadline).
    Hold {
        attempt: u32,
        remaining_seconds: f64,
    },
    /// Between holds: ask again for one deadline's length.
    Retry {
        attempt: u32,
        remaining_seconds: f64,
    },
}

/// The phase `elapsed` seconds into a non-convergence episode: converging for one deadline, then
/// hold 1×, retry 1×, hold 2×, retry 1×, hold 4×, retry 1×, then hold 8×, retry 1× for ever
/// (all in deadlines). A pure function of the episode's start, so every replica agrees.
pub fn convergence_phase(elapsed: f64, deadline: f64) -> ConvergencePhase {
    if !(deadline.is_finite() && deadline > 0.0) || elapsed.is_nan() {
        return ConvergencePhase::Unknown;
    }
    if elapsed < deadline {
        return ConvergencePhase::Converging {
            seconds: elapsed.max(0.0),
        };
    }
    let mut t = elapsed - deadline;
    for attempt in 1..=4u32 {
        let hold = deadline * f64::from(1u32 << (attempt - 1));
        if let Some(phase) = within_cycle(t, hold, deadline, attempt) {
            return phase;
        }
        t -= hold + deadline;
    }
    // From the fourth hold on every cycle is 8× hold + 1× retry.
    let period = 9.0 * deadline;
    let cycles = (t / period).floor();
    let attempt = (5.0 + cycles).min(f64::from(u32::MAX)) as u32;
    within_cycle(t % period, 8.0 * deadline, deadline, attempt).unwrap_or(ConvergencePhase::Retry {
        attempt,
        remaining_seconds: 0.0,
    })
}

fn within_cycle(t: f64, hold: f64, retry: f64, attempt: u32) -> Option<ConvergencePhase> {
    if t < hold {
        Some(ConvergencePhase::Hold {
            attempt,
            remaining_seconds: hold - t,
        })
    } else if t < hold + retry {
        Some(ConvergencePhase::Retry {
            attempt,
            remaining_seconds: hold + retry - t,
        })
    } else {
        None
    }
}

/// State of the lag brake, reported even when it does not decide the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Brake {
    /// Threshold is 0 (CNPG; the Redis brake is never off).
    Off,
    /// Every replica's lag is known and at or below the threshold; for Redis, every link up and
    /// no full sync.
    Clear,
    /// Unhealthy (or unknown) replication but the primary is known to be idle: the known false
    /// alarm.
    IdleLag,
    /// Unhealthy (or unknown) replication while the primary writes or its writes are unknown:
    /// hold.
    Engaged,
}

/// The outcome with every intermediate value, for `explain`, logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Decision {
    /// The count to publish (GetMetrics value = desired × target).
    pub desired: u32,
    /// What the load and bounds alone ask for (published in dry-run).
    pub recommended: u32,
    /// `1 + ceil(load / target)` of the winning signal.
    pub raw: u32,
    /// The signal whose load asked for the most replicas (ties: `metric`, then `signals` order).
    pub signal: Metric,
    pub floor: u32,
    /// `max(maxReplicas, floor)`.
    pub ceiling: u32,
    pub brake: Brake,
    /// The quota's cap as applied: `max(quota, current, floor)`; `None` without a quota.
    pub quota_ceiling: Option<u32>,
    pub convergence: ConvergencePhase,
    pub reason: Reason,
}

/// Decides the guarded instance count. Total: never panics, whatever the inputs.
///
/// The steps of the module docs in order, each a function: the count and the guard that set
/// it pass from one to the next; the last three (dry-run, stuck, brake) hold the count instead,
/// strongest first.
pub fn decide(policy: &Policy, obs: &Observation) -> Decision {
    let (raw, signal) = raw(policy, obs);
    let bounds = bounds(policy);
    let loaded = clamp(policy, &bounds, raw);
    let scheduled = schedule(policy, &bounds, loaded);
    let waited = client_wait(policy, obs, &bounds, scheduled);
    let quota_ceiling = quota_ceiling(obs, &bounds);
    let capped = quota(obs, quota_ceiling, waited);
    let held = scale_in_hold(policy, obs, &bounds, capped);
    let recommended = connection_budget(obs, scale_in_pace(obs, &bounds, held));
    let convergence = convergence(policy, obs);
    let brake = brake(policy, obs);
    let hold = obs.current.clamp(bounds.floor, bounds.ceiling);
    let braked = brake_hold(brake, hold);
    // The stuck hold caps the brake's hold too: otherwise a brake would keep instances that
    // never became ready, and less load (not asking above the ready count) would answer more.
    let ask = braked.unwrap_or(recommended);
    let desired = dry_run(policy, hold)
        .or(stuck(convergence, obs, &bounds, ask))
        .or(braked)
        .unwrap_or(recommended);
    Decision {
        desired: desired.count,
        recommended: recommended.count,
        raw,
        signal,
        floor: bounds.floor,
        ceiling: bounds.ceiling,
        brake,
        quota_ceiling,
        convergence,
        reason: desired.reason,
    }
}

/// A count and the guard that set it.
#[derive(Debug, Clone, Copy)]
struct Step {
    count: u32,
    reason: Reason,
}

/// The range every step keeps the count in, and what raised its floor.
struct Bounds {
    floor: u32,
    /// `Floor` or `Quorum`.
    floor_reason: Reason,
    ceiling: u32,
}

/// Step 1: `1 + ceil(load / target)` of the signal that needs the most replicas (ties: `metric`,
/// then `signals` order); a Pooler has no primary: `ceil(load / target)`.
fn raw(policy: &Policy, obs: &Observation) -> (u32, Metric) {
    let needed = |load: f64, target: f64| {
        if target > 0.0 && load.is_finite() && load > 0.0 {
            // `as` saturates, so an absurd load caps at u32::MAX instead of wrapping.
            (load / target).ceil() as u32
        } else {
            0
        }
    };
    let (mut replicas_needed, mut signal) = (needed(obs.load, policy.target), policy.metric);
    for (extra, load) in policy.extra.iter().zip(obs.extra_loads) {
        if let Some(s) = extra {
            let n = needed(load, s.target);
            if n > replicas_needed {
                (replicas_needed, signal) = (n, s.metric);
            }
        }
    }
    let primary = u32::from(policy.engine != Engine::Pgbouncer);
    (replicas_needed.saturating_add(primary), signal)
}

/// Step 2: `floor = max(minReplicas, quorum + 1, 2)`, and the ceiling `max(maxReplicas, floor)`:
/// the quorum wins over maxReplicas.
fn bounds(policy: &Policy) -> Bounds {
    let quorum_floor = policy.quorum.saturating_add(1);
    let floor = policy.min_replicas.max(quorum_floor).max(2);
    let floor_reason = if quorum_floor > policy.min_replicas.max(2) {
        Reason::Quorum
    } else {
        Reason::Floor
    };
    Bounds {
        floor,
        floor_reason,
        ceiling: policy.max_replicas.max(floor),
    }
}

/// Step 3: `clamp(raw, floor, ceiling)`, named for the bound that decided (`Load` within them).
fn clamp(policy: &Policy, bounds: &Bounds, raw: u32) -> Step {
    let (count, reason) = if raw < bounds.floor {
        (bounds.floor, bounds.floor_reason)
    } else if raw > bounds.ceiling {
        // The ceiling exceeds maxReplicas only when the floor raised it: then the floor decided.
        let reason = if bounds.ceiling > policy.max_replicas {
            bounds.floor_reason
        } else {
            Reason::Max
        };
        (bounds.ceiling, reason)
    } else if bounds.floor > policy.max_replicas {
        // raw == floor == ceiling, and the quorum overrode maxReplicas.
        (raw, bounds.floor_reason)
    } else {
        (raw, Reason::Load)
    };
    Step { count, reason }
}

/// Step 4: an open window's floor raises the count; it never goes above the ceiling
/// (maxReplicas, or the quorum, bounds it).
fn schedule(policy: &Policy, bounds: &Bounds, step: Step) -> Step {
    let scheduled = policy.schedule_floor.min(bounds.ceiling);
    if step.count < scheduled {
        Step {
            count: scheduled,
            reason: Reason::Schedule,
        }
    } else {
        step
    }
}

/// PgBouncer: the oldest client waiting longer than the threshold raises the count to one more
/// than now, within the ceiling (the wait says the instances there are do not suffice, whatever
/// the client count says).
fn client_wait(policy: &Policy, obs: &Observation, bounds: &Bounds, step: Step) -> Step {
    let raised = obs.current.saturating_add(1).min(bounds.ceiling);
    match obs.pooler {
        Some(p)
            if policy.max_client_wait_seconds > 0.0
                && p.max_wait_seconds > policy.max_client_wait_seconds
                && step.count < raised =>
        {
            Step {
                count: raised,
                reason: Reason::ClientWait,
            }
        }
        _ => step,
    }
}

/// PgBouncer: a scale-in goes one instance at a time (a pooler that loses an instance drops its
/// clients, who reconnect to the others); a lowered maxReplicas still wins.
fn scale_in_pace(obs: &Observation, bounds: &Bounds, step: Step) -> Step {
    let paced = obs.current.saturating_sub(1).min(bounds.ceiling);
    if obs.pooler.is_some() && step.count < paced {
        Step {
            count: paced,
            reason: Reason::ScaleInPace,
        }
    } else {
        step
    }
}

/// PgBouncer, last of the count's steps: never more instances than the database's connections
/// fit, whatever raised the count (the floor and minReplicas included), and never fewer than
/// one: with no room left a Pooler of one still serves its clients within what exists, where
/// none would cut them all off.
fn connection_budget(obs: &Observation, step: Step) -> Step {
    match obs.pooler {
        Some(p) if step.count > p.budget.fits.max(1) => Step {
            count: p.budget.fits.max(1),
            reason: Reason::ConnectionBudget,
        },
        _ => step,
    }
}

/// The quota's cap as applied: it only limits growth, never below the current count or the floor.
fn quota_ceiling(obs: &Observation, bounds: &Bounds) -> Option<u32> {
    obs.quota
        .map(|q| q.instances.max(obs.current).max(bounds.floor))
}

/// Step 5: growth capped at the quota ceiling; a quota that cannot be read holds it.
fn quota(obs: &Observation, quota_ceiling: Option<u32>, step: Step) -> Step {
    match quota_ceiling {
        Some(cap) if step.count > cap => Step {
            count: cap,
            reason: match obs.quota {
                Some(q) if q.unreadable => Reason::QuotaUnreadable,
                _ => Reason::Quota,
            },
        },
        _ => step,
    }
}

/// Step 6: with scale-in off, or (PgBouncer) any client waiting, never below
/// `min(current, ceiling)`. The quota's cap is never below the current count, so it never
/// conflicts with this hold.
fn scale_in_hold(policy: &Policy, obs: &Observation, bounds: &Bounds, step: Step) -> Step {
    let kept = obs.current.min(bounds.ceiling);
    let waiting = obs.pooler.is_some_and(|p| p.waiting > 0);
    if (policy.scale_in_disabled || waiting) && step.count < kept {
        Step {
            count: kept,
            reason: Reason::ScaleInHold,
        }
    } else {
        step
    }
}

/// Where a non-converging scale-up stands, from the Cluster's status and the deadline.
fn convergence(policy: &Policy, obs: &Observation) -> ConvergencePhase {
    match obs.convergence {
        _ if policy.convergence_deadline_seconds <= 0.0 => ConvergencePhase::Unknown,
        None => ConvergencePhase::Unknown,
        Some(Convergence {
            not_ready_seconds: None,
            ..
        }) => ConvergencePhase::Converged,
        Some(Convergence {
            not_ready_seconds: Some(elapsed),
            ..
        }) => convergence_phase(elapsed, policy.convergence_deadline_seconds),
    }
}

/// Step 7: in a hold phase, an ask (the recommendation, or the brake's hold) above the ready
/// count is held at `max(ready, floor)`. Holding at the floor when the floor is what is asked
/// would change nothing: no hold.
fn stuck(
    convergence: ConvergencePhase,
    obs: &Observation,
    bounds: &Bounds,
    ask: Step,
) -> Option<Step> {
    match (convergence, obs.convergence) {
        (ConvergencePhase::Hold { .. }, Some(c)) if ask.count > c.ready.max(bounds.floor) => {
            Some(Step {
                count: c.ready.max(bounds.floor),
                reason: Reason::Stuck,
            })
        }
        _ => None,
    }
}

/// Step 8: an engaged lag brake holds the current count (within the bounds).
fn brake_hold(brake: Brake, hold: u32) -> Option<Step> {
    (brake == Brake::Engaged).then_some(Step {
        count: hold,
        reason: Reason::Brake,
    })
}

/// Step 8, strongest: dry-run holds the current count (within the bounds).
fn dry_run(policy: &Policy, hold: u32) -> Option<Step> {
    policy.dry_run.then_some(Step {
        count: hold,
        reason: Reason::DryRun,
    })
}

/// The brake's state: each engine compares only its own measurement with its own threshold.
fn brake(policy: &Policy, obs: &Observation) -> Brake {
    let (on, lagging) = match policy.engine {
        Engine::Cnpg => (
            policy.max_lag_seconds > 0.0,
            obs.max_lag_seconds
                .is_some_and(|lag| lag > policy.max_lag_seconds),
        ),
        // A Pooler has no replication to brake on.
        Engine::Pgbouncer => (false, false),
        // Evaluation refuses a Redis answer without health series, so `None` never gets here.
        Engine::Redis => (
            true,
            obs.redis.is_some_and(|r| {
                r.links_down > 0
                    || r.syncing > 0
                    || (policy.max_lag_bytes > 0.0
                        && r.max_lag_bytes
                            .is_some_and(|lag| lag > policy.max_lag_bytes))
            }),
        ),
    };
    match (on, lagging || obs.lag_unknown, obs.primary_writing) {
        (false, _, _) => Brake::Off,
        (true, false, _) => Brake::Clear,
        (true, true, Some(false)) => Brake::IdleLag,
        // Writing, or not known to be idle.
        (true, true, Some(true) | None) => Brake::Engaged,
    }
}

/// What the primary's write activity is, in a brake sentence: unknown never reads as idle.
fn writes(obs: &Observation, writing: &str) -> String {
    match obs.primary_writing {
        Some(true) => writing.to_owned(),
        Some(false) => "is idle".to_owned(),
        None => "may be writing (its write rate is unknown: no rate yet)".to_owned(),
    }
}

impl Decision {
    /// One sentence for logs and `explain`.
    pub fn summary(&self, policy: &Policy, obs: &Observation) -> String {
        let (load, target) = policy
            .extra
            .iter()
            .zip(obs.extra_loads)
            .find_map(|(s, load)| {
                s.filter(|s| s.metric == self.signal)
                    .map(|s| (load, s.target))
            })
            .unwrap_or((obs.load, policy.target));
        let load = match obs.pooler {
            Some(p) => format!(
                "{} {load} ({} waiting) / target {target} needs {} instances",
                self.signal, p.waiting, self.raw
            ),
            None => format!(
                "{} {load} / target {target} needs 1 primary + {} replicas = {}",
                self.signal,
                self.raw.saturating_sub(1),
                self.raw
            ),
        };
        match self.reason {
            Reason::Load => format!("{load}; within [{}, {}]", self.floor, self.ceiling),
            Reason::Floor => format!(
                "{load}; raised to the floor {} (max of minReplicas {} and 2)",
                self.floor, policy.min_replicas
            ),
            Reason::Quorum if self.floor > policy.max_replicas => format!(
                "{load}; the synchronous quorum {} needs at least {} instances, which wins over maxReplicas {}",
                policy.quorum, self.floor, policy.max_replicas
            ),
            Reason::Quorum => format!(
                "{load}; raised to the synchronous quorum {} + 1 = {}",
                policy.quorum, self.floor
            ),
            Reason::Max => format!("{load}; capped at maxReplicas {}", policy.max_replicas),
            Reason::Schedule => format!(
                "{load}; raised to {} by an open schedule window (its floor {})",
                self.desired, policy.schedule_floor
            ),
            Reason::ScaleInHold if !policy.scale_in_disabled => format!(
                "{load}; clients are waiting for a server connection: holding the current {} \
                 instances",
                self.desired
            ),
            Reason::ScaleInHold => format!(
                "{load}; scale-in is disabled: holding the current {} instances",
                self.desired
            ),
            Reason::ClientWait => format!(
                "{load}; the oldest waiting client has waited {}s > maxClientWaitSeconds {}s: \
                 raised to {} (current {})",
                obs.pooler.map_or(0.0, |p| p.max_wait_seconds),
                policy.max_client_wait_seconds,
                self.desired,
                obs.current
            ),
            Reason::ScaleInPace => format!(
                "{load}; scale-in goes one instance per decision: {} (current {})",
                self.desired, obs.current
            ),
            Reason::ConnectionBudget => match obs.pooler {
                Some(p) => {
                    let b = p.budget;
                    format!(
                        "{load}; capped at {} by the connection budget: max_connections {} − \
                         reserved {} − other clients {} leaves room for {} instances of {} server \
                         connections each{}",
                        self.desired,
                        b.max_connections,
                        b.reserved,
                        b.other,
                        b.fits,
                        b.per_instance,
                        if b.fits == 0 {
                            " (none fits: held at 1, the least that serves clients)"
                        } else {
                            ""
                        }
                    )
                }
                None => format!(
                    "{load}; capped at {} by the connection budget",
                    self.desired
                ),
            },
            Reason::Brake => match (policy.engine, obs.redis) {
                (Engine::Redis, Some(r)) => format!(
                    "replication brake: {} replica link(s) down, {} in a full sync, offset lag {} \
                     bytes (threshold {}) while the master {}; holding {} (recommended {})",
                    r.links_down,
                    r.syncing,
                    r.max_lag_bytes
                        .filter(|_| !obs.lag_unknown)
                        .map_or("unknown".into(), |b| b.to_string()),
                    if policy.max_lag_bytes > 0.0 {
                        policy.max_lag_bytes.to_string()
                    } else {
                        "off".into()
                    },
                    writes(obs, "writes"),
                    self.desired,
                    self.recommended
                ),
                _ => format!(
                    "lag brake: {} while the primary {}; holding {} (recommended {})",
                    if obs.lag_unknown {
                        "a replica's lag is unknown (no lag series)".to_owned()
                    } else {
                        format!(
                            "replica lag {:?}s > {}s",
                            obs.max_lag_seconds.unwrap_or_default(),
                            policy.max_lag_seconds
                        )
                    },
                    writes(obs, "writes WAL"),
                    self.desired,
                    self.recommended
                ),
            },
            Reason::Quota => format!(
                "{load}; capped at {} instances: the namespace's ResourceQuota ({}) fits no more",
                self.desired,
                obs.quota.map_or("?", |q| q.resource)
            ),
            Reason::QuotaUnreadable => format!(
                "{load}; growth held at {} instances: a ResourceQuota of the namespace cannot be \
                 read, so what fits is unknown",
                self.desired
            ),
            Reason::Stuck => format!(
                "spec.instances {} has been above the {} ready instances for longer than the \
                 convergence deadline {}s; holding {} (recommended {}) {}",
                obs.current,
                obs.convergence.map_or(0, |c| c.ready),
                policy.convergence_deadline_seconds,
                self.desired,
                self.recommended,
                match self.convergence {
                    ConvergencePhase::Hold {
                        attempt,
                        remaining_seconds,
                    } => format!("for another {remaining_seconds:.0}s (back-off {attempt})"),
                    _ => String::new(),
                }
            ),
            Reason::DryRun => format!(
                "dry run: holding {} instances; recommended {} ({load})",
                self.desired, self.recommended
            ),
        }
    }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
