//! The KEDA scaler's pure core. Everything here is a function of its arguments: no tokio, kube,
//! tonic or HTTP, so the decision and everything that feeds it can be tested exhaustively and
//! replayed (`scaler explain`, benchmarks) without a server.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod decision;
pub mod evaluate;
pub mod hpa;
pub mod metadata;
pub mod pooler;
pub mod promql;
pub mod quantity;
pub mod quota;
pub mod replay;
pub mod schedule;
