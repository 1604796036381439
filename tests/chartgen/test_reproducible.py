"""chartgen's outputs are reproducible: charts/example-postgres is exactly `chartgen app` applied to
the pristine example, the rewrite is idempotent and keeps author edits, and --check reports drift
without changing anything."""
import shutil

from conftest import EXAMPLE, PACKAGE, chartgen


def tree(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_example_is_app_applied_to_the_pristine_chart(chart_copy):
    out = chartgen("app", "--chart", chart_copy)
    assert out.returncode == 0, out.stderr
    assert tree(chart_copy) == tree(EXAMPLE)


def test_app_is_idempotent_and_check_changes_nothing(chart_copy):
    assert chartgen("app", "--chart", chart_copy, "--check").returncode == 1, "pristine chart must drift"
    assert not (chart_copy / "templates/scaledobject.yaml").exists(), "--check must not write"
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    before = tree(chart_copy)
    again = chartgen("app", "--chart", chart_copy)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert tree(chart_copy) == before
    assert chartgen("app", "--chart", chart_copy, "--check").returncode == 0
    (chart_copy / "templates/scaledobject.yaml").unlink()
    drift = chartgen("app", "--chart", chart_copy, "--check")
    assert drift.returncode == 1 and "scaledobject.yaml" in drift.stderr


def test_author_values_and_other_lines_survive_a_rerun(chart_copy):
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    values = chart_copy / "values.yaml"
    text = values.read_text().replace("  target: 150\n", "  target: 42\n").replace("replicas: 2\n", "replicas: 3  # mine\n")
    values.write_text(text + "# trailing note\nextra: true\n")
    assert chartgen("app", "--chart", chart_copy).returncode == 0
    after = values.read_text()
    assert "  target: 42\n" in after and "replicas: 3  # mine\n" in after
    assert after.endswith("# trailing note\nextra: true\n")
    assert after.count("autoscaling:") == 1


def test_chart_without_the_replica_line_is_refused(chart_copy):
    db = chart_copy / "templates/db.yaml"
    db.write_text(db.read_text().replace("{{ .Values.replicas }}", "3"))
    out = chartgen("app", "--chart", chart_copy)
    # A literal count: the refusal names the flag that makes it a values key.
    assert out.returncode == 2 and "--lift-literal-count" in out.stderr, out.stderr
    assert not (chart_copy / "templates/scaledobject.yaml").exists(), "nothing written on error"
    assert "autoscaling" not in (chart_copy / "values.yaml").read_text()


def test_package_check_reports_the_version_and_leaves_hand_edits_alone(tmp_path):
    """The chart is edited where it lives: chartgen owns only Chart.yaml's version fields and the
    shard data, so --check fails on those and never on an edited template or value."""
    charts = tmp_path / "charts"
    shutil.copytree(PACKAGE, charts / PACKAGE.name)
    assert chartgen("package", "--out", charts, "--check").returncode == 0
    (charts / PACKAGE.name / "templates/extra.yaml").write_text("kind: x\n")
    values = charts / PACKAGE.name / "values.yaml"
    values.write_text(values.read_text() + "# edited\n")
    assert chartgen("package", "--out", charts, "--check").returncode == 0
    chart_yaml = charts / PACKAGE.name / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace("version: ", "version: 9", 1))
    out = chartgen("package", "--out", charts, "--check")
    assert out.returncode == 1 and "Chart.yaml" in out.stderr
    assert chartgen("package", "--out", charts).returncode == 0
    assert chartgen("package", "--out", charts, "--check").returncode == 0
    assert (charts / PACKAGE.name / "templates/extra.yaml").exists()
    assert values.read_text().endswith("# edited\n")
