//! The one PromQL query behind a decision, and the parsing of its answer: pure, no I/O (the
//! client that runs it is [`crate::backend`]).
//!
//! Every decision costs exactly one instant query: labelled parts joined with `or` (instances and
//! load; replica lag and primary WAL rate only when the lag brake is on), each
//! scoped to the request's namespace and to the cluster's own instance pods
//! (`pod=~"<cluster>-[1-9][0-9]*"`, so `pg` never matches `pg-archive-1`). Replicas are the pods
//! whose `cnpg_pg_replication_in_recovery` is 1, the primary the one where it is 0.
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use serde::Deserialize;

use crate::metadata::Metric;
use names::echo;

/// Users whose sessions are the platform's own, not client load.
pub const INTERNAL_USERS: &str = "cnpg_metrics_exporter|postgres|streaming_replica";
/// Window for the lag maximum and the WAL rate: the brake's hysteresis.
pub const WINDOW: &str = "5m";
/// Unreplayed WAL a replica may have and still miss no write: an idle primary's background records
/// (running-xacts snapshots, checkpoints) are tens to hundreds of bytes; one WAL page is 8 KiB.
pub const BACKGROUND_WAL_BYTES: u32 = 8192;

/// Names of the labelled parts of [`decision_query`].
pub mod part {
    pub const INSTANCES: &str = "instances";
    pub const LOAD: &str = "load";
    /// ReadCPUUtilization only: replica pods, and replica pods that have a CPU series.
    pub const REPLICAS: &str = "replicas";
    pub const LOAD_PODS: &str = "load_pods";
    pub const LAG: &str = "lag";
    pub const WAL: &str = "wal";
}

/// Builds the decision query for `cluster` in `namespace`; `brake` adds the lag and WAL parts.
///
/// Series are reduced per pod (or per session identity) with `max by` before summing, so a pod
/// scraped twice (two jobs, HA Prometheus pairs) does not count twice.
pub fn decision_query(namespace: &str, cluster: &str, metric: Metric, brake: bool) -> String {
    let pods = format!("{}-[1-9][0-9]*", regex_escape(cluster));
    let sel = format!(
        "namespace=\"{}\",pod=~\"{}\"",
        string_escape(namespace),
        string_escape(&pods)
    );
    let replicas = format!("(cnpg_pg_replication_in_recovery{{{sel}}} == 1)");
    let primary = format!("(cnpg_pg_replication_in_recovery{{{sel}}} == 0)");
    let mut parts = vec![(
        part::INSTANCES,
        format!("count(count by (pod) (cnpg_pg_replication_in_recovery{{{sel}}}))"),
    )];
    match metric {
        Metric::ReadConnections => parts.push((
            part::LOAD,
            format!(
                "sum(max by (namespace,pod,datname,usename,application_name,state) \
                 (cnpg_backends_total{{{sel},state=\"active\",usename!~\"{INTERNAL_USERS}\"}}) \
                 and on(namespace,pod) {replicas})"
            ),
        )),
        Metric::ReadCpuUtilization => {
            // cAdvisor always exports a running container's counter, so replicas without it
            // mean a scrape gap (an error), unlike CNPG's omitted zero rows.
            let cpu = format!(
                "max by (namespace,pod) (rate(container_cpu_usage_seconds_total{{{sel},container=\"postgres\"}}[{WINDOW}]))"
            );
            parts.extend([
                (
                    part::LOAD,
                    format!("sum({cpu} and on(namespace,pod) {replicas}) * 1000"),
                ),
                (part::REPLICAS, format!("count(count by (pod) {replicas})")),
                (
                    part::LOAD_PODS,
                    format!("count({cpu} and on(namespace,pod) {replicas})"),
                ),
            ]);
        }
    }
    if brake {
        parts.extend([
            (
                part::LAG,
                // CNPG's lag is `now() - last replayed commit` as soon as receive != replay, also
                // when all a replica misses is an idle primary's background record (docs/livepg.md,
                // L1). A replica whose unreplayed WAL (the primary's pg_stat_replication, per
                // standby pod) stayed within BACKGROUND_WAL_BYTES over the window misses no write:
                // its lag is dropped. Without that series the lag counts as it is.
                format!(
                    "max((max_over_time(cnpg_pg_replication_lag{{{sel}}}[{WINDOW}]) and on(namespace,pod) {replicas}) \
                     unless on(namespace,pod) (label_replace(max by (namespace,application_name) \
                     (max_over_time(cnpg_pg_stat_replication_replay_diff_bytes{{{sel}}}[{WINDOW}])), \
                     \"pod\", \"$1\", \"application_name\", \"(.*)\") <= {BACKGROUND_WAL_BYTES}))"
                ),
            ),
            (
                part::WAL,
                format!(
                    "max(rate(cnpg_collector_wal_bytes{{{sel}}}[{WINDOW}]) and on(namespace,pod) {primary})"
                ),
            ),
        ]);
    }
    let mut query = String::new();
    for (i, (name, expr)) in parts.into_iter().enumerate() {
        if i > 0 {
            query.push_str("\nor ");
        }
        let _ = write!(
            query,
            "label_replace({expr}, \"part\", \"{name}\", \"\", \"\")"
        );
    }
    query
}

/// Escapes RE2 metacharacters so a name matches literally.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Escapes a value for a double-quoted PromQL string literal.
pub fn string_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Largest value any part may carry: far above any real count, rate, load or lag.
pub const MAX_VALUE: f64 = 1e15;
/// Largest pod count a counting part may carry.
pub const MAX_COUNT: f64 = 100_000.0;
/// The parts that count pods: whole numbers from 0 to [`MAX_COUNT`].
const COUNT_PARTS: [&str; 3] = [part::INSTANCES, part::REPLICAS, part::LOAD_PODS];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error("Prometheus query timed out after {0:?} (body and parse included)")]
    Timeout(Duration),
    #[error(
        "Prometheus answer is larger than --max-response-bytes ({limit} bytes); a decision's answer is a few hundred bytes: check that --prometheus-url is a Prometheus query API"
    )]
    TooLarge { limit: usize },
    #[error("Prometheus is unreachable: {0}")]
    Unreachable(String),
    #[error("Prometheus answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Prometheus returned an unusable answer: {0}")]
    Garbage(String),
}

#[derive(Deserialize)]
struct Response<T> {
    status: String,
    #[serde(default = "Option::default")]
    data: Option<Data<T>>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data<T> {
    result_type: String,
    result: Vec<T>,
}

/// The `result` of a successful answer of `result_type` `want`; anything else is an error.
fn result<T: serde::de::DeserializeOwned>(body: &[u8], want: &str) -> Result<Vec<T>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let response: Response<T> = serde_json::from_slice(body).map_err(|e| {
        garbage(format!(
            "not a Prometheus API answer: {}",
            echo(&e.to_string())
        ))
    })?;
    if response.status != "success" {
        return Err(garbage(format!(
            "status {}: {}",
            echo(&response.status),
            echo(&response.error.unwrap_or_default())
        )));
    }
    let data = response.data.ok_or_else(|| garbage("no data".into()))?;
    if data.result_type != want {
        return Err(garbage(format!(
            "result type {}, want {want}",
            echo(&data.result_type)
        )));
    }
    Ok(data.result)
}

#[derive(Deserialize)]
struct VectorSample {
    metric: HashMap<String, String>,
    value: (f64, String),
}

/// Parses a `/api/v1/query` answer into `part` → value; anything unexpected is an error.
/// Every piece of the answer quoted in an error is a bounded, escaped [`echo`].
pub fn parse_parts(body: &[u8]) -> Result<HashMap<String, f64>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let result: Vec<VectorSample> = result(body, "vector")?;
    let mut parts = HashMap::with_capacity(result.len());
    for sample in result {
        let name = sample
            .metric
            .get("part")
            .ok_or_else(|| garbage("a sample without a part label".into()))?;
        let value = checked_value(name, &sample.value.1)?;
        if parts.insert(name.clone(), value).is_some() {
            return Err(garbage(format!("{}: more than one sample", echo(name))));
        }
    }
    Ok(parts)
}

/// A part's value, parsed and range-checked like every answer (counts are whole numbers).
fn checked_value(name: &str, text: &str) -> Result<f64, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let value: f64 = text.parse().map_err(|_| {
        garbage(format!(
            "{}: value {} is not a number",
            echo(name),
            echo(text)
        ))
    })?;
    if !value.is_finite() || !(0.0..=MAX_VALUE).contains(&value) {
        return Err(garbage(format!(
            "{}: value {value} is out of range (a number from 0 to {MAX_VALUE:e})",
            echo(name)
        )));
    }
    if COUNT_PARTS.contains(&name) && (value.fract() != 0.0 || value > MAX_COUNT) {
        return Err(garbage(format!(
            "{}: value {value} is not a pod count (a whole number from 0 to {MAX_COUNT})",
            echo(name)
        )));
    }
    Ok(value)
}

#[derive(Deserialize)]
struct MatrixSeries {
    metric: HashMap<String, String>,
    values: Vec<(f64, String)>,
}

/// Parses a `/api/v1/query_range` answer of [`decision_query`] into, per evaluation time (Unix
/// seconds), `part` → value: what [`parse_parts`] gives for an instant query at that time.
pub fn parse_matrix(body: &[u8]) -> Result<BTreeMap<i64, HashMap<String, f64>>, QueryError> {
    let garbage = |m: String| QueryError::Garbage(m);
    let result: Vec<MatrixSeries> = result(body, "matrix")?;
    let mut steps: BTreeMap<i64, HashMap<String, f64>> = BTreeMap::new();
    for series in result {
        let name = series
            .metric
            .get("part")
            .ok_or_else(|| garbage("a series without a part label".into()))?;
        for (time, text) in series.values {
            if !time.is_finite() || time.fract() != 0.0 {
                return Err(garbage(format!(
                    "{}: timestamp {time} is not a whole second: use a whole-second --step",
                    echo(name)
                )));
            }
            let value = checked_value(name, &text)?;
            if steps
                .entry(time as i64)
                .or_default()
                .insert(name.clone(), value)
                .is_some()
            {
                return Err(garbage(format!(
                    "{}: more than one sample at {time}",
                    echo(name)
                )));
            }
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_scopes_every_selector_to_namespace_and_cluster_pods() {
        let q = decision_query("tenant-a", "pg", Metric::ReadConnections, true);
        let selectors = q.matches('{').count();
        let scoped = q
            .matches(r#"{namespace="tenant-a",pod=~"pg-[1-9][0-9]*""#)
            .count();
        assert_eq!(selectors, scoped, "{q}");
        // Four parts, and the standby-to-pod mapping of the replay backlog.
        assert_eq!(q.matches("label_replace(").count(), 5);
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
    fn lag_and_wal_are_only_queried_for_the_brake() {
        let q = decision_query("ns", "pg", Metric::ReadConnections, false);
        assert_eq!(q.matches("label_replace(").count(), 2);
        assert!(!q.contains("cnpg_pg_replication_lag") && !q.contains("wal_bytes"));
    }

    #[test]
    fn cpu_query_reads_the_postgres_container_in_millicores() {
        let q = decision_query("ns", "db", Metric::ReadCpuUtilization, false);
        assert!(q.contains(r#"container_cpu_usage_seconds_total{namespace="ns",pod=~"db-[1-9][0-9]*",container="postgres"}[5m]"#));
        assert!(q.contains("* 1000"));
        assert!(q.contains(r#"label_replace(count(count by (pod) (cnpg_pg_replication_in_recovery{namespace="ns",pod=~"db-[1-9][0-9]*"} == 1)), "part", "replicas""#), "{q}");
        assert!(q.contains(r#""part", "load_pods""#));
        assert!(!q.contains("cnpg_backends_total"));
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(regex_escape("a.b+c"), r"a\.b\+c");
        let q = decision_query("we\"ird", "a.b", Metric::ReadConnections, true);
        assert!(
            q.contains(r#"namespace="we\"ird",pod=~"a\\.b-[1-9][0-9]*""#),
            "{q}"
        );
    }

    #[test]
    fn parses_labelled_parts() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"part":"instances"},"value":[1,"3"]},
            {"metric":{"part":"load"},"value":[1,"42.5"]}]}}"#;
        let parts = parse_parts(body).unwrap();
        assert_eq!(parts.get("instances"), Some(&3.0));
        assert_eq!(parts.get("load"), Some(&42.5));
    }

    #[test]
    fn parses_a_range_answer_per_evaluation_time() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"part":"instances"},"values":[[60,"3"],[120,"4"]]},
            {"metric":{"part":"load"},"values":[[120,"42.5"]]}]}}"#;
        let steps = parse_matrix(body).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[&60].get("load"), None);
        assert_eq!((steps[&120]["instances"], steps[&120]["load"]), (4.0, 42.5));
        for bad in [
            &br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#[..],
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"part":"instances"},"values":[[60,"2.5"]]}]}}"#,
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"part":"load"},"values":[[60.5,"1"]]}]}}"#,
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[60,"1"]]}]}}"#,
        ] {
            assert!(matches!(parse_matrix(bad), Err(QueryError::Garbage(_))), "{}", String::from_utf8_lossy(bad));
        }
    }

    /// A local HTTP server answering every query after `delay`, recording peak concurrency.
    #[test]
    fn out_of_range_values_are_garbage() {
        let answer = |part: &str, value: &str| {
            format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"part":"{part}"}},"value":[1,"{value}"]}}]}}}}"#
            )
        };
        for (part, value) in [
            ("load", "1e308"),
            ("lag", "1e16"),
            ("instances", "4294967296"),
            ("instances", "2.5"),
            ("replicas", "1e6"),
            ("load_pods", "-0.5"),
        ] {
            let result = parse_parts(answer(part, value).as_bytes());
            assert!(
                matches!(result, Err(QueryError::Garbage(_))),
                "{part}={value}: {result:?}"
            );
        }
        assert_eq!(
            parse_parts(answer("load", "1e12").as_bytes()).unwrap()["load"],
            1e12
        );
        assert_eq!(
            parse_parts(answer("instances", "1000").as_bytes()).unwrap()["instances"],
            1000.0
        );
    }

    #[test]
    fn errors_quote_the_answer_bounded_and_escaped() {
        let huge = "\n".repeat(1 << 20);
        let body = format!(r#"{{"status":"error","error":"{huge}"}}"#);
        let message = parse_parts(body.as_bytes()).unwrap_err().to_string();
        assert!(message.len() < 400 && !message.contains('\n'), "{message}");
    }

    #[test]
    fn rejects_garbage() {
        for body in [
            &b"<html>"[..],
            br#"{"status":"error","error":"bad query"}"#,
            br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"NaN"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"-1"]}]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"load"},"value":[1,"1"]},{"metric":{"part":"load"},"value":[1,"2"]}]}}"#,
        ] {
            assert!(matches!(parse_parts(body), Err(QueryError::Garbage(_))), "{}", String::from_utf8_lossy(body));
        }
    }

    /// Fuzzing the answer parser: any bytes, and well-formed answers with any values.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<f64>().prop_map(|v| v.to_string()),
                any::<u64>().prop_map(|v| v.to_string()),
                (0u32..2000).prop_map(|v| v.to_string()),
                "(?i)(nan|inf|-inf|\\+inf|1e308|-0|0x10|)",
                ".{0,20}",
            ]
        }

        fn answer() -> impl Strategy<Value = String> {
            let part = prop_oneof![
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
            ];
            proptest::collection::vec((part, value()), 0..8).prop_map(|samples| {
                let result: Vec<_> = samples
                    .into_iter()
                    .map(|(p, v)| serde_json::json!({"metric": {"part": p}, "value": [1.5, v]}))
                    .collect();
                serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
                    .to_string()
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]
            #[test]
            fn any_bytes_are_an_answer_or_garbage(body in proptest::collection::vec(any::<u8>(), 0..512)) {
                match parse_parts(&body) {
                    Ok(parts) => prop_assert!(parts.values().all(|v| (0.0..=MAX_VALUE).contains(v))),
                    Err(e) => prop_assert!(matches!(e, QueryError::Garbage(_))),
                }
            }

            #[test]
            fn accepted_values_are_in_range(body in answer()) {
                if let Ok(parts) = parse_parts(body.as_bytes()) {
                    for (name, v) in &parts {
                        prop_assert!(v.is_finite() && (0.0..=MAX_VALUE).contains(v), "{name}={v}");
                        if COUNT_PARTS.contains(&name.as_str()) {
                            prop_assert!(v.fract() == 0.0 && *v <= MAX_COUNT, "{name}={v}");
                        }
                    }
                }
            }
        }
    }
}
