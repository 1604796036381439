//! KEDA external scaler for CloudNativePG clusters.
#![forbid(unsafe_code)]

pub mod backend;
pub mod backtest;
pub mod cache;
pub mod client_ca;
pub mod counted;
pub mod decisions;
pub mod events;
pub mod explain;
pub mod gather;
pub mod grpc;
pub mod lru;
pub mod metrics;
pub mod observe;
pub mod parsed;
pub mod scaledobject;
pub mod serve;
pub mod status;
pub mod topology;

/// Generated from `proto/externalscaler.proto`.
pub mod proto {
    tonic::include_proto!("externalscaler");
}
