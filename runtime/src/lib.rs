//! Plumbing the servers (`scaler serve`, `scaler webhook`) and the controllers
//! (`scaler shard-controller`, `scaler scale-adapter`) share: the admin HTTP server, TLS with
//! certificate reload, the shared flag groups (`flags`, `logging`), the one lifecycle (`app`),
//! leader election on a Lease, the controllers' harness (`controller`), and the projected watch
//! index (`watch`).
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod conn;
pub mod controller;
pub mod flags;
pub mod http1;
pub mod identity;
pub mod lease;
pub mod lock;
pub mod logging;
#[cfg(feature = "testing")]
pub mod mock;
pub mod shutdown;
pub mod tasks;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
pub mod watch;
