"""What a refresh costs the backend, measured where it is paid (issue 29, item 3): figures, not a test.

For each fleet size (--sizes), against one real VictoriaMetrics holding the fleet's CNPG series
(bench.py's fleet: 2 pods per cluster, 100 namespaces), three ways of asking for the whole fleet:

  per-ScaledObject  `scaler serve --observe-batch-size 1`: one query per ScaledObject per refresh
  batched           `scaler serve` with its defaults
  floor             the decision query of one shape run directly, once, with its selector
                    widened to exactly the fleet's series (namespace=~"tenant-.*" instead of a
                    batch's namespaces and pods): the least any per-cluster answer can cost

For the two scalers: fill the cache (every ScaledObject asked once), then, with no client calls,
count over --ticks refresh ticks (per refresh interval of their wall time) VictoriaMetrics' own process_cpu_seconds_total and
vm_tcplistener_written_bytes_total (bytes it sent; our own /metrics reads are subtracted) and its
query count, per refresh. The floor query runs --ticks times, per run. Ratios against the floor
and against batched are printed with the figures (JSON lines).

  PYTHONPATH=tests/lib $COZY_TOOLS/venv/bin/python tests/scaler/bench/backend_cost.py \
    --scaler target/release/scaler --sizes 1000,10000,20000
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

import grpc
import requests

from bench import load_series, loadavg, write_figures, ref_for, run_header, so  # noqa: E402 (bench.py sets sys.path)
import promtext  # noqa: E402
from keda import stubs  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import wait_until  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402


class Meter:
    """VictoriaMetrics' CPU seconds, bytes sent and queries served, from its own /metrics."""

    def __init__(self, vm: VictoriaMetrics):
        self.url = f"{vm.url}/metrics"
        self.own_bytes = 0  # what our reads of /metrics made it send

    def read(self) -> dict:
        time.sleep(1.1)  # VictoriaMetrics refreshes some of its counters about once a second
        # Uncompressed, so our own read's bytes on the wire are its length (plus headers).
        body = requests.get(self.url, headers={"Accept-Encoding": "identity"}, timeout=10).text
        # This read's counters were taken before its own body was sent: count it for the next.
        own_before = self.own_bytes
        self.own_bytes += len(body.encode())
        samples = promtext.parse(body)
        return {
            "cpu_s": promtext.total(samples, "process_cpu_seconds_total"),
            "bytes": promtext.total(samples, "vm_tcplistener_written_bytes_total"),
            "queries": sum(promtext.total(samples, "vm_http_requests_total", path=p)
                           for p in ("/api/v1/query", "/api/v1/query_range")),
            "own_bytes": own_before,
        }


def delta(a: dict, b: dict, runs: float) -> dict:
    """Per run; the bytes of our /metrics reads between the two are not the workload's."""
    own = b["own_bytes"] - a["own_bytes"]
    return {"vm_cpu_s": round((b["cpu_s"] - a["cpu_s"]) / runs, 4),
            "vm_bytes_sent": round((b["bytes"] - a["bytes"] - own) / runs),
            "vm_queries": round((b["queries"] - a["queries"]) / runs, 1)}


async def fill(address: str, n: int, concurrency: int = 64):
    pb2, pb2_grpc = stubs()
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pb2_grpc.ExternalScalerStub(ch)
        queue, errors = list(range(n)), 0

        async def worker():
            nonlocal errors
            while queue:
                i = queue.pop()
                _, name = so(i)
                req = pb2.GetMetricsRequest(scaledObjectRef=ref_for(pb2, i),
                                            metricName=f"cnpg-{name}-readconnections")
                try:
                    await stub.GetMetrics(req, timeout=30)
                except grpc.aio.AioRpcError:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return errors


def ticks(scaler: Scaler) -> float:
    return promtext.total(promtext.scrape(f"{scaler.admin}/metrics"), "scaler_refresh_duration_seconds_count")


def scaler_cost(args, vm, meter, n, mode, flags, work) -> dict:
    scaler = Scaler(work, vm.url, "--log-level", "warn", "--max-cached-objects", str(max(n, 10000)),
                    *flags, refresh=f"{args.refresh}s").start()
    try:
        started = time.time()
        errors = asyncio.run(fill(scaler.address, n))
        fill_s = time.time() - started
        # Wait out one tick (it may hold the fill's tail), then measure whole ticks only.
        t = ticks(scaler)
        wait_until(lambda: ticks(scaler) > t, 3 * args.refresh, 0.2, "a refresh tick")
        t = ticks(scaler)
        wait_until(lambda: ticks(scaler) > t, 3 * args.refresh, 0.2, "a refresh tick")
        a, t, started = meter.read(), ticks(scaler), time.monotonic()
        # Generous: one query per ScaledObject at 20,000 takes VictoriaMetrics several intervals.
        wait_until(lambda: ticks(scaler) >= t + args.ticks, 10 * args.ticks * args.refresh, 0.2,
                   f"{args.ticks} refresh ticks")
        b, done = meter.read(), ticks(scaler) - t
        # Per refresh interval of wall time: ticks that overrun it (a backend that cannot serve a
        # whole fleet's queries in one interval) do not make a refresh look cheaper or dearer.
        # Per query too: a whole fleet's refresh costs that times the queries one tick sends.
        intervals = (time.monotonic() - started) / args.refresh
        per_query = delta(a, b, (b["queries"] - a["queries"]) or 1)
        return {"part": "backend cost per refresh", "scaledobjects": n, "mode": mode,
                "fill_s": round(fill_s, 1), "fill_errors": errors, "intervals": round(intervals, 2),
                "ticks": done, **delta(a, b, intervals),
                "vm_cpu_s_per_query": round(per_query["vm_cpu_s"], 6),
                "vm_bytes_per_query": per_query["vm_bytes_sent"], "loadavg": loadavg()}
    finally:
        scaler.stop()


def floor_query(scaler_bin: str, vm) -> str:
    """The single-cluster decision query for one ScaledObject (explain prints it), widened to the
    whole fleet: every series of the fleet's namespaces, nothing else."""
    ns, name = so(0)
    out = subprocess.run([scaler_bin, "explain", "--prometheus-url", vm.url, "--namespace", ns,
                          "--cluster", name, "--target", "5", "--max-replicas", "10", "--topology", "metrics",
                          "--output", "json"], capture_output=True, text=True, check=True).stdout
    query = json.loads(out)["query"]
    selector = f'namespace="{ns}",pod=~"{name}-[1-9][0-9]*"'  # the fleet's names need no escape
    assert selector in query, f"explain's query has no {selector}: {query}"
    return query.replace(selector, 'namespace=~"tenant-.*"')


def floor_cost(args, vm, meter, n) -> dict:
    query = floor_query(args.scaler, vm)
    # Uncompressed, as the scaler's client asks (it sends no Accept-Encoding).
    ask = dict(data={"query": query}, headers={"Accept-Encoding": "identity"}, timeout=60)
    answer = requests.post(f"{vm.url}/api/v1/query", **ask).json()
    clusters = {(r["metric"].get("namespace"), r["metric"].get("cluster")) for r in answer["data"]["result"]}
    assert len(clusters) == n, f"the floor query answered for {len(clusters)} clusters, not {n}"
    a = meter.read()
    for _ in range(args.ticks):
        requests.post(f"{vm.url}/api/v1/query", **ask).raise_for_status()
    b = meter.read()
    return {"part": "backend cost per refresh", "scaledobjects": n, "mode": "floor",
            **delta(a, b, args.ticks), "loadavg": loadavg()}


BATCH_SIZE = 100  # the scaler's default --observe-batch-size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True, help="scaler binary")
    ap.add_argument("--sizes", default="1000,10000,20000")
    ap.add_argument("--refresh", type=float, default=15, help="--refresh-interval, seconds")
    ap.add_argument("--ticks", type=int, default=3, help="refresh ticks (floor: runs) measured")
    ap.add_argument("--modes", default="per-ScaledObject,batched",
                    help="scaler modes measured beside the floor (per-ScaledObject takes intervals per tick at 20,000)")
    ap.add_argument("--json", help="also write all figures to this file")
    args = ap.parse_args()
    os.environ["SCALER_BIN"] = os.path.abspath(args.scaler)
    figures = [run_header(scaler=args.scaler)]
    print(json.dumps(figures[-1]), flush=True)
    with tempfile.TemporaryDirectory(prefix="scaler-cost-") as work:
        for n in (int(s) for s in args.sizes.split(",")):
            vm = VictoriaMetrics(os.path.join(work, f"vm-{n}")).start()
            try:
                load_series(vm, n)
                meter = Meter(vm)
                rows = {"floor": floor_cost(args, vm, meter, n)}
                figures.append(rows["floor"])
                print(json.dumps(rows["floor"]), flush=True)
                modes = {"per-ScaledObject": ["--observe-batch-size", "1"], "batched": []}
                for mode in args.modes.split(","):
                    rows[mode] = scaler_cost(args, vm, meter, n, mode, modes[mode], work)
                    figures.append(rows[mode])
                    print(json.dumps(rows[mode]), flush=True)
                # A one-pass refresh asks for each cluster once: ceil(n / batch size) queries.
                ratio = {"part": "ratios", "scaledobjects": n, "one-pass queries": -(-n // BATCH_SIZE)}
                if "batched" in rows:
                    ratio["vm_queries batched/one-pass"] = round(rows["batched"]["vm_queries"] / -(-n // BATCH_SIZE), 2)
                for k in ("vm_cpu_s", "vm_bytes_sent", "vm_queries"):
                    f, b, p = (rows[m][k] if m in rows else None for m in ("floor", "batched", "per-ScaledObject"))
                    if p is not None and b:
                        ratio[f"{k} per-ScaledObject/batched"] = round(p / b, 1)
                    if b is not None and f:
                        ratio[f"{k} batched/floor"] = round(b / f, 2)
                figures.append(ratio)
                print(json.dumps(ratio), flush=True)
            finally:
                vm.stop()
    write_figures(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())
