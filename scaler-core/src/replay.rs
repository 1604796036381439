//! The backtest's pure loop: each evaluation time's query answer (fetched by the caller) goes
//! through the same [`evaluate`] as `serve` in metrics-only topology, and the answers drive a
//! simulated HPA ([`crate::hpa`]).
//!
//! The HPA syncs every `sync_period` seconds from the first evaluation time; a sync between two
//! evaluation times uses the latest answer (KEDA would have asked again: with `--step` equal to
//! the sync period there is exactly one evaluation per sync). The decision's `current` is the
//! simulated HPA's count before its sync at that time (the count `serve` would have been asked
//! with, had history gone the simulated way), so the holds (lag brake, dry-run, scale-in hold)
//! hold the simulated count; the observed count stays in the rows as history. Everything else
//! (load, lag, write activity) is history's, taken to be what the simulated count would have
//! seen too (docs/backtest.md says what that assumes).
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::decision::Reason;
use crate::evaluate::{Inputs, evaluate};
use crate::hpa::{Behavior, Hpa};
use crate::metadata::ScalerConfig;

/// The HPA KEDA creates for the ScaledObject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HpaSpec {
    /// `minReplicaCount` (KEDA's HPA minimum is at least 1).
    pub min_replicas: u32,
    /// `maxReplicaCount`.
    pub max_replicas: u32,
    /// `None`: the ScaledObject sets no behaviour, so the HPA has none and the controller's fixed
    /// rules apply.
    pub behavior: Option<Behavior>,
    /// The controller's `--horizontal-pod-autoscaler-sync-period` in seconds.
    pub sync_period_seconds: u32,
}

/// One evaluation time of the backtest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Unix seconds.
    pub time: i64,
    /// Σ read load (connections or CPU millicores); `None` when the evaluation failed.
    pub load: Option<f64>,
    /// The count the scaler would have answered; `None` when it would have answered an error.
    pub recommended: Option<u32>,
    pub reason: Option<Reason>,
    /// The count the simulated HPA had set after its sync at this time.
    pub simulated: u32,
    /// Instance series seen at this time: the real count then.
    pub observed: Option<u32>,
    /// The scaler's error, as `serve` would have reported it.
    pub error: Option<String>,
}

/// The replay's state between evaluation times.
pub struct Replay {
    namespace: String,
    config: ScalerConfig,
    spec: HpaSpec,
    /// Created at the first evaluation time, with the count observed then.
    hpa: Option<Hpa>,
    /// The latest answer and when the next sync is due.
    held: Option<u32>,
    /// `None` before the first evaluation time.
    next_sync: Option<i64>,
}

impl Replay {
    pub fn new(namespace: &str, config: ScalerConfig, spec: HpaSpec) -> Self {
        Self {
            namespace: namespace.to_owned(),
            config,
            spec,
            hpa: None,
            held: None,
            next_sync: None,
        }
    }

    /// Evaluates the answer at `time` (later than every earlier call) and runs the HPA's syncs up
    /// to it. An empty `parts` is an answer without any series (a gap in the history).
    pub fn step(&mut self, time: i64, parts: &HashMap<String, f64>) -> Row {
        let observed = parts
            .get(crate::promql::part::INSTANCES)
            .map(|n| *n as u32)
            .filter(|n| *n > 0);
        let period = i64::from(self.spec.sync_period_seconds.max(1));
        let hpa = self.hpa.get_or_insert_with(|| {
            Hpa::new(
                self.spec.behavior.clone(),
                self.spec.min_replicas,
                self.spec.max_replicas,
                observed.unwrap_or(self.spec.min_replicas),
                time,
            )
        });
        let mut next = self.next_sync.unwrap_or(time);
        // Syncs before this time act on the previous answer.
        while next < time {
            hpa.sync(next, self.held);
            next += period;
        }
        let inputs = Inputs {
            topology: "metrics",
            // Only read with a Cluster's status, which metrics-only topology has not.
            default_deadline: Duration::ZERO,
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(time).unwrap_or(0)),
            // What the scale target has now, in the simulated history: what a hold holds.
            current: Some(hpa.replicas()),
        };
        let evaluation = evaluate(&self.namespace, &self.config, &inputs, parts, None);
        self.held = evaluation.as_ref().ok().map(|e| e.decision.desired);
        if next == time {
            hpa.sync(time, self.held);
            next += period;
        }
        self.next_sync = Some(next);
        let (load, reason, error) = match &evaluation {
            Ok(e) => (Some(e.observation.load), Some(e.decision.reason), None),
            Err(e) => (None, None, Some(e.to_string())),
        };
        Row {
            time,
            load,
            recommended: self.held,
            reason,
            simulated: hpa.replicas(),
            observed,
            error,
        }
    }
}

/// What a run adds up to: the figures `scaler backtest` prints and `--tune` compares, counted
/// the same way for both.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Tally {
    pub evaluations: u64,
    /// Evaluations without an answer (a gap in the history, a scaler error).
    pub errors: u64,
    /// Changes of the simulated count between consecutive evaluations.
    pub scale_events: u64,
    /// Σ simulated count over evaluations (× step = instance-seconds).
    pub simulated_steps: u64,
    /// Σ observed count over evaluations with one.
    pub observed_steps: u64,
    /// Evaluations whose load per read replica, on the simulated count, is above the threshold.
    pub overloaded: u64,
    #[serde(skip)]
    last_simulated: Option<u32>,
}

impl Tally {
    /// Adds one row; `overload_above` is the load one read replica carries without overload.
    pub fn add(&mut self, row: &Row, overload_above: f64) {
        self.evaluations += 1;
        self.errors += u64::from(row.error.is_some());
        if self.last_simulated.is_some_and(|s| s != row.simulated) {
            self.scale_events += 1;
        }
        self.last_simulated = Some(row.simulated);
        self.simulated_steps += u64::from(row.simulated);
        self.observed_steps += row.observed.map_or(0, u64::from);
        if let Some(load) = row.load {
            self.overloaded += u64::from(overloaded(load, row.simulated, overload_above));
        }
    }
}

/// Whether `load` over the read replicas of `instances` (one is the primary) is above
/// `per_replica`; without a read replica any load is.
pub fn overloaded(load: f64, instances: u32, per_replica: f64) -> bool {
    match instances.saturating_sub(1) {
        0 => load > 0.0,
        replicas => load / f64::from(replicas) > per_replica,
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
