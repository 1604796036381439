"""The charts of this repository the e2e suite installs (charts/, rendered by chartgen); helm itself
is tests/lib/helm.py, pointed at the rig's apiserver."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from rig import REPO
from testkit import cargo_bin

PACKAGE_CHART = REPO / "charts/cozy-autoscaling"


def example_chart() -> Path:
    """The example app chart `chartgen app` was applied to: a chart with an autoscaling block."""
    for chart in sorted((REPO / "charts").glob("*/Chart.yaml")):
        values = chart.parent / "values.yaml"
        if chart.parent != PACKAGE_CHART and values.is_file() and "autoscaling" in (
                yaml.safe_load(values.read_text()) or {}):
            return chart.parent
    raise AssertionError("no example app chart with an autoscaling block under charts/: run chartgen package")


def package_chart() -> Path:
    assert (PACKAGE_CHART / "Chart.yaml").is_file(), f"{PACKAGE_CHART} is missing: run chartgen package"
    return PACKAGE_CHART


def redis_chart(workdir: Path) -> Path:
    """tests/chartgen/fixtures/redis (shaped like Cozystack's Redis app) after `chartgen app` (the
    ScaleAdapter, the ScaledObject and the live count of spec.redis.replicas), in `workdir`."""
    chart = workdir / "redis-chart"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(REPO / "tests/chartgen/fixtures/redis", chart)
    r = subprocess.run([cargo_bin("chartgen"), "app", "--chart", chart], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return chart
