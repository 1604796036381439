//! A STAND-IN baseline for the scaler benchmark (tests/scaler/bench), never a product part: a
//! KEDA ExternalScaler gRPC server on tonic's default server settings that answers every call
//! with a constant, without reading the request. The benchmark drives it and `scaler serve` with
//! the same client, so their ratio is what the scaler's key parsing, cache and metrics cost over
//! bare tonic.
//!
//! `cargo run --release -p scaler --example noop_external_scaler -- --listen 127.0.0.1:9000`
use std::net::SocketAddr;

use clap::Parser;
use scaler::proto::external_scaler_server::{ExternalScaler, ExternalScalerServer};
use scaler::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// The constant answer: a cluster of this many instances, one per unit of target.
const INSTANCES: i64 = 3;
const METRIC: &str = "noop";

#[derive(Parser)]
#[command(about = "No-op KEDA external scaler: the stand-in baseline of the scaler benchmark")]
struct Args {
    #[arg(long)]
    listen: SocketAddr,
}

struct Noop;

#[tonic::async_trait]
impl ExternalScaler for Noop {
    async fn is_active(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        Ok(Response::new(IsActiveResponse { result: true }))
    }

    type StreamIsActiveStream = ReceiverStream<Result<IsActiveResponse, Status>>;

    async fn stream_is_active(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        Err(Status::unimplemented("not part of the benchmark"))
    }

    async fn get_metric_spec(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec {
                metric_name: METRIC.into(),
                target_size: 1,
                target_size_float: 1.0,
            }],
        }))
    }

    async fn get_metrics(
        &self,
        _: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: METRIC.into(),
                metric_value: INSTANCES,
                metric_value_float: INSTANCES as f64,
            }],
        }))
    }

    type StreamMetricSpecStream = ReceiverStream<Result<GetMetricSpecResponse, Status>>;

    async fn stream_metric_spec(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        Err(Status::unimplemented("not part of the benchmark"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tonic::transport::Server::builder()
        .add_service(ExternalScalerServer::new(Noop))
        .serve(args.listen)
        .await?;
    Ok(())
}
