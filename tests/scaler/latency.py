"""GetMetrics latency under a disturbance: quiet and loaded windows interleaved, so the shared
machine's own load drifts into both alike (test_hardening.py, test_hardening3.py)."""

import statistics
import time


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def latencies(keda, refs, calls: int) -> list[float]:
    """Seconds each of `calls` GetMetrics took, over `refs` in turn."""
    out = []
    for n in range(calls):
        ref = refs[n % len(refs)]
        t0 = time.perf_counter()
        keda.metrics(ref, f"cnpg-{ref.scalerMetadata['cluster']}-readconnections")
        out.append(time.perf_counter() - t0)
    return out


def quiet_and_loaded(keda, refs, switch, rounds: int, on_seconds: float, off_seconds: float):
    """`rounds` windows of 150 calls each with `switch` (an Event the disturbance follows) clear,
    then set: the latencies of the quiet windows and of the loaded ones."""
    quiet, loaded = [], []
    for _ in range(rounds):
        quiet += latencies(keda, refs, 150)
        switch.set()
        time.sleep(on_seconds)  # the disturbance is on
        loaded += latencies(keda, refs, 150)
        switch.clear()
        time.sleep(off_seconds)
    return quiet, loaded
