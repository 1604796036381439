"""Real PostgreSQL from Debian's packages, arranged the way a CNPG Cluster is: instance `<cluster>-<n>`,
a primary made by initdb with CNPG's roles (streaming_replica, cnpg_metrics_exporter, the app owner)
and database `app`, replicas cloned with pg_basebackup that stream from the primary with
application_name = their pod name. Every instance listens on its own loopback port.

PostgreSQL refuses to run as root: as root, every server-side binary runs as the Debian package's
`postgres` system user (setpriv); otherwise as the current user.
"""
from __future__ import annotations

import glob
import os
import pwd
import signal
import subprocess
from pathlib import Path

import psycopg

from testkit import Proc, free_port, wait_until

SUPERUSER = "postgres"
APP_USER, APP_DB = "app", "app"

# CNPG-like settings that matter for the metrics (wal_level, archive_timeout, standby behaviour);
# fsync off only makes a 2-core CI faster and changes no metric's meaning.
CONF = """
listen_addresses = '127.0.0.1'
wal_level = logical
hot_standby = on
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '512MB'
wal_receiver_timeout = '5s'
wal_sender_timeout = '5s'
archive_mode = on
archive_command = '/bin/true'
archive_timeout = '5min'
shared_buffers = '32MB'
max_connections = 100
fsync = off
logging_collector = off
log_min_messages = warning
"""

HBA = """
local all all trust
host all all 127.0.0.1/32 trust
host replication streaming_replica 127.0.0.1/32 trust
"""


def bindir() -> Path:
    """The newest /usr/lib/postgresql/<ver>/bin that has a server (Debian's layout)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("no /usr/lib/postgresql/<ver>/bin/postgres: run tests/livepg/setup.sh")
    return Path(found[-1]).parent


def _as_owner() -> list[str]:
    if os.geteuid() != 0:
        return []
    pw = pwd.getpwnam("postgres")
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]


def own(path: Path) -> None:
    """Hands `path` to the user the servers run as (no-op when not root)."""
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)


def run(*args, **kw) -> subprocess.CompletedProcess:
    """Runs a PostgreSQL binary as the server user; raises with its output on failure."""
    cmd = [*_as_owner(), str(bindir() / args[0]), *map(str, args[1:])]
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


class Instance:
    """One PostgreSQL server (a CNPG instance pod): data directory, port, socket directory."""

    def __init__(self, base: Path, cluster: str, n: int):
        self.cluster, self.n = cluster, n
        self.name = f"{cluster}-{n}"
        self.dir = base / self.name
        self.data = self.dir / "pgdata"
        self.sock = self.dir / "run"
        self.port = free_port()
        self.proc: Proc | None = None
        for d in (self.dir, self.sock):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)
            own(d)

    # -- lifecycle --------------------------------------------------------------------------
    def init_primary(self) -> "Instance":
        run("initdb", "-D", self.data, "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C")
        self._write(self.data / "postgresql.conf", (self.data / "postgresql.conf").read_text() + CONF)
        self._write(self.data / "pg_hba.conf", HBA)
        self.start()
        with self.connect(SUPERUSER, "postgres") as c:
            c.execute("CREATE ROLE streaming_replica WITH LOGIN REPLICATION")
            # CNPG >= 1.28.3: a dedicated, non-superuser exporter role that inherits pg_monitor.
            c.execute("CREATE ROLE cnpg_metrics_exporter WITH LOGIN INHERIT IN ROLE pg_monitor")
            c.execute(f"CREATE ROLE {APP_USER} WITH LOGIN")
            c.execute(f"CREATE DATABASE {APP_DB} OWNER {APP_USER}")
        return self

    def clone_from(self, primary: "Instance") -> "Instance":
        """A replica as CNPG's join job makes it: pg_basebackup, standby.signal, primary_conninfo."""
        run("pg_basebackup", "-D", self.data, "-h", "127.0.0.1", "-p", primary.port, "-U", "streaming_replica",
            "-X", "stream", "-c", "fast", "-w")
        self.follow(primary, reload=False)
        self.start()
        return self

    def follow(self, primary: "Instance", reload: bool = True) -> None:
        """Makes this instance a standby of `primary` (standby.signal + primary_conninfo)."""
        self._write(self.data / "standby.signal", "")
        self._write(self.data / "postgresql.auto.conf",
                    f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=streaming_replica "
                    f"application_name={self.name}'\nrecovery_target_timeline = 'latest'\n")
        if reload and self.running():
            self.proc.signal(signal.SIGHUP)

    def start(self) -> "Instance":
        self.proc = Proc([*_as_owner(), bindir() / "postgres", "-D", self.data, "-p", self.port,
                          "-k", self.sock, "-c", f"cluster_name={self.cluster}"],
                         self.dir / "postgres.log", name=f"postgres {self.name}")
        wait_until(self._accepting, 30, 0.1, f"{self.name} accepting connections", proc=self.proc)
        return self

    def _accepting(self) -> bool:
        r = subprocess.run([str(bindir() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER],
                           capture_output=True)
        return r.returncode == 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def stop(self) -> None:
        """Fast shutdown (SIGINT), as the instance manager does: clients are disconnected."""
        if self.running():
            self.proc.signal(signal.SIGINT)
            try:
                self.proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.stop()

    def promote(self) -> None:
        with self.connect(SUPERUSER, "postgres") as c:
            assert c.execute("SELECT pg_promote(true, 30)").fetchone()[0], f"{self.name} did not promote"

    # -- SQL ---------------------------------------------------------------------------------
    def connect(self, user=APP_USER, dbname=APP_DB, application_name="livepg-test", **kw) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user=user, dbname=dbname,
                               application_name=application_name, autocommit=True, connect_timeout=5, **kw)

    def sql(self, query: str, params=None, dbname="postgres"):
        """One statement as the superuser; returns the first row (None without one)."""
        with self.connect(SUPERUSER, dbname) as c:
            cur = c.execute(query, params)
            return cur.fetchone() if cur.description else None

    def _write(self, path: Path, text: str) -> None:
        path.write_text(text)
        own(path)
