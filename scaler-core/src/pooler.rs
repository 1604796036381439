//! The connection budget of a CNPG Pooler (docs/pooler.md): how many PgBouncer instances the
//! database behind it can take. Pure arithmetic on numbers the queries measured; the decision
//! never goes above [`ConnectionBudget::fits`].
use serde::Serialize;

use crate::metadata::PoolerConfig;

/// The budget's numbers, as `explain` and the decision's reason name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConnectionBudget {
    /// The primary's `max_connections`.
    pub max_connections: u32,
    /// Its `superuser_reserved_connections` + `reserved_connections`: slots no pooler login
    /// can take.
    pub reserved: u32,
    /// Client backends on the primary that are not this Pooler's server connections.
    pub other: u32,
    /// Server connections one pooler instance may open (see [`per_instance`]).
    pub per_instance: u32,
    /// Instances whose pools fit: `(max_connections − reserved − other) / per_instance`,
    /// rounded down, 0 when nothing is left.
    pub fits: u32,
}

/// What the queries measured for the budget, every value known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub max_connections: f64,
    pub superuser_reserved: f64,
    pub reserved: f64,
    /// Client backends on the primary, the Pooler's own server connections included.
    pub backends: f64,
    /// Server connections the Pooler's instances hold now.
    pub pooler_servers: f64,
    /// Distinct (database, user) pools and distinct databases over the Pooler's pods.
    pub pools: f64,
    pub databases: f64,
}

/// Server connections one PgBouncer instance may open: each pool up to `default_pool_size +
/// reserve_pool_size`, each database's pools together up to `max_db_connections` (when set).
/// Per database that is `min(max_db, pools_of_it × per_pool)`; with only the totals known it is
/// bounded by `min(pools × per_pool, databases × max_db)`, never less than the exact sum, so the
/// budget errs on the side of fewer instances. With no client pool yet, one pool counts: the
/// first client opens one.
pub fn per_instance(sizes: &PoolerConfig, pools: u32, databases: u32) -> u32 {
    let pools = u64::from(pools.max(1));
    let databases = u64::from(databases.max(1)).min(pools);
    let per_pool = u64::from(sizes.default_pool_size) + u64::from(sizes.reserve_pool_size);
    let mut n = pools * per_pool;
    if sizes.max_db_connections > 0 {
        n = n.min(databases * u64::from(sizes.max_db_connections));
    }
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The budget from what was measured and the Pooler's pool sizes.
pub fn budget(sizes: &PoolerConfig, m: &Measured) -> ConnectionBudget {
    // Answers are range-checked (0 … 1e15) before: `as` only truncates fractions and saturates.
    let n = |v: f64| v as u64;
    let per_instance = per_instance(sizes, n(m.pools) as u32, n(m.databases) as u32);
    let reserved = n(m.superuser_reserved).saturating_add(n(m.reserved));
    // The Pooler's own server connections are in `backends`, and in `per_instance` already.
    let other = n(m.backends).saturating_sub(n(m.pooler_servers));
    let room = n(m.max_connections)
        .saturating_sub(reserved)
        .saturating_sub(other);
    let fits = room / u64::from(per_instance.max(1));
    let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    ConnectionBudget {
        max_connections: small(n(m.max_connections)),
        reserved: small(reserved),
        other: small(other),
        per_instance,
        fits: small(fits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(default: u32, reserve: u32, max_db: u32) -> PoolerConfig {
        PoolerConfig {
            cluster: "pg".into(),
            max_client_wait_seconds: 1.0,
            default_pool_size: default,
            reserve_pool_size: reserve,
            max_db_connections: max_db,
        }
    }

    fn measured(backends: f64, pooler_servers: f64) -> Measured {
        Measured {
            max_connections: 100.0,
            superuser_reserved: 3.0,
            reserved: 2.0,
            backends,
            pooler_servers,
            pools: 1.0,
            databases: 1.0,
        }
    }

    #[test]
    fn the_budget_at_its_edges() {
        // 100 − 5 reserved − 15 others = 80 = exactly four pools of 20.
        let b = budget(&sizes(20, 0, 0), &measured(15.0, 0.0));
        assert_eq!(
            (b.reserved, b.other, b.per_instance, b.fits),
            (5, 15, 20, 4)
        );
        // One connection more and the fourth does not fit.
        assert_eq!(budget(&sizes(20, 0, 0), &measured(16.0, 0.0)).fits, 3);
        // The pooler's own 40 server connections are not others'.
        let b = budget(&sizes(20, 0, 0), &measured(55.0, 40.0));
        assert_eq!((b.other, b.fits), (15, 4));
        // Less room than one instance's pools: none fits; no room at all, or less than none.
        assert_eq!(budget(&sizes(20, 0, 0), &measured(76.0, 0.0)).fits, 0);
        assert_eq!(budget(&sizes(20, 0, 0), &measured(95.0, 0.0)).fits, 0);
        assert_eq!(budget(&sizes(20, 0, 0), &measured(500.0, 0.0)).fits, 0);
        // The reserve pool counts: 25 per instance.
        assert_eq!(budget(&sizes(20, 5, 0), &measured(15.0, 0.0)).fits, 3);
    }

    #[test]
    fn pools_and_max_db_connections_make_the_per_instance_count() {
        // No pool yet counts as one.
        assert_eq!(per_instance(&sizes(20, 5, 0), 0, 0), 25);
        // Three users of one database: 75, capped at the database's 30.
        assert_eq!(per_instance(&sizes(20, 5, 30), 3, 1), 30);
        // Two databases of two pools each, max_db 30: at most 60 (exact 2 × min(30, 50)).
        assert_eq!(per_instance(&sizes(20, 5, 30), 4, 2), 60);
        // A cap above the pools' sum changes nothing.
        assert_eq!(per_instance(&sizes(20, 5, 1000), 2, 1), 50);
        // Absurd sizes saturate, never wrap.
        assert_eq!(
            per_instance(&sizes(262_143, 262_143, 0), u32::MAX, 1),
            u32::MAX
        );
        let b = budget(
            &sizes(262_143, 262_143, 0),
            &Measured {
                pools: 1e15,
                ..measured(0.0, 0.0)
            },
        );
        assert_eq!((b.per_instance, b.fits), (u32::MAX, 0));
    }
}
