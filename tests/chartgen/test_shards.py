"""`chartgen shards` on the real flux-aio Deployment and on variants real installations have."""
import copy

import pytest
import yaml

from conftest import FLUX_FIXTURE, chartgen, docs
from validate import validate_all


def flux():
    return yaml.safe_load(FLUX_FIXTURE.read_text())


def shards(tmp_path, deployment, *args):
    path = tmp_path / "flux.yaml"
    path.write_text(yaml.safe_dump(deployment))
    out = chartgen("shards", "--flux-deployment", path, *args)
    assert out.returncode == 0, out.stderr
    objs = docs(out.stdout)
    validate_all(objs)
    return objs


def helm_controller(d):
    [c] = d["spec"]["template"]["spec"]["containers"]
    assert c["name"] == "helm-controller"
    return c


def test_fixture_gives_sanitised_canonical_shards(tmp_path):
    objs = shards(tmp_path, flux(), "--count", "3")
    assert [o["metadata"]["name"] for o in objs] == ["helm-controller-shard0", "helm-controller-shard1",
                                                       "helm-controller-shard2"]
    for i, d in enumerate(objs):
        assert d["metadata"]["namespace"] == "cozy-fluxcd"
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"] == {"type": "Recreate"}
        pod = d["spec"]["template"]["spec"]
        assert pod["hostNetwork"] is False and pod["dnsPolicy"] == "ClusterFirst"
        assert "tolerations" not in pod and "podAntiAffinity" not in pod["affinity"]
        assert [v["name"] for v in pod["volumes"]] == ["tmp"]
        c = helm_controller(d)
        sel = [a for a in c["args"] if a.startswith("--watch-label-selector")]
        assert sel == [f"--watch-label-selector=sharding.fluxcd.io/key=shard{i}"]
        assert [a for a in c["args"] if a.startswith("--concurrent")] == ["--concurrent=5"]
        assert not [a for a in c["args"] if a.startswith("--events-addr")]
        assert {e["name"] for e in c["env"]} == {"RUNTIME_NAMESPACE", "GOMEMLIMIT", "TUF_ROOT"}
        assert c["startupProbe"]["failureThreshold"] == 30
        assert d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == f"helm-controller-shard{i}"


def test_variant_order_two_token_flags_env_and_no_host_network(tmp_path):
    d = flux()
    pod = d["spec"]["template"]["spec"]
    pod["containers"].reverse()
    del pod["hostNetwork"]
    hc = next(c for c in pod["containers"] if c["name"] == "helm-controller")
    hc["args"] = ["--watch-all-namespaces", "--watch-label-selector", "!sharding.fluxcd.io/key",
                  "--concurrent", "12", "--events-addr", "http://localhost:9690", "--log-level=debug"]
    hc["env"] += [{"name": "https_proxy", "value": "http://proxy:3128"}, {"name": "HTTP_PROXY", "value": "x"},
                  {"name": "no_proxy", "value": ".svc"}, {"name": "KUBERNETES_SERVICE_HOST", "value": "localhost"},
                  {"name": "KUBERNETES_SERVICE_PORT", "value": "7445"}, {"name": "EXTRA_FLAG", "value": "kept"}]
    objs = shards(tmp_path, d, "--count", "2", "--concurrent", "7", "--flux-namespace", "flux-system",
                  "--events-addr", "http://notification-controller.flux-system.svc",
                  "--source-controller-address", "source-controller.flux-system.svc:80")
    c = helm_controller(objs[1])
    assert c["args"] == ["--watch-all-namespaces", "--watch-label-selector=sharding.fluxcd.io/key=shard1",
                         "--concurrent=7", "--events-addr=http://notification-controller.flux-system.svc",
                         "--log-level=debug"]
    assert [e["name"] for e in c["env"]] == ["RUNTIME_NAMESPACE", "GOMEMLIMIT", "TUF_ROOT", "EXTRA_FLAG",
                                             "SOURCE_CONTROLLER_LOCALHOST"]
    assert objs[1]["metadata"]["namespace"] == "flux-system"
    assert objs[1]["spec"]["template"]["spec"]["hostNetwork"] is False


def test_auto_count_uses_autosizing(tmp_path):
    assert len(shards(tmp_path, flux(), "--count", "auto", "--helmreleases", "946", "--tenants", "128")) == 10
    assert len(shards(tmp_path, flux(), "--count", "auto", "--helmreleases", "5000", "--tenants", "3")) == 3
    out = chartgen("shards", "--flux-deployment", FLUX_FIXTURE, "--count", "auto")
    assert out.returncode != 0 and "--helmreleases" in out.stderr


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d["spec"]["template"]["spec"]["containers"].pop(2), "no 'helm-controller' container"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][2]["args"].append("--concurrent"), "--concurrent has no value"),
])
def test_bad_input_is_a_clear_error(tmp_path, mutate, message):
    d = copy.deepcopy(flux())
    mutate(d)
    path = tmp_path / "flux.yaml"
    path.write_text(yaml.safe_dump(d))
    out = chartgen("shards", "--flux-deployment", path, "--count", "1")
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert out.stdout == ""


def test_out_writes_into_a_chart_that_renders(tmp_path, helm):
    chart = tmp_path / "shards"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: shards\nversion: 0.1.0\n")
    out = chartgen("shards", "--flux-deployment", FLUX_FIXTURE, "--count", "2", "--out", chart)
    assert out.returncode == 0, out.stderr
    objs = helm.render(chart, keda=False)
    assert [o["metadata"]["name"] for o in objs] == ["helm-controller-shard0", "helm-controller-shard1"]
    assert chartgen("shards", "--flux-deployment", FLUX_FIXTURE, "--count", "1", "--out", tmp_path).returncode == 2
