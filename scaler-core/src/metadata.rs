//! Trigger metadata (all strings, as KEDA sends them) → a typed, validated [`ScalerConfig`].
use std::collections::HashMap;
use std::fmt;

use names::{echo, is_dns_label};

/// Largest `maxReplicas` (and every other count) accepted.
pub use crate::schedule::MAX_REPLICAS_LIMIT;
use crate::schedule::{self, Schedules};
/// Smallest `target`: KEDA renders it with `%.3f`, and the HPA rejects a zero target.
pub const MIN_TARGET: f64 = 0.001;
/// Largest `target`; keeps `desired × target` far below 2^53.
pub const MAX_TARGET: f64 = 1e9;
/// `brakeWindowSeconds`: how far back the CNPG brake reads lag and write activity. At least two
/// scrapes at common intervals (a rate needs two samples); at most an hour.
pub const BRAKE_WINDOW_SECONDS: std::ops::RangeInclusive<u32> = 30..=3600;
pub const DEFAULT_BRAKE_WINDOW_SECONDS: u32 = 300;
/// Largest `maxReplicationLagBytes`: no larger lag is ever measured (promql.rs asserts that its
/// answers' values reach it).
pub const MAX_REPLICATION_LAG_BYTES: u64 = 1_000_000_000_000_000;

/// Keys KEDA itself reads from the same trigger metadata; accepted and ignored.
const KEDA_KEYS: [&str; 3] = ["scalerAddress", "enableTLS", "unsafeSsl"];
const OUR_KEYS: [&str; 20] = [
    "engine",
    "cluster",
    "pooler",
    "metric",
    "target",
    "minReplicas",
    "maxReplicas",
    "maxSyncReplicas",
    "maxReplicationLagSeconds",
    "maxReplicationLagBytes",
    "brakeWindowSeconds",
    "dryRun",
    "convergenceDeadlineSeconds",
    "scaleIn",
    "schedules",
    "signals",
    "maxClientWaitSeconds",
    "defaultPoolSize",
    "reservePoolSize",
    "maxDbConnections",
];
/// The keys only `engine: pgbouncer` reads.
const POOLER_KEYS: [&str; 5] = [
    "pooler",
    "maxClientWaitSeconds",
    "defaultPoolSize",
    "reservePoolSize",
    "maxDbConnections",
];

/// The database behind the trigger: what the query reads and which brake applies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// A CloudNativePG `Cluster` (CNPG's exporter series); the default.
    #[default]
    Cnpg,
    /// A spotahome-style `RedisFailover` (redis_exporter series); docs/redis.md.
    Redis,
    /// A CloudNativePG `Pooler` (PgBouncer; CNPG's pooler exporter series); docs/pooler.md.
    Pgbouncer,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cnpg => "cnpg",
            Self::Redis => "redis",
            Self::Pgbouncer => "pgbouncer",
        }
    }

    /// The kind of the object whose count the trigger decides (named by `ScalerConfig::cluster`).
    pub fn kind(self) -> &'static str {
        match self {
            Self::Cnpg => "Cluster",
            Self::Redis => "RedisFailover",
            Self::Pgbouncer => "Pooler",
        }
    }

    /// The metrics this engine's query can read.
    pub fn metrics(self) -> &'static [Metric] {
        match self {
            Self::Cnpg => &[
                Metric::ReadConnections,
                Metric::ReadCpuUtilization,
                Metric::ReadConnectionUsage,
            ],
            Self::Redis => &[Metric::ReadConnections, Metric::ReadCommandsPerSecond],
            Self::Pgbouncer => &[Metric::ClientConnections],
        }
    }
}

/// The load signal summed over read replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Active client backends (connections) on replicas.
    ReadConnections,
    /// CPU of the `postgres` container on replicas, in millicores.
    ReadCpuUtilization,
    /// Client connections (any state) over `max_connections`, in percent, summed over replicas.
    ReadConnectionUsage,
    /// Redis only: read commands per second on replicas (docs/redis.md).
    ReadCommandsPerSecond,
    /// PgBouncer only: client connections (served and waiting) per pooler instance
    /// (docs/pooler.md).
    ClientConnections,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Self::ReadConnections,
        Self::ReadCpuUtilization,
        Self::ReadConnectionUsage,
        Self::ReadCommandsPerSecond,
        Self::ClientConnections,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadConnections => "ReadConnections",
            Self::ReadCpuUtilization => "ReadCPUUtilization",
            Self::ReadConnectionUsage => "ReadConnectionUsage",
            Self::ReadCommandsPerSecond => "ReadCommandsPerSecond",
            Self::ClientConnections => "ClientConnections",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == value)
    }
}

/// The spelling the trigger metadata uses (`scaler explain --metric` parses the same).
impl std::str::FromStr for Metric {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::parse(value).ok_or_else(|| {
            format!(
                "{} is not a metric: use ReadConnections, ReadCPUUtilization, ReadConnectionUsage, \
                 ReadCommandsPerSecond (Redis) or ClientConnections (PgBouncer)",
                echo(value)
            )
        })
    }
}

impl serde::Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A load signal and the load one read replica should carry in its unit.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Signal {
    pub metric: Metric,
    pub target: f64,
}

/// Most signals besides `metric` (one of each other metric).
pub const MAX_EXTRA_SIGNALS: usize = 2;

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One trigger's validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalerConfig {
    pub engine: Engine,
    /// CNPG Cluster or RedisFailover name (a DNS label).
    pub cluster: String,
    pub metric: Metric,
    /// Load one read replica should carry (connections, or CPU millicores).
    pub target: f64,
    /// Lower bound on total instances (primary included).
    pub min_replicas: u32,
    /// Upper bound on total instances; the sync quorum may raise it.
    pub max_replicas: u32,
    /// Synchronous quorum; `None` means "read it from the Cluster".
    pub max_sync_replicas: Option<u32>,
    /// CNPG lag brake threshold in seconds; 0 turns the brake off.
    pub max_replication_lag_seconds: f64,
    /// CNPG: how far back the brake reads lag and write activity: it lets go this long after
    /// the lag cleared.
    pub brake_window_seconds: u32,
    /// Redis: replica offset lag threshold in bytes; 0 turns that part of the brake off (the
    /// link-down and full-sync parts stay on).
    pub max_replication_lag_bytes: f64,
    /// Publish the recommendation but hold the current count.
    pub dry_run: bool,
    /// Seconds a scale-up may take to converge before the stuck hold; 0 turns the hold off;
    /// `None` means the server's `--convergence-deadline`.
    pub convergence_deadline_seconds: Option<f64>,
    /// `scaleIn: disabled`: never recommend fewer than the current count.
    pub scale_in_disabled: bool,
    /// Windows that raise the floor or turn scale-in off; empty without `schedules`.
    pub schedules: Schedules,
    /// Signals besides `metric`/`target`; the larger count wins. Each metric at most once.
    pub signals: Vec<Signal>,
    /// `engine: pgbouncer` only: the database behind the Pooler and its pool sizes.
    pub pooler: Option<PoolerConfig>,
}

/// What `engine: pgbouncer` reads besides the common keys (docs/pooler.md). `ScalerConfig::cluster`
/// is then the Pooler's name; `cluster` here is the CNPG Cluster it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolerConfig {
    /// The CNPG Cluster whose connection budget bounds the Pooler.
    pub cluster: String,
    /// Clients waiting longer than this (seconds) raise the count by one; 0 turns that off.
    pub max_client_wait_seconds: f64,
    /// PgBouncer's `default_pool_size`, `reserve_pool_size` and `max_db_connections` (0 = no
    /// limit), as the Pooler's `spec.pgbouncer.parameters` set them.
    pub default_pool_size: u32,
    pub reserve_pool_size: u32,
    pub max_db_connections: u32,
}

/// PgBouncer's own defaults of the pool sizes (pgbouncer.ini(5)).
pub const PGBOUNCER_DEFAULT_POOL_SIZE: u32 = 20;
/// Largest pool size accepted (PgBouncer has no upper bound; PostgreSQL's `max_connections` is
/// at most 262143).
pub const MAX_POOL_SIZE: u32 = 262_143;
/// Longest `maxClientWaitSeconds`: an hour.
pub const MAX_CLIENT_WAIT_SECONDS: f64 = 3600.0;

// Floats are validated finite and never -0.0, so equality is reflexive and bit-hashing agrees.
impl Eq for ScalerConfig {}

impl std::hash::Hash for ScalerConfig {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.engine.hash(state);
        self.cluster.hash(state);
        self.metric.hash(state);
        self.target.to_bits().hash(state);
        self.min_replicas.hash(state);
        self.max_replicas.hash(state);
        self.max_sync_replicas.hash(state);
        self.max_replication_lag_seconds.to_bits().hash(state);
        self.max_replication_lag_bytes.to_bits().hash(state);
        self.brake_window_seconds.hash(state);
        self.dry_run.hash(state);
        self.convergence_deadline_seconds
            .map(f64::to_bits)
            .hash(state);
        self.scale_in_disabled.hash(state);
        self.schedules.hash(state);
        for s in &self.signals {
            s.metric.hash(state);
            s.target.to_bits().hash(state);
        }
        if let Some(p) = &self.pooler {
            p.cluster.hash(state);
            p.max_client_wait_seconds.to_bits().hash(state);
            (
                p.default_pool_size,
                p.reserve_pool_size,
                p.max_db_connections,
            )
                .hash(state);
        }
    }
}

impl ScalerConfig {
    /// The MetricSpec name: `<engine>-<cluster>-<metric in lowercase>`, lowercase and path-safe.
    pub fn metric_name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.engine.as_str(),
            self.cluster,
            self.metric.as_str().to_ascii_lowercase()
        )
    }
}

/// Why metadata was rejected; every message names the key and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata key {key:?} is required: {allowed}")]
    Missing {
        key: &'static str,
        allowed: &'static str,
    },
    /// `value` is a bounded [`echo`] of what was sent.
    #[error("metadata key {key:?} has invalid value {value}: {allowed}")]
    Invalid {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// A key that only the other engine reads.
    #[error("metadata key {key:?} does not apply to engine {engine}: {fix}")]
    WrongEngine {
        key: &'static str,
        engine: &'static str,
        fix: &'static str,
    },
    #[error(
        "metadata key \"minReplicas\" ({min}) is above \"maxReplicas\" ({max}): lower minReplicas or raise maxReplicas"
    )]
    MinAboveMax { min: u32, max: u32 },
    /// `key` is a bounded [`echo`].
    #[error("unknown metadata key {key}; known keys: {}, and KEDA's {}", OUR_KEYS.join(", "), KEDA_KEYS.join(", "))]
    Unknown { key: String },
    #[error("metadata key \"schedules\" is invalid: {0}; {syntax}", syntax = schedule::SYNTAX)]
    Schedule(#[from] schedule::ScheduleError),
    #[error(
        "metadata key \"schedules\" window {window} has floor {floor} above \"maxReplicas\" ({max}): lower the floor or raise maxReplicas"
    )]
    ScheduleFloorAboveMax { window: usize, floor: u32, max: u32 },
    /// `name` is a bounded [`echo`].
    #[error(
        "metadata key \"cluster\" is not set and the ScaledObject name {name} is not a valid CNPG cluster name: set \"cluster\" to a lowercase DNS label"
    )]
    DefaultCluster { name: String },
}

const ENGINE_ALLOWED: &str = "cnpg (the default), redis or pgbouncer";
const POOLER_CLUSTER_ALLOWED: &str = "with engine pgbouncer, the CNPG Cluster the Pooler serves \
     (its spec.cluster.name): lowercase letters, digits and '-', at most 63 characters";
const POOLER_ALLOWED: &str =
    "a CNPG Pooler name: lowercase letters, digits and '-', at most 63 characters";
const POOLER_METRIC_ALLOWED: &str = "with engine pgbouncer, ClientConnections";
const CLIENT_WAIT_ALLOWED: &str =
    "a number of seconds from 0 to 3600 (0 turns the client-wait raise off)";
const POOL_SIZE_ALLOWED: &str =
    "a whole number from 0 to 262143, as the Pooler's spec.pgbouncer.parameters set it";
const DEFAULT_POOL_SIZE_ALLOWED: &str =
    "a whole number from 1 to 262143, as the Pooler's spec.pgbouncer.parameters set it";
const CLUSTER_ALLOWED: &str = "a CNPG Cluster or RedisFailover name: lowercase letters, digits and \
     '-', at most 63 characters";
const METRIC_ALLOWED: &str = "one of ReadConnections, ReadCPUUtilization, ReadConnectionUsage";
const REDIS_METRIC_ALLOWED: &str =
    "with engine redis, one of ReadConnections, ReadCommandsPerSecond";
const REDIS_SIGNALS_ALLOWED: &str = "with engine redis, at most `ReadConnections=<target>` or \
     `ReadCommandsPerSecond=<target>` (not the `metric` key's), target from 0.001 to 1e9";
const LAG_BYTES_ALLOWED: &str =
    "a whole number of bytes from 0 to 1e15 (0 turns the byte-lag part of the brake off)";
const SIGNALS_ALLOWED: &str = "up to 2 of `<metric>=<target>` separated by ',', e.g. \
     ReadCPUUtilization=400,ReadConnectionUsage=70: metrics ReadConnections, ReadCPUUtilization, \
     ReadConnectionUsage, each once and not the `metric` key's; targets from 0.001 to 1e9";
const TARGET_ALLOWED: &str =
    "a number from 0.001 to 1e9 (connections or CPU millicores per read replica)";
const COUNT_ALLOWED: &str = "a whole number from 0 to 1000";
const MAX_ALLOWED: &str = "a whole number from 1 to 1000 (total instances, primary included)";
const LAG_ALLOWED: &str = "a number of seconds >= 0 (0 turns the lag brake off)";
const BRAKE_WINDOW_ALLOWED: &str =
    "a whole number of seconds from 30 to 3600 (300 by default): how long the brake remembers lag";
const BOOL_ALLOWED: &str = "true or false";
const SCALE_IN_ALLOWED: &str = "enabled or disabled (disabled: never fewer than the current count)";
const DEADLINE_ALLOWED: &str =
    "a number of seconds from 0 to 86400 (0 turns the convergence hold off)";
/// Longest convergence deadline accepted: one day.
pub const MAX_CONVERGENCE_DEADLINE_SECONDS: f64 = 86_400.0;

/// Parses the metadata of the ScaledObject called `so_name` (the default cluster name).
///
/// Section by section, in this order (the first problem found is the error): the keys, the
/// engine, the cluster, the load signal, the replica bounds, the guards, the schedules and the
/// extra signals.
pub fn parse(
    so_name: &str,
    metadata: &HashMap<String, String>,
) -> Result<ScalerConfig, MetadataError> {
    let keys = Keys::known(metadata)?;
    let engine = keys.engine()?;
    let cluster = match engine {
        Engine::Pgbouncer => keys.pooler_name(so_name)?,
        Engine::Cnpg | Engine::Redis => keys.cluster(so_name)?,
    };
    let (metric, target) = keys.load(engine)?;
    let replicas = keys.replicas()?;
    let guards = keys.guards()?;
    let schedules = keys.schedules(replicas.max)?;
    let signals = keys.signals(engine, metric)?;
    let pooler = match engine {
        Engine::Pgbouncer => Some(keys.pooler()?),
        Engine::Cnpg | Engine::Redis => None,
    };
    Ok(ScalerConfig {
        engine,
        cluster,
        metric,
        target,
        min_replicas: replicas.min,
        max_replicas: replicas.max,
        max_sync_replicas: replicas.sync,
        max_replication_lag_seconds: guards.max_replication_lag_seconds,
        max_replication_lag_bytes: guards.max_replication_lag_bytes,
        brake_window_seconds: guards.brake_window_seconds,
        dry_run: guards.dry_run,
        convergence_deadline_seconds: guards.convergence_deadline_seconds,
        scale_in_disabled: guards.scale_in_disabled,
        schedules,
        signals,
        pooler,
    })
}

/// `minReplicas`, `maxReplicas` and `maxSyncReplicas`.
struct Replicas {
    min: u32,
    max: u32,
    sync: Option<u32>,
}

/// The keys that hold or bound the count: the brake's threshold, `dryRun`, the convergence
/// deadline and `scaleIn`.
struct Guards {
    max_replication_lag_seconds: f64,
    max_replication_lag_bytes: f64,
    brake_window_seconds: u32,
    dry_run: bool,
    convergence_deadline_seconds: Option<f64>,
    scale_in_disabled: bool,
}

/// The metadata, every key known.
struct Keys<'a>(&'a HashMap<String, String>);

impl<'a> Keys<'a> {
    /// Refuses a key that is neither ours nor KEDA's.
    fn known(metadata: &'a HashMap<String, String>) -> Result<Self, MetadataError> {
        match metadata
            .keys()
            .find(|k| !OUR_KEYS.contains(&k.as_str()) && !KEDA_KEYS.contains(&k.as_str()))
        {
            Some(key) => Err(MetadataError::Unknown { key: echo(key) }),
            None => Ok(Self(metadata)),
        }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(|v| v.trim())
    }

    /// `key` read by `read`, `None` when absent; a value `read` refuses is invalid, described by
    /// `allowed`.
    fn value<T>(
        &self,
        key: &'static str,
        allowed: &'static str,
        read: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, MetadataError> {
        self.get(key)
            .map(|value| read(value).ok_or_else(|| invalid(key, value, allowed)))
            .transpose()
    }

    /// [`Self::value`] of a key without a default.
    fn required<T>(
        &self,
        key: &'static str,
        allowed: &'static str,
        read: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, MetadataError> {
        self.value(key, allowed, read)?
            .ok_or(MetadataError::Missing { key, allowed })
    }

    /// `engine`, and no key that only the other engine reads.
    fn engine(&self) -> Result<Engine, MetadataError> {
        let engine = self
            .value("engine", ENGINE_ALLOWED, |value| {
                [Engine::Cnpg, Engine::Redis, Engine::Pgbouncer]
                    .into_iter()
                    .find(|e| value.eq_ignore_ascii_case(e.as_str()))
            })?
            .unwrap_or(Engine::Cnpg);
        // Each engine's brake has its own unit: a seconds threshold never meets a byte offset.
        let foreign: &[(&'static str, &'static str)] = match engine {
            Engine::Cnpg => &[(
                "maxReplicationLagBytes",
                "it is Redis's byte-offset threshold; CNPG's is maxReplicationLagSeconds",
            )],
            Engine::Pgbouncer => &[
                (
                    "maxReplicationLagSeconds",
                    "a Pooler has no replication: remove it",
                ),
                (
                    "brakeWindowSeconds",
                    "a Pooler has no replication: remove it",
                ),
                (
                    "maxReplicationLagBytes",
                    "a Pooler has no replication: remove it",
                ),
                (
                    "maxSyncReplicas",
                    "a Pooler has no synchronous quorum: remove it",
                ),
                (
                    "convergenceDeadlineSeconds",
                    "the convergence hold reads a CNPG Cluster's ready count, and a Pooler's is \
                     not read: remove it",
                ),
                (
                    "signals",
                    "a Pooler has one signal, ClientConnections: remove it",
                ),
            ],
            Engine::Redis => &[
                (
                    "maxReplicationLagSeconds",
                    "Redis reports replica lag as a byte offset, not seconds: use maxReplicationLagBytes",
                ),
                (
                    "maxSyncReplicas",
                    "Redis replication is asynchronous: remove it (the floor keeps one replica for failover)",
                ),
                (
                    "brakeWindowSeconds",
                    "it sets the CNPG brake's window; the Redis brake's is fixed (docs/redis.md): remove it",
                ),
                (
                    "convergenceDeadlineSeconds",
                    "the convergence hold reads a CNPG Cluster's ready count, and a RedisFailover's \
                     is not read: remove it",
                ),
            ],
        };
        if let Some(&(key, fix)) = foreign.iter().find(|(k, _)| self.0.contains_key(*k)) {
            return Err(MetadataError::WrongEngine {
                key,
                engine: engine.as_str(),
                fix,
            });
        }
        match POOLER_KEYS.iter().find(|k| self.0.contains_key(**k)) {
            Some(&key) if engine != Engine::Pgbouncer => Err(MetadataError::WrongEngine {
                key,
                engine: engine.as_str(),
                fix: "it is read only with engine pgbouncer (a CNPG Pooler): remove it or set engine",
            }),
            _ => Ok(engine),
        }
    }

    /// `pooler`, else the ScaledObject's name when it is a valid one: the Pooler to scale.
    fn pooler_name(&self, so_name: &str) -> Result<String, MetadataError> {
        match self.value("pooler", POOLER_ALLOWED, |value| {
            is_dns_label(value).then(|| value.to_owned())
        })? {
            Some(pooler) => Ok(pooler),
            None if is_dns_label(so_name) => Ok(so_name.to_owned()),
            None => Err(MetadataError::DefaultCluster {
                name: echo(so_name),
            }),
        }
    }

    /// `engine: pgbouncer`'s keys: `cluster` (required: the budget's database), the wait
    /// threshold and the pool sizes.
    fn pooler(&self) -> Result<PoolerConfig, MetadataError> {
        let cluster = self.required("cluster", POOLER_CLUSTER_ALLOWED, |value| {
            is_dns_label(value).then(|| value.to_owned())
        })?;
        let max_client_wait_seconds = self
            .value("maxClientWaitSeconds", CLIENT_WAIT_ALLOWED, |value| {
                parse_number(value).filter(|s| (0.0..=MAX_CLIENT_WAIT_SECONDS).contains(s))
            })?
            .unwrap_or(1.0);
        let size = |value: &str, min: u32| {
            value
                .parse::<u32>()
                .ok()
                .filter(|n| (min..=MAX_POOL_SIZE).contains(n))
        };
        Ok(PoolerConfig {
            cluster,
            max_client_wait_seconds,
            default_pool_size: self
                .value("defaultPoolSize", DEFAULT_POOL_SIZE_ALLOWED, |v| size(v, 1))?
                .unwrap_or(PGBOUNCER_DEFAULT_POOL_SIZE),
            reserve_pool_size: self
                .value("reservePoolSize", POOL_SIZE_ALLOWED, |v| size(v, 0))?
                .unwrap_or(0),
            max_db_connections: self
                .value("maxDbConnections", POOL_SIZE_ALLOWED, |v| size(v, 0))?
                .unwrap_or(0),
        })
    }

    /// `cluster`, else the ScaledObject's name when it is a valid one.
    fn cluster(&self, so_name: &str) -> Result<String, MetadataError> {
        match self.value("cluster", CLUSTER_ALLOWED, |value| {
            is_dns_label(value).then(|| value.to_owned())
        })? {
            Some(cluster) => Ok(cluster),
            None if is_dns_label(so_name) => Ok(so_name.to_owned()),
            None => Err(MetadataError::DefaultCluster {
                name: echo(so_name),
            }),
        }
    }

    /// `metric` (one of `engine`'s) and its `target`.
    fn load(&self, engine: Engine) -> Result<(Metric, f64), MetadataError> {
        let metric_allowed = match engine {
            Engine::Cnpg => METRIC_ALLOWED,
            Engine::Redis => REDIS_METRIC_ALLOWED,
            Engine::Pgbouncer => POOLER_METRIC_ALLOWED,
        };
        let metric = self
            .value("metric", metric_allowed, |value| {
                Metric::parse(value).filter(|m| engine.metrics().contains(m))
            })?
            .unwrap_or(engine.metrics()[0]);
        let target = self.required("target", TARGET_ALLOWED, parse_target)?;
        Ok((metric, target))
    }

    /// `minReplicas` (2 by default) at most `maxReplicas`, and `maxSyncReplicas`.
    fn replicas(&self) -> Result<Replicas, MetadataError> {
        let min = self
            .value("minReplicas", COUNT_ALLOWED, |value| parse_count(value, 0))?
            .unwrap_or(2);
        let max = self.required("maxReplicas", MAX_ALLOWED, |value| parse_count(value, 1))?;
        if min > max {
            return Err(MetadataError::MinAboveMax { min, max });
        }
        let sync = self.value("maxSyncReplicas", COUNT_ALLOWED, |value| {
            parse_count(value, 0)
        })?;
        Ok(Replicas { min, max, sync })
    }

    fn guards(&self) -> Result<Guards, MetadataError> {
        let max_replication_lag_seconds = self
            .value("maxReplicationLagSeconds", LAG_ALLOWED, |value| {
                parse_number(value).filter(|s| *s >= 0.0)
            })?
            .unwrap_or(0.0);
        let max_replication_lag_bytes = self
            .value("maxReplicationLagBytes", LAG_BYTES_ALLOWED, |value| {
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= MAX_REPLICATION_LAG_BYTES)
                    .map(|n| n as f64)
            })?
            .unwrap_or(0.0);
        let dry_run = self
            .value("dryRun", BOOL_ALLOWED, |value| {
                switch(value, "true", "false")
            })?
            .unwrap_or(false);
        let convergence_deadline_seconds =
            self.value("convergenceDeadlineSeconds", DEADLINE_ALLOWED, |value| {
                parse_number(value).filter(|s| (0.0..=MAX_CONVERGENCE_DEADLINE_SECONDS).contains(s))
            })?;
        let scale_in_disabled = self
            .value("scaleIn", SCALE_IN_ALLOWED, |value| {
                switch(value, "disabled", "enabled")
            })?
            .unwrap_or(false);
        let brake_window_seconds = self
            .value("brakeWindowSeconds", BRAKE_WINDOW_ALLOWED, |value| {
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|s| BRAKE_WINDOW_SECONDS.contains(s))
            })?
            .unwrap_or(DEFAULT_BRAKE_WINDOW_SECONDS);
        Ok(Guards {
            max_replication_lag_seconds,
            max_replication_lag_bytes,
            brake_window_seconds,
            dry_run,
            convergence_deadline_seconds,
            scale_in_disabled,
        })
    }

    /// `schedules`, none of whose floors is above `max_replicas`.
    fn schedules(&self, max_replicas: u32) -> Result<Schedules, MetadataError> {
        let schedules = self
            .get("schedules")
            .map(Schedules::parse)
            .transpose()?
            .unwrap_or_default();
        // A scheduled floor above maxReplicas could never be met: refuse it rather than clamp it.
        if let Some((i, floor)) = schedules
            .windows()
            .iter()
            .enumerate()
            .find_map(|(i, w)| w.floor.filter(|f| *f > max_replicas).map(|f| (i, f)))
        {
            return Err(MetadataError::ScheduleFloorAboveMax {
                window: i + 1,
                floor,
                max: max_replicas,
            });
        }
        Ok(schedules)
    }

    /// `signals`: more metrics of `engine` besides `metric`.
    fn signals(&self, engine: Engine, metric: Metric) -> Result<Vec<Signal>, MetadataError> {
        let allowed = match engine {
            Engine::Cnpg => SIGNALS_ALLOWED,
            Engine::Redis => REDIS_SIGNALS_ALLOWED,
            // Refused before: a Pooler has one signal.
            Engine::Pgbouncer => POOLER_METRIC_ALLOWED,
        };
        Ok(self
            .value("signals", allowed, |value| {
                parse_signals(value, metric, engine)
            })?
            .unwrap_or_default())
    }
}

/// `on` → true, `off` → false, in any case.
fn switch(value: &str, on: &str, off: &str) -> Option<bool> {
    if value.eq_ignore_ascii_case(on) {
        Some(true)
    } else if value.eq_ignore_ascii_case(off) {
        Some(false)
    } else {
        None
    }
}

/// `Metric=target,...`: distinct metrics of `engine` other than `primary`, at most
/// [`MAX_EXTRA_SIGNALS`].
fn parse_signals(value: &str, primary: Metric, engine: Engine) -> Option<Vec<Signal>> {
    let mut signals: Vec<Signal> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, target) = item.split_once('=')?;
        let metric = Metric::parse(name.trim()).filter(|m| engine.metrics().contains(m))?;
        let target = parse_target(target.trim())?;
        if metric == primary || signals.iter().any(|s| s.metric == metric) {
            return None;
        }
        signals.push(Signal { metric, target });
    }
    (signals.len() <= MAX_EXTRA_SIGNALS).then_some(signals)
}

fn invalid(key: &'static str, value: &str, allowed: &'static str) -> MetadataError {
    MetadataError::Invalid {
        key,
        value: echo(value),
        allowed,
    }
}

/// A finite decimal number ("nan", "inf" and hex are refused); -0 becomes 0.
fn parse_number(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite())
        .map(|n| n + 0.0)
}

/// A load per read replica, from [`MIN_TARGET`] to [`MAX_TARGET`].
fn parse_target(value: &str) -> Option<f64> {
    parse_number(value).filter(|t| (MIN_TARGET..=MAX_TARGET).contains(t))
}

fn parse_count(value: &str, min: u32) -> Option<u32> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (min..=MAX_REPLICAS_LIMIT).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![("target", "150"), ("maxReplicas", "6")]
    }

    #[test]
    fn defaults_apply() {
        let cfg = parse("pg", &md(&base())).unwrap();
        assert_eq!(
            cfg,
            ScalerConfig {
                engine: Engine::Cnpg,
                cluster: "pg".into(),
                metric: Metric::ReadConnections,
                target: 150.0,
                min_replicas: 2,
                max_replicas: 6,
                max_sync_replicas: None,
                max_replication_lag_seconds: 0.0,
                max_replication_lag_bytes: 0.0,
                brake_window_seconds: 300,
                dry_run: false,
                convergence_deadline_seconds: None,
                scale_in_disabled: false,
                schedules: Schedules::default(),
                signals: vec![],
                pooler: None,
            }
        );
        assert_eq!(cfg.metric_name(), "cnpg-pg-readconnections");
    }

    #[test]
    fn every_key_is_read() {
        let mut pairs = base();
        pairs.extend([
            ("cluster", "db"),
            ("metric", "ReadCPUUtilization"),
            ("minReplicas", "3"),
            ("maxSyncReplicas", "1"),
            ("maxReplicationLagSeconds", "30.5"),
            ("brakeWindowSeconds", "60"),
            ("dryRun", "True"),
            ("convergenceDeadlineSeconds", "120"),
            ("scaleIn", "Disabled"),
            ("signals", " ReadConnections=150 , ReadConnectionUsage=70"),
            ("schedules", "0 8 * * 1-5 for 10h floor 4 in Europe/Berlin"),
            ("scalerAddress", "scaler:6000"),
            ("enableTLS", "true"),
            ("unsafeSsl", "false"),
        ]);
        let cfg = parse("so", &md(&pairs)).unwrap();
        assert_eq!(cfg.cluster, "db");
        assert_eq!(cfg.metric, Metric::ReadCpuUtilization);
        assert_eq!(cfg.min_replicas, 3);
        assert_eq!(cfg.max_sync_replicas, Some(1));
        assert_eq!(cfg.max_replication_lag_seconds, 30.5);
        assert_eq!(cfg.brake_window_seconds, 60);
        assert!(cfg.dry_run);
        assert_eq!(cfg.convergence_deadline_seconds, Some(120.0));
        assert!(cfg.scale_in_disabled);
        assert_eq!(
            cfg.signals,
            [
                Signal {
                    metric: Metric::ReadConnections,
                    target: 150.0
                },
                Signal {
                    metric: Metric::ReadConnectionUsage,
                    target: 70.0
                }
            ]
        );
        assert_eq!(cfg.schedules.windows()[0].floor, Some(4));
        assert_eq!(cfg.metric_name(), "cnpg-db-readcpuutilization");
    }

    /// Values tests/scaler/test_metadata.py does not send through the rpc (the rules it checks
    /// there, a missing target, a bad scaleIn, signal or schedule, are not repeated here).
    #[test]
    fn invalid_values_name_their_key() {
        let cases: &[(&str, Option<&str>, &str)] = &[
            ("target", Some("0.0004"), "target"),
            ("target", Some("NaN"), "target"),
            ("maxReplicas", Some("0"), "maxReplicas"),
            ("maxReplicas", Some("2.5"), "maxReplicas"),
            ("minReplicas", Some("-1"), "minReplicas"),
            ("minReplicas", Some("7"), "minReplicas"),
            ("metric", Some("readconnections"), "metric"),
            (
                "convergenceDeadlineSeconds",
                Some("10m"),
                "convergenceDeadlineSeconds",
            ),
            (
                "convergenceDeadlineSeconds",
                Some("86401"),
                "convergenceDeadlineSeconds",
            ),
            ("brakeWindowSeconds", Some("29"), "brakeWindowSeconds"),
            ("brakeWindowSeconds", Some("3601"), "brakeWindowSeconds"),
            ("brakeWindowSeconds", Some("5m"), "brakeWindowSeconds"),
            ("signals", Some("ReadCPUUtilization=0"), "signals"),
            (
                "signals",
                Some("ReadCPUUtilization=5,ReadCPUUtilization=6"),
                "signals",
            ),
            ("cluster", Some("Bad_Name"), "cluster"),
            ("cluster", Some("pg.x"), "cluster"),
            ("maxReplica", Some("3"), "maxReplica"),
        ];
        for (key, value, named) in cases {
            let mut map = md(&base());
            match value {
                Some(v) => map.insert(key.to_string(), v.to_string()),
                None => map.remove(*key),
            };
            let err = parse("pg", &map).unwrap_err().to_string();
            assert!(
                err.contains(&format!("\"{named}\"")),
                "{key}={value:?}: {err}"
            );
        }
    }

    #[test]
    fn engine_redis_reads_its_own_keys_and_refuses_the_other_engines() {
        let redis = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = base();
            pairs.push(("engine", "redis"));
            pairs.extend_from_slice(extra);
            parse("cache", &md(&pairs))
        };
        let cfg = redis(&[
            ("metric", "ReadCommandsPerSecond"),
            ("signals", "ReadConnections=20"),
            ("maxReplicationLagBytes", "1048576"),
        ])
        .unwrap();
        assert_eq!(cfg.engine, Engine::Redis);
        assert_eq!(cfg.metric, Metric::ReadCommandsPerSecond);
        assert_eq!(cfg.max_replication_lag_bytes, 1_048_576.0);
        assert_eq!(cfg.max_replication_lag_seconds, 0.0);
        assert_eq!(cfg.metric_name(), "redis-cache-readcommandspersecond");
        let cfg = redis(&[]).unwrap();
        assert_eq!(
            (cfg.metric, cfg.max_replication_lag_bytes),
            (Metric::ReadConnections, 0.0)
        );
        // The case of the engine does not matter; CNPG stays the default and keeps its name.
        let mut pairs = base();
        pairs.push(("engine", "CNPG"));
        assert_eq!(parse("pg", &md(&pairs)).unwrap().engine, Engine::Cnpg);
        assert_eq!(parse("pg", &md(&base())).unwrap().engine, Engine::Cnpg);
        // A seconds threshold is refused for Redis, naming the key and the byte key instead.
        for (key, value, hint) in [
            ("maxReplicationLagSeconds", "10", "maxReplicationLagBytes"),
            ("maxSyncReplicas", "1", "asynchronous"),
            ("convergenceDeadlineSeconds", "120", "remove it"),
            ("brakeWindowSeconds", "60", "remove it"),
        ] {
            let err = redis(&[(key, value)]).unwrap_err();
            assert!(matches!(err, MetadataError::WrongEngine { key: k, .. } if k == key));
            let text = err.to_string();
            assert!(
                text.contains(&format!("\"{key}\"")) && text.contains(hint),
                "{text}"
            );
        }
        // And a byte threshold for CNPG.
        let mut pairs = base();
        pairs.push(("maxReplicationLagBytes", "100"));
        let text = parse("pg", &md(&pairs)).unwrap_err().to_string();
        assert!(
            text.contains("\"maxReplicationLagBytes\"") && text.contains("cnpg"),
            "{text}"
        );
        // CNPG's metrics are not Redis's, and Redis's not CNPG's.
        for (key, value) in [
            ("metric", "ReadCPUUtilization"),
            ("metric", "ReadConnectionUsage"),
            ("signals", "ReadCPUUtilization=100"),
            ("maxReplicationLagBytes", "1.5"),
            ("maxReplicationLagBytes", "-1"),
            ("maxReplicationLagBytes", "1e20"),
        ] {
            let text = redis(&[(key, value)]).unwrap_err().to_string();
            assert!(
                text.contains(&format!("\"{key}\"")),
                "{key}={value}: {text}"
            );
        }
        let mut pairs = base();
        pairs.push(("metric", "ReadCommandsPerSecond"));
        let text = parse("pg", &md(&pairs)).unwrap_err().to_string();
        assert!(text.contains("\"metric\""), "{text}");
    }

    #[test]
    fn engine_pgbouncer_reads_the_pooler_its_cluster_and_pool_sizes() {
        let pooler = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = base();
            pairs.extend([("engine", "PgBouncer"), ("cluster", "pg")]);
            pairs.extend_from_slice(extra);
            parse("pg-pooler-rw", &md(&pairs))
        };
        let cfg = pooler(&[]).unwrap();
        assert_eq!(
            (cfg.engine, cfg.cluster.as_str(), cfg.metric),
            (Engine::Pgbouncer, "pg-pooler-rw", Metric::ClientConnections)
        );
        assert_eq!(
            cfg.pooler,
            Some(PoolerConfig {
                cluster: "pg".into(),
                max_client_wait_seconds: 1.0,
                default_pool_size: 20,
                reserve_pool_size: 0,
                max_db_connections: 0,
            })
        );
        assert_eq!(
            cfg.metric_name(),
            "pgbouncer-pg-pooler-rw-clientconnections"
        );
        let cfg = pooler(&[
            ("pooler", "front"),
            ("maxClientWaitSeconds", "0.5"),
            ("defaultPoolSize", "10"),
            ("reservePoolSize", "5"),
            ("maxDbConnections", "40"),
        ])
        .unwrap();
        let p = cfg.pooler.unwrap();
        assert_eq!(cfg.cluster, "front");
        assert_eq!(
            (
                p.max_client_wait_seconds,
                p.default_pool_size,
                p.reserve_pool_size,
                p.max_db_connections
            ),
            (0.5, 10, 5, 40)
        );
        // The Cluster is required: the budget cannot be guessed.
        let mut pairs = base();
        pairs.push(("engine", "pgbouncer"));
        let err = parse("pg-pooler-rw", &md(&pairs)).unwrap_err();
        assert!(
            matches!(err, MetadataError::Missing { key: "cluster", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("spec.cluster.name"), "{err}");
        for (key, value) in [
            ("defaultPoolSize", "0"),
            ("reservePoolSize", "-1"),
            ("maxDbConnections", "262144"),
            ("maxClientWaitSeconds", "3601"),
            ("pooler", "Pooler_1"),
            ("metric", "ReadConnections"),
        ] {
            let text = pooler(&[(key, value)]).unwrap_err().to_string();
            assert!(
                text.contains(&format!("\"{key}\"")),
                "{key}={value}: {text}"
            );
        }
        // The other engines' keys are refused, and the Pooler's keys elsewhere.
        for key in [
            "maxReplicationLagSeconds",
            "maxReplicationLagBytes",
            "maxSyncReplicas",
            "convergenceDeadlineSeconds",
            "brakeWindowSeconds",
            "signals",
        ] {
            let err = pooler(&[(key, "1")]).unwrap_err();
            assert!(
                matches!(err, MetadataError::WrongEngine { key: k, engine: "pgbouncer", .. } if k == key),
                "{err}"
            );
        }
        for key in POOLER_KEYS {
            let mut pairs = base();
            pairs.push((key, "1"));
            let err = parse("pg", &md(&pairs)).unwrap_err();
            assert!(
                matches!(err, MetadataError::WrongEngine { key: k, engine: "cnpg", .. } if k == key),
                "{err}"
            );
        }
    }

    #[test]
    fn an_unknown_engine_is_invalid_and_named() {
        for value in ["mysql", "", "redis-cluster"] {
            let mut pairs = base();
            pairs.push(("engine", value));
            let err = parse("pg", &md(&pairs)).unwrap_err();
            assert!(
                matches!(err, MetadataError::Invalid { key: "engine", .. }),
                "{value}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("cnpg (the default), redis or pgbouncer")
            );
        }
    }

    #[test]
    fn cluster_defaults_to_a_valid_scaled_object_name_only() {
        assert!(matches!(
            parse("My.SO", &md(&base())),
            Err(MetadataError::DefaultCluster { .. })
        ));
        let mut pairs = base();
        pairs.push(("cluster", "pg"));
        assert_eq!(parse("My.SO", &md(&pairs)).unwrap().cluster, "pg");
    }

    /// Fuzzing: whatever KEDA (or anyone) sends, parsing never panics, an accepted config
    /// satisfies every bound, and an error message stays short.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                proptest::sample::select(OUR_KEYS.to_vec()).prop_map(str::to_owned),
                proptest::sample::select(KEDA_KEYS.to_vec()).prop_map(str::to_owned),
                ".{0,12}",
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                "[0-9]{1,4}",
                "-?[0-9]{0,3}\\.?[0-9]{0,4}(e-?[0-9]{1,3})?",
                "(?i)(true|false|nan|inf|-inf|0x1f)",
                "(ReadConnections|ReadCPUUtilization|ReadCommandsPerSecond|ClientConnections|redis|cnpg|pgbouncer|pg|[a-z0-9-]{1,70})",
                ".{0,40}",
                // Huge values must not make huge messages.
                (1usize..20_000).prop_map(|n| "\n".repeat(n)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]
            #[test]
            fn parse_never_panics_and_accepts_only_bounded_configs(
                so_name in "[a-z0-9.-]{0,70}|.{0,20}",
                pairs in proptest::collection::vec((key(), value()), 0..10),
            ) {
                let metadata: HashMap<String, String> = pairs.into_iter().collect();
                match parse(&so_name, &metadata) {
                    Ok(c) => {
                        prop_assert!(is_dns_label(&c.cluster));
                        prop_assert!((MIN_TARGET..=MAX_TARGET).contains(&c.target));
                        prop_assert!(c.min_replicas <= c.max_replicas);
                        prop_assert!((1..=MAX_REPLICAS_LIMIT).contains(&c.max_replicas));
                        prop_assert!(c.max_sync_replicas.is_none_or(|q| q <= MAX_REPLICAS_LIMIT));
                        prop_assert!(c.max_replication_lag_seconds.is_finite() && c.max_replication_lag_seconds >= 0.0);
                        prop_assert!(c.max_replication_lag_bytes.is_finite() && c.max_replication_lag_bytes >= 0.0);
                        // Each engine only ever carries its own metrics and its own lag unit.
                        prop_assert!(c.engine.metrics().contains(&c.metric));
                        prop_assert!(c.signals.iter().all(|s| c.engine.metrics().contains(&s.metric)));
                        match c.engine {
                            Engine::Cnpg => prop_assert_eq!(c.max_replication_lag_bytes, 0.0),
                            Engine::Redis => prop_assert!(c.max_replication_lag_seconds == 0.0 && c.max_sync_replicas.is_none()),
                            Engine::Pgbouncer => prop_assert!(c.pooler.as_ref().is_some_and(|p| is_dns_label(&p.cluster) && p.default_pool_size >= 1)
                                && c.signals.is_empty() && c.max_sync_replicas.is_none()),
                        }
                        prop_assert_eq!(c.pooler.is_some(), c.engine == Engine::Pgbouncer);
                    }
                    Err(e) => {
                        let message = e.to_string();
                        prop_assert!(message.len() < 600, "{} bytes: {}", message.len(), message);
                        prop_assert!(!message.contains('\n'), "{}", message);
                    }
                }
            }
        }
    }
}
