use proptest::prelude::*;

use super::*;

fn t(namespace: &str, cluster: &str) -> Target {
    Target {
        namespace: namespace.into(),
        cluster: cluster.into(),
    }
}

const CONNECTIONS_BRAKE: Shape = Shape {
    engine: Engine::Cnpg,
    metric: Metric::ReadConnections,
    extra: [None; 2],
    brake: true,
    brake_window_seconds: 300,
    budget: false,
};

#[test]
fn query_scopes_every_selector_to_namespace_and_cluster_pods() {
    let q = decision_query(&[t("tenant-a", "pg")], CONNECTIONS_BRAKE);
    // Every selector is scoped to the namespace, and all but the gone-pod checks (three
    // selectors each, joined on instance pods) to the cluster's pods.
    let selectors = q.matches('{').count();
    assert_eq!(
        q.matches(r#"{namespace="tenant-a""#).count(),
        selectors,
        "{q}"
    );
    let scoped = q
        .matches(r#"{namespace="tenant-a",pod=~"pg-[1-9][0-9]*""#)
        .count();
    // The rest are the gone check's `up` and `cnpg_collector_up` (namespaces only: the joins keep
    // instance pods).
    let gone_checks = q.matches("last_over_time(up{").count();
    assert_eq!(selectors - 3 * gone_checks, scoped, "{q}");
    // Eight parts (instances, failed scrapes, load, replicas with backend rows, replicas, lag,
    // replicas without lag, WAL), each labelled and grouped by cluster, and the standby-to-pod
    // mapping of the replay backlog.
    assert_eq!(q.matches("label_replace(").count(), 17);
    assert_eq!(q.matches(" by (namespace,cluster) ").count(), 8, "{q}");
    assert!(q.contains(r#"(up{namespace="tenant-a",pod=~"pg-[1-9][0-9]*"} == 0)"#));
    // Every series but `up` and the session rows is read over a window: a missed scrape's stale
    // markers never make an instance vanish from one answer; a pod whose `up` went stale
    // (deleted) adds no load. (`up` itself, and whether the exporter reaches PostgreSQL, are
    // instant reads; session rows are read as scraped for a pod collected now, and over the
    // window only for one that missed its collection.)
    let instant: std::collections::BTreeSet<&str> = q
        .match_indices('{')
        .filter(|&(at, _)| !q[at..].split_once('}').unwrap().1.starts_with('['))
        .map(|(at, _)| {
            let name = &q[..at];
            &name[name
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap()
                + 1..]
        })
        .collect();
    assert_eq!(
        instant,
        ["cnpg_backends_total", "cnpg_collector_up", "up"].into(),
        "{q}"
    );
    // Instances (and roles) are bridged, without the pods that are gone; a replica's own
    // sessions are read as scraped.
    assert!(q.contains(r#"(last_over_time(cnpg_pg_replication_in_recovery{namespace="tenant-a",pod=~"pg-[1-9][0-9]*"}[1m]) unless on(namespace,pod) ((last_over_time(up{namespace="tenant-a"}[1m]) unless on(namespace,pod) up{namespace="tenant-a"}) or cnpg_collector_up{namespace="tenant-a"} == 0))"#), "{q}");
    assert!(!q.contains("last_over_time(cnpg_backends_total"), "{q}");
    assert!(q.contains("max by (namespace,pod,datname,usename,application_name,state)"));
    assert!(q.contains(r#"usename!~"cnpg_metrics_exporter|postgres|streaming_replica""#));
    assert!(q.contains(r#"state="active""#));
    assert!(!q.contains("container_cpu"));
    assert!(
        q.contains("max_over_time(cnpg_pg_replication_lag")
            && q.contains("rate(cnpg_collector_wal_bytes")
    );
}

#[test]
fn a_batch_selects_its_namespaces_and_clusters_and_groups_by_both() {
    let targets = [t("b", "pg"), t("a", "pg-archive"), t("a", "pg")];
    let q = decision_query(&targets, CONNECTIONS_BRAKE);
    let selectors = q.matches('{').count();
    assert_eq!(q.matches(r#"{namespace=~"a|b""#).count(), selectors, "{q}");
    // The clusters' common prefix is written once.
    let scoped = q
        .matches(r#"{namespace=~"a|b",pod=~"(pg(|-archive))-[1-9][0-9]*""#)
        .count();
    // The rest are the gone check's `up` and `cnpg_collector_up` (namespaces only: the joins keep
    // instance pods).
    let gone_checks = q.matches("last_over_time(up{").count();
    assert_eq!(selectors - 3 * gone_checks, scoped, "{q}");
    // Every cluster label is the pod name without its instance number, never a scraped label.
    assert_eq!(
        q.matches(r#""cluster", "$1", "pod", "(.+)-[1-9][0-9]*")"#)
            .count(),
        8
    );
}

#[test]
fn lag_and_wal_are_only_queried_for_the_brake() {
    let shape = Shape {
        engine: Engine::Cnpg,
        metric: Metric::ReadConnections,
        extra: [None; 2],
        brake: false,
        brake_window_seconds: 0,
        budget: false,
    };
    let q = decision_query(&[t("ns", "pg")], shape);
    // instances, failed scrapes, load, replicas with backend rows, replicas.
    assert_eq!(q.matches("label_replace(").count(), 10);
    assert!(!q.contains("cnpg_pg_replication_lag") && !q.contains("wal_bytes"));
}

#[test]
fn the_brake_reads_lag_and_writes_over_its_window() {
    let q = decision_query(&[t("ns", "pg")], CONNECTIONS_BRAKE);
    assert_eq!(q.matches("[5m]").count(), 3, "{q}");
    let shape = Shape {
        brake_window_seconds: 90,
        ..CONNECTIONS_BRAKE
    };
    let q = decision_query(&[t("ns", "pg")], shape);
    assert!(q.contains("max_over_time(cnpg_pg_replication_lag{"), "{q}");
    assert_eq!(q.matches("[90s]").count(), 3, "{q}");
    assert!(!q.contains("[5m]"), "{q}");
}

#[test]
fn cpu_query_reads_the_postgres_container_in_millicores() {
    let shape = Shape {
        engine: Engine::Cnpg,
        metric: Metric::ReadCpuUtilization,
        extra: [None; 2],
        brake: false,
        brake_window_seconds: 0,
        budget: false,
    };
    let q = decision_query(&[t("ns", "db")], shape);
    assert!(q.contains(r#"container_cpu_usage_seconds_total{namespace="ns",pod=~"db-[1-9][0-9]*",container="postgres"}[5m]"#));
    assert!(q.contains("* 1000"));
    assert!(q.contains(r#"cnpg_pg_replication_in_recovery{namespace="ns",pod=~"db-[1-9][0-9]*"}[1m]) unless on(namespace,pod) ((last_over_time(up{namespace="ns"}[1m]) unless on(namespace,pod) up{namespace="ns"}) or cnpg_collector_up{namespace="ns"} == 0)) == 1)"#), "{q}");
    assert!(q.contains(r#""part", "replicas""#) && q.contains(r#""part", "load_pods""#));
    assert!(!q.contains("cnpg_backends_total"));
    // Warm-up: replicas whose WAL receiver was down within the rate window are left out of the
    // CPU, and counted apart.
    assert!(q.contains(r#"unless on(namespace,pod) (min_over_time(cnpg_pg_replication_is_wal_receiver_up{namespace="ns",pod=~"db-[1-9][0-9]*"}[5m]) == 0)"#), "{q}");
    assert!(q.contains(r#""part", "warming""#));
}

#[test]
fn every_signal_has_its_load_part_and_usage_reads_max_connections() {
    let shape = Shape {
        engine: Engine::Cnpg,
        metric: Metric::ReadConnections,
        extra: [
            Some(Metric::ReadConnectionUsage),
            Some(Metric::ReadCpuUtilization),
        ],
        brake: false,
        brake_window_seconds: 0,
        budget: false,
    };
    let q = decision_query(&[t("ns", "pg")], shape);
    for part in [
        "load",
        "load_readconnectionusage",
        "load_readcpuutilization",
        "replicas",
        "load_pods",
        "usage_pods",
        "connection_pods",
        "warming",
    ] {
        assert_eq!(
            q.matches(&format!(r#""part", "{part}""#)).count(),
            1,
            "{part}: {q}"
        );
    }
    assert!(q.contains(r#"cnpg_pg_settings_setting{namespace="ns",pod=~"pg-[1-9][0-9]*",name="max_connections"} > 0"#), "{q}");
    // Usage counts sessions in every state: no state matcher on that selector.
    assert!(
        q.contains(r#"cnpg_backends_total{namespace="ns",pod=~"pg-[1-9][0-9]*",usename!~"#),
        "{q}"
    );
}

#[test]
fn names_are_escaped() {
    assert_eq!(regex_escape("a.b+c"), r"a\.b\+c");
    let q = decision_query(&[t("we\"ird", "a.b")], CONNECTIONS_BRAKE);
    assert!(
        q.contains(r#"namespace="we\"ird",pod=~"a\\.b-[1-9][0-9]*""#),
        "{q}"
    );
    let q = decision_query(&[t("x.y", "a"), t("x", "a|b")], CONNECTIONS_BRAKE);
    assert!(
        q.contains(r#"namespace=~"x(|\\.y)",pod=~"(a(|\\|b))-[1-9][0-9]*""#),
        "{q}"
    );
}

proptest! {
    /// The factored alternation matches exactly its names, as the flat one did (RE2, anchored as
    /// Prometheus and VictoriaMetrics anchor a matcher), whatever they share.
    #[test]
    fn an_alternation_matches_exactly_its_names(
        names in prop::collection::btree_set("[ab.|-]{0,4}", 1..6),
        probe in "[ab.|-]{0,5}",
    ) {
        let set: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let re = regex::Regex::new(&format!("^(?:{})$", alternation(&set))).unwrap();
        for name in &set {
            prop_assert!(re.is_match(name), "{} misses {name:?}", re.as_str());
        }
        prop_assert_eq!(re.is_match(&probe), set.contains(probe.as_str()), "{} and {:?}", re.as_str(), probe);
    }
}

#[test]
fn a_common_prefix_is_written_once() {
    let names = BTreeSet::from(["tenant-a", "tenant-ab", "tenant-b"]);
    assert_eq!(alternation(&names), "tenant-(a|ab|b)");
    assert_eq!(alternation(&BTreeSet::from(["a.b"])), r"a\.b");
    assert_eq!(alternation(&BTreeSet::from(["x", "y"])), "x|y");
    // Cut at a character boundary: "é" and "è" share their first byte, not a character.
    assert_eq!(alternation(&BTreeSet::from(["né", "nè"])), "n(è|é)");
}

#[test]
fn a_long_batch_is_cut_into_as_few_queries_as_fit() {
    // 100 clusters in 100 namespaces (a cold burst's batch): the matcher repeats in every selector.
    let targets: Vec<Target> = (0..100)
        .map(|i| t(&format!("ns{i:04}x"), &format!("c{i}")))
        .collect();
    let longest = decision_query(&targets, CONNECTIONS_BRAKE).len();
    let cut = batches(targets, CONNECTIONS_BRAKE, 100, MAX_QUERY_BYTES);
    assert!(cut.iter().all(|b| b.query.len() <= MAX_QUERY_BYTES));
    // Within one query of what an even cut by length could reach.
    assert!(
        cut.len() <= longest.div_ceil(MAX_QUERY_BYTES) + 1,
        "{} queries for {longest} bytes",
        cut.len()
    );
}

#[test]
fn batches_respect_both_bounds_and_group_namespaces() {
    let targets: Vec<Target> = (0..250)
        .map(|i| t(&format!("tenant-{:03}", i % 50), &format!("pg-{}", i / 50)))
        .collect();
    let small = batches(targets.clone(), CONNECTIONS_BRAKE, 100, MAX_QUERY_BYTES);
    assert!(small.iter().all(|b| b.query.len() <= MAX_QUERY_BYTES));
    assert_eq!(small.iter().map(|b| b.targets.len()).sum::<usize>(), 250);
    // Sorted: a namespace's clusters are neighbours, so each batch spans few namespaces.
    assert!(
        small[0].targets[..5]
            .iter()
            .all(|t| t.namespace == "tenant-000")
    );
    // A tight byte budget splits further; one target is never split.
    let tight = batches(targets, CONNECTIONS_BRAKE, 100, 3000);
    assert!(tight.len() > small.len());
    assert!(
        tight
            .iter()
            .all(|b| b.query.len() <= 3000 || b.targets.len() == 1)
    );
    let one = batches(vec![t("ns", "pg")], CONNECTIONS_BRAKE, 100, 10);
    assert_eq!(one.len(), 1);
}

fn sample(target: &Target, part: &str, value: &str) -> serde_json::Value {
    serde_json::json!({
        "metric": {"namespace": target.namespace, "cluster": target.cluster, "part": part},
        "value": [1.5, value],
    })
}

fn answer(samples: Vec<serde_json::Value>) -> String {
    serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": samples}})
        .to_string()
}

#[test]
fn parses_labelled_parts_per_cluster() {
    let (a, b) = (t("a", "pg"), t("b", "pg"));
    let body = answer(vec![
        sample(&a, "instances", "3"),
        sample(&a, "load", "42.5"),
        sample(&b, "instances", "2"),
    ]);
    let parsed = parse_answer(body.as_bytes()).unwrap();
    assert_eq!(parsed[&a].get("instances"), Some(&3.0));
    assert_eq!(parsed[&a].get("load"), Some(&42.5));
    assert_eq!(parsed[&b].get("load"), None);
    assert_eq!(parsed.len(), 2);
}

#[test]
fn parses_a_range_answer_per_evaluation_time() {
    let pg = t("ns", "pg");
    let parse = |body: &[u8]| parse_matrix(body, &pg, 0..=600);
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{"namespace":"ns","cluster":"pg","part":"instances"},"values":[[60,"3"],[120,"4"]]},
        {"metric":{"namespace":"ns","cluster":"pg","part":"load"},"values":[[120,"42.5"]]}]}}"#;
    let steps = parse(body).unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[&60].get("load"), None);
    assert_eq!((steps[&120]["instances"], steps[&120]["load"]), (4.0, 42.5));
    for bad in [
        &br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#[..],
        br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"instances"},"values":[[60,"2.5"]]}]}}"#,
        br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"load"},"values":[[60.5,"1"]]}]}}"#,
        br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ns","cluster":"pg"},"values":[[60,"1"]]}]}}"#,
        // Not a part of the query.
        br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"made-up"},"values":[[60,"1"]]}]}}"#,
        // Outside the range asked for.
        br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"ns","cluster":"pg","part":"load"},"values":[[900,"1"]]}]}}"#,
    ] {
        assert!(matches!(parse(bad), Err(QueryError::Garbage(_))), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn a_range_answer_for_another_namespace_or_cluster_is_refused() {
    let pg = t("ns", "pg");
    for labels in [
        r#""namespace":"other","cluster":"pg""#,
        r#""namespace":"ns","cluster":"pg-archive""#,
        r#""cluster":"pg""#,
        r#""namespace":"ns""#,
    ] {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{{labels},"part":"load"}},"values":[[60,"9"]]}}]}}}}"#
        );
        let error = parse_matrix(body.as_bytes(), &pg, 0..=600).unwrap_err();
        assert!(
            error.to_string().contains("another cluster's history"),
            "{labels}: {error}"
        );
    }
}

#[test]
fn out_of_range_values_are_garbage() {
    let one = |part: &str, value: &str| answer(vec![sample(&t("ns", "pg"), part, value)]);
    for (part, value) in [
        ("load", "1e308"),
        ("lag", "1e16"),
        ("instances", "4294967296"),
        ("instances", "2.5"),
        ("replicas", "1e6"),
        ("load_pods", "-0.5"),
    ] {
        let result = parse_answer(one(part, value).as_bytes());
        assert!(
            matches!(result, Err(QueryError::Garbage(_))),
            "{part}={value}: {result:?}"
        );
    }
    let ok = |part: &str, value: &str| {
        parse_answer(one(part, value).as_bytes()).unwrap()[&t("ns", "pg")][part]
    };
    assert_eq!(ok("load", "1e12"), 1e12);
    assert_eq!(ok("instances", "1000"), 1000.0);
}

#[test]
fn errors_quote_the_answer_bounded_and_escaped() {
    let huge = "\n".repeat(1 << 20);
    let body = format!(r#"{{"status":"error","error":"{huge}"}}"#);
    let message = parse_answer(body.as_bytes()).unwrap_err().to_string();
    assert!(message.len() < 400 && !message.contains('\n'), "{message}");
}

#[test]
fn rejects_garbage() {
    let target = t("ns", "pg");
    for body in [
        "<html>".to_owned(),
        r#"{"status":"error","error":"bad query"}"#.to_owned(),
        r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#.to_owned(),
        r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}"#.to_owned(),
        r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"instances","namespace":"ns"},"value":[1,"3"]}]}}"#.to_owned(),
        answer(vec![sample(&target, "load", "NaN")]),
        answer(vec![sample(&target, "load", "-1")]),
        answer(vec![sample(&target, "load", "1"), sample(&target, "load", "2")]),
    ] {
        assert!(matches!(parse_answer(body.as_bytes()), Err(QueryError::Garbage(_))), "{body}");
    }
}

fn target() -> impl Strategy<Value = Target> {
    // Few short names, so namespaces and clusters repeat and prefix each other.
    ("(a|ab|b)", "(pg|pg-1|pg-archive|p)").prop_map(|(n, c)| t(&n, &c))
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![
            Just(Metric::ReadConnections),
            Just(Metric::ReadCpuUtilization),
            Just(Metric::ReadConnectionUsage)
        ],
        proptest::option::of(Just(Metric::ReadConnectionUsage)),
        any::<bool>(),
    )
        .prop_map(|(metric, usage, brake)| Shape {
            engine: Engine::Cnpg,
            metric,
            extra: [usage.filter(|u| *u != metric), None],
            brake,
            brake_window_seconds: if brake { 300 } else { 0 },
            budget: false,
        })
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        (0u32..2000).prop_map(|v| v.to_string()),
        "(?i)(nan|inf|-inf|\\+inf|1e308|-0|0x10|)",
        ".{0,20}",
    ]
}

fn part_name() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            part::INSTANCES,
            part::LOAD,
            part::REPLICAS,
            part::LOAD_PODS,
            part::LAG,
            part::WAL,
        ])
        .prop_map(str::to_owned),
        "[a-z_]{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every target lands in exactly one batch, batches keep both bounds, and a batch's query is
    /// what the builder makes for its targets (so the batch of one is the single query).
    #[test]
    fn batches_partition_the_targets(
        targets in proptest::collection::vec(target(), 0..40),
        shape in shape(),
        max_targets in 1usize..12,
        max_bytes in 500usize..6000,
    ) {
        let made = batches(targets.clone(), shape, max_targets, max_bytes);
        let mut seen: Vec<Target> = made.iter().flat_map(|b| b.targets.clone()).collect();
        let mut want = targets;
        want.sort();
        want.dedup();
        seen.sort();
        prop_assert_eq!(seen, want);
        for batch in &made {
            prop_assert!(!batch.targets.is_empty() && batch.targets.len() <= max_targets);
            prop_assert!(batch.query.len() <= max_bytes || batch.targets.len() == 1);
            prop_assert_eq!(&batch.query, &decision_query(&batch.targets, shape));
        }
    }

    /// The parser gives every cluster exactly its own samples, whatever the order.
    #[test]
    fn the_answer_splits_per_cluster(
        entries in proptest::collection::hash_map(
            (target(), part_name()), (0u32..100_000).prop_map(f64::from), 0..30),
    ) {
        let mut samples: Vec<_> = entries
            .iter()
            .map(|((target, part), v)| sample(target, part, &v.to_string()))
            .collect();
        samples.reverse();
        let parsed = parse_answer(answer(samples).as_bytes()).unwrap();
        prop_assert_eq!(parsed.values().map(HashMap::len).sum::<usize>(), entries.len());
        for ((target, part), v) in &entries {
            prop_assert_eq!(parsed[target][part], *v);
        }
    }

    #[test]
    fn any_bytes_are_an_answer_or_garbage(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        match parse_answer(&body) {
            Ok(answer) => prop_assert!(answer.values().flat_map(|p| p.values()).all(|v| (0.0..=MAX_VALUE).contains(v))),
            Err(e) => prop_assert!(matches!(e, QueryError::Garbage(_))),
        }
    }

    #[test]
    fn accepted_values_are_in_range(
        samples in proptest::collection::vec((target(), part_name(), value()), 0..8),
    ) {
        let body = answer(samples.iter().map(|(t, p, v)| sample(t, p, v)).collect());
        if let Ok(answer) = parse_answer(body.as_bytes()) {
            for (name, v) in answer.values().flatten() {
                prop_assert!(v.is_finite() && (0.0..=MAX_VALUE).contains(v), "{name}={v}");
                if COUNT_PARTS.contains(&name.as_str()) {
                    prop_assert!(v.fract() == 0.0 && *v <= MAX_COUNT, "{name}={v}");
                }
            }
        }
    }
}

#[test]
fn every_load_part_is_a_known_part() {
    for metric in crate::metadata::Metric::ALL {
        for primary in [true, false] {
            assert!(part::ALL.contains(&part::load_of(metric, primary)));
        }
    }
}

const REDIS: Shape = Shape {
    engine: Engine::Redis,
    metric: Metric::ReadConnections,
    extra: [None; 2],
    brake: true,
    brake_window_seconds: 0,
    budget: false,
};

/// Every selector of the query, as written (the text between `{` and `}` after a metric name).
fn selectors(query: &str) -> Vec<&str> {
    query
        .match_indices("{namespace")
        .map(|(i, _)| &query[i + 1..i + query[i..].find('}').unwrap()])
        .collect()
}

#[test]
fn redis_query_reads_the_failovers_redis_pods_only() {
    let q = decision_query(&[t("tenant", "cache")], REDIS);
    let sels = selectors(&q);
    assert!(sels.len() > 10, "{q}");
    for sel in &sels {
        // StatefulSet ordinals from 0; never the sentinels' rfs-cache-… nor rfr-cache-x-0.
        assert!(
            sel.starts_with(r#"namespace="tenant",pod=~"rfr-cache-(0|[1-9][0-9]*)""#),
            "{sel}"
        );
    }
    // Grouped by namespace and the name taken back from the pod name.
    assert!(q.contains(r#""cluster", "$1", "pod", "rfr-(.+)-(0|[1-9][0-9]*)""#));
    for name in [
        "instances",
        "masters",
        "replicas",
        "load",
        "client_pods",
        "health_pods",
        "links_down",
        "syncing",
        "lag_bytes",
        "repl_rate",
    ] {
        assert!(q.contains(&format!(r#""part", "{name}""#)), "{name}: {q}");
        assert!(part::ALL.contains(&name), "{name}");
    }
    // Roles come from the instance's own INFO, not from pod labels.
    assert!(q.contains(r#"role="slave""#) && q.contains(r#"role="master""#));
    // No CNPG series, and nothing in seconds: the lag is the master's offset minus each replica's.
    assert!(!q.contains("cnpg_") && !q.contains("lag_seconds"), "{q}");
    assert!(
        q.contains("redis_master_repl_offset") && q.contains("redis_connected_slave_offset_bytes")
    );
    let two = decision_query(&[t("a", "cache"), t("b", "queue")], REDIS);
    assert!(two.contains(r#"namespace=~"a|b",pod=~"rfr-(cache|queue)-(0|[1-9][0-9]*)""#));
}

#[test]
fn redis_connections_leave_out_sentinels_exporter_and_master_link() {
    let q = decision_query(&[t("tenant", "cache")], REDIS);
    // The total minus the named internal entries, per pod, on replicas only.
    assert!(
        q.contains("max by (namespace,pod) (redis_connected_clients{"),
        "{q}"
    );
    assert!(q.contains(r#"name=~"sentinel-[0-9a-f]+-(cmd|pubsub)|redis_exporter""#));
    assert!(q.contains(r#"flags="M""#));
    assert!(
        q.contains("max by (namespace,pod,name,flags) (last_over_time("),
        "{q}"
    );
    assert!(q.contains("[1m]"));
    assert!(!q.contains("redis_commands_total"));
}

#[test]
fn redis_commands_count_read_commands_of_replicas() {
    let shape = Shape {
        metric: Metric::ReadCommandsPerSecond,
        extra: [Some(Metric::ReadConnections), None],
        ..REDIS
    };
    let q = decision_query(&[t("tenant", "cache")], shape);
    assert!(q.contains(r#""part", "load""#) && q.contains(r#""part", "load_readconnections""#));
    assert!(q.contains("rate(redis_commands_total{"), "{q}");
    // The read list, as a regex: GET and subcommands in, replicated writes and the platform's own
    // commands out.
    let list: Vec<&str> = redis::READ_COMMANDS.split('|').collect();
    for read in ["get", "mget", "hgetall", "zrange", "scan", r"xinfo\\"] {
        assert!(list.contains(&read), "{read}");
    }
    for other in [
        "set",
        "del",
        "publish",
        "ping",
        "info",
        "select",
        "client",
        "config",
        "replconf",
        "slowlog",
        "latency",
        "subscribe",
        "exec",
        "multi",
        "eval",
        "evalsha",
    ] {
        assert!(!list.contains(&other), "{other}");
    }
}

#[test]
fn redis_answer_parts_are_counts_where_they_count_pods() {
    let c = t("tenant", "cache");
    for part in [
        "masters",
        "client_pods",
        "health_pods",
        "links_down",
        "syncing",
    ] {
        let body = answer(vec![sample(&c, part, "1.5")]);
        assert!(
            matches!(parse_answer(body.as_bytes()), Err(QueryError::Garbage(_))),
            "{part}"
        );
    }
    let body = answer(vec![
        sample(&c, "instances", "3"),
        sample(&c, "lag_bytes", "172900"),
        sample(&c, "repl_rate", "27146.5"),
    ]);
    let parsed = parse_answer(body.as_bytes()).unwrap();
    assert_eq!(parsed[&c]["lag_bytes"], 172_900.0);
    assert_eq!(parsed[&c]["repl_rate"], 27_146.5);
}

#[test]
fn redis_shape_always_has_the_brake_and_cnpg_keeps_its_query() {
    let md = |pairs: &[(&str, &str)]| {
        let map = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        crate::metadata::parse("cache", &map).unwrap()
    };
    let redis = md(&[("engine", "redis"), ("target", "5"), ("maxReplicas", "6")]);
    assert_eq!(Shape::of(&redis), REDIS);
    let cnpg = md(&[("target", "5"), ("maxReplicas", "6")]);
    let shape = Shape::of(&cnpg);
    assert_eq!((shape.engine, shape.brake), (Engine::Cnpg, false));
    assert!(!decision_query(&[t("a", "pg")], shape).contains("redis_"));
}
