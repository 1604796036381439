"""Synthetic CloudNativePG series in Prometheus text with explicit millisecond timestamps: the one
generator of the test kit (the scaler suite's data set, the bench, the e2e rig's live feeder;
tests/livepg/test_series_shape.py checks it against series from real PostgreSQL).

`render` writes a history: each series gets samples every `step` seconds over [start, end], so
rate() and max_over_time() windows have real history, and the samples run a little into the future
so that instant queries at "now" keep seeing fresh data for the whole test session. `render_at`
writes one live sample of each series, with counter values the caller keeps (a feeder whose rates
change between pushes integrates them: a counter recomputed as origin + rate x t would jump or go
back when a rate changes, which reads as a WAL burst or a counter reset).
"""
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

INTERNAL_USERS = ("cnpg_metrics_exporter", "postgres", "streaming_replica")


@dataclass
class Backend:
    value: float
    usename: str = "app"
    state: str = "active"
    datname: str = "app"  # "" = NULL (walsenders): CNPG's label is empty, so the series has none
    application_name: str = "web"


def internal_sessions(pod: str, standbys: list[str]) -> list[Backend]:
    """Sessions CNPG itself opens on an instance, as tests/livepg observes them on real PostgreSQL:
    the metrics exporter is active in the application database (it is running the backends query
    that produces this very sample) and idle in `postgres` (pg_stat_wal); a primary has one
    walsender per streaming standby (user streaming_replica, application_name = the standby's pod,
    no database); replicas have none. The instance manager's pool (user postgres, application_name
    cnpg-instance-manager, from CNPG's source) is not reproduced live: there is no instance manager."""
    return [
        Backend(1, "cnpg_metrics_exporter", "active", "app", "cnpg_metrics_exporter"),
        Backend(1, "cnpg_metrics_exporter", "idle", "postgres", "cnpg_metrics_exporter"),
        Backend(2, "postgres", "active", "postgres", "cnpg-instance-manager"),
        Backend(1, "postgres", "idle", "postgres", "cnpg-instance-manager"),
        *(Backend(1, "streaming_replica", "active", "", standby) for standby in standbys),
    ]


def stalled_since(seconds_ago: float) -> Callable[[float], float]:
    """CNPG's lag for a replica whose replay stopped `seconds_ago` (the last replayed commit):
    0 before, then now() - that commit, growing 1 s/s (tests/livepg, finding L1)."""
    return lambda age: max(0.0, seconds_ago - age)


@dataclass
class Pod:
    n: int
    primary: bool = False
    backends: list[Backend] = field(default_factory=list)
    # Replication lag in seconds as a function of the sample's age (seconds before "now").
    lag: Callable[[float], float] = lambda age: 0.0
    cpu_millicores: float = 50.0
    wal_bytes_per_s: float = 0.0  # 0 = idle primary (flat counter)
    # The primary stopped writing this many seconds ago (None: writes until the end of the samples).
    writes_stopped_ago: float | None = None
    internal: bool = True  # add CNPG's own sessions
    # cnpg_pg_replication_is_wal_receiver_up on a replica (False: restoring, not streaming yet),
    # or a function of the sample's age; None: no series (the primary reports 0 when set).
    wal_receiver_up: bool | Callable[[float], bool] | None = None
    max_connections: int | None = None  # cnpg_pg_settings_setting{name="max_connections"}


@dataclass
class Cluster:
    namespace: str
    name: str
    pods: list[Pod]

    def pod_name(self, pod: Pod) -> str:
        return f"{self.name}-{pod.n}"


# pg_stat_wal's wal_bytes when a history starts or a live pod first appears.
WAL_ORIGIN = 1_000_000
# What an idle primary's background records leave unreplayed on a stalled standby (tests/livepg).
BACKGROUND_BACKLOG_BYTES = 176


@dataclass(frozen=True)
class Counters:
    """A pod's counter values at one sample."""
    wal_bytes: float = WAL_ORIGIN  # pg_stat_wal wal_bytes (CNPG's cnpg_collector_wal_bytes)
    cpu_seconds: float = 0.0       # cAdvisor's counter of the postgres container
    uptime: float = 0.0            # seconds since the pod started: drives the other cAdvisor counters

    def advance(self, pod: Pod, seconds: float) -> "Counters":
        """The counters `seconds` later at `pod`'s current WAL and CPU rates."""
        return Counters(self.wal_bytes + pod.wal_bytes_per_s * seconds,
                        self.cpu_seconds + pod.cpu_millicores / 1000 * seconds, self.uptime + seconds)


def _labels(**kv) -> str:
    # An empty value is no label at all (Prometheus semantics), as CNPG's NULL labels end up.
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items() if v != "") + "}"


def render(clusters: list[Cluster], now: float, back: float = 600, ahead: float = 1200,
           step: float = 15) -> str:
    """Prometheus text for `clusters`, samples from now-back to now+ahead every `step` s; counters
    start at the first sample and grow at the pods' rates (WAL until `writes_stopped_ago`)."""
    lines = []
    t0 = now - back
    times = [t0 + i * step for i in range(int((back + ahead) / step) + 1)]
    for ci, c in enumerate(clusters):
        for p in c.pods:
            series = _PodSeries(c, ci, p, now)
            for t in times:
                counters = Counters(WAL_ORIGIN + p.wal_bytes_per_s * (min(t, series.writes_end) - t0),
                                    p.cpu_millicores / 1000 * (t - t0), t - t0)
                lines += series.sample(t, counters)
    return "\n".join(lines) + "\n"


def render_at(clusters: list[Cluster], now: float, counters: Mapping[tuple[str, str], Counters]) -> str:
    """One sample of every series of `clusters` at `now` (lags read at age 0), each pod's counters
    taken from `counters[(namespace, pod name)]`."""
    lines = []
    for ci, c in enumerate(clusters):
        for p in c.pods:
            lines += _PodSeries(c, ci, p, now).sample(now, counters[(c.namespace, c.pod_name(p))])
    return "\n".join(lines) + "\n"


class _PodSeries:
    """The series of one pod.

    CNPG series carry the labels of a CNPG PodMonitor scrape (job `<namespace>/<cluster>`,
    instance `<pod IP>:9187`, container, endpoint; tests/livepg scrapes them so); the cAdvisor CPU
    series those of the kubelet's. Each instance has its own pg_stat_wal `stats_reset`."""

    def __init__(self, c: Cluster, ci: int, p: Pod, now: float):
        self.cluster, self.pod, self.now = c, p, now
        pod = c.pod_name(p)
        self.scrape = {"namespace": c.namespace, "pod": pod, "job": f"{c.namespace}/{c.name}",
                       "instance": f"10.{ci // 250}.{ci % 250}.{p.n}:9187", "container": "postgres",
                       "endpoint": "metrics"}
        self.kubelet = {"namespace": c.namespace, "pod": pod, "job": "kubelet", "instance": "node-1"}
        standbys = [c.pod_name(q) for q in c.pods if not q.primary]
        self.backends = list(p.backends) + (
            internal_sessions(pod, standbys if p.primary else []) if p.internal else [])
        self.stats_reset = f"2026-11-{p.n:02d}T08:00:00.{ci:06d}Z"
        self.writes_end = now - p.writes_stopped_ago if p.writes_stopped_ago is not None else float("inf")

    def sample(self, t: float, counters: Counters) -> list[str]:
        c, p, scrape, kubelet = self.cluster, self.pod, self.scrape, self.kubelet
        ms = int(t * 1000)
        age = self.now - t
        lines = []
        if p.primary:
            for q in c.pods:
                if not q.primary:
                    lines.append(self._replay_backlog(q, t, ms))
        lines.append(f"cnpg_pg_replication_in_recovery{_labels(**scrape)} {0 if p.primary else 1} {ms}")
        lines.append(f"cnpg_pg_replication_lag{_labels(**scrape)} {0 if p.primary else p.lag(age)} {ms}")
        if p.wal_receiver_up is not None:
            streaming = p.wal_receiver_up(age) if callable(p.wal_receiver_up) else p.wal_receiver_up
            up = int(streaming and not p.primary)
            lines.append(f"cnpg_pg_replication_is_wal_receiver_up{_labels(**scrape)} {up} {ms}")
        if p.max_connections is not None:
            lines.append(f"cnpg_pg_settings_setting{_labels(**scrape, name='max_connections')} "
                         f"{p.max_connections} {ms}")
        lines.append(f"cnpg_collector_wal_bytes{_labels(**scrape, stats_reset=self.stats_reset)} "
                     f"{counters.wal_bytes} {ms}")
        for b in self.backends:
            lbl = _labels(**scrape, datname=b.datname, usename=b.usename,
                          application_name=b.application_name, state=b.state)
            lines.append(f"cnpg_backends_total{lbl} {b.value} {ms}")
        cpu, uptime = counters.cpu_seconds, counters.uptime
        lines.append(f"container_cpu_usage_seconds_total{_labels(**kubelet, container='postgres')} {cpu} {ms}")
        # cAdvisor's pod-level cgroup (container="", so no label) and a sidecar: never postgres load.
        lines.append(f"container_cpu_usage_seconds_total{_labels(**kubelet, id='/kubepods/' + c.pod_name(p))} "
                     f"{cpu * 4 + 5 * uptime} {ms}")
        lines.append(f"container_cpu_usage_seconds_total{_labels(**kubelet, container='istio-proxy')} "
                     f"{3 * uptime} {ms}")
        return lines

    def _replay_backlog(self, standby: Pod, t: float, ms: int) -> str:
        """CNPG's `pg_stat_replication` row for `standby` on the primary: the WAL written since the
        standby's replay stalled (lag > 0), or nothing once it has caught up."""
        c, scrape = self.cluster, self.scrape
        lag = standby.lag(self.now - t)
        written = max(0.0, min(t, self.writes_end) - (t - lag)) * self.pod.wal_bytes_per_s
        backlog = written + BACKGROUND_BACKLOG_BYTES if lag > 0 else 0.0
        lbl = _labels(**scrape, usename="streaming_replica", application_name=c.pod_name(standby),
                      client_addr=scrape["instance"].rsplit(".", 1)[0] + f".{standby.n}", client_port="40000")
        return f"cnpg_pg_stat_replication_replay_diff_bytes{lbl} {backlog} {ms}"


def replicas(namespace, name, active_per_replica, n_replicas=2, **pod_kw) -> Cluster:
    """A primary (n=1) plus `n_replicas` replicas, each with `active_per_replica` app sessions."""
    pods = [Pod(1, primary=True, backends=[Backend(25)], cpu_millicores=1500)]
    for i in range(n_replicas):
        pods.append(Pod(i + 2, backends=[Backend(active_per_replica)] if active_per_replica else [], **pod_kw))
    return Cluster(namespace, name, pods)
