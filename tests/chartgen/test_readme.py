"""The package chart's README and NOTES: the values table is current with values.yaml's `# --`
comments and describes every key; the notes helm prints say what was installed, how to verify and
where the dashboard is, following the values."""
import subprocess
import sys

import pytest

from conftest import PACKAGE, REPO, Helm

import values_table

NS = "cozy-autoscaling"


def test_values_table_is_current_and_complete(tmp_path):
    out = subprocess.run([sys.executable, REPO / "tests/chartgen/values_table.py", "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    values = (PACKAGE / "values.yaml").read_text()
    rows = values_table.rows(values)
    assert [k for k, _, d in rows if not d] == [], "every value needs a `# --` comment"
    keys = {k for k, _, _ in rows}
    assert {"scaler.replicas", "scaler.extraEnv", "monitoring.alerts.runbookBaseUrl", "image.digest"} <= keys
    # A value added without regenerating is noticed.
    stale = values.replace("clusterDomain: cluster.local", "clusterDomain: cluster.local\n# -- New.\nnewKey: 1")
    readme = (PACKAGE / "README.md").read_text()
    assert values_table.current(readme, stale) != readme


@pytest.fixture
def helm4(helm_home):
    """Helm 4 only: Helm 3's `install --dry-run=client` still asks a cluster for its version."""
    return Helm(helm_home, 4)


def notes(helm, sets=()):
    out = helm.run("install", NS, PACKAGE, "--dry-run=client", "--namespace", NS, *[a for s in sets for a in ("--set", s)])
    assert out.returncode == 0, out.stderr
    return out.stdout.split("NOTES:", 1)[1]


def test_notes_say_what_was_installed_how_to_verify_and_where_the_dashboard_is(helm4):
    helm = helm4
    text = notes(helm)
    assert f"installed in namespace {NS}" in text and "mTLS with KEDA" in text
    assert "shard-placement webhook" in text and "1 helm-controller shard(s)" in text
    assert "kubectl -n cozy-autoscaling get deploy,pods -l app.kubernetes.io/instance=cozy-autoscaling" in text
    assert "set monitoring.dashboard.enabled=true" in text
    on = notes(helm, ["monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace=grafana",
                      "webhook.enabled=false", "scaler.tls.enabled=false"])
    assert "ConfigMap cozy-autoscaling-dashboard in grafana" in on and "plaintext gRPC" in on
    assert "shard-placement webhook" not in on
