"""Issue 23, second hardening round (the scaler's answers, caches and backtest edges): each test
reproduces one finding against the real binary, the real VictoriaMetrics of the suite or a tiny
stand-in HTTP server (named as such), bounded in time and loopback only, and fails on the binary
before the fix. Figures go to $TEST_FIGURES (testkit.record_figure) for docs/scaler-tests.md."""
import multiprocessing
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from keda import Keda, code_of, error_of, metadata
from promtext import scrape, select, total
from testkit import free_port, record_figure


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


class Redirector:
    """Stand-in for a misconfigured proxy: answers every request with HTTP 307 to `location`."""

    def __init__(self, location: str):
        self.requests = 0
        redirector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                redirector.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(307)
                self.send_header("Location", location + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_redirect_is_an_error_never_another_servers_answer(start_scaler, vm):
    # The redirect points at the real VictoriaMetrics, which would answer tenant-a/pg correctly:
    # a client that follows it serves a number it did not ask --prometheus-url for.
    redirector = Redirector(vm.url)
    try:
        _, keda = start_scaler(redirector.url)
        ref = keda.ref("tenant-a", "pg", metadata())
        error = error_of(lambda: keda.metrics(ref, "cnpg-pg-readconnections"))
    finally:
        redirector.close()
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    assert "HTTP 307" in error.details() and vm.url in error.details(), error.details()
    assert redirector.requests >= 1
    record_figure("redirect", code=error.code().name)


def test_made_up_keys_are_bounded_least_recently_asked_first(start_scaler, vm):
    scaler, keda = start_scaler(vm.url, "--max-cached-objects", "40")
    kept = keda.ref("tenant-a", "kept", metadata(cluster="pg"))
    keda.metrics(kept, "cnpg-pg-readconnections")
    for i in range(300):
        keda.metrics(keda.ref("tenant-a", f"made-up-{i}", metadata(cluster="pg")), "cnpg-pg-readconnections")
        if i % 10 == 0:  # asked all along: never the least recent
            keda.metrics(kept, "cnpg-pg-readconnections")
    samples = scrape(scaler.admin + "/metrics")
    entries = total(samples, "scaler_cache_entries")
    evicted = total(samples, "scaler_cache_evictions_total", cache="decisions", cause="capacity")
    series = select(samples, "scaler_decision_desired_instances")
    names = {labels["scaledobject"] for labels, _ in series}
    record_figure("made-up keys", keys=301, cache_entries=entries, evicted=evicted, desired_series=len(series))
    assert entries <= 40, entries
    assert evicted >= 301 - 40, evicted
    assert len(series) <= 40 and "kept" in names, names


NEVER = "0 {minute} 31 2 * for 1h floor 2"
FLOOD_RATE = 100  # rpc/s: ten times the rate that pushed other keys past 5 s before the fix


def flood(address: str, on, stop, codes):
    """In its own process (its own GIL): while `on` is set, GetMetricSpec at FLOOD_RATE, each
    with a new never-matching schedule, so nothing can be cached; `codes` collects status names."""
    keda = Keda(address)
    i = 0
    while not stop.is_set():
        if not on.wait(0.05):
            continue
        i += 1
        md = metadata(cluster="pg", schedules=f"0 1 * * * for 1h floor 2; {NEVER.format(minute=i % 60)}",
                      target=str(1 + i // 60))
        t0 = time.monotonic()
        codes.append(code_of(lambda: keda.spec(keda.ref("tenant-a", "flood", md), timeout=10)).name)
        time.sleep(max(0.0, 1 / FLOOD_RATE - (time.monotonic() - t0)))
    keda.close()


def latencies(keda, refs, calls: int) -> list[float]:
    out = []
    for n in range(calls):
        ref = refs[n % len(refs)]
        t0 = time.perf_counter()
        keda.metrics(ref, "cnpg-pg-readconnections")
        out.append(time.perf_counter() - t0)
    return out


def test_a_flood_of_expensive_schedules_leaves_other_keys_fast(start_scaler, vm):
    scaler, keda = start_scaler(vm.url, refresh="30s")
    refs = [keda.ref("tenant-a", f"quiet-{i}", metadata(cluster="pg")) for i in range(4)]
    for ref in refs:
        keda.metrics(ref, "cnpg-pg-readconnections")
    spawn = multiprocessing.get_context("spawn")
    quiet, loaded = [], []
    with spawn.Manager() as manager:
        on, stop, codes = manager.Event(), manager.Event(), manager.list()
        flooder = spawn.Process(target=flood, args=(scaler.address, on, stop, codes), daemon=True)
        flooder.start()
        try:
            # Quiet and flooded windows interleaved, so the shared machine's own load drifts
            # into both alike.
            for _ in range(6):
                quiet += latencies(keda, refs, 150)
                on.set()
                time.sleep(0.3)  # the flood is on
                loaded += latencies(keda, refs, 150)
                on.clear()
                time.sleep(0.1)
        finally:
            stop.set()
            flooder.join(20)
            flooder.kill()
        codes = list(codes)
    quiet_p99, loaded_p99 = p99(quiet), p99(loaded)
    figures = dict(flood_rpcs=len(codes), quiet_p50_ms=statistics.median(quiet) * 1e3, quiet_p99_ms=quiet_p99 * 1e3,
                   flood_p50_ms=statistics.median(loaded) * 1e3, flood_p99_ms=loaded_p99 * 1e3)
    record_figure("schedule flood", **figures)
    print(f"schedule flood: {figures}")
    assert len(codes) > 100 and set(codes) == {"INVALID_ARGUMENT"}, (len(codes), set(codes))
    assert loaded_p99 <= 2 * quiet_p99, figures
