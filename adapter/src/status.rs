//! The status a decision reports (pure): `lastTransitionTime` moves only when the condition's
//! status flips, so an unchanged status is equal to the one stored and is not rewritten.
use k8s_openapi::jiff::Timestamp;

use crate::crd::{Condition, ScaleAdapterStatus};
use crate::decide::Verdict;

pub const SYNCED: &str = "Synced";

pub struct Report<'a> {
    pub previous: Option<&'a ScaleAdapterStatus>,
    pub generation: Option<i64>,
    pub replicas: Option<i32>,
    /// `spec.selector`, else the known pod labels of the target kind; `None` when the spec
    /// cannot be read or is invalid.
    pub selector: Option<&'a str>,
    pub verdict: &'a Verdict,
    pub last_write: Option<Timestamp>,
    pub now: Timestamp,
}

pub fn status(r: &Report) -> ScaleAdapterStatus {
    let status = if r.verdict.synced { "True" } else { "False" };
    let before = r
        .previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == SYNCED));
    let last_transition_time = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => r.now.to_string(),
    };
    ScaleAdapterStatus {
        replicas: r.replicas,
        selector: r.selector.map(str::to_owned),
        observed_generation: r.generation,
        last_write_time: r.last_write.map(|t| t.to_string()),
        conditions: vec![Condition {
            type_: SYNCED.into(),
            status: status.into(),
            reason: r.verdict.reason.into(),
            message: r.verdict.message.clone(),
            last_transition_time,
            observed_generation: r.generation,
        }],
    }
}

/// The stored `lastWriteTime`, when it parses.
pub fn last_write(status: Option<&ScaleAdapterStatus>) -> Option<Timestamp> {
    status?.last_write_time.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(synced: bool, reason: &'static str) -> Verdict {
        Verdict {
            synced,
            reason,
            message: reason.to_lowercase(),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn report<'a>(
        previous: Option<&'a ScaleAdapterStatus>,
        v: &'a Verdict,
        now: i64,
    ) -> Report<'a> {
        Report {
            previous,
            generation: Some(3),
            replicas: Some(2),
            selector: Some("app=x"),
            verdict: v,
            last_write: Some(at(0)),
            now: at(now),
        }
    }

    #[test]
    fn transition_time_moves_only_on_a_flip() {
        let synced = verdict(true, "Synced");
        let first = status(&report(None, &synced, 10));
        assert_eq!(first.conditions[0].last_transition_time, at(10).to_string());
        // Same status later: equal to the stored one, so nothing is rewritten.
        assert_eq!(status(&report(Some(&first), &synced, 20)), first);
        // Another reason with the same status keeps the time.
        let other = status(&report(Some(&first), &verdict(true, "NoDesiredCount"), 30));
        assert_eq!(other.conditions[0].last_transition_time, at(10).to_string());
        let paced = status(&report(Some(&first), &verdict(false, "Paced"), 40));
        assert_eq!(paced.conditions[0].last_transition_time, at(40).to_string());
        assert_eq!(paced.conditions[0].status, "False");
        assert_eq!(last_write(Some(&paced)), Some(at(0)));
        assert_eq!(paced.selector.as_deref(), Some("app=x"));
        assert_eq!(paced.observed_generation, Some(3));
    }

    #[test]
    fn an_unparsable_last_write_is_none() {
        let s = ScaleAdapterStatus {
            last_write_time: Some("yesterday".into()),
            ..ScaleAdapterStatus::default()
        };
        assert_eq!(last_write(Some(&s)), None);
        assert_eq!(last_write(None), None);
    }
}
