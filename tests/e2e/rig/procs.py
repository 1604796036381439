"""Starting, probing and stopping the rig's processes; every process logs to its own file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, probe: Callable[[], object], timeout: float = 60.0,
              interval: float = 0.25, proc: "Proc | None" = None):
    """Polls `probe` until it returns something truthy; raises naming `what` (and the log tail)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
        try:
            result = probe()
            if result:
                return result
        except Exception as e:  # noqa: BLE001 - any failure just means "not yet"
            last_error = e
        time.sleep(interval)
    tail = f"\n{proc.name} log tail:\n{proc.tail()}" if proc else ""
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last_error}){tail}")


class Proc:
    """One child process in its own process group, with stdout+stderr in `log`."""

    def __init__(self, name: str, args: list[str], log_dir: Path, env: dict | None = None,
                 cwd: Path | None = None):
        self.name = name
        self.args = [str(a) for a in args]
        self.log = log_dir / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.popen: subprocess.Popen | None = None

    def start(self) -> "Proc":
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {' '.join(self.args)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                          start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Group:
    """Processes stopped together, newest first."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def start(self, name: str, args: list, env: dict | None = None, cwd: Path | None = None) -> Proc:
        proc = Proc(name, args, self.log_dir, env, cwd).start()
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
