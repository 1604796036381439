"""What the live suites (tests/livepg, tests/liveredis) share: reading their VictoriaMetrics, asking
their `scaler serve` as KEDA's HPA would, and the scenario table each prints at the end."""
from __future__ import annotations

import json

from testkit import wait_until


class Probes:
    """Mixed into a live rig that has `vm` (tests/lib/vm.py), `keda` (tests/scaler/keda.py) and
    `ref(**metadata)`, the ScaledObject reference of its cluster."""

    def series(self, promql: str) -> dict[str, float]:
        """Instant query -> {pod (or the series' labels): value}."""
        out = {}
        for r in self.vm.query(promql):
            m = r["metric"]
            out[m.get("pod") or json.dumps(m, sort_keys=True)] = float(r["value"][1])
        return out

    def wait_scraped(self, promql: str, expect, timeout: float = 30, what: str | None = None):
        """Polls an instant query on VictoriaMetrics until `expect(series dict)` holds."""
        last = {}

        def probe():
            nonlocal last
            last = self.series(promql)
            return expect(last)

        try:
            wait_until(probe, timeout, 0.5, what or promql, proc=self.vm.proc)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; last value: {last}") from None
        return last

    def desired(self, target: str = "5", **md) -> int:
        """What the HPA computes from one KEDA poll; `md` is more trigger metadata."""
        return self.keda.desired(self.ref(target=target, **md), float(target))

    def wait_desired(self, want: int, timeout: float = 30, target: str = "5", **md) -> int:
        last = None

        def probe():
            nonlocal last
            last = self.desired(target, **md)
            return last == want

        try:
            return wait_until(probe, timeout, 0.5, f"desired == {want}")
        except TimeoutError as e:
            raise TimeoutError(f"{e}; last desired {last}") from None


class ScenarioTable:
    """The rows a live suite records (scenario -> expected -> observed), printed at the session's end
    as the table its doc keeps: `record` is the fixture's value, `print` the terminal summary's."""

    def __init__(self, title: str):
        self.title = title
        self.rows: list[tuple[str, str, str]] = []

    def record(self, scenario: str, expected: str, observed: str) -> None:
        self.rows.append((scenario, expected, observed))

    def print(self, terminalreporter) -> None:
        if self.rows:
            terminalreporter.section(f"{self.title}: scenario -> expected -> observed")
            terminalreporter.write_line("| scenario | expected | observed |")
            terminalreporter.write_line("|---|---|---|")
            for row in self.rows:
                terminalreporter.write_line("| " + " | ".join(row) + " |")
