"""A small stand-in for the CloudNativePG instance manager's metrics exporter (port 9187, /metrics).

It follows CNPG v1.30.1 (the version tests/livepg/setup.sh pins), read from the module source:
- pkg/management/postgres/metrics/{parser,mappings,collector}.go: the queries file is a map of
  queries; a metric is `cnpg_<query name, or its `name:`>_<column, or its `name:`>`; LABEL columns
  become the label set (names in the file's order, values in the result's column order, NULL -> ""),
  GAUGE/COUNTER columns one sample each per row (NULL -> NaN, an unparsable value drops that sample);
  `primary: true` queries run only where there is no standby.signal; `runonserver` is a semver range
  on the server version; `predicate_query` runs first in the same read-only transaction (false, NULL
  or no row: skip); `target_databases` defaults to the application database, `*` means every
  database that allows connections; a column-count mismatch skips the query; a query that fails or
  returns no rows emits nothing.
- pkg/management/postgres/webserver/metricserver/{pg_collector,wal}.go: `cnpg_collector_up{cluster}`
  and, PostgreSQL >= 14, `cnpg_collector_wal_*{stats_reset}` from pg_stat_wal, read in database
  `postgres`; those gauge vectors are never reset, so the last values stay while PostgreSQL is down.
- Query results are cached for the TTL (`spec.monitoring.metricsQueriesTTL`, default 30 s).
- Connections: user and application_name `cnpg_metrics_exporter` over the Unix socket, as CNPG's
  metrics pool does; two databases, so two sessions (the application database and `postgres`).
- A duplicate series fails the whole scrape with HTTP 500, as promhttp's default does.
Fault injection (a test hook, not CNPG's): `POST /fail-queries?seconds=S` makes every query fail
for S seconds as when the monitoring transaction cannot start (nothing emitted for them, the
instance metrics and HTTP 200 stay), which is how one missed collection looks to the scraper.
Not reproduced: the Go runtime metrics, backup/archive/sync-replica collector metrics, the built-in
`cnpg_collector_lo_pages` query, TLS. Namespace and pod labels are not the exporter's: the scrape
attaches them, as a PodMonitor does.

Run: exporter.py --listen 127.0.0.1:PORT --socket-dir DIR --pg-port PORT --pgdata DIR --cluster NAME
       --queries default-monitoring.yaml [--app-db app] [--ttl 30]
"""
from __future__ import annotations

import argparse
import datetime
import decimal
import fnmatch
import http.server
import logging
import math
import os
import re
import threading
import time

import psycopg
import yaml

log = logging.getLogger("exporter")
USER = "cnpg_metrics_exporter"


def load_queries(path: str) -> dict:
    """The `queries` document of CNPG's default-monitoring ConfigMap (or a bare queries file)."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        doc = yaml.safe_load(doc["data"]["queries"])
    return doc


# --- value conversions (pkg/management/postgres/utils: DBToFloat64, DBToString) ---------------

def _go_float_str(v: float) -> str:
    """Go's %v of a float64 (shortest form); Python's repr agrees but for huge/tiny exponents."""
    return str(int(v)) if v == int(v) and abs(v) < 1e21 else repr(v)


def to_float(v) -> float | None:
    """DBToFloat64: NULL -> NaN (kept), bool -> 1/0, time -> epoch seconds, text parsed; None = drop."""
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    if isinstance(v, datetime.datetime):
        return float(int(v.timestamp()))
    if isinstance(v, (str, bytes)):
        try:
            return float(v.decode() if isinstance(v, bytes) else v)
        except ValueError:
            return None
    return None


def to_label(v) -> str | None:
    """DBToString: NULL -> "", bool -> true/false, numbers as Go's %v; None = the row is skipped."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)  # numeric reaches Go as its text
    if isinstance(v, float):
        return _go_float_str(v) if math.isfinite(v) else str(v)
    if isinstance(v, datetime.datetime):
        return str(int(v.timestamp()))
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, str):
        return v
    return None


# --- runonserver: Masterminds semver ranges as the default queries use them -------------------

_TERM = re.compile(r"^(<=|>=|!=|=|<|>)?\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?$")


def version_matches(constraint: str, version: tuple[int, int, int]) -> bool:
    """`||` alternatives of comma/space separated comparisons, e.g. "<17.0.0", ">=14, <18"."""
    ops = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
           ">=": lambda a, b: a >= b, "=": lambda a, b: a == b, "!=": lambda a, b: a != b}
    for alternative in constraint.split("||"):
        terms = re.findall(r"(?:<=|>=|!=|=|<|>)?\s*v?[\d.]+", alternative)
        if not terms:
            raise ValueError(f"runonserver {constraint!r}: unsupported range")
        ok = True
        for term in terms:
            m = _TERM.match(term.strip())
            if not m:
                raise ValueError(f"runonserver {constraint!r}: unsupported term {term!r}")
            op, want = m.group(1) or "=", tuple(int(x or 0) for x in m.group(2, 3, 4))
            ok = ok and ops[op](version, want)
        if ok:
            return True
    return False


# --- mapping of one query (pkg/management/postgres/metrics/mappings.go) ------------------------

class Mapped:
    """One query's column mapping: metric names, types, label names."""

    def __init__(self, query_name: str, spec: dict):
        self.spec = spec
        prefix = f"cnpg_{spec.get('name') or query_name}"
        self.columns: dict[str, tuple[str, str | None, str]] = {}  # column -> (usage, metric, help)
        self.label_names: list[str] = []
        for mapping in spec.get("metrics", []):
            for column, desc in mapping.items():
                usage = desc.get("usage", "")
                metric = None
                if usage in ("GAUGE", "COUNTER"):
                    metric = f"{prefix}_{desc.get('name') or column}"
                elif usage != "LABEL" and usage != "DISCARD":
                    raise ValueError(f"query {query_name}: usage {usage} is not used by the default queries")
                if usage == "LABEL":
                    self.label_names.append(column)
                self.columns[column] = (usage, metric, desc.get("description", ""))

    def samples(self, columns: list[str], row: tuple):
        """(metric, type, help, labels, value) for one row, as QueryRunner does."""
        values = []
        for column, value in zip(columns, row):
            if self.columns.get(column, ("",))[0] == "LABEL":
                text = to_label(value)
                if text is None:
                    log.warning("label %s: %r cannot be a label value; row skipped", column, value)
                    return
                values.append(text)
        labels = tuple(zip(self.label_names, values))
        for column, value in zip(columns, row):
            usage, metric, help_ = self.columns.get(column, ("", None, ""))
            if metric is None:
                continue
            number = to_float(value)
            if number is None:
                log.warning("%s: %r is not a number; sample dropped", metric, value)
                continue
            yield metric, "counter" if usage == "COUNTER" else "gauge", help_, labels, number


# --- the exporter ------------------------------------------------------------------------------

class Exporter:
    def __init__(self, args):
        self.args = args
        self.fail_queries_until = 0.0
        self.queries = {name: Mapped(name, spec) for name, spec in load_queries(args.queries).items()}
        self.conns: dict[str, psycopg.Connection] = {}
        self.lock = threading.Lock()
        self.cached: list = []
        self.cached_at = 0.0
        self.collections = 0
        self.up = 0.0
        self.wal: dict[str, dict[str, float]] = {}  # stats_reset -> column -> value (never reset)

    def conn(self, db: str) -> psycopg.Connection:
        c = self.conns.get(db)
        if c is None or c.closed or c.broken:
            c = psycopg.connect(host=self.args.socket_dir, port=self.args.pg_port, user=USER, dbname=db,
                                application_name=USER, connect_timeout=2, autocommit=True)
            c.read_only = True  # applies to the BEGIN of each transaction() block
            self.conns[db] = c
        return c

    def server_version(self) -> tuple[int, int, int]:
        num = int(self.conn("postgres").execute("SHOW server_version_num").fetchone()[0])
        return num // 10000, num % 10000, 0

    def collect(self) -> list:
        """One scrape: instance metrics, then the queries (cached for the TTL)."""
        with self.lock:
            self.collections += 1
            out = [("cnpg_collector_collections_total", "counter",
                    "Total number of times PostgreSQL was accessed for metrics.", (), float(self.collections))]
            version = None
            try:
                c = self.conn("postgres")
                c.execute("SELECT 1")
                self.up = 1.0
                version = self.server_version()
                if version[0] >= 14:
                    self.read_pg_stat_wal(version)
            except psycopg.Error as e:
                log.warning("PostgreSQL unreachable: %s", e)
                self.up = 0.0
            out.append(("cnpg_collector_up", "gauge", "1 if PostgreSQL is up, 0 otherwise.",
                        (("cluster", self.args.cluster),), self.up))
            for stats_reset, cols in self.wal.items():
                for col, value in cols.items():
                    out.append((f"cnpg_collector_{col}", "gauge", f"pg_stat_wal.{col}",
                                (("stats_reset", stats_reset),), value))
            if time.monotonic() - self.cached_at > self.args.ttl or not self.cached_at:
                self.cached = self.run_queries(version)
                self.cached_at = time.monotonic()
            return out + self.cached

    def read_pg_stat_wal(self, version):
        cols = ["wal_records", "wal_fpi", "wal_bytes", "wal_buffers_full"]
        if version[0] < 18:
            cols += ["wal_write", "wal_sync", "wal_write_time", "wal_sync_time"]
        c = self.conn("postgres")
        row = c.execute(f"SELECT {', '.join(cols)}, stats_reset FROM pg_catalog.pg_stat_wal").fetchone()
        reset = row[-1]
        # Go scans the timestamptz into a string: RFC 3339 with nanoseconds; NULL is '-infinity'.
        key = reset.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z") if reset else "-infinity"
        self.wal[key] = {col: float(v) for col, v in zip(cols, row)}

    def run_queries(self, version) -> list:
        out = []
        if version is None or time.monotonic() < self.fail_queries_until:
            return out  # the monitoring transaction cannot start: every query fails, nothing emitted
        is_primary = not os.path.exists(os.path.join(self.args.pgdata, "standby.signal"))
        databases = None
        for name, mapped in self.queries.items():
            spec = mapped.spec
            if (spec.get("primary") or spec.get("master")) and not is_primary:
                continue
            if spec.get("runonserver") and not version_matches(spec["runonserver"], version):
                continue
            targets = spec.get("target_databases") or [self.args.app_db]
            if any(re.search(r"[][*?]", t) for t in targets) and databases is None:
                try:
                    databases = self.accessible_databases()
                except psycopg.Error as e:  # CNPG reports it and expands the pattern to nothing
                    log.warning("query %s: listing databases: %s", name, e)
                    databases = []
            expanded = []
            for t in targets:
                if re.search(r"[][*?]", t):
                    expanded += [d for d in databases if fnmatch.fnmatchcase(d, t)]
                else:
                    expanded.append(t)
            for db in dict.fromkeys(expanded):
                try:
                    out += self.run_query(db, name, mapped)
                except psycopg.Error as e:
                    log.warning("query %s on %s: %s", name, db, e)
                    self.conns.pop(db, None)
        return out

    def accessible_databases(self) -> list[str]:
        c = self.conn(self.args.app_db)
        rows = c.execute("SELECT datname, pg_catalog.has_database_privilege(datname, 'CONNECT') "
                         "FROM pg_catalog.pg_database WHERE datallowconn AND NOT datistemplate").fetchall()
        return [d for d, ok in rows if ok]

    def run_query(self, db: str, name: str, mapped: Mapped) -> list:
        c = self.conn(db)
        with c.transaction():  # createMonitoringTx
            c.execute("SET LOCAL search_path = pg_catalog, public, pg_temp")
            c.execute("SET standard_conforming_strings TO on")
            if mapped.spec.get("predicate_query"):
                row = c.execute(mapped.spec["predicate_query"]).fetchone()
                if not row or row[0] is not True:
                    return []
            cur = c.execute(mapped.spec["query"])
            columns = [d.name for d in cur.description or []]
            if len(columns) != len(mapped.columns):
                log.warning("query %s: %d columns, %d mapped; skipped", name, len(columns), len(mapped.columns))
                return []
            return [s for row in cur.fetchall() for s in mapped.samples(columns, row)]


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def render(samples: list) -> str:
    """Prometheus text, families sorted by name; a duplicate series raises (promhttp: HTTP 500)."""
    families: dict[str, tuple[str, str, dict]] = {}
    for metric, kind, help_, labels, value in samples:
        _, _, series = families.setdefault(metric, (kind, help_, {}))
        if labels in series:
            raise ValueError(f"collected metric {metric} {dict(labels)} was collected before with the same labels")
        series[labels] = value
    lines = []
    for metric in sorted(families):
        kind, help_, series = families[metric]
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} {kind}"]
        for labels in sorted(series):
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{metric}{{{text}}} {_value(series[labels])}" if text else f"{metric} {_value(series[labels])}")
    return "\n".join(lines) + "\n"


def serve(exporter: Exporter, listen: str):
    host, port = listen.rsplit(":", 1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            path, _, query = self.path.partition("?")
            seconds = dict(kv.partition("=")[::2] for kv in query.split("&")).get("seconds", "")
            if path != "/fail-queries" or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", seconds):
                self.send_error(404)
                return
            exporter.fail_queries_until = time.monotonic() + float(seconds)
            exporter.cached_at = 0.0  # the next scrape runs (and fails) the queries
            self.send_response(204)
            self.end_headers()

        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            try:
                body, code = render(exporter.collect()).encode(), 200
            except Exception as e:  # noqa: BLE001 - the scrape reports any failure, as promhttp does
                log.exception("scrape failed")
                body, code = f"An error has occurred while serving metrics:\n\n{e}\n".encode(), 500
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.HTTPServer((host, int(port)), Handler).serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", required=True)
    p.add_argument("--socket-dir", required=True)
    p.add_argument("--pg-port", type=int, required=True)
    p.add_argument("--pgdata", required=True, help="data directory: standby.signal decides primary-only queries")
    p.add_argument("--cluster", required=True, help="the `cluster` label of cnpg_collector_up")
    p.add_argument("--queries", required=True, help="CNPG's default-monitoring.yaml")
    p.add_argument("--app-db", default="app", help="database the queries run in (CNPG: the application database)")
    p.add_argument("--ttl", type=float, default=30.0, help="query cache seconds (metricsQueriesTTL)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(Exporter(args), args.listen)


if __name__ == "__main__":
    main()
