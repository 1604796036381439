"""Issue 23, second hardening round (the scaler's answers, caches and backtest edges): each test
reproduces one finding against the real binary, the real VictoriaMetrics of the suite or a tiny
stand-in HTTP server (named as such), bounded in time and loopback only, and fails on the binary
before the fix. Figures go to $TEST_FIGURES (testkit.record_figure) for docs/scaler-tests.md."""
import csv
import io
import json
import multiprocessing
import os
import stat
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

from fake_backend import FakePrometheus
from latency import p99, quiet_and_loaded
from keda import Keda, code_of, error_of, metadata
from scaler_proc import scaler_binary
from promtext import scrape, select, total
from testkit import free_port, record_figure



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


# The flooded p99 may be twice the quiet one, or this, whichever is more: on the shared 2-core
# machine a p99 of 1,500 calls swings with the other builds (quiet runs measured 3.6 to 11 ms;
# the 2x bound alone failed under a loaded machine), and the defect it guards against measured
# 498 ms on an idle one, so a fifth of that still catches it.
FLOODED_P99_BOUND = 0.1  # s
FLOOD_THREADS = 8  # in flight at once, as several KEDA replicas and retries would be


def flood(address: str, on, stop, codes):
    """In its own process (its own GIL): while `on` is set, GetMetricSpec from FLOOD_THREADS
    threads at FLOOD_RATE in all, each with a new never-matching schedule, so nothing can be
    cached; `codes` collects the status names."""
    keda = Keda(address)
    counter = iter(range(1 << 30))

    def one_thread():
        while not stop.is_set():
            if not on.wait(0.05):
                continue
            i = next(counter)
            md = metadata(cluster="pg", schedules=f"0 1 * * * for 1h floor 2; {NEVER.format(minute=i % 60)}",
                          target=str(1 + i // 60))
            t0 = time.monotonic()
            codes.append(code_of(lambda: keda.spec(keda.ref("tenant-a", "flood", md), timeout=10)).name)
            time.sleep(max(0.0, FLOOD_THREADS / FLOOD_RATE - (time.monotonic() - t0)))

    threads = [threading.Thread(target=one_thread) for _ in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keda.close()



def test_a_flood_of_expensive_schedules_leaves_other_keys_fast(start_scaler, vm):
    scaler, keda = start_scaler(vm.url, refresh="30s")
    refs = [keda.ref("tenant-a", f"quiet-{i}", metadata(cluster="pg")) for i in range(4)]
    for ref in refs:
        keda.metrics(ref, "cnpg-pg-readconnections")
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager:
        on, stop, codes = manager.Event(), manager.Event(), manager.list()
        flooder = spawn.Process(target=flood, args=(scaler.address, on, stop, codes), daemon=True)
        flooder.start()
        try:
            quiet, loaded = quiet_and_loaded(keda, refs, on, rounds=10, on_seconds=0.3, off_seconds=0.1)
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
    assert loaded_p99 <= max(2 * quiet_p99, FLOODED_P99_BOUND), figures
    assert len(codes) > 100 and set(codes) == {"INVALID_ARGUMENT"}, (len(codes), set(codes))


# --- scaler backtest: flag values and output paths (item 7) ---------------------------------

from test_backtest import DAY, FIXTURE, backtest, history_vm  # noqa: E402,F401 (the fixture)

DEAD = "http://127.0.0.1:9"  # nothing listens: a run that got this far would say "unreachable"


@pytest.mark.parametrize("flag,value", [
    ("--from", "-9223372036854775808"),
    ("--from", "9223372036854775807"),
    ("--to", "-9223372036854775808"),
    ("--from", "now-300000years"),
])
def test_no_flag_value_panics(tmp_path, flag, value):
    args = {"--from": str(DAY), "--to": str(DAY + 600), flag: value}
    result = backtest(DEAD, "--scaled-object", str(FIXTURE), "--csv", str(tmp_path / "t.csv"),
                      *[f"{k}={v}" for k, v in args.items()])
    assert result.returncode == 2, (result.returncode, result.stderr)  # clap's usage error, not 101
    assert "panicked" not in result.stderr and flag in result.stderr, result.stderr


def test_one_path_for_two_outputs_is_refused_before_any_query(tmp_path):
    out = tmp_path / "out"
    result = backtest(DEAD, "--scaled-object", str(FIXTURE), "--from", str(DAY), "--to", str(DAY + 600),
                      "--csv", str(out), "--json", str(tmp_path / "." / "out"))
    assert result.returncode != 0 and "--csv and --json name the same file" in result.stderr, result.stderr
    assert not out.exists()


def test_outputs_that_are_not_regular_files_are_written_as_streams(history_vm, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    fifo = tmp_path / "plot.fifo"
    os.mkfifo(fifo)
    received = []
    # `--csv /dev/stdout`, through a link of our own: run as root, a binary with the defect
    # would replace /dev/stdout itself with a regular file (it did, once, while this test was
    # checked against the binary before the fix).
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = backtest(history_vm.url, "--scaled-object", str(FIXTURE), "--from", str(DAY), "--to", str(DAY + 600),
                      "--step", "60s", "--csv", str(stdout), "--json", str(link), "--plot", str(fifo))
    reader.join(10)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout.split("\n\n")[0])))
    assert len(rows) >= 11 and rows[0]["unix_seconds"] == str(DAY), result.stdout[:300]
    assert stdout.is_symlink() and link.is_symlink() and json.loads(real.read_text())["rows"], \
        "the links kept, their targets written"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and received and received[0].startswith(b"<svg"), received[:1]


# --- scaler backtest: bounded inputs (item 4) ------------------------------------------------

def test_a_deeply_nested_or_endless_scaled_object_is_refused_fast(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text("kind: ScaledObject\nspec: " + "[" * 100_000 + "]" * 100_000 + "\n")
    fifo = tmp_path / "so.fifo"
    os.mkfifo(fifo)
    for path, says in [(nested, "nested deeper"), (fifo, "not a regular file"), ("/dev/zero", "not a regular file")]:
        t0 = time.monotonic()
        result = backtest(DEAD, "--scaled-object", str(path), "--from", str(DAY), "--to", str(DAY + 600),
                          "--csv", str(tmp_path / "t.csv"), timeout=30)
        took = time.monotonic() - t0
        record_figure("scaled object input", input=str(path.name if hasattr(path, "name") else path), seconds=took)
        assert result.returncode != 0 and says in result.stderr and "--scaled-object" in result.stderr, result.stderr
        assert took < 5, took


def test_a_60_mib_range_answer_is_parsed_within_the_memory_budget(tmp_path):
    # One series of the asked cluster with 3.8 million samples: bigger than any real chunk, and
    # refused after parsing (its times are outside the chunk), so the peak is the parse's.
    values = ",".join(f'[{DAY + i},"1"]' for i in range(3_800_000))
    body = ('{"status":"success","data":{"resultType":"matrix","result":[{"metric":'
            '{"namespace":"backtest","cluster":"shop","part":"load"},"values":[' + values + ']}]}}').encode()
    assert len(body) > 60 << 20
    backend = FakePrometheus("answer", answer=body)
    try:
        probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        argv = [scaler_binary(), "backtest", "--prometheus-url", backend.url, "--namespace", "backtest",
                "--scaled-object", str(FIXTURE), "--from", str(DAY), "--to", str(DAY + 600),
                "--csv", str(tmp_path / "t.csv"), "--max-response-bytes", str(64 << 20)]
        # No backtrace: symbolizing a debug binary's error costs ~270 MiB, which is not the parse's.
        env = {**os.environ, "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}
        peak_kib = int(subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True,
                                      timeout=120, check=True, env=env).stdout)
    finally:
        backend.close()
    record_figure("60 MiB range answer", answer_mib=len(body) / (1 << 20), peak_rss_mib=peak_kib / 1024)
    print(f"60 MiB range answer: peak RSS {peak_kib / 1024:.0f} MiB")
    # docs/backtest.md: the body once, plus at most 96 MiB (process, runtime, what is kept).
    assert peak_kib < (len(body) >> 10) + 96 * 1024, peak_kib
    assert not (tmp_path / "t.csv").exists()
