"""Container images built here, with no registry: each is a docker-archive tar (one layer of files
written deterministically, so equal contents give an equal image ID) imported into the node's
containerd with `ctr images import`. The tag is the image's content hash, so a changed input is a
new image."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Image:
    """An image to build: files copied in (destination -> source, mode 0755) as its one layer,
    and the runtime config."""
    repository: str
    files: dict[str, Path] = field(default_factory=dict)
    entrypoint: list[str] | None = None
    user: str | None = None
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


def build(image: Image, out_dir: Path) -> tuple[str, Path]:
    """Writes the image's docker-archive into out_dir; returns (reference, archive path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = _files_layer(image)
    layers = [(hashlib.sha256(data).hexdigest(), data)]  # (diff id, the layer tar)
    cfg = {k: v for k, v in (("Entrypoint", image.entrypoint), ("User", image.user),
                              ("Env", image.env)) if v}
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": cfg,
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d, _ in layers]},
                         "created": "1970-01-01T00:00:00Z"}, sort_keys=True).encode()
    config_id = hashlib.sha256(config).hexdigest()
    tag = config_id[:16]
    ref = f"{image.repository}:{tag}"
    archive = out_dir / f"{image.repository.replace('/', '_')}-{tag}.tar"
    if not archive.exists():
        manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [ref],
                                "Layers": [f"{d}/layer.tar" for d, _ in layers]}]).encode()
        tmp = archive.with_suffix(".tmp")
        with tarfile.open(tmp, "w") as out:
            for d, layer in layers:
                _add_bytes(out, f"{d}/layer.tar", layer)
            _add_bytes(out, f"{config_id}.json", config)
            _add_bytes(out, "manifest.json", manifest)
        tmp.rename(archive)
    return ref, archive


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def import_into(address: Path, archive: Path) -> None:
    """Imports an archive into containerd's CRI namespace, unpacked for its overlayfs snapshotter."""
    r = subprocess.run(["ctr", "--address", str(address), "-n", "k8s.io", "images", "import",
                        str(archive)], capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"ctr images import {archive}: {r.stderr.strip() or r.stdout.strip()}")
