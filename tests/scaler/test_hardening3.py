"""Issue 43, third hardening round (the scaler's server): each test reproduces one finding against
the real binary, the real VictoriaMetrics of the suite or a tiny stand-in HTTP server (named as
such), bounded in time and loopback only, and fails on the binary before the fix. Figures go to
$TEST_FIGURES (testkit.record_figure) for docs/scaler-tests.md."""
import pytest
import requests

from fake_backend import FakePrometheus
from keda import error_of, metadata
from testkit import wait_until

# --- item 2: one tenant's backend error text never reaches another ----------------------------

TENANTS = ("tenant-red", "tenant-blue")


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
