use super::*;
use proptest::prelude::*;

const GRACE: Duration = Duration::from_secs(60);

fn t(ns: &str, weight: u64, current: Option<ShardIndex>) -> TenantInfo {
    TenantInfo {
        namespace: ns.into(),
        weight,
        current,
        deleting: false,
    }
}

fn policy(k: u32) -> Policy {
    Policy {
        shard_count: k,
        grace: GRACE,
        ..Policy::default()
    }
}

fn all_ready(k: u32) -> BTreeMap<ShardIndex, ShardHealth> {
    (0..k).map(|i| (i, ShardHealth::Ready)).collect()
}

fn no_cooldown(_: &str) -> bool {
    false
}

fn moved(plan: &Plan) -> Vec<(&str, Option<ShardIndex>, ShardIndex, MoveReason)> {
    plan.moves
        .iter()
        .map(|m| (m.tenant.as_str(), m.from, m.to, m.reason))
        .collect()
}

#[test]
fn settled_balanced_tenants_do_not_move() {
    let tenants = [t("a", 3, Some(0)), t("b", 3, Some(1))];
    let p = plan(&tenants, &all_ready(2), &policy(2), no_cooldown);
    assert!(p.moves.is_empty());
    assert!(p.stranded.is_empty());
    assert_eq!(p.imbalance, 0.0);
}

#[test]
fn removed_shard_tenants_move_to_the_least_loaded_live_shards() {
    // 3 → 2 shards: only the tenants of shard2 move, heaviest first onto the lighter shard.
    let tenants = [
        t("a", 4, Some(0)),
        t("b", 2, Some(1)),
        t("c", 3, Some(2)),
        t("d", 1, Some(2)),
    ];
    let p = plan(&tenants, &all_ready(2), &policy(2), no_cooldown);
    assert_eq!(
        moved(&p),
        vec![
            ("c", Some(2), 1, MoveReason::ShardRemoved),
            ("d", Some(2), 0, MoveReason::ShardRemoved),
        ]
    );
    assert_eq!(p.stranded, BTreeSet::from(["c".into(), "d".into()]));
    assert_eq!(p.placement.loads, vec![5, 5]);
}

#[test]
fn a_shard_down_within_grace_keeps_its_tenants_but_gets_no_new_ones() {
    let tenants = [t("a", 1, Some(0)), t("b", 1, Some(1)), t("new", 1, None)];
    let health = BTreeMap::from([
        (0, ShardHealth::Ready),
        (1, ShardHealth::Down(GRACE - Duration::from_secs(1))),
    ]);
    let p = plan(&tenants, &health, &policy(2), no_cooldown);
    assert_eq!(moved(&p), vec![("new", None, 0, MoveReason::Unassigned)]);
    assert!(p.stranded.is_empty());
    assert_eq!(p.live, BTreeSet::from([0]));
}

#[test]
fn a_shard_down_past_grace_is_drained() {
    let tenants = [t("a", 1, Some(0)), t("b", 2, Some(1)), t("c", 1, Some(2))];
    let health = BTreeMap::from([
        (0, ShardHealth::Ready),
        (1, ShardHealth::Down(GRACE)),
        (2, ShardHealth::Ready),
    ]);
    let p = plan(&tenants, &health, &policy(3), no_cooldown);
    assert_eq!(moved(&p), vec![("b", Some(1), 0, MoveReason::ShardDown)]);
    assert_eq!(p.stranded, BTreeSet::from(["b".into()]));
}

#[test]
fn an_empty_unplaced_tenant_is_left_to_the_webhook_but_an_empty_stranded_one_moves() {
    let tenants = [t("empty", 0, None), t("labelled", 0, Some(4))];
    let p = plan(&tenants, &all_ready(2), &policy(2), no_cooldown);
    assert_eq!(
        moved(&p),
        vec![("labelled", Some(4), 0, MoveReason::ShardRemoved)]
    );
}

#[test]
fn a_missing_shard_counts_as_just_gone_down() {
    let tenants = [t("a", 1, Some(0)), t("b", 1, Some(1))];
    let health = BTreeMap::from([(0, ShardHealth::Ready)]);
    let p = plan(&tenants, &health, &policy(2), no_cooldown);
    assert!(p.moves.is_empty(), "{:?}", p.moves);
}

#[test]
fn deleting_tenants_are_stranded_but_never_moved() {
    let gone = TenantInfo {
        deleting: true,
        ..t("gone", 5, Some(2))
    };
    let p = plan(
        &[gone, t("a", 1, Some(0))],
        &all_ready(2),
        &policy(2),
        no_cooldown,
    );
    assert!(p.moves.is_empty());
    assert_eq!(p.stranded, BTreeSet::from(["gone".into()]));
}

#[test]
fn no_live_shard_leaves_stranded_tenants_unplaced() {
    let tenants = [t("a", 1, Some(2))];
    let health = BTreeMap::from([(0, ShardHealth::Down(GRACE)), (1, ShardHealth::Down(GRACE))]);
    let p = plan(&tenants, &health, &policy(2), no_cooldown);
    assert!(p.moves.is_empty());
    assert_eq!(p.placement.unplaced, vec!["a".to_owned()]);
    assert_eq!(p.stranded.len(), 1);
}

#[test]
fn rebalance_follows_the_design_vector_and_respects_cooldown() {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
    ];
    let config = Policy {
        rebalance_threshold: 0.25,
        ..policy(2)
    };
    let p = plan(&tenants, &all_ready(2), &config, no_cooldown);
    assert_eq!(moved(&p), vec![("a", Some(0), 1, MoveReason::Rebalance)]);
    assert!((p.imbalance - 50.0 / 35.0).abs() < 1e-9, "{}", p.imbalance);
    let p = plan(&tenants, &all_ready(2), &config, |t| t == "a");
    assert_eq!(moved(&p), vec![("b", Some(0), 1, MoveReason::Rebalance)]);
    let p = plan(&tenants, &all_ready(2), &config, |_| true);
    assert!(p.moves.is_empty());
}

#[test]
fn rescues_come_before_rebalance() {
    let tenants = [
        t("a", 30, Some(0)),
        t("b", 30, Some(0)),
        t("c", 10, Some(1)),
        t("z", 1, Some(5)),
        t("y", 1, None),
    ];
    let config = Policy {
        rebalance_threshold: 0.25,
        ..policy(2)
    };
    let reasons: Vec<_> = plan(&tenants, &all_ready(2), &config, no_cooldown)
        .moves
        .iter()
        .map(|m| m.reason)
        .collect();
    assert_eq!(
        &reasons[..2],
        [MoveReason::ShardRemoved, MoveReason::Unassigned]
    );
    assert!(reasons.len() > 2, "the heavy shard is rebalanced too");
    assert!(
        reasons[2..].iter().all(|&r| r == MoveReason::Rebalance),
        "{reasons:?}"
    );
}

#[test]
fn down_since_starts_the_clock_once_and_resets_on_ready() {
    let mut clock = DownSince::default();
    let t0 = Instant::now();
    let ready = BTreeMap::from([(0, true), (1, false)]);
    let h = clock.observe(t0, 3, &ready);
    assert_eq!(h[&0], ShardHealth::Ready);
    assert_eq!(h[&1], ShardHealth::Down(Duration::ZERO));
    assert_eq!(
        h[&2],
        ShardHealth::Down(Duration::ZERO),
        "missing Deployment"
    );
    let h = clock.observe(t0 + GRACE, 3, &ready);
    assert_eq!(h[&1], ShardHealth::Down(GRACE));
    let h = clock.observe(t0 + GRACE * 2, 3, &BTreeMap::from([(1, true)]));
    assert_eq!(h[&1], ShardHealth::Ready);
    let h = clock.observe(t0 + GRACE * 3, 3, &ready);
    assert_eq!(
        h[&1],
        ShardHealth::Down(Duration::ZERO),
        "clock restarts after recovery"
    );
    assert_eq!(h[&2], ShardHealth::Down(GRACE * 3));
}

#[test]
fn release_gate_blocks_deleting_always_and_in_progress_on_live_shards() {
    let live = BTreeSet::from([0, 1]);
    let deleting = ReleaseState {
        deleting: true,
        in_progress: false,
    };
    let busy = ReleaseState {
        deleting: false,
        in_progress: true,
    };
    let idle = ReleaseState::default();
    assert_eq!(release_gate(Some("shard0"), idle, &live, 2), Ok(()));
    assert_eq!(
        release_gate(Some("shard5"), deleting, &live, 2),
        Err(Blocked::Deleting)
    );
    assert_eq!(
        release_gate(Some("shard0"), busy, &live, 2),
        Err(Blocked::InProgress)
    );
    // Nobody runs a release on a removed or drained shard: its "in progress" is stale.
    assert_eq!(release_gate(Some("shard2"), busy, &live, 2), Ok(()));
    assert_eq!(
        release_gate(Some("shard1"), busy, &BTreeSet::from([0]), 2),
        Ok(())
    );
    // A legacy or unknown key may have a controller we do not know about.
    assert_eq!(
        release_gate(Some("tenants"), busy, &live, 2),
        Err(Blocked::InProgress)
    );
    assert_eq!(release_gate(None, busy, &live, 2), Err(Blocked::InProgress));
}

#[test]
fn recommendation_reports_raw_and_hysteresis() {
    assert_eq!(
        recommend(230, 10, 2),
        Recommendation {
            raw: 3,
            with_hysteresis: 2
        }
    );
    assert_eq!(recommend(241, 10, 2).with_hysteresis, 3);
    assert_eq!(recommend(0, 0, 0).raw, 1);
}

fn arb_cluster() -> impl Strategy<Value = (Vec<TenantInfo>, u32, BTreeMap<ShardIndex, ShardHealth>)>
{
    let tenants = prop::collection::btree_map(
        "tenant-[a-z]{1,6}",
        (
            0u64..20,
            prop::option::of(0u32..6),
            prop::bool::weighted(0.1),
        ),
        0..40,
    );
    let health = prop::collection::vec(
        prop_oneof![Just(None), Just(Some(0u64)), Just(Some(120))],
        4,
    );
    (tenants, 1u32..5, health).prop_map(|(tenants, k, health)| {
        let tenants = tenants
            .into_iter()
            .map(|(namespace, (weight, current, deleting))| TenantInfo {
                namespace,
                weight,
                current,
                deleting,
            })
            .collect();
        let health = (0..k)
            .map(|i| {
                let h = match health[i as usize] {
                    None => ShardHealth::Ready,
                    Some(secs) => ShardHealth::Down(Duration::from_secs(secs)),
                };
                (i, h)
            })
            .collect();
        (tenants, k, health)
    })
}

proptest! {
    #[test]
    fn moves_only_target_live_shards_and_never_deleting_tenants(
        (tenants, k, health) in arb_cluster(), thr in 0.0f64..1.0,
    ) {
        let config = Policy { rebalance_threshold: thr, ..policy(k) };
        let p = plan(&tenants, &health, &config, no_cooldown);
        let by_name: BTreeMap<_, _> = tenants.iter().map(|t| (t.namespace.as_str(), t)).collect();
        let mut seen = BTreeSet::new();
        for m in &p.moves {
            prop_assert!(p.live.contains(&m.to), "{m:?} targets a shard that is not live");
            prop_assert!(!by_name[m.tenant.as_str()].deleting, "{m:?} moves a deleting tenant");
            prop_assert!(seen.insert(m.tenant.clone()), "{} moved twice", m.tenant);
            prop_assert_ne!(m.from, Some(m.to));
        }
    }

    #[test]
    fn every_stranded_live_tenant_is_rescued_when_a_shard_is_live(
        (tenants, k, health) in arb_cluster(),
    ) {
        let p = plan(&tenants, &health, &policy(k), no_cooldown);
        if !p.live.is_empty() {
            let moving: BTreeSet<_> = p.moves.iter().map(|m| m.tenant.clone()).collect();
            for t in tenants.iter().filter(|t| p.stranded.contains(&t.namespace) && !t.deleting) {
                prop_assert!(moving.contains(&t.namespace), "{} stays stranded", t.namespace);
            }
        }
    }

    #[test]
    fn replanning_after_the_moves_moves_nothing_more(
        (tenants, k, health) in arb_cluster(),
    ) {
        // Without rebalancing, one plan reaches a fixed point: after applying its moves,
        // the next sync plans none (no flapping between syncs).
        let p = plan(&tenants, &health, &policy(k), no_cooldown);
        let after: Vec<_> = tenants
            .iter()
            .map(|t| TenantInfo {
                current: p.moves.iter().find(|m| m.tenant == t.namespace).map(|m| m.to).or(t.current),
                ..t.clone()
            })
            .collect();
        let again = plan(&after, &health, &policy(k), no_cooldown);
        prop_assert!(again.moves.is_empty(), "{:?}", again.moves);
    }
}
