"""Issue 43, third hardening round (the scaler's server): each test reproduces one finding against
the real binary, the real VictoriaMetrics of the suite or a tiny stand-in HTTP server (named as
such), bounded in time and loopback only, and fails on the binary before the fix. Figures go to
$TEST_FIGURES (testkit.record_figure) for docs/scaler-tests.md."""
import multiprocessing
import statistics
import time

import pytest
import requests

from fake_backend import FakePrometheus
from latency import p99, quiet_and_loaded
from keda import Keda, error_of, metadata
from scaler_proc import Scaler
from testkit import record_figure, wait_until

# --- item 2: one tenant's backend error text never reaches another ----------------------------

# No common prefix: a batch writes a common prefix once (`tenant-(red|blue)`), and each name must
# appear whole in the query for the checks below to see it, or its absence from an error.
TENANTS = ("red-team", "blue-team")


@pytest.mark.parametrize("status", [422, 200])
def test_a_batched_failure_tells_each_tenant_nothing_of_the_others(start_scaler, status):
    # The stand-in answers like VictoriaMetrics refusing a query: the error quotes the query,
    # which names every namespace and cluster of the batch (as HTTP 422, and as a 200 whose
    # body says "error").
    backend = FakePrometheus("echo", status=status)
    try:
        scaler, keda = start_scaler(backend.url)
        refs = {ns: keda.ref(ns, f"so-{ns}", metadata(cluster=f"pg-{ns}")) for ns in TENANTS}
        for ns, ref in refs.items():
            error_of(lambda: keda.metrics(ref, f"cnpg-pg-{ns}-readconnections"))
        # The refresh tick (every second here) asks for both in one query; once the second such
        # query has been asked, the answers and /decisions hold a batched failure.
        wait_until(lambda: sum(all(ns in q for ns in TENANTS) for q in backend.queries) >= 2, 10, 0.1,
                   "a refresh tick's query for both namespaces")
        errors = {ns: error_of(lambda: keda.metrics(ref, f"cnpg-pg-{ns}-readconnections")) for ns, ref in refs.items()}
        page = requests.get(f"{scaler.admin}/decisions", timeout=5).json()
        messages = {e["namespace"]: e["lastError"]["message"] for e in page["entries"]}
        for ns, error in errors.items():
            (other,) = set(TENANTS) - {ns}
            told = [error.details(), messages[ns]]
            for text in told:
                assert other not in text and f"pg-{other}" not in text, (ns, text)
                assert "query=" not in text, (ns, text)  # none of the backend's own words
                assert len(text) < 400, (ns, len(text))
            # What they are told still says what failed.
            assert (f"HTTP {status}" if status != 200 else "unusable answer") in error.details(), error.details()
        # The whole text is the operator's, in the scaler's own log.
        wait_until(lambda: "query=" in scaler.proc.tail(200) and all(ns in scaler.proc.tail(200) for ns in TENANTS),
                   5, 0.1, "the backend's text in the scaler's log")
    finally:
        backend.close()


# --- items 1 and 8: /decisions readers against a fleet of 20,000 ------------------------------

FLEET = 20_000  # ScaledObjects held, as in the issue
QUIET = [("tenant-a", "pg"), ("tenant-b", "pg"), ("tenant-a", "pg-archive"), ("tenant-a-dev", "pg")]


def fill(keda: Keda, n: int):
    """Asks once for n ScaledObjects of clusters with no series (each held with its error),
    512 in flight at a time."""
    pending = []
    for i in range(n):
        ref = keda.ref(f"fleet-{i // 100}", f"so-{i}", metadata(cluster=f"c-{i}"))
        request = keda.metrics_request(ref, f"cnpg-c-{i}-readconnections")
        pending.append(keda.stub.GetMetrics.future(request, timeout=60))
        if len(pending) == 512 or i == n - 1:
            for call in pending:
                call.exception()
            pending = []


@pytest.fixture(scope="module")
def fleet(vm, tmp_path_factory):
    """One scaler holding FLEET + 4 ScaledObjects; no refresh tick during the module."""
    s = Scaler(str(tmp_path_factory.mktemp("fleet")), vm.url, "--max-cached-objects", str(FLEET + 100),
               "--staleness", "30m", "--cache-ttl", "30m", refresh="10m").start()
    keda = Keda(s.address)
    try:
        refs = [keda.ref(ns, f"quiet-{cluster}", metadata(cluster=cluster)) for ns, cluster in QUIET]
        for ref in refs:
            keda.metrics(ref, f"cnpg-{ref.scalerMetadata['cluster']}-readconnections")
        fill(keda, FLEET)
        total = requests.get(f"{s.admin}/decisions", params={"limit": 0}, timeout=60).json()["total"]
        assert total == FLEET + len(refs), total
        yield s, keda, refs
    finally:
        keda.close()
        s.stop()


def read_back_to_back(admin: str, readers: int, on, stop, counts):
    """In its own process: while `on` is set, `readers` threads GET /decisions back to back (as
    `scaler status --watch` would, a 503's Retry-After honoured); `counts` gets each status."""
    import threading

    def one():
        session = requests.Session()
        while not stop.is_set():
            if not on.wait(0.05):
                continue
            try:
                r = session.get(f"{admin}/decisions", timeout=30)
                counts.append(r.status_code)
                if r.status_code == 503:
                    time.sleep(float(r.headers.get("retry-after", "1")))
            except requests.RequestException:
                counts.append(0)  # refused a connection (past the port's caps): back off too
                time.sleep(1)

    threads = [threading.Thread(target=one) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()




SCHEDULER_NOISE_S = 0.025


# Four operators watching; and 64 at once (the issue: p95 5-7 s), past the admin port's 16
# connections per peer, so some of those are refused a connection.
@pytest.mark.parametrize("n_readers", [4, 64])
def test_decisions_readers_leave_get_metrics_fast(fleet, n_readers):
    scaler, keda, refs = fleet
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager:
        on, stop, counts = manager.Event(), manager.Event(), manager.list()
        readers = spawn.Process(target=read_back_to_back, args=(scaler.admin, n_readers, on, stop, counts), daemon=True)
        readers.start()
        try:
            quiet, loaded = quiet_and_loaded(keda, refs, on, rounds=8, on_seconds=0.5, off_seconds=0.2)
        finally:
            stop.set()
            readers.join(40)
            readers.kill()
        counts = list(counts)
    quiet_p99, loaded_p99 = p99(quiet), p99(loaded)
    figures = dict(pages=counts.count(200), busy=counts.count(503), other=len(counts) - counts.count(200) - counts.count(503),
                   quiet_p50_ms=statistics.median(quiet) * 1e3, quiet_p99_ms=quiet_p99 * 1e3,
                   loaded_p50_ms=statistics.median(loaded) * 1e3, loaded_p99_ms=loaded_p99 * 1e3)
    record_figure(f"{n_readers} decisions readers", **figures)
    print(f"{n_readers} decisions readers: {figures}")
    # Pages were made (at the lowest priority, so fewer when the readers' own process takes the
    # cores) and readers past the two at once were told to wait.
    assert figures["pages"] >= 1 and figures["busy"] > 0, figures
    assert figures["other"] == 0 or n_readers > 16, figures
    # Within 2x of quiet, plus the scheduler's noise: with a quiet p99 near 2 ms, one busy moment
    # of a 2-core machine doubles it (seen in CI: 1.9 -> 4.3 ms); the defect was seconds.
    assert loaded_p99 <= 2 * quiet_p99 + SCHEDULER_NOISE_S, figures


SLOW_READERS = 48  # as in the issue
# The scaler's growth while they read: two answers at once (the page, at most 8 MiB, and its
# snapshot) and the unsent tails the others' connections hold (docs/scaler.md, /decisions).
SLOW_READERS_RSS_BOUND_MIB = 40


class SlowReader:
    """Asks for /decisions and reads the status line; once it has a page it reads one byte every
    half second (a trickle: the connection is never idle, and its page stays on the server's
    side). A 503 is retried after its Retry-After, as a persistent reader would."""

    def __init__(self, port: int):
        self.port, self.got, self.sock, self.busy = port, None, None, 0

    def run(self, stop, done):
        import socket
        while not stop.is_set() and self.got is None:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(30)
            try:
                s.connect(("127.0.0.1", self.port))
                s.sendall(b"GET /decisions HTTP/1.1\r\nHost: scaler\r\n\r\n")
                status = s.recv(12)
            except OSError:
                s.close()
                continue
            if status.startswith(b"HTTP/1.1 200"):
                self.got, self.sock = time.monotonic(), s
                break
            self.busy += 1
            s.close()
            stop.wait(1)
        while self.sock and not done.is_set():
            try:
                if not self.sock.recv(1):
                    return
            except OSError:
                return
            done.wait(0.5)

    def close(self):
        if self.sock:
            self.sock.close()


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_slow_decisions_readers_hold_bounded_memory(fleet):
    import threading
    scaler, _, _ = fleet
    port = int(scaler.admin.rsplit(":", 1)[1])
    pid = scaler.proc.popen.pid
    requests.get(f"{scaler.admin}/decisions", timeout=60)  # one whole page first: the baseline has seen one
    time.sleep(1)
    before = rss_mib(pid)
    stop, done = threading.Event(), threading.Event()
    readers = [SlowReader(port) for _ in range(SLOW_READERS)]
    threads = [threading.Thread(target=r.run, args=(stop, done), daemon=True) for r in readers]
    peak, started = before, time.monotonic()
    try:
        for t in threads:
            t.start()
        # At least 10 s, and until two readers hold a page (renders wait for a free core).
        while time.monotonic() - started < 10 or (sum(r.got is not None for r in readers) < 2
                                                  and time.monotonic() - started < 60):
            peak = max(peak, rss_mib(pid))
            time.sleep(0.1)
        stop.set()
        holders = [r for r in readers if r.got is not None]
        busy = sum(r.busy for r in readers)
        figures = dict(readers=SLOW_READERS, pages_held=len(holders), told_busy=busy, rss_before_mib=before,
                       rss_peak_mib=peak, growth_mib=peak - before)
        print(f"slow decisions readers: {figures}")
        assert peak - before <= SLOW_READERS_RSS_BOUND_MIB, figures
        assert len(holders) == 2 and busy > 0, figures
        # The two holding a page keep reading a trickle, so their connections are never idle:
        # past the answer deadline (30 s) the scaler closes them, which frees their places, and
        # a new reader gets a whole page. (What they already hold in their socket buffers they
        # can still read: the reader side cannot tell the close apart soon.)
        wait_until(lambda: requests.get(f"{scaler.admin}/decisions", timeout=60).status_code == 200, 50, 1,
                   "a whole /decisions page while the trickling readers keep reading")
        figures["freed_after_s"] = round(time.monotonic() - min(r.got for r in holders), 1)
        record_figure("slow decisions readers", **figures)
        print(f"slow decisions readers: {figures}")
        assert figures["freed_after_s"] >= 25, figures  # not before the deadline: they held them
    finally:
        stop.set()
        done.set()
        for r in readers:
            r.close()
        for t in threads:
            t.join(5)
