"""Real client sessions on an instance, in a chosen pg_stat_activity state:
`active` (a long pg_sleep, so the state is deterministic at every scrape), `idle` (connected, no
query) and `idle in transaction` (BEGIN, one statement, no commit). Each group carries its own
application_name and ends by pg_terminate_backend, so no backend outlives the test."""
from __future__ import annotations

import threading

import psycopg

from pg import Instance

STATES = ("active", "idle", "idle in transaction")


class Sessions:
    def __init__(self, instance: Instance, n: int, state: str = "active", application_name: str = "web",
                 user: str = "app"):
        assert state in STATES, state
        self.instance, self.application_name = instance, application_name
        self.conns: list[psycopg.Connection] = []
        self.threads: list[threading.Thread] = []
        for _ in range(n):
            c = instance.connect(user=user, application_name=application_name)
            self.conns.append(c)
            if state == "idle in transaction":
                c.autocommit = False
                c.execute("SELECT 1")
            elif state == "active":
                t = threading.Thread(target=self._sleep, args=(c,), daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _sleep(c: psycopg.Connection) -> None:
        try:
            c.execute("SELECT pg_sleep(3600)")
        except psycopg.Error:
            pass  # terminated by close()

    def pids(self) -> list[int]:
        return [c.info.backend_pid for c in self.conns]

    def close(self) -> None:
        if self.instance.running() and self.conns:
            try:
                self.instance.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                  (self.pids(),))
            except psycopg.Error:
                pass  # the instance went away with its sessions
        for t in self.threads:
            t.join(10)
        for c in self.conns:
            c.close()
        self.conns, self.threads = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Writer:
    """The primary writes: one small committed INSERT every 50 ms."""

    def __init__(self, primary):
        self.conn = primary.connect()
        self.conn.execute("CREATE TABLE IF NOT EXISTS writes (id bigserial PRIMARY KEY, at timestamptz DEFAULT now())")
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_event.wait(0.05):
            try:
                self.conn.execute("INSERT INTO writes DEFAULT VALUES")
            except psycopg.Error:
                return

    def stop(self):
        self.stop_event.set()
        self.thread.join(5)
        self.conn.close()
