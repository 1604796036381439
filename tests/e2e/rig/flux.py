"""Flux helm-controllers as processes, started with the args of a Deployment's helm-controller
container (the main flux-aio one, or a shard rendered by `chartgen shards`)."""

from __future__ import annotations

from pathlib import Path

import requests

from testkit import Proc, free_port, wait_until

from .procs import POLL, Group

# Flags whose value is a listen address: rebound to free loopback ports (several controllers share
# this host, where each would have its own pod network namespace in a cluster).
_LISTEN_FLAGS = ("--metrics-addr", "--health-addr")
# Points at a notification-controller that this rig does not run.
_DROPPED_FLAGS = ("--events-addr",)


def container_args(deployment: dict, container: str = "helm-controller") -> list[str]:
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == container:
            return list(c.get("args", []))
    raise KeyError(f"no {container} container in Deployment {deployment['metadata']['name']}")


def normalise(args: list[str]) -> list[str]:
    """Joins `--flag value` pairs into `--flag=value` so flags can be matched by name."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append(f"{a}={args[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def local_args(args: list[str]) -> tuple[list[str], int]:
    """The container args with listen addresses moved to free ports; returns (args, health port)."""
    out, health = [], 0
    for a in normalise(args):
        flag = a.split("=", 1)[0]
        if flag in _DROPPED_FLAGS:
            continue
        if flag in _LISTEN_FLAGS:
            port = free_port()
            if flag == "--health-addr":
                health = port
            a = f"{flag}=127.0.0.1:{port}"
        out.append(a)
    if not health:
        health = free_port()
        out.append(f"--health-addr=127.0.0.1:{health}")
    return out, health


def selector_of(args: list[str]) -> str | None:
    for a in normalise(args):
        if a.startswith("--watch-label-selector="):
            return a.split("=", 1)[1]
    return None


def start_controller(name: str, binary: Path, args: list[str], kubeconfig: Path, namespace: str,
                     group: Group) -> Proc:
    largs, health = local_args(args)
    proc = group.start(name, [binary, *largs],
                       env={"RUNTIME_NAMESPACE": namespace, "KUBECONFIG": str(kubeconfig)})
    wait_until(lambda: requests.get(f"http://127.0.0.1:{health}/readyz", timeout=1).ok,
               timeout=60, interval=POLL, what=f"{name} /readyz", proc=proc)
    return proc
