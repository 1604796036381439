"""The OCI archive `./run.sh image` wrote, opened by hand (tarfile + json, no container tooling), and
its layers unpacked into a root filesystem the tests run the binary from."""
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from testkit import REPO

CHART = REPO / "charts/cozy-autoscaling"


@dataclass
class Image:
    index: dict
    manifest: dict
    config: dict
    layers: list[bytes]  # blobs as stored (gzip), in order
    blob_sizes: int  # config + layers as a registry stores them


def blob(root: Path, digest: str) -> bytes:
    algo, hexdigest = digest.split(":")
    data = (root / "blobs" / algo / hexdigest).read_bytes()
    assert hashlib.new(algo, data).hexdigest() == hexdigest, f"blob {digest} does not match its digest"
    return data


@pytest.fixture(scope="session")
def chart():
    return {"chart": yaml.safe_load((CHART / "Chart.yaml").read_text()),
            "values": yaml.safe_load((CHART / "values.yaml").read_text())}


@pytest.fixture(scope="session")
def archive(chart):
    path = REPO / f"target/image/cozy-autoscaling-{chart['chart']['appVersion']}.oci.tar"
    if not path.is_file():
        pytest.fail(f"{path} missing: run ./run.sh image (tests/image/run.sh does)")
    return path


@pytest.fixture(scope="session")
def layout(archive, tmp_path_factory):
    root = tmp_path_factory.mktemp("oci")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="session")
def image(layout):
    index = json.loads((layout / "index.json").read_text())
    [desc] = index["manifests"]
    manifest = json.loads(blob(layout, desc["digest"]))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    layers = [blob(layout, l["digest"]) for l in manifest["layers"]]
    size = manifest["config"]["size"] + sum(l["size"] for l in manifest["layers"])
    return Image(index, manifest, config, layers, size)


def layer_members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


@pytest.fixture(scope="session")
def rootfs(image, tmp_path_factory):
    """The layers applied in order, as a runtime would (the tests assert there are no whiteouts)."""
    root = tmp_path_factory.mktemp("rootfs")
    for data in image.layers:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            # "fully_trusted": keep the image's owners and modes (we run as root, like a runtime).
            tar.extractall(root, filter="fully_trusted")
    os.chmod(root, 0o755)
    return root
