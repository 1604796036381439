//! The guarded instance count: a pure function of the policy and one observation.
//!
//! 1. `raw = 1 + ceil(load / target)`: one primary plus the read replicas the load needs.
//! 2. `floor = max(minReplicas, quorum + 1, 2)`; the quorum wins over `maxReplicas`.
//! 3. `recommended = clamp(raw, floor, max(maxReplicas, floor))`.
//! 4. Lag brake (threshold > 0, replica lag over 5 min above it, primary writing WAL) and dry-run
//!    both hold the current count, clamped into `[floor, ceiling]`.
use std::fmt;

use serde::Serialize;

/// Why the count is what it is; one label value per variant for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The load asked for this count, within bounds.
    Load,
    /// Raised to `minReplicas` (or the absolute minimum of 2).
    Floor,
    /// Raised to the synchronous quorum + 1, possibly above `maxReplicas`.
    Quorum,
    /// Capped at `maxReplicas`.
    Max,
    /// Held by the lag brake.
    Brake,
    /// Held because of `dryRun`.
    DryRun,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Self::Load,
        Self::Floor,
        Self::Quorum,
        Self::Max,
        Self::Brake,
        Self::DryRun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::Floor => "floor",
            Self::Quorum => "quorum",
            Self::Max => "max",
            Self::Brake => "brake",
            Self::DryRun => "dry-run",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bounds and switches for one ScaledObject, with the quorum already resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Policy {
    pub target: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Synchronous quorum (`maxSyncReplicas` or the Cluster's `synchronous.number`).
    pub quorum: u32,
    /// Lag brake threshold in seconds; 0 = off.
    pub max_lag_seconds: f64,
    pub dry_run: bool,
}

/// What was measured, turned into plain numbers at the I/O edge.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observation {
    /// Instances the scale target has now (Cluster `spec.instances`, or instance series).
    pub current: u32,
    /// Σ read load over replicas (connections, or CPU millicores); finite and ≥ 0.
    pub load: f64,
    /// Largest replica lag over the last 5 minutes, in seconds; `None` without lag series.
    pub max_lag_seconds: Option<f64>,
    /// Whether the primary wrote WAL recently (`rate(cnpg_collector_wal_bytes[5m]) > 0`).
    pub primary_writing: bool,
}

/// State of the lag brake, reported even when it does not decide the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Brake {
    /// Threshold is 0.
    Off,
    /// Lag is at or below the threshold (or unknown).
    Clear,
    /// Lag is above the threshold but the primary is idle: the known false alarm.
    IdleLag,
    /// Lag is above the threshold while the primary writes: hold.
    Engaged,
}

/// The outcome with every intermediate value, for `explain`, logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Decision {
    /// The count to publish (GetMetrics value = desired × target).
    pub desired: u32,
    /// What the load and bounds alone ask for (published in dry-run).
    pub recommended: u32,
    /// `1 + ceil(load / target)`.
    pub raw: u32,
    pub floor: u32,
    /// `max(maxReplicas, floor)`.
    pub ceiling: u32,
    pub brake: Brake,
    pub reason: Reason,
}

/// Decides the guarded instance count. Total: never panics, whatever the inputs.
pub fn decide(policy: &Policy, obs: &Observation) -> Decision {
    let quorum_floor = policy.quorum.saturating_add(1);
    let floor = policy.min_replicas.max(quorum_floor).max(2);
    let floor_reason = if quorum_floor > policy.min_replicas.max(2) {
        Reason::Quorum
    } else {
        Reason::Floor
    };
    let ceiling = policy.max_replicas.max(floor);

    let replicas_needed = if policy.target > 0.0 && obs.load.is_finite() && obs.load > 0.0 {
        // `as` saturates, so an absurd load caps at u32::MAX instead of wrapping.
        (obs.load / policy.target).ceil() as u32
    } else {
        0
    };
    let raw = replicas_needed.saturating_add(1);
    let (recommended, bound_reason) = if raw < floor {
        (floor, floor_reason)
    } else if raw > ceiling {
        // The ceiling exceeds maxReplicas only when the floor raised it: then the floor decided.
        let reason = if ceiling > policy.max_replicas {
            floor_reason
        } else {
            Reason::Max
        };
        (ceiling, reason)
    } else if floor > policy.max_replicas {
        // raw == floor == ceiling, and the quorum overrode maxReplicas.
        (raw, floor_reason)
    } else {
        (raw, Reason::Load)
    };

    let lag_high = obs
        .max_lag_seconds
        .is_some_and(|lag| lag > policy.max_lag_seconds);
    let brake = match (policy.max_lag_seconds > 0.0, lag_high, obs.primary_writing) {
        (false, _, _) => Brake::Off,
        (true, false, _) => Brake::Clear,
        (true, true, false) => Brake::IdleLag,
        (true, true, true) => Brake::Engaged,
    };
    let hold = obs.current.clamp(floor, ceiling);
    let (desired, reason) = if policy.dry_run {
        (hold, Reason::DryRun)
    } else if brake == Brake::Engaged {
        (hold, Reason::Brake)
    } else {
        (recommended, bound_reason)
    };
    Decision {
        desired,
        recommended,
        raw,
        floor,
        ceiling,
        brake,
        reason,
    }
}

impl Decision {
    /// One sentence for logs and `explain`.
    pub fn summary(&self, policy: &Policy, obs: &Observation) -> String {
        let load = format!(
            "load {} / target {} needs 1 primary + {} replicas = {}",
            obs.load,
            policy.target,
            self.raw.saturating_sub(1),
            self.raw
        );
        match self.reason {
            Reason::Load => format!("{load}; within [{}, {}]", self.floor, self.ceiling),
            Reason::Floor => format!(
                "{load}; raised to the floor {} (max of minReplicas {} and 2)",
                self.floor, policy.min_replicas
            ),
            Reason::Quorum if self.floor > policy.max_replicas => format!(
                "{load}; the synchronous quorum {} needs at least {} instances, which wins over maxReplicas {}",
                policy.quorum, self.floor, policy.max_replicas
            ),
            Reason::Quorum => format!(
                "{load}; raised to the synchronous quorum {} + 1 = {}",
                policy.quorum, self.floor
            ),
            Reason::Max => format!("{load}; capped at maxReplicas {}", policy.max_replicas),
            Reason::Brake => format!(
                "lag brake: replica lag {:?}s > {}s while the primary writes WAL; holding {} (recommended {})",
                obs.max_lag_seconds.unwrap_or_default(),
                policy.max_lag_seconds,
                self.desired,
                self.recommended
            ),
            Reason::DryRun => format!(
                "dry run: holding {} instances; recommended {} ({load})",
                self.desired, self.recommended
            ),
        }
    }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
