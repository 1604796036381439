"""Every alert the package renders, unit-tested with Prometheus' own `promtool test rules` (Debian's
prometheus package, tests/chartgen/setup.sh): for each rule, series shaped as the binaries export
them and the chart's honorLabels scrape stores them (the tenant's `namespace` kept; `job`, `pod` from
the target) make it fire with the expected labels and annotations, and it stays quiet before its
`for` or on the harmless variant. test_dashboard.py checks that every series name used here and in
the rules is one a binary really exports. Every rule links its runbook in docs/runbooks."""
import shutil
import subprocess

import pytest
import yaml

from conftest import PACKAGE, REPO

NS = "cozy-autoscaling"
BASE = "https://github.com/cozystack/cozy-autoscaling/blob/main/docs/runbooks"
RUNBOOKS = REPO / "docs/runbooks"
SCALER = f'job="cozy-autoscaling-scaler", namespace="{NS}", pod="cozy-autoscaling-scaler-1"'
OBJECT = 'job="cozy-autoscaling-scaler", pod="cozy-autoscaling-scaler-1", namespace="tenant-a", scaledobject="so-pg", cluster="pg"'
OBJECT_LABELS = {"namespace": "tenant-a", "scaledobject": "so-pg", "cluster": "pg"}
CONTROLLER = f'job="cozy-autoscaling-shard-controller", namespace="{NS}"'
HPA = 'job="kube-state-metrics", namespace="tenant-a", horizontalpodautoscaler="keda-hpa-so-pg"'

# alert: (input series, eval time it fires at, its labels there (severity added), its description,
# eval time it is still quiet at, and series of a variant that must never fire).
CASES = {
    "CozyAutoscalerScalerAbsent": dict(
        series=[(f"up{{{SCALER}}}", "1x5 0x20")], fires=("14m", {}), quiet="9m",
        description=f"No cozy-autoscaling-scaler target in {NS} has been scraped up for 5 minutes; KEDA "
                    "cannot get decisions and databases no longer scale.",
        harmless=[(f"up{{{SCALER}}}", "0x5 1x20"), (f'up{{job="cozy-autoscaling-scaler", namespace="{NS}", pod="x"}}', "1x25")]),
    "CozyAutoscalerScalerErrors": dict(
        series=[(f'scaler_grpc_requests_total{{{SCALER}, rpc="GetMetricSpec", code="InvalidArgument"}}', "0+1x40")],
        fires=("20m", {"namespace": NS, "pod": "cozy-autoscaling-scaler-1"}), quiet="10m",
        description="Scaler pod cozy-autoscaling-scaler-1 has failed metric queries or gRPC calls for 15 minutes; "
                    "scaling holds at the current count.",
        harmless=[(f'scaler_grpc_requests_total{{{SCALER}, rpc="GetMetrics", code="NotFound"}}', "0+1x40"),
                  (f'scaler_backend_queries_total{{{SCALER}, query="decision", outcome="ok"}}', "0+1x40")]),
    "CozyAutoscalerScaleUpStuck": dict(
        series=[(f"kube_horizontalpodautoscaler_status_desired_replicas{{{HPA}}}", "4x30"),
                (f"kube_horizontalpodautoscaler_status_current_replicas{{{HPA}}}", "3x30")],
        fires=("20m", {"job": "kube-state-metrics", "namespace": "tenant-a", "horizontalpodautoscaler": "keda-hpa-so-pg"}),
        quiet="10m",
        description="tenant-a/keda-hpa-so-pg wants more instances than run for 15 minutes; check Pending pods, "
                    "quota and storage.",
        harmless=[(f"kube_horizontalpodautoscaler_status_desired_replicas{{{HPA}}}", "3x30"),
                  (f"kube_horizontalpodautoscaler_status_current_replicas{{{HPA}}}", "3x30")]),
    "CozyAutoscalerPinnedAtMax": dict(
        series=[(f'scaler_decision_reason{{{OBJECT}, reason="max"}}', "1x40")], fires=("35m", OBJECT_LABELS),
        quiet="20m", description="tenant-a/pg has been held at maxReplicas for 30 minutes.",
        harmless=[(f'scaler_decision_reason{{{OBJECT}, reason="max"}}', "0x40"),
                  (f'scaler_decision_reason{{{OBJECT}, reason="load"}}', "1x40")]),
    "CozyAutoscalerConvergenceHeld": dict(
        series=[(f"scaler_decision_convergence_backoff{{{OBJECT}}}", "2x20")], fires=("15m", OBJECT_LABELS),
        quiet="5m",
        description="tenant-a/pg has had fewer ready instances than spec.instances past the convergence deadline "
                    "(back-off hold 2); check Pending pods and PVCs.",
        harmless=[(f"scaler_decision_convergence_backoff{{{OBJECT}}}", "0x20")]),
    "CozyAutoscalerQuotaCapped": dict(
        series=[(f'scaler_decision_reason{{{OBJECT}, reason="quota"}}', "1x20")], fires=("20m", OBJECT_LABELS),
        quiet="10m",
        description="tenant-a/pg is capped by a ResourceQuota for 15 minutes; raise the quota or the target "
                    "(scaler explain shows the binding resource).",
        harmless=[(f'scaler_decision_reason{{{OBJECT}, reason="quota"}}', "0x20")]),
    "CozyAutoscalerBrakeHeld": dict(
        series=[(f'scaler_decision_brake{{{OBJECT}, state="engaged"}}', "1x40")], fires=("35m", OBJECT_LABELS),
        quiet="20m",
        description="tenant-a/pg has had its lag brake engaged for 30 minutes: a replica lags past "
                    "maxReplicationLagSeconds while the primary writes; check the replicas' lag and I/O.",
        harmless=[(f'scaler_decision_brake{{{OBJECT}, state="engaged"}}', "0x40"),
                  (f'scaler_decision_brake{{{OBJECT}, state="idle-lag"}}', "1x40")]),
    "CozyFluxShardStrandedTenants": dict(
        series=[(f'cozy_flux_shard_stranded_tenants{{{CONTROLLER}, pod="c-1"}}', "2x20"),
                (f'cozy_flux_shard_stranded_tenants{{{CONTROLLER}, pod="c-2"}}', "1x20")],
        fires=("20m", {}), quiet="10m",
        description="2 tenant(s) have been on a removed or failed shard for 15 minutes; check "
                    "cozy_flux_shard_blocked_moves_total (deleting or mid-upgrade releases) and that some shard is ready.",
        harmless=[(f'cozy_flux_shard_stranded_tenants{{{CONTROLLER}, pod="c-1"}}', "0x20")]),
    "CozyFluxShardControllerNoLeader": dict(
        series=[(f'cozy_flux_shard_leader{{{CONTROLLER}, pod="c-1"}}', "0x20"),
                (f'cozy_flux_shard_leader{{{CONTROLLER}, pod="c-2"}}', "0x20")],
        fires=("15m", {}), quiet="5m",
        description="No shard-controller replica has held its Lease for 10 minutes; check its pods and their "
                    "access to Leases.",
        harmless=[(f'cozy_flux_shard_leader{{{CONTROLLER}, pod="c-1"}}', "0x20"),
                  (f'cozy_flux_shard_leader{{{CONTROLLER}, pod="c-2"}}', "1x20")]),
    "CozyFluxShardCountMismatch": dict(
        series=[(f"cozy_flux_shard_recommended_shards{{{CONTROLLER}}}", "3x400"),
                (f"cozy_flux_shard_configured_shards{{{CONTROLLER}}}", "2x400")],
        fires=("370m", {}), quiet="300m",
        description="For 6 hours the tenant HelmRelease count has recommended 3 shards (ceil(H/100), capped at 16 "
                    "and the tenant count, with hysteresis); set shards.count to follow it (`scaler shards plan` "
                    "shows the numbers).",
        harmless=[(f"cozy_flux_shard_recommended_shards{{{CONTROLLER}}}", "2x400"),
                  (f"cozy_flux_shard_configured_shards{{{CONTROLLER}}}", "2x400")]),
    "CozyFluxShardWebhookErrors": dict(
        series=[(f'cozy_flux_shard_admissions_total{{job="cozy-autoscaling-webhook", namespace="{NS}", '
                 'reason="no_ready_shard"}', "0+60x30")],
        fires=("20m", {"reason": "no_ready_shard"}), quiet="5m",
        description="For 10 minutes the webhook has answered reviews with reason no_ready_shard (1/s): no ready "
                    "shard, failed API calls or its deadline; those releases are left to the shard controller.",
        harmless=[(f'cozy_flux_shard_admissions_total{{job="cozy-autoscaling-webhook", namespace="{NS}", '
                   'reason="stamped"}', "0+60x30"),
                  (f'cozy_flux_shard_admissions_total{{job="cozy-autoscaling-webhook", namespace="{NS}", '
                   'reason="not_synced"}', "0+60x30")]),
}


def rendered_rules(helm, sets=()):
    objs = helm.render(PACKAGE, sets, keda=False, release=NS, namespace=NS)
    return [o for o in objs if o["kind"] == "PrometheusRule"]


def alerts_of(rules):
    return {r["alert"]: r for o in rules for g in o["spec"]["groups"] for r in g["rules"]}


def promtool():
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool missing: run tests/chartgen/setup.sh (Debian's prometheus package)")
    return binary


def unit_tests(alert, rule, case) -> list[dict]:
    def series(pairs):
        return [{"series": s, "values": v} for s, v in pairs]

    at, labels = case["fires"]
    expected = {"exp_labels": {**labels, **rule["labels"]},
                "exp_annotations": {"runbook_url": f"{BASE}/{alert}.md", "summary": rule["annotations"]["summary"],
                                    "description": case["description"]}}
    return [
        {"interval": "1m", "input_series": series(case["series"]), "alert_rule_test": [
            {"eval_time": case["quiet"], "alertname": alert, "exp_alerts": []},
            {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}]},
        {"interval": "1m", "input_series": series(case["harmless"]), "alert_rule_test": [
            {"eval_time": at, "alertname": alert, "exp_alerts": []}]},
    ]


def test_every_rule_fires_as_specified_under_promtool(helm, tmp_path):
    rules = rendered_rules(helm)
    alerts = alerts_of(rules)
    assert set(alerts) == set(CASES), "each rule needs a case here, each case a rule"
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [g for o in rules for g in o["spec"]["groups"]]}))
    out = subprocess.run([promtool(), "check", "rules", rule_file], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    tests = [t for alert, case in CASES.items() for t in unit_tests(alert, alerts[alert], case)]
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rule_file.name], "evaluation_interval": "1m", "tests": tests}))
    out = subprocess.run([promtool(), "test", "rules", spec], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_wrong_expectation_fails_promtool(helm, tmp_path):
    """The harness is no rubber stamp: the same run with one expected label changed fails."""
    rules = rendered_rules(helm)
    alerts = alerts_of(rules)
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [g for o in rules for g in o["spec"]["groups"]]}))
    alert = "CozyAutoscalerBrakeHeld"
    case = {**CASES[alert], "fires": (CASES[alert]["fires"][0], {**OBJECT_LABELS, "namespace": NS})}
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rule_file.name], "evaluation_interval": "1m",
                                    "tests": unit_tests(alert, alerts[alert], case)}))
    out = subprocess.run([promtool(), "test", "rules", spec], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "FAILED" in out.stdout + out.stderr


def test_every_rule_links_its_runbook(helm):
    alerts = alerts_of(rendered_rules(helm))
    for name, rule in alerts.items():
        assert rule["annotations"]["runbook_url"] == f"{BASE}/{name}.md", name
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
    assert {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"} == set(alerts), "one runbook per alert"
    for name in alerts:
        text = (RUNBOOKS / f"{name}.md").read_text()
        assert text.startswith(f"# {name}\n"), name
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in text, (name, section)
    moved = alerts_of(rendered_rules(helm, ["monitoring.alerts.runbookBaseUrl=https://wiki.example/rb/"]))
    assert moved["CozyAutoscalerScalerAbsent"]["annotations"]["runbook_url"] == "https://wiki.example/rb/CozyAutoscalerScalerAbsent.md"


def test_rule_labels_and_interval_are_settable(helm):
    rules = rendered_rules(helm, ["monitoring.alerts.labels.release=kube-prometheus-stack",
                                  "monitoring.alerts.interval=30s"])
    assert len(rules) == 3
    for o in rules:
        assert o["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert {g["interval"] for g in o["spec"]["groups"]} == {"30s"}
    assert all("interval" not in g for o in rendered_rules(helm) for g in o["spec"]["groups"])
    names = {o["metadata"]["name"] for o in rendered_rules(helm, ["webhook.enabled=false", "shardController.enabled=false"])}
    assert names == {"cozy-autoscaling"}
