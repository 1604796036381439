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
        self._commands: dict[int, tuple] = {}  # id(proc) -> how it was started

    def start(self, name: str, args: list, env: dict | None = None, cwd: Path | None = None) -> Proc:
        proc = Proc(args, self.log_dir / f"{name}.log", env=env, cwd=cwd, name=name)
        self.procs.append(proc)
        self._commands[id(proc)] = (name, args, env, cwd)
        return proc

    def restart(self, proc: Proc) -> Proc:
        """Stops `proc` (if it still runs) and starts its command again, logging to the same file:
        what a pod restart is for these host processes."""
        proc.stop()
        return self.start(*self._commands[id(proc)])

    def stop_all(self) -> None:
        # Every group told at once, newest first, so the shutdowns overlap instead of adding up
        # (a process may take its whole grace period); then each is waited for, or killed.
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            proc.reap()
