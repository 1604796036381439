//! Asks the backends (Prometheus, the Cluster topology) and hands their answers to the pure
//! [`scaler_core::evaluate`].
use std::time::{Duration, SystemTime};

use scaler_core::evaluate::{self, EvaluateError, Evaluation, Inputs};
use scaler_core::metadata::ScalerConfig;
use scaler_core::promql::{self, QueryError};

use crate::backend;
use crate::metrics::Metrics;
use crate::topology::{Topology, TopologyError};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Evaluate(#[from] EvaluateError),
}

/// Something that can evaluate a ScaledObject (the real [`Observer`], or a fake in cache tests).
pub trait Evaluate: Send + Sync + 'static {
    fn evaluate(
        &self,
        namespace: &str,
        config: &ScalerConfig,
    ) -> impl Future<Output = Result<Evaluation, ObserveError>> + Send;
}

/// Reads Prometheus and the Cluster, then decides.
#[derive(Clone)]
pub struct Observer {
    pub prometheus: backend::Client,
    pub topology: Topology,
    pub metrics: Metrics,
    /// `--convergence-deadline`, unless the metadata sets one.
    pub convergence_deadline: Duration,
}

impl Evaluate for Observer {
    async fn evaluate(
        &self,
        namespace: &str,
        config: &ScalerConfig,
    ) -> Result<Evaluation, ObserveError> {
        let query = promql::decision_query(
            namespace,
            &config.cluster,
            config.metric,
            config.max_replication_lag_seconds > 0.0,
        );
        let (parts, snapshot) = tokio::join!(
            self.prometheus.parts(&query),
            self.topology
                .lookup(namespace, &config.cluster, &self.metrics)
        );
        let inputs = Inputs {
            topology: self.topology.name(),
            default_deadline: self.convergence_deadline,
            now: SystemTime::now(),
        };
        Ok(evaluate::evaluate(
            namespace,
            config,
            &inputs,
            &parts?,
            snapshot?.as_ref(),
        )?)
    }
}
