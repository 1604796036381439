"""Two scaler replicas behind one Service, restarted together and one after the other (issue 42,
item 3): figures, not a test.

KEDA 2.20 can shard its operator; each shard holds one connection to the scaler's Service, and
the Service puts each connection on one replica, so with two shards each replica answers about
half the fleet (both connections can also land on one replica: that is one scaler holding the
whole fleet, memory.py's case). Here, one real VictoriaMetrics holds bench.py's fleet of --n
clusters; shard 0 (the even ScaledObjects) asks replica A over one connection and shard 1 (the
odd ones) asks replica B, each at KEDA's pace after a restart (its ScaledObjects' first calls
spread evenly over --spread seconds, ghz, KEDA's 3 s deadline). Scenarios:

  together   A and B start at once; their shards' first calls begin together.
  A, then B  With both steady, A restarts (B keeps answering), then B does.

For each start: the backend queries of the restarted replica's first refresh interval (its own
scaler_backend_queries_total, which the restart smoke checks against VictoriaMetrics' count) and
of one steady refresh tick of it after, their ratio, and its first answers' codes and slowest
latency. Last, every ScaledObject is asked on both replicas: no value may differ.

  eval "$(tests/scaler/bench/setup.sh)"   # sets ghz=…
  PYTHONPATH=tests/lib "$COZY_TOOLS/venv/bin/python" tests/scaler/bench/replicas.py --ghz "$ghz" \
    --scaler target/release/scaler --n 50000
"""
import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import load_series, loadavg, run_header, write_figures, so  # noqa: E402
from scaler_proc import PACKAGE_ENV, Scaler  # noqa: E402
from side_by_side import ghz, summary, write_requests  # noqa: E402
from test_restart import backend_queries, burst, steady_tick  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

DEADLINE = 3.0
ASK_CHUNK = 2000  # calls in flight at once when comparing the replicas' answers


def start(args, vm, work: str) -> Scaler:
    return Scaler(work, vm.url, "--log-level", "warn", "--max-cached-objects", str(args.n),
                  refresh=f"{args.refresh}s", env=PACKAGE_ENV).start()


def first_calls(args, scaler: Scaler, shard: int) -> dict:
    """Shard `shard`'s ScaledObjects asked once each, spread over --spread s, one connection."""
    n = len(range(shard, args.n, 2))
    run = ghz(args.ghz, scaler.address, args.requests[shard], total=n, rps=n / args.spread,
              concurrency=min(n, 4000), connections=1, timeout=f"{DEADLINE:g}s")
    got = summary(run)
    return {"calls": n, "codes": {"OK": got["ok"], **got["errors"]},
            "answer_p99_s": round(got["p99_ms"] / 1000, 3), "answer_max_s": round(run["slowest"] / 1e9, 3)}


def restarted(args, label: str, starts: list[tuple[Scaler, int]]) -> list[dict]:
    """Each (fresh scaler, shard) of `starts` asked by its shard at once, then its figures."""
    began = time.monotonic()
    answers = [None] * len(starts)

    def ask(k):
        scaler, shard = starts[k]
        answers[k] = first_calls(args, scaler, shard)
    threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(starts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The rest of the first refresh interval after the start.
    time.sleep(max(0.0, max(args.refresh, args.spread) - (time.monotonic() - began)))
    first = [backend_queries(scaler) for scaler, _ in starts]
    figures = []
    for (scaler, shard), answered, q in zip(starts, answers, first):
        steady = steady_tick(scaler, args.refresh)
        figures.append({"scenario": label, "replica": "AB"[shard], "scaledobjects": answered["calls"],
                        "queries_first_refresh": q, "queries_steady_tick": steady,
                        "ratio_first_over_steady": round(q / steady, 2) if steady else None,
                        **answered, "loadavg": loadavg()})
        print(json.dumps(figures[-1]), flush=True)
    return figures


def values(address: str, n: int) -> list:
    """Every ScaledObject's value from the scaler at `address`, in chunks of ASK_CHUNK calls."""
    out = []
    for lo in range(0, n, ASK_CHUNK):
        hi = min(n, lo + ASK_CHUNK)
        got = asyncio.run(burst(address, hi - lo, lambda i, lo=lo: so(lo + i)))
        out += [v for v, _, _ in got]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True)
    ap.add_argument("--ghz", required=True, help="ghz binary (tests/scaler/bench/setup.sh)")
    ap.add_argument("--n", type=int, default=50000, help="ScaledObjects (one CNPG cluster each)")
    ap.add_argument("--refresh", type=float, default=15)
    ap.add_argument("--spread", type=float, default=15, help="seconds over which a shard's first calls come")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ["SCALER_BIN"] = os.path.abspath(args.scaler)
    figures = [run_header(scaler=args.scaler, n=args.n)]
    print(json.dumps(figures[-1]), flush=True)
    with tempfile.TemporaryDirectory(prefix="scaler-replicas-") as work:
        vm = VictoriaMetrics(os.path.join(work, "vm")).start()
        replicas = []
        try:
            load_series(vm, args.n)
            args.requests = [write_requests(os.path.join(work, f"shard-{s}.json"), range(s, args.n, 2))
                             for s in (0, 1)]
            replicas = [start(args, vm, work), start(args, vm, work)]
            figures += restarted(args, "together", [(replicas[0], 0), (replicas[1], 1)])
            for shard in (0, 1):
                replicas[shard].stop()
                replicas[shard] = start(args, vm, work)
                figures += restarted(args, "A, then B", [(replicas[shard], shard)])
            a, b = (values(r.address, args.n) for r in replicas)
            differ = [i for i in range(args.n) if a[i] != b[i]]
            figures.append({"part": "answers compared", "scaledobjects": args.n,
                            "errors": sum(v is None for v in a + b), "differ": len(differ),
                            "first_differing": [so(i) for i in differ[:5]]})
            print(json.dumps(figures[-1]), flush=True)
        finally:
            for r in replicas:
                r.stop()
            vm.stop()
    write_figures(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())
