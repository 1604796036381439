"""Resident memory of `scaler serve` binaries side by side, at one fleet size (figures, not a test).

For each binary in turn, against one real VictoriaMetrics holding --n clusters' CNPG series: start
`scaler serve` (default flags but --max-cached-objects --n, so the whole fleet is held;
--refresh-interval 15s), ask every ScaledObject once with ghz (cold fill), then poll the whole fleet
like KEDA (--polls calls per ScaledObject per refresh interval) for --windows intervals, then leave
it idle (refresh ticks only) for two intervals. VmRSS, VmHWM (so the phase of the peak shows)
and the thread count are sampled every 5 s throughout (the largest per phase: start, fill,
polling, idle), then one scrape of /metrics (its size, time and what it added to VmHWM), VmHWM
at the end, and the process's CPU seconds (user +
system) per phase. One binary under two labels, one with --env, measures an allocator setting.
With --api the fleet is also loaded into a real kube-apiserver (fleet_api.py: a Cluster and a
ScaledObject each) and every binary runs as the package runs it: --topology kube (the Cluster
index) with the warm start (--scaler-address), so "start" holds the index and the warm start's
evaluations; a binary named in --cold runs without the warm start, so its "start" holds the index
alone and its fill adds the --n held ScaledObjects ("held_kib_each": VmRSS after the fill less
VmRSS before it, per ScaledObject).
Give the baseline binary first (for example the previous commit's
release build, copied aside) and the candidate after it: both run in the same VictoriaMetrics, on the
same series, in one run, so the machine's load hits both alike.

  eval "$(tests/scaler/bench/setup.sh)"   # sets ghz=…
  "$COZY_TOOLS/venv/bin/python" tests/scaler/bench/memory.py --ghz "$ghz" \
    --binary before=/tmp/scaler-old --binary after=target/release/scaler
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import requests

from bench import load_series, loadavg  # noqa: E402 (bench.py sets sys.path)
from fleet_api import WARM_FLAGS, FleetApi  # noqa: E402
from side_by_side import ghz, summary, write_requests  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import hwm_kib, rss_kib  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

REFRESH = 15
SAMPLE = 5  # seconds between VmRSS samples


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int:
    """Threads of a live process: the blocking pool's threads each hold allocator pages."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def measure(label: str, binary: str, env: dict, vm, data: str, args, work: str, api=None) -> dict:
    os.environ["SCALER_BIN"] = os.path.abspath(binary)
    package = api.scaler_options(env) if api else {"env": env}
    warm = WARM_FLAGS if api and label not in args.cold else []
    # The whole fleet held: a smaller --max-cached-objects would measure evictions, not the fleet.
    scaler = Scaler(work, vm.url, "--log-level", "warn", "--max-cached-objects", str(args.n), *warm,
                    refresh=f"{REFRESH}s", **package).start(timeout=180)
    try:
        pid, started, samples, cpu = scaler.proc.pid, time.time(), [], {}
        phase, done = ["start"], threading.Event()

        def sample():
            samples.append({"phase": phase[0], "s": round(time.time() - started),
                            "rss_mib": round(rss_kib(pid) / 1024, 1),
                            "hwm_mib": round(hwm_kib(pid) / 1024, 1), "threads": threads(pid)})

        def sampler():
            while not done.wait(SAMPLE):
                sample()

        def enter(name: str):
            sample()
            cpu[phase[0]] = cpu_s(pid) - sum(cpu.values())
            phase[0] = name

        sample()
        thread = threading.Thread(target=sampler)
        thread.start()
        try:
            enter("fill")
            fill = summary(ghz(args.ghz, scaler.address, data, total=args.n, concurrency=64, timeout="60s"))
            enter("polling")
            steady = summary(ghz(args.ghz, scaler.address, data, total=args.n * args.polls * args.windows,
                                 rps=args.n * args.polls / REFRESH, concurrency=50))
            enter("idle")
            time.sleep(2 * REFRESH)
            hwm_idle = hwm_kib(pid)
            # Last, one Prometheus scrape of /metrics, as the package's scrape config asks for it:
            # the per-ScaledObject gauges are a dozen lines per ScaledObject.
            enter("scrape")
            t = time.monotonic()
            body = requests.get(f"{scaler.admin}/metrics", timeout=120).content
            scraped = {"bytes": len(body), "seconds": round(time.monotonic() - t, 2),
                       "hwm_growth_mib": round((hwm_kib(pid) - hwm_idle) / 1024, 1)}
            enter("end")
        finally:
            done.set()
            thread.join()
        by_phase = {}
        for s in samples:
            by_phase.setdefault(s["phase"], []).append(s["rss_mib"])
        # The last sample of a phase is taken as the next one begins: before the fill, and after it.
        # A warm-started binary holds the fleet before the fill, so the difference says nothing there.
        held_kib_each = None if warm else round((by_phase["fill"][-1] - by_phase["start"][-1]) * 1024 / args.n, 2)
        return {"binary": label, "env": env, "scaledobjects": args.n, "topology": "kube" if api else "metrics",
                "warm_start": bool(warm), "fill_errors": fill["errors"],
                "polling_rps": steady["rps"], "polling_GetMetrics_p99_ms": steady["p99_ms"],
                "polling_errors": steady["errors"], "scrape": scraped,
                "rss_max_mib": {k: max(v) for k, v in by_phase.items()}, "held_kib_each": held_kib_each,
                "hwm_mib": round(hwm_kib(pid) / 1024, 1),
                "threads_max": max(s["threads"] for s in samples),
                "cpu_s": {k: round(v, 2) for k, v in cpu.items()}, "rss": samples, "loadavg": loadavg()}
    finally:
        scaler.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ghz", required=True, help="ghz binary (tests/scaler/bench/setup.sh)")
    ap.add_argument("--binary", action="append", required=True, metavar="LABEL=PATH",
                    help="a scaler release binary to measure, in order (repeat: baseline first)")
    ap.add_argument("--env", action="append", default=[], metavar="LABEL:NAME=VALUE",
                    help="an environment variable for the binary LABEL (repeat), e.g. after:MIMALLOC_PURGE_DELAY=0")
    ap.add_argument("--n", type=int, default=20000, help="ScaledObjects (one CNPG cluster each)")
    ap.add_argument("--polls", type=int, default=2, help="calls per ScaledObject per refresh interval")
    ap.add_argument("--windows", type=int, default=6, help="refresh intervals of polling")
    ap.add_argument("--api", action="store_true",
                    help="load the fleet into a real kube-apiserver and run the binaries with --topology kube "
                         "and the warm start, as the package does")
    ap.add_argument("--cold", action="append", default=[], metavar="LABEL",
                    help="with --api, run binary LABEL without the warm start (repeat): its start phase holds "
                         "the Cluster index alone, so the fill measures the memory of the held ScaledObjects")
    args = ap.parse_args()
    binaries = [b.split("=", 1) for b in args.binary]
    envs = {}
    for e in args.env:
        label, var = e.split(":", 1)
        envs.setdefault(label, {}).update([var.split("=", 1)])
    with tempfile.TemporaryDirectory(prefix="scaler-memory-") as work:
        vm = VictoriaMetrics(os.path.join(work, "vm")).start()
        api = None
        try:
            load_series(vm, args.n)
            data = write_requests(os.path.join(work, "fleet.json"), range(args.n))
            if args.api:
                api = FleetApi().start()
                print(json.dumps({"part": "fleet in the API server", **api.load(args.n)}), flush=True)
            for label, binary in binaries:
                print(json.dumps(measure(label, binary, envs.get(label, {}), vm, data, args, work, api)), flush=True)
        finally:
            vm.stop()
            if api:
                api.stop()


if __name__ == "__main__":
    sys.exit(main())
