"""The package's scrape objects keep the tenants' labels through a real scraper.

The chart renders a ServiceMonitor or a VMServiceScrape per component. Here the real `scaler serve`
answers KEDA-like calls in front of a real VictoriaMetrics holding the scaler suite's CNPG data set
(two tenants own a cluster named `pg`); a real `vmagent` (Debian's victoria-metrics package) scrapes
its admin /metrics with the scrape config prometheus-operator and the VictoriaMetrics operator
generate for the rendered object (target labels `namespace` = the package's namespace, `service`,
`pod`, `container`, `endpoint`, `job` = the Service's name; `honor_labels` as the object says) and
remote-writes into a second VictoriaMetrics. The dashboard's and the alerts' queries must then
answer per tenant namespace. The same scrape without honorLabels is run too, and must lose the
tenants (they land in `exported_namespace`), so this test can tell the two apart.
"""
import re
import shutil
import sys
import time

import pytest
import requests
import yaml

from conftest import PACKAGE, REPO, one
from test_dashboard import dashboard_of, label_values, substitute, targets

sys.path[:0] = [str(REPO / "tests/scaler")]  # the scaler suite's launchers and data
import scenarios  # noqa: E402
from cnpg_series import render as cnpg_text  # noqa: E402
from keda import Keda, code_of, metadata  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import Proc, free_port, wait_until  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

NS = "cozy-autoscaling"
SCALER = "cozy-autoscaling-scaler"
POD = f"{SCALER}-5d8f7c9b4-x2k7q"
# (namespace, ScaledObject, cluster, extra trigger metadata): two tenants each own a `pg`.
OBJECTS = [("tenant-a", "so-pg", "pg", {}), ("tenant-a-dev", "so-pg", "pg", {}),
           ("tenant-b", "so-quiet", "quiet", {}),
           ("tenant-c", "so-busy-lag", "busy-lag", {"maxReplicationLagSeconds": "30"})]
TENANTS = {ns for ns, _, _, _ in OBJECTS}


def scrape_config(obj, address: str) -> dict:
    """The scrape job an operator generates for the object's first endpoint, with the target
    labels its relabelling derives from Kubernetes service discovery set as constants."""
    [endpoint] = obj["spec"]["endpoints"]
    prefix = "serviceMonitor" if obj["kind"] == "ServiceMonitor" else "serviceScrape"
    service = obj["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
    target_labels = {"namespace": NS, "service": service, "pod": POD, "container": "scaler",
                     "endpoint": endpoint["port"], "job": service}
    return {
        "job_name": f"{prefix}/{NS}/{obj['metadata']['name']}/0",
        "honor_labels": endpoint.get("honorLabels", False),
        "scrape_interval": "1s",
        "metrics_path": endpoint.get("path", "/metrics"),
        "static_configs": [{"targets": [address]}],
        "relabel_configs": [{"target_label": k, "replacement": v} for k, v in target_labels.items()],
    }


class Scraped:
    """A VictoriaMetrics written to by a vmagent that scrapes the scaler with one scrape job."""

    def __init__(self, tmp, job: dict):
        self.vm = VictoriaMetrics(str(tmp / "vm")).start()
        config = tmp / "scrape.yaml"
        config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
        binary = shutil.which("vmagent")
        assert binary, "vmagent missing: Debian's victoria-metrics package ships it (tests/lib/setup.sh)"
        self.agent = Proc([binary, f"-promscrape.config={config}", f"-remoteWrite.url={self.vm.url}/api/v1/write",
                           f"-remoteWrite.tmpDataPath={tmp / 'agent'}", f"-httpListenAddr=127.0.0.1:{free_port()}",
                           "-remoteWrite.flushInterval=200ms", "-loggerLevel=WARN"], tmp / "vmagent.log")

    def wait_for(self, promql: str, what: str):
        def visible():
            assert self.agent.alive(), self.agent.tail()
            requests.get(f"{self.vm.url}/internal/force_flush", timeout=5).raise_for_status()
            return self.vm.query(promql)
        return wait_until(visible, 30, 0.3, what)

    def stop(self):
        self.agent.stop()
        self.vm.stop()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The input VictoriaMetrics and the scaler in front of it, with a KEDA client."""
    tmp = tmp_path_factory.mktemp("scrape-source")
    vm = VictoriaMetrics(str(tmp / "vm")).start()
    vm.import_and_wait(cnpg_text(scenarios.BASE, time.time()),
                       'count(cnpg_pg_replication_in_recovery{namespace="tenant-c",pod=~"busy-lag-[0-9]+"})',
                       expect=lambda n: n == scenarios.LAG_CLUSTER_INSTANCES)
    scaler = Scaler(str(tmp), vm.url).start()
    keda = Keda(scaler.address)
    try:
        yield scaler, keda
    finally:
        keda.close()
        scaler.stop()
        vm.stop()


def keda_round(keda):
    for ns, name, cluster, extra in OBJECTS:
        keda.scale_loop_poll(keda.ref(ns, name, metadata(cluster, target="2", **extra)))
    bad = keda.ref("tenant-a", "so-bad", metadata("pg", target="-1"))
    assert code_of(lambda: keda.spec(bad)).name == "INVALID_ARGUMENT"


def scrape_object(helm, kind):
    objs = helm.render(PACKAGE, [f"monitoring.scrape={kind}"], keda=False, release=NS, namespace=NS)
    return one(objs, kind, SCALER), objs


def scraped(tmp_path, source, obj, honor_labels=None) -> Scraped:
    """vmagent scraping the scaler as the operators would for `obj` (honor_labels overridden
    when given), after one KEDA round; returns once a second round's errors are stored."""
    scaler, keda = source
    job = scrape_config(obj, scaler.admin.removeprefix("http://"))
    if honor_labels is not None:
        job["honor_labels"] = honor_labels
    s = Scraped(tmp_path, job)
    try:
        keda_round(keda)
        errors = 'sum(scaler_grpc_requests_total{code="InvalidArgument"})'
        [first] = s.wait_for(errors, "vmagent's first scrape of the scaler")
        # Errors after a scrape: the error alert's rate() needs the counter to rise in its window.
        keda_round(keda)
        s.wait_for(f"{errors} > {first['value'][1]}", "the second round scraped")
        return s
    except BaseException:
        s.stop()
        raise


def one_target(dash, title):
    [t] = [t for panel_title, t in targets(dash) if panel_title == title]
    return t


def rules_of(objs) -> dict:
    return {r["alert"]: r for o in objs if o["kind"] == "PrometheusRule"
            for g in o["spec"]["groups"] for r in g["rules"]}


@pytest.mark.parametrize("kind", ["ServiceMonitor", "VMServiceScrape"])
def test_tenant_labels_survive_the_scrape(helm, tmp_path, source, kind):
    obj, objs = scrape_object(helm, kind)
    s = scraped(tmp_path, source, obj)
    try:
        vm = s.vm
        assert not vm.query('count({exported_namespace!=""})'), "a scraped label was renamed"
        # The dashboard's namespace picker lists the tenants, not the package's namespace.
        _, dash = dashboard_of(helm)
        [picker] = [v for v in dash["templating"]["list"] if v["name"] == "namespace"]
        match, label = re.fullmatch(r"label_values\((.+), (\w+)\)", picker["query"]["query"]).groups()
        assert set(label_values(vm, label, match)) == TENANTS

        # Every per-cluster panel, asked for one tenant, answers for that tenant only (some
        # series, like lag, exist only for some tenants); the two clusters named `pg` stay apart.
        variables = {"__rate_interval": "1m", "cluster": ".*"}
        for title, t in targets(dash):
            # The scaler's per-tenant panels: not the headline's totals (count(...), no labels
            # left), nor the HPA and KEDA panels (kube-state-metrics' and KEDA's series).
            if ("$namespace" not in t["expr"] or not re.search(r"\bscaler_", t["expr"])
                    or re.match(r"\s*count\s*\(", t["expr"])):
                continue
            answered = set()
            for ns in TENANTS:
                result = vm.query(substitute(t["expr"], {**variables, "namespace": ns}))
                assert {r["metric"]["namespace"] for r in result} <= {ns}, title
                answered |= {ns} if result else set()
            assert answered, f"{title} ({t['refId']}) answers for no tenant"
        reasons = vm.query(substitute(one_target(dash, "Current reason")["expr"],
                                      {**variables, "namespace": "|".join(TENANTS)}))
        assert {r["metric"]["namespace"] for r in reasons} == TENANTS
        desired = vm.query('scaler_decision_desired_instances{cluster="pg"}')
        assert {r["metric"]["namespace"] for r in desired} == {"tenant-a", "tenant-a-dev"}

        # The scaler's own series carry the target's labels: the package namespace and the pod.
        rules = rules_of(objs)
        errors = vm.query(rules["CozyAutoscalerScalerErrors"]["expr"])
        assert [(r["metric"]["namespace"], r["metric"]["pod"]) for r in errors] == [(NS, POD)]
        assert not vm.query(rules["CozyAutoscalerScalerAbsent"]["expr"]), "the scaler is up, yet absent"
        brake = vm.query(rules["CozyAutoscalerBrakeHeld"]["expr"])
        assert [(r["metric"]["namespace"], r["metric"]["cluster"]) for r in brake] == [("tenant-c", "busy-lag")]
    finally:
        s.stop()


def test_without_honor_labels_the_tenants_are_lost(helm, tmp_path, source):
    """The control: the same scrape with honor_labels off (what the chart did before) files every
    decision under the package's namespace, which the dashboard and alerts cannot use."""
    obj, _ = scrape_object(helm, "ServiceMonitor")
    s = scraped(tmp_path, source, obj, honor_labels=False)
    try:
        assert set(label_values(s.vm, "namespace", "scaler_decision_desired_instances")) == {NS}
        assert set(label_values(s.vm, "exported_namespace", "scaler_decision_desired_instances")) == TENANTS
    finally:
        s.stop()
