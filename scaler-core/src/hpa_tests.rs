use proptest::prelude::*;
use serde_json::json;

use super::*;

fn behavior(spec: serde_json::Value) -> Behavior {
    serde_json::from_value::<BehaviorSpec>(spec)
        .unwrap()
        .resolve()
        .unwrap()
}

/// Syncs every 15 s from `from` to `to` (inclusive) with `desired`; the counts after each.
fn run(hpa: &mut Hpa, from: i64, to: i64, desired: u32) -> Vec<(i64, u32)> {
    (from..=to)
        .step_by(15)
        .map(|t| (t, hpa.sync(t, Some(desired)).replicas))
        .collect()
}

#[test]
fn kubernetes_defaults_fill_what_is_not_written() {
    let b = Behavior::default();
    assert_eq!(b.scale_up.stabilization_window_seconds, 0);
    assert_eq!(b.scale_down.stabilization_window_seconds, 300);
    assert_eq!(
        b.scale_up.policies,
        [
            policy(PolicyType::Pods, 4, 15),
            policy(PolicyType::Percent, 100, 15)
        ]
    );
    assert_eq!(
        b.scale_down.policies,
        [policy(PolicyType::Percent, 100, 15)]
    );
    assert_eq!((b.scale_up.tolerance, b.scale_down.tolerance), (0.1, 0.1));
    // A direction that sets only its window keeps the default policies.
    let b = behavior(json!({"scaleUp": {"stabilizationWindowSeconds": 60}}));
    assert_eq!(b.scale_up.stabilization_window_seconds, 60);
    assert_eq!(b.scale_up.policies.len(), 2);
}

/// Every form of a Kubernetes quantity is a tolerance (the API server stores any of them),
/// exactly; what is not a quantity ≥ 0 is refused naming the field.
#[test]
fn tolerance_is_any_kubernetes_quantity() {
    let tolerance = |text: &str| {
        serde_json::from_value::<BehaviorSpec>(json!({"scaleUp": {"tolerance": text}}))
            .map(|spec| spec.resolve().unwrap().scale_up.tolerance)
    };
    for (text, value) in [
        ("0.05", 0.05),
        ("50m", 0.05),
        ("5e-2", 0.05),
        ("5E-2", 0.05),
        ("+50m", 0.05),
        (".05", 0.05),
        ("2500u", 0.0025),
        ("0.0025", 0.0025),
        ("0", 0.0),
        ("-0", 0.0),
        ("1", 1.0),
        ("1e3", 1000.0),
        ("1k", 1000.0),
        ("1Ki", 1024.0),
    ] {
        assert_eq!(tolerance(text).ok(), Some(value), "{text}");
    }
    for text in [
        "",
        "-50m",
        "-1e-2",
        "1e",
        "1e41",
        "1e99999999999",
        "99999999999999999999Ei",
        "5%",
        "0.05.1",
        "1gi",
        "50 m",
        "inf",
        "0x1",
    ] {
        let err = tolerance(text).unwrap_err().to_string();
        assert!(err.contains("tolerance"), "{text:?}: {err}");
    }
    let long = "5".repeat(10_000);
    let err = tolerance(&long).unwrap_err().to_string();
    assert!(err.len() < 1000, "{} bytes", err.len());
}

#[test]
fn reads_the_behavior_chartgen_renders() {
    let b = behavior(json!({
        "scaleDown": {"policies": [{"periodSeconds": 600, "type": "Pods", "value": 1}],
                      "stabilizationWindowSeconds": 1800, "tolerance": "0"},
        "scaleUp": {"stabilizationWindowSeconds": 300, "tolerance": "50m", "selectPolicy": "Min"},
    }));
    assert_eq!(b.scale_down.policies, [policy(PolicyType::Pods, 1, 600)]);
    assert_eq!((b.scale_down.tolerance, b.scale_up.tolerance), (0.0, 0.05));
    assert_eq!(b.scale_up.select_policy, SelectPolicy::Min);
}

#[test]
fn invalid_behavior_names_the_field() {
    for (spec, field) in [
        (
            json!({"scaleDown": {"stabilizationWindowSeconds": 3601}}),
            "scaleDown.stabilizationWindowSeconds",
        ),
        (
            json!({"scaleUp": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}),
            "scaleUp.policies[0].value",
        ),
        (
            json!({"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}}),
            "scaleUp.policies[0].periodSeconds",
        ),
    ] {
        let err = serde_json::from_value::<BehaviorSpec>(spec)
            .unwrap()
            .resolve()
            .unwrap_err();
        assert_eq!(err.field, field, "{err}");
    }
    for spec in [
        json!({"scaleUp": {"tolerance": "-1"}}),
        json!({"scaleUp": {"tolerance": "NaN"}}),
        json!({"scaleUp": {"policies": [{"type": "Replicas", "value": 1, "periodSeconds": 15}]}}),
        json!({"scaleUp": {"stabilisationWindowSeconds": 60}}),
        json!({"scaleUp": {"selectPolicy": "Largest"}}),
    ] {
        assert!(
            serde_json::from_value::<BehaviorSpec>(spec.clone()).is_err(),
            "{spec}"
        );
    }
    let err = serde_json::from_value::<BehaviorSpec>(json!({"scaleUp": {"tolerance": -0.5}}))
        .unwrap()
        .resolve()
        .unwrap_err();
    assert_eq!(err.field, "scaleUp.tolerance");
}

#[test]
fn defaults_scale_up_at_once_and_down_after_the_window() {
    let mut hpa = Hpa::new(Some(Behavior::default()), 2, 10, 2, 0);
    // +4 pods or +100 %, the larger: 2 → 6 in the first sync, then 6 → 10.
    assert_eq!(hpa.sync(0, Some(10)).replicas, 6);
    assert_eq!(hpa.sync(15, Some(10)).replicas, 10);
    // Down to 3: held by the 300 s window of proposals of 10, then all at once (−100 %).
    let counts = run(&mut hpa, 30, 345, 3);
    assert!(
        counts
            .iter()
            .all(|&(t, n)| n == if t < 315 { 10 } else { 3 }),
        "{counts:?}"
    );
}

#[test]
fn a_new_hpa_does_not_scale_down_within_its_first_window() {
    let mut hpa = Hpa::new(Some(Behavior::default()), 2, 10, 6, 1000);
    let counts = run(&mut hpa, 1015, 1300, 2);
    assert!(
        counts
            .iter()
            .all(|&(t, n)| n == if t < 1300 { 6 } else { 2 }),
        "{counts:?}"
    );
}

#[test]
fn tolerance_keeps_small_changes_out() {
    let mut hpa = Hpa::new(Some(Behavior::default()), 2, 20, 10, 0);
    assert_eq!(hpa.sync(0, Some(11)).replicas, 10);
    assert_eq!(hpa.sync(15, Some(12)).replicas, 12);
    let exact = behavior(json!({"scaleUp": {"tolerance": "0"}}));
    let mut hpa = Hpa::new(Some(exact), 2, 20, 10, 0);
    assert_eq!(hpa.sync(0, Some(11)).replicas, 11);
}

#[test]
fn pods_policy_paces_scale_down_per_period() {
    let b = behavior(json!({"scaleDown": {"stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]}}));
    let mut hpa = Hpa::new(Some(b), 2, 10, 6, 0);
    let counts = run(&mut hpa, 0, 1800, 2);
    let at = |t: i64| counts.iter().find(|(s, _)| *s == t).unwrap().1;
    assert_eq!(
        (at(0), at(585), at(600), at(1200), at(1800)),
        (5, 5, 4, 3, 2)
    );
}

#[test]
fn select_policy_min_and_disabled() {
    let b = behavior(
        json!({"scaleUp": {"selectPolicy": "Min"}, "scaleDown": {"selectPolicy": "Disabled"}}),
    );
    let mut hpa = Hpa::new(Some(b), 2, 100, 2, 0);
    // Min of +4 pods and +100 %: 2 → 4.
    assert_eq!(hpa.sync(0, Some(50)).replicas, 4);
    let counts = run(&mut hpa, 15, 3600, 2);
    assert!(
        counts.iter().all(|&(_, n)| n >= 4),
        "scale-down is disabled"
    );
}

#[test]
fn outside_the_bounds_goes_to_the_bound_and_errors_hold() {
    let mut hpa = Hpa::new(Some(Behavior::default()), 2, 6, 9, 0);
    assert_eq!(
        hpa.sync(0, Some(9)),
        Sync {
            replicas: 6,
            proposal: None
        }
    );
    assert_eq!(hpa.sync(15, None).replicas, 6);
    let mut hpa = Hpa::new(Some(Behavior::default()), 0, 6, 0, 0);
    assert_eq!(
        hpa.sync(0, None).replicas,
        1,
        "KEDA's minimum of 0 is an HPA minimum of 1"
    );
}

#[test]
fn without_behavior_the_fixed_rules_apply() {
    let mut hpa = Hpa::new(None, 2, 20, 2, 0);
    // Up: at most doubling, at least to 4, per sync.
    assert_eq!(hpa.sync(0, Some(12)).replicas, 4);
    assert_eq!(hpa.sync(15, Some(12)).replicas, 8);
    assert_eq!(hpa.sync(30, Some(12)).replicas, 12);
    // Down: the highest proposal of the last 300 s, its start included; then all at once.
    let counts = run(&mut hpa, 45, 345, 3);
    assert!(
        counts
            .iter()
            .all(|&(t, n)| n == if t <= 330 { 12 } else { 3 }),
        "{counts:?}"
    );
    // The default 10 % tolerance.
    let mut hpa = Hpa::new(None, 2, 20, 10, 0);
    assert_eq!(hpa.sync(0, Some(11)).replicas, 10);
}

fn any_rules() -> impl Strategy<Value = RulesSpec> {
    let policy = (
        prop_oneof![Just(PolicyType::Pods), Just(PolicyType::Percent)],
        1u32..300,
        1u32..700,
    )
        .prop_map(|(kind, value, period_seconds)| ScalingPolicy {
            kind,
            value,
            period_seconds,
        });
    (
        proptest::option::of(0u32..900),
        proptest::option::of(prop_oneof![
            Just(SelectPolicy::Max),
            Just(SelectPolicy::Min),
            Just(SelectPolicy::Disabled)
        ]),
        proptest::option::of(proptest::collection::vec(policy, 0..3)),
        proptest::option::of(0.0f64..0.5),
    )
        .prop_map(|(w, s, p, t)| RulesSpec {
            stabilization_window_seconds: w,
            select_policy: s,
            policies: p,
            tolerance: t,
        })
}

proptest! {
    /// Whatever the behaviour and the metric do, the count stays in [min, max], and a Pods-only
    /// scale-up policy of v per p never lets the net growth within p seconds exceed v.
    #[test]
    fn stays_in_bounds_and_respects_pods_policies(
        down in any_rules(),
        up_value in 1u32..6, up_period in 15u32..400,
        min in 1u32..5, span in 0u32..20,
        desired in proptest::collection::vec(proptest::option::of(0u32..40), 1..200),
    ) {
        let up = RulesSpec {
            policies: Some(vec![policy(PolicyType::Pods, up_value, up_period)]),
            ..RulesSpec::default()
        };
        let b = BehaviorSpec { scale_up: Some(up), scale_down: Some(down) }.resolve().unwrap();
        let max = min + span;
        let mut hpa = Hpa::new(Some(b), min, max, min, 0);
        // (time, change) of every sync.
        let mut changes: Vec<(i64, i64)> = Vec::new();
        let mut before = min;
        for (i, d) in desired.into_iter().enumerate() {
            let t = 15 * (i as i64 + 1);
            let n = hpa.sync(t, d).replicas;
            prop_assert!((min..=max).contains(&n), "{n} outside [{min}, {max}]");
            changes.push((t, i64::from(n) - i64::from(before)));
            if n > before {
                // Scale-downs within the period give room back, as in the controller.
                let since = t - i64::from(up_period);
                let net: i64 = changes.iter().filter(|(at, _)| *at > since).map(|c| c.1).sum();
                prop_assert!(net <= i64::from(up_value),
                    "grew by {net} within {up_period} s (policy +{up_value})");
            }
            before = n;
        }
    }

    /// A steady desired count inside the bounds is reached once the windows have passed.
    #[test]
    fn converges_on_a_steady_desired_count(
        up in any_rules(), down in any_rules(), start in 1u32..30, desired in 1u32..30,
    ) {
        let b = BehaviorSpec { scale_up: Some(up), scale_down: Some(down) }.resolve().unwrap();
        let disabled = (desired > start && b.scale_up.select_policy == SelectPolicy::Disabled)
            || (desired < start && b.scale_down.select_policy == SelectPolicy::Disabled);
        let (up_tol, down_tol) = (b.scale_up.tolerance, b.scale_down.tolerance);
        let mut hpa = Hpa::new(Some(b), 1, 30, start, 0);
        let mut n = start;
        for i in 1..=2000 {
            n = hpa.sync(15 * i, Some(desired)).replicas;
        }
        let ratio = f64::from(desired) / f64::from(n);
        let tolerated = (1.0 - down_tol) <= ratio && ratio <= (1.0 + up_tol);
        prop_assert!(n == desired || disabled || tolerated, "stuck at {n}, desired {desired}");
    }
}
