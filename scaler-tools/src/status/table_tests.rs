use super::*;
use scaler::decisions::LastError;

fn now() -> jiff::Timestamp {
    "2026-12-01T12:00:00Z".parse().unwrap()
}

fn object(ns: &str, name: &str, metadata: &[(&str, &str)]) -> Object {
    object_at(ns, name, "cozy-autoscaling-scaler:6000", metadata)
}

fn object_at(ns: &str, name: &str, address: &str, metadata: &[(&str, &str)]) -> Object {
    let trigger = Trigger {
        address: address.into(),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    Object::new(ns.into(), name.into(), &trigger, format!("keda-hpa-{name}"))
}

const GOOD: &[(&str, &str)] = &[("target", "10"), ("maxReplicas", "5")];

fn entry(ns: &str, name: &str, reason: Option<&str>, error: Option<&str>) -> Entry {
    Entry {
        namespace: ns.into(),
        scaled_object: name.into(),
        cluster: name.into(),
        engine: Engine::Cnpg,
        current: reason.map(|_| 3),
        desired: reason.map(|_| 3),
        recommended: reason.map(|_| 4),
        reason: reason.map(str::to_owned),
        summary: None,
        last_success: None,
        last_evaluation: None,
        last_error: error.map(|m| LastError {
            code: "Unavailable".into(),
            message: m.into(),
            time: "2026-12-01T11:59:00Z".into(),
            age_seconds: 60,
        }),
    }
}

fn hpa(ns: &str, name: &str, active: &str) -> Hpa {
    Hpa {
        namespace: ns.into(),
        name: format!("keda-hpa-{name}"),
        desired: Some(3),
        last_scale: Some("2026-12-01T11:00:00Z".parse().unwrap()),
        conditions: vec![
            Condition {
                kind: "AbleToScale".into(),
                status: "True".into(),
                reason: Some("ReadyForNewScale".into()),
            },
            Condition {
                kind: "ScalingActive".into(),
                status: active.into(),
                reason: Some(
                    if active == "True" {
                        "ValidMetricFound"
                    } else {
                        "FailedGetExternalMetric"
                    }
                    .into(),
                ),
            },
        ],
    }
}

fn fleet() -> Inputs {
    Inputs {
        objects: Ok(vec![
            object("a", "healthy", GOOD),
            object("a", "braked", GOOD),
            object("b", "invalid", &[("target", "ten"), ("maxReplicas", "5")]),
            object("b", "unasked", GOOD),
            object("a", "stale", GOOD),
            object("a", "dry", GOOD),
            object("a", "failing", GOOD),
        ]),
        clusters: Ok(vec![Cluster {
            namespace: "b".into(),
            name: "unasked".into(),
            instances: Some(2),
        }]),
        hpas: Ok(vec![
            hpa("a", "healthy", "True"),
            hpa("b", "unasked", "False"),
        ]),
        decisions: Ok(Page {
            total: 6,
            truncated: false,
            entries: vec![
                entry("a", "healthy", Some("load"), None),
                entry("a", "braked", Some("brake"), None),
                entry("a", "stale", Some("load"), Some("backend down")),
                entry("a", "dry", Some("dry-run"), None),
                entry("a", "failing", None, Some("no instances")),
                // Not listed: another scaler's, or deleted.
                entry("z", "gone", Some("load"), None),
            ],
        }),
        now: now(),
    }
}

fn summary(rows: &[Row]) -> Vec<(&str, &str, Severity)> {
    rows.iter()
        .map(|r| (r.name.as_str(), r.reason.as_str(), r.severity))
        .collect()
}

#[test]
fn a_mixed_fleet_is_listed_trouble_first_with_the_right_reasons() {
    let inputs = fleet();
    let rows = rows(&inputs);
    assert_eq!(
        summary(&rows),
        [
            ("failing", "error", Severity::Broken),
            ("invalid", "invalid-metadata", Severity::Broken),
            ("unasked", "no-decision", Severity::Broken),
            ("stale", "load", Severity::Degraded),
            ("braked", "brake", Severity::Guarded),
            ("dry", "dry-run", Severity::Held),
            ("healthy", "load", Severity::Ok),
        ]
    );
    let invalid = &rows[1];
    assert!(
        invalid
            .last_error
            .as_deref()
            .unwrap()
            .contains("\"target\""),
        "{invalid:?}"
    );
    let unasked = &rows[2];
    assert_eq!(unasked.current, Some(2), "from the Cluster");
    assert_eq!(
        conditions(unasked.hpa.as_ref().unwrap(), false),
        "ScalingActive=False(FailedGetExternalMetric)"
    );
    let healthy = &rows[6];
    let h = healthy.hpa.as_ref().unwrap();
    assert_eq!(
        conditions(h, false),
        "ok",
        "True conditions and a False ScalingLimited are fine"
    );
    let mut limited = h.clone();
    limited.conditions.push(Condition {
        kind: "ScalingLimited".into(),
        status: "True".into(),
        reason: Some("TooManyReplicas".into()),
    });
    limited.conditions.push(Condition {
        kind: "ScaledToZero".into(),
        status: "False".into(),
        reason: None,
    });
    assert_eq!(
        conditions(&limited, false),
        "ScalingLimited=True(TooManyReplicas)"
    );
    assert_eq!((h.desired, h.last_scale_age_seconds), (Some(3), Some(3600)));
    assert_eq!(rows[3].last_error_age_seconds, Some(60));
    assert!(missing(&inputs).is_empty());
}

/// The issue-41 case: pooler triggers name a Pooler (here one called like the Cluster next to
/// it, which CNPG allows), capped by the connection budget or not yet asked.
#[test]
fn a_pooler_row_names_its_pooler_never_borrows_a_clusters_count_and_the_budget_is_a_guard() {
    const POOLER: &[(&str, &str)] = &[
        ("engine", "pgbouncer"),
        ("cluster", "pg"),
        ("target", "30"),
        ("maxReplicas", "10"),
    ];
    let mut capped = entry("t", "pg-pooler-rw", Some("connection-budget"), None);
    capped.engine = Engine::Pgbouncer;
    let inputs = Inputs {
        objects: Ok(vec![
            object("t", "pg-pooler-rw", POOLER),
            object("t", "pg-pooler-ro", POOLER),
        ]),
        clusters: Ok(vec![Cluster {
            namespace: "t".into(),
            name: "pg-pooler-ro".into(),
            instances: Some(7),
        }]),
        hpas: Ok(vec![]),
        decisions: Ok(Page {
            total: 1,
            truncated: false,
            entries: vec![capped],
        }),
        now: now(),
    };
    let rows = rows(&inputs);
    assert_eq!(
        summary(&rows),
        [
            ("pg-pooler-ro", "no-decision", Severity::Broken),
            ("pg-pooler-rw", "connection-budget", Severity::Guarded),
        ]
    );
    // The Pooler's name from its metadata default (the ScaledObject's), not `cluster: pg` (the
    // budget's database); the Cluster of the same name's 7 instances are not its count.
    assert_eq!(rows[0].cluster.as_deref(), Some("pg-pooler-ro"));
    assert_eq!(
        (rows[0].engine, rows[0].current),
        (Some(Engine::Pgbouncer), None)
    );
    let table = text(&rows, false);
    assert!(table.contains("Pooler/pg-pooler-rw"), "{table}");
    assert!(table.contains("Pooler/pg-pooler-ro"), "{table}");
    // A Cluster's trigger still shows its bare name and the Cluster's count.
    let mut cnpg = fleet();
    cnpg.decisions = Ok(Page {
        total: 0,
        truncated: false,
        entries: vec![],
    });
    let row = rows_of(&cnpg, "unasked");
    assert_eq!(
        (row.cluster.as_deref(), row.current, row.engine),
        (Some("unasked"), Some(2), Some(Engine::Cnpg))
    );
}

fn rows_of(inputs: &Inputs, name: &str) -> Row {
    rows(inputs).into_iter().find(|r| r.name == name).unwrap()
}

#[test]
fn an_hpa_that_cannot_scale_degrades_a_good_decision() {
    let mut inputs = fleet();
    inputs.hpas = Ok(vec![hpa("a", "healthy", "False")]);
    let rows = rows(&inputs);
    let healthy = rows.iter().find(|r| r.name == "healthy").unwrap();
    assert_eq!(healthy.severity, Severity::Degraded);
}

#[test]
fn each_missing_source_is_named_and_what_is_known_is_still_listed() {
    let mut inputs = fleet();
    inputs.decisions = Err("connection refused".into());
    inputs.hpas = Err("forbidden".into());
    inputs.clusters = Err("no CRD".into());
    let rows = rows(&inputs);
    let notes = missing(&inputs).join("\n");
    for source in [
        "decisions:",
        "HPAs:",
        "Clusters:",
        "connection refused",
        "--decisions-url",
    ] {
        assert!(notes.contains(source), "{source} in {notes}");
    }
    // Invalid metadata is known without the scaler; the rest is unknown, listed last.
    assert_eq!(rows[0].reason, "invalid-metadata");
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.reason == "unknown" && r.hpa.is_none())
    );
    assert_eq!(rows.len(), 7);

    let mut inputs = fleet();
    inputs.objects = Err("forbidden".into());
    let rows = super::rows(&inputs);
    assert!(missing(&inputs)[0].starts_with("ScaledObjects:"));
    assert_eq!(rows.len(), 6, "the decisions alone, every one");
    assert!(rows.iter().all(|r| r.scaler_address.is_none()));
}

#[test]
fn a_truncated_page_is_reported() {
    let mut inputs = fleet();
    if let Ok(page) = &mut inputs.decisions {
        page.total = 10_000;
        page.truncated = true;
    }
    assert!(missing(&inputs)[0].contains("6 of 10000"));
}

#[test]
fn the_table_has_a_header_aligned_columns_and_cut_errors() {
    let mut inputs = fleet();
    if let Ok(page) = &mut inputs.decisions {
        page.entries[2].last_error.as_mut().unwrap().message = format!("x\n{}", "y".repeat(400));
    }
    let rows = rows(&inputs);
    let table = text(&rows, false);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), rows.len() + 1);
    assert!(lines[0].starts_with("NAMESPACE   NAME"));
    let reason_at = lines[0].find("REASON").unwrap();
    assert!(lines[1][reason_at..].starts_with("error"), "{}", lines[1]);
    assert!(!table.contains("SCALER "));
    let stale = lines.iter().find(|l| l.contains("stale")).unwrap();
    assert!(stale.ends_with('…') && stale.len() < 400, "{stale}");
    let wide = text(&rows, true);
    assert!(wide.contains("SCALER") && wide.contains("cozy-autoscaling-scaler:6000"));
    assert!(wide.contains("AbleToScale=True(ReadyForNewScale)"));
    assert!(wide.contains(&format!(r"x\n{}", "y".repeat(400))));
}

#[test]
fn ages_read_like_kubectl() {
    for (s, want) in [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (7199, "119m"),
        (7200, "2h"),
        (172_800, "2d"),
    ] {
        assert_eq!(short_age(s), want);
    }
}

/// What a terminal acts on: C0 controls but the line break, DEL, C1 controls (0x9b is a CSI),
/// and the bidirectional overrides.
fn steering(text: &str) -> Option<char> {
    text.chars()
        .find(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
}

#[test]
fn every_printed_field_is_escaped_and_bounded() {
    const CSI: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m\u{202e}\r\n";
    let hostile = |s: &str| format!("{s}{CSI}{}", "z".repeat(100_000));
    let mut inputs = fleet();
    if let Ok(objects) = &mut inputs.objects {
        // The tenant's: the address, and metadata whose parse error repeats it.
        objects[0] = object_at("a", "healthy", &hostile("cozy-autoscaling-scaler."), GOOD);
        let target = hostile("ten");
        objects[2] = object("b", "invalid", &[("target", &target), ("maxReplicas", "5")]);
    }
    if let Ok(hpas) = &mut inputs.hpas {
        hpas[0].conditions[0].reason = Some(hostile("Ready"));
        hpas[0].conditions[1].kind = hostile("ScalingActive");
    }
    if let Ok(page) = &mut inputs.decisions {
        page.entries[0].reason = Some(hostile("load"));
        page.entries[2].last_error.as_mut().unwrap().message = hostile("down");
        page.entries[2].last_error.as_mut().unwrap().code = hostile("Unavailable");
        page.entries[5].namespace = hostile("z");
        page.entries[5].cluster = hostile("gone");
    }
    inputs.clusters = Err(hostile("the API server said"));
    let mut without_objects = fleet();
    without_objects.objects = Err(hostile("forbidden"));
    without_objects.decisions = inputs.decisions.clone();
    for inputs in [inputs, without_objects] {
        let rows = rows(&inputs);
        let notes = missing(&inputs);
        for (output, printed) in [
            ("text", text(&rows, false)),
            ("wide", text(&rows, true)),
            ("json", json(&rows, &notes).unwrap()),
            ("yaml", yaml(&rows, &notes).unwrap()),
            ("warnings", notes.join("\n")),
        ] {
            assert_eq!(steering(&printed), None, "{output}: {printed}");
            // Before: the 100,000 characters of each field, whole.
            assert!(
                printed.len() < 32 << 10,
                "{output}: {} bytes",
                printed.len()
            );
            if output != "text" {
                assert!(printed.contains(r"u{1b}[2J"), "{output}: {printed}");
            }
        }
    }
}
