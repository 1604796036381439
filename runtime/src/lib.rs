//! Plumbing both servers (`scaler serve`, `scaler webhook`) share: the admin HTTP server, TLS
//! with certificate reload, logging flags, and the one shutdown path.
#![forbid(unsafe_code)]

pub mod admin;
pub mod conn;
pub mod identity;
pub mod logging;
pub mod shutdown;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
