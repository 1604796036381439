//! Pure Flux shard placement for tenant HelmReleases (no I/O): tenant attribution,
//! canonical shard names, least-loaded placement with optional rebalance, autosizing, and the
//! plan of one placement-controller sync.
#![forbid(unsafe_code)]

pub mod autosize;
pub mod placement;
pub mod plan;
pub mod shard;
pub mod tenant;

pub use placement::{Placement, PlacementConfig, TenantInfo, compute_placement};
pub use shard::{ShardIndex, ShardName, parse_shard_index, shard_name};
pub use tenant::tenant_namespace_for_hr;
