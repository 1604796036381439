//! The decision queries of `engine: pgbouncer` (docs/pooler.md): CNPG's pooler exporter series
//! (`cnpg_pgbouncer_*`, SHOW POOLS per database and user) of a Pooler's pods, and the connection
//! budget of the CNPG Cluster behind it. A Pooler's pods are its Deployment's,
//! `<pooler>-<replica set hash>-<pod hash>` (the operator names the Deployment after the Pooler);
//! the PodMonitor gives their series `namespace` and `pod`, not the pods' labels. Same shape as
//! the CNPG query: labelled parts joined with `or`, scoped to the batch's namespaces and pods,
//! aggregated by `namespace` and the name taken from the pod name.
//!
//! The budget is a query of its own ([`budget_query`]) over the Cluster's instance pods, since a
//! batch of Poolers may serve other Clusters than their names say; its answer is keyed by the
//! Cluster and joined to the Pooler's by the caller.
use super::{CNPG_PODS, PodNames, Target, labelled, part, per_name, selector};

/// A Pooler's pod: `<pooler>-<hash>-<hash>`. Hashes are Kubernetes' safe encoding (no `-`), so
/// the two suffixes are exactly the last two `-` segments and one Pooler's pods never match
/// another's.
const POOLER_PODS: PodNames = PodNames {
    prefix: "",
    suffix: "-[a-z0-9]{1,10}-[a-z0-9]{5}",
    name_of_pod: "(.+)-[a-z0-9]{1,10}-[a-z0-9]{5}",
};

/// PgBouncer's admin console: a pool of its own in SHOW POOLS (the exporter's own connection),
/// with no server connections.
pub const ADMIN_DATABASE: &str = "pgbouncer";

/// The pooler exporter's one series every scrape carries: 0 when its last collection reached
/// PgBouncer (SHOW LISTS, POOLS and STATS), 1 when it did not. CNPG 1.30 sets a
/// `cnpg_pgbouncer_up` gauge but never exports it (its collector does not send it), so a Pooler
/// is counted by this one (docs/pooler.md, found on the real node).
pub const COLLECTION_ERROR: &str = "cnpg_pgbouncer_last_collection_error";

/// Server connections of a pool in every state SHOW POOLS reports one in: each holds a
/// PostgreSQL backend.
const SERVER_STATES: &str = "active|idle|used|tested|login";

pub(super) fn decision_query(targets: &[Target]) -> String {
    let sel = selector(targets, POOLER_PODS);
    let pools = format!("{sel},database!=\"{ADMIN_DATABASE}\"");
    let per = |agg: &str, per_pod: &str| per_name(agg, per_pod, POOLER_PODS);
    // One sample per pod, pool and series: a pod scraped twice counts once.
    let pool_series = |name: &str| {
        format!("max by (namespace,pod,database,user) (cnpg_pgbouncer_pools_{name}{{{pools}}})")
    };
    let on_pods =
        |name: &str| format!("count by (namespace,pod) (cnpg_pgbouncer_pools_{name}{{{sel}}})");
    // maxwait is whole seconds and maxwait_us the microseconds beyond them (PgBouncer splits
    // the one wait in two columns); a pgbouncer without the _us column counts whole seconds.
    let wait = format!(
        "({seconds} + on(namespace,pod,database,user) {micros} / 1e6) or {seconds}",
        seconds = pool_series("maxwait"),
        micros = pool_series("maxwait_us"),
    );
    // Each pool distinct over the Pooler's pods: a pool on two pods is one pool of each.
    let distinct = |by: &str| {
        format!(
            "count by (namespace,cluster) (count by (namespace,cluster,{by}) (label_replace(\
             cnpg_pgbouncer_pools_cl_active{{{pools}}}, \"cluster\", \"$1\", \"pod\", \"{}\")))",
            POOLER_PODS.name_of_pod
        )
    };
    labelled(vec![
        (
            part::INSTANCES,
            per(
                "count",
                &format!("count by (namespace,pod) ({COLLECTION_ERROR}{{{sel}}})"),
            ),
        ),
        (
            part::UP_PODS,
            per(
                "count",
                &format!("max by (namespace,pod) ({COLLECTION_ERROR}{{{sel}}}) == 0"),
            ),
        ),
        (
            part::POOL_PODS,
            per(
                "count",
                &format!(
                    "{} and on(namespace,pod) {} and on(namespace,pod) {}",
                    on_pods("cl_active"),
                    on_pods("cl_waiting"),
                    on_pods("maxwait")
                ),
            ),
        ),
        (part::LOAD, per("sum", &pool_series("cl_active"))),
        (part::WAITING, per("sum", &pool_series("cl_waiting"))),
        (part::MAX_WAIT, per("max", &wait)),
        (
            part::SERVER_CONNECTIONS,
            per(
                "sum",
                &format!(
                    "max by (namespace,pod,database,user,__name__) \
                     ({{__name__=~\"cnpg_pgbouncer_pools_sv_({SERVER_STATES})\",{pools}}})"
                ),
            ),
        ),
        (part::POOLS, distinct("database,user")),
        (part::POOL_DATABASES, distinct("database")),
    ])
}

/// The connection budget of the CNPG Clusters `targets` name: on each one's primary,
/// `max_connections`, the reserved slots and the client backends.
pub fn budget_query(targets: &[Target]) -> String {
    let sel = selector(targets, CNPG_PODS);
    let primary = format!("(cnpg_pg_replication_in_recovery{{{sel}}} == 0)");
    let per = |agg: &str, per_pod: &str| per_name(agg, per_pod, CNPG_PODS);
    let setting = |name: &str| {
        per(
            "max",
            &format!(
                "max by (namespace,pod) (cnpg_pg_settings_setting{{{sel},name=\"{name}\"}}) \
                 and on(namespace,pod) {primary}"
            ),
        )
    };
    labelled(vec![
        (
            part::PRIMARIES,
            per("count", &format!("count by (namespace,pod) {primary}")),
        ),
        (part::MAX_CONNECTIONS, setting("max_connections")),
        (
            part::SUPERUSER_RESERVED,
            setting("superuser_reserved_connections"),
        ),
        (part::RESERVED, setting("reserved_connections")),
        (
            // Every client backend holds a slot, the pooler's own server connections included;
            // WAL senders do not (PostgreSQL 12 and later count them in max_wal_senders).
            part::BACKENDS,
            per(
                "sum",
                &format!(
                    "max by (namespace,pod,datname,usename,application_name,state) \
                     (cnpg_backends_total{{{sel},usename!=\"streaming_replica\"}}) \
                     and on(namespace,pod) {primary}"
                ),
            ),
        ),
    ])
}
