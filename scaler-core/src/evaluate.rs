//! The pure evaluation: one query answer, the Cluster's facts and the trigger's config in,
//! every input of the decision and the decision out.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::cluster::{ClusterFacts, Snapshot};
use crate::decision::{
    self, Convergence, Decision, Observation, Policy, PoolerLoad, QuotaCeiling, RedisReplication,
};
use crate::metadata::{Engine, MAX_EXTRA_SIGNALS, Metric, PoolerConfig, ScalerConfig};
use crate::pooler;
use crate::promql::part;
use crate::promql::redis::BACKGROUND_REPL_BYTES_PER_SECOND;
use crate::quota::{self, Fit};
use crate::schedule;

/// The answer lacks what a decision needs: an error, never a zero.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvaluateError {
    #[error(
        "no instance series for CNPG cluster {cluster:?} in namespace {namespace:?} \
         (cnpg_pg_replication_in_recovery with pod=~\"{cluster}-<n>\"): is the cluster running and scraped?"
    )]
    NoInstances { namespace: String, cluster: String },
    #[error(
        "CPU series (container_cpu_usage_seconds_total{{container=\"postgres\"}}) exist for {with_series} of \
         {replicas} replicas past warm-up of CNPG cluster {cluster:?} in namespace {namespace:?}: are cAdvisor metrics scraped?"
    )]
    MissingCpuSeries {
        namespace: String,
        cluster: String,
        replicas: u32,
        with_series: u32,
    },
    #[error(
        "the last scrape of {pods} instance pod(s) of CNPG cluster {cluster:?} in namespace {namespace:?} \
         failed (up == 0): every series of a failed scrape goes stale, so the replicas and their load are \
         unknown until a scrape succeeds; does the exporter (port metrics) answer within the scrape timeout?"
    )]
    ScrapeFailed {
        namespace: String,
        cluster: String,
        pods: u32,
    },
    #[error(
        "client sessions (cnpg_backends_total) were scraped from {with_series} of {replicas} replicas of CNPG \
         cluster {cluster:?} in namespace {namespace:?}: a scrape gap reads as no sessions, so the load is unknown; \
         are the instances scraped, and CNPG's default monitoring queries (backends) enabled?"
    )]
    MissingConnectionSeries {
        namespace: String,
        cluster: String,
        replicas: u32,
        with_series: u32,
    },
    #[error(
        "max_connections (cnpg_pg_settings_setting{{name=\"max_connections\"}}) is known for {with_series} of \
         {replicas} streaming replicas of CNPG cluster {cluster:?} in namespace {namespace:?}: are CNPG's default \
         monitoring queries (pg_settings) enabled?"
    )]
    MissingMaxConnections {
        namespace: String,
        cluster: String,
        replicas: u32,
        with_series: u32,
    },
    #[error(
        "no instance series for RedisFailover {cluster:?} in namespace {namespace:?} \
         (redis_instance_info with pod=~\"rfr-{cluster}-<n>\"): is it running and its redis-exporter scraped?"
    )]
    NoRedisInstances { namespace: String, cluster: String },
    #[error(
        "RedisFailover {cluster:?} in namespace {namespace:?} has {masters} pods with role master \
         (redis_instance_info{{role=\"master\"}}), not one: who writes is unknown (a failover?)"
    )]
    NotOneMaster {
        namespace: String,
        cluster: String,
        masters: u32,
    },
    #[error(
        "client-list series (redis_connected_clients_details) exist for {with_series} of {replicas} \
         replicas of RedisFailover {cluster:?} in namespace {namespace:?}: run redis-exporter with \
         --export-client-list (spec.redis.exporter.args), or the sentinels' connections count as load"
    )]
    MissingClientList {
        namespace: String,
        cluster: String,
        replicas: u32,
        with_series: u32,
    },
    #[error(
        "replication series (redis_master_link_up) exist for {with_series} of {replicas} replicas of \
         RedisFailover {cluster:?} in namespace {namespace:?}: replication health is unknown"
    )]
    MissingReplicationSeries {
        namespace: String,
        cluster: String,
        replicas: u32,
        with_series: u32,
    },
    #[error(
        "no pooler series for Pooler {pooler:?} in namespace {namespace:?} \
         (cnpg_pgbouncer_last_collection_error with pod=~\"{pooler}-<hash>-<hash>\"): is it \
         running, with spec.monitoring.enablePodMonitor (or another scrape of its pods' metrics \
         port)?"
    )]
    NoPoolerInstances { namespace: String, pooler: String },
    #[error(
        "{with_series} of the {pods} pods of Pooler {pooler:?} in namespace {namespace:?} report \
         {what}: the clients of the others are unknown"
    )]
    MissingPoolerSeries {
        namespace: String,
        pooler: String,
        pods: u32,
        with_series: u32,
        what: &'static str,
    },
    #[error(
        "the connection budget of Pooler {pooler:?} is unknown: {what} of CNPG cluster \
         {cluster:?} in namespace {namespace:?} is not in the answer (is metadata key \"cluster\" \
         the Pooler's spec.cluster.name, and are CNPG's default monitoring queries on?)"
    )]
    UnknownBudget {
        namespace: String,
        pooler: String,
        cluster: String,
        what: &'static str,
    },
}

/// Where the current count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CurrentSource {
    /// The Cluster's `spec.instances`, or the RedisFailover's `spec.redis.replicas`.
    ClusterSpec,
    /// The number of instance series (metrics-only mode).
    InstanceSeries,
    /// The caller's count, `Inputs::current`: a backtest's simulated HPA, whose count the
    /// history's instance series never had.
    Simulated,
}

/// Where the quorum came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuorumSource {
    /// The `maxSyncReplicas` trigger metadata.
    Metadata,
    /// The Cluster's `spec.maxSyncReplicas` or `spec.postgresql.synchronous.number`.
    ClusterSpec,
    /// Neither said anything: 0.
    Default,
}

/// Every input of one decision, and the decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub namespace: String,
    pub cluster: String,
    pub metric: &'static str,
    pub topology: &'static str,
    /// Instance pods seen in metrics.
    pub instance_series: u32,
    /// Σ read load over replicas; `false` in `load_series_present` means CNPG emitted no rows (0).
    pub load_series_present: bool,
    /// Replicas left out of the CPU signal while their WAL receiver is down (cloning, restoring);
    /// `None` unless a signal is ReadCPUUtilization.
    pub warming_replicas: Option<u32>,
    /// Primary WAL write rate in bytes/s; `None` without WAL series.
    pub wal_bytes_per_second: Option<f64>,
    /// Redis: the master's replication offset growth in bytes/s, the brake's write gate; `None`
    /// for other engines, or without a rate yet.
    pub repl_bytes_per_second: Option<f64>,
    /// The index's own facts, shared: absent in metrics-only mode, and a scaler holds an
    /// evaluation per ScaledObject (hundreds of bytes each inline or copied).
    pub cluster_spec: Option<Arc<ClusterFacts>>,
    /// The tightest ResourceQuota limit on one more instance; `None` without a Kubernetes
    /// topology or without a quota that limits what an instance uses.
    pub quota: Option<Box<Fit>>,
    pub current_source: CurrentSource,
    pub quorum_source: QuorumSource,
    /// The schedule windows open at `Inputs.now` and what they ask for.
    pub schedule: schedule::Active,
    pub policy: Policy,
    pub observation: Observation,
    pub decision: Decision,
}

impl Evaluation {
    /// One-sentence explanation of the decision. Made when asked, not held: a scaler keeps an
    /// evaluation per ScaledObject, and the sentence was the longest of its strings.
    pub fn summary(&self) -> String {
        summary(
            &self.decision,
            &self.policy,
            &self.observation,
            self.quota.as_deref(),
        )
    }
}

/// What an evaluation needs besides the answers: where they came from, defaults, the clock.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub topology: &'static str,
    pub default_deadline: Duration,
    pub now: SystemTime,
    /// A current count the caller knows better than the instance series and the Cluster: the
    /// backtest's simulated HPA, so the holds (brake, dry-run, scale-in hold) hold the count that
    /// history would have had. `None` in `serve`.
    pub current: Option<u32>,
}

/// The pure part: query answer + Cluster facts and quotas + config → evaluation.
pub fn evaluate(
    namespace: &str,
    config: &ScalerConfig,
    inputs: &Inputs,
    parts: &HashMap<String, f64>,
    snapshot: Option<&Snapshot>,
) -> Result<Evaluation, EvaluateError> {
    let facts = snapshot.map(|s| *s.cluster);
    let instance_series = instance_series(namespace, config, parts)?;
    let metrics: Vec<Metric> = std::iter::once(config.metric)
        .chain(config.signals.iter().map(|s| s.metric))
        .collect();
    check_pod_series(namespace, config, parts, &metrics)?;
    let redis = match config.engine {
        Engine::Cnpg | Engine::Pgbouncer => None,
        Engine::Redis => Some(redis_health(namespace, config, parts, &metrics)?),
    };
    let pooler = match &config.pooler {
        Some(sizes) => Some(pooler_load(
            namespace,
            config,
            sizes,
            parts,
            instance_series,
        )?),
        None => None,
    };
    let (current, current_source) = match (inputs.current, facts) {
        (Some(current), _) => (current, CurrentSource::Simulated),
        (None, Some(facts)) => (facts.instances, CurrentSource::ClusterSpec),
        (None, None) => (instance_series, CurrentSource::InstanceSeries),
    };
    // The evaluation's clock, never the wall clock: a backtest replays schedules with it.
    let schedule = jiff::Timestamp::try_from(inputs.now)
        .map(|now| config.schedules.active(now))
        .unwrap_or_default();
    let (policy, quorum_source) = policy(config, inputs, facts, &schedule);
    let fit = snapshot.and_then(|s| quota::tightest(&s.quotas, &s.cluster.cost));
    let mut observation = observation(config, inputs, parts, current, redis, fit.as_ref(), facts);
    if let Some(p) = pooler {
        // Clients served and clients waiting: both are the instances' load.
        observation.load += f64::from(p.waiting);
        observation.pooler = Some(p);
    }
    let decision = decision::decide(&policy, &observation);
    let load = parts.get(part::LOAD).copied();
    Ok(Evaluation {
        namespace: namespace.to_owned(),
        cluster: config.cluster.clone(),
        metric: config.metric.as_str(),
        topology: inputs.topology,
        instance_series,
        load_series_present: load.is_some(),
        warming_replicas: metrics
            .contains(&Metric::ReadCpuUtilization)
            .then(|| count(parts, part::WARMING)),
        wal_bytes_per_second: parts.get(part::WAL).copied(),
        repl_bytes_per_second: parts.get(part::REPL_RATE).copied(),
        cluster_spec: snapshot.map(|s| Arc::clone(&s.cluster)),
        quota: fit.map(Box::new),
        current_source,
        quorum_source,
        schedule,
        policy,
        observation,
        decision,
    })
}

/// A counting part's value; 0 when absent.
fn count(parts: &HashMap<String, f64>, name: &str) -> u32 {
    parts.get(name).map_or(0, |n| *n as u32)
}

/// The instance pods seen in metrics: none is an error, never a count of 0.
fn instance_series(
    namespace: &str,
    config: &ScalerConfig,
    parts: &HashMap<String, f64>,
) -> Result<u32, EvaluateError> {
    let (namespace, cluster) = (namespace.to_owned(), config.cluster.clone());
    parts
        .get(part::INSTANCES)
        .map(|n| *n as u32)
        .filter(|n| *n > 0)
        .ok_or(match config.engine {
            Engine::Cnpg => EvaluateError::NoInstances { namespace, cluster },
            Engine::Redis => EvaluateError::NoRedisInstances { namespace, cluster },
            Engine::Pgbouncer => EvaluateError::NoPoolerInstances {
                namespace,
                pooler: cluster,
            },
        })
}

/// A Pooler's clients, waits and connection budget: every pod reporting, every budget input
/// known, or an error.
fn pooler_load(
    namespace: &str,
    config: &ScalerConfig,
    sizes: &PoolerConfig,
    parts: &HashMap<String, f64>,
    pods: u32,
) -> Result<PoolerLoad, EvaluateError> {
    for (name, what) in [
        (
            part::UP_PODS,
            "PgBouncer reached (cnpg_pgbouncer_last_collection_error 0)",
        ),
        (
            part::POOL_PODS,
            "SHOW POOLS series (cnpg_pgbouncer_pools_cl_active, _cl_waiting, _maxwait)",
        ),
    ] {
        if count(parts, name) < pods {
            return Err(EvaluateError::MissingPoolerSeries {
                namespace: namespace.to_owned(),
                pooler: config.cluster.clone(),
                pods,
                with_series: count(parts, name),
                what,
            });
        }
    }
    let unknown = |what| EvaluateError::UnknownBudget {
        namespace: namespace.to_owned(),
        pooler: config.cluster.clone(),
        cluster: sizes.cluster.clone(),
        what,
    };
    if count(parts, part::PRIMARIES) != 1 {
        return Err(unknown("one primary (cnpg_pg_replication_in_recovery 0)"));
    }
    let known = |name: &str, what| parts.get(name).copied().ok_or_else(|| unknown(what));
    let measured = pooler::Measured {
        max_connections: known(
            part::MAX_CONNECTIONS,
            "max_connections (cnpg_pg_settings_setting) on the primary",
        )?,
        superuser_reserved: known(
            part::SUPERUSER_RESERVED,
            "superuser_reserved_connections (cnpg_pg_settings_setting) on the primary",
        )?,
        // PostgreSQL 16 added reserved_connections; before it there is none to reserve.
        reserved: parts.get(part::RESERVED).copied().unwrap_or(0.0),
        backends: known(
            part::BACKENDS,
            "the client backends (cnpg_backends_total) on the primary",
        )?,
        // Pools without a server connection, or no client pool at all: 0 (SHOW POOLS has rows
        // for every pool; pool_pods above proved the pods report).
        pooler_servers: parts.get(part::SERVER_CONNECTIONS).copied().unwrap_or(0.0),
        pools: parts.get(part::POOLS).copied().unwrap_or(0.0),
        databases: parts.get(part::POOL_DATABASES).copied().unwrap_or(0.0),
    };
    Ok(PoolerLoad {
        waiting: count(parts, part::WAITING),
        max_wait_seconds: parts.get(part::MAX_WAIT).copied().unwrap_or(0.0),
        budget: pooler::budget(sizes, &measured),
    })
}

/// Every replica a per-pod signal needs has its series: a scrape gap is an error, never load 0.
fn check_pod_series(
    namespace: &str,
    config: &ScalerConfig,
    parts: &HashMap<String, f64>,
    metrics: &[Metric],
) -> Result<(), EvaluateError> {
    let count = |name| count(parts, name);
    // Seen on the real node: a replica's scrape failed while a standby was cloned, all its
    // series went stale at once and the load read 0 with no replica left to miss rows.
    if config.engine == Engine::Cnpg && count(part::SCRAPE_FAILED) > 0 {
        return Err(EvaluateError::ScrapeFailed {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            pods: count(part::SCRAPE_FAILED),
        });
    }
    let replicas = count(part::REPLICAS);
    // Warming replicas are left out of the CPU signal, so they need no CPU series.
    let warm = replicas.saturating_sub(count(part::WARMING));
    if metrics.contains(&Metric::ReadCpuUtilization) && count(part::LOAD_PODS) < warm {
        return Err(EvaluateError::MissingCpuSeries {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            replicas: warm,
            with_series: count(part::LOAD_PODS),
        });
    }
    // A replica not scraped has no backend rows at all: its sessions are unknown, not zero.
    if config.engine == Engine::Cnpg
        && metrics.contains(&Metric::ReadConnections)
        && count(part::CONNECTION_PODS) < replicas
    {
        return Err(EvaluateError::MissingConnectionSeries {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            replicas,
            with_series: count(part::CONNECTION_PODS),
        });
    }
    // Without max_connections the usage is unknown: an error, never a made-up zero.
    if metrics.contains(&Metric::ReadConnectionUsage) && count(part::USAGE_PODS) < replicas {
        return Err(EvaluateError::MissingMaxConnections {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            replicas,
            with_series: count(part::USAGE_PODS),
        });
    }
    Ok(())
}

/// The config with the quorum resolved (metadata, else the Cluster's, else 0) and the open
/// schedule windows applied.
fn policy(
    config: &ScalerConfig,
    inputs: &Inputs,
    facts: Option<ClusterFacts>,
    schedule: &schedule::Active,
) -> (Policy, QuorumSource) {
    let (quorum, quorum_source) = match (config.max_sync_replicas, facts.and_then(|f| f.quorum)) {
        (Some(q), _) => (q, QuorumSource::Metadata),
        (None, Some(q)) => (q, QuorumSource::ClusterSpec),
        (None, None) => (0, QuorumSource::Default),
    };
    let mut extra = [None; MAX_EXTRA_SIGNALS];
    for (slot, signal) in extra.iter_mut().zip(&config.signals) {
        *slot = Some(*signal);
    }
    let policy = Policy {
        engine: config.engine,
        metric: config.metric,
        target: config.target,
        extra,
        min_replicas: config.min_replicas,
        max_replicas: config.max_replicas,
        quorum,
        max_lag_seconds: config.max_replication_lag_seconds,
        max_lag_bytes: config.max_replication_lag_bytes,
        dry_run: config.dry_run,
        convergence_deadline_seconds: config
            .convergence_deadline_seconds
            .unwrap_or(inputs.default_deadline.as_secs_f64()),
        schedule_floor: schedule.floor,
        scale_in_disabled: config.scale_in_disabled || schedule.scale_in_disabled,
        max_client_wait_seconds: config
            .pooler
            .as_ref()
            .map_or(0.0, |p| p.max_client_wait_seconds),
    };
    (policy, quorum_source)
}

/// The answer, the quota's fit and the Cluster's status as the decision's plain numbers.
fn observation(
    config: &ScalerConfig,
    inputs: &Inputs,
    parts: &HashMap<String, f64>,
    current: u32,
    redis: Option<RedisReplication>,
    fit: Option<&Fit>,
    facts: Option<ClusterFacts>,
) -> Observation {
    let mut extra_loads = [0.0; MAX_EXTRA_SIGNALS];
    for (load, signal) in extra_loads.iter_mut().zip(&config.signals) {
        // CNPG omits zero rows: no series is no load (the pod checks catch scrape gaps).
        *load = parts
            .get(part::load_of(signal.metric, false))
            .copied()
            .unwrap_or(0.0);
    }
    let status = facts.and_then(|f| f.status);
    // Instances that exist (and so are in the quota's usage) plus those that still fit.
    let existing = status.map_or(current, |s| s.instances);
    let now = inputs
        .now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Observation {
        current,
        // CNPG omits zero rows, so no load series while instances exist means no load.
        load: parts.get(part::LOAD).copied().unwrap_or(0.0),
        extra_loads,
        max_lag_seconds: parts.get(part::LAG).copied(),
        lag_unknown: lag_unknown(config, parts),
        // No rate (a series missing, or younger than two samples) is unknown, never idle.
        primary_writing: match config.engine {
            Engine::Cnpg => parts.get(part::WAL).map(|rate| *rate > 0.0),
            Engine::Redis => parts
                .get(part::REPL_RATE)
                .map(|rate| *rate > BACKGROUND_REPL_BYTES_PER_SECOND),
            Engine::Pgbouncer => None,
        },
        redis,
        pooler: None,
        quota: fit.map(|f| QuotaCeiling {
            instances: existing.saturating_add(f.more),
            resource: f.resource,
            unreadable: f.unreadable.is_some(),
        }),
        convergence: status.map(|s| Convergence {
            ready: s.ready,
            not_ready_seconds: s
                .not_ready_since
                .filter(|_| current > s.ready)
                // A clock behind the API server's counts as just now, never as negative.
                .map(|since| now.saturating_sub(u64::try_from(since).unwrap_or(0)) as f64),
        }),
    }
}

/// Whether some replica's lag is unknown to the brake: a CNPG replica without a lag series, or
/// (with the byte threshold on) Redis replicas none of which the master reports an offset for.
fn lag_unknown(config: &ScalerConfig, parts: &HashMap<String, f64>) -> bool {
    match config.engine {
        Engine::Cnpg => count(parts, part::LAG_MISSING) > 0,
        Engine::Redis => {
            config.max_replication_lag_bytes > 0.0
                && count(parts, part::REPLICAS) > 0
                && !parts.contains_key(part::LAG_BYTES)
        }
        Engine::Pgbouncer => false,
    }
}

/// The decision's sentence, and why a quota that binds could not be read.
fn summary(
    decision: &Decision,
    policy: &Policy,
    observation: &Observation,
    fit: Option<&Fit>,
) -> String {
    let mut summary = decision.summary(policy, observation);
    if let Some((quota, error)) = fit.and_then(|f| Some((&f.quota, f.unreadable.as_ref()?))) {
        summary.push_str(&format!(" (ResourceQuota {quota}: {error})"));
    }
    summary
}

/// A Redis answer's replication health; a series missing on a replica is an error, never health.
fn redis_health(
    namespace: &str,
    config: &ScalerConfig,
    parts: &HashMap<String, f64>,
    metrics: &[Metric],
) -> Result<RedisReplication, EvaluateError> {
    let count = |name| count(parts, name);
    let replicas = count(part::REPLICAS);
    let masters = count(part::MASTERS);
    if masters != 1 {
        return Err(EvaluateError::NotOneMaster {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            masters,
        });
    }
    if metrics.contains(&Metric::ReadConnections) && count(part::CLIENT_PODS) < replicas {
        return Err(EvaluateError::MissingClientList {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            replicas,
            with_series: count(part::CLIENT_PODS),
        });
    }
    if count(part::HEALTH_PODS) < replicas {
        return Err(EvaluateError::MissingReplicationSeries {
            namespace: namespace.to_owned(),
            cluster: config.cluster.clone(),
            replicas,
            with_series: count(part::HEALTH_PODS),
        });
    }
    Ok(RedisReplication {
        links_down: count(part::LINKS_DOWN),
        // The same sync can be seen from both sides: the larger count, never the sum.
        syncing: count(part::SYNCING).max(count(part::MASTER_SYNCING)),
        max_lag_bytes: parts.get(part::LAG_BYTES).copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{facts_from, failover_facts_from};
    use crate::decision::{Brake, Reason};
    use crate::metadata::parse;
    use crate::quota::Quota;
    use serde_json::json;

    /// 2026-11-30T19:10:00Z.
    const NOW: u64 = 1_796_065_800;

    fn inputs(topology: &'static str) -> Inputs {
        Inputs {
            topology,
            default_deadline: Duration::from_secs(600),
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(NOW),
            current: None,
        }
    }

    fn snapshot(cluster: serde_json::Value, quotas: Vec<Quota>) -> Snapshot {
        Snapshot {
            cluster: Arc::new(facts_from(&cluster).unwrap()),
            quotas,
        }
    }

    fn config(extra: &[(&str, &str)]) -> ScalerConfig {
        let mut md: HashMap<String, String> = [("target", "5"), ("maxReplicas", "6")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        md.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        parse("pg", &md).unwrap()
    }

    fn parts(pairs: &[(&str, f64)]) -> HashMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn no_instance_series_is_an_error_not_zero() {
        let err = evaluate(
            "ns",
            &config(&[]),
            &inputs("metrics"),
            &parts(&[("load", 9.0)]),
            None,
        );
        assert!(matches!(err, Err(EvaluateError::NoInstances { .. })));
        let err = evaluate(
            "ns",
            &config(&[]),
            &inputs("metrics"),
            &parts(&[("instances", 0.0)]),
            None,
        );
        assert!(matches!(err, Err(EvaluateError::NoInstances { .. })));
    }

    #[test]
    fn missing_load_series_means_zero_load() {
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("metrics"),
            &parts(&[("instances", 3.0)]),
            None,
        )
        .unwrap();
        assert_eq!((e.observation.load, e.load_series_present), (0.0, false));
        assert_eq!(
            (e.observation.current, e.current_source),
            (3, CurrentSource::InstanceSeries)
        );
        assert_eq!((e.decision.desired, e.decision.reason), (2, Reason::Floor));
    }

    #[test]
    fn cluster_spec_gives_current_and_quorum_unless_metadata_says_otherwise() {
        let snapshot = snapshot(
            json!({"spec": {"instances": 4, "maxSyncReplicas": 3}}),
            vec![],
        );
        let facts = Some(&snapshot);
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 5.0)]),
            facts,
        )
        .unwrap();
        assert_eq!(
            (e.observation.current, e.current_source),
            (4, CurrentSource::ClusterSpec)
        );
        assert_eq!(
            (e.policy.quorum, e.quorum_source),
            (3, QuorumSource::ClusterSpec)
        );
        assert_eq!((e.decision.desired, e.decision.reason), (4, Reason::Quorum));
        let e = evaluate(
            "ns",
            &config(&[("maxSyncReplicas", "1")]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 12.0)]),
            facts,
        )
        .unwrap();
        assert_eq!(
            (e.policy.quorum, e.quorum_source),
            (1, QuorumSource::Metadata)
        );
        assert_eq!((e.decision.desired, e.decision.reason), (4, Reason::Load));
    }

    #[test]
    fn missing_cpu_series_on_replicas_is_an_error_not_zero_load() {
        let cfg = config(&[("metric", "ReadCPUUtilization")]);
        let answer = |pods: f64| {
            parts(&[
                ("instances", 3.0),
                ("replicas", 2.0),
                ("load_pods", pods),
                ("load", 300.0),
            ])
        };
        assert!(matches!(
            evaluate("ns", &cfg, &inputs("metrics"), &answer(1.0), None),
            Err(EvaluateError::MissingCpuSeries {
                replicas: 2,
                with_series: 1,
                ..
            })
        ));
        assert_eq!(
            evaluate("ns", &cfg, &inputs("metrics"), &answer(2.0), None)
                .unwrap()
                .observation
                .load,
            300.0
        );
        // A lone primary has no replicas and so no replica CPU: zero load, not an error.
        let lone = parts(&[("instances", 1.0)]);
        assert_eq!(
            evaluate("ns", &cfg, &inputs("metrics"), &lone, None)
                .unwrap()
                .observation
                .load,
            0.0
        );
    }

    #[test]
    fn several_signals_the_largest_count_wins_and_usage_needs_max_connections() {
        let cfg = config(&[("signals", "ReadConnectionUsage=50,ReadCPUUtilization=100")]);
        let answer = |usage_pods: f64| {
            parts(&[
                ("instances", 4.0),
                ("load", 4.0),
                ("replicas", 3.0),
                ("load_pods", 2.0),
                ("warming", 1.0),
                ("usage_pods", usage_pods),
                ("connection_pods", 3.0),
                ("load_readconnectionusage", 120.0),
                ("load_readcpuutilization", 90.0),
            ])
        };
        let e = evaluate("ns", &cfg, &inputs("metrics"), &answer(3.0), None).unwrap();
        // Connections 4/5 ask 1, usage 120/50 asks 3, CPU 90/100 asks 1.
        assert_eq!(e.observation.extra_loads, [120.0, 90.0]);
        assert_eq!(
            (e.decision.desired, e.decision.signal, e.decision.reason),
            (4, Metric::ReadConnectionUsage, Reason::Load)
        );
        assert_eq!(e.warming_replicas, Some(1));
        assert!(
            e.summary()
                .starts_with("ReadConnectionUsage 120 / target 50"),
            "{}",
            e.summary()
        );
        assert!(matches!(
            evaluate("ns", &cfg, &inputs("metrics"), &answer(1.0), None),
            Err(EvaluateError::MissingMaxConnections {
                replicas: 3,
                with_series: 1,
                ..
            })
        ));
        // No usage rows (CNPG omits zeros) with max_connections known: no load.
        let mut quiet = answer(3.0);
        quiet.remove("load_readconnectionusage");
        let e = evaluate("ns", &cfg, &inputs("metrics"), &quiet, None).unwrap();
        assert_eq!(e.observation.extra_loads, [0.0, 90.0]);
        assert_eq!(e.decision.signal, Metric::ReadConnections);
    }

    #[test]
    fn a_replica_without_backend_rows_makes_the_connections_unknown_not_zero() {
        let cfg = config(&[]);
        // Seen on the real node: a replica's target restarted by discovery while a standby joined,
        // its rows gone for a scrape; the 25 sessions on it read as 0 and the count fell.
        let answer = |connection_pods: f64| {
            parts(&[
                ("instances", 4.0),
                ("replicas", 3.0),
                ("connection_pods", connection_pods),
            ])
        };
        assert!(matches!(
            evaluate("ns", &cfg, &inputs("metrics"), &answer(2.0), None),
            Err(EvaluateError::MissingConnectionSeries {
                replicas: 3,
                with_series: 2,
                ..
            })
        ));
        // Every replica scraped and none with an active client session: load 0, a decision.
        let e = evaluate("ns", &cfg, &inputs("metrics"), &answer(3.0), None).unwrap();
        assert_eq!(e.observation.load, 0.0);
    }

    #[test]
    fn a_failed_scrape_makes_the_answer_unknown_not_the_floor() {
        let cfg = config(&[]);
        // The replica's series all stale: one primary, no replica, no load.
        let answer = |failed: f64| {
            let mut p = parts(&[
                ("instances", 1.0),
                ("replicas", 0.0),
                ("connection_pods", 0.0),
            ]);
            if failed > 0.0 {
                p.insert("scrape_failed".into(), failed);
            }
            p
        };
        assert!(matches!(
            evaluate("ns", &cfg, &inputs("metrics"), &answer(1.0), None),
            Err(EvaluateError::ScrapeFailed { pods: 1, .. })
        ));
        let e = evaluate("ns", &cfg, &inputs("metrics"), &answer(0.0), None).unwrap();
        assert_eq!(e.observation.load, 0.0);
    }

    #[test]
    fn wal_rate_gates_the_brake() {
        let cfg = config(&[("maxReplicationLagSeconds", "10")]);
        let lagging = |wal: f64| {
            parts(&[
                ("instances", 3.0),
                ("load", 30.0),
                ("lag", 60.0),
                ("wal", wal),
            ])
        };
        let e = evaluate("ns", &cfg, &inputs("metrics"), &lagging(1000.0), None).unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (3, Reason::Brake));
        let e = evaluate("ns", &cfg, &inputs("metrics"), &lagging(0.0), None).unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (6, Reason::Max));
    }

    /// Issue 44: the backtest's simulated HPA has 5 instances where history saw 3; the holds hold
    /// its 5, over the instance series and the Cluster's spec alike, and say where it came from.
    #[test]
    fn the_callers_current_count_is_what_the_holds_hold() {
        let simulated = Inputs {
            current: Some(5),
            ..inputs("metrics")
        };
        let lagging = parts(&[
            ("instances", 3.0),
            ("load", 5.0),
            ("lag", 60.0),
            ("wal", 1000.0),
        ]);
        let brake = config(&[("maxReplicationLagSeconds", "10")]);
        let dry_run = config(&[("dryRun", "true")]);
        let hold = config(&[("scaleIn", "disabled")]);
        let spec = snapshot(json!({"spec": {"instances": 4}}), vec![]);
        for (cfg, snapshot, reason) in [
            (&brake, None, Reason::Brake),
            (&dry_run, None, Reason::DryRun),
            (&hold, None, Reason::ScaleInHold),
            (&brake, Some(&spec), Reason::Brake),
        ] {
            let e = evaluate("ns", cfg, &simulated, &lagging, snapshot).unwrap();
            assert_eq!(
                (e.observation.current, e.current_source, e.instance_series),
                (5, CurrentSource::Simulated, 3)
            );
            assert_eq!((e.decision.desired, e.decision.reason), (5, reason));
        }
        assert_eq!(
            serde_json::to_value(CurrentSource::Simulated).unwrap(),
            "simulated"
        );
    }

    /// Issue 43: a lagging cluster whose WAL rate has no samples yet (a new series) got the load's
    /// count on its first evaluation. Unknown write activity holds, like writing.
    #[test]
    fn unknown_write_activity_holds_a_lagging_cluster() {
        let cfg = config(&[("maxReplicationLagSeconds", "10")]);
        let young = parts(&[("instances", 3.0), ("load", 30.0), ("lag", 600.0)]);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &young, None).unwrap();
        assert_eq!(e.observation.primary_writing, None);
        assert_eq!(
            (e.decision.desired, e.decision.reason, e.decision.brake),
            (3, Reason::Brake, Brake::Engaged)
        );
        assert!(
            e.summary().contains("write rate is unknown"),
            "{}",
            e.summary()
        );
        // Healthy lag needs no write gate: unknown writes alone hold nothing.
        let healthy = parts(&[("instances", 3.0), ("load", 30.0), ("lag", 1.0)]);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &healthy, None).unwrap();
        assert_eq!((e.decision.desired, e.decision.brake), (6, Brake::Clear));
    }

    /// A replica without a lag series is not a replica without lag: it holds while the primary
    /// writes (or may), and only a primary known to be idle releases it.
    #[test]
    fn a_replica_without_a_lag_series_counts_as_lagging() {
        let cfg = config(&[("maxReplicationLagSeconds", "10")]);
        let answer = |wal: Option<f64>| {
            let mut p = parts(&[("instances", 3.0), ("load", 30.0), ("lag_missing", 1.0)]);
            if let Some(wal) = wal {
                p.insert("wal".into(), wal);
            }
            p
        };
        for wal in [Some(1000.0), None] {
            let e = evaluate("ns", &cfg, &inputs("metrics"), &answer(wal), None).unwrap();
            assert!(e.observation.lag_unknown);
            assert_eq!(
                (e.decision.desired, e.decision.reason),
                (3, Reason::Brake),
                "{wal:?}"
            );
            assert!(e.summary().contains("lag is unknown"), "{}", e.summary());
        }
        let e = evaluate("ns", &cfg, &inputs("metrics"), &answer(Some(0.0)), None).unwrap();
        assert_eq!((e.decision.desired, e.decision.brake), (6, Brake::IdleLag));
    }

    #[test]
    fn the_quota_caps_growth_at_existing_instances_plus_what_fits() {
        // 3 instances exist at 500m each; the quota has 1 CPU left: two more fit.
        let q = Quota::parse(
            "tenant",
            false,
            [("requests.cpu", "2500m")],
            Some([("requests.cpu", "1500m")]),
        )
        .unwrap();
        let cluster = json!({
            "spec": {"instances": 3, "resources": {"requests": {"cpu": "500m"}}},
            "status": {"instances": 3, "readyInstances": 3},
        });
        let snap = snapshot(cluster, vec![q]);
        // Load 40 / target 5 wants 9; max 6 would allow 6; the quota stops it at 5.
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 40.0)]),
            Some(&snap),
        )
        .unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (5, Reason::Quota));
        let fit = e.quota.unwrap();
        assert_eq!(
            (fit.more, fit.resource, fit.quota.as_str()),
            (2, "requests.cpu", "tenant")
        );
        // Without quotas the ceiling is absent.
        let free = snapshot(json!({"spec": {"instances": 3}}), vec![]);
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 40.0)]),
            Some(&free),
        )
        .unwrap();
        assert_eq!(
            (e.decision.desired, e.decision.reason, e.quota),
            (6, Reason::Max, None)
        );
    }

    #[test]
    fn an_unreadable_quota_holds_growth_and_names_itself() {
        let cluster = json!({
            "spec": {"instances": 3, "resources": {"requests": {"cpu": "500m"}}},
            "status": {"instances": 3, "readyInstances": 3},
        });
        let broken = Quota::unreadable("tenant", false, "requests.cpu: \"lots\"".into());
        let snap = snapshot(cluster, vec![broken]);
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 40.0)]),
            Some(&snap),
        )
        .unwrap();
        // Load asks for 6; what fits is unknown: hold the 3 that exist.
        assert_eq!(
            (e.decision.desired, e.decision.reason),
            (3, Reason::QuotaUnreadable)
        );
        assert!(
            e.summary().contains("cannot be read") && e.summary().contains("ResourceQuota tenant"),
            "{}",
            e.summary()
        );
        // Scale-in is not held by it: load 0 still goes down to the floor.
        let e = evaluate(
            "ns",
            &config(&[]),
            &inputs("kube"),
            &parts(&[("instances", 3.0), ("load", 0.0)]),
            Some(&snap),
        )
        .unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (2, Reason::Floor));
    }

    #[test]
    fn schedules_are_evaluated_at_the_inputs_time() {
        // NOW is Monday 2026-11-30 19:10 UTC = 20:10 in Berlin.
        let answer = parts(&[("instances", 3.0), ("load", 4.0)]);
        let eval = |schedules: &str, extra: &[(&str, &str)]| {
            let mut md = vec![("schedules", schedules)];
            md.extend_from_slice(extra);
            evaluate("ns", &config(&md), &inputs("metrics"), &answer, None).unwrap()
        };
        let e = eval("0 20 * * 1-5 for 1h floor 5 in Europe/Berlin", &[]);
        assert_eq!(
            (e.decision.desired, e.decision.reason),
            (5, Reason::Schedule)
        );
        assert_eq!(e.schedule.floor, 5);
        assert_eq!(
            e.schedule.windows[0].opened,
            "2026-11-30T20:00:00+01:00[Europe/Berlin]"
        );
        // The same window in UTC opened at 20:00 UTC: not yet.
        let e = eval("0 20 * * 1-5 for 1h floor 5", &[]);
        assert_eq!((e.decision.desired, e.decision.reason), (2, Reason::Load));
        assert!(e.schedule.windows.is_empty());
        // Load 4 / target 5 asks for 2 of the 3 instances: a scale-in window holds 3.
        let e = eval("0 19 * * * for 15m scaleIn disabled", &[]);
        assert_eq!(
            (e.decision.desired, e.decision.reason),
            (3, Reason::ScaleInHold)
        );
        let e = eval("0 18 * * * for 15m floor 2", &[("scaleIn", "disabled")]);
        assert_eq!(
            (e.decision.desired, e.decision.reason),
            (3, Reason::ScaleInHold)
        );
    }

    #[test]
    fn not_ready_since_the_condition_turned_false_decides_the_hold() {
        let cluster = |since: &str| {
            json!({
                "spec": {"instances": 5},
                "status": {"instances": 5, "readyInstances": 3, "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": since}]},
            })
        };
        let eval = |since: &str, extra: &[(&str, &str)]| {
            evaluate(
                "ns",
                &config(extra),
                &inputs("kube"),
                &parts(&[("instances", 5.0), ("load", 30.0)]),
                Some(&snapshot(cluster(since), vec![])),
            )
            .unwrap()
        };
        // 5 minutes: within the default 10-minute deadline.
        let e = eval("2026-11-30T19:05:00Z", &[]);
        assert_eq!((e.decision.desired, e.decision.reason), (6, Reason::Max));
        assert_eq!(
            e.observation.convergence.unwrap().not_ready_seconds,
            Some(300.0)
        );
        // 10 minutes: hold at the 3 ready instances.
        let e = eval("2026-11-30T19:00:00Z", &[]);
        assert_eq!((e.decision.desired, e.decision.reason), (3, Reason::Stuck));
        // The metadata deadline wins over the server's default.
        let e = eval(
            "2026-11-30T19:08:30Z",
            &[("convergenceDeadlineSeconds", "60")],
        );
        assert_eq!(e.decision.reason, Reason::Stuck);
        // 300 s with a 60 s deadline: hold 1×, retry, hold 2× are over; a retry asks again.
        let e = eval(
            "2026-11-30T19:05:00Z",
            &[("convergenceDeadlineSeconds", "60")],
        );
        assert_eq!(e.decision.reason, Reason::Max);
        // A condition time ahead of our clock counts as just now.
        let e = eval(
            "2026-11-30T20:00:00Z",
            &[("convergenceDeadlineSeconds", "60")],
        );
        assert_eq!(e.decision.reason, Reason::Max);
    }

    fn redis_config(extra: &[(&str, &str)]) -> ScalerConfig {
        let mut md: HashMap<String, String> =
            [("target", "5"), ("maxReplicas", "6"), ("engine", "redis")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        md.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        parse("cache", &md).unwrap()
    }

    /// A healthy master and two replicas with `load` clients, the master writing `repl_rate` B/s.
    fn redis_answer(load: f64, repl_rate: f64) -> HashMap<String, f64> {
        parts(&[
            ("instances", 3.0),
            ("masters", 1.0),
            ("replicas", 2.0),
            ("client_pods", 2.0),
            ("health_pods", 2.0),
            ("links_down", 0.0),
            ("syncing", 0.0),
            ("lag_bytes", 425.0),
            ("repl_rate", repl_rate),
            ("load", load),
        ])
    }

    #[test]
    fn redis_health_feeds_the_brake_and_the_write_gate_ignores_sentinel_hellos() {
        let cfg = redis_config(&[]);
        let e = evaluate(
            "ns",
            &cfg,
            &inputs("metrics"),
            &redis_answer(22.0, 27_000.0),
            None,
        )
        .unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (6, Reason::Load));
        assert_eq!(
            e.observation.redis,
            Some(RedisReplication {
                links_down: 0,
                syncing: 0,
                max_lag_bytes: Some(425.0)
            })
        );
        assert_eq!(e.observation.primary_writing, Some(true));
        let mut down = redis_answer(22.0, 27_000.0);
        down.insert("links_down".into(), 1.0);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &down, None).unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (3, Reason::Brake));
        // Three sentinels' hellos and the pings (about 180 B/s, tests/liveredis) are not writes.
        down.insert("repl_rate".into(), 180.0);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &down, None).unwrap();
        assert_eq!(e.observation.primary_writing, Some(false));
        assert_eq!((e.decision.desired, e.decision.reason), (6, Reason::Load));
    }

    /// Issue 43: with no master write-rate series the master counted as idle, and with no offset
    /// series the byte-lag brake was off. Both unknowns now hold a replica that is down or lags.
    #[test]
    fn redis_unknown_writes_or_offsets_never_release_the_brake() {
        let cfg = redis_config(&[]);
        let mut down = redis_answer(22.0, 27_000.0);
        down.insert("links_down".into(), 1.0);
        down.remove("repl_rate");
        let e = evaluate("ns", &cfg, &inputs("metrics"), &down, None).unwrap();
        assert_eq!(e.observation.primary_writing, None);
        assert_eq!((e.decision.desired, e.decision.reason), (3, Reason::Brake));
        assert!(
            e.summary().contains("write rate is unknown"),
            "{}",
            e.summary()
        );
        let cfg = redis_config(&[("maxReplicationLagBytes", "1000")]);
        let mut no_offsets = redis_answer(22.0, 27_000.0);
        no_offsets.remove("lag_bytes");
        let e = evaluate("ns", &cfg, &inputs("metrics"), &no_offsets, None).unwrap();
        assert!(e.observation.lag_unknown);
        assert_eq!((e.decision.desired, e.decision.reason), (3, Reason::Brake));
        // Without the byte threshold the offsets are not needed.
        let e = evaluate(
            "ns",
            &redis_config(&[]),
            &inputs("metrics"),
            &no_offsets,
            None,
        )
        .unwrap();
        assert!(!e.observation.lag_unknown);
        assert_eq!((e.decision.desired, e.decision.reason), (6, Reason::Load));
    }

    #[test]
    fn redis_unknowns_are_errors_never_zero() {
        let cfg = redis_config(&[]);
        let eval =
            |answer: &HashMap<String, f64>| evaluate("ns", &cfg, &inputs("metrics"), answer, None);
        assert!(matches!(
            eval(&parts(&[])),
            Err(EvaluateError::NoRedisInstances { .. })
        ));
        for (part, value) in [("masters", 0.0), ("masters", 2.0)] {
            let mut a = redis_answer(5.0, 0.0);
            a.insert(part.into(), value);
            assert!(
                matches!(eval(&a), Err(EvaluateError::NotOneMaster { .. })),
                "{part}={value}"
            );
        }
        let mut a = redis_answer(5.0, 0.0);
        a.remove("masters");
        assert!(matches!(
            eval(&a),
            Err(EvaluateError::NotOneMaster { masters: 0, .. })
        ));
        // No client list on a replica: its sentinels would count as load.
        let mut a = redis_answer(5.0, 0.0);
        a.insert("client_pods".into(), 1.0);
        let err = eval(&a).unwrap_err();
        assert!(
            matches!(
                err,
                EvaluateError::MissingClientList {
                    replicas: 2,
                    with_series: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("--export-client-list"));
        // The client list is not needed for commands per second.
        let commands = redis_config(&[("metric", "ReadCommandsPerSecond")]);
        assert!(evaluate("ns", &commands, &inputs("metrics"), &a, None).is_ok());
        // No link series on a replica: its health is unknown.
        let mut a = redis_answer(5.0, 0.0);
        a.remove("health_pods");
        assert!(matches!(
            eval(&a),
            Err(EvaluateError::MissingReplicationSeries {
                replicas: 2,
                with_series: 0,
                ..
            })
        ));
        // A lone master has no replicas: nothing to check, no load.
        let lone = parts(&[("instances", 1.0), ("masters", 1.0)]);
        let e = eval(&lone).unwrap();
        assert_eq!((e.observation.load, e.decision.desired), (0.0, 2));
    }

    #[test]
    fn redis_current_is_the_failover_spec_not_the_series_that_lag_it() {
        // The HPA asked for 4; the fourth pod is in its full sync and not scraped yet, so three
        // instance series. The master writes: the brake holds the spec's 4, never the series' 3
        // (which the HPA would write, removing the syncing replica).
        let snap = Snapshot {
            cluster: Arc::new(
                failover_facts_from(&json!({"spec": {"redis": {"replicas": 4}}})).unwrap(),
            ),
            quotas: vec![],
        };
        let kube = |answer: &HashMap<String, f64>| {
            evaluate(
                "ns",
                &redis_config(&[]),
                &inputs("kube"),
                answer,
                Some(&snap),
            )
            .unwrap()
        };
        let mut answer = redis_answer(25.0, 20_000.0);
        answer.insert("syncing".into(), 1.0);
        answer.insert("links_down".into(), 1.0);
        let e = kube(&answer);
        assert_eq!(
            (
                e.instance_series,
                e.observation.current,
                e.current_source,
                e.policy.quorum
            ),
            (3, 4, CurrentSource::ClusterSpec, 0)
        );
        assert_eq!((e.decision.desired, e.decision.reason), (4, Reason::Brake));
        // The new pod unscraped, its sync seen only in the master's list: the brake holds too.
        let mut answer = redis_answer(25.0, 20_000.0);
        answer.insert("master_syncing".into(), 1.0);
        let e = kube(&answer);
        assert_eq!(e.observation.redis.map(|r| r.syncing), Some(1));
        assert_eq!((e.decision.desired, e.decision.reason), (4, Reason::Brake));
        // Both sides seeing the same sync count it once.
        answer.insert("syncing".into(), 1.0);
        assert_eq!(kube(&answer).observation.redis.map(|r| r.syncing), Some(1));
        // The same answer without a topology holds the series' count.
        let e = evaluate("ns", &redis_config(&[]), &inputs("metrics"), &answer, None).unwrap();
        assert_eq!((e.observation.current, e.decision.desired), (3, 3));
    }

    fn pooler_config(extra: &[(&str, &str)]) -> ScalerConfig {
        let mut md: HashMap<String, String> = [
            ("target", "50"),
            ("maxReplicas", "8"),
            ("engine", "pgbouncer"),
            ("cluster", "pg"),
            ("defaultPoolSize", "20"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        md.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        parse("pg-pooler-rw", &md).unwrap()
    }

    /// Three pooler pods, `active` and `waiting` clients, one pool; the primary of max 100
    /// connections (3 reserved for superusers) with 40 client backends, 20 of them the pooler's.
    fn pooler_answer(active: f64, waiting: f64) -> HashMap<String, f64> {
        parts(&[
            ("instances", 3.0),
            ("up_pods", 3.0),
            ("pool_pods", 3.0),
            ("load", active),
            ("waiting", waiting),
            ("max_wait", 0.0),
            ("server_connections", 20.0),
            ("pools", 1.0),
            ("pool_databases", 1.0),
            ("primaries", 1.0),
            ("max_connections", 100.0),
            ("superuser_reserved_connections", 3.0),
            ("backends", 40.0),
        ])
    }

    #[test]
    fn a_pooler_counts_served_and_waiting_clients_within_its_budget() {
        let cfg = pooler_config(&[]);
        let e = evaluate(
            "ns",
            &cfg,
            &inputs("metrics"),
            &pooler_answer(120.0, 30.0),
            None,
        )
        .unwrap();
        // (120 + 30) / 50 = 3; the waiting clients hold the 3 anyway.
        assert_eq!((e.observation.load, e.decision.desired), (150.0, 3));
        let p = e.observation.pooler.unwrap();
        // 100 − 3 − (40 − 20) = 77 → 3 instances of 20.
        assert_eq!(
            (
                p.waiting,
                p.budget.reserved,
                p.budget.other,
                p.budget.per_instance,
                p.budget.fits
            ),
            (30, 3, 20, 20, 3)
        );
        // 250 clients ask 5: capped at the 3 that fit, and the summary names the numbers.
        let e = evaluate(
            "ns",
            &cfg,
            &inputs("metrics"),
            &pooler_answer(250.0, 0.0),
            None,
        )
        .unwrap();
        assert_eq!(
            (e.decision.desired, e.decision.reason),
            (3, Reason::ConnectionBudget)
        );
        assert!(
            e.summary()
                .contains("max_connections 100 − reserved 3 − other clients 20"),
            "{}",
            e.summary()
        );
        // reserved_connections (PostgreSQL 16) counts as reserved: 100 − 3 − 17 − 20 = 60.
        let mut a = pooler_answer(250.0, 0.0);
        a.insert("reserved_connections".into(), 17.0);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &a, None).unwrap();
        assert_eq!(e.observation.pooler.unwrap().budget.fits, 3);
        a.insert("reserved_connections".into(), 18.0);
        let e = evaluate("ns", &cfg, &inputs("metrics"), &a, None).unwrap();
        assert_eq!(
            (
                e.decision.desired,
                e.observation.pooler.unwrap().budget.fits
            ),
            (2, 2)
        );
    }

    #[test]
    fn pooler_unknowns_are_errors_never_zero() {
        let cfg = pooler_config(&[]);
        let eval = |a: &HashMap<String, f64>| evaluate("ns", &cfg, &inputs("metrics"), a, None);
        assert!(matches!(
            eval(&parts(&[])),
            Err(EvaluateError::NoPoolerInstances { .. })
        ));
        for (part, value, want) in [
            ("up_pods", Some(2.0), "PgBouncer reached"),
            ("pool_pods", None, "SHOW POOLS"),
            ("primaries", Some(0.0), "one primary"),
            ("primaries", Some(2.0), "one primary"),
            ("max_connections", None, "max_connections"),
            (
                "superuser_reserved_connections",
                None,
                "superuser_reserved_connections",
            ),
            ("backends", None, "cnpg_backends_total"),
        ] {
            let mut a = pooler_answer(10.0, 0.0);
            match value {
                Some(v) => a.insert(part.into(), v),
                None => a.remove(part),
            };
            let err = eval(&a).unwrap_err().to_string();
            assert!(err.contains(want), "{part}: {err}");
        }
        // No client pool yet (only the admin console's): no load, no server connection, and the
        // budget counts one pool.
        let mut a = pooler_answer(0.0, 0.0);
        for part in [
            "load",
            "waiting",
            "max_wait",
            "server_connections",
            "pools",
            "pool_databases",
        ] {
            a.remove(part);
        }
        let e = eval(&a).unwrap();
        assert_eq!((e.decision.desired, e.decision.reason), (2, Reason::Floor));
        assert_eq!(e.observation.pooler.unwrap().budget.per_instance, 20);
    }
}
