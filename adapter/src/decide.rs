//! What one sync does for one adapter, given what was read: write the target or not, and the
//! status to report. Pure (no clock, no I/O): the controller reads, calls [`decide`], acts.
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::path::{COUNTS, ReadError};

/// Why the target could not be read, or the adapter cannot act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The spec itself is unusable (a bad replicasPath or targetRef): fix the ScaleAdapter.
    InvalidSpec(String),
    /// Another adapter (named) already drives the same target.
    Conflict(String),
    /// The target object does not exist.
    TargetMissing,
    /// The target changed, or was deleted and created again, between its read and the write.
    TargetChanged,
    /// The target kind is not served by the API server.
    KindUnknown(String),
    /// The path is absent or holds no count.
    Read(ReadError),
    /// The target is of a kind the adapter knows, and says something its operator refuses
    /// (a RedisFailover's unknown `spec.engine`): the message names the field.
    TargetRefused(String),
    /// The API server refused the adapter's service account.
    Forbidden(String),
    /// Any other API failure (timeouts, 5xx): retried on the next sync.
    Api(String),
}

impl Blocked {
    pub fn reason(&self) -> &'static str {
        match self {
            Blocked::InvalidSpec(_) => "InvalidSpec",
            Blocked::Conflict(_) => "Conflict",
            Blocked::TargetMissing => "TargetMissing",
            Blocked::TargetChanged => "TargetChanged",
            Blocked::KindUnknown(_) => "KindUnknown",
            Blocked::Read(ReadError::Missing(_)) => "PathMissing",
            Blocked::Read(ReadError::NotANumber { .. }) => "NotANumber",
            Blocked::TargetRefused(_) => "TargetRefused",
            Blocked::Forbidden(_) => "Forbidden",
            Blocked::Api(_) => "ApiError",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Blocked::InvalidSpec(m) => m.clone(),
            Blocked::Conflict(other) => format!(
                "the ScaleAdapter {other} already drives this target; delete one of the two"
            ),
            Blocked::TargetMissing => "the target does not exist in this namespace".into(),
            Blocked::TargetChanged => "the target changed (or was deleted and created again) between its read and the write: nothing was written; the next sync reads it again".into(),
            Blocked::KindUnknown(m) => m.clone(),
            Blocked::Read(e) => e.to_string(),
            Blocked::TargetRefused(m) => m.clone(),
            Blocked::Forbidden(m) => format!(
                "{m}; list the target's group and resource in the chart's scaleAdapter.targets"
            ),
            Blocked::Api(m) => m.clone(),
        }
    }
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone)]
pub struct Input {
    /// `spec.replicas`; `None` until the HPA or a user sets it.
    pub desired: Option<i32>,
    pub paused: bool,
    /// The target's current count, or why there is none.
    pub current: Result<i32, Blocked>,
    /// When this adapter last wrote the target.
    pub last_write: Option<Timestamp>,
    pub now: Timestamp,
    /// Least time between two writes to one target.
    pub min_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Patch this count into the target.
    Write(i32),
}

/// The `Synced` condition's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub synced: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    /// `status.replicas`: the target's count when it could be read.
    pub replicas: Option<i32>,
    pub verdict: Verdict,
}

pub fn decide(input: &Input) -> Decision {
    let current = match &input.current {
        Ok(current) => *current,
        Err(blocked) => {
            return Decision {
                action: Action::Nothing,
                replicas: None,
                verdict: Verdict {
                    synced: false,
                    reason: blocked.reason(),
                    message: blocked.message(),
                },
            };
        }
    };
    let hold = |synced, reason, message| Decision {
        action: Action::Nothing,
        replicas: Some(current),
        verdict: Verdict {
            synced,
            reason,
            message,
        },
    };
    let Some(desired) = input.desired else {
        return hold(
            true,
            "NoDesiredCount",
            format!("spec.replicas is unset; the target has {current}"),
        );
    };
    if desired == current {
        return hold(true, "Synced", format!("the target has {current}"));
    }
    // The API server's schema (minimum 0) refuses a negative count today; the adapter does
    // not rely on it: a count it cannot stand behind is never written.
    if !COUNTS.contains(&desired) {
        return hold(
            false,
            "InvalidCount",
            format!(
                "spec.replicas {desired} is outside {}..={}: not written; set a count in range (the target keeps {current})",
                COUNTS.start(),
                COUNTS.end()
            ),
        );
    }
    if input.paused {
        return hold(
            false,
            "Paused",
            format!("paused: the target keeps {current}, spec.replicas {desired} is not written"),
        );
    }
    if let Some(last) = input.last_write {
        let since = input.now.duration_since(last);
        let interval = k8s_openapi::jiff::SignedDuration::try_from(input.min_interval)
            .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
        // A last write in the future (another replica's clock ahead) paces too.
        if since < interval {
            return hold(
                false,
                "Paced",
                format!(
                    "the target has {current}; {desired} is written once {}s have passed since the last write",
                    input.min_interval.as_secs()
                ),
            );
        }
    }
    Decision {
        action: Action::Write(desired),
        replicas: Some(current),
        verdict: Verdict {
            synced: false,
            reason: "Writing",
            message: format!("writing {desired} over {current}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(30);

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn input(desired: Option<i32>, paused: bool, current: Result<i32, Blocked>) -> Input {
        Input {
            desired,
            paused,
            current,
            last_write: None,
            now: t(100),
            min_interval: MIN,
        }
    }

    #[test]
    fn writes_only_a_different_count() {
        let d = decide(&input(Some(4), false, Ok(2)));
        assert_eq!(d.action, Action::Write(4));
        assert_eq!(d.replicas, Some(2));
        let d = decide(&input(Some(2), false, Ok(2)));
        assert_eq!(d.action, Action::Nothing);
        assert_eq!((d.verdict.synced, d.verdict.reason), (true, "Synced"));
        // Down to zero is a count like any other (the HPA's minReplicas decides).
        assert_eq!(
            decide(&input(Some(0), false, Ok(3))).action,
            Action::Write(0)
        );
    }

    #[test]
    fn a_count_out_of_range_is_never_written_and_named() {
        for desired in [-1, -5, i32::MIN] {
            for paused in [false, true] {
                let d = decide(&input(Some(desired), paused, Ok(2)));
                assert_eq!(d.action, Action::Nothing, "{desired}");
                assert_eq!(d.replicas, Some(2));
                assert_eq!(
                    (d.verdict.synced, d.verdict.reason),
                    (false, "InvalidCount")
                );
                assert!(
                    d.verdict
                        .message
                        .contains(&format!("spec.replicas {desired} ")),
                    "{}",
                    d.verdict.message
                );
            }
        }
        assert_eq!(
            decide(&input(Some(i32::MAX), false, Ok(2))).action,
            Action::Write(i32::MAX)
        );
    }

    #[test]
    fn no_desired_count_writes_nothing_and_reports_the_target() {
        let d = decide(&input(None, false, Ok(3)));
        assert_eq!(d.action, Action::Nothing);
        assert_eq!(d.replicas, Some(3));
        assert_eq!(
            (d.verdict.synced, d.verdict.reason),
            (true, "NoDesiredCount")
        );
    }

    #[test]
    fn paused_never_writes() {
        for (desired, current) in [(Some(4), 2), (Some(0), 2), (None, 2), (Some(2), 2)] {
            let mut i = input(desired, true, Ok(current));
            for last in [None, Some(t(0)), Some(t(99))] {
                i.last_write = last;
                assert_eq!(decide(&i).action, Action::Nothing, "{i:?}");
            }
        }
        let d = decide(&input(Some(4), true, Ok(2)));
        assert_eq!((d.verdict.synced, d.verdict.reason), (false, "Paused"));
        assert_eq!(d.replicas, Some(2));
    }

    #[test]
    fn writes_are_paced_per_target() {
        let mut i = input(Some(4), false, Ok(2));
        for (last, writes) in [
            (t(100), false), // just written
            (t(71), false),  // 29 s ago
            (t(70), true),   // exactly the interval
            (t(0), true),
            (t(160), false), // a clock ahead of ours: still paced
        ] {
            i.last_write = Some(last);
            let d = decide(&i);
            assert_eq!(d.action == Action::Write(4), writes, "{last}");
            if !writes {
                assert_eq!(d.verdict.reason, "Paced");
            }
        }
        // Pacing never blocks the "already there" case.
        i.current = Ok(4);
        i.last_write = Some(t(100));
        assert_eq!(decide(&i).verdict.reason, "Synced");
    }

    #[test]
    fn a_blocked_target_is_never_written_and_says_why() {
        for (blocked, reason) in [
            (Blocked::InvalidSpec("bad path".into()), "InvalidSpec"),
            (Blocked::Conflict("other".into()), "Conflict"),
            (Blocked::TargetMissing, "TargetMissing"),
            (Blocked::TargetChanged, "TargetChanged"),
            (Blocked::KindUnknown("no kind".into()), "KindUnknown"),
            (
                Blocked::Read(ReadError::Missing("/spec/redis".into())),
                "PathMissing",
            ),
            (
                Blocked::Read(ReadError::NotANumber {
                    path: "/spec/replicas".into(),
                    found: "the string \"x\"".into(),
                }),
                "NotANumber",
            ),
            (
                Blocked::TargetRefused("spec.engine".into()),
                "TargetRefused",
            ),
            (Blocked::Forbidden("403".into()), "Forbidden"),
            (Blocked::Api("timeout".into()), "ApiError"),
        ] {
            for paused in [false, true] {
                let d = decide(&input(Some(4), paused, Err(blocked.clone())));
                assert_eq!(d.action, Action::Nothing);
                assert_eq!(d.replicas, None, "no made-up count");
                assert_eq!((d.verdict.synced, d.verdict.reason), (false, reason));
                assert!(!d.verdict.message.is_empty());
            }
        }
        let forbidden = Blocked::Forbidden("cannot patch".into()).message();
        assert!(forbidden.contains("scaleAdapter.targets"), "{forbidden}");
    }

    proptest::proptest! {
        /// Whatever the inputs, a write happens only when not paused, the count is known and
        /// differs, and the interval has passed; and it writes spec.replicas.
        #[test]
        fn writes_only_when_allowed(
            desired in proptest::option::of(-3..10i32),
            paused: bool,
            current in proptest::option::of(0..10i32),
            last in proptest::option::of(-100..200i64),
        ) {
            let i = Input {
                desired,
                paused,
                current: current.ok_or(Blocked::TargetMissing),
                last_write: last.map(t),
                now: t(100),
                min_interval: MIN,
            };
            let d = decide(&i);
            let allowed = !paused
                && current.is_some()
                && desired.is_some_and(|d| d >= 0)
                && desired != current
                && last.is_none_or(|l| 100 - l >= 30);
            proptest::prop_assert_eq!(matches!(d.action, Action::Write(_)), allowed);
            if let Action::Write(n) = d.action {
                proptest::prop_assert_eq!(Some(n), desired);
            }
            proptest::prop_assert_eq!(d.replicas, current);
        }
    }
}
