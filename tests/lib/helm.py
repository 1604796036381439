"""The real helm, Helm 3 or Helm 4, for every suite: `helm template`/`lint`/`package` (chartgen and
image suites) and the cluster verbs against the e2e rig's apiserver. The binaries are the ones
tests/chartgen/setup.sh installs under $COZY_TOOLS. Each Helm runs with its own HOME and HELM_*
folders, so no user configuration, repository or plugin of the machine leaks into a test."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from testkit import TOOLS

MAJORS = (3, 4)
# Far above any render or install here (a few seconds): a hung helm fails the test, not the run.
TIMEOUT = 300


def binary_path(major: int) -> Path:
    """Where tests/chartgen/setup.sh installs helm `major` (the file may be absent)."""
    if major not in MAJORS:
        raise ValueError(f"helm major version {major}: this kit has {MAJORS}")
    return TOOLS / f"helm{major}/helm"


def docs(text: str) -> list[dict]:
    """The YAML documents of a rendered manifest stream, empty ones dropped."""
    return [d for d in yaml.safe_load_all(text) if d]


class HelmFailed(AssertionError):
    """helm exited non-zero; the message holds the command and helm's stderr."""


class Helm:
    """One helm major version with isolated homes under `home`; with `kubeconfig`, every command
    talks to that cluster."""

    def __init__(self, home: Path, major: int = 4, kubeconfig: Path | None = None):
        self.major = major
        self.name = f"helm{major}"
        self.binary = binary_path(major)
        if not self.binary.is_file():
            raise FileNotFoundError(f"{self.binary} is missing: run tests/chartgen/setup.sh")
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = kubeconfig
        self.env = {**os.environ, "HOME": str(self.home),
                    "HELM_CACHE_HOME": str(self.home / "cache"),
                    "HELM_CONFIG_HOME": str(self.home / "config"),
                    "HELM_DATA_HOME": str(self.home / "data")}

    def run(self, *args) -> subprocess.CompletedProcess:
        """helm `args` (plus --kubeconfig when this Helm has one); the caller checks the result."""
        cluster = ["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []
        return subprocess.run([str(self.binary), *map(str, args), *cluster], capture_output=True,
                              text=True, env=self.env, timeout=TIMEOUT)

    def output(self, *args) -> str:
        """helm `args`' stdout; HelmFailed with helm's stderr when it fails."""
        r = self.run(*args)
        if r.returncode != 0:
            raise HelmFailed(f"{self.name} {' '.join(map(str, args))} failed (exit {r.returncode}):\n"
                             f"{r.stderr}")
        return r.stdout

    def template(self, chart, sets=(), keda=True, release="pg", namespace="tenant-a",
                 kube_version=None, values: dict | None = None) -> subprocess.CompletedProcess:
        """`helm template` of `chart` with `--set` `sets` and a `values` file; `keda` declares
        KEDA's API (keda.sh/v1alpha1) as the charts' capability check expects."""
        return self.run(*self._template_args(chart, sets, keda, release, namespace, kube_version,
                                             values))

    def render(self, chart, sets=(), keda=True, release="pg", namespace="tenant-a",
               kube_version=None, values: dict | None = None) -> list[dict]:
        """The parsed objects of a `template` that must succeed."""
        return docs(self.output(*self._template_args(chart, sets, keda, release, namespace,
                                                     kube_version, values)))

    def upgrade_install(self, release: str, chart: Path, namespace: str, values: dict,
                        *extra: str) -> None:
        self.output("upgrade", "--install", release, chart, "--namespace", namespace,
                    "--create-namespace", *self._values(values), *extra)

    def _template_args(self, chart, sets, keda, release, namespace, kube_version, values) -> list:
        args = ["template", release, chart, "--namespace", namespace]
        if kube_version:
            args += ["--kube-version", kube_version]
        for s in sets:
            args += ["--set", s]
        if keda:
            args += ["--api-versions", "keda.sh/v1alpha1"]
        return args + self._values(values)

    def _values(self, values: dict | None) -> list[str]:
        if values is None:
            return []
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=self.home, delete=False) as f:
            yaml.safe_dump(values, f)
        return ["--values", f.name]
