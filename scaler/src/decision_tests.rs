use proptest::prelude::*;

use super::*;

fn policy() -> Policy {
    Policy {
        target: 150.0,
        min_replicas: 2,
        max_replicas: 6,
        quorum: 0,
        max_lag_seconds: 0.0,
        dry_run: false,
    }
}

fn obs(current: u32, load: f64) -> Observation {
    Observation {
        current,
        load,
        max_lag_seconds: None,
        primary_writing: false,
    }
}

#[test]
fn load_sets_the_count_within_bounds() {
    // The design's worked example: target 150, 3 instances.
    for (load, want) in [(210.0, 3), (600.0, 5), (150.0, 2), (151.0, 3)] {
        let d = decide(&policy(), &obs(3, load));
        assert_eq!((d.desired, d.reason), (want, Reason::Load), "load {load}");
    }
}

#[test]
fn zero_load_is_raised_to_the_floor() {
    let d = decide(&policy(), &obs(3, 0.0));
    assert_eq!((d.raw, d.desired, d.reason), (1, 2, Reason::Floor));
    let d = decide(
        &Policy {
            min_replicas: 3,
            ..policy()
        },
        &obs(3, 60.0),
    );
    assert_eq!((d.raw, d.desired, d.reason), (2, 3, Reason::Floor));
}

#[test]
fn floor_is_at_least_two_even_with_min_zero() {
    let d = decide(
        &Policy {
            min_replicas: 0,
            max_replicas: 1,
            ..policy()
        },
        &obs(1, 0.0),
    );
    assert_eq!(
        (d.floor, d.ceiling, d.desired, d.reason),
        (2, 2, 2, Reason::Floor)
    );
    let d = decide(
        &Policy {
            min_replicas: 0,
            max_replicas: 1,
            ..policy()
        },
        &obs(1, 1e6),
    );
    assert_eq!((d.desired, d.reason), (2, Reason::Floor));
}

#[test]
fn high_load_is_capped_at_max() {
    let d = decide(&policy(), &obs(3, 10_000.0));
    assert_eq!((d.raw, d.desired, d.reason), (68, 6, Reason::Max));
}

#[test]
fn quorum_raises_the_floor() {
    let d = decide(
        &Policy {
            quorum: 3,
            ..policy()
        },
        &obs(4, 0.0),
    );
    assert_eq!((d.floor, d.desired, d.reason), (4, 4, Reason::Quorum));
    // Equal to minReplicas: the floor is minReplicas' doing, not the quorum's.
    let d = decide(
        &Policy {
            quorum: 1,
            ..policy()
        },
        &obs(2, 0.0),
    );
    assert_eq!((d.floor, d.reason), (2, Reason::Floor));
}

#[test]
fn quorum_wins_over_max_and_says_so() {
    let p = Policy {
        quorum: 6,
        max_replicas: 4,
        min_replicas: 2,
        ..policy()
    };
    for load in [0.0, 300.0, 1e6] {
        let d = decide(&p, &obs(7, load));
        assert_eq!(
            (d.floor, d.ceiling, d.desired, d.reason),
            (7, 7, 7, Reason::Quorum),
            "load {load}"
        );
        assert!(
            d.summary(&p, &obs(7, load))
                .contains("wins over maxReplicas 4")
        );
    }
}

#[test]
fn brake_holds_current_when_lagging_and_writing() {
    let p = Policy {
        max_lag_seconds: 30.0,
        ..policy()
    };
    let lagging = Observation {
        max_lag_seconds: Some(45.0),
        primary_writing: true,
        ..obs(4, 0.0)
    };
    let d = decide(&p, &lagging);
    assert_eq!(
        (d.desired, d.recommended, d.brake, d.reason),
        (4, 2, Brake::Engaged, Reason::Brake)
    );
    let d = decide(
        &p,
        &Observation {
            load: 10_000.0,
            ..lagging
        },
    );
    assert_eq!((d.desired, d.recommended, d.reason), (4, 6, Reason::Brake));
}

#[test]
fn lag_on_an_idle_primary_never_brakes() {
    let p = Policy {
        max_lag_seconds: 30.0,
        ..policy()
    };
    let d = decide(
        &p,
        &Observation {
            max_lag_seconds: Some(3600.0),
            primary_writing: false,
            ..obs(4, 0.0)
        },
    );
    assert_eq!(
        (d.desired, d.brake, d.reason),
        (2, Brake::IdleLag, Reason::Floor)
    );
}

#[test]
fn brake_needs_lag_strictly_above_a_nonzero_threshold() {
    let writing = |lag| Observation {
        max_lag_seconds: lag,
        primary_writing: true,
        ..obs(4, 0.0)
    };
    let p = Policy {
        max_lag_seconds: 30.0,
        ..policy()
    };
    assert_eq!(decide(&p, &writing(Some(30.0))).brake, Brake::Clear);
    assert_eq!(decide(&p, &writing(None)).brake, Brake::Clear);
    assert_eq!(decide(&policy(), &writing(Some(1e9))).brake, Brake::Off);
}

#[test]
fn held_count_stays_within_floor_and_ceiling() {
    let p = Policy {
        max_lag_seconds: 1.0,
        quorum: 2,
        ..policy()
    };
    let lagging = |current| Observation {
        max_lag_seconds: Some(9.0),
        primary_writing: true,
        ..obs(current, 0.0)
    };
    assert_eq!(decide(&p, &lagging(1)).desired, 3);
    assert_eq!(decide(&p, &lagging(9)).desired, 6);
}

#[test]
fn dry_run_holds_and_publishes_the_recommendation() {
    let p = Policy {
        dry_run: true,
        ..policy()
    };
    let d = decide(&p, &obs(3, 600.0));
    assert_eq!((d.desired, d.recommended, d.reason), (3, 5, Reason::DryRun));
    let d = decide(&p, &obs(1, 0.0));
    assert_eq!((d.desired, d.reason), (2, Reason::DryRun));
}

#[test]
fn garbage_load_counts_as_no_load_without_panicking() {
    for load in [f64::NAN, -5.0, f64::INFINITY] {
        let d = decide(&policy(), &obs(3, load));
        assert_eq!(d.raw, 1, "load {load}");
    }
    let d = decide(
        &Policy {
            max_replicas: 1000,
            ..policy()
        },
        &obs(3, f64::MAX),
    );
    assert_eq!(d.desired, 1000);
}

fn any_policy() -> impl Strategy<Value = Policy> {
    (
        0.001f64..1e6,
        0u32..50,
        1u32..50,
        0u32..60,
        prop_oneof![Just(0.0), 0.0f64..100.0],
        any::<bool>(),
    )
        .prop_map(|(target, min, max, quorum, lag, dry_run)| Policy {
            target,
            min_replicas: min.min(max),
            max_replicas: max,
            quorum,
            max_lag_seconds: lag,
            dry_run,
        })
}

fn any_obs() -> impl Strategy<Value = Observation> {
    (
        0u32..100,
        0.0f64..1e7,
        proptest::option::of(0.0f64..1e4),
        any::<bool>(),
    )
        .prop_map(|(current, load, lag, writing)| Observation {
            current,
            load,
            max_lag_seconds: lag,
            primary_writing: writing,
        })
}

proptest! {
    #[test]
    fn never_below_the_floor(p in any_policy(), o in any_obs()) {
        let d = decide(&p, &o);
        prop_assert!(d.desired >= p.min_replicas.max(p.quorum + 1).max(2));
    }

    #[test]
    fn never_above_max_or_floor(p in any_policy(), o in any_obs()) {
        let d = decide(&p, &o);
        prop_assert!(d.desired <= p.max_replicas.max(d.floor));
    }

    #[test]
    fn brake_never_changes_the_count(p in any_policy(), o in any_obs()) {
        let d = decide(&p, &o);
        if d.brake == Brake::Engaged {
            prop_assert_eq!(d.desired, o.current.clamp(d.floor, d.ceiling));
            if (d.floor..=d.ceiling).contains(&o.current) {
                prop_assert_eq!(d.desired, o.current);
            }
        }
    }

    #[test]
    fn idle_lag_never_brakes(p in any_policy(), o in any_obs()) {
        let idle = Observation { primary_writing: false, ..o };
        let d = decide(&p, &idle);
        prop_assert_ne!(d.reason, Reason::Brake);
        prop_assert_ne!(d.brake, Brake::Engaged);
    }

    #[test]
    fn more_load_never_means_fewer_instances(p in any_policy(), o in any_obs(), extra in 0.0f64..1e6) {
        let p = Policy { dry_run: false, max_lag_seconds: 0.0, ..p };
        let more = Observation { load: o.load + extra, ..o };
        prop_assert!(decide(&p, &more).desired >= decide(&p, &o).desired);
    }
}
