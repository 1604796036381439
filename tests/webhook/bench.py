"""Benchmark of `scaler webhook`: admission latency (p50/p90/p99) and throughput over HTTPS.

Not a test: prints figures. Starts its own API backend and webhook on loopback:
  $COZY_TOOLS/venv/bin/python tests/webhook/bench.py [--backend emulator|apiserver]
      [--requests 4000] [--concurrency 16] [--tenants 200]
SCALER_BIN=target/release/scaler selects another build (default: the debug build where cargo put it,
testkit.cargo_bin).

Scenarios:
  stamp  CREATE in a tenant whose namespace label is cached: decision + patch, no API call.
  skip   UPDATE: allowed unchanged at once.
  place  CREATE for a brand-new tenant each time: namespace GET + conditional PATCH on the API.
The client is Python (httpx, HTTP/1.1 keep-alive), so the throughput is a lower bound set partly
by the client on this 2-core machine.
"""
import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from webhook_harness import SCALER, ApiServer, Emulator, Webhook, hr, review


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def run(url, ca, bodies, concurrency):
    latencies = []
    queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(json.dumps(body).encode())
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(verify=str(ca), limits=limits, trust_env=False, timeout=10) as client:
        async def worker():
            while not queue.empty():
                body = queue.get_nowait()
                started = time.perf_counter()
                r = await client.post(url, content=body, headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                if r.status_code != 200 or not r.json()["response"]["allowed"]:
                    raise SystemExit(f"bad reply {r.status_code}: {r.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p90_ms": 1000 * percentile(latencies, 0.90),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * latencies[-1],
        "mean_ms": 1000 * statistics.fmean(latencies),
    }


def buckets(hook):
    """Cumulative counts of the server-side latency histogram, by upper bound."""
    prefix = 'cozy_flux_shard_admission_duration_seconds_bucket{le="'
    return {float(k[len(prefix):-2]): v for k, v in hook.metrics().items() if k.startswith(prefix)}


def server_bound(before, after, q):
    """Upper bucket bound of the q-quantile of the requests between two snapshots."""
    bounds = sorted(after)
    total = after[bounds[-1]] - before.get(bounds[-1], 0)
    for le in bounds:
        if after[le] - before.get(le, 0) >= q * total:
            return le
    return float("inf")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["emulator", "apiserver"], default="apiserver")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tenants", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        backend = Emulator(tmp) if args.backend == "emulator" else ApiServer(tmp)
        hook = None
        try:
            backend.namespace("tenant-known", "shard1")
            for i in range(args.tenants):
                backend.namespace(f"tenant-new{i}")
            hook = Webhook(tmp, backend, shards=4, extra=["--assume-shards-ready", "--log-level", "warn"])
            ca = hook.certs["ca"]
            stamp = [review("CREATE", "tenant-known", hr("tenant-known", f"app{i}", {"sharding.fluxcd.io/key": "tenants"}))
                     for i in range(args.requests)]
            skip = [review("UPDATE", "tenant-known", hr("tenant-known", f"app{i}", None)) for i in range(args.requests)]
            place = [review("CREATE", f"tenant-new{i}", hr(f"tenant-new{i}", "app", None)) for i in range(args.tenants)]
            asyncio.run(run(hook.url, ca, stamp[:200], args.concurrency))  # warm-up
            print(f"scaler binary: {SCALER} ({'release' if 'release' in str(SCALER) else 'debug'} build); "
                  f"backend: {args.backend}; concurrency {args.concurrency}; {os.cpu_count()} CPUs")
            for name, bodies in (("stamp", stamp), ("skip", skip), ("place", place)):
                before = buckets(hook)
                r = asyncio.run(run(hook.url, ca, bodies, args.concurrency))
                after = buckets(hook)
                server = "/".join(f"{1000 * server_bound(before, after, q):g}" for q in (0.5, 0.99))
                print(f"{name:5}  n={r['requests']:5}  {r['rps']:7.0f} req/s  client p50 {r['p50_ms']:6.2f} ms  "
                      f"p90 {r['p90_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  max {r['max_ms']:6.2f} ms  "
                      f"| server p50/p99 <= {server} ms")
            print(f"placements recorded: {hook.metrics()['cozy_flux_shard_placements_total']:.0f}; "
                  f"load average: {os.getloadavg()[0]:.1f}")
        finally:
            if hook:
                hook.stop()
            backend.stop()


if __name__ == "__main__":
    main()
