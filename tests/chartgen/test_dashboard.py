"""The package chart's Grafana dashboard, checked against what the binaries really export.

The dashboard is taken from the ConfigMap the chart renders (Helm 3 and 4) and checked for the shape
Grafana loads. Then the real binaries run: `scaler serve` in front of a real VictoriaMetrics holding
the scaler suite's CNPG data set, called like KEDA; `scaler webhook` and `scaler shard-controller`
against the webhook suite's in-memory Kubernetes API (kmock, a stand-in for kube-apiserver: enough
for placements, a move and a blocked move). Their /metrics pages are scraped twice, a minute apart
in sample time, and imported into VictoriaMetrics (/api/v1/import/prometheus). Every dashboard query
then runs there with its template variables substituted, and must return series carrying every
label its grouping and legend use."""
import hashlib
import json
import re
import subprocess
import sys
import time

from pathlib import Path

import pytest
import requests

from conftest import PACKAGE, REPO, TOOLS, one

sys.path[:0] = [str(REPO / "tests/scaler"), str(REPO / "tests/webhook")]  # their launchers and data
import promtext  # noqa: E402
import scenarios  # noqa: E402
from cnpg_series import render as cnpg_text  # noqa: E402
from keda import Keda, code_of, metadata  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import Proc, free_port, wait_until  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402
from webhook_harness import SCALER, Emulator, Webhook, hr, review  # noqa: E402

NS = "cozy-autoscaling"
FLUX = "cozy-fluxcd"
RATE_INTERVAL = "2m"  # what $__rate_interval becomes; the two scrapes are 60 s apart
METRIC = re.compile(r"\b(?:scaler|cozy_flux_shard)_[a-z_]+\b")


def dashboard_of(helm, sets=()):
    objs = helm.render(PACKAGE, ["monitoring.dashboard.enabled=true", *sets], keda=False, release=NS,
                       namespace=NS)
    cm = one(objs, "ConfigMap", "cozy-autoscaling-dashboard")
    [(key, text)] = cm["data"].items()
    assert key == "cozy-autoscaling.json"
    return cm, json.loads(text)


def grafana_check() -> Path:
    """The checker tests/chartgen/setup.sh built from tests/chartgen/grafana-check (same key)."""
    src = REPO / "tests/chartgen/grafana-check"
    key = hashlib.sha256(b"".join((src / f).read_bytes() for f in ("go.mod", "go.sum", "main.go"))).hexdigest()[:16]
    binary = TOOLS / "grafana-check" / key / "grafana-check"
    if not binary.exists():
        pytest.fail(f"{binary} missing: run tests/chartgen/setup.sh")
    return binary


def panels(dash):
    return [p for p in dash["panels"] if p["type"] != "row"]


def targets(dash):
    return [(p["title"], t) for p in panels(dash) for t in p["targets"]]


def test_dashboard_is_off_by_default_and_a_sidecar_configmap_when_on(helm):
    assert not [o for o in helm.render(PACKAGE, keda=False, release=NS, namespace=NS) if o["kind"] == "ConfigMap"]
    cm, _ = dashboard_of(helm)
    assert cm["metadata"]["namespace"] == NS
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "db"}
    cm, _ = dashboard_of(helm, ["monitoring.dashboard.namespace=monitoring",
                                "monitoring.dashboard.labels.grafana_dashboard=", "monitoring.dashboard.labels.team=dba"])
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["team"] == "dba"
    bad = helm.template(PACKAGE, ["monitoring.dashboard.enabled=true", "monitoring.dashboard.labels.grafana_dashboard=1"],
                        keda=False)
    assert bad.returncode != 0 and "grafana_dashboard" in bad.stderr, "an unquoted label value is refused"


def test_grafanas_own_model_accepts_the_dashboard(helm, tmp_path):
    """Grafana's Foundation SDK decodes it strictly (no missing required field, no unknown field,
    panel options and Prometheus queries by their plugins' models) and validates it; a copy with a
    stray field is refused, so the checker is not a rubber stamp."""
    cm, _ = dashboard_of(helm)
    path = tmp_path / "dashboard.json"
    path.write_text(cm["data"]["cozy-autoscaling.json"])
    out = subprocess.run([grafana_check(), path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    broken = json.loads(path.read_text())
    broken["panels"][1]["targets"][0]["exprr"] = broken["panels"][1]["targets"][0].pop("expr")
    path.write_text(json.dumps(broken))
    out = subprocess.run([grafana_check(), path], capture_output=True, text=True)
    assert out.returncode == 1 and "exprr" in out.stderr, out.stderr


def test_dashboard_has_the_shape_grafana_loads(helm):
    _, dash = dashboard_of(helm)
    assert dash["uid"] == "cozy-autoscaling" and len(dash["uid"]) <= 40
    assert dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
    for p in panels(dash):
        assert p["type"] in ("timeseries", "table", "stat"), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
    for name in ("namespace", "cluster"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    titles = " ".join(p["title"] for p in panels(dash))
    for wanted in ("desired", "reason", "target", "lag", "brake", "gRPC errors", "gRPC latency", "per shard",
                   "HPA desired vs current", "Errors per ScaledObject", "KEDA scaler errors"):
        assert wanted in titles, wanted


def test_dashboard_leads_with_a_headline_and_marks_its_limits(helm):
    """A row of stat panels first; counts drawn as steps; fixed limits (KEDA's 3 s, the query
    timeout, the webhook timeout, the rebalance threshold) drawn as threshold lines; load in the
    trigger metric's own unit."""
    _, dash = dashboard_of(helm)
    first = dash["panels"][0]
    assert first["type"] == "row" and first["gridPos"]["y"] == 0
    headline = [p for p in dash["panels"] if p["gridPos"]["y"] == 1]
    assert len(headline) >= 5 and {p["type"] for p in headline} == {"stat"}
    for p in headline:
        assert p["fieldConfig"]["defaults"]["thresholds"]["steps"][0] == {"color": "green", "value": None}
    by_title = {p["title"]: p for p in panels(dash)}

    def limit(title):
        defaults = by_title[title]["fieldConfig"]["defaults"]
        assert defaults["custom"]["thresholdsStyle"] == {"mode": "line"}, title
        return [s["value"] for s in defaults["thresholds"]["steps"][1:]]

    assert limit("gRPC latency") == [3]
    assert limit("Backend query latency") == [2]
    assert limit("Admission latency") == [5]
    assert limit("Imbalance") == [0.25]
    for title in ("Instances: desired, recommended, current", "Convergence holds", "Tenant HelmReleases per shard",
                  "Shard count", "HPA desired vs current replicas"):
        assert by_title[title]["fieldConfig"]["defaults"]["custom"]["lineInterpolation"] == "stepAfter", title
    assert by_title["Load per replica vs target"]["fieldConfig"]["defaults"]["unit"] == "none"


# --- against the real binaries ------------------------------------------------------------------


def with_timestamp(text: str, ms: int) -> str:
    """The scraped text with every sample stamped at `ms` (VictoriaMetrics takes Prometheus text
    timestamps in milliseconds)."""
    return "".join(f"{line} {ms}\n" for line in text.splitlines() if line and not line.startswith("#"))


def metrics_of(url: str) -> str:
    r = requests.get(url + "/metrics", timeout=5)
    r.raise_for_status()
    return r.text


class Stack:
    """VictoriaMetrics, the scaler, the webhook and the shard controller, with KEDA-like calls made."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.vm = VictoriaMetrics(str(tmp / "vm")).start()
        self.stopping = [self.vm.stop]
        self.vm.import_and_wait(
            cnpg_text(scenarios.BASE, time.time()),
            'count(cnpg_pg_replication_in_recovery{namespace="tenant-c",pod=~"busy-lag-[0-9]+"})',
            expect=lambda n: n == scenarios.LAG_CLUSTER_INSTANCES)
        self.scaler = Scaler(str(tmp), self.vm.url).start()
        self.stopping.append(self.scaler.stop)
        self.keda = Keda(self.scaler.address)
        self.stopping.append(self.keda.close)
        self.emulator = Emulator(tmp)
        self.stopping.append(self.emulator.stop)
        self.shards()
        self.webhook = Webhook(tmp, self.emulator, shards=3)
        self.stopping.append(self.webhook.stop)
        self.tmp = tmp

    def start_controller(self):
        """After the first round: the controller heals an unlabelled tenant namespace within its
        first sync, and had it labelled tenant-new first, the webhook (finding the label) would
        write none, and its label-write counter would never be exported (seen in a CI run)."""
        admin = free_port()
        self.controller_admin = f"http://127.0.0.1:{admin}"
        self.controller = Proc([str(SCALER), "shard-controller", "--shards", "3", "--flux-namespace", FLUX,
                                "--lease-namespace", FLUX, "--admin-listen", f"127.0.0.1:{admin}",
                                "--sync-interval", "1s", "--grace", "1s"],
                               self.tmp / "shard-controller.log", env={"KUBECONFIG": str(self.emulator.kubeconfig)})
        self.stopping.append(self.controller.stop)

    def shards(self):
        """Three ready shards; tenant-old sits on removed shard5 (the controller moves it);
        tenant-gone too, but one of its releases is being deleted (the move is blocked)."""
        for i in range(3):
            self.emulator.shard_deployment(FLUX, i, ready=1)
        self.emulator.namespace("tenant-new")
        self.emulator.namespace("tenant-old", "shard5")
        self.emulator.helmrelease("tenant-old", "pg", "shard5")
        self.emulator.namespace("tenant-gone", "shard5")
        self.emulator.helmrelease("tenant-gone", "pg", "shard5")
        deleting = hr("tenant-gone", "redis", {"sharding.fluxcd.io/key": "shard5"})
        deleting["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["helm"]})
        self.emulator.create("/apis/helm.toolkit.fluxcd.io/v2/namespaces/tenant-gone/helmreleases", deleting)

    def keda_round(self, i: int):
        """One polling round of four ScaledObjects (load, floor, brake engaged, idle-lag), plus one
        with invalid metadata (an InvalidArgument error)."""
        objects = [("tenant-a", "pg", {}), ("tenant-b", "quiet", {}),
                   ("tenant-c", "busy-lag", {"maxReplicationLagSeconds": "30"}),
                   ("tenant-c", "idle-lag", {"maxReplicationLagSeconds": "30"})]
        for ns, cluster, extra in objects:
            self.keda.scale_loop_poll(self.keda.ref(ns, f"so-{cluster}", metadata(cluster, target="2", **extra)))
        bad = self.keda.ref("tenant-a", "so-bad", metadata("pg", target="-1"))
        assert code_of(lambda: self.keda.spec(bad)).name == "INVALID_ARGUMENT"
        self.webhook.review(review("CREATE", "tenant-new", hr("tenant-new", f"app-{i}", {"sharding.fluxcd.io/key": "tenants"})))

    def scrape(self) -> dict:
        return {"scaler": metrics_of(self.scaler.admin), "webhook": metrics_of(self.webhook.admin),
                "shard-controller": metrics_of(self.controller_admin)}

    def stop(self):
        for stop in reversed(self.stopping):
            stop()


def standins(step: int) -> str:
    """Stand-ins for the series of kube-state-metrics and the KEDA operator (neither runs here) that
    the HPA and KEDA panels read, named and labelled as those exporters do (KEDA v2.21's
    pkg/metricscollector/prommetrics.go), for the scenario's ScaledObjects; `step` 0 or 1 makes
    the counters rise between the two scrapes."""
    lines = []
    for ns, so in (("tenant-a", "so-pg"), ("tenant-b", "so-quiet"), ("tenant-c", "so-busy-lag"), ("tenant-c", "so-idle-lag")):
        hpa = f'job="kube-state-metrics",namespace="{ns}",horizontalpodautoscaler="keda-hpa-{so}"'
        lines += [f"kube_horizontalpodautoscaler_status_desired_replicas{{{hpa}}} {3 + step}",
                  f"kube_horizontalpodautoscaler_status_current_replicas{{{hpa}}} 3",
                  f'keda_scaled_object_errors_total{{job="keda-operator",namespace="{ns}",scaledObject="{so}"}} {step}',
                  f'keda_scaler_detail_errors_total{{job="keda-operator",namespace="{ns}",scaledObject="{so}",scaler="externalScaler",'
                  f'triggerIndex="0",metric="s0-cnpg",type="scaledobject"}} {step}',
                  f'keda_scaler_metrics_latency_seconds{{job="keda-operator",namespace="{ns}",scaledObject="{so}",scaler="externalScaler",'
                  f'triggerIndex="0",metric="s0-cnpg",type="scaledobject"}} 0.004']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The VictoriaMetrics holding two scrapes of each binary, and the scraped texts."""
    stack = Stack(tmp_path_factory.mktemp("dashboard"))
    try:
        stack.keda_round(0)
        stack.start_controller()
        wait_until(lambda: 'cozy_flux_shard_moves_total{reason="shard_removed"}' in metrics_of(stack.controller_admin)
                   and "cozy_flux_shard_blocked_moves_total" in metrics_of(stack.controller_admin),
                   timeout=30, what="the shard controller's move and blocked move", proc=stack.controller)
        first = stack.scrape()
        stack.keda_round(1)
        # Rates need activity between the scrapes: the calls above are served from the cache, the
        # backend is asked by the next refresh tick.
        queried = lambda text: promtext.total(promtext.parse(text), "scaler_backend_query_duration_seconds_count")
        wait_until(lambda: queried(metrics_of(stack.scaler.admin)) > queried(first["scaler"]),
                   timeout=20, what="a refresh tick's backend query after the first scrape")
        second = stack.scrape()
        now_ms = int(time.time() * 1000)
        for texts, ms in ((first, now_ms - 60_000), (second, now_ms)):
            for job, text in texts.items():
                r = requests.post(f"{stack.vm.url}/api/v1/import/prometheus", params={"extra_label": f"job={job}"},
                                  data=with_timestamp(text, ms).encode(), timeout=30)
                r.raise_for_status()
        for ms, step in ((now_ms - 60_000, 0), (now_ms, 1)):
            r = requests.post(f"{stack.vm.url}/api/v1/import/prometheus", data=with_timestamp(standins(step), ms).encode(),
                              timeout=30)
            r.raise_for_status()
        requests.get(f"{stack.vm.url}/internal/force_flush", timeout=10).raise_for_status()
        wait_until(lambda: stack.vm.scalar('count(count_over_time(scaler_grpc_requests_total[2m]) >= 2)'),
                   timeout=20, what="both scrapes searchable")
        yield stack.vm, "\n".join(second.values())
    finally:
        stack.stop()


def label_values(vm, label, match):
    r = requests.get(f"{vm.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]


def substitute(expr: str, variables: dict) -> str:
    for name, value in variables.items():
        expr = expr.replace(f"${name}", value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def test_every_query_uses_exported_names_and_returns_data(helm, imported):
    vm, scraped = imported
    _, dash = dashboard_of(helm)
    exported = {line.split("{")[0].split(" ")[0] for line in scraped.splitlines() if line and not line.startswith("#")}

    # The variables' own queries (label_values(metric{...}, label)) run like Grafana runs them.
    variables = {"__rate_interval": RATE_INTERVAL}
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"]["query"])
        assert m, v["query"]["query"]
        match = substitute(m.group(1), variables)
        values = label_values(vm, m.group(2), match)
        assert values, f"variable {v['name']} has no values"
        variables[v["name"]] = "|".join(values)  # Grafana's multi-value "All" expansion
    assert {"tenant-a", "tenant-b", "tenant-c"} <= set(variables["namespace"].split("|"))
    assert {"pg", "quiet", "busy-lag", "idle-lag"} <= set(variables["cluster"].split("|"))

    results = {}
    for title, t in targets(dash):
        for name in METRIC.findall(t["expr"]):
            assert name in exported, f"{title}: {name} is not exported by any binary"
        result = vm.query(substitute(t["expr"], variables))
        assert result, f"{title} ({t['refId']}) returned no data: {t['expr']}"
        # An outer aggregation without `by` (the headline's counts) leaves no labels to check.
        outer_total = re.match(r"\s*(count|sum|max|min|avg)\s*\(", t["expr"])
        grouping = [] if outer_total else re.findall(r"by \(([^)]*)\)", t["expr"])
        needed = {label.strip() for g in grouping for label in g.split(",")} - {"le"}
        needed |= set(re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")))
        for series in result:
            missing = needed - set(series["metric"])
            assert not missing, f"{title} ({t['refId']}): series {series['metric']} lack {missing}"
        results[(title, t["refId"])] = [s["metric"] for s in result]

    # What the panels show is what the scenario did.
    reasons = {(m["namespace"], m["cluster"]): m["reason"] for m in results[("Current reason", "A")]}
    assert reasons[("tenant-c", "busy-lag")] == "brake" and reasons[("tenant-a", "pg")] == "load"
    brakes = {(m["namespace"], m["cluster"]): m["state"] for m in results[("Lag brake state", "A")]}
    # The idle primary's lag is discounted by the scaler's query, so that brake reads clear.
    assert brakes[("tenant-c", "busy-lag")] == "engaged" and brakes[("tenant-c", "idle-lag")] == "clear"
    assert brakes[("tenant-a", "pg")] == "off"
    assert {"code": "InvalidArgument", "rpc": "GetMetricSpec"} in [
        {"code": m["code"], "rpc": m["rpc"]} for m in results[("gRPC errors", "A")]]
    assert {m["shard"] for m in results[("Tenant HelmReleases per shard", "A")]} == {"shard0", "shard1", "shard2"}
    assert {m["reason"] for m in results[("Tenant moves", "A")]} == {"shard_removed"}
    assert {m["reason"] for m in results[("Tenant moves", "B")]} == {"deleting"}


def test_alert_rules_and_their_unit_tests_use_exported_names(helm, imported):
    """Every scaler_* / cozy_flux_shard_* name in the chart's rules and in test_alerts.py's input
    series is one the binaries export (`up` and kube-state-metrics' HPA series come from the scraper)."""
    import test_alerts

    _, scraped = imported
    exported = {line.split("{")[0].split(" ")[0] for line in scraped.splitlines() if line and not line.startswith("#")}
    objs = helm.render(PACKAGE, keda=False, release=NS, namespace=NS)
    exprs = [r["expr"] for o in objs if o["kind"] == "PrometheusRule" for g in o["spec"]["groups"] for r in g["rules"]]
    series = [s for case in test_alerts.CASES.values() for s, _ in case["series"] + case["harmless"]]
    used = {name for text in exprs + series for name in METRIC.findall(text)}
    assert used, "no names found: the pattern is broken"
    assert used <= exported, f"not exported by any binary: {sorted(used - exported)}"
