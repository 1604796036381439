use proptest::prelude::*;

use super::*;

fn policy() -> Policy {
    Policy {
        engine: Engine::Cnpg,
        metric: Metric::ReadConnections,
        target: 150.0,
        extra: [None; 2],
        min_replicas: 2,
        max_replicas: 6,
        quorum: 0,
        max_lag_seconds: 0.0,
        max_lag_bytes: 0.0,
        dry_run: false,
        convergence_deadline_seconds: 600.0,
        schedule_floor: 0,
        scale_in_disabled: false,
        max_client_wait_seconds: 0.0,
    }
}

fn obs(current: u32, load: f64) -> Observation {
    Observation {
        current,
        load,
        extra_loads: [0.0; 2],
        max_lag_seconds: None,
        lag_unknown: false,
        primary_writing: Some(false),
        redis: None,
        pooler: None,
        quota: None,
        convergence: None,
    }
}

fn quota(instances: u32) -> Option<QuotaCeiling> {
    Some(QuotaCeiling {
        instances,
        resource: "requests.cpu",
        unreadable: false,
    })
}

/// `current` instances in spec, `ready` of them ready, not ready for `seconds`.
fn stuck(current: u32, load: f64, ready: u32, seconds: f64) -> Observation {
    Observation {
        convergence: Some(Convergence {
            ready,
            not_ready_seconds: Some(seconds),
        }),
        ..obs(current, load)
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
        primary_writing: Some(true),
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
            primary_writing: Some(false),
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
        primary_writing: Some(true),
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

/// Unknown is never fine (issue 43): unknown write activity holds a lagging cluster as writing
/// does, an unknown lag holds as lag over the threshold does, and only a primary known to be idle
/// releases either.
#[test]
fn unknown_writes_or_lag_never_release_the_brake() {
    let p = Policy {
        max_lag_seconds: 30.0,
        ..policy()
    };
    let case = |lag, lag_unknown, writing| {
        let d = decide(
            &p,
            &Observation {
                max_lag_seconds: lag,
                lag_unknown,
                primary_writing: writing,
                ..obs(4, 10_000.0)
            },
        );
        (d.desired, d.brake)
    };
    assert_eq!(case(Some(600.0), false, None), (4, Brake::Engaged));
    assert_eq!(case(None, true, Some(true)), (4, Brake::Engaged));
    assert_eq!(case(None, true, None), (4, Brake::Engaged));
    assert_eq!(case(None, true, Some(false)), (6, Brake::IdleLag));
    assert_eq!(case(Some(1.0), false, None), (6, Brake::Clear));
    // The Redis brake reads the same unknowns.
    let r = redis_obs(3, 100.0, HEALTHY, true);
    let unknown_offsets = Observation {
        lag_unknown: true,
        ..r
    };
    assert_eq!(
        decide(&redis_policy(1000.0), &unknown_offsets).brake,
        Brake::Engaged
    );
    let down = RedisReplication {
        links_down: 1,
        ..HEALTHY
    };
    let unknown_writes = Observation {
        primary_writing: None,
        ..redis_obs(3, 100.0, down, true)
    };
    assert_eq!(
        decide(&redis_policy(0.0), &unknown_writes).brake,
        Brake::Engaged
    );
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
        primary_writing: Some(true),
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
        prop_oneof![Just(0), 1u32..60],
        any::<bool>(),
        prop_oneof![Just(Engine::Cnpg), Just(Engine::Redis)],
        prop_oneof![Just(0.0), 0.0f64..1e9],
    )
        .prop_map(
            |(
                target,
                min,
                max,
                quorum,
                lag,
                dry_run,
                schedule_floor,
                scale_in_disabled,
                engine,
                lag_bytes,
            )| Policy {
                engine,
                metric: Metric::ReadConnections,
                target,
                extra: [None; 2],
                min_replicas: min.min(max),
                max_replicas: max,
                quorum,
                max_lag_seconds: lag,
                max_lag_bytes: lag_bytes,
                dry_run,
                convergence_deadline_seconds: 600.0,
                schedule_floor,
                scale_in_disabled,
                max_client_wait_seconds: 0.0,
            },
        )
}

fn any_obs() -> impl Strategy<Value = Observation> {
    (
        (
            0u32..100,
            0.0f64..1e7,
            proptest::option::of(0.0f64..1e4),
            proptest::option::of(any::<bool>()),
            any::<bool>(),
        ),
        proptest::option::of(0u32..100),
        proptest::option::of((0u32..100, proptest::option::of(0.0f64..1e5))),
        proptest::option::of((0u32..3, 0u32..3, proptest::option::of(0.0f64..1e10))),
    )
        .prop_map(
            |((current, load, lag, writing, lag_unknown), quota_max, convergence, redis)| {
                Observation {
                    current,
                    load,
                    extra_loads: [0.0; 2],
                    max_lag_seconds: lag,
                    lag_unknown,
                    primary_writing: writing,
                    redis: redis.map(|(links_down, syncing, max_lag_bytes)| RedisReplication {
                        links_down,
                        syncing,
                        max_lag_bytes,
                    }),
                    pooler: None,
                    quota: quota(quota_max.unwrap_or(0)).filter(|_| quota_max.is_some()),
                    convergence: convergence.map(|(ready, not_ready_seconds)| Convergence {
                        ready,
                        not_ready_seconds,
                    }),
                }
            },
        )
}

#[test]
fn quota_caps_growth_at_what_fits() {
    // Load asks for 6; the quota fits 4 in all.
    let o = Observation {
        quota: quota(4),
        ..obs(3, 800.0)
    };
    let d = decide(&policy(), &o);
    assert_eq!(
        (d.desired, d.recommended, d.quota_ceiling, d.reason),
        (4, 4, Some(4), Reason::Quota)
    );
    assert!(d.summary(&policy(), &o).contains("requests.cpu"));
    // A quota with room for more does not decide.
    let d = decide(
        &policy(),
        &Observation {
            quota: quota(9),
            ..obs(3, 800.0)
        },
    );
    assert_eq!((d.desired, d.reason), (6, Reason::Max));
}

#[test]
fn quota_never_lowers_the_count_below_current_or_floor() {
    // Already above what the quota fits (quota shrunk, or used counts pending pods): hold current.
    let d = decide(
        &policy(),
        &Observation {
            quota: quota(1),
            ..obs(4, 800.0)
        },
    );
    assert_eq!((d.desired, d.reason), (4, Reason::Quota));
    // Scale-down is not the quota's business.
    let d = decide(
        &policy(),
        &Observation {
            quota: quota(1),
            ..obs(4, 0.0)
        },
    );
    assert_eq!((d.desired, d.reason), (2, Reason::Floor));
    // The quorum floor wins over the quota.
    let p = Policy {
        quorum: 3,
        ..policy()
    };
    let d = decide(
        &p,
        &Observation {
            quota: quota(2),
            ..obs(2, 0.0)
        },
    );
    assert_eq!((d.desired, d.reason), (4, Reason::Quorum));
}

#[test]
fn convergence_schedule_doubles_and_caps_at_eight_deadlines() {
    use ConvergencePhase::*;
    let d = 10.0;
    let phase = |t| convergence_phase(t, d);
    assert_eq!(phase(5.0), Converging { seconds: 5.0 });
    let cases = [
        (
            10.0,
            Hold {
                attempt: 1,
                remaining_seconds: 10.0,
            },
        ),
        (
            19.0,
            Hold {
                attempt: 1,
                remaining_seconds: 1.0,
            },
        ),
        (
            20.0,
            Retry {
                attempt: 1,
                remaining_seconds: 10.0,
            },
        ),
        (
            30.0,
            Hold {
                attempt: 2,
                remaining_seconds: 20.0,
            },
        ),
        (
            50.0,
            Retry {
                attempt: 2,
                remaining_seconds: 10.0,
            },
        ),
        (
            60.0,
            Hold {
                attempt: 3,
                remaining_seconds: 40.0,
            },
        ),
        (
            100.0,
            Retry {
                attempt: 3,
                remaining_seconds: 10.0,
            },
        ),
        (
            110.0,
            Hold {
                attempt: 4,
                remaining_seconds: 80.0,
            },
        ),
        (
            190.0,
            Retry {
                attempt: 4,
                remaining_seconds: 10.0,
            },
        ),
        (
            200.0,
            Hold {
                attempt: 5,
                remaining_seconds: 80.0,
            },
        ),
        (
            280.0,
            Retry {
                attempt: 5,
                remaining_seconds: 10.0,
            },
        ),
        (
            290.0,
            Hold {
                attempt: 6,
                remaining_seconds: 80.0,
            },
        ),
    ];
    for (t, want) in cases {
        assert_eq!(phase(t), want, "t = {t}");
    }
    assert_eq!(convergence_phase(50.0, 0.0), Unknown);
    assert_eq!(convergence_phase(f64::NAN, 10.0), Unknown);
    assert!(matches!(
        convergence_phase(1e300, 1e-300),
        Hold { .. } | Retry { .. }
    ));
}

#[test]
fn stuck_scale_up_holds_at_the_ready_count_after_the_deadline() {
    // spec 5, 3 ready, load wants 5.
    let before = decide(&policy(), &stuck(5, 600.0, 3, 599.0));
    assert_eq!((before.desired, before.reason), (5, Reason::Load));
    let held = stuck(5, 600.0, 3, 600.0);
    let d = decide(&policy(), &held);
    assert_eq!((d.desired, d.recommended, d.reason), (3, 5, Reason::Stuck));
    assert!(d.summary(&policy(), &held).contains("back-off 1"));
    // The retry window asks again; the second hold is twice as long.
    assert_eq!(decide(&policy(), &stuck(5, 600.0, 3, 1300.0)).desired, 5);
    assert_eq!(
        decide(&policy(), &stuck(5, 600.0, 3, 1800.0 + 1100.0)).desired,
        3
    );
    // Converged (no not-ready time): the load decides.
    let converged = Observation {
        convergence: Some(Convergence {
            ready: 5,
            not_ready_seconds: None,
        }),
        ..obs(5, 600.0)
    };
    assert_eq!(decide(&policy(), &converged).reason, Reason::Load);
    // Deadline 0 turns the hold off.
    let off = Policy {
        convergence_deadline_seconds: 0.0,
        ..policy()
    };
    assert_eq!(decide(&off, &held).desired, 5);
}

#[test]
fn stuck_hold_never_goes_below_the_floor_nor_blocks_a_smaller_ask() {
    // Only the primary is ready: hold at the floor 2, not 1.
    let d = decide(&policy(), &stuck(4, 600.0, 1, 700.0));
    assert_eq!((d.desired, d.reason), (2, Reason::Stuck));
    // The load no longer wants more than is ready: no hold.
    let d = decide(&policy(), &stuck(5, 200.0, 3, 700.0));
    assert_eq!((d.desired, d.reason), (3, Reason::Load));
}

#[test]
fn stuck_hold_caps_the_brakes_hold_too() {
    // Redis, lag unknown and writes unknown: the brake is engaged. 34 in spec, 21 ready long
    // past the deadline. A load asking for 21 (no more than is ready) and one asking for 34 both
    // shed the 13 that never became ready: the brake does not keep them.
    let p = Policy {
        engine: Engine::Redis,
        target: 100.0,
        max_replicas: 34,
        ..policy()
    };
    let lagging = |load| Observation {
        lag_unknown: true,
        primary_writing: None,
        ..stuck(34, load, 21, 46_369.9)
    };
    for load in [2_000.0, 5_000.0] {
        let d = decide(&p, &lagging(load));
        assert_eq!(
            (d.desired, d.reason, d.brake),
            (21, Reason::Stuck, Brake::Engaged)
        );
    }
}

#[test]
fn precedence_dry_run_then_stuck_then_brake_then_quota() {
    let braking = Policy {
        max_lag_seconds: 1.0,
        ..policy()
    };
    let o = Observation {
        max_lag_seconds: Some(10.0),
        primary_writing: Some(true),
        quota: quota(4),
        ..stuck(5, 800.0, 3, 700.0)
    };
    assert_eq!(decide(&braking, &o).reason, Reason::Stuck);
    let dry = Policy {
        dry_run: true,
        ..braking
    };
    assert_eq!(decide(&dry, &o).reason, Reason::DryRun);
    let converging = Observation {
        convergence: None,
        ..o
    };
    assert_eq!(decide(&braking, &converging).reason, Reason::Brake);
    let quiet = Observation {
        primary_writing: Some(false),
        ..converging
    };
    let d = decide(&braking, &quiet);
    assert_eq!((d.desired, d.reason), (5, Reason::Quota));
}

#[test]
fn a_schedule_window_raises_the_floor_up_to_max_only() {
    let scheduled = |floor| Policy {
        schedule_floor: floor,
        ..policy()
    };
    // Load asks for 3; the window's floor 5 wins.
    let d = decide(&scheduled(5), &obs(3, 300.0));
    assert_eq!(
        (d.desired, d.recommended, d.reason),
        (5, 5, Reason::Schedule)
    );
    // Load above the window's floor: the load decides.
    let d = decide(&scheduled(3), &obs(3, 600.0));
    assert_eq!((d.desired, d.reason), (5, Reason::Load));
    // A floor above maxReplicas (metadata refuses it, the quorum can lower nothing) stops at max.
    let d = decide(&scheduled(9), &obs(3, 0.0));
    assert_eq!((d.desired, d.reason), (6, Reason::Schedule));
    // The quorum raised floor and ceiling to 8: the window's 9 stops there, the quorum decided.
    let d = decide(
        &Policy {
            quorum: 7,
            ..scheduled(9)
        },
        &obs(3, 0.0),
    );
    assert_eq!((d.ceiling, d.desired, d.reason), (8, 8, Reason::Quorum));
    // The quota wins over the window: 4 fit.
    let o = Observation {
        quota: quota(4),
        ..obs(3, 0.0)
    };
    let d = decide(&scheduled(6), &o);
    assert_eq!((d.desired, d.reason), (4, Reason::Quota));
    // dry-run publishes the window's count and holds.
    let d = decide(
        &Policy {
            dry_run: true,
            ..scheduled(5)
        },
        &obs(3, 0.0),
    );
    assert_eq!((d.desired, d.recommended, d.reason), (3, 5, Reason::DryRun));
}

#[test]
fn scale_in_disabled_holds_the_current_count_but_lets_growth_through() {
    let held = Policy {
        scale_in_disabled: true,
        ..policy()
    };
    let d = decide(&held, &obs(5, 150.0));
    assert_eq!(
        (d.desired, d.recommended, d.reason),
        (5, 5, Reason::ScaleInHold)
    );
    let d = decide(&held, &obs(3, 600.0));
    assert_eq!((d.desired, d.reason), (5, Reason::Load));
    // Equal is no hold: the load decides.
    let d = decide(&held, &obs(3, 300.0));
    assert_eq!((d.desired, d.reason), (3, Reason::Load));
    // A lowered maxReplicas still wins: 8 instances, max 6, held at 6.
    let d = decide(&held, &obs(8, 0.0));
    assert_eq!((d.desired, d.reason), (6, Reason::ScaleInHold));
    // The stuck hold wins: the instances it gives back never became ready.
    let d = decide(&held, &stuck(5, 800.0, 3, 700.0));
    assert_eq!((d.desired, d.recommended, d.reason), (3, 6, Reason::Stuck));
    let d = decide(&held, &stuck(5, 0.0, 3, 700.0));
    assert_eq!((d.desired, d.reason), (3, Reason::Stuck));
}

fn with_signals(p: Policy) -> Policy {
    Policy {
        extra: [
            Some(Signal {
                metric: Metric::ReadCpuUtilization,
                target: 400.0,
            }),
            Some(Signal {
                metric: Metric::ReadConnectionUsage,
                target: 70.0,
            }),
        ],
        ..p
    }
}

#[test]
fn the_signal_asking_for_most_replicas_wins_and_is_named() {
    let p = with_signals(policy());
    let o = |conns: f64, cpu: f64, usage: f64| Observation {
        extra_loads: [cpu, usage],
        ..obs(3, conns)
    };
    // Connections ask for 2 replicas, CPU 1200/400 for 3, usage 100/70 for 2: CPU wins.
    let d = decide(&p, &o(300.0, 1200.0, 100.0));
    assert_eq!(
        (d.raw, d.desired, d.signal, d.reason),
        (4, 4, Metric::ReadCpuUtilization, Reason::Load)
    );
    assert!(
        d.summary(&p, &o(300.0, 1200.0, 100.0))
            .starts_with("ReadCPUUtilization 1200 / target 400")
    );
    // Usage 250 % / 70 asks for 4.
    let d = decide(&p, &o(300.0, 1200.0, 250.0));
    assert_eq!((d.raw, d.signal), (5, Metric::ReadConnectionUsage));
    // A tie keeps the trigger's metric.
    let d = decide(&p, &o(300.0, 800.0, 140.0));
    assert_eq!((d.raw, d.signal), (3, Metric::ReadConnections));
    // No load anywhere: the floor, named after the trigger's metric.
    let d = decide(&p, &o(0.0, 0.0, 0.0));
    assert_eq!(
        (d.desired, d.signal, d.reason),
        (2, Metric::ReadConnections, Reason::Floor)
    );
}

proptest! {
    #[test]
    fn another_signal_never_lowers_the_count(
        p in any_policy(), o in any_obs(), cpu in 0.0f64..1e7, usage in 0.0f64..1e4
    ) {
        let one = decide(&p, &o);
        let many = decide(&with_signals(p), &Observation { extra_loads: [cpu, usage], ..o });
        prop_assert!(many.raw >= one.raw);
        prop_assert!(many.recommended >= one.recommended);
        prop_assert!(many.desired <= many.ceiling);
    }

    #[test]
    fn scale_in_disabled_never_recommends_fewer_than_current(p in any_policy(), o in any_obs()) {
        let p = Policy { scale_in_disabled: true, ..p };
        let d = decide(&p, &o);
        let kept = o.current.min(d.ceiling);
        prop_assert!(d.recommended >= kept);
        if d.reason != Reason::Stuck {
            prop_assert!(d.desired >= kept, "{:?}", d);
        }
    }

    #[test]
    fn a_schedule_floor_holds_unless_a_stronger_guard_decides(p in any_policy(), o in any_obs()) {
        let d = decide(&p, &o);
        prop_assert!(d.desired <= d.ceiling);
        if !matches!(d.reason, Reason::Quota | Reason::Stuck | Reason::Brake | Reason::DryRun) {
            prop_assert!(d.desired >= p.schedule_floor.min(d.ceiling), "{:?}", d);
        }
    }

    #[test]
    fn controls_that_do_not_bind_change_nothing(p in any_policy(), o in any_obs()) {
        let plain = Policy { schedule_floor: 0, scale_in_disabled: false, ..p };
        let base = decide(&plain, &o);
        let quiet = Policy { schedule_floor: p.schedule_floor.min(base.floor), ..plain };
        prop_assert_eq!(decide(&quiet, &o), base);
        if base.recommended >= o.current.min(base.ceiling) {
            let held = Policy { scale_in_disabled: true, ..plain };
            prop_assert_eq!(decide(&held, &o), base);
        }
    }

    #[test]
    fn the_quota_never_lowers_the_count(p in any_policy(), o in any_obs(), q in 0u32..100) {
        let without = decide(&p, &Observation { quota: None, ..o });
        let with = decide(&p, &Observation { quota: quota(q), ..o });
        prop_assert!(with.desired <= without.desired);
        prop_assert!(with.desired >= without.desired.min(o.current.max(with.floor)));
    }

    #[test]
    fn the_stuck_hold_never_goes_below_the_floor_nor_above_the_ask(p in any_policy(), o in any_obs()) {
        let d = decide(&p, &o);
        if d.reason == Reason::Stuck {
            let ask = if d.brake == Brake::Engaged {
                o.current.clamp(d.floor, d.ceiling)
            } else {
                d.recommended
            };
            prop_assert!(d.desired >= d.floor);
            prop_assert!(d.desired < ask);
            prop_assert!(matches!(d.convergence, ConvergencePhase::Hold { .. }), "not in a hold");
        }
    }

    #[test]
    fn holds_double_and_never_exceed_eight_deadlines(elapsed in 0.0f64..1e7, deadline in 1.0f64..1e4) {
        match convergence_phase(elapsed, deadline) {
            ConvergencePhase::Hold { attempt, remaining_seconds } => {
                let cap = deadline * f64::from(1u32 << (attempt - 1).min(3));
                prop_assert!(remaining_seconds > 0.0 && remaining_seconds <= cap * (1.0 + 1e-9));
            }
            ConvergencePhase::Retry { remaining_seconds, .. } => {
                prop_assert!(remaining_seconds <= deadline * (1.0 + 1e-9));
            }
            ConvergencePhase::Converging { seconds } => prop_assert!(seconds < deadline),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

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
        if d.reason == Reason::Brake {
            prop_assert_eq!(d.desired, o.current.clamp(d.floor, d.ceiling));
            if (d.floor..=d.ceiling).contains(&o.current) {
                prop_assert_eq!(d.desired, o.current);
            }
        }
    }

    #[test]
    fn idle_lag_never_brakes(p in any_policy(), o in any_obs()) {
        let idle = Observation { primary_writing: Some(false), ..o };
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

fn redis_policy(max_lag_bytes: f64) -> Policy {
    Policy {
        engine: Engine::Redis,
        max_lag_bytes,
        ..policy()
    }
}

/// `current` Redis pods, `load` clients on replicas, replication health `r`, master writing or not.
fn redis_obs(current: u32, load: f64, r: RedisReplication, writing: bool) -> Observation {
    Observation {
        primary_writing: Some(writing),
        redis: Some(r),
        ..obs(current, load)
    }
}

const HEALTHY: RedisReplication = RedisReplication {
    links_down: 0,
    syncing: 0,
    max_lag_bytes: Some(300.0),
};

#[test]
fn redis_brake_holds_on_a_down_link_or_a_full_sync_while_the_master_writes() {
    for (what, r) in [
        (
            "link down",
            RedisReplication {
                links_down: 1,
                ..HEALTHY
            },
        ),
        (
            "full sync",
            RedisReplication {
                syncing: 1,
                ..HEALTHY
            },
        ),
    ] {
        // Up (load asks 6) and down (load asks 2) are both held at the current 4.
        for load in [10_000.0, 0.0] {
            let d = decide(&redis_policy(0.0), &redis_obs(4, load, r, true));
            assert_eq!(
                (d.desired, d.brake, d.reason),
                (4, Brake::Engaged, Reason::Brake),
                "{what}, load {load}"
            );
            let text = d.summary(&redis_policy(0.0), &redis_obs(4, load, r, true));
            assert!(text.starts_with("replication brake"), "{text}");
        }
        // The same with an idle master: the known false alarm, never a hold.
        let d = decide(&redis_policy(0.0), &redis_obs(4, 0.0, r, false));
        assert_eq!(
            (d.desired, d.brake, d.reason),
            (2, Brake::IdleLag, Reason::Floor),
            "{what}"
        );
    }
}

#[test]
fn redis_byte_lag_brakes_only_strictly_above_its_own_threshold() {
    let lag = |bytes| RedisReplication {
        max_lag_bytes: Some(bytes),
        ..HEALTHY
    };
    let p = redis_policy(1_048_576.0);
    assert_eq!(
        decide(&p, &redis_obs(3, 900.0, lag(1_048_576.0), true)).brake,
        Brake::Clear
    );
    let d = decide(&p, &redis_obs(3, 900.0, lag(1_048_577.0), true));
    assert_eq!((d.desired, d.brake), (3, Brake::Engaged));
    // Threshold 0 turns the byte part off, not the link and sync parts.
    let d = decide(&redis_policy(0.0), &redis_obs(3, 900.0, lag(1e12), true));
    assert_eq!(
        (d.desired, d.brake, d.reason),
        (6, Brake::Clear, Reason::Max)
    );
    // Unknown byte lag (no replica connected to the master) is not above anything.
    let unknown = RedisReplication {
        max_lag_bytes: None,
        ..HEALTHY
    };
    assert_eq!(
        decide(&p, &redis_obs(3, 900.0, unknown, true)).brake,
        Brake::Clear
    );
}

/// Cozystack's earlier operator compared a replica's byte offset lag with a seconds threshold, so
/// any write load (a few hundred bytes in flight) froze scaling. Here each engine reads only its
/// own unit: a seconds threshold never meets a byte offset, and a CNPG seconds lag never meets a
/// byte threshold.
#[test]
fn a_byte_offset_is_never_compared_with_a_seconds_threshold() {
    let in_flight = RedisReplication {
        max_lag_bytes: Some(172_900.0),
        ..HEALTHY
    };
    // A Redis policy that also carries a seconds threshold (evaluation never builds one: the
    // metadata refuses maxReplicationLagSeconds for Redis), and a stray seconds lag.
    let p = Policy {
        max_lag_seconds: 10.0,
        ..redis_policy(0.0)
    };
    let o = Observation {
        max_lag_seconds: Some(1e6),
        ..redis_obs(3, 900.0, in_flight, true)
    };
    let d = decide(&p, &o);
    assert_eq!(
        (d.desired, d.brake, d.reason),
        (6, Brake::Clear, Reason::Max)
    );
    // The other way round: a CNPG policy with a byte threshold ignores Redis health entirely.
    let p = Policy {
        max_lag_bytes: 10.0,
        ..policy()
    };
    let o = Observation {
        redis: Some(RedisReplication {
            links_down: 2,
            syncing: 2,
            max_lag_bytes: Some(1e12),
        }),
        primary_writing: Some(true),
        ..obs(3, 900.0)
    };
    assert_eq!(decide(&p, &o).brake, Brake::Off);
}

#[test]
fn redis_write_load_with_no_lag_never_freezes_scaling() {
    // The master writes all along; the replicas keep up (in-flight lag far below the threshold).
    let p = redis_policy(1_048_576.0);
    let mut current = 2;
    for (load, want) in [(100.0, 2), (400.0, 4), (900.0, 6), (300.0, 3), (0.0, 2)] {
        let d = decide(&p, &redis_obs(current, load, HEALTHY, true));
        assert_eq!((d.desired, d.brake), (want, Brake::Clear), "load {load}");
        current = d.desired;
    }
}

#[test]
fn redis_floor_keeps_one_replica_and_min_replicas() {
    // No load: the master and one replica for failover.
    let d = decide(&redis_policy(0.0), &redis_obs(5, 0.0, HEALTHY, false));
    assert_eq!((d.desired, d.floor, d.reason), (2, 2, Reason::Floor));
    for min in [0, 1] {
        let p = Policy {
            min_replicas: min,
            ..redis_policy(0.0)
        };
        assert_eq!(decide(&p, &redis_obs(5, 0.0, HEALTHY, false)).desired, 2);
    }
    let p = Policy {
        min_replicas: 4,
        ..redis_policy(0.0)
    };
    assert_eq!(decide(&p, &redis_obs(5, 0.0, HEALTHY, false)).desired, 4);
}

#[test]
fn redis_brake_is_never_off_and_dry_run_still_wins() {
    let d = decide(&redis_policy(0.0), &redis_obs(3, 0.0, HEALTHY, true));
    assert_eq!(d.brake, Brake::Clear);
    let dry = Policy {
        dry_run: true,
        ..redis_policy(0.0)
    };
    let down = RedisReplication {
        links_down: 1,
        ..HEALTHY
    };
    let d = decide(&dry, &redis_obs(3, 900.0, down, true));
    assert_eq!((d.desired, d.recommended, d.reason), (3, 6, Reason::DryRun));
}

fn pooler_policy() -> Policy {
    Policy {
        engine: Engine::Pgbouncer,
        metric: Metric::ClientConnections,
        target: 50.0,
        max_replicas: 8,
        max_client_wait_seconds: 1.0,
        ..policy()
    }
}

/// `current` pooler instances, `clients` of them (`waiting` waiting, the oldest `wait` s), and
/// a budget that fits `fits` instances.
fn pooler_obs(current: u32, clients: f64, waiting: u32, wait: f64, fits: u32) -> Observation {
    Observation {
        primary_writing: None,
        pooler: Some(PoolerLoad {
            waiting,
            max_wait_seconds: wait,
            budget: ConnectionBudget {
                max_connections: 100,
                reserved: 5,
                other: 15,
                per_instance: 20,
                fits,
            },
        }),
        ..obs(current, clients)
    }
}

#[test]
fn a_pooler_needs_clients_over_target_instances_and_no_primary() {
    let p = pooler_policy();
    let d = decide(&p, &pooler_obs(3, 160.0, 0, 0.0, 8));
    assert_eq!((d.raw, d.desired, d.reason), (4, 4, Reason::Load));
    // The floor keeps two for availability; no brake, ever.
    let d = decide(&p, &pooler_obs(2, 10.0, 0, 0.0, 8));
    assert_eq!(
        (d.desired, d.reason, d.brake),
        (2, Reason::Floor, Brake::Off)
    );
    assert!(
        d.summary(&p, &pooler_obs(2, 10.0, 0, 0.0, 8))
            .contains("needs 1 instances"),
    );
}

#[test]
fn clients_waiting_too_long_raise_by_one_and_any_waiting_client_holds_scale_in() {
    let p = pooler_policy();
    // 100 clients want 2 of the 3, but the oldest waited 2.5 s > 1 s: 4.
    let o = pooler_obs(3, 100.0, 7, 2.5, 8);
    let d = decide(&p, &o);
    assert_eq!((d.desired, d.reason), (4, Reason::ClientWait));
    assert!(d.summary(&p, &o).contains("2.5s > maxClientWaitSeconds 1s"));
    // At the threshold nothing is raised; the waiting clients still hold the 3.
    let d = decide(&p, &pooler_obs(3, 100.0, 7, 1.0, 8));
    assert_eq!((d.desired, d.reason), (3, Reason::ScaleInHold));
    // 0 turns the raise off; maxReplicas bounds it.
    let off = Policy {
        max_client_wait_seconds: 0.0,
        ..p
    };
    assert_eq!(decide(&off, &pooler_obs(3, 100.0, 7, 60.0, 8)).desired, 3);
    let low = Policy {
        max_replicas: 3,
        ..p
    };
    let d = decide(&low, &pooler_obs(3, 100.0, 7, 60.0, 8));
    assert_eq!((d.desired, d.reason), (3, Reason::ClientWait));
    let d = decide(&low, &pooler_obs(3, 200.0, 7, 60.0, 8));
    assert_eq!((d.desired, d.reason), (3, Reason::Max));
    // Without waiting clients a scale-in goes one instance per decision.
    let d = decide(&p, &pooler_obs(6, 10.0, 0, 0.0, 8));
    assert_eq!((d.desired, d.reason), (5, Reason::ScaleInPace));
    let d = decide(&p, &pooler_obs(3, 10.0, 0, 0.0, 8));
    assert_eq!((d.desired, d.reason), (2, Reason::Floor));
}

#[test]
fn the_connection_budget_is_never_exceeded() {
    let p = pooler_policy();
    // The load asks 6; 4 fit exactly.
    let o = pooler_obs(3, 300.0, 0, 0.0, 4);
    let d = decide(&p, &o);
    assert_eq!(
        (d.desired, d.recommended, d.reason),
        (4, 4, Reason::ConnectionBudget)
    );
    let text = d.summary(&p, &o);
    for number in [
        "max_connections 100",
        "reserved 5",
        "other clients 15",
        "room for 4 instances of 20",
    ] {
        assert!(text.contains(number), "{text}");
    }
    // Fits exactly what is asked: the load decides.
    assert_eq!(
        decide(&p, &pooler_obs(3, 300.0, 0, 0.0, 6)).reason,
        Reason::Load
    );
    // It wins over a waiting client's raise and hold, and over the floor: 1 fits, 1 it is.
    let d = decide(&p, &pooler_obs(3, 300.0, 9, 30.0, 1));
    assert_eq!((d.desired, d.reason), (1, Reason::ConnectionBudget));
    // Nothing fits: a Pooler of one, never 0, and the reason says so.
    let o = pooler_obs(3, 300.0, 0, 0.0, 0);
    let d = decide(&p, &o);
    assert_eq!((d.desired, d.reason), (1, Reason::ConnectionBudget));
    assert!(
        d.summary(&p, &o).contains("none fits"),
        "{}",
        d.summary(&p, &o)
    );
    // Dry-run still holds what is there, and publishes the capped recommendation.
    let dry = Policy { dry_run: true, ..p };
    let d = decide(&dry, &pooler_obs(3, 300.0, 0, 0.0, 2));
    assert_eq!((d.desired, d.recommended, d.reason), (3, 2, Reason::DryRun));
}

proptest! {
    #[test]
    fn a_pooler_decision_never_exceeds_its_budget_nor_reaches_zero(
        current in 0u32..20, clients in 0.0f64..2000.0, waiting in 0u32..50,
        wait in 0.0f64..100.0, fits in 0u32..20, min in 0u32..6, max in 6u32..20,
    ) {
        let p = Policy { min_replicas: min, max_replicas: max, ..pooler_policy() };
        let d = decide(&p, &pooler_obs(current, clients, waiting, wait, fits));
        prop_assert!(d.desired >= 1);
        prop_assert!(d.desired <= fits.max(1));
        prop_assert!(d.desired <= max);
        if waiting > 0 && current <= fits.max(1) && current <= max {
            prop_assert!(d.desired >= current, "{d:?}");
        }
        if d.desired < current {
            prop_assert!(d.desired + 1 == current || d.reason == Reason::ConnectionBudget || current > max, "{d:?}");
        }
    }
}
