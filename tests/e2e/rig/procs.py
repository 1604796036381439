"""Processes the rig stops together; starting, probing and logging are testkit's."""

from __future__ import annotations

from pathlib import Path

from testkit import Proc

# Most of the rig's probes are API calls against a control plane sharing two CPUs: poll gently.
POLL = 0.25


class Group:
    """Processes stopped together, newest first; each logs to `<log_dir>/<name>.log`."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def start(self, name: str, args: list, env: dict | None = None, cwd: Path | None = None) -> Proc:
        proc = Proc(args, self.log_dir / f"{name}.log", env=env, cwd=cwd, name=name)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
