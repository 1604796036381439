"""Side-by-side benchmark of the scaler (issue 14): figures and ratios, not a test.

All in one run, on this machine, against a real VictoriaMetrics, driven by ghz (a real gRPC load
generator built from the Go module proxy by setup.sh):

  queries  For each fleet size (--sizes) and each mode, "before" (`--observe-batch-size 1`: one
           backend query per ScaledObject) and "after" (the default batch size): start
           `scaler serve`, ask every ScaledObject once (cold fill), then ask each one once per
           refresh interval for --windows intervals (ghz --rps polls×N/refresh, round-robin over
           the fleet: KEDA's steady state, whose scale loop and HPA both ask) and count the
           backend queries of that window, from VictoriaMetrics' own request counter and from the
           scaler's scaler_backend_queries_total, per refresh interval of the window's real length. VmRSS/VmHWM of the scaler after
           the fill and after the window (the memory figure at the largest size).
  grpc     GetMetrics throughput and latency of the warm scaler (a hot set of ScaledObjects
           already cached) against the no-op ExternalScaler STAND-IN
           (scaler/examples/noop_external_scaler.rs: tonic's default server answering a constant),
           same ghz settings, rounds interleaved so machine load hits both alike.

A binary that has no --observe-batch-size flag (before the batched observation landed) runs the
"before" mode only, and says so. Load average is recorded with the figures: the machine is shared.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import load_series, loadavg, run_header, write_figures, scaler_counters, so  # noqa: E402 (bench.py sets sys.path)
from keda import metadata  # noqa: E402
from scaler_proc import Scaler  # noqa: E402
from testkit import REPO, Proc, free_port, hwm_kib, rss_kib, wait_until  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402

PROTO = REPO / "proto" / "externalscaler.proto"
GET_METRICS = "externalscaler.ExternalScaler.GetMetrics"


def request(i: int) -> dict:
    """GetMetrics for ScaledObject i as KEDA sends it (proto JSON for ghz)."""
    ns, name = so(i)
    return {"scaledObjectRef": {"name": name, "namespace": ns,
                                "scalerMetadata": metadata(name, target="5", max_replicas="10")},
            "metricName": f"cnpg-{name}-readconnections"}


def write_requests(path: str, indices) -> str:
    with open(path, "w") as f:
        json.dump([request(i) for i in indices], f)
    return path


def ghz(ghz_bin: str, address: str, data: str, *, total, rps=None,
        concurrency=50, connections=1, timeout="30s") -> dict:
    """One ghz run of GetMetrics over the requests in `data` (round-robin); its JSON summary."""
    # A fixed count, not --duration: ghz cancels the calls in flight when a duration ends.
    argv = [ghz_bin, "--insecure", "--proto", str(PROTO), "--import-paths", str(PROTO.parent),
            "--call", GET_METRICS, "--data-file", data, "--format", "json", "--timeout", timeout,
            "--concurrency", str(concurrency), "--connections", str(connections)]
    argv += ["--total", str(total)]
    if rps:
        argv += ["--rps", str(round(rps))]
    out = subprocess.run(argv + [address], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def summary(run: dict) -> dict:
    """rpc/s, p50/p99 in ms and non-OK answers of a ghz JSON report."""
    latency = {d["percentage"]: d["latency"] / 1e6 for d in run.get("latencyDistribution") or []}
    codes = dict(run.get("statusCodeDistribution") or {})
    ok = codes.pop("OK", 0)
    return {"rps": round(run["rps"], 1), "ok": ok, "errors": codes,
            "p50_ms": round(latency.get(50, float("nan")), 3), "p99_ms": round(latency.get(99, float("nan")), 3)}


def supports_batching(scaler_bin: str) -> bool:
    usage = subprocess.run([scaler_bin, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    return "--observe-batch-size" in usage


def emit(figures: list, fig: dict):
    figures.append(fig)
    print(json.dumps(fig), flush=True)


def queries_per_refresh(args, vm, n: int, mode: str, mode_args: list, work: str, figures: list, then=None):
    """Starts a scaler in `mode`, fills its cache with all n ScaledObjects, measures one window."""
    data = write_requests(os.path.join(work, f"fleet-{n}.json"), range(n))
    scaler = Scaler(work, vm.url, "--log-level", "warn", *mode_args, refresh=f"{args.refresh}s").start()
    try:
        pid = scaler.proc.pid
        started = time.perf_counter()
        fill = summary(ghz(args.ghz, scaler.address, data, total=n, concurrency=64, timeout="60s"))
        fill_s = time.perf_counter() - started
        rss_filled = rss_kib(pid)
        # The window starts once every key's answer is older than one refresh interval.
        time.sleep(args.refresh)
        v0, c0 = vm.query_requests(), scaler_counters(scaler.admin)["backend_queries"]
        started = time.perf_counter()
        # Asked once per interval, a key refreshed a little late is still fresh at its next call
        # and skips a whole interval; asked --polls times, each key is due once per interval.
        steady = summary(ghz(args.ghz, scaler.address, data, total=n * args.polls * args.windows,
                             rps=n * args.polls / args.refresh,
                             concurrency=args.concurrency, timeout="30s"))
        intervals = (time.perf_counter() - started) / args.refresh
        v1, c1 = vm.query_requests(), scaler_counters(scaler.admin)["backend_queries"]
        emit(figures, {
            "part": "queries", "scaledobjects": n, "mode": mode, "scaler_args": " ".join(mode_args) or "(defaults)",
            "refresh_s": args.refresh, "window_refresh_intervals": round(intervals, 2), "polls_per_refresh": args.polls,
            "vm_queries_per_refresh": round((v1 - v0) / intervals, 1),
            "scaler_backend_queries_per_refresh": round((c1 - c0) / intervals, 1),
            "fill_s": round(fill_s, 1), "fill_errors": fill["errors"],
            "steady_rps": steady["rps"], "steady_GetMetrics_p99_ms": steady["p99_ms"], "steady_errors": steady["errors"],
            "rss_filled_mib": round(rss_filled / 1024, 1), "rss_end_mib": round(rss_kib(pid) / 1024, 1),
            "hwm_mib": round(hwm_kib(pid) / 1024, 1), "loadavg": loadavg(),
        })
        if then:
            then(scaler)
    finally:
        scaler.stop()


class Noop:
    """The no-op ExternalScaler stand-in (scaler/examples/noop_external_scaler.rs)."""

    def __init__(self, binary: str, work: str):
        self.address = f"127.0.0.1:{free_port()}"
        self.proc = Proc([binary, "--listen", self.address], os.path.join(work, "noop.log"))

    def wait(self, ghz_bin: str, data: str):
        wait_until(lambda: summary(ghz(ghz_bin, self.address, data, total=1, concurrency=1))["ok"] == 1,
                   20, 0.2, f"no-op scaler on {self.address}")
        return self


def grpc_side_by_side(args, scaler, work: str, figures: list):
    """GetMetrics of the warm scaler and of the no-op stand-in, same ghz settings, interleaved;
    once per connection count of --connections."""
    hot = write_requests(os.path.join(work, "hot.json"), range(args.hot))
    ghz(args.ghz, scaler.address, hot, total=args.hot, concurrency=16)  # warm the hot set
    noop = Noop(args.noop, work)
    try:
        noop.wait(args.ghz, hot)
        for connections in (int(c) for c in args.connections.split(",")):
            runs = {"noop stand-in": [], "scaler": []}
            for _ in range(args.rounds):
                for name, address in (("noop stand-in", noop.address), ("scaler", scaler.address)):
                    runs[name].append(summary(ghz(args.ghz, address, hot, total=args.grpc_requests,
                                                  concurrency=args.concurrency, connections=connections)))
            med = {name: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("rps", "p50_ms", "p99_ms")}
                   for name, rs in runs.items()}
            for name, rs in runs.items():
                emit(figures, {"part": "grpc", "server": name, "hot_scaledobjects": args.hot, "rounds": rs,
                               "median": med[name], "concurrency": args.concurrency,
                               "connections": connections, "loadavg": loadavg()})
            emit(figures, {"part": "grpc ratio (goal: within 1.1x)", "connections": connections,
                           "noop_rps_over_scaler_rps": round(med["noop stand-in"]["rps"] / med["scaler"]["rps"], 2),
                           "scaler_p99_over_noop_p99": round(med["scaler"]["p99_ms"] / med["noop stand-in"]["p99_ms"], 2)})
    finally:
        noop.proc.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True, help="scaler binary (release build)")
    ap.add_argument("--noop", required=True, help="noop_external_scaler example binary (release build)")
    ap.add_argument("--ghz", required=True, help="ghz binary (setup.sh)")
    ap.add_argument("--sizes", default="1000,5000,20000", help="fleet sizes, comma-separated")
    ap.add_argument("--refresh", type=float, default=15, help="--refresh-interval of the scaler, seconds")
    ap.add_argument("--windows", type=int, default=2, help="refresh intervals measured per size and mode")
    ap.add_argument("--polls", type=int, default=2, help="calls per ScaledObject per refresh interval")
    ap.add_argument("--hot", type=int, default=200, help="ScaledObjects of the gRPC comparison")
    ap.add_argument("--grpc-requests", type=int, default=20000, help="GetMetrics calls per gRPC round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved gRPC rounds per server")
    ap.add_argument("--concurrency", type=int, default=50, help="ghz workers")
    ap.add_argument("--connections", default="1", help="ghz connections, comma-separated: one comparison each")
    ap.add_argument("--json", help="also write all figures to this file")
    args = ap.parse_args()
    os.environ["SCALER_BIN"] = os.path.abspath(args.scaler)

    modes = [("before", ["--observe-batch-size", "1"]), ("after", [])]
    batching = supports_batching(args.scaler)
    if not batching:
        modes = [("before", [])]
    figures = []
    emit(figures, run_header(scaler=args.scaler,
                             batching=batching or "absent: this binary has no --observe-batch-size, 'before' only"))
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="scaler-sbs-") as work:
        for n in sizes:
            vm = VictoriaMetrics(os.path.join(work, f"vm-{n}")).start()
            try:
                started = time.time()
                load_series(vm, n)
                print(f"loaded {n} clusters in {time.time() - started:.1f}s", flush=True)
                for mode, mode_args in modes:
                    # The gRPC comparison runs on the smallest fleet's final-mode scaler, cache warm.
                    last = n == sizes[0] and mode == modes[-1][0]
                    queries_per_refresh(args, vm, n, mode, mode_args, work, figures,
                                        then=(lambda s: grpc_side_by_side(args, s, work, figures)) if last else None)
            finally:
                vm.stop()
    emit(figures, {"loadavg_end": loadavg()})
    write_figures(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())
