//! The Flux shard-placement admission webhook's parts: `mutate` decides (pure), `assign`
//! resolves a tenant's shard (the crate's index + namespace label), `server` is the HTTPS shell,
//! `metrics` the gauges.
pub mod assign;
pub mod metrics;
pub mod mutate;
pub mod review;
pub mod server;
