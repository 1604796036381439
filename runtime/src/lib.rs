//! Plumbing the servers (`scaler serve`, `scaler webhook`) and the controllers
//! (`scaler shard-controller`, `scaler scale-adapter`) share: the admin HTTP server, TLS with
//! certificate reload, logging flags, the one shutdown path, and leader election on a Lease.
#![forbid(unsafe_code)]

pub mod admin;
pub mod conn;
pub mod identity;
pub mod lease;
pub mod logging;
#[cfg(feature = "testing")]
pub mod mock;
pub mod shutdown;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
