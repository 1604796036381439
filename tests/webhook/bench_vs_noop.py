"""Side-by-side benchmark of webhook stamping (issue 14): figures and ratios, not a test.

Drives, with the same client (`hey`, a Go HTTP load generator built by tests/scaler/bench/setup.sh;
HTTP/1.1 keep-alive over TLS) and the same certificate:
  webhook  `scaler webhook`, the stamp scenario: CREATE of a HelmRelease in a tenant whose
           namespace label is cached, answered with the shard-label patch and no API call;
  noop     the no-op STAND-IN (sharding/examples/noop_admission.rs): the webhook's own TLS and
           hyper serving loop answering every review "allowed", unchanged.
Rounds interleave the two so machine load hits both alike; medians and the ratio are printed.

  tests/scaler/bench/side_by_side.sh runs it; by hand:
  $COZY_TOOLS/venv/bin/python tests/webhook/bench_vs_noop.py --scaler target/release/scaler \
      --noop target/release/examples/noop_admission --hey <path printed by setup.sh>
"""
import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import requests  # noqa: E402

from testkit import Proc, free_port, wait_until  # noqa: E402
import webhook_harness  # noqa: E402
from webhook_harness import TRANSIENT, Emulator, Webhook, hr, make_certs, review  # noqa: E402


def hey(hey_bin: str, url: str, body: Path, total: int, concurrency: int) -> dict:
    """One hey run; its per-request CSV turned into rps and percentiles (every answer must be 200)."""
    total -= total % concurrency  # each of hey's workers sends total // concurrency
    # hey names the TLS server after -host (an IP address is not a valid SNI name).
    argv = [hey_bin, "-n", str(total), "-c", str(concurrency), "-m", "POST", "-T", "application/json",
            "-D", str(body), "-host", "localhost", "-o", "csv", url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    bad = sum(1 for r in rows if r["status-code"] != "200")
    if len(rows) != total or bad:
        # The CSV leaves failed requests out; hey's summary names them.
        again = subprocess.run([a for a in argv if a not in ("-o", "csv")], capture_output=True, text=True).stdout
        raise SystemExit(f"hey: {len(rows)} answers of {total}, {bad} not 200 against {url}; a rerun said:\n{again}")
    latency = sorted(float(r["response-time"]) * 1000 for r in rows)
    # offset = when the request started after the run began; the last one ends at offset + time.
    elapsed = max(float(r["offset"]) + float(r["response-time"]) for r in rows)

    def pct(q):
        return latency[min(len(latency) - 1, int(q * len(latency)))]

    # hey writes times in 0.1 ms steps: the mean is the finer figure for sub-millisecond answers.
    return {"rps": round(total / elapsed, 1), "p50_ms": round(pct(0.5), 3), "p99_ms": round(pct(0.99), 3),
            "mean_ms": round(statistics.fmean(latency), 3)}


class NoopAdmission:
    """The no-op stand-in, on the webhook's certificate."""

    def __init__(self, binary: str, certs: dict, tmp: Path):
        port = free_port()
        self.url = f"https://127.0.0.1:{port}/mutate-helmrelease-shard"
        self.proc = Proc([binary, "--listen", f"127.0.0.1:{port}", "--tls-cert", str(certs["cert"]),
                          "--tls-key", str(certs["key"])], tmp / "noop.log")

    def post(self, ca, body: dict) -> dict:
        r = requests.post(self.url, json=body, verify=str(ca), timeout=5)
        r.raise_for_status()
        return r.json()["response"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scaler", required=True, help="scaler binary (release build)")
    ap.add_argument("--noop", required=True, help="noop_admission example binary (release build)")
    ap.add_argument("--hey", required=True, help="hey binary (tests/scaler/bench/setup.sh)")
    ap.add_argument("--requests", type=int, default=20000, help="requests per round")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    # The harness read SCALER_BIN when imported; the binary benchmarked is the one named here.
    webhook_harness.SCALER = Path(args.scaler).resolve()

    with tempfile.TemporaryDirectory(prefix="webhook-sbs-") as tmp:
        tmp = Path(tmp)
        certs = make_certs(tmp / "certs")
        # Stamping a cached tenant makes no API call: the in-memory emulator only serves the
        # webhook's start-up list and watch.
        backend = Emulator(tmp)
        hook = noop = None
        try:
            backend.namespace("tenant-known", "shard1")
            hook = Webhook(tmp, backend, shards=4, certs=certs,
                           extra=["--assume-shards-ready", "--log-level", "warn"])
            noop = NoopAdmission(args.noop, certs, tmp)
            body = review("CREATE", "tenant-known", hr("tenant-known", "app", {"sharding.fluxcd.io/key": "tenants"}))
            wait_until(lambda: noop.post(certs["ca"], body)["allowed"], 15, 0.1, "no-op admission", retry=TRANSIENT)
            # The two answers differ exactly by the decision: the webhook stamps, the stand-in does not.
            assert "patch" in hook.review(body), "the webhook did not stamp the benchmark's review"
            assert "patch" not in noop.post(certs["ca"], body)
            path = tmp / "review.json"
            path.write_text(json.dumps(body))
            targets = {"noop stand-in": noop.url, "webhook": hook.url}
            binaries = {"noop stand-in": args.noop, "webhook": webhook_harness.SCALER}
            for url in targets.values():  # warm-up: connections, TLS session, caches
                hey(args.hey, url, path, 500, args.concurrency)
            runs = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, url in targets.items():
                    runs[name].append(hey(args.hey, url, path, args.requests, args.concurrency))
            figures = []
            med = {}
            for name, rs in runs.items():
                med[name] = {k: round(statistics.median(r[k] for r in rs), 3) for k in ("rps", "p50_ms", "p99_ms", "mean_ms")}
                figures.append({"part": "webhook", "server": name, "binary": str(binaries[name]),
                                "rounds": rs, "median": med[name],
                                "requests": args.requests, "concurrency": args.concurrency})
            figures.append({"part": "webhook ratio (goal: within 1.5x)",
                            "p50_ratio": round(med["webhook"]["p50_ms"] / med["noop stand-in"]["p50_ms"], 2),
                            "p99_ratio": round(med["webhook"]["p99_ms"] / med["noop stand-in"]["p99_ms"], 2),
                            "mean_ratio": round(med["webhook"]["mean_ms"] / med["noop stand-in"]["mean_ms"], 2),
                            "noop_rps_over_webhook_rps": round(med["noop stand-in"]["rps"] / med["webhook"]["rps"], 2),
                            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())})
            for fig in figures:
                print(json.dumps(fig), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(figures, indent=1))
        finally:
            for proc in (hook, noop and noop.proc):
                if proc:
                    proc.stop()
            backend.stop()


if __name__ == "__main__":
    main()
