"""Resident memory of `scaler serve` binaries side by side, at one fleet size (figures, not a test).

For each binary in turn, against one real VictoriaMetrics holding --n clusters' CNPG series: start
`scaler serve` (default flags, --refresh-interval 15s), ask every ScaledObject once with ghz (cold
fill), then poll the whole fleet like KEDA (--polls calls per ScaledObject per refresh interval) for
--windows intervals, then leave it idle (refresh ticks only) for two intervals. VmRSS is sampled every
15 s throughout, VmHWM at the end. Give the baseline binary first (for example the previous commit's
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

from bench import load_series, loadavg  # noqa: E402 (bench.py sets sys.path)
from side_by_side import ghz, summary, write_requests  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import hwm_kib, rss_kib  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

REFRESH = 15


def measure(label: str, binary: str, vm, data: str, args, work: str) -> dict:
    os.environ["SCALER_BIN"] = os.path.abspath(binary)
    scaler = Scaler(work, vm.url, "--log-level", "warn", refresh=f"{REFRESH}s").start()
    try:
        pid, started, samples = scaler.proc.pid, time.time(), []

        def sample(phase: str):
            samples.append({"phase": phase, "s": round(time.time() - started), "rss_mib": rss_kib(pid) // 1024})

        fill = summary(ghz(args.ghz, scaler.address, data, total=args.n, concurrency=64, timeout="60s"))
        sample("filled")
        done = threading.Event()

        def sampler():
            while not done.wait(REFRESH):
                sample("polling")

        thread = threading.Thread(target=sampler)
        thread.start()
        steady = summary(ghz(args.ghz, scaler.address, data, total=args.n * args.polls * args.windows,
                             rps=args.n * args.polls / REFRESH, concurrency=50))
        done.set()
        thread.join()
        for _ in range(2):
            time.sleep(REFRESH)
            sample("idle")
        return {"binary": label, "scaledobjects": args.n, "fill_errors": fill["errors"],
                "polling_rps": steady["rps"], "polling_GetMetrics_p99_ms": steady["p99_ms"],
                "polling_errors": steady["errors"], "rss": samples, "hwm_mib": hwm_kib(pid) // 1024,
                "loadavg": loadavg()}
    finally:
        scaler.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ghz", required=True, help="ghz binary (tests/scaler/bench/setup.sh)")
    ap.add_argument("--binary", action="append", required=True, metavar="LABEL=PATH",
                    help="a scaler release binary to measure, in order (repeat: baseline first)")
    ap.add_argument("--n", type=int, default=20000, help="ScaledObjects (one CNPG cluster each)")
    ap.add_argument("--polls", type=int, default=2, help="calls per ScaledObject per refresh interval")
    ap.add_argument("--windows", type=int, default=6, help="refresh intervals of polling")
    args = ap.parse_args()
    binaries = [b.split("=", 1) for b in args.binary]
    with tempfile.TemporaryDirectory(prefix="scaler-memory-") as work:
        vm = VictoriaMetrics(os.path.join(work, "vm")).start()
        try:
            load_series(vm, args.n)
            data = write_requests(os.path.join(work, "fleet.json"), range(args.n))
            for label, binary in binaries:
                print(json.dumps(measure(label, binary, vm, data, args, work)), flush=True)
        finally:
            vm.stop()


if __name__ == "__main__":
    sys.exit(main())
