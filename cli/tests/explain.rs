//! `scaler explain` as operators run it: the built binary against a real VictoriaMetrics.
//! These need `victoria-metrics` on PATH, so a bare `cargo test` leaves them out; the scaler suite
//! (tests/scaler/run.sh, after tests/lib/setup.sh installs it) runs them with `--ignored`.
mod common;

use std::process::Command;

use common::VictoriaMetrics;

const SERIES: &str = r#"
cnpg_pg_replication_in_recovery{namespace="shop",pod="orders-1"} 0
cnpg_pg_replication_in_recovery{namespace="shop",pod="orders-2"} 1
cnpg_pg_replication_in_recovery{namespace="shop",pod="orders-3"} 1
cnpg_backends_total{namespace="shop",pod="orders-2",datname="app",usename="app",application_name="x",state="active"} 30
cnpg_backends_total{namespace="shop",pod="orders-3",datname="app",usename="app",application_name="x",state="active"} 25
cnpg_backends_total{namespace="shop",pod="orders-1",datname="app",usename="app",application_name="x",state="active"} 500
"#;

fn explain(vm: &VictoriaMetrics, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_scaler"))
        .args([
            "explain",
            "--prometheus-url",
            &vm.url,
            "--namespace",
            "shop",
            "--cluster",
            "orders",
        ])
        .args(["--topology", "metrics"])
        .args(extra)
        .output()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs victoria-metrics on PATH: tests/scaler/run.sh runs it"]
async fn prints_the_decision_with_inputs_and_guards() {
    let vm = VictoriaMetrics::start().await;
    vm.import(SERIES, r#"cnpg_backends_total{namespace="shop"}"#)
        .await;

    let out = explain(
        &vm,
        &["--target", "10", "--max-replicas", "5", "--output", "json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 55 connections on replicas (the primary's 500 do not count) / 10 → 1 + 6 = 7, capped at 5.
    assert_eq!(json["observation"]["load"], 55.0);
    assert_eq!(json["decision"]["raw"], 7);
    assert_eq!(json["decision"]["desired"], 5);
    assert_eq!(json["decision"]["reason"], "max");
    assert_eq!(json["instance_series"], 3);
    assert_eq!(json["current_source"], "instance-series");
    assert_eq!(json["metric_value"], 50.0);
    assert_eq!(json["metric_name"], "cnpg-orders-readconnections");

    let out = explain(&vm, &["--target", "10", "--max-replicas", "9", "--dry-run"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("desired instances     3   reason: dry-run"),
        "{text}"
    );
    assert!(text.contains("recommended           7"), "{text}");
    assert!(
        text.contains("floor                 2 = max(minReplicas 2"),
        "{text}"
    );

    // The brake's window: the flag, the query over it, and the line that names it.
    let out = explain(
        &vm,
        &[
            "--target",
            "10",
            "--max-replicas",
            "9",
            "--max-replication-lag-seconds",
            "30",
            "--brake-window-seconds",
            "90",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("replica lag, 90s max"), "{text}");
    assert!(
        text.contains("max_over_time(cnpg_pg_replication_lag{") && text.contains("[90s]"),
        "{text}"
    );
}

#[tokio::test]
#[ignore = "needs victoria-metrics on PATH: tests/scaler/run.sh runs it"]
async fn invalid_flags_and_missing_clusters_fail_with_a_reason() {
    let vm = VictoriaMetrics::start().await;
    vm.import(SERIES, r#"cnpg_backends_total{namespace="shop"}"#)
        .await;
    let out = explain(&vm, &["--target", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"target\""));
    // No defaults of its own: what serve requires, explain requires (it once assumed a target
    // of 150 and maxReplicas 6, and answered 2 where serve answered 3).
    for (flags, key) in [
        (&["--max-replicas", "5"][..], "\"target\" is required"),
        (&["--target", "10"][..], "\"maxReplicas\" is required"),
    ] {
        let out = explain(&vm, flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(key), "{stderr}");
    }

    let out = Command::new(env!("CARGO_BIN_EXE_scaler"))
        .args([
            "explain",
            "--prometheus-url",
            &vm.url,
            "--namespace",
            "elsewhere",
            "--cluster",
            "orders",
        ])
        .args([
            "--topology",
            "metrics",
            "--target",
            "10",
            "--max-replicas",
            "5",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no instance series"));
}
