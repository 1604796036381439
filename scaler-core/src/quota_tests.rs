use proptest::prelude::*;

use super::*;

fn down(text: &str) -> Milli {
    parse_quantity(text, Rounding::Down).unwrap()
}

fn quota(name: &str, hard: &[(&str, &str)], used: Option<&[(&str, &str)]>) -> Quota {
    Quota::parse(
        name,
        false,
        hard.iter().copied(),
        used.map(|u| u.iter().copied()),
    )
    .unwrap()
}

fn cost() -> InstanceCost {
    InstanceCost {
        requests_cpu: Some(down("500m")),
        limits_cpu: Some(down("1")),
        requests_memory: Some(down("1Gi")),
        limits_memory: Some(down("1Gi")),
        storage: Some(down("10Gi")),
        pvcs: 1,
    }
}

#[test]
fn the_tightest_resource_binds() {
    let q = quota(
        "tenant",
        &[
            ("requests.cpu", "4"),
            ("limits.memory", "8Gi"),
            ("pods", "20"),
        ],
        Some(&[
            ("requests.cpu", "1500m"),
            ("limits.memory", "3Gi"),
            ("pods", "3"),
        ]),
    );
    // cpu: 2.5 / 0.5 = 5; memory: 5Gi / 1Gi = 5; pods 17. A tie keeps the first found.
    let fit = tightest(std::slice::from_ref(&q), &cost()).unwrap();
    assert_eq!((fit.more, fit.resource), (5, "requests.cpu"));
    let tight = quota(
        "small",
        &[("limits.cpu", "4")],
        Some(&[("limits.cpu", "3")]),
    );
    let fit = tightest(&[q, tight], &cost()).unwrap();
    assert_eq!(
        (fit.more, fit.resource, fit.quota.as_str()),
        (1, "limits.cpu", "small")
    );
    assert_eq!(
        (fit.hard, fit.used, fit.cost),
        (down("4"), Some(down("3")), down("1"))
    );
}

#[test]
fn bare_names_storage_and_pvcs_count() {
    let wal = InstanceCost {
        storage: Some(down("15Gi")),
        pvcs: 2,
        ..cost()
    };
    let q = quota(
        "t",
        &[
            ("cpu", "10"),
            ("requests.storage", "100Gi"),
            ("persistentvolumeclaims", "10"),
        ],
        Some(&[
            ("cpu", "1"),
            ("requests.storage", "45Gi"),
            ("persistentvolumeclaims", "3"),
        ]),
    );
    // storage 55 / 15 = 3; pvcs 7 / 2 = 3; cpu 9 / 0.5 = 18.
    let fit = tightest(&[q], &wal).unwrap();
    assert_eq!(fit.more, 3);
    assert!(["requests.storage", "persistentvolumeclaims"].contains(&fit.resource));
}

#[test]
fn requests_default_to_limits_and_unused_resources_never_bind() {
    let limits_only = InstanceCost {
        requests_cpu: None,
        requests_memory: None,
        ..cost()
    };
    let q = quota(
        "t",
        &[("requests.cpu", "3")],
        Some(&[("requests.cpu", "0")]),
    );
    assert_eq!(
        tightest(std::slice::from_ref(&q), &limits_only)
            .unwrap()
            .more,
        3
    );
    // No resources at all: the cpu quota does not apply to this pod's cost.
    let bare = InstanceCost {
        pvcs: 1,
        ..InstanceCost::default()
    };
    assert_eq!(tightest(&[q], &bare), None);
    // Unknown keys (services, GPUs) are not read.
    let other = quota("t", &[("services", "1")], Some(&[("services", "1")]));
    assert_eq!(tightest(&[other], &cost()), None);
}

#[test]
fn over_used_unmeasured_and_scoped_quotas() {
    // Already over (the quota was lowered): nothing more fits, never a negative count.
    let over = quota("t", &[("pods", "2")], Some(&[("pods", "5")]));
    assert_eq!(tightest(&[over], &cost()).unwrap().more, 0);
    // No usage yet: the API server admits nothing until the quota controller has counted.
    let fresh = quota("t", &[("pods", "50")], None);
    let fit = tightest(&[fresh], &cost()).unwrap();
    assert_eq!((fit.more, fit.used), (0, None));
    // A used map without the key counts as 0 used.
    let partial = quota("t", &[("pods", "4")], Some(&[]));
    assert_eq!(tightest(&[partial], &cost()).unwrap().more, 4);
    let scoped = Quota {
        scoped: true,
        ..quota("t", &[("pods", "1")], Some(&[("pods", "1")]))
    };
    assert_eq!(tightest(&[scoped], &cost()), None);
}

#[test]
fn a_malformed_quota_names_itself_and_the_key() {
    let err = Quota::parse(
        "tenant",
        false,
        [("requests.cpu", "lots")],
        None::<[(&str, &str); 0]>,
    )
    .unwrap_err();
    assert!(
        err.contains("tenant") && err.contains("requests.cpu"),
        "{err}"
    );
}

#[test]
fn an_unreadable_quota_fits_nothing_and_says_why() {
    let roomy = quota("roomy", &[("pods", "50")], Some(&[("pods", "1")]));
    let broken = Quota::unreadable(
        "broken",
        false,
        "requests.cpu: \"lots\" is not a quantity".into(),
    );
    let fit = tightest(&[roomy.clone(), broken], &cost()).unwrap();
    assert_eq!(
        (fit.more, fit.resource, fit.quota.as_str()),
        (0, UNREADABLE, "broken")
    );
    assert!(fit.unreadable.unwrap().contains("lots"));
    // A scoped quota is not applied, readable or not.
    let scoped = Quota::unreadable("scoped", true, "x".into());
    assert_eq!(tightest(&[roomy, scoped], &cost()).unwrap().more, 49);
}

proptest! {
    #[test]
    fn what_fits_really_fits(hard in 0i128..1_000_000, used in 0i128..1_000_000, per in 1i128..100_000) {
        let q = Quota {
            name: "q".into(),
            scoped: false,
            hard: [("requests.cpu".to_owned(), Milli(hard))].into(),
            used: Some([("requests.cpu".to_owned(), Milli(used))].into()),
            unreadable: None,
        };
        let c = InstanceCost { requests_cpu: Some(Milli(per)), ..InstanceCost::default() };
        let more = i128::from(tightest(&[q], &c).unwrap().more);
        prop_assert!(used + more * per <= hard.max(used));
        prop_assert!(used + (more + 1) * per > hard);
    }

}
