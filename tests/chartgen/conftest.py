"""Shared helpers for the chartgen suite: real helm 3 and helm 4 (tests/lib/helm.py), the chartgen
binary, and schema validation of every rendered object."""
import shutil
import subprocess
from pathlib import Path

import pytest

from helm import MAJORS, Helm, binary_path, docs  # noqa: F401 (docs re-exported to the tests)
from testkit import FLUX_AIO_FIXTURE as FLUX_FIXTURE, TOOLS, cargo_bin  # noqa: F401 (re-exported to the tests)
from validate import validate_all

REPO = Path(__file__).resolve().parents[2]
HELMS = {f"helm{m}": binary_path(m) for m in MAJORS}
CHARTGEN = cargo_bin("chartgen")
EXAMPLE = REPO / "charts/example-postgres"
PRISTINE = REPO / "tests/chartgen/fixtures/example-postgres"
PACKAGE = REPO / "charts/cozy-autoscaling"


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory):
    return tmp_path_factory.mktemp("helm-home")


class ValidatingHelm(Helm):
    """tests/lib/helm.py's Helm whose render also validates every object against its schema."""

    def render(self, chart, sets=(), keda=True, **kw):
        objs = super().render(chart, sets, keda, **kw)
        validate_all(objs)
        return objs


@pytest.fixture(params=[pytest.param(m, id=f"helm{m}") for m in MAJORS])
def helm(request, helm_home):
    return ValidatingHelm(helm_home, request.param)


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
