"""The live rig: one CNPG-shaped cluster of real PostgreSQL instances, an exporter per instance
(exporter.py, CNPG's default queries), a VictoriaMetrics that scrapes them with the labels a CNPG
PodMonitor gives (namespace, pod, job, container, endpoint), `scaler serve` reading that
VictoriaMetrics, and the independent gRPC client driving it like KEDA."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import requests

from keda import Keda, metadata
from liverig import Probes
from pg import Instance
from scaler_proc import Scaler, scaler_binary
from testkit import Proc, free_port, upstream, wait_until
from vm import VictoriaMetrics

HERE = Path(__file__).resolve().parent
NAMESPACE, CLUSTER = "tenant-live", "pg"
SCRAPE_INTERVAL = "1s"
# spec.monitoring.metricsQueriesTTL (CNPG default 30s): 0 so every scrape runs the queries, which
# keeps the suite short; the exporter's own session is then in every backends sample.
QUERIES_TTL = "0"


class Rig(Probes):
    def __init__(self):
        # Not pytest's tmp dir: the server user must be able to traverse it. LIVEPG_KEEP=1 keeps it
        # (data directories, postgres.log and exporter.log per instance) for a post-mortem.
        self.base = Path(tempfile.mkdtemp(prefix="livepg-"))
        self.base.chmod(0o755)
        self.queries = upstream("cnpg") / "default-monitoring.yaml"
        self.instances: dict[str, Instance] = {}
        self.exporters: dict[str, tuple[Proc, int]] = {}
        self.scrape_config = self.base / "scrape.yaml"
        self.vm = VictoriaMetrics(str(self.base / "vm"), extra_args=(
            f"-promscrape.config={self.scrape_config}", "-promscrape.configCheckInterval=1s"))
        self._write_scrape_config()
        self.scaler: Scaler | None = None
        self.keda: Keda | None = None

    def start(self) -> "Rig":
        self.vm.start()
        self.scaler = Scaler(str(self.base), self.vm.url, refresh="1s", topology="metrics").start()
        self.keda = Keda(self.scaler.address)
        return self

    def stop(self) -> None:
        if self.keda:
            self.keda.close()
        if self.scaler:
            self.scaler.stop()
        for proc, _ in self.exporters.values():
            proc.stop()
        for inst in self.instances.values():
            inst.stop()
        self.vm.stop()
        if not os.environ.get("LIVEPG_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)

    # -- instances ---------------------------------------------------------------------------
    def new_instance(self, n: int, cluster: str = CLUSTER) -> Instance:
        inst = Instance(self.base, cluster, n)
        self.instances[inst.name] = inst
        return inst

    def start_exporter(self, inst: Instance) -> None:
        """The pod's metrics endpoint appears: scrape it from now on (the PodMonitor discovers it)."""
        port = free_port()
        proc = Proc([sys.executable, HERE / "exporter.py", "--listen", f"127.0.0.1:{port}",
                     "--socket-dir", inst.sock, "--pg-port", inst.port, "--pgdata", inst.data,
                     "--cluster", inst.cluster, "--queries", self.queries, "--ttl", QUERIES_TTL],
                    inst.dir / "exporter.log", name=f"exporter {inst.name}")
        self.exporters[inst.name] = (proc, port)
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).ok, 15, 0.1,
                   f"exporter of {inst.name}", proc=proc)
        self._write_scrape_config()

    def fail_queries(self, inst: Instance, seconds: float) -> None:
        """Every CNPG query of `inst`'s exporter fails for `seconds`: its series go stale at the
        next scrape while the pod stays scraped (`up` 1), as one missed collection does."""
        _, port = self.exporters[inst.name]
        requests.post(f"http://127.0.0.1:{port}/fail-queries?seconds={seconds}", timeout=5).raise_for_status()

    def stop_pod(self, inst: Instance) -> None:
        """The pod goes away: the scrape target disappears, PostgreSQL and its exporter stop (in
        that order, so no scrape fails in between: a failed scrape is an error for the scaler)."""
        proc, _ = self.exporters.pop(inst.name)
        self._write_scrape_config()
        proc.stop()
        inst.stop()

    def _write_scrape_config(self) -> None:
        jobs: dict[str, list] = {}
        for name, (_, port) in sorted(self.exporters.items()):
            cluster = self.instances[name].cluster
            jobs.setdefault(cluster, []).append(
                {"targets": [f"127.0.0.1:{port}"],
                 "labels": {"namespace": NAMESPACE, "pod": name, "container": "postgres",
                            "endpoint": "metrics", "job": f"{NAMESPACE}/{cluster}"}})
        # One PodMonitor per Cluster, as CNPG's operator creates them.
        cfg = {"scrape_configs": [{"job_name": f"podMonitor/{NAMESPACE}/{cluster}/0",
                                   "scrape_interval": SCRAPE_INTERVAL, "static_configs": targets}
                                  for cluster, targets in jobs.items()]}
        tmp = self.scrape_config.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        os.replace(tmp, self.scrape_config)
        if self.vm.proc is not None and self.vm.proc.alive():
            self.vm.proc.signal(signal.SIGHUP)  # reload now rather than at the next check

    # -- reading ---------------------------------------------------------------------------------
    def raw_series(self, metric: str) -> list[dict]:
        """Every live series of `metric` in the namespace, with labels and value."""
        return [{**r["metric"], "__value__": r["value"][1]}
                for r in self.vm.query(f'{metric}{{namespace="{NAMESPACE}"}}')]

    def ref(self, cluster: str = CLUSTER, **md):
        return self.keda.ref(NAMESPACE, cluster, metadata(cluster=cluster, **md))

    def explain(self, target: str = "5", max_replicas: str = "10", lag: str = "0", cluster: str = CLUSTER) -> dict:
        r = subprocess.run([scaler_binary(), "explain", "--prometheus-url", self.vm.url, "--namespace", NAMESPACE,
                            "--cluster", cluster, "--target", target, "--max-replicas", max_replicas,
                            "--max-replication-lag-seconds", lag, "--topology", "metrics", "--output", "json"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"scaler explain failed: {r.stderr}")
        return json.loads(r.stdout)

    def explain_when_scraped(self, **kwargs) -> dict:
        """`explain` once every replica's sessions are in one scrape. Right after a restart or a
        promotion an exporter can miss a collection (its old connection fails once), and the
        scaler rightly answers "unknown" for that scrape; any other error propagates at once."""
        def attempt():
            try:
                return self.explain(**kwargs)
            except RuntimeError as e:
                if "were scraped from" in str(e):
                    raise ScrapeGap(str(e)) from e
                raise
        return wait_until(attempt, 20, 0.5, "an explain without a scrape gap", retry=(ScrapeGap,))


class ScrapeGap(Exception):
    """`explain` refused: some replica's sessions were missing from the scrape."""
