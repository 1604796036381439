"""chartgen against a broken environment and hostile inputs (issues 10 and 23): a rename that fails
half way, links out of the chart, invalid and absurdly deep values and settings, FIFOs and devices
in place of chart files, unsafe setting values, a values.yaml that would not load again, a helm
that hangs or writes without end, a template that renders without end, an absurd shard count."""
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import CHARTGEN, FLUX_FIXTURE, HELMS, chartgen
from test_reproducible import tree
from testkit import record_figure, upstream


def immutable(path, on):
    out = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, f"chattr is needed to make a rename fail (root, ext4): {out.stderr}"


def test_a_failed_rename_restores_every_file_and_leaves_no_temporaries(chart_copy):
    """values.yaml is renamed last (the plan is sorted): the templates and the schema have already
    been replaced when its rename fails, so they must be put back."""
    before = tree(chart_copy)
    values = chart_copy / "values.yaml"
    immutable(values, True)
    try:
        out = chartgen("app", "--chart", chart_copy)
    finally:
        immutable(values, False)
    assert out.returncode == 2, out.stderr
    assert "cannot move" in out.stderr and "values.yaml" in out.stderr and "nothing was changed" in out.stderr
    assert tree(chart_copy) == before, "every file restored, no temporaries, no new files"


def test_links_out_of_the_chart_are_not_followed(chart_copy, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "cluster.yaml"
    original = (chart_copy / "templates/db.yaml").read_text()
    victim.write_text(original)
    (chart_copy / "templates/db.yaml").unlink()
    (chart_copy / "templates/linked").symlink_to(outside)
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "not following" in out.stderr and "leads out of the chart" in out.stderr
    assert victim.read_text() == original
    assert sorted(p.name for p in outside.iterdir()) == ["cluster.yaml"]


def test_a_linked_values_file_is_never_written_through(chart_copy, tmp_path):
    real = tmp_path / "values.yaml"
    real.write_text((chart_copy / "values.yaml").read_text())
    (chart_copy / "values.yaml").unlink()
    (chart_copy / "values.yaml").symlink_to(real)
    before = real.read_text()
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "is a symlink" in out.stderr, out.stderr
    assert real.read_text() == before and (chart_copy / "values.yaml").is_symlink()


def test_invalid_yaml_is_reported_with_its_line(chart_copy):
    (chart_copy / "values.yaml").write_text("replicas: 2\nfoo: [1, 2\nbar: 3\n")
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2
    assert "values.yaml is not valid YAML" in out.stderr and "line 3" in out.stderr, out.stderr
    assert "has no" not in out.stderr


@pytest.mark.parametrize("deep", [
    "deep: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "deep:\n" + "".join(" " * (i + 1) + "k:\n" for i in range(3000)),
])
def test_deep_values_are_refused_quickly(chart_copy, deep):
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + deep)
    started = time.monotonic()
    out = chartgen("app", "--chart", chart_copy)
    elapsed = time.monotonic() - started
    assert out.returncode == 2 and "nests deeper than 64 levels" in out.stderr, out.stderr
    assert elapsed < 5, f"took {elapsed:.1f}s"


def test_a_huge_values_file_is_refused_without_being_loaded(chart_copy):
    values = chart_copy / "values.yaml"
    with values.open("a") as f:
        f.truncate(64 << 20)  # a sparse 64 MiB file
    # A Python parent whose only child is chartgen, so RUSAGE_CHILDREN is chartgen's peak RSS.
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, str(CHARTGEN), "app", "--chart", str(chart_copy)],
                         capture_output=True, text=True)
    code, rss_kib = map(int, out.stdout.split("\n", 1)[0].split())
    assert code == 2 and "larger than 8 MiB" in out.stdout, out.stdout
    assert rss_kib < 32 << 10, f"peak RSS {rss_kib} KiB"


@pytest.mark.parametrize("count", ["65", "1000000", "18446744073709551615"])
def test_shard_count_has_an_upper_bound(count):
    out = chartgen("shards", "--flux-deployment", FLUX_FIXTURE, "--count", count)
    assert out.returncode == 2 and out.stdout == ""
    assert "64" in out.stderr and "--count" in out.stderr, out.stderr


def test_shards_out_never_writes_through_a_linked_templates_dir(chart_copy, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.rename(chart_copy / "templates", tmp_path / "moved")
    (chart_copy / "templates").symlink_to(outside)
    out = chartgen("shards", "--flux-deployment", FLUX_FIXTURE, "--count", "2", "--out", chart_copy)
    assert out.returncode == 2 and "is a symlink" in out.stderr, out.stderr
    assert list(outside.iterdir()) == []


# Issue 23: every file chartgen reads is bounded and must be a regular file; every helm run is
# bounded; every value chartgen writes is checked, and the written files load again.

def peak_rss(*args, timeout=60):
    """Runs chartgen with `args` under a Python parent whose only child it is: (returncode, stderr,
    chartgen's peak RSS in KiB)."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout + r.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, str(CHARTGEN), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    head, text = out.stdout.split("\n", 1)
    code, rss = map(int, head.split())
    return code, text, rss


@pytest.mark.parametrize("name", ["chartgen.yaml", "values.yaml", "Chart.yaml", "values.schema.json"])
@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_a_chart_file_that_is_not_a_regular_file_is_refused_at_once(chart_copy, name, special):
    """A FIFO blocks its reader until a writer comes; /dev/zero (a device node of its own, as root)
    never ends."""
    path = chart_copy / name
    path.unlink(missing_ok=True)
    if special == "fifo":
        os.mkfifo(path)
    else:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    started = time.monotonic()
    code, text, rss = peak_rss("app", "--chart", chart_copy, timeout=30)
    assert code == 2 and "is not a regular file" in text and name in text, text
    assert time.monotonic() - started < 5 and rss < 32 << 10, rss


def test_deep_settings_are_refused_quickly(chart_copy):
    (chart_copy / "chartgen.yaml").write_text("valuesKey: " + "[" * 100_000 + "]" * 100_000 + "\n")
    started = time.monotonic()
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "chartgen.yaml nests deeper than 64 levels" in out.stderr, out.stderr
    assert time.monotonic() - started < 5


def test_a_huge_settings_file_is_refused_without_being_loaded(chart_copy):
    with (chart_copy / "chartgen.yaml").open("w") as f:
        f.truncate(64 << 20)
    code, text, rss = peak_rss("app", "--chart", chart_copy)
    assert code == 2 and "chartgen.yaml' is larger than 8 MiB" in text, text
    assert rss < 32 << 10, f"peak RSS {rss} KiB"


@pytest.mark.parametrize("flag,value", [
    ("--scaler-address", "scaler.ns.svc:6000\nevil: true"),
    ("--scaler-address", "scaler.ns.svc"),
    ("--target-name", '.Release.Name }}{{ fail "x"'),
    ("--values-key", "replicas\n"),
    ("--replica-field", "instances: 1\n  x"),
])
def test_a_value_chartgen_would_write_is_checked_naming_the_flag(chart_copy, flag, value):
    before = tree(chart_copy)
    out = chartgen("app", "--chart", chart_copy, flag, value)
    assert out.returncode == 2 and out.stderr.startswith(f"chartgen: error: {flag} "), out.stderr
    assert "chartgen refuses it" in out.stderr
    assert tree(chart_copy) == before


def test_a_stored_setting_is_checked_naming_the_file(chart_copy):
    (chart_copy / "chartgen.yaml").write_text('scalerAddress: "a:1\\nb: 2"\n')
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "`scalerAddress` in chartgen.yaml" in out.stderr, out.stderr


def test_a_values_file_that_would_not_load_again_is_never_written(chart_copy):
    """An `autoscaling:` block chartgen cannot extend line by line (a flow mapping on its own line):
    appending keys would break values.yaml, so the re-parse refuses before anything is written."""
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + "autoscaling:\n  {enabled: true}\n")
    before = tree(chart_copy)
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "values.yaml' would not load" in out.stderr, out.stderr
    assert "nothing was written" in out.stderr and tree(chart_copy) == before


@pytest.fixture
def fake_helm(tmp_path):
    """A stand-in for helm (a shell script, named as such): only the verify bounds are tested here."""
    def make(body):
        path = tmp_path / "fake-helm"
        path.write_text(f"#!/bin/sh\n# A stand-in for helm: {body}\n{body}\n")
        path.chmod(0o755)
        return path
    return make


def test_verify_kills_a_helm_that_does_not_finish(chart_copy, fake_helm):
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    helm = fake_helm("exec sleep 600")
    started = time.monotonic()
    out = subprocess.run([str(CHARTGEN), "app", "--chart", str(chart_copy), "--verify", "--helm", str(helm),
                          "--helm-timeout", "1", "--crds", upstream("keda"), "--crds", upstream("cnpg")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.count("helm did not finish within 1 s (--helm-timeout)") == 12, out.stdout
    assert "0 passed, 12 failed" in out.stdout
    assert time.monotonic() - started < 30
    assert subprocess.run(["pgrep", "-f", f"{helm}"], capture_output=True).returncode == 1, "helm was not killed"


def test_verify_caps_what_helm_writes(chart_copy, fake_helm):
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    helm = fake_helm("exec cat /dev/zero")
    code, text, rss = peak_rss("app", "--chart", chart_copy, "--verify", "--helm", helm,
                               "--crds", upstream("keda"), "--crds", upstream("cnpg"), timeout=120)
    assert code == 1 and text.count("helm wrote more than 64 MiB to stdout") == 12, text
    assert rss < 256 << 10, f"peak RSS {rss} KiB"


def test_verify_bounds_the_memory_of_a_render_without_end(chart_copy):
    """Real helm: a template rendering 260 MB. helm holds the whole render before it writes a byte,
    so the output cap came too late: about 4 GB peak (the issue: 3 GB), minutes per case."""
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    (chart_copy / "templates/big.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n"
        "{{- range $i := until 2000000 }}\n  k{{ $i }}: \"" + "x" * 110 + "\"\n{{- end }}\n")
    started = time.monotonic()
    code, text, rss = peak_rss("app", "--chart", chart_copy, "--verify", "--helm", HELMS["helm4"],
                               "--helm-max-memory", "256",
                               "--crds", upstream("keda"), "--crds", upstream("cnpg"), timeout=600)
    seconds = time.monotonic() - started
    record_figure("chartgen --verify, a 260 MB render", seconds=seconds, peak_rss_mib=rss / 1024)
    assert code == 1, text
    # The render cases; the guard cases fail in helm before the loop runs.
    assert text.count("helm needed more than 256 MiB of memory (--helm-max-memory)") == 5, text
    # chartgen and helm one after the other: the larger of the two peaks (RUSAGE_CHILDREN).
    assert rss < 448 << 10, f"peak RSS {rss} KiB"


def test_an_error_naming_many_values_keys_is_bounded(chart_copy):
    """A template whose Clusters render `instances` from 60 different values: the error names the
    first five and how many more (before: every one of them, growing with the template; a template
    with more than 64 count lines is refused before this, test_shapes.py)."""
    (chart_copy / "templates/many.yaml").write_text("".join(
        f"---\napiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: c{i}\n"
        f"spec:\n  instances: {{{{ .Values.replicas{i} }}}}\n" for i in range(60)))
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 2 and "from several values (" in out.stderr, out.stderr[:2000]
    assert '"replicas", "replicas0", "replicas1", "replicas2", "replicas3" and 56 more' in out.stderr, \
        out.stderr[:2000]
    assert '"replicas59"' not in out.stderr and len(out.stderr) < 1024, out.stderr[:2000]
