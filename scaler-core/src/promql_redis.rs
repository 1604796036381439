//! The decision query of `engine: redis` (docs/redis.md): redis_exporter series of a
//! RedisFailover's Redis pods, `rfr-<name>-<n>` (the operator's StatefulSet `rfr-<name>`; its
//! sentinels are `rfs-<name>-…` and never match). Same shape as the CNPG query: labelled parts
//! joined with `or`, every selector scoped to the batch's namespaces and pods, every aggregation
//! by `namespace` and the RedisFailover name taken from the pod name. Replicas are the pods whose
//! `redis_instance_info` says `role="slave"`, the master the one that says `role="master"`.
use super::{PodNames, Shape, Target, WINDOW, labelled, part, per_name, selector};
use crate::metadata::Metric;

/// A Redis pod is `rfr-<name>-<ordinal>`, the ordinal a StatefulSet's (0, 1, …).
const REDIS_PODS: PodNames = PodNames {
    prefix: "rfr-",
    suffix: "-(0|[1-9][0-9]*)",
    name_of_pod: "rfr-(.+)-(0|[1-9][0-9]*)",
};

/// Client-list entries (`--export-client-list`) that are the platform's own connections, not
/// load: each sentinel's two (`sentinel-<id>-cmd`, `sentinel-<id>-pubsub`) and the exporter's
/// (its default `--set-client-name`).
pub const INTERNAL_CLIENT_NAMES: &str = "sentinel-[0-9a-f]+-(cmd|pubsub)|redis_exporter";
/// Look-back for client-list series. Their `idle_since` label changes at every scrape and the
/// exporter's own connection is a new one (new `created_at`) at every scrape, so each entry is a
/// new series each time, and a new series can reach the query index a few seconds after its
/// predecessor went stale (seen against VictoriaMetrics in tests/liveredis): an instant lookup
/// would flap to "no internal connections". Entries are grouped by name and flags, which stay.
pub const CLIENT_LIST_WINDOW: &str = "1m";

/// Read commands of Redis's `@read` category as commandstats names them. A replica's other
/// commands are the master link's replicated writes, pings and sentinel hellos, and the
/// exporter's and sentinels' INFO, CLIENT, CONFIG, SLOWLOG: none is read load. In the PromQL
/// string `\\|` is the regex's literal `|` of a subcommand (`object|encoding`).
pub const READ_COMMANDS: &str = r"get|mget|getrange|substr|strlen|getbit|bitcount|bitpos|bitfield_ro|lcs|exists|type|ttl|pttl|expiretime|pexpiretime|touch|dump|randomkey|object\\|.+|hget|hmget|hgetall|hkeys|hvals|hlen|hexists|hstrlen|hrandfield|hscan|lindex|llen|lrange|lpos|scard|sismember|smismember|smembers|srandmember|sscan|sdiff|sinter|sintercard|sunion|zcard|zcount|zlexcount|zrange|zrangebylex|zrangebyscore|zrevrange|zrevrangebylex|zrevrangebyscore|zrank|zrevrank|zscore|zmscore|zrandmember|zscan|zdiff|zinter|zintercard|zunion|geodist|geohash|geopos|georadius_ro|georadiusbymember_ro|geosearch|pfcount|xlen|xrange|xrevrange|xread|xpending|xinfo\\|.+|sort_ro|eval_ro|evalsha_ro|fcall_ro|memory\\|usage|scan|keys";

/// Replication stream a master with connected replicas sends while no client writes: each
/// sentinel's hello (a PUBLISH every 2 s, about 60 B/s per sentinel, measured against Debian's
/// redis-server 7.0 in tests/liveredis) and the master's PING every `repl-ping-replica-period`.
/// Above this the master writes; 1 KiB/s covers a dozen sentinels.
pub const BACKGROUND_REPL_BYTES_PER_SECOND: f64 = 1024.0;

pub(super) fn decision_query(targets: &[Target], shape: Shape) -> String {
    let q = RedisSeries::of(targets);
    let mut parts = vec![
        (part::INSTANCES, q.instances()),
        (part::MASTERS, per("count", &q.master)),
        (part::REPLICAS, per("count", &q.replicas)),
    ];
    for (metric, primary) in shape.signals() {
        let load = part::load_of(metric, primary);
        match metric {
            Metric::ReadConnections => parts.extend(q.connections(load)),
            Metric::ReadCommandsPerSecond => parts.push((load, q.commands())),
            // Refused for Redis by the metadata parser; never in a Redis shape.
            Metric::ReadCpuUtilization
            | Metric::ReadConnectionUsage
            | Metric::ClientConnections => {}
        }
    }
    // The brake's parts: always, the Redis brake has no off switch.
    parts.extend(q.brake());
    labelled(parts)
}

/// `agg` of a per-pod vector by namespace and RedisFailover.
fn per(agg: &str, per_pod: &str) -> String {
    per_name(agg, per_pod, REDIS_PODS)
}

/// The vectors the parts of one Redis query are built from.
struct RedisSeries {
    /// The batch's label matchers.
    sel: String,
    /// Pods with role slave, and the one with role master.
    replicas: String,
    master: String,
}

impl RedisSeries {
    fn of(targets: &[Target]) -> Self {
        let sel = selector(targets, REDIS_PODS);
        let role = |role: &str| {
            format!("(max by (namespace,pod) (redis_instance_info{{{sel},role=\"{role}\"}}))")
        };
        let (replicas, master) = (role("slave"), role("master"));
        Self {
            sel,
            replicas,
            master,
        }
    }

    fn on_replicas(&self, per_pod: &str) -> String {
        format!("({per_pod}) and on(namespace,pod) {}", self.replicas)
    }

    fn count_replicas(&self, per_pod: &str) -> String {
        per("count", &self.on_replicas(per_pod))
    }

    fn instances(&self) -> String {
        let sel = &self.sel;
        per(
            "count",
            &format!("max by (namespace,pod) (redis_instance_info{{{sel}}})"),
        )
    }

    /// ReadConnections: client connections on replicas less the platform's own, and the
    /// replicas with a client list.
    fn connections(&self, load: &'static str) -> [(&'static str, String); 2] {
        let sel = &self.sel;
        // `redis_connected_clients` counts every connection but replicas' (a replica's master
        // link included); the client list names the platform's own. Identical client-list
        // entries collapse into one series, so clients are counted from the total, never from
        // the list (nor are connections of the operator, which opens unnamed short-lived ones:
        // docs/redis.md).
        let clients = format!("max by (namespace,pod) (redis_connected_clients{{{sel}}})");
        let details = |matcher: &str| {
            format!(
                "last_over_time(redis_connected_clients_details{{{sel},{matcher}}}[{CLIENT_LIST_WINDOW}])"
            )
        };
        let internal = format!(
            "count by (namespace,pod) (max by (namespace,pod,name,flags) ({} or {}))",
            details(&format!("name=~\"{INTERNAL_CLIENT_NAMES}\"")),
            details("flags=\"M\"")
        );
        [
            (
                load,
                per(
                    "sum",
                    &self.on_replicas(&format!(
                        "clamp_min({clients} - on(namespace,pod) ({internal} or {clients} * 0), 0)"
                    )),
                ),
            ),
            (
                part::CLIENT_PODS,
                self.count_replicas(&format!(
                    "count by (namespace,pod) (last_over_time(redis_connected_clients_details{{{sel}}}[{CLIENT_LIST_WINDOW}]))"
                )),
            ),
        ]
    }

    /// ReadCommandsPerSecond: read commands per second on replicas.
    fn commands(&self) -> String {
        let sel = &self.sel;
        per(
            "sum",
            &self.on_replicas(&format!(
                "sum by (namespace,pod) (max by (namespace,pod,cmd) \
                 (rate(redis_commands_total{{{sel},cmd=~\"{READ_COMMANDS}\"}}[{WINDOW}])))"
            )),
        )
    }

    /// The brake's parts: replication health, offset lag and the master's replication rate.
    fn brake(&self) -> [(&'static str, String); 6] {
        let (sel, master) = (&self.sel, &self.master);
        let link_up = format!("min by (namespace,pod) (redis_master_link_up{{{sel}}})");
        [
            (part::HEALTH_PODS, self.count_replicas(&link_up)),
            (
                part::LINKS_DOWN,
                self.count_replicas(&format!("{link_up} == 0")),
            ),
            (
                part::SYNCING,
                self.count_replicas(&format!(
                    "max by (namespace,pod) (redis_master_sync_in_progress{{{sel}}}) == 1"
                )),
            ),
            (
                // The master lists a replica as soon as it connects, before vmagent discovers the
                // replica's pod (up to its 30 s discovery interval) and while its full sync runs.
                // The state is a label: a replica the master also lists as online is not syncing
                // (its earlier state's series lingers where no staleness marker ends it).
                part::MASTER_SYNCING,
                per(
                    "count",
                    &format!(
                        "(max by (namespace,pod,slave_ip,slave_port) \
                         (redis_connected_slave_offset_bytes{{{sel},slave_state!=\"online\"}}) \
                         unless on(namespace,pod,slave_ip,slave_port) \
                         redis_connected_slave_offset_bytes{{{sel},slave_state=\"online\"}}) \
                         and on(namespace,pod) {master}"
                    ),
                ),
            ),
            (
                // Per replica, from the master's own INFO (one instant): its offset minus the
                // offset the replica acknowledged. A replica still waiting for its full sync
                // acknowledged 0.
                part::LAG_BYTES,
                per(
                    "max",
                    &format!(
                        "clamp_min(max by (namespace,pod) (redis_master_repl_offset{{{sel}}}) \
                         - on(namespace,pod) group_right max by (namespace,pod,slave_ip,slave_port) \
                         (redis_connected_slave_offset_bytes{{{sel}}}), 0) and on(namespace,pod) {master}"
                    ),
                ),
            ),
            (
                part::REPL_RATE,
                per(
                    "max",
                    &format!(
                        "max by (namespace,pod) (rate(redis_master_repl_offset{{{sel}}}[{WINDOW}])) \
                         and on(namespace,pod) {master}"
                    ),
                ),
            ),
        ]
    }
}
