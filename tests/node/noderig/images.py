"""Container images built here, with no registry: each is a docker-archive (a root file system tar
from mmdebstrap as is, and/or one layer of files written deterministically, so equal contents give
an equal image ID) streamed into the node's containerd by `ctr images import -`, never stored. The
tag ends in the image's content hash, so a changed input is a new image."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Image:
    """An image to build: a root file system tar (the first layer, as is), files copied in
    (destination -> source, mode 0755) as a second layer, and the runtime config."""
    repository: str
    files: dict[str, Path] = field(default_factory=dict)
    rootfs_tar: Path | None = None  # a tar of a whole root file system (mmdebstrap's output)
    tag_prefix: str = ""  # e.g. the PostgreSQL version, which CNPG reads from the tag
    entrypoint: list[str] | None = None
    user: str | None = None
    workdir: str | None = None
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/local/bin:/usr/bin:/bin"])


def _files_layer(image: Image) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        dirs = set()
        for dest in sorted(image.files):
            parts = Path(dest.lstrip("/")).parts
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    out.addfile(info)
            data = Path(image.files[dest]).read_bytes()
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            out.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class _Archive:
    ref: str
    layers: list  # (diff id, a root file system tar's path, or a layer's bytes)
    config_id: str
    config: bytes


def _plan(image: Image) -> _Archive:
    layers = []
    if image.rootfs_tar:
        digest = hashlib.sha256()
        with open(image.rootfs_tar, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        layers.append((digest.hexdigest(), Path(image.rootfs_tar)))
    if image.files:
        data = _files_layer(image)
        layers.append((hashlib.sha256(data).hexdigest(), data))
    cfg = {k: v for k, v in (("Entrypoint", image.entrypoint), ("User", image.user),
                              ("WorkingDir", image.workdir), ("Env", image.env)) if v}
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": cfg,
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d, _ in layers]},
                         "created": "1970-01-01T00:00:00Z"}, sort_keys=True).encode()
    config_id = hashlib.sha256(config).hexdigest()
    tag = f"{image.tag_prefix}-{config_id[:16]}" if image.tag_prefix else config_id[:16]
    return _Archive(f"{image.repository}:{tag}", layers, config_id, config)


def reference(image: Image) -> str:
    """The reference build_and_import gives the image."""
    return _plan(image).ref


def build_and_import(image: Image, address: Path) -> str:
    """Streams the image's docker-archive into containerd's CRI namespace (unpacked for its
    overlayfs snapshotter) without writing it anywhere; returns its reference."""
    a = _plan(image)
    manifest = json.dumps([{"Config": f"{a.config_id}.json", "RepoTags": [a.ref],
                            "Layers": [f"{d}/layer.tar" for d, _ in a.layers]}]).encode()
    log = tempfile.TemporaryFile()
    ctr = subprocess.Popen(["ctr", "--address", str(address), "-n", "k8s.io", "images", "import", "-"],
                           stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    try:
        with tarfile.open(fileobj=ctr.stdin, mode="w|") as out:
            for d, layer in a.layers:
                if isinstance(layer, Path):
                    out.add(layer.resolve(), arcname=f"{d}/layer.tar")
                else:
                    _add_bytes(out, f"{d}/layer.tar", layer)
            _add_bytes(out, f"{a.config_id}.json", a.config)
            _add_bytes(out, "manifest.json", manifest)
        ctr.stdin.close()
    except BrokenPipeError:
        pass  # ctr gave up; its output says why
    if ctr.wait(timeout=300):
        log.seek(0)
        raise RuntimeError(f"ctr images import of {a.ref}: {log.read().decode(errors='replace').strip()}")
    return a.ref


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def import_oci_archive(archive: Path, address: Path, repository: str) -> str:
    """Imports an OCI archive (what `./run.sh image` writes: one manifest whose ref name is the
    tag) as `repository:<tag>`, unpacked; returns that reference."""
    out = subprocess.run(["ctr", "--address", str(address), "-n", "k8s.io", "images", "import",
                          "--base-name", repository, str(archive)], capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"ctr images import {archive}: {out.stderr.strip()}")
    refs = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("unpacking ")]
    if len(refs) != 1 or not refs[0].startswith(f"{repository}:"):
        raise RuntimeError(f"ctr images import {archive} gave {refs}, not one {repository}:<tag>")
    return refs[0]
