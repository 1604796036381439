"""Debian's PgBouncer in front of a real PostgreSQL instance, configured the way a CNPG Pooler's
pgbouncer.ini is (one `[databases]` entry per database, `ignore_startup_parameters`, an admin
console user), on loopback. `show(...)` reads the admin console's SHOW commands, which CNPG's pooler
exporter turns into `cnpg_pgbouncer_*` series column for column (pkg/management/pgbouncer/
metricsserver, CNPG 1.30)."""
from __future__ import annotations

import threading
from pathlib import Path

import psycopg

from pg import APP_DB, APP_USER, Instance, _as_owner, own
from testkit import Proc, free_port, wait_until

ADMIN = "pgbouncer"


class PgBouncer:
    def __init__(self, base: Path, backend: Instance, **parameters):
        self.dir = base / "pgbouncer"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        own(self.dir)
        self.port = free_port()
        self.backend = backend
        params = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": self.dir / "userlist.txt",
            "admin_users": ADMIN,
            "pool_mode": "session",
            "ignore_startup_parameters": "extra_float_digits,options",
            "logfile": self.dir / "pgbouncer.log",
            "pidfile": self.dir / "pgbouncer.pid",
            # A client that waits this long is dropped with an error: bounds a stuck test.
            "query_wait_timeout": 20,
            **parameters,
        }
        ini = (f"[databases]\n{APP_DB} = host=127.0.0.1 port={backend.port} dbname={APP_DB}\n\n[pgbouncer]\n"
               + "".join(f"{k} = {v}\n" for k, v in params.items()))
        for name, text in [("pgbouncer.ini", ini), ("userlist.txt", f'"{APP_USER}" ""\n"{ADMIN}" ""\n')]:
            (self.dir / name).write_text(text)
            own(self.dir / name)
        self.proc: Proc | None = None

    def start(self) -> "PgBouncer":
        # PgBouncer refuses to run as root: as the server user, like PostgreSQL.
        self.proc = Proc([*_as_owner(), "/usr/sbin/pgbouncer", self.dir / "pgbouncer.ini"],
                         self.dir / "stdout.log", name="pgbouncer")
        wait_until(lambda: self.show("VERSION"), 15, 0.1, "pgbouncer admin console", proc=self.proc,
                   retry=(psycopg.OperationalError,))
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user=APP_USER, dbname=APP_DB,
                               autocommit=True, connect_timeout=5, **kw)

    def show(self, what: str) -> list[dict]:
        """`SHOW <what>` on the admin console (simple protocol: the console has no other), as dicts."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user=ADMIN, dbname=ADMIN, autocommit=True,
                             connect_timeout=5, cursor_factory=psycopg.ClientCursor) as c:
            cur = c.execute(f"SHOW {what}")
            names = [d.name for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def pool(self, database: str = APP_DB, user: str = APP_USER) -> dict | None:
        """The SHOW POOLS row of one pool (what the exporter labels database, user)."""
        return next((p for p in self.show("POOLS") if (p["database"], p["user"]) == (database, user)), None)


class Clients:
    """`n` client connections through PgBouncer, each running `sql` once in a thread of its own,
    then leaving (in session mode a client holds its server until it disconnects)."""

    def __init__(self, bouncer: PgBouncer, n: int, sql: str):
        self.conns = [bouncer.connect(application_name="pooled") for _ in range(n)]
        self.errors: list[BaseException] = []
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(c, sql), daemon=True) for c in self.conns]
        for t in self.threads:
            t.start()

    def _run(self, c: psycopg.Connection, sql: str) -> None:
        try:
            c.execute(sql)
        except psycopg.Error as e:
            self.errors.append(e)
        finally:
            c.close()

    def finished(self) -> int:
        return sum(not t.is_alive() for t in self.threads)

    def close(self) -> None:
        for t in self.threads:
            t.join(60)
