use proptest::prelude::*;

use super::*;
use crate::metadata::parse;

fn replay(behavior: Option<Behavior>) -> Replay {
    replay_with(behavior, &[])
}

/// Target 10, minReplicas 2, maxReplicas 10, and `extra` trigger metadata.
fn replay_with(behavior: Option<Behavior>, extra: &[(&str, &str)]) -> Replay {
    let md: HashMap<String, String> = [
        ("target", "10"),
        ("minReplicas", "2"),
        ("maxReplicas", "10"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let spec = HpaSpec {
        min_replicas: 2,
        max_replicas: 10,
        behavior,
        sync_period_seconds: 15,
    };
    Replay::new("ns", parse("pg", &md).unwrap(), spec)
}

fn parts(instances: f64, load: f64) -> HashMap<String, f64> {
    [("instances", instances), ("load", load)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
}

/// Load 50 (6 instances at target 10) from 600 s to 1200 s, else none; 2 instances observed.
fn step_load(t: i64) -> f64 {
    if (600..1200).contains(&t) { 50.0 } else { 0.0 }
}

#[test]
fn a_load_step_scales_up_at_once_and_down_after_the_window() {
    let mut r = replay(Some(Behavior::default()));
    let rows: Vec<Row> = (0..=1800)
        .step_by(15)
        .map(|t| r.step(t, &parts(2.0, step_load(t))))
        .collect();
    for row in &rows {
        let high = (600..1200).contains(&row.time);
        assert_eq!(row.recommended, Some(if high { 6 } else { 2 }), "{row:?}");
        assert_eq!(
            row.reason,
            Some(if high { Reason::Load } else { Reason::Floor })
        );
        // The last proposal of 6 is at 1185 s; the 300 s scale-down window ends at 1485 s.
        let simulated = if (600..1485).contains(&row.time) {
            6
        } else {
            2
        };
        assert_eq!(row.simulated, simulated, "{row:?}");
        assert_eq!(row.observed, Some(2));
    }
}

#[test]
fn syncs_between_coarse_steps_use_the_latest_answer() {
    // 60 s steps: the syncs at +15, +30, +45 act on the answer of the step before.
    let mut r = replay(Some(Behavior::default()));
    let mut at = |t: i64, load: f64| r.step(t, &parts(2.0, load)).simulated;
    assert_eq!(at(0, 0.0), 2);
    // 100 load wants 11, capped at 10 by maxReplicas: 2 → 6 at once, then 6 → 10 at +15 s.
    assert_eq!(at(60, 100.0), 6);
    assert_eq!(at(120, 100.0), 10);
}

#[test]
fn gaps_and_scaler_errors_hold_the_simulated_count() {
    let mut r = replay(Some(Behavior::default()));
    assert_eq!(r.step(0, &parts(3.0, 40.0)).simulated, 5);
    let gap = r.step(15, &HashMap::new());
    assert_eq!(
        (gap.recommended, gap.observed, gap.simulated),
        (None, None, 5)
    );
    assert!(
        gap.error.unwrap().contains("no instance"),
        "the error names the cause"
    );
    assert_eq!(
        r.step(1800, &HashMap::new()).simulated,
        5,
        "held through the gap"
    );
    // Failed syncs recorded no proposal: the window holds nothing above 2 any more.
    let row = r.step(1815, &parts(3.0, 0.0));
    assert_eq!((row.recommended, row.simulated), (Some(2), 2));
}

#[test]
fn the_hpa_starts_from_the_first_observed_count() {
    let mut r = replay(Some(Behavior::default()));
    let row = r.step(0, &parts(4.0, 0.0));
    // Observed 4, the scaler wants 2: the new HPA's scale-down window holds 4.
    assert_eq!((row.recommended, row.simulated), (Some(2), 4));
}

/// The lag brake's history: 3 instances observed all along, load 50 (6 instances at target 10);
/// from 600 s to 2400 s a replica lags 120 s while the primary writes.
fn brake_history(t: i64) -> HashMap<String, f64> {
    let mut p = parts(3.0, 50.0);
    p.insert("wal".into(), 1000.0);
    p.insert(
        "lag".into(),
        if (600..2400).contains(&t) { 120.0 } else { 0.0 },
    );
    p
}

/// Issue 44: the brake held the observed 3, so the simulated HPA, grown to 6, fell to 3 in the
/// middle of the load once its scale-down window passed: a scale-down the brake exists to
/// prevent. It holds the simulated count: no drop, however long the brake.
#[test]
fn the_brake_holds_the_simulated_count_not_the_observed_one() {
    let mut r = replay_with(
        Some(Behavior::default()),
        &[("maxReplicationLagSeconds", "30")],
    );
    let rows: Vec<Row> = (0..=3000)
        .step_by(15)
        .map(|t| r.step(t, &brake_history(t)))
        .collect();
    let braked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.reason == Some(Reason::Brake))
        .collect();
    assert_eq!(braked.len(), (2400 - 600) / 15, "{braked:?}");
    for row in &rows {
        assert_eq!((row.simulated, row.observed), (6, Some(3)), "{row:?}");
    }
    for row in braked {
        assert_eq!(row.recommended, Some(6), "the brake holds 6: {row:?}");
    }
}

/// The tune's view of the same history: the brake no longer charges its minutes to every
/// setting. Each setting is overloaded exactly as much as on the history without the lag (the
/// load is constant, so the brake holds what the setting already had).
#[test]
fn a_sweep_over_a_brake_is_overloaded_as_without_it() {
    let tally = |target: &str, lag: bool| {
        let mut r = replay_with(
            Some(Behavior::default()),
            &[("maxReplicationLagSeconds", "30"), ("target", target)],
        );
        let mut tally = Tally::default();
        for t in (0..=3000).step_by(15) {
            let mut p = brake_history(t);
            if !lag {
                p.insert("lag".into(), 0.0);
            }
            tally.add(&r.step(t, &p), 10.0);
        }
        tally
    };
    let overloaded: Vec<(u64, u64)> = ["5", "10", "20"]
        .iter()
        .map(|target| {
            (
                tally(target, true).overloaded,
                tally(target, false).overloaded,
            )
        })
        .collect();
    // Target 20 has 4 instances, 16.7 per read replica: overloaded all along, brake or not.
    assert_eq!(overloaded, [(0, 0), (0, 0), (201, 201)]);
}

/// Dry-run holds the simulated HPA's count whatever history's count did (scaled by hand from
/// 6 to 3, then to 8): dry-run never moves the simulated count.
#[test]
fn dry_run_holds_the_simulated_count_whatever_was_observed() {
    let mut r = replay_with(Some(Behavior::default()), &[("dryRun", "true")]);
    for t in (0..=1800).step_by(15) {
        let observed = match t {
            0 => 6.0,
            1..900 => 3.0,
            _ => 8.0,
        };
        let row = r.step(t, &parts(observed, 20.0));
        assert_eq!(
            (row.recommended, row.reason, row.simulated),
            (Some(6), Some(Reason::DryRun), 6),
            "{row:?}"
        );
    }
}

/// `scaleIn: disabled` keeps the simulated count the load raised, not the observed 3.
#[test]
fn the_scale_in_hold_keeps_the_simulated_count() {
    let mut r = replay_with(Some(Behavior::default()), &[("scaleIn", "disabled")]);
    for t in (0..=1800).step_by(15) {
        let row = r.step(t, &parts(3.0, step_load(t)));
        // The new HPA starts at the observed 3, which the hold keeps until the load asks for 6.
        let simulated = if t < 600 { 3 } else { 6 };
        assert_eq!(row.simulated, simulated, "{row:?}");
        if t >= 1200 {
            assert_eq!(
                (row.recommended, row.reason),
                (Some(6), Some(Reason::ScaleInHold))
            );
        }
    }
}

proptest! {
    /// Whatever the history, the simulated count stays within the HPA's bounds and between the
    /// starting count and the scaler's answers: the HPA never invents a count.
    #[test]
    fn simulated_counts_stay_in_bounds_and_follow_the_answers(
        steps in proptest::collection::vec((0u32..12, 0.0f64..200.0, any::<bool>()), 1..150),
        step in 15i64..120,
    ) {
        let mut r = replay(Some(Behavior::default()));
        let mut seen: Vec<u32> = Vec::new();
        for (i, (instances, load, gap)) in steps.into_iter().enumerate() {
            let p = if gap { HashMap::new() } else { parts(f64::from(instances), load) };
            let row = r.step(step * i as i64, &p);
            if i == 0 {
                seen.push(row.simulated);
            }
            prop_assert!((2..=10).contains(&row.simulated), "{row:?}");
            let (low, high) = (*seen.iter().min().unwrap(), *seen.iter().max().unwrap());
            prop_assert!((low..=high).contains(&row.simulated) || row.recommended.is_some(),
                "{} outside the answers {seen:?}", row.simulated);
            seen.extend(row.recommended);
            let (low, high) = (*seen.iter().min().unwrap(), *seen.iter().max().unwrap());
            prop_assert!((low..=high).contains(&row.simulated), "{} outside {seen:?}", row.simulated);
        }
    }
}

#[test]
fn the_tally_counts_events_instance_steps_and_overload_on_the_simulated_count() {
    let row = |simulated, load: Option<f64>| Row {
        time: 0,
        load,
        recommended: None,
        reason: None,
        simulated,
        observed: Some(3),
        error: load.is_none().then(|| "gap".to_owned()),
    };
    let mut tally = Tally::default();
    // 2 instances = 1 read replica: 60 > 50 is overloaded; 3 instances carry 60 at 30 each.
    for r in [
        row(2, Some(60.0)),
        row(2, Some(40.0)),
        row(3, Some(60.0)),
        row(3, None),
        row(1, Some(1.0)),
    ] {
        tally.add(&r, 50.0);
    }
    assert_eq!(
        (
            tally.evaluations,
            tally.errors,
            tally.scale_events,
            tally.simulated_steps,
            tally.observed_steps,
            tally.overloaded
        ),
        (5, 1, 2, 11, 15, 2)
    );
    assert!(!overloaded(50.0, 2, 50.0) && overloaded(50.1, 2, 50.0));
    assert!(!overloaded(0.0, 1, 50.0));
}
