//! KEDA external scaler for CloudNativePG clusters, and the Flux shard-placement webhook.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cache;
pub mod cli;
pub mod decision;
pub mod explain;
pub mod grpc;
pub mod logging;
pub mod metadata;
pub mod metrics;
pub mod observe;
pub mod promql;
pub mod serve;
pub mod tls;
pub mod topology;
pub mod webhook;

/// Generated from `proto/externalscaler.proto`.
pub mod proto {
    tonic::include_proto!("externalscaler");
}
