//! The PromQL query behind decisions, its splitting into batches, and the parsing of its answer:
//! pure, no I/O (the client that runs it is the scaler's `backend`).
//!
//! One instant query answers for a batch of CNPG clusters that share a [`Shape`] (the load metric,
//! and whether the lag brake is on): labelled parts joined with `or` (instances and load; replica
//! lag and primary WAL rate only with the brake), every selector scoped to the batch's namespaces
//! and to their clusters' instance pods (`pod=~"(<cluster>|…)-[1-9][0-9]*"`). Every aggregation
//! groups by `namespace` and by `cluster`, the pod name without its `-<n>` suffix; so an answer for
//! namespace A never serves B, and `pg` never matches `pg-archive-1` (that pod's cluster is
//! `pg-archive`). The single-cluster query is the batch of one. Replicas are the pods whose
//! `cnpg_pg_replication_in_recovery` is 1, the primary the one where it is 0.
//!
//! `engine: redis` has its own query of the same shape over redis_exporter series
//! ([`redis`], docs/redis.md), and `engine: pgbouncer` two ([`pooler`], docs/pooler.md).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use serde::Deserialize;

use crate::metadata::{Engine, MAX_EXTRA_SIGNALS, Metric, ScalerConfig};
use names::echo;

/// Users whose sessions are the platform's own, not client load.
pub const INTERNAL_USERS: &str = "cnpg_metrics_exporter|postgres|streaming_replica";
/// Window of the rates (CPU, Redis commands and offsets) and of the warm-up; the CNPG brake's is
/// `brakeWindowSeconds` (5 minutes by default).
pub const WINDOW: &str = "5m";
/// Look-back for which pods are instances (and whether a replica has a lag series). One missed
/// collection makes every series of an instance stale at once (seen on the real node while
/// standbys joined: the serving replica vanished from one answer, load read 0 and the HPA removed
/// a fresh clone); `last_over_time` skips stale markers, so the replica stays an instance for a
/// gap of up to one scrape at intervals to 30 s, and its sessions, read as scraped, are missing:
/// the answer is unknown (`UNAVAILABLE`: the HPA holds), never lower.
pub const SERIES_WINDOW: &str = "1m";
/// Unreplayed WAL a replica may have and still miss no write: an idle primary's background records
/// (running-xacts snapshots, checkpoints) are tens to hundreds of bytes; one WAL page is 8 KiB.
pub const BACKGROUND_WAL_BYTES: u32 = 8192;
/// Longest query a batch may have. VictoriaMetrics rejects queries above `-search.maxQueryLen`
/// (16 KiB by default); the margin keeps proxies' URL and header limits out of reach too.
pub const MAX_QUERY_BYTES: usize = 12 * 1024;
/// A CNPG instance pod is `<cluster>-<n>`, `n` from 1 without leading zeros.
const INSTANCE_SUFFIX: &str = "-[1-9][0-9]*";
/// The cluster of an instance pod: everything before the last `-<n>` (unique: `n` has no `-`).
const CLUSTER_OF_POD: &str = "(.+)-[1-9][0-9]*";

/// How one engine's pods are named: `<prefix><name><suffix>`, and the regex that gives back the
/// name (label_replace anchors it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PodNames {
    pub prefix: &'static str,
    pub suffix: &'static str,
    pub name_of_pod: &'static str,
}

pub(crate) const CNPG_PODS: PodNames = PodNames {
    prefix: "",
    suffix: INSTANCE_SUFFIX,
    name_of_pod: CLUSTER_OF_POD,
};

/// Names of the labelled parts of [`decision_query`].
pub mod part {
    pub const INSTANCES: &str = "instances";
    pub const LOAD: &str = "load";
    /// With ReadCPUUtilization or ReadConnectionUsage: replica pods; warm replicas with a CPU
    /// series (`load_pods`); replicas with `max_connections` (`usage_pods`).
    pub const REPLICAS: &str = "replicas";
    pub const LOAD_PODS: &str = "load_pods";
    pub const USAGE_PODS: &str = "usage_pods";
    /// With ReadConnections: replicas with any `cnpg_backends_total` series. The exporter's own
    /// session is always a row, so a replica without one was not scraped: a scrape gap (a target
    /// restarted by discovery, a failed scrape) that would otherwise read as no sessions.
    pub const CONNECTION_PODS: &str = "connection_pods";
    /// With ReadCPUUtilization: replicas warming up, left out of the CPU signal: their WAL
    /// receiver was down (restoring, not streaming yet) at some point of the rate window.
    pub const WARMING: &str = "warming";
    /// CNPG: instance pods whose last scrape failed (`up == 0`, absent where no scrape job
    /// labels its targets with `pod`). A failed scrape makes every series of the pod stale at
    /// once, so a replica in it vanishes from every other part: its sessions would read as 0.
    pub const SCRAPE_FAILED: &str = "scrape_failed";
    /// The load part of a signal: `load` for the trigger's `metric`, `load_<metric>` for the
    /// others (`signals`).
    pub fn load_of(metric: crate::metadata::Metric, primary: bool) -> &'static str {
        use crate::metadata::Metric;
        match (primary, metric) {
            (true, _) => LOAD,
            (false, Metric::ReadConnections) => "load_readconnections",
            (false, Metric::ReadCpuUtilization) => "load_readcpuutilization",
            (false, Metric::ReadConnectionUsage) => "load_readconnectionusage",
            (false, Metric::ReadCommandsPerSecond) => "load_readcommandspersecond",
            (false, Metric::ClientConnections) => "load_clientconnections",
        }
    }
    pub const LAG: &str = "lag";
    /// With the CNPG lag brake: replicas without a lag series (absent when none). Lag that is
    /// unknown is never healthy.
    pub const LAG_MISSING: &str = "lag_missing";
    pub const WAL: &str = "wal";
    /// Redis (docs/redis.md): pods whose role is master.
    pub const MASTERS: &str = "masters";
    /// Redis: replicas with client-list series (`--export-client-list`).
    pub const CLIENT_PODS: &str = "client_pods";
    /// Redis: replicas with a `redis_master_link_up` series.
    pub const HEALTH_PODS: &str = "health_pods";
    /// Redis: replicas whose link to the master is down.
    pub const LINKS_DOWN: &str = "links_down";
    /// Redis: replicas in a full sync, by their own word.
    pub const SYNCING: &str = "syncing";
    /// Redis: replicas the master lists in a state other than `online` (a full sync under way),
    /// including those whose own pod the scrape has not discovered yet.
    pub const MASTER_SYNCING: &str = "master_syncing";
    /// Redis: largest replica offset lag behind the master, in bytes.
    pub const LAG_BYTES: &str = "lag_bytes";
    /// Redis: the master's replication offset growth, in bytes per second.
    pub const REPL_RATE: &str = "repl_rate";
    /// PgBouncer (docs/pooler.md): pooler pods whose exporter reached PgBouncer.
    pub const UP_PODS: &str = "up_pods";
    /// PgBouncer: pooler pods with SHOW POOLS series (clients active, waiting, maxwait).
    pub const POOL_PODS: &str = "pool_pods";
    /// PgBouncer: clients waiting for a server connection, summed.
    pub const WAITING: &str = "waiting";
    /// PgBouncer: the longest wait of a pool's oldest waiting client, in seconds.
    pub const MAX_WAIT: &str = "max_wait";
    /// PgBouncer: server connections the pooler holds, summed over its pods.
    pub const SERVER_CONNECTIONS: &str = "server_connections";
    /// PgBouncer: distinct (database, user) pools, and distinct databases, over its pods.
    pub const POOLS: &str = "pools";
    pub const POOL_DATABASES: &str = "pool_databases";
    /// The budget query (the Pooler's Cluster): primaries, and on the primary the settings and
    /// the client backends.
    pub const PRIMARIES: &str = "primaries";
    pub const MAX_CONNECTIONS: &str = "max_connections";
    pub const SUPERUSER_RESERVED: &str = "superuser_reserved_connections";
    pub const RESERVED: &str = "reserved_connections";
    pub const BACKENDS: &str = "backends";
    /// Every part name the query can label a series with.
    pub const ALL: [&str; 36] = [
        INSTANCES,
        SCRAPE_FAILED,
        LOAD,
        REPLICAS,
        LOAD_PODS,
        USAGE_PODS,
        CONNECTION_PODS,
        WARMING,
        "load_readconnections",
        "load_readcpuutilization",
        "load_readconnectionusage",
        "load_readcommandspersecond",
        LAG,
        LAG_MISSING,
        WAL,
        MASTERS,
        CLIENT_PODS,
        HEALTH_PODS,
        LINKS_DOWN,
        SYNCING,
        MASTER_SYNCING,
        LAG_BYTES,
        REPL_RATE,
        "load_clientconnections",
        UP_PODS,
        POOL_PODS,
        WAITING,
        MAX_WAIT,
        SERVER_CONNECTIONS,
        POOLS,
        POOL_DATABASES,
        PRIMARIES,
        MAX_CONNECTIONS,
        SUPERUSER_RESERVED,
        RESERVED,
        BACKENDS,
    ];
}

/// One CNPG cluster a query answers for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub namespace: String,
    pub cluster: String,
}

/// What a query asks for besides its targets; every target of one query shares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub engine: Engine,
    pub metric: Metric,
    /// The `signals` besides `metric`, in the order given.
    pub extra: [Option<Metric>; MAX_EXTRA_SIGNALS],
    /// The lag brake is on: the query adds replica lag and primary WAL rate (always for Redis).
    pub brake: bool,
    /// How far back a CNPG brake reads lag and write activity (`brakeWindowSeconds`); 0 without
    /// a CNPG brake, so other shapes never split over it.
    pub brake_window_seconds: u32,
    /// The connection-budget query of the Clusters behind Poolers ([`pooler::budget_query`]):
    /// its targets are CNPG Clusters, not the Poolers.
    pub budget: bool,
}

impl Shape {
    pub fn of(config: &ScalerConfig) -> Self {
        let mut extra = [None; MAX_EXTRA_SIGNALS];
        for (slot, signal) in extra.iter_mut().zip(&config.signals) {
            *slot = Some(signal.metric);
        }
        Self {
            engine: config.engine,
            metric: config.metric,
            extra,
            brake: match config.engine {
                Engine::Cnpg => config.max_replication_lag_seconds > 0.0,
                Engine::Redis => true,
                Engine::Pgbouncer => false,
            },
            brake_window_seconds: match config.engine {
                Engine::Cnpg if config.max_replication_lag_seconds > 0.0 => {
                    config.brake_window_seconds
                }
                _ => 0,
            },
            budget: false,
        }
    }

    /// The shape of the budget query, and the target it asks for, of a Pooler's config; `None`
    /// for other engines.
    pub fn budget_of(config: &ScalerConfig, namespace: &str) -> Option<(Self, Target)> {
        let pooler = config.pooler.as_ref()?;
        let shape = Self {
            engine: Engine::Pgbouncer,
            metric: Metric::ClientConnections,
            extra: [None; MAX_EXTRA_SIGNALS],
            brake: false,
            brake_window_seconds: 0,
            budget: true,
        };
        let target = Target {
            namespace: namespace.to_owned(),
            cluster: pooler.cluster.clone(),
        };
        Some((shape, target))
    }

    /// `metric` (the trigger's, `true`) then the extra signals (`false`), in order.
    pub(crate) fn signals(&self) -> impl Iterator<Item = (Metric, bool)> + '_ {
        std::iter::once((self.metric, true)).chain(self.extra.iter().flatten().map(|m| (*m, false)))
    }
}

/// The parts of one cluster's answer: part name → value.
pub type Parts = HashMap<String, f64>;

/// Builds the decision query for `targets` (at least one).
///
/// Series are reduced per pod (or per session identity) with `max by` before summing, so a pod
/// scraped twice (two jobs, HA Prometheus pairs) does not count twice; the `cluster` label is
/// added only to such reduced vectors, so a scraped `cluster` label (an external label, say)
/// can never collide with it.
pub fn decision_query(targets: &[Target], shape: Shape) -> String {
    match (shape.engine, shape.budget) {
        (Engine::Redis, _) => return redis::decision_query(targets, shape),
        (Engine::Pgbouncer, false) => return pooler::decision_query(targets),
        (Engine::Pgbouncer, true) => return pooler::budget_query(targets),
        (Engine::Cnpg, _) => {}
    }
    let q = CnpgSeries::of(targets);
    let mut parts = vec![
        (part::INSTANCES, q.instances()),
        (part::SCRAPE_FAILED, q.scrape_failed()),
    ];
    let mut needs_replicas = false;
    for (metric, primary) in shape.signals() {
        let load = part::load_of(metric, primary);
        match metric {
            Metric::ReadConnections => {
                needs_replicas = true;
                parts.extend(q.connections(load));
            }
            Metric::ReadCpuUtilization => {
                needs_replicas = true;
                parts.extend(q.cpu(load));
            }
            // Refused for CNPG by the metadata parser; never in a CNPG shape.
            Metric::ReadCommandsPerSecond | Metric::ClientConnections => {}
            Metric::ReadConnectionUsage => {
                needs_replicas = true;
                parts.extend(q.connection_usage(load));
            }
        }
    }
    if needs_replicas {
        parts.push((part::REPLICAS, q.replica_count()));
    }
    if shape.brake {
        parts.extend(q.brake(shape.brake_window_seconds));
    }
    labelled(parts)
}

/// The vectors the parts of one CNPG query are built from.
struct CnpgSeries {
    /// The batch's label matchers.
    sel: String,
    /// Every instance's recovery state (1 replica, 0 primary), bridged over a missed collection,
    /// without the pods that are gone.
    in_recovery: String,
    /// Replica pods, and the primary's.
    replicas: String,
    primary: String,
    /// Replicas whose WAL receiver was down in the window, and the others.
    warming: String,
    warm: String,
}

impl CnpgSeries {
    fn of(targets: &[Target]) -> Self {
        let sel = selector(targets, CNPG_PODS);
        // Which pods are instances, and their roles, bridged over one missed collection (every
        // series of a pod goes stale at once; seen on the real node while standbys joined, and
        // the replica's sessions read 0). A pod whose scrape target went away (deleted: `up`
        // stale) or whose PostgreSQL is down (`cnpg_collector_up` 0) is no instance at once. The
        // parts that read a replica's own series (sessions, settings) read them as scraped: a
        // bridged replica without them makes the answer unknown, never lower. Jobs without `up`
        // per pod (pushed series) drop nothing; `up` needs only the namespaces (the joins keep
        // instance pods), a shorter query.
        let namespaces = namespace_matcher(targets);
        let gone = format!(
            "(({} unless on(namespace,pod) up{{{namespaces}}}) or cnpg_collector_up{{{namespaces}}} == 0)",
            last(&format!("up{{{namespaces}}}"))
        );
        let in_recovery = format!(
            "({} unless on(namespace,pod) {gone})",
            last(&format!("cnpg_pg_replication_in_recovery{{{sel}}}"))
        );
        let replicas = format!("({in_recovery} == 1)");
        let primary = format!("({in_recovery} == 0)");
        // Warm-up: a replica whose WAL receiver was down at any point of the CPU rate window was
        // restoring, and `rate()` over that window still carries the restore's CPU. Without the
        // receiver series (custom monitoring queries) a replica counts as warm, so a missing
        // series never turns load into zero.
        let warming = format!(
            "(min_over_time(cnpg_pg_replication_is_wal_receiver_up{{{sel}}}[{WINDOW}]) == 0)"
        );
        let warm = format!("({replicas} unless on(namespace,pod) {warming})");
        Self {
            sel,
            in_recovery,
            replicas,
            primary,
            warming,
            warm,
        }
    }

    fn instances(&self) -> String {
        per_cluster(
            "count",
            &format!("count by (namespace,pod) ({})", self.in_recovery),
        )
    }

    fn scrape_failed(&self) -> String {
        let sel = &self.sel;
        per_cluster(
            "count",
            &format!("count by (namespace,pod) (up{{{sel}}} == 0)"),
        )
    }

    fn replica_count(&self) -> String {
        per_cluster(
            "count",
            &format!("count by (namespace,pod) {}", self.replicas),
        )
    }

    /// ReadConnections: active client backends on replicas, and the replicas with any backend row.
    fn connections(&self, load: &'static str) -> [(&'static str, String); 2] {
        let (sel, replicas) = (&self.sel, &self.replicas);
        [
            (
                load,
                per_cluster(
                    "sum",
                    &format!(
                        "max by (namespace,pod,datname,usename,application_name,state) \
                         (cnpg_backends_total{{{sel},state=\"active\",usename!~\"{INTERNAL_USERS}\"}}) \
                         and on(namespace,pod) {replicas}"
                    ),
                ),
            ),
            (
                part::CONNECTION_PODS,
                per_cluster(
                    "count",
                    &format!(
                        "count by (namespace,pod) (cnpg_backends_total{{{sel}}}) and on(namespace,pod) {replicas}"
                    ),
                ),
            ),
        ]
    }

    /// ReadCPUUtilization: millicores of warm replicas, the replicas with a CPU series, and the
    /// warming ones.
    fn cpu(&self, load: &'static str) -> [(&'static str, String); 3] {
        let (sel, replicas, warming, warm) = (&self.sel, &self.replicas, &self.warming, &self.warm);
        // A warming replica's CPU is restore work, not read load. cAdvisor always exports a
        // running container's counter, so warm replicas without it mean a scrape gap (an
        // error), unlike CNPG's omitted zero rows.
        let cpu = format!(
            "max by (namespace,pod) (rate(container_cpu_usage_seconds_total{{{sel},container=\"postgres\"}}[{WINDOW}])) \
             and on(namespace,pod) {warm}"
        );
        [
            (load, format!("{} * 1000", per_cluster("sum", &cpu))),
            (part::LOAD_PODS, per_cluster("count", &cpu)),
            (
                part::WARMING,
                per_cluster(
                    "count",
                    &format!(
                        "count by (namespace,pod) ({replicas} and on(namespace,pod) {warming})"
                    ),
                ),
            ),
        ]
    }

    /// ReadConnectionUsage: client sessions over `max_connections` on replicas, and the replicas
    /// with a `max_connections`.
    fn connection_usage(&self, load: &'static str) -> [(&'static str, String); 2] {
        let (sel, replicas) = (&self.sel, &self.replicas);
        // Every client session holds a slot of max_connections, idle ones too.
        let max_connections = format!(
            "max by (namespace,pod) (cnpg_pg_settings_setting{{{sel},name=\"max_connections\"}} > 0)"
        );
        let clients = format!(
            "sum by (namespace,pod) (max by (namespace,pod,datname,usename,application_name,state) \
             (cnpg_backends_total{{{sel},usename!~\"{INTERNAL_USERS}\"}}))"
        );
        [
            (
                load,
                per_cluster(
                    "sum",
                    &format!(
                        "{clients} / on(namespace,pod) {max_connections} * 100 and on(namespace,pod) {replicas}"
                    ),
                ),
            ),
            (
                part::USAGE_PODS,
                per_cluster(
                    "count",
                    &format!("{max_connections} and on(namespace,pod) {replicas}"),
                ),
            ),
        ]
    }

    /// The lag brake's parts: replica lag, the replicas without a lag series, and the primary's
    /// WAL rate.
    /// `window_seconds` is the brake's hysteresis: the largest lag and the write rate over it.
    fn brake(&self, window_seconds: u32) -> [(&'static str, String); 3] {
        let (sel, replicas, primary) = (&self.sel, &self.replicas, &self.primary);
        let window = duration(window_seconds);
        [
            (
                part::LAG,
                // CNPG's lag is `now() - last replayed commit` as soon as receive != replay, also
                // when all a replica misses is an idle primary's background record (docs/livepg.md,
                // L1). A replica whose unreplayed WAL (the primary's pg_stat_replication, per
                // standby pod) stayed within BACKGROUND_WAL_BYTES over the window misses no write:
                // its lag is dropped. Without that series the lag counts as it is.
                per_cluster(
                    "max",
                    &format!(
                        "(max by (namespace,pod) (max_over_time(cnpg_pg_replication_lag{{{sel}}}[{window}])) \
                         and on(namespace,pod) {replicas}) \
                         unless on(namespace,pod) (label_replace(max by (namespace,application_name) \
                         (max_over_time(cnpg_pg_stat_replication_replay_diff_bytes{{{sel}}}[{window}])), \
                         \"pod\", \"$1\", \"application_name\", \"(.*)\") <= {BACKGROUND_WAL_BYTES})"
                    ),
                ),
            ),
            (
                part::LAG_MISSING,
                per_cluster(
                    "count",
                    &format!(
                        "{replicas} unless on(namespace,pod) max by (namespace,pod) ({})",
                        last(&format!("cnpg_pg_replication_lag{{{sel}}}"))
                    ),
                ),
            ),
            (
                part::WAL,
                per_cluster(
                    "max",
                    &format!(
                        "max by (namespace,pod) (rate(cnpg_collector_wal_bytes{{{sel}}}[{window}])) \
                         and on(namespace,pod) {primary}"
                    ),
                ),
            ),
        ]
    }
}

/// The parts joined with `or`, each series labelled `part=<name>`.
pub(crate) fn labelled(parts: Vec<(&str, String)>) -> String {
    let mut query = String::new();
    for (i, (name, expr)) in parts.into_iter().enumerate() {
        if i > 0 {
            query.push_str("\nor ");
        }
        let _ = write!(
            query,
            "label_replace({expr}, \"part\", \"{name}\", \"\", \"\")"
        );
    }
    query
}

/// A PromQL duration of whole seconds: minutes when they divide it (`5m`, as written by hand).
fn duration(seconds: u32) -> String {
    if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// A selector's latest sample within [`SERIES_WINDOW`], stale markers skipped.
fn last(selector: &str) -> String {
    format!("last_over_time({selector}[{SERIES_WINDOW}])")
}

/// `agg` of a per-pod vector (labels `namespace`, `pod` and maybe more, never `cluster`) by
/// namespace and cluster.
fn per_cluster(agg: &str, per_pod: &str) -> String {
    per_name(agg, per_pod, CNPG_PODS)
}

/// [`per_cluster`] for pods named like `pods`.
pub(crate) fn per_name(agg: &str, per_pod: &str, pods: PodNames) -> String {
    format!(
        "{agg} by (namespace,cluster) (label_replace({per_pod}, \"cluster\", \"$1\", \"pod\", \"{}\"))",
        pods.name_of_pod
    )
}

/// The label matchers every selector of a batch carries: its namespaces, and the instance pods
/// of its clusters (a namespace and a cluster of different targets may pair up: such extra
/// groups are answered and ignored by [`parse_answer`]'s callers).
pub(crate) fn selector(targets: &[Target], pods: PodNames) -> String {
    let namespace = namespace_matcher(targets);
    let clusters: BTreeSet<&str> = targets.iter().map(|t| t.cluster.as_str()).collect();
    let (prefix, suffix) = (pods.prefix, pods.suffix);
    let pods = match clusters.len() {
        1 => format!("{prefix}{}{suffix}", alternation(&clusters)),
        _ => format!("{prefix}({}){suffix}", alternation(&clusters)),
    };
    format!("{namespace},pod=~\"{}\"", string_escape(&pods))
}

/// The batch's namespaces; one name matches by equality (the batch of one reads like a
/// hand-written query).
fn namespace_matcher(targets: &[Target]) -> String {
    let namespaces: BTreeSet<&str> = targets.iter().map(|t| t.namespace.as_str()).collect();
    match namespaces.len() {
        1 => format!("namespace=\"{}\"", string_escape(&targets[0].namespace)),
        _ => format!(
            "namespace=~\"{}\"",
            string_escape(&alternation(&namespaces))
        ),
    }
}

/// The names as one regex, their common prefix written once: `tenant-(a|b)`, not
/// `tenant-a|tenant-b`. A batch of many namespaces repeats its matcher in every selector, so
/// this is most of a long query's length (platforms name tenants `tenant-<name>`), and a
/// shorter query means fewer of them per batch.
fn alternation(names: &BTreeSet<&str>) -> String {
    let prefix = common_prefix(names);
    let rest: Vec<String> = names
        .iter()
        .map(|n| regex_escape(&n[prefix.len()..]))
        .collect();
    match (prefix.is_empty(), rest.len()) {
        (true, _) | (_, 1) => names
            .iter()
            .map(|n| regex_escape(n))
            .collect::<Vec<_>>()
            .join("|"),
        (false, _) => format!("{}({})", regex_escape(prefix), rest.join("|")),
    }
}

/// The longest prefix every name shares, cut at a character boundary.
fn common_prefix<'a>(names: &BTreeSet<&'a str>) -> &'a str {
    // Sorted: the first and last names differ most, so their common prefix is everyone's.
    let (Some(first), Some(last)) = (names.first(), names.last()) else {
        return "";
    };
    let end = first
        .char_indices()
        .zip(last.chars())
        .find(|((_, a), b)| a != b)
        .map_or(first.len().min(last.len()), |((i, _), _)| i);
    &first[..end]
}

/// One query and the clusters it answers for.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub targets: Vec<Target>,
    pub query: String,
}

/// Splits `targets` into queries of at most `max_targets` clusters and `max_bytes` bytes.
/// Targets are sorted and deduplicated first, so the clusters of one namespace share queries
/// (shorter selectors). A single cluster's query is kept whatever its length: names are DNS
/// labels, so it is a few KiB at most.
pub fn batches(
    mut targets: Vec<Target>,
    shape: Shape,
    max_targets: usize,
    max_bytes: usize,
) -> Vec<Batch> {
    targets.sort_unstable();
    targets.dedup();
    let mut out = Vec::new();
    for chunk in targets.chunks(max_targets.max(1)) {
        split_to_fit(chunk, shape, max_bytes, &mut out);
    }
    out
}

fn split_to_fit(targets: &[Target], shape: Shape, max_bytes: usize, out: &mut Vec<Batch>) {
    let query = decision_query(targets, shape);
    if query.len() <= max_bytes || targets.len() == 1 {
        out.push(Batch {
            targets: targets.to_vec(),
            query,
        });
        return;
    }
    // The query grows about linearly with its targets: estimate how many fit in one from the
    // query of the first alone, cut into even pieces of at most that many, then check each (a
    // cut by length alone left pieces just over the bound, each split in two again).
    let one = decision_query(&targets[..1], shape).len();
    let per_target = (query.len() - one).div_ceil(targets.len() - 1).max(1);
    let fit = max_bytes.saturating_sub(one) / per_target + 1;
    let pieces = targets.len().div_ceil(fit).max(2);
    for chunk in targets.chunks(targets.len().div_ceil(pieces)) {
        split_to_fit(chunk, shape, max_bytes, out);
    }
}

/// Escapes RE2 metacharacters so a name matches literally.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Escapes a value for a double-quoted PromQL string literal.
pub fn string_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Largest value any part may carry: far above any real count, rate, load or lag.
pub const MAX_VALUE: f64 = 1e15;
// A lag threshold above what an answer can carry could never be crossed.
const _: () = assert!(crate::metadata::MAX_REPLICATION_LAG_BYTES as f64 <= MAX_VALUE);
/// Largest pod count a counting part may carry.
pub const MAX_COUNT: f64 = 100_000.0;
/// The parts that count pods: whole numbers from 0 to [`MAX_COUNT`].
const COUNT_PARTS: [&str; 16] = [
    part::INSTANCES,
    part::REPLICAS,
    part::LOAD_PODS,
    part::USAGE_PODS,
    part::CONNECTION_PODS,
    part::WARMING,
    part::MASTERS,
    part::CLIENT_PODS,
    part::HEALTH_PODS,
    part::LINKS_DOWN,
    part::SYNCING,
    part::UP_PODS,
    part::POOL_PODS,
    part::POOLS,
    part::POOL_DATABASES,
    part::PRIMARIES,
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error("Prometheus query timed out after {0:?} (body and parse included)")]
    Timeout(Duration),
    #[error(
        "Prometheus answer is larger than --max-response-bytes ({limit} bytes); a decision's answer is a few hundred bytes: check that --prometheus-url is a Prometheus query API"
    )]
    TooLarge { limit: usize },
    #[error("Prometheus is unreachable: {0}")]
    Unreachable(String),
    #[error("Prometheus answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    /// `location` is a bounded echo of the header.
    #[error(
        "Prometheus answered HTTP {status} redirecting to {location}; redirects are not followed \
         (another server's answer is not this cluster's load): set --prometheus-url to the address that answers"
    )]
    Redirect { status: u16, location: String },
    #[error("Prometheus returned an unusable answer: {0}")]
    Garbage(String),
}

#[derive(Deserialize)]
struct Response<T> {
    status: String,
    #[serde(default = "Option::default")]
    data: Option<Data<T>>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data<T> {
    result_type: String,
    result: Vec<T>,
}

/// The `result` of a successful answer of `result_type` `want`; anything else is an error.
fn result<'a, T: Deserialize<'a>>(body: &'a [u8], want: &str) -> Result<Vec<T>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let response: Response<T> = serde_json::from_slice(body).map_err(|e| {
        garbage(format!(
            "not a Prometheus API answer: {}",
            echo(&e.to_string())
        ))
    })?;
    if response.status != "success" {
        return Err(garbage(format!(
            "status {}: {}",
            echo(&response.status),
            echo(&response.error.unwrap_or_default())
        )));
    }
    let data = response.data.ok_or_else(|| garbage("no data".into()))?;
    if data.result_type != want {
        return Err(garbage(format!(
            "result type {}, want {want}",
            echo(&data.result_type)
        )));
    }
    Ok(data.result)
}

#[derive(Deserialize)]
struct VectorSample {
    metric: HashMap<String, String>,
    value: (f64, String),
}

/// Parses a `/api/v1/query` answer into each cluster's parts; anything unexpected is an error
/// for the whole answer. A cluster without samples is absent (its callers decide what that
/// means: "no instance series"). Every piece of the answer quoted in an error is a bounded,
/// escaped [`echo`].
pub fn parse_answer(body: &[u8]) -> Result<HashMap<Target, Parts>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let result: Vec<VectorSample> = result(body, "vector")?;
    let mut answer: HashMap<Target, Parts> = HashMap::new();
    for mut sample in result {
        let mut label = |name: &str| {
            sample
                .metric
                .remove(name)
                .ok_or_else(|| garbage(format!("a sample without a {name} label")))
        };
        let (name, namespace, cluster) = (label("part")?, label("namespace")?, label("cluster")?);
        let value = checked_value(&name, &sample.value.1)?;
        let parts = answer.entry(Target { namespace, cluster }).or_default();
        if parts.contains_key(&name) {
            return Err(garbage(format!(
                "{}: more than one sample for one cluster",
                echo(&name)
            )));
        }
        parts.insert(name, value);
    }
    Ok(answer)
}

/// A part's value, parsed and range-checked like every answer (counts are whole numbers).
pub(crate) fn checked_value(name: &str, text: &str) -> Result<f64, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let value: f64 = text.parse().map_err(|_| {
        garbage(format!(
            "{}: value {} is not a number",
            echo(name),
            echo(text)
        ))
    })?;
    if !value.is_finite() || !(0.0..=MAX_VALUE).contains(&value) {
        return Err(garbage(format!(
            "{}: value {value} is out of range (a number from 0 to {MAX_VALUE:e})",
            echo(name)
        )));
    }
    if COUNT_PARTS.contains(&name) && (value.fract() != 0.0 || value > MAX_COUNT) {
        return Err(garbage(format!(
            "{}: value {value} is not a pod count (a whole number from 0 to {MAX_COUNT})",
            echo(name)
        )));
    }
    Ok(value)
}

/// Parses a `/api/v1/query_range` answer of a one-cluster [`decision_query`] for `target` into,
/// per evaluation time (Unix seconds) within `times`, `part` → value: that cluster's parts in
/// [`parse_answer`] for an instant query at that time. A series labelled with another namespace
/// or cluster, of a part the query does not have, or a sample outside `times`, makes the whole
/// answer an error: it is not this cluster's history (a proxy or cache that answered another
/// query). Streamed ([`matrix`]): memory is the body plus what is kept.
pub fn parse_matrix(
    body: &[u8],
    target: &Target,
    times: std::ops::RangeInclusive<i64>,
) -> Result<BTreeMap<i64, HashMap<String, f64>>, QueryError> {
    matrix::parse(body, target, times)
}

#[path = "promql_matrix.rs"]
mod matrix;
#[path = "promql_pooler.rs"]
pub mod pooler;
#[path = "promql_redis.rs"]
pub mod redis;

#[cfg(test)]
#[path = "promql_tests.rs"]
mod tests;
