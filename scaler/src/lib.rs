//! KEDA external scaler for CloudNativePG clusters.
#![forbid(unsafe_code)]

pub mod backend;
pub mod cache;
pub mod client_ca;
pub mod counted;
pub mod decisions;
pub mod events;
pub mod gather;
pub mod grpc;
pub mod list;
pub mod lru;
pub mod metrics;
pub mod observe;
pub mod parsed;
pub mod scaledobject;
pub mod serve;
pub mod topology;
pub mod warm;

/// Generated from `proto/externalscaler.proto`.
pub mod proto {
    tonic::include_proto!("externalscaler");
}
