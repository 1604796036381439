//! Pure Flux shard placement for tenant HelmReleases (no I/O): tenant attribution,
//! canonical shard names, least-loaded placement with optional rebalance, autosizing.
#![forbid(unsafe_code)]

pub mod autosize;
