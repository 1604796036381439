"""The real helm binary (installed by tests/chartgen/setup.sh) against the rig's apiserver, and the
charts of this repository (charts/, rendered by chartgen, issue 3)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from rig import REPO, TOOLS

PACKAGE_CHART = REPO / "charts/cozy-autoscaling"


def helm_bin(major: int = 4) -> Path:
    path = TOOLS / f"helm{major}/helm"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run tests/chartgen/setup.sh")
    return path


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


class Helm:
    def __init__(self, kubeconfig: Path, home: Path, major: int = 4):
        self.kubeconfig = kubeconfig
        self.home = home
        self.binary = helm_bin(major)
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
                    "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}

    def run(self, *args: str) -> str:
        r = subprocess.run([str(self.binary), *args, "--kubeconfig", str(self.kubeconfig)],
                           capture_output=True, text=True, env=self.env)
        if r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{r.stderr}")
        return r.stdout

    def _values(self, values: dict) -> list[str]:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=self.home, delete=False) as f:
            yaml.safe_dump(values, f)
        return ["--values", f.name]

    def upgrade_install(self, release: str, chart: Path, namespace: str, values: dict,
                        *extra: str) -> None:
        self.run("upgrade", "--install", release, str(chart), "--namespace", namespace,
                 "--create-namespace", *self._values(values), *extra)

    def template(self, release: str, chart: Path, namespace: str, values: dict) -> list[dict]:
        out = self.run("template", release, str(chart), "--namespace", namespace,
                       "--api-versions", "keda.sh/v1alpha1", *self._values(values))
        return [d for d in yaml.safe_load_all(out) if d]
