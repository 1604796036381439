use super::*;
use proptest::prelude::*;

fn t(ns: &str, weight: u64, current: Option<ShardIndex>) -> TenantInfo {
    TenantInfo {
        namespace: ns.into(),
        weight,
        current,
        deleting: false,
    }
}

fn deleting(ns: &str, weight: u64, current: Option<ShardIndex>) -> TenantInfo {
    TenantInfo {
        deleting: true,
        ..t(ns, weight, current)
    }
}

fn cfg(k: u32) -> PlacementConfig {
    PlacementConfig {
        shard_count: k,
        ..PlacementConfig::default()
    }
}

fn place(tenants: &[TenantInfo], config: &PlacementConfig) -> Placement {
    compute_placement(tenants, config, |_| true)
}

fn shard_of(p: &Placement, ns: &str) -> Option<ShardIndex> {
    p.assignments.get(ns).copied()
}

/// The design's rebalance vector: a:30 and b:30 on shard0, c:10 on shard1, K = 2.
fn design_vector(rebalance_threshold: f64) -> Placement {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    place(
        &tenants,
        &PlacementConfig {
            rebalance_threshold,
            ..cfg(2)
        },
    )
}

#[test]
fn design_vector_rebalance_moves_one_heavy_tenant() {
    let p = design_vector(0.25);
    assert_eq!(p.loads, vec![30, 40]);
    // Exactly one of the 30-weight tenants moved; ties go by name, so `a`.
    assert_eq!(shard_of(&p, "a"), Some(1));
    assert_eq!(shard_of(&p, "b"), Some(0));
    assert_eq!(shard_of(&p, "c"), Some(1));
}

#[test]
fn design_vector_high_threshold_moves_nothing() {
    let p = design_vector(2.0);
    assert_eq!(p.loads, vec![60, 10]);
    assert_eq!(shard_of(&p, "a"), Some(0));
}

#[test]
fn zero_threshold_disables_rebalance() {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    assert_eq!(place(&tenants, &cfg(2)).loads, vec![60, 10]);
}

#[test]
fn rebalance_respects_cooldown_pins_and_deletion() {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    let config = PlacementConfig {
        rebalance_threshold: 0.25,
        ..cfg(2)
    };
    assert_eq!(
        compute_placement(&tenants, &config, |_| false).loads,
        vec![60, 10]
    );
    let pinned = PlacementConfig {
        pinned: BTreeMap::from([("a".into(), 0), ("b".into(), 0)]),
        ..config.clone()
    };
    assert_eq!(place(&tenants, &pinned).loads, vec![60, 10]);
    let gone = [
        deleting("a", 30, Some(0)),
        deleting("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    assert_eq!(place(&gone, &config).loads, vec![60, 10]);
}

#[test]
fn rebalance_never_targets_an_unready_shard() {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    let config = PlacementConfig {
        rebalance_threshold: 0.25,
        unready: BTreeSet::from([1]),
        ..cfg(2)
    };
    assert_eq!(place(&tenants, &config).loads, vec![60, 10]);
}

#[test]
fn uniform_tenants_spread_one_per_shard() {
    let tenants: Vec<_> = (0..4).map(|i| t(&format!("tenant-{i}"), 1, None)).collect();
    let p = place(&tenants, &cfg(4));
    assert_eq!(p.loads, vec![1, 1, 1, 1]);
}

#[test]
fn lpt_places_heaviest_first_with_ties_to_lowest_index() {
    let tenants = [
        t("small", 1, None),
        t("big", 10, None),
        t("mid", 5, None),
        t("mid2", 5, None),
    ];
    let p = place(&tenants, &cfg(2));
    // big→0 (tie → lowest), mid→1, mid2→1 (5 < 10), small→0 or 1: loads 10 vs 10 → 0.
    assert_eq!(shard_of(&p, "big"), Some(0));
    assert_eq!(shard_of(&p, "mid"), Some(1));
    assert_eq!(shard_of(&p, "mid2"), Some(1));
    assert_eq!(shard_of(&p, "small"), Some(0));
    assert_eq!(p.loads, vec![11, 10]);
}

#[test]
fn new_tenant_goes_to_least_loaded_settled_shard() {
    let tenants = [
        t("a", 10, Some(0)),
        t("b", 3, Some(1)),
        t("c", 5, Some(2)),
        t("new", 1, None),
    ];
    assert_eq!(shard_of(&place(&tenants, &cfg(3)), "new"), Some(1));
}

#[test]
fn new_tenant_skips_unready_shards() {
    let tenants = [t("a", 10, Some(0)), t("new", 1, None)];
    let config = PlacementConfig {
        unready: BTreeSet::from([1]),
        ..cfg(3)
    };
    assert_eq!(shard_of(&place(&tenants, &config), "new"), Some(2));
}

#[test]
fn no_ready_shard_leaves_tenant_unplaced_but_keeps_settled_ones() {
    let tenants = [t("a", 10, Some(0)), t("new", 1, None)];
    let config = PlacementConfig {
        unready: BTreeSet::from([0, 1]),
        ..cfg(2)
    };
    let p = place(&tenants, &config);
    assert_eq!(p.unplaced, vec!["new".to_owned()]);
    assert_eq!(shard_of(&p, "a"), Some(0));
    assert_eq!(shard_of(&p, "new"), None);
}

#[test]
fn pins_are_honoured_when_valid() {
    let tenants = [t("a", 1, Some(0)), t("b", 1, None)];
    let config = PlacementConfig {
        pinned: BTreeMap::from([("a".into(), 2), ("b".into(), 2)]),
        ..cfg(3)
    };
    let p = place(&tenants, &config);
    assert_eq!(shard_of(&p, "a"), Some(2));
    assert_eq!(shard_of(&p, "b"), Some(2));
}

#[test]
fn pin_to_missing_shard_is_ignored() {
    let tenants = [t("a", 1, Some(1)), t("b", 1, None)];
    let config = PlacementConfig {
        pinned: BTreeMap::from([("a".into(), 5), ("b".into(), 9)]),
        ..cfg(2)
    };
    let p = place(&tenants, &config);
    assert_eq!(shard_of(&p, "a"), Some(1));
    assert_eq!(shard_of(&p, "b"), Some(0));
}

#[test]
fn deleting_tenants_are_never_moved() {
    // On a removed shard (index ≥ K) and pinned elsewhere: stays put until it drains.
    let tenants = [
        deleting("gone", 7, Some(3)),
        deleting("pinned-gone", 2, Some(1)),
    ];
    let config = PlacementConfig {
        pinned: BTreeMap::from([("pinned-gone".into(), 0)]),
        ..cfg(2)
    };
    let p = place(&tenants, &config);
    assert_eq!(shard_of(&p, "gone"), Some(3));
    assert_eq!(shard_of(&p, "pinned-gone"), Some(1));
    assert_eq!(p.loads, vec![0, 2]);
}

#[test]
fn scale_down_moves_only_tenants_of_removed_shards() {
    let tenants = [
        t("a", 5, Some(0)),
        t("b", 5, Some(1)),
        t("c", 5, Some(2)),
        t("d", 1, Some(2)),
    ];
    let p = place(&tenants, &cfg(2));
    assert_eq!(shard_of(&p, "a"), Some(0));
    assert_eq!(shard_of(&p, "b"), Some(1));
    // c (heavier) first to shard0 (tie → lowest), then d to shard1.
    assert_eq!(shard_of(&p, "c"), Some(0));
    assert_eq!(shard_of(&p, "d"), Some(1));
}

#[test]
fn zero_shards_means_one() {
    let p = place(&[t("a", 1, None)], &cfg(0));
    assert_eq!(p.loads, vec![1]);
    assert_eq!(shard_of(&p, "a"), Some(0));
}

fn arb_tenants() -> impl Strategy<Value = Vec<TenantInfo>> {
    prop::collection::btree_map(
        "tenant-[a-z]{1,6}",
        (0u64..50, prop::option::of(0u32..8), any::<bool>()),
        0..24,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(namespace, (weight, current, deleting))| TenantInfo {
                namespace,
                weight,
                current,
                deleting,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn every_live_tenant_gets_a_shard_below_k(tenants in arb_tenants(), k in 1u32..8, thr in 0.0f64..1.0) {
        let p = place(&tenants, &PlacementConfig { rebalance_threshold: thr, ..cfg(k) });
        for t in &tenants {
            let shard = p.assignments.get(&t.namespace).copied();
            prop_assert!(shard.is_some(), "{} unassigned", t.namespace);
            if !t.deleting {
                prop_assert!(shard < Some(k), "{} on {:?} with K={}", t.namespace, shard, k);
            }
        }
        let on_live: u64 = tenants.iter().filter(|t| p.assignments[&t.namespace] < k).map(|t| t.weight).sum();
        prop_assert_eq!(p.loads.iter().sum::<u64>(), on_live);
    }

    #[test]
    fn uniform_weights_give_one_tenant_per_shard(n in 1u32..16) {
        let tenants: Vec<_> = (0..n).map(|i| t(&format!("tenant-{i:02}"), 3, None)).collect();
        let p = place(&tenants, &cfg(n));
        prop_assert!(p.loads.iter().all(|&l| l == 3), "{:?}", p.loads);
    }

    #[test]
    fn scale_up_never_moves_settled_tenants(tenants in arb_tenants(), k in 1u32..8, extra in 1u32..4) {
        let before = place(&tenants, &cfg(k));
        let settled: Vec<TenantInfo> = tenants
            .iter()
            .map(|t| TenantInfo { current: before.assignments.get(&t.namespace).copied(), ..t.clone() })
            .collect();
        let after = place(&settled, &cfg(k + extra));
        prop_assert_eq!(before.assignments, after.assignments);
    }

    #[test]
    fn rebalance_never_widens_the_spread(tenants in arb_tenants(), k in 2u32..6, thr in 0.01f64..1.0) {
        let live: Vec<_> = tenants.into_iter().map(|t| TenantInfo { current: t.current.map(|c| c % k), ..t }).collect();
        let plain = place(&live, &cfg(k));
        let balanced = place(&live, &PlacementConfig { rebalance_threshold: thr, ..cfg(k) });
        let spread = |l: &[u64]| l.iter().max().unwrap() - l.iter().min().unwrap();
        prop_assert!(spread(&balanced.loads) <= spread(&plain.loads));
    }
}
