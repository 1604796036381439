//! Shard-count autosizing (cozystack-designs.md §2.6).

/// HelmReleases one shard should carry.
pub const HELMRELEASES_PER_SHARD: u64 = 100;
/// Upper bound of automatic shard counts.
pub const MAX_AUTO_SHARDS: u64 = 16;

/// `K = clamp(ceil(H/100), 1, min(16, T))`; `T = 0` means no tenant cap.
pub fn recommended_shard_count(helmreleases: u64, tenants: u64) -> u64 {
    let cap = if tenants == 0 { MAX_AUTO_SHARDS } else { MAX_AUTO_SHARDS.min(tenants) };
    helmreleases.div_ceil(HELMRELEASES_PER_SHARD).clamp(1, cap.max(1))
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
}
