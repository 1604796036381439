"""Shared helpers for the chartgen suite: real helm 3 and helm 4, the chartgen binary, and
schema validation of every rendered object."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit import FLUX_AIO_FIXTURE as FLUX_FIXTURE  # noqa: F401 (re-exported to the tests)
from validate import validate_all

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("COZY_TOOLS", Path.home() / ".cache/cozy-autoscaling"))
HELMS = {"helm3": TOOLS / "helm3/helm", "helm4": TOOLS / "helm4/helm"}
CHARTGEN = Path(os.environ.get("CHARTGEN_BIN", REPO / "target/debug/chartgen"))
EXAMPLE = REPO / "charts/example-postgres"
PRISTINE = REPO / "tests/chartgen/fixtures/example-postgres"
PACKAGE = REPO / "charts/cozy-autoscaling"


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory):
    return tmp_path_factory.mktemp("helm-home")


class Helm:
    def __init__(self, name, binary, home):
        self.name, self.binary, self.home = name, binary, home

    def run(self, *args):
        env = dict(os.environ, HOME=str(self.home), HELM_CACHE_HOME=str(self.home / "cache"),
                   HELM_CONFIG_HOME=str(self.home / "config"), HELM_DATA_HOME=str(self.home / "data"))
        return subprocess.run([str(self.binary), *map(str, args)], capture_output=True, text=True, env=env)

    def template(self, chart, sets=(), keda=True, release="pg", namespace="tenant-a", kube_version=None):
        args = ["template", release, chart, "--namespace", namespace]
        if kube_version:
            args += ["--kube-version", kube_version]
        for s in sets:
            args += ["--set", s]
        if keda:
            args += ["--api-versions", "keda.sh/v1alpha1"]
        return self.run(*args)

    def render(self, chart, sets=(), keda=True, **kw):
        """Renders, asserts success, validates every object, returns the parsed objects."""
        out = self.template(chart, sets, keda, **kw)
        assert out.returncode == 0, f"{self.name} template failed: {out.stderr}"
        objs = docs(out.stdout)
        validate_all(objs)
        return objs


@pytest.fixture(params=sorted(HELMS))
def helm(request, helm_home):
    binary = HELMS[request.param]
    if not binary.exists():
        pytest.fail(f"{binary} missing: run tests/chartgen/setup.sh")
    return Helm(request.param, binary, helm_home)


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def chartgen(*args):
    return subprocess.run([str(CHARTGEN), *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def chart_copy(tmp_path):
    """A pristine copy of the example chart, before chartgen app."""
    dst = tmp_path / "example-postgres"
    shutil.copytree(PRISTINE, dst)
    return dst
