"""chartgen against a broken environment and hostile inputs (issue 10): a rename that fails half
way, links out of the chart, invalid and absurdly deep values, an absurd shard count."""
import os
import subprocess
import sys
import time

import pytest

from conftest import CHARTGEN, FLUX_FIXTURE, chartgen
from test_reproducible import tree


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
