"""Synthetic CloudNativePG series in Prometheus text with explicit millisecond timestamps.

Each series gets samples every `step` seconds over [start, end], so rate() and max_over_time()
windows have real history. Samples run a little into the future so that instant queries at
"now" keep seeing fresh data for the whole test session.
"""
from dataclasses import dataclass, field
from typing import Callable

INTERNAL_USERS = ("cnpg_metrics_exporter", "postgres", "streaming_replica")


@dataclass
class Backend:
    value: float
    usename: str = "app"
    state: str = "active"
    datname: str = "app"
    application_name: str = "web"


def internal_sessions(pod: str) -> list[Backend]:
    """Sessions CNPG itself opens on every instance: none of them is client load."""
    return [
        Backend(1, "cnpg_metrics_exporter", "active", "postgres", "cnpg_metrics_exporter"),
        Backend(2, "postgres", "active", "postgres", "cnpg-instance-manager"),
        Backend(1, "postgres", "idle", "postgres", "cnpg-instance-manager"),
        Backend(1, "streaming_replica", "active", "", pod),
    ]


@dataclass
class Pod:
    n: int
    primary: bool = False
    backends: list[Backend] = field(default_factory=list)
    # Replication lag in seconds as a function of the sample's age (seconds before "now").
    lag: Callable[[float], float] = lambda age: 0.0
    cpu_millicores: float = 50.0
    wal_bytes_per_s: float = 0.0  # 0 = idle primary (flat counter)
    internal: bool = True  # add CNPG's own sessions


@dataclass
class Cluster:
    namespace: str
    name: str
    pods: list[Pod]

    def pod_name(self, pod: Pod) -> str:
        return f"{self.name}-{pod.n}"


def _labels(**kv) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def render(clusters: list[Cluster], now: float, back: float = 600, ahead: float = 1200,
           step: float = 15) -> str:
    """Prometheus text for `clusters`, samples from now-back to now+ahead every `step` s."""
    lines = []
    t0 = now - back
    times = [t0 + i * step for i in range(int((back + ahead) / step) + 1)]
    for c in clusters:
        for p in c.pods:
            pod = c.pod_name(p)
            base = {"namespace": c.namespace, "pod": pod, "job": "cnpg"}
            backends = list(p.backends) + (internal_sessions(pod) if p.internal else [])
            for t in times:
                ms = int(t * 1000)
                age = now - t
                lines.append(f"cnpg_pg_replication_in_recovery{_labels(**base)} {0 if p.primary else 1} {ms}")
                lines.append(f"cnpg_pg_replication_lag{_labels(**base)} {0 if p.primary else p.lag(age)} {ms}")
                wal = 1_000_000 + p.wal_bytes_per_s * (t - t0)
                lines.append(
                    f"cnpg_collector_wal_bytes{_labels(**base, stats_reset='2026-01-01T00:00:00Z')} {wal} {ms}"
                )
                for b in backends:
                    lbl = _labels(**base, datname=b.datname, usename=b.usename,
                                  application_name=b.application_name, state=b.state)
                    lines.append(f"cnpg_backends_total{lbl} {b.value} {ms}")
                cpu = p.cpu_millicores / 1000 * (t - t0)
                lines.append(f"container_cpu_usage_seconds_total{_labels(**base, container='postgres')} {cpu} {ms}")
                # cAdvisor's pod-level cgroup (container="") and a sidecar: never the postgres load.
                lines.append(f"container_cpu_usage_seconds_total{_labels(**base, container='')} {cpu * 4 + 5 * (t - t0)} {ms}")
                lines.append(f"container_cpu_usage_seconds_total{_labels(**base, container='istio-proxy')} {3 * (t - t0)} {ms}")
    return "\n".join(lines) + "\n"


def replicas(namespace, name, active_per_replica, n_replicas=2, **pod_kw) -> Cluster:
    """A primary (n=1) plus `n_replicas` replicas, each with `active_per_replica` app sessions."""
    pods = [Pod(1, primary=True, backends=[Backend(25)], cpu_millicores=1500)]
    for i in range(n_replicas):
        pods.append(Pod(i + 2, backends=[Backend(active_per_replica)] if active_per_replica else [], **pod_kw))
    return Cluster(namespace, name, pods)
