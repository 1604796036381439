"""The charts of this repository the e2e suite installs (charts/, rendered by chartgen); helm itself
is tests/lib/helm.py, pointed at the rig's apiserver."""

from __future__ import annotations

from pathlib import Path

import yaml

from rig import REPO

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
