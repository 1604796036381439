//! Shard-count autosizing (docs/design.md §S6).

/// HelmReleases one shard should carry.
pub const HELMRELEASES_PER_SHARD: u64 = 100;
/// Upper bound of automatic shard counts.
pub const MAX_AUTO_SHARDS: u64 = 16;

/// `K = clamp(ceil(H/100), 1, min(16, T))`; `T = 0` means no tenant cap.
pub fn recommended_shard_count(helmreleases: u64, tenants: u64) -> u64 {
    let cap = if tenants == 0 {
        MAX_AUTO_SHARDS
    } else {
        MAX_AUTO_SHARDS.min(tenants)
    };
    helmreleases
        .div_ceil(HELMRELEASES_PER_SHARD)
        .clamp(1, cap.max(1))
}

/// Grow only once the running shards carry more than this many HelmReleases each.
pub const SCALE_UP_PER_SHARD: u64 = 120;
/// Shrink only once the running shards carry fewer than this many HelmReleases each.
pub const SCALE_DOWN_PER_SHARD: u64 = 60;

/// The shard count automatic sizing would run, given `current` running shards (docs/design.md §S6
/// `EffectiveShardCount` in auto mode; a fixed count needs no function).
///
/// The band between 60 and 120 HelmReleases per shard keeps the count from flapping around
/// the 100-per-shard target. `H/current` is compared exactly (no integer division), so
/// 241 releases on 2 shards (120.5 each) do scale up.
pub fn effective_shard_count(helmreleases: u64, tenants: u64, current: u64) -> u64 {
    let desired = recommended_shard_count(helmreleases, tenants);
    if current < 1 || desired == current {
        return desired.max(current);
    }
    // perShard > 120  ⇔  H > 120·current (exact, no float rounding).
    let crowded = u128::from(helmreleases) > u128::from(SCALE_UP_PER_SHARD) * u128::from(current);
    let sparse = u128::from(helmreleases) < u128::from(SCALE_DOWN_PER_SHARD) * u128::from(current);
    match desired.cmp(&current) {
        std::cmp::Ordering::Greater if crowded => desired,
        std::cmp::Ordering::Less if sparse => desired,
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recommended_matches_design_vectors() {
        assert_eq!(recommended_shard_count(946, 128), 10);
        assert_eq!(recommended_shard_count(5000, 128), 16);
        assert_eq!(recommended_shard_count(500, 2), 2);
        assert_eq!(recommended_shard_count(0, 0), 1);
    }

    #[test]
    fn effective_matches_design_vectors() {
        for (h, t, current, want) in [
            (250, 10, 0, 3),
            (150, 10, 2, 2),
            (110, 10, 1, 1),
            (130, 10, 1, 2),
            (110, 10, 2, 2),
            (90, 10, 2, 1),
            (99, 10, 1, 1),
        ] {
            assert_eq!(
                effective_shard_count(h, t, current),
                want,
                "H={h} T={t} current={current}"
            );
        }
    }

    #[test]
    fn effective_hysteresis_edges() {
        // Exactly 120 per shard is not crowded; 120.5 is.
        assert_eq!(effective_shard_count(240, 10, 2), 2);
        assert_eq!(effective_shard_count(241, 10, 2), 3);
        // Exactly 60 per shard is not sparse.
        assert_eq!(effective_shard_count(180, 10, 3), 3);
        assert_eq!(effective_shard_count(179, 10, 3), 2);
        // More shards running than recommended but none of them crowded: keep.
        assert_eq!(effective_shard_count(500, 10, 6), 6);
    }

    proptest::proptest! {
        #[test]
        fn recommended_is_within_bounds(h in 0u64..100_000, t in 0u64..200) {
            let k = recommended_shard_count(h, t);
            proptest::prop_assert!((1..=MAX_AUTO_SHARDS).contains(&k));
            if t > 0 { proptest::prop_assert!(k <= t); }
        }

        #[test]
        fn effective_moves_towards_recommended(h in 0u64..5_000, t in 0u64..64, current in 0u64..20) {
            let desired = recommended_shard_count(h, t);
            let k = effective_shard_count(h, t, current);
            // Hysteresis only ever keeps the running count or jumps to the recommendation.
            proptest::prop_assert!(k == current || k == desired);
        }
    }
}
