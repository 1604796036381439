"""Benchmark of `scaler serve` under KEDA's call pattern (not a test: it prints figures).

Phases:
  1. load N clusters' CNPG series into a real VictoriaMetrics;
  2. cold: poll every one of N ScaledObjects once like KEDA's scale loop (GetMetricSpec, GetMetrics,
     IsActive), then read the scaler's VmRSS;
  3. hot: open-loop load at --rate rpc/s from --procs processes (grpc.aio), each KEDA poll being
     three callers (scale loop + 2 HPA queries) × (GetMetricSpec, GetMetrics, IsActive), first on a
     small hot set of ScaledObjects, then spread over all N;
and reports GetMetrics p50/p99, throughput, backend queries per rpc (VictoriaMetrics' own counter)
and the scaler's own /metrics counters."""
import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

import grpc
import requests

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
from cnpg_series import Backend, Cluster, Pod, render  # noqa: E402
from keda import metadata, stubs  # noqa: E402
import promtext  # noqa: E402
from testkit import rss_kib  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

# The namespaces the fleet spreads over: ScaledObject i is in tenant-(i % NAMESPACES). 100 unless
# COZY_BENCH_NAMESPACES says otherwise (issue 42's fleet: 50,000 in 5,000, ten per tenant).
NAMESPACES = int(os.environ.get("COZY_BENCH_NAMESPACES", "100"))


def so(i: int):
    return f"tenant-{i % NAMESPACES}", f"db-{i}"


def cluster(i: int) -> Cluster:
    ns, name = so(i)
    return Cluster(ns, name, [
        Pod(1, primary=True, backends=[Backend(10)], internal=False, wal_bytes_per_s=100 * (i % 2)),
        Pod(2, backends=[Backend(1 + i % 17)], internal=False, cpu_millicores=100 + i % 300),
    ])


def load_series(vm: VictoriaMetrics, n: int):
    now, chunk = time.time(), 250
    for start in range(0, n, chunk):
        text = render([cluster(i) for i in range(start, min(n, start + chunk))], now, back=360, ahead=1800, step=60)
        requests.post(f"{vm.url}/api/v1/import/prometheus", data=text.encode(), timeout=120).raise_for_status()
    requests.get(f"{vm.url}/internal/force_flush", timeout=30)
    probe = "count(cnpg_pg_replication_in_recovery)"
    deadline = time.time() + 60
    while time.time() < deadline and vm.scalar(probe) != 2 * n:
        time.sleep(0.5)
    assert vm.scalar(probe) == 2 * n, "series not visible"


def ref_for(pb2, i: int):
    ns, name = so(i)
    return pb2.ScaledObjectRef(name=name, namespace=ns, scalerMetadata=metadata(name, target="5", max_replicas="10"))


async def keda_sequence(pb2, stub, ref, lat, errors, deadline=3.0):
    """One caller: GetMetricSpec, GetMetrics(spec name), IsActive, each timed."""
    try:
        t = time.perf_counter()
        spec = await stub.GetMetricSpec(ref, timeout=deadline)
        t2 = time.perf_counter()
        lat["GetMetricSpec"].append(t2 - t)
        req = pb2.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricSpecs[0].metricName)
        await stub.GetMetrics(req, timeout=deadline)
        t3 = time.perf_counter()
        lat["GetMetrics"].append(t3 - t2)
        await stub.IsActive(ref, timeout=deadline)
        lat["IsActive"].append(time.perf_counter() - t3)
    except grpc.RpcError as e:
        errors[e.code().name] = errors.get(e.code().name, 0) + 1


async def open_loop(address, indices, rate, duration):
    """rate rpc/s = rate/3 caller sequences per second, round-robin over indices."""
    pb2, pb2_grpc = stubs()
    lat, errors, tasks = {"GetMetricSpec": [], "GetMetrics": [], "IsActive": []}, {}, set()
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pb2_grpc.ExternalScalerStub(ch)
        refs = [ref_for(pb2, i) for i in indices]
        seq_rate, start, k = rate / 3.0, time.perf_counter(), 0
        late = 0.0
        while True:
            due = start + k / seq_rate
            if due - start >= duration:
                break
            now = time.perf_counter()
            if due > now:
                await asyncio.sleep(due - now)
            else:
                late = max(late, now - due)
            task = asyncio.create_task(keda_sequence(pb2, stub, refs[k % len(refs)], lat, errors))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1
        await asyncio.gather(*tasks)
        return {"lat": lat, "errors": errors, "elapsed": time.perf_counter() - start, "max_late": late}


async def closed_loop(address, indices, concurrency):
    pb2, pb2_grpc = stubs()
    lat, errors = {"GetMetricSpec": [], "GetMetrics": [], "IsActive": []}, {}
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pb2_grpc.ExternalScalerStub(ch)
        queue = list(indices)
        start = time.perf_counter()

        async def worker():
            while queue:
                await keda_sequence(pb2, stub, ref_for(pb2, queue.pop()), lat, errors, deadline=30)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return {"lat": lat, "errors": errors, "elapsed": time.perf_counter() - start, "max_late": 0}


def _worker(args):
    kind, address, indices, a, b = args
    if kind == "open":
        return asyncio.run(open_loop(address, indices, a, b))
    return asyncio.run(closed_loop(address, indices, a))


def run_procs(kind, address, index_sets, a, b):
    with mp.get_context("spawn").Pool(len(index_sets)) as pool:
        parts = pool.map(_worker, [(kind, address, idx, a, b) for idx in index_sets])
    lat = {k: sorted(x for p in parts for x in p["lat"][k]) for k in parts[0]["lat"]}
    errors = {}
    for p in parts:
        for k, v in p["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return lat, errors, max(p["elapsed"] for p in parts), max(p["max_late"] for p in parts)


def write_figures(path: str | None, figures: list) -> None:
    """All figures of a run as one JSON file, when --json names one."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=1)


def loadavg() -> str:
    """Other work on the machine skews every figure: record it."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_header(**extra) -> dict:
    """A driver's first record: the machine, what else ran on it, and the fleet's layout."""
    return {"cpus": os.cpu_count(), "loadavg_start": loadavg(), "namespaces": NAMESPACES, **extra}


def pct(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def scaler_counters(admin: str) -> dict:
    """The scaler's own counters (scaler/src/metrics.rs): rpcs, backend queries, and the
    server-side GetMetrics latency histogram (cumulative bucket counts by `le`)."""
    samples = promtext.parse(requests.get(f"{admin}/metrics", timeout=5).text)
    out = {
        "grpc_requests": promtext.total(samples, "scaler_grpc_requests_total"),
        "backend_queries": promtext.total(samples, "scaler_backend_queries_total"),
        "backend_seconds": promtext.total(samples, "scaler_backend_query_duration_seconds_sum"),
        "backend_timeouts": promtext.total(samples, "scaler_backend_queries_total", outcome="timeout"),
    }
    for labels, v in promtext.select(samples, "scaler_grpc_request_duration_seconds_bucket", rpc="GetMetrics",
                                     code="OK"):
        out[f"GetMetrics_le_{labels['le']}"] = v
    return out


def server_side(delta: dict) -> dict:
    """From the scaler's GetMetrics histogram delta: the bucket bound (ms) under which 50 % and
    99 % of the phase's answers fell (an upper bound of the server-side p50/p99)."""
    buckets = sorted((float(k.removeprefix("GetMetrics_le_")), v) for k, v in delta.items()
                     if k.startswith("GetMetrics_le_"))
    n = buckets[-1][1] if buckets else 0
    if not n:
        return {}
    out = {}
    for q in (0.5, 0.99):
        bound = next(le for le, v in buckets if v >= q * n)
        out[f"server_GetMetrics_p{int(q * 100)}_le_ms"] = round(bound * 1000, 3)
    # Calls that waited for a refresh are at most one per backend query; drop that many of the
    # slowest to bound the p99 of answers served from the cache.
    coalesced = n - min(n - 1, delta.get("backend_queries", 0))
    bound = next(le for le, v in buckets if v >= 0.99 * coalesced)
    out["server_GetMetrics_coalesced_p99_le_ms"] = round(bound * 1000, 3)
    if delta.get("backend_queries"):
        out["backend_query_mean_ms"] = round(1000 * delta["backend_seconds"] / delta["backend_queries"], 1)
        out["backend_timeouts"] = delta["backend_timeouts"]
    return out


def report_phase(title, lat, errors, elapsed, late, vm_delta, counters_delta):
    rpcs = sum(len(v) for v in lat.values())
    fig = {
        "phase": title, "rpcs": rpcs, "seconds": round(elapsed, 2), "rpc_per_s": round(rpcs / elapsed, 1),
        "GetMetrics_p50_ms": round(pct(lat["GetMetrics"], 0.50), 3),
        "GetMetrics_p99_ms": round(pct(lat["GetMetrics"], 0.99), 3),
        "GetMetricSpec_p99_ms": round(pct(lat["GetMetricSpec"], 0.99), 3),
        "IsActive_p99_ms": round(pct(lat["IsActive"], 0.99), 3),
        "errors": errors, "max_schedule_lag_ms": round(late * 1000, 1),
        "vm_queries": vm_delta, "vm_queries_per_rpc": round(vm_delta / rpcs, 4) if rpcs else None,
        "scaler_rpcs": counters_delta.get("grpc_requests"),
        "scaler_backend_queries": counters_delta.get("backend_queries"),
        **server_side(counters_delta),
    }
    print(json.dumps(fig), flush=True)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True, help="path of the scaler binary (release build)")
    ap.add_argument("--clusters", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000, help="rpc/s of the open-loop phases")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--procs", type=int, default=2, help="load-generator processes")
    ap.add_argument("--hot", type=int, default=200, help="ScaledObjects in the hot set")
    ap.add_argument("--refresh", default="15s", help="--refresh-interval of the scaler")
    ap.add_argument("--json", help="write all figures to this file")
    args = ap.parse_args()
    os.environ["SCALER_BIN"] = os.path.abspath(args.scaler)

    work = tempfile.mkdtemp(prefix="scaler-bench-")
    vm = VictoriaMetrics(work).start()
    scaler = None
    figures = []
    try:
        t = time.time()
        load_series(vm, args.clusters)
        print(f"loaded {args.clusters} clusters in {time.time() - t:.1f}s", flush=True)
        scaler = Scaler(work, vm.url, "--log-level", "warn", refresh=args.refresh).start()
        pid = scaler.proc.pid
        rss0 = rss_kib(pid)
        figures.append(run_header())
        print(json.dumps(figures[-1]), flush=True)

        def settle():
            """Lets the previous phase's backlog of backend queries drain (at most 60 s)."""
            last, deadline = None, time.time() + 60
            while time.time() < deadline:
                now = scaler_counters(scaler.admin)["backend_seconds"]
                if now == last:
                    return
                last = now
                time.sleep(2)

        def phase(title, kind, sets, a, b):
            settle()
            v0, c0 = vm.query_requests(), scaler_counters(scaler.admin)
            lat, errors, elapsed, late = run_procs(kind, scaler.address, sets, a, b)
            v1, c1 = vm.query_requests(), scaler_counters(scaler.admin)
            delta = {k: c1[k] - c0.get(k, 0) for k in c1}
            figures.append(report_phase(title, lat, errors, elapsed, late, v1 - v0, delta))

        everyone = list(range(args.clusters))
        split = [everyone[p::args.procs] for p in range(args.procs)]
        phase(f"cold: every one of {args.clusters} ScaledObjects polled once (closed loop, 32 in flight/proc)",
              "closed", split, 32, None)
        rss_all = rss_kib(pid)
        figures.append({"rss_start_mib": round(rss0 / 1024, 1),
                        f"rss_after_{args.clusters}_scaledobjects_mib": round(rss_all / 1024, 1)})
        print(json.dumps(figures[-1]), flush=True)

        hot = list(range(args.hot))
        phase(f"warm-up hot set {args.hot}", "closed", [hot], 16, None)
        hot_split = [hot[p::args.procs] for p in range(args.procs)]
        phase(f"hot: {args.rate:.0f} rpc/s over {args.hot} ScaledObjects (KEDA pattern, open loop)",
              "open", hot_split, args.rate / args.procs, args.duration)
        phase(f"spread: {args.rate:.0f} rpc/s over all {args.clusters} ScaledObjects (open loop)",
              "open", split, args.rate / args.procs, args.duration)
        phase("max throughput: closed loop, 64 in flight/proc, hot set x15 per proc", "closed",
              [hot * 15 for _ in range(args.procs)], 64, None)
        figures.append({"rss_end_mib": round(rss_kib(pid) / 1024, 1), "loadavg_end": loadavg()})
        print(json.dumps(figures[-1]), flush=True)
    finally:
        if scaler:
            scaler.stop()
        vm.stop()
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
