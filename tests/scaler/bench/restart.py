"""The query burst of a scaler start under a fleet, before and after cold keys join batches
(issue 29, item 1): figures, not a test (tests/scaler/test_restart.py is its smoke).

For each fleet size, one real VictoriaMetrics holding bench.py's fleet; for each mode, "before"
(`--cold-batch-window 0s`: every cold ScaledObject its own query, as the scaler did before the
window) and "after" (the defaults): start `scaler serve`, ask every ScaledObject once, all at
once, over two connections with KEDA's 3 s deadline, and count VictoriaMetrics' own queries of
that first refresh interval; then one steady refresh tick's. The client is test_restart.py's
(Python, about 1,000 calls a second at most on this machine, so past that it is the client that
is measured), or with --burst a Go one (tests/scaler/bench/tools/burst: one goroutine per
ScaledObject, all asking at one instant, each with its own 3 s deadline, waiting for the server's
streams inside it as KEDA's calls would). With --ghz and --spread S the calls come at an even rate
over S seconds instead, as KEDA's scale loops ask after a scaler restart: each loop keeps its own
phase of the polling interval, so the fleet's first calls arrive spread over it, not at one instant.

With --api the fleet is also loaded as objects into a real kube-apiserver (fleet_api.py: a Cluster
and a ScaledObject per ScaledObject), and modes `cold-kube` (--topology kube, no warm start) and
`warm` (--topology kube with the warm start: the scaler lists the ScaledObjects naming it and
evaluates them before it reports SERVING, which start() waits for as a Service would) compare the
same burst side by side (issue 42, item 2).

  PYTHONPATH=tests/lib $COZY_TOOLS/venv/bin/python tests/scaler/bench/restart.py \
    --scaler target/release/scaler --sizes 1000,10000
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import load_series, loadavg, run_header, write_figures, so  # noqa: E402
from fleet_api import WARM_FLAGS, FleetApi  # noqa: E402
import promtext  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from side_by_side import Noop, ghz, summary, write_requests  # noqa: E402
from test_restart import burst, steady_tick  # noqa: E402
from testkit import rss_kib, wait_until  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

DEADLINE = 3.0


def ask(args, address: str, n: int) -> dict:
    """Every ScaledObject's first call, with the client the arguments choose; what came back."""
    if args.burst:
        out = subprocess.run([args.burst, "-addr", address, "-data", args.requests, "-connections",
                              str(args.connections), "-deadline", f"{DEADLINE:g}s"],
                             capture_output=True, text=True, check=True)
        got = json.loads(out.stdout)
        return {"client": "burst", "codes": got["codes"], "answer_p50_s": got["ok_p50_s"],
                "answer_max_s": got["ok_max_s"], "answers_past_deadline": n - got["codes"].get("OK", 0)}
    if args.ghz:
        # Spread: enough workers that none is free only because the scaler is slow to answer.
        run = ghz(args.ghz, address, args.requests, total=n, rps=n / args.spread,
                  concurrency=min(n, 4000), connections=args.connections, timeout=f"{DEADLINE:g}s")
        got = summary(run)
        return {"client": "ghz", "codes": {"OK": got["ok"], **got["errors"]},
                "answer_p50_s": round(got["p50_ms"] / 1000, 3),
                "answer_max_s": round(run["slowest"] / 1e9, 3),
                "answers_past_deadline": n - got["ok"]}
    answers = asyncio.run(burst(address, n, so))
    late = sorted(a[2] for a in answers)
    codes = {}
    for a in answers:
        codes[a[1]] = codes.get(a[1], 0) + 1
    return {"client": "python", "codes": codes,
            "answer_p50_s": round(late[len(late) // 2], 3), "answer_max_s": round(late[-1], 3),
            "answers_past_deadline": sum(1 for x in late if x >= DEADLINE)}


def scaler_gauge(scaler: Scaler, name: str) -> float:
    return promtext.total(promtext.scrape(f"{scaler.admin}/metrics", families=(name,)), name)


def brief(answered: dict) -> dict:
    """The codes and latencies of a second round (the first's client fields are not repeated)."""
    return {k: answered[k] for k in ("codes", "answer_p50_s", "answer_max_s")}


def polls(args, address: str, n: int, started: float) -> list:
    """KEDA's next polls, one a refresh interval after the other, until every ScaledObject is
    answered within the deadline (at most --polls): how many intervals a burst's fleet takes to
    be served whole, since the server learns only the keys whose calls reach it."""
    rounds = []
    for k in range(1, args.polls + 1):
        time.sleep(max(0.0, started + k * args.refresh - time.monotonic()))
        rounds.append(brief(ask(args, address, n)))
        if rounds[-1]["codes"].get("OK", 0) == n:
            break
    return rounds


def baseline(args, n: int, work: str) -> dict:
    """The same burst, twice, against the no-op stand-in: what the transport and this machine
    allow at all (a server that answers a constant at once)."""
    noop = Noop(args.noop, work)
    try:
        one = write_requests(os.path.join(work, "one.json"), [0])
        wait_until(lambda: ask(argparse.Namespace(**{**vars(args), "requests": one}), noop.address, 1)
                   ["codes"].get("OK") == 1, 20, 0.2, f"no-op stand-in on {noop.address}")
        first, again = ask(args, noop.address, n), ask(args, noop.address, n)
        return {"part": "start burst", "scaledobjects": n, "server": "noop stand-in",
                "connections": args.connections, **first, "again": brief(again), "loadavg": loadavg()}
    finally:
        noop.proc.stop()


def measure(args, vm, n: int, mode: str, flags: list, work: str, api=None) -> dict:
    q0 = vm.query_requests()
    kube = api.scaler_options() if api else {}
    start = time.monotonic()
    scaler = Scaler(work, vm.url, "--log-level", "warn", "--max-cached-objects", str(max(n, 10000)),
                    *flags, refresh=f"{args.refresh}s", **kube).start(timeout=180)
    try:
        started = time.monotonic()
        ready = {"ready_s": round(started - start, 2), "warm_held": scaler_gauge(scaler, "scaler_warm_start_scaledobjects"),
                 "rss_ready_mib": round(rss_kib(scaler.proc.pid) / 1024, 1)} if api else {}
        answered = ask(args, scaler.address, n)
        burst_s = time.monotonic() - started
        # The rest of the first refresh interval after the start (its first tick has nothing due).
        time.sleep(max(0.0, max(args.refresh, args.spread) - (time.monotonic() - started)))
        first = vm.query_requests() - q0
        if args.burst:
            answered["polls"] = polls(args, scaler.address, n, started)
        steady = steady_tick(scaler, args.refresh)
        return {"part": "start burst", "scaledobjects": n, "mode": mode, "spread_s": args.spread,
                "connections": args.connections, "flags": " ".join(flags) or "(defaults)",
                "queries_first_refresh": first, "queries_steady_tick": steady,
                "ratio_first_over_steady": round(first / steady, 2) if steady else None,
                "burst_s": round(burst_s, 2), **ready, **answered, "loadavg": loadavg()}
    finally:
        scaler.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--refresh", type=float, default=15)
    ap.add_argument("--modes", default="before,after")
    ap.add_argument("--json")
    ap.add_argument("--ghz", help="with --spread: ghz (tests/scaler/bench/setup.sh) asks at an even rate")
    ap.add_argument("--burst", help="all at once with burst (tests/scaler/bench/setup.sh): one goroutine per "
                    "call, each with its own deadline, at one instant (ghz cannot start 50,000 workers)")
    ap.add_argument("--noop", help="with --burst: the no-op stand-in (scaler/examples/noop_external_scaler.rs, "
                    "release build) asked the same way first, as the baseline")
    ap.add_argument("--polls", type=int, default=8,
                    help="with --burst: KEDA's next polls, one per refresh interval, until all are answered")
    ap.add_argument("--max-streams", type=int, help="--max-streams-per-connection for every mode")
    ap.add_argument("--spread", type=float, default=0,
                    help="seconds over which the calls come at an even rate (ghz only; 0: all at once)")
    ap.add_argument("--api", action="store_true",
                    help="load the fleet into a real kube-apiserver too and run the scalers with --topology kube "
                         "(modes cold-kube, warm)")
    ap.add_argument("--connections", type=int, default=2,
                    help="client connections (KEDA holds one to a scaler address)")
    args = ap.parse_args()
    if bool(args.spread) != bool(args.ghz):
        ap.error("--spread and --ghz go together (all at once: --burst, or the Python client)")
    if args.noop and not args.burst:
        ap.error("--noop is the baseline of --burst")
    if args.spread and args.burst:
        ap.error("--burst asks all at once: no --spread")
    os.environ["SCALER_BIN"] = os.path.abspath(args.scaler)
    figures = [run_header(scaler=args.scaler)]
    print(json.dumps(figures[-1]), flush=True)
    with tempfile.TemporaryDirectory(prefix="scaler-restart-") as work:
        for n in (int(s) for s in args.sizes.split(",")):
            vm = VictoriaMetrics(os.path.join(work, f"vm-{n}")).start()
            try:
                load_series(vm, n)
                args.requests = write_requests(os.path.join(work, f"fleet-{n}.json"), range(n))
                modes = {"before": ["--cold-batch-window", "0s"], "after": [],
                         "after-100ms": ["--cold-batch-window", "100ms"],
                         "cold-kube": ["--warm-start-timeout", "0s"],
                         "warm": WARM_FLAGS}
                api = None
                if args.api:
                    api = FleetApi().start()
                    figures.append({"part": "fleet in the API server", "scaledobjects": n, **api.load(n)})
                    print(json.dumps(figures[-1]), flush=True)
                if args.noop:
                    figures.append(baseline(args, n, work))
                    print(json.dumps(figures[-1]), flush=True)
                for mode in args.modes.split(","):
                    flags = modes[mode] + (["--max-streams-per-connection", str(args.max_streams)]
                                           if args.max_streams else [])
                    figures.append(measure(args, vm, n, mode, flags, work, api))
                    print(json.dumps(figures[-1]), flush=True)
            finally:
                vm.stop()
                if api:
                    api.stop()
    write_figures(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())
