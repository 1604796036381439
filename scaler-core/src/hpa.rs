//! A simulation of the Kubernetes HorizontalPodAutoscaler as KEDA configures it for our trigger:
//! one External metric with an `AverageValue` target, and the ScaledObject's
//! `advanced.horizontalPodAutoscalerConfig.behavior`. Pure: time is a number of seconds.
//!
//! One [`Hpa::sync`] is one pass of the HPA controller (kube-controller-manager's
//! `reconcileAutoscaler`, every `--horizontal-pod-autoscaler-sync-period`, 15 s by default):
//! 1. current outside `[min, max]`: go straight to the bound, nothing else;
//! 2. the metric: KEDA serves `desired × target` and the HPA's target is `target` per pod, so
//!    `usage ratio = desired / current`; within the tolerance
//!    (`1 − down ≤ ratio ≤ 1 + up`) the proposal is the current count, else `desired`;
//! 3. stabilization: the count moves from current at most to the lowest proposal of the scale-up
//!    window and the highest of the scale-down window (both include this one);
//! 4. rate: the policies of the direction bound the change, counted from the count at the start
//!    of each policy's period (`selectPolicy` Max takes the policy allowing the larger change, Min
//!    the smaller, Disabled forbids the direction), and `[min, max]` bound it.
//!
//! An HPA without `behavior` (a ScaledObject without `advanced.horizontalPodAutoscalerConfig.behavior`:
//! KEDA then sets none, and the API server defaults none) takes the controller's older fixed rules
//! instead of 3 and 4: the count goes to the highest proposal of the last 300 s
//! (`--horizontal-pod-autoscaler-downscale-stabilization`), at most `max(2 × current, 4)`, within
//! `[min, max]`, with the default tolerance.
//!
//! Not simulated: pod readiness and missing pods (they only matter for Resource and Pods metrics),
//! the controller's own restarts (which forget the windows), and KEDA's fallback replicas.
use std::collections::VecDeque;

use serde::{Deserialize, Deserializer, Serialize};

use crate::quantity::Quantity;

/// The controller's `--horizontal-pod-autoscaler-tolerance` default, for a direction without its
/// own `tolerance`.
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// Longest stabilization window the API accepts (one hour).
pub const MAX_WINDOW_SECONDS: u32 = 3600;
/// Longest policy period the API accepts (30 minutes).
pub const MAX_PERIOD_SECONDS: u32 = 1800;
/// The controller's `--horizontal-pod-autoscaler-downscale-stabilization` default, the window of
/// an HPA without `behavior`.
pub const LEGACY_WINDOW_SECONDS: u32 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum PolicyType {
    /// Change by at most `value` pods per period.
    Pods,
    /// Change by at most `value` percent of the count at the period's start.
    Percent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingPolicy {
    #[serde(rename = "type")]
    pub kind: PolicyType,
    pub value: u32,
    pub period_seconds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum SelectPolicy {
    /// The policy that allows the largest change.
    #[default]
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// `behavior.scaleUp` / `behavior.scaleDown` as written; absent fields take Kubernetes' defaults.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RulesSpec {
    pub stabilization_window_seconds: Option<u32>,
    pub select_policy: Option<SelectPolicy>,
    pub policies: Option<Vec<ScalingPolicy>>,
    /// A Kubernetes quantity: `"0.05"`, `"50m"`, `"5e-2"` or a bare number.
    #[serde(default, deserialize_with = "quantity")]
    pub tolerance: Option<f64>,
}

/// `spec.advanced.horizontalPodAutoscalerConfig.behavior` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BehaviorSpec {
    pub scale_up: Option<RulesSpec>,
    pub scale_down: Option<RulesSpec>,
}

/// One direction's rules with every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rules {
    pub stabilization_window_seconds: u32,
    pub select_policy: SelectPolicy,
    pub policies: Vec<ScalingPolicy>,
    pub tolerance: f64,
}

/// Both directions, defaulted and validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Behavior {
    pub scale_up: Rules,
    pub scale_down: Rules,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("behavior.{field}: {problem}")]
pub struct BehaviorError {
    pub field: String,
    pub problem: String,
}

impl BehaviorSpec {
    /// Kubernetes' defaults (scale up: no window, +4 pods or +100 % per 15 s, the larger; scale
    /// down: 300 s window, −100 % per 15 s) and its validation limits.
    pub fn resolve(&self) -> Result<Behavior, BehaviorError> {
        let up_policies = [
            policy(PolicyType::Pods, 4, 15),
            policy(PolicyType::Percent, 100, 15),
        ];
        let down_policies = [policy(PolicyType::Percent, 100, 15)];
        Ok(Behavior {
            scale_up: resolve_rules("scaleUp", self.scale_up.as_ref(), 0, &up_policies)?,
            scale_down: resolve_rules("scaleDown", self.scale_down.as_ref(), 300, &down_policies)?,
        })
    }
}

impl Default for Behavior {
    fn default() -> Self {
        BehaviorSpec::default()
            .resolve()
            .expect("the defaults are valid")
    }
}

fn policy(kind: PolicyType, value: u32, period_seconds: u32) -> ScalingPolicy {
    ScalingPolicy {
        kind,
        value,
        period_seconds,
    }
}

fn resolve_rules(
    direction: &str,
    spec: Option<&RulesSpec>,
    default_window: u32,
    default_policies: &[ScalingPolicy],
) -> Result<Rules, BehaviorError> {
    let spec = spec.cloned().unwrap_or_default();
    let error = |field: String, problem: String| BehaviorError {
        field: format!("{direction}.{field}"),
        problem,
    };
    let window = spec.stabilization_window_seconds.unwrap_or(default_window);
    if window > MAX_WINDOW_SECONDS {
        return Err(error(
            "stabilizationWindowSeconds".into(),
            format!(
                "{window} is above {MAX_WINDOW_SECONDS}: use 0 to {MAX_WINDOW_SECONDS} seconds"
            ),
        ));
    }
    let policies = match spec.policies {
        Some(p) if !p.is_empty() => p,
        _ => default_policies.to_vec(),
    };
    for (i, p) in policies.iter().enumerate() {
        if p.value == 0 {
            return Err(error(
                format!("policies[{i}].value"),
                "0: use a number of pods or percent above 0".into(),
            ));
        }
        if !(1..=MAX_PERIOD_SECONDS).contains(&p.period_seconds) {
            return Err(error(
                format!("policies[{i}].periodSeconds"),
                format!(
                    "{}: use 1 to {MAX_PERIOD_SECONDS} seconds",
                    p.period_seconds
                ),
            ));
        }
    }
    let tolerance = spec.tolerance.unwrap_or(DEFAULT_TOLERANCE);
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(error(
            "tolerance".into(),
            format!("{tolerance}: use a fraction >= 0, e.g. \"0.05\" or \"50m\""),
        ));
    }
    Ok(Rules {
        stabilization_window_seconds: window,
        select_policy: spec.select_policy.unwrap_or_default(),
        policies,
        tolerance,
    })
}

/// A Kubernetes quantity as a fraction: a JSON number, or any quantity text (`"0.05"`, `"50m"`,
/// `"5e-2"`), parsed by [`crate::quantity`].
fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    let Some(raw) = Option::<Raw>::deserialize(d)? else {
        return Ok(None);
    };
    let value = match raw {
        Raw::Number(n) => n,
        Raw::Text(text) => Quantity::parse(&text)
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "tolerance {:?} is not a quantity: use e.g. \"0.05\" or \"50m\"",
                    names::echo(&text)
                ))
            })?
            .as_f64(),
    };
    Ok(Some(value))
}

/// What one sync did, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sync {
    /// The count the HPA set (unchanged when it did not scale).
    pub replicas: u32,
    /// The count the metric alone asked for, after the tolerance; `None` without a metric.
    pub proposal: Option<u32>,
}

/// The HPA's memory for one ScaledObject: its count, past proposals and past scale events.
#[derive(Debug, Clone)]
pub struct Hpa {
    /// `None`: the HPA has no `behavior`, the controller's fixed rules apply.
    behavior: Option<Behavior>,
    min: u32,
    max: u32,
    replicas: u32,
    /// (time, proposal), oldest first; only those inside a stabilization window are kept.
    proposals: VecDeque<(i64, u32)>,
    /// (time, pods added) and (time, pods removed); only those inside a policy period are kept.
    ups: VecDeque<(i64, u32)>,
    downs: VecDeque<(i64, u32)>,
}

impl Hpa {
    /// An HPA created at `now` over a target with `replicas`; `min ≥ 1` (KEDA turns a
    /// `minReplicaCount` of 0 into an HPA minimum of 1) and `min ≤ max`.
    pub fn new(behavior: Option<Behavior>, min: u32, max: u32, replicas: u32, now: i64) -> Self {
        let min = min.max(1);
        Self {
            behavior,
            min,
            max: max.max(min),
            replicas,
            // Like the controller, a new HPA starts its scale-down window with the current count,
            // so it does not scale down at once after a restart.
            proposals: VecDeque::from([(now, replicas)]),
            ups: VecDeque::new(),
            downs: VecDeque::new(),
        }
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// One controller pass at `now` (never earlier than the previous one) with the scaler's
    /// desired count, or `None` when the metric failed (the HPA then keeps the count).
    pub fn sync(&mut self, now: i64, desired: Option<u32>) -> Sync {
        let current = self.replicas;
        let (next, proposal) = if current > self.max {
            (self.max, None)
        } else if current < self.min {
            (self.min, None)
        } else if let Some(desired) = desired {
            let proposal = self.tolerate(current, desired);
            let next = if self.behavior.is_some() {
                let stabilized = self.stabilize(now, current, proposal);
                self.limit_rate(now, current, stabilized)
            } else {
                let stabilized = self.stabilize_legacy(now, proposal);
                // At most doubling (and at least 4), within [min, max].
                let up_limit = current.saturating_mul(2).max(4);
                stabilized.min(self.max.min(up_limit)).max(self.min)
            };
            (next, Some(proposal))
        } else {
            (current, None)
        };
        self.forget(now);
        if next > current {
            self.ups.push_back((now, next - current));
        } else if next < current {
            self.downs.push_back((now, current - next));
        }
        self.replicas = next;
        Sync {
            replicas: next,
            proposal,
        }
    }

    /// `usage / (target × current)` with `usage = desired × target`: the ratio is desired/current.
    fn tolerate(&self, current: u32, desired: u32) -> u32 {
        if current == 0 {
            return desired;
        }
        let ratio = f64::from(desired) / f64::from(current);
        let (up, down) = self
            .behavior
            .as_ref()
            .map_or((DEFAULT_TOLERANCE, DEFAULT_TOLERANCE), |b| {
                (b.scale_up.tolerance, b.scale_down.tolerance)
            });
        if (1.0 - down) <= ratio && ratio <= (1.0 + up) {
            current
        } else {
            desired
        }
    }

    /// The highest proposal of the last [`LEGACY_WINDOW_SECONDS`], its start included.
    fn stabilize_legacy(&mut self, now: i64, proposal: u32) -> u32 {
        let cutoff = now - i64::from(LEGACY_WINDOW_SECONDS);
        let highest = self
            .proposals
            .iter()
            .filter(|(at, _)| *at >= cutoff)
            .map(|(_, p)| *p)
            .fold(proposal, u32::max);
        self.proposals.push_back((now, proposal));
        highest
    }

    fn stabilize(&mut self, now: i64, current: u32, proposal: u32) -> u32 {
        let Some(b) = &self.behavior else {
            return proposal;
        };
        let up_cutoff = now - i64::from(b.scale_up.stabilization_window_seconds);
        let down_cutoff = now - i64::from(b.scale_down.stabilization_window_seconds);
        let (mut up, mut down) = (proposal, proposal);
        for &(at, p) in &self.proposals {
            if at > up_cutoff {
                up = up.min(p);
            }
            if at > down_cutoff {
                down = down.max(p);
            }
        }
        self.proposals.push_back((now, proposal));
        current.max(up).min(down)
    }

    fn limit_rate(&self, now: i64, current: u32, stabilized: u32) -> u32 {
        let Some(b) = &self.behavior else {
            return stabilized;
        };
        if stabilized > current {
            let limit = self.limit(now, current, &b.scale_up, 1).max(current);
            stabilized.min(self.max.min(limit))
        } else if stabilized < current {
            let limit = self.limit(now, current, &b.scale_down, -1).min(current);
            stabilized.max(self.min.max(limit))
        } else {
            stabilized
        }
    }

    /// The furthest count the policies allow in `sign`'s direction (+1 up, −1 down).
    fn limit(&self, now: i64, current: u32, rules: &Rules, sign: i64) -> u32 {
        let proposals = rules.policies.iter().map(|p| {
            let since = now - i64::from(p.period_seconds);
            let changed = |events: &VecDeque<(i64, u32)>| -> i64 {
                events
                    .iter()
                    .filter(|(at, _)| *at > since)
                    .map(|(_, n)| i64::from(*n))
                    .sum()
            };
            let start = i64::from(current) - changed(&self.ups) + changed(&self.downs);
            let value = i64::from(p.value);
            match (p.kind, sign > 0) {
                (PolicyType::Pods, _) => start + sign * value,
                // In floating point like the controller (rounding included): up rounds up,
                // down truncates toward zero.
                (PolicyType::Percent, true) => {
                    (start as f64 * (1.0 + value as f64 / 100.0)).ceil() as i64
                }
                (PolicyType::Percent, false) => {
                    (start as f64 * (1.0 - value as f64 / 100.0)) as i64
                }
            }
        });
        let furthest = match (rules.select_policy, sign > 0) {
            (SelectPolicy::Disabled, _) => Some(i64::from(current)),
            (SelectPolicy::Max, true) | (SelectPolicy::Min, false) => proposals.max(),
            (SelectPolicy::Max, false) | (SelectPolicy::Min, true) => proposals.min(),
        };
        u32::try_from(furthest.unwrap_or(i64::from(current)).max(0)).unwrap_or(u32::MAX)
    }

    /// Drops proposals no window counts any more and events older than every period: this
    /// keeps the memory bounded (a window is at most an hour, a period 30 minutes).
    fn forget(&mut self, now: i64) {
        // The fixed rules count a proposal at the window's start; `behavior` only after it.
        let (window, period) = match &self.behavior {
            None => (i64::from(LEGACY_WINDOW_SECONDS) + 1, 0),
            Some(b) => (
                i64::from(
                    b.scale_up
                        .stabilization_window_seconds
                        .max(b.scale_down.stabilization_window_seconds),
                ),
                b.scale_up
                    .policies
                    .iter()
                    .chain(&b.scale_down.policies)
                    .map(|p| i64::from(p.period_seconds))
                    .max()
                    .unwrap_or(0),
            ),
        };
        while self
            .proposals
            .front()
            .is_some_and(|(at, _)| *at <= now - window)
        {
            self.proposals.pop_front();
        }
        for events in [&mut self.ups, &mut self.downs] {
            while events.front().is_some_and(|(at, _)| *at <= now - period) {
                events.pop_front();
            }
        }
    }
}

#[cfg(test)]
#[path = "hpa_tests.rs"]
mod tests;
