"""Synthetic redis_exporter series of a RedisFailover's Redis pods in Prometheus text with explicit
millisecond timestamps, shaped as tests/liveredis observed Debian's prometheus-redis-exporter 1.45
with `--export-client-list` against redis-server 7.0 (docs/redis.md, "Metrics used" and "Traps"):
pods `rfr-<name>-<n>`, the master's connections count the sentinels' two each and the exporter's,
a replica's also its master link (flags M); the client list names them; the master reports each
replica's acknowledged offset, which trails its own by about a second of writes. A stand-in for the
exporters of pods the e2e rig does not run (the Redis operator is absent there).

`render_at` writes one live sample of each series; the master's replication offset is a counter
the caller keeps (as tests/lib/cnpg_series.py's WAL counter), so a write rate that changes bends it.
"""
from collections.abc import Mapping
from dataclasses import dataclass, field

# redis_master_repl_offset when a failover first appears.
OFFSET_ORIGIN = 1_000_000
# What a healthy replica's acknowledged offset trails the master's by (tests/liveredis: 425 B idle).
IN_FLIGHT_BYTES = 425


@dataclass
class RedisPod:
    n: int
    master: bool = False
    clients: int = 0          # application connections
    link_up: bool = True      # redis_master_link_up on a replica
    syncing: bool = False     # a full sync in progress: link down, nothing acknowledged yet
    lag_bytes: int = IN_FLIGHT_BYTES  # how far its acknowledged offset trails the master's


@dataclass
class Failover:
    namespace: str
    name: str
    pods: list[RedisPod] = field(default_factory=list)
    sentinels: int = 3

    def pod_name(self, pod: RedisPod) -> str:
        return f"rfr-{self.name}-{pod.n}"


def _labels(**kv) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items() if v != "") + "}"


def render_at(failovers: list[Failover], now: float, offsets: Mapping[tuple[str, str], float]) -> str:
    """One sample of every series of `failovers` at `now`, each master's replication offset taken
    from `offsets[(namespace, name)]`."""
    lines = []
    for fi, f in enumerate(failovers):
        offset = offsets[(f.namespace, f.name)]
        for p in f.pods:
            lines += _pod(f, fi, p, offset, int(now * 1000))
    return "\n".join(lines) + "\n"


def _ip(fi: int, n: int) -> str:
    return f"10.{100 + fi // 250}.{fi % 250}.{n + 1}"


def _pod(f: Failover, fi: int, p: RedisPod, offset: float, ms: int) -> list[str]:
    scrape = {"namespace": f.namespace, "pod": f.pod_name(p), "job": f"{f.namespace}/rfr-{f.name}",
              "instance": f"{_ip(fi, p.n)}:9121", "container": "redis-exporter", "endpoint": "http-metrics"}
    role = "master" if p.master else "slave"
    lines = [f"redis_instance_info{_labels(**scrape, role=role, redis_version='7.0.15', redis_mode='standalone')}"
             f" 1 {ms}"]
    # The client list: each sentinel's two connections, the exporter's own, a replica's master link.
    entries = [(f"sentinel-{s:08x}-{kind}", "N") for s in range(f.sentinels) for kind in ("cmd", "pubsub")]
    entries.append(("redis_exporter", "N"))
    if not p.master and not p.syncing:
        entries.append(("", "M"))
    entries += [("", "N")] * p.clients
    lines.append(f"redis_connected_clients{_labels(**scrape)} {len(entries)} {ms}")
    for i, (name, flags) in enumerate(entries):
        lbl = _labels(**scrape, id=str(i + 3), name=name, flags=flags, db="0",
                      host=_ip(fi, 200 + i % 50))
        lines.append(f"redis_connected_clients_details{lbl} 1 {ms}")
    if p.master:
        lines.append(f"redis_master_repl_offset{_labels(**scrape)} {offset} {ms}")
        for q in f.pods:
            if q.master:
                continue
            acked = 0 if q.syncing else offset - q.lag_bytes
            state = "wait_bgsave" if q.syncing else "online"
            lbl = _labels(**scrape, slave_ip=_ip(fi, q.n), slave_port="6379", slave_state=state)
            lines.append(f"redis_connected_slave_offset_bytes{lbl} {acked} {ms}")
    else:
        up = int(p.link_up and not p.syncing)
        lines.append(f"redis_master_link_up{_labels(**scrape)} {up} {ms}")
        lines.append(f"redis_master_sync_in_progress{_labels(**scrape)} {int(p.syncing)} {ms}")
        acked = 0 if p.syncing else offset - p.lag_bytes
        lines.append(f"redis_master_repl_offset{_labels(**scrape)} {acked} {ms}")
    return lines
