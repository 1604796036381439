"""The release image, checked from its OCI archive: what the config runs and as whom, its labels,
exactly which files its layers hold, its size, and the binary out of it running with nothing else
(chroot into the unpacked layers, as the image's uid, empty environment)."""
import gzip
import hashlib
import http.server
import json
import os
import platform
import re
import shutil
import socket
import ssl
import stat
import struct
import subprocess
import tarfile
import threading
import tomllib
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import CHART, layer_members
from helm import Helm
from testkit import CA, REPO, Proc, free_port, wait_until

UID = 65532
BINARY = "usr/local/bin/scaler"
CHARTGEN = "usr/local/bin/chartgen"
BUNDLE = "etc/ssl/certs/ca-certificates.crt"
LICENSES = "usr/share/licenses/cozy-autoscaling"
NOTICES = {f"{LICENSES}/LICENSE", f"{LICENSES}/DejaVu-fonts-LICENSE"}
# The budget docs/image.md states: compressed config + layers, what a registry stores and a node pulls.
SIZE_BUDGET_MIB = 20
EXPECTED_FILES = {"etc", "etc/ssl", "etc/ssl/certs", BUNDLE, "usr", "usr/local", "usr/local/bin", BINARY, CHARTGEN,
                  "usr/share", "usr/share/licenses", LICENSES, *NOTICES}
CHROOT = shutil.which("chroot") or "chroot"
OCI_LABELS = {"org.opencontainers.image." + k for k in
              ("title", "description", "source", "version", "revision", "licenses")}


def image_command(rootfs, *args, env=None, binary=BINARY):
    """One of the image's binaries inside its own unpacked filesystem, as the image's user, with only
    `env` as environment: nothing of the host (libraries, certificates, variables) is reachable."""
    variables = [f"{k}={v}" for k, v in (env or {}).items()]
    return ["env", "-i", *variables, CHROOT, f"--userspec={UID}:{UID}", str(rootfs), f"/{binary}", *map(str, args)]


def pod_root(rootfs, tmp_path, hosts="127.0.0.1 localhost\n"):
    """A copy of the unpacked image plus what the kubelet would mount into it (/etc/hosts)."""
    pod = tmp_path / "pod-root"
    shutil.copytree(rootfs, pod, symlinks=True)
    (pod / "etc/hosts").write_text(hosts)
    return pod


def in_image(rootfs, *args, check=True, binary=BINARY):
    out = subprocess.run(image_command(rootfs, *args, binary=binary), capture_output=True, text=True, timeout=60)
    if check:
        assert out.returncode == 0, f"{binary} {' '.join(args)} failed ({out.returncode}): {out.stderr}"
    return out


@pytest.fixture(scope="session", autouse=True)
def needs_root():
    if CHROOT == "chroot" or os.geteuid() != 0:
        pytest.fail("the image suite runs the binary in a chroot of the image: run it as root (buildah needs root too)")


def test_archive_is_one_manifest_tagged_with_the_chart_version(image, chart):
    [desc] = image.index["manifests"]
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == chart["chart"]["appVersion"]
    assert image.manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert image.manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert {l["mediaType"] for l in image.manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+gzip"}
    # diff_ids are the digests of the uncompressed layers: a registry or runtime verifies them.
    assert image.config["rootfs"]["diff_ids"] == [
        "sha256:" + hashlib.sha256(gzip.decompress(l)).hexdigest() for l in image.layers]
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    assert (image.config["os"], image.config["architecture"]) == ("linux", arch)


def test_config_runs_the_binary_as_a_numeric_non_root_user(image):
    cfg = image.config["config"]
    assert cfg["User"] == f"{UID}:{UID}"
    assert cfg["Entrypoint"] == [f"/{BINARY}"]
    assert cfg["Cmd"] == ["--help"]
    assert "Shell" not in cfg and "Volumes" not in cfg and "Healthcheck" not in cfg
    assert [e.split("=", 1)[0] for e in cfg.get("Env", [])] in ([], ["PATH"])


def test_labels_name_source_version_revision_and_license(image, chart):
    labels = image.config["config"]["Labels"]
    assert set(labels) == OCI_LABELS
    prefix = "org.opencontainers.image."
    assert labels[prefix + "version"] == chart["chart"]["appVersion"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode != 0
    assert labels[prefix + "revision"] == head.stdout.strip() + ("-dirty" if dirty else "")
    workspace = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["package"]
    # DejaVu Sans is compiled into scaler (the backtest's PNG), so its licence is the image's too.
    assert labels[prefix + "licenses"] == workspace["license"] + " AND Bitstream-Vera"
    assert re.fullmatch(r"https://\S+", labels[prefix + "source"])


def test_layers_hold_exactly_the_binaries_and_the_ca_bundle(image):
    members = [m for data in image.layers for m in layer_members(data)]
    names = [m.name.removeprefix("./").rstrip("/") for m in members]
    assert not [n for n in names if "/.wh." in "/" + n], "whiteouts: a layer deletes something"
    assert set(names) == EXPECTED_FILES and len(names) == len(set(names))
    for m, name in zip(members, names):
        assert (m.uid, m.gid) == (0, 0), f"{name} is not owned by root"
        assert not m.mode & (stat.S_ISUID | stat.S_ISGID | 0o022), f"{name} mode {m.mode:o}"
        if name in (BINARY, CHARTGEN):
            assert m.isfile() and m.mode & 0o777 == 0o555
        elif name == BUNDLE or name in NOTICES:
            assert m.isfile() and m.mode & 0o777 == 0o444
        else:
            assert m.isdir()
    assert not {"bin/sh", "bin/bash", "bin/busybox"} & set(names)


def test_size_within_the_documented_budget(image):
    mib = image.blob_sizes / 2**20
    print(f"image: {mib:.1f} MiB compressed, {len(image.layers)} layer(s)")
    assert mib <= SIZE_BUDGET_MIB
    assert f"{SIZE_BUDGET_MIB} MiB" in (REPO / "docs/image.md").read_text()


def test_the_licences_travel_with_the_binaries(rootfs):
    """The project's Apache-2.0 text, and the font's notice, which its licence requires in every copy."""
    assert "Apache License" in (rootfs / LICENSES / "LICENSE").read_text()
    notice = (rootfs / LICENSES / "DejaVu-fonts-LICENSE").read_text()
    assert "Bitstream Vera Fonts Copyright" in notice and "public domain" in notice


def test_ca_bundle_is_a_pem_bundle(rootfs):
    text = (rootfs / BUNDLE).read_text()
    assert text.count("-----BEGIN CERTIFICATE-----") >= 100


@pytest.mark.parametrize("binary", [BINARY, CHARTGEN])
def test_binary_is_statically_linked(rootfs, binary):
    data = (rootfs / binary).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # ELF64
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    assert 3 not in types, "PT_INTERP: the binary needs a dynamic loader the image does not have"


def test_binary_runs_alone_in_the_image(rootfs, chart):
    assert in_image(rootfs, "--version").stdout == f"scaler {chart['chart']['appVersion']}\n"
    serve = in_image(rootfs, "serve", "--help").stdout
    assert "--listen" in serve and "--admin-listen" in serve and "--prometheus-url" in serve
    assert "--tls-cert" in in_image(rootfs, "webhook", "--help").stdout
    assert in_image(rootfs, "no-such-command", check=False).returncode == 2


def test_chartgen_in_the_image_generates_a_chart_with_no_other_files(rootfs, tmp_path):
    """A chart repository's CI runs the image's chartgen on its own chart: the templates are built
    in, so the chart comes out as this repository's example with nothing but the image around it."""
    pod = pod_root(rootfs, tmp_path)
    shutil.copytree(REPO / "tests/chartgen/fixtures/example-postgres", pod / "work/example-postgres")
    os.chown(pod / "work", UID, UID)
    for path in (pod / "work").rglob("*"):
        os.chown(path, UID, UID)
    out = in_image(pod, "app", "--chart", "/work/example-postgres", binary=CHARTGEN)
    assert "autoscaling" in out.stdout + out.stderr
    generated = pod / "work/example-postgres"
    expected = REPO / "charts/example-postgres"
    names = sorted(p.relative_to(expected) for p in expected.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(generated) for p in generated.rglob("*") if p.is_file())
    for name in names:
        assert (generated / name).read_bytes() == (expected / name).read_bytes(), f"{name} differs"
    in_image(pod, "app", "--chart", "/work/example-postgres", "--check", binary=CHARTGEN)


@pytest.fixture(scope="session")
def deployments(tmp_path_factory):
    """The package chart's own Deployments, rendered by helm with its default values."""
    objs = Helm(tmp_path_factory.mktemp("helm-home")).render(
        CHART, keda=False, release="cozy-autoscaling", namespace="cozy-autoscaling")
    return {o["metadata"]["name"].removeprefix("cozy-autoscaling-"): o for o in objs
            if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("cozy-autoscaling-")}


def test_chart_pods_run_the_image_of_this_commit(deployments, image, chart):
    repository = chart["values"]["image"]["repository"]
    version = image.config["config"]["Labels"]["org.opencontainers.image.version"]
    assert set(deployments) == {"scaler", "webhook", "shard-controller"}
    for d in deployments.values():
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == UID
        assert [c["image"] for c in pod["containers"]] == [f"{repository}:{version}"]


@pytest.mark.parametrize("component", ["scaler", "webhook", "shard-controller"])
def test_every_flag_the_chart_passes_is_one_the_binary_knows(rootfs, deployments, component):
    [c] = deployments[component]["spec"]["template"]["spec"]["containers"]
    subcommand, *args = c["args"]
    usage = in_image(rootfs, subcommand, "--help").stdout
    for flag in {a.split("=", 1)[0] for a in args}:
        assert re.search(rf"(^|\s){re.escape(flag)}[\s=<]", usage), f"{subcommand} has no {flag}"


@pytest.mark.parametrize("component,ready", [("scaler", 200), ("webhook", 503), ("shard-controller", 503)])
def test_the_image_serves_the_chart_probes_with_the_chart_args(rootfs, deployments, tmp_path, component, ready):
    """Each Deployment's own arguments (ports moved to free loopback ports) and environment, the
    TLS files where the chart mounts them, and a kubeconfig whose API server is not
    there: liveness must pass; readiness answers too, 200 for the scaler (metrics-only without an
    API) and 503 for the webhook and the shard controller until their caches sync."""
    [c] = deployments[component]["spec"]["template"]["spec"]["containers"]
    pod = pod_root(rootfs, tmp_path)
    ports = {"--listen": free_port(), "--admin-listen": free_port()}
    args = [f"{a.split('=', 1)[0]}=127.0.0.1:{ports[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in ports else a
            for a in c["args"]]
    # The scaler reads KEDA's client CA from a Secret through the API (tests/e2e/test_mtls.py runs
    # that against a real API server); no API server runs here, so the same CA comes from the file
    # flag, beside the chart's other TLS arguments (the identity check included).
    args = ["--tls-client-ca=/tls/ca.crt" if a.startswith("--tls-client-ca-secret=") else a for a in args]
    env = {e["name"]: e.get("value", f"{component}-test") for e in c.get("env", [])}
    for mount in c.get("volumeMounts", []):
        if mount["name"] == "tls":
            directory = pod / mount["mountPath"].lstrip("/")
            directory.mkdir(parents=True)
            ca = CA(tmp_path / "pki", "image-test")
            ca.issue("tls", component, hosts=("localhost",))
            # The Secret cert-manager writes also holds the CA (the scaler's --tls-client-ca).
            for name, source in [("tls.crt", "tls.crt"), ("tls.key", "tls.key"), ("ca.crt", ca.cert.name)]:
                shutil.copy(tmp_path / "pki" / source, directory / name)
                (directory / name).chmod(0o444)
    (pod / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    if component != "scaler":
        env["KUBECONFIG"] = "/kubeconfig"
    proc = Proc(image_command(pod, *args, env=env), tmp_path / f"{component}.log", name=component)

    def status(path):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{ports['--admin-listen']}{path}", timeout=2).status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        for probe, want in (("livenessProbe", 200), ("readinessProbe", ready)):
            assert c[probe]["httpGet"]["port"] == "admin"
            path = c[probe]["httpGet"]["path"]
            wait_until(lambda: status(path) == want, what=f"{component} {path} = {want}", proc=proc,
                       retry=(OSError,))
        assert status("/no-such-probe") == 404
        if "--tls-cert" in " ".join(args):  # the pod serves the certificate the chart mounts
            ctx = ssl.create_default_context(cafile=ca.cert)
            if "--tls-client-ca" in " ".join(args):  # mTLS: KEDA's certificate comes from the same CA
                client = ca.issue("client", "keda-operator", client=True)
                ctx.load_cert_chain(client.cert, client.key)
            with socket.create_connection(("127.0.0.1", ports["--listen"]), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        assert proc.stop() == 0, proc.tail()


def test_scaler_from_the_image_decides_on_real_series_by_host_name(rootfs, tmp_path):
    """tests/lib/demo.sh (a real VictoriaMetrics holding the demo's CNPG series) with the image's
    binary, which reaches it by a name from /etc/hosts: the image ships no /etc/hosts or
    nsswitch.conf; in a pod the kubelet mounts /etc/hosts and /etc/resolv.conf, and static glibc
    resolves from both without NSS modules."""
    pod = pod_root(rootfs, tmp_path, hosts="127.0.0.1 localhost\n127.0.0.1 metrics.image-test\n")
    wrapper = tmp_path / "scaler-in-image"
    wrapper.write_text("#!/usr/bin/env bash\n# demo.sh's loopback address becomes a host name.\n"
                       f'exec {" ".join(image_command(pod))} "${{@//127.0.0.1/metrics.image-test}}"\n')
    wrapper.chmod(0o755)
    out = subprocess.run([REPO / "tests/lib/demo.sh"], env={**os.environ, "SCALER_BIN": str(wrapper)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"desired instances\s+4\s+reason: load", out.stdout), out.stdout


class PrometheusStandIn(http.server.BaseHTTPRequestHandler):
    """A stand-in that only records request paths and answers an empty vector: the test is about
    the TLS handshake, not about metrics."""
    paths: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's naming); the scaler POSTs its queries as forms
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).paths.append(self.path.split("?")[0])
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def https_backend(tmp_path):
    ca = CA(tmp_path / "pki", "image-test")
    pair = ca.issue("metrics", "metrics.image-test", hosts=("metrics.image-test",))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pair.cert, pair.key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PrometheusStandIn)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    PrometheusStandIn.paths = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ca, server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("bundle", ["image bundle + test CA", "image bundle", "none"])
def test_the_binary_trusts_the_image_bundle_and_needs_it(rootfs, tmp_path, https_backend, bundle):
    """The bundle path is the one the binary reads (a CA appended to it is trusted), verification is
    on (the public roots alone refuse the test CA), and without any bundle the Prometheus client
    cannot even be built, whatever the URL's scheme: the bundle is required, not optional."""
    ca, port = https_backend
    pod = pod_root(rootfs, tmp_path, hosts="127.0.0.1 metrics.image-test\n")
    target = pod / BUNDLE
    target.chmod(0o644)
    if bundle == "none":
        target.unlink()
    elif "test CA" in bundle:
        target.write_text(target.read_text() + ca.cert.read_text())
    out = in_image(pod, "explain", f"--prometheus-url=https://metrics.image-test:{port}", "--namespace=demo",
                   "--cluster=pg", "--target=100", "--max-replicas=6", "--topology=metrics", check=False)
    if bundle == "image bundle + test CA":
        assert "/api/v1/query" in PrometheusStandIn.paths, out.stderr
    elif bundle == "image bundle":
        assert PrometheusStandIn.paths == [] and "UnknownIssuer" in out.stderr, out.stderr
    else:
        assert out.returncode != 0 and "No CA certificates were loaded" in out.stderr, out.stderr


def test_rebuilding_gives_the_same_image(image, archive):
    """Same commit, same binary: the same manifest digest (timestamps are the commit's)."""
    subprocess.run([REPO / "run.sh", "image"], cwd=REPO, check=True, capture_output=True, timeout=900)
    with tarfile.open(archive) as tar:
        again = json.load(tar.extractfile("index.json"))
    assert again["manifests"][0]["digest"] == image.index["manifests"][0]["digest"]
