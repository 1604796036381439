"""`chartgen app` on the count lines real charts write (issue 39), for a CNPG Cluster's `instances`
and a RedisFailover's `spec.redis.replicas` (fixtures/shape-*, written here): a trailing YAML
comment, the count read through `with` (`.replicas`) and `$.Values` (inside a `with` over another
map), the chart's own check around
the count line, a count key absent from values.yaml, a count rendered by a `range` over a map (both kinds), a literal count (`--lift-literal-count`), a name made with `template` (and a suffix), other objects reading the count (a Pooler, an alert, a
config listing one backend per replica from a helper).

A shape chartgen refuses is refused naming file:line, quoting the line and giving the fix; the
test follows that fix and runs chartgen again. Then, for every shape with Helm 3 and Helm 4: the
disabled render is byte-identical to the chart before; the enabled render scales the target's
count and names the target; `--check` passes and a second run changes nothing; values.yaml and
values.schema.json only gain; `--verify` passes."""
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import HELMS, REPO, chartgen, one
from test_reproducible import tree
from testkit import upstream

FIXTURES = Path(__file__).parent / "fixtures"
ADAPTER_CRD = REPO / "charts/cozy-autoscaling/crds/scaleadapters.yaml"
ON = ["autoscaling.enabled=true"]
KIND = {"cnpg": "Cluster", "redis": "RedisFailover"}
CRDS = {"cnpg": [upstream("keda"), upstream("cnpg")],
        "redis": [upstream("keda"), upstream("redis-operator"), ADAPTER_CRD]}


def add_under(path, parent, line):
    """Follows "add `line` under `parent`": inserts it below the `parent:` line of values.yaml."""
    text = path.read_text()
    assert f"{parent}:\n" in text
    path.write_text(text.replace(f"{parent}:\n", f"{parent}:\n  {line}\n", 1))


def write_out_of_range(template, indent, key, field):
    """Follows "write `FIELD: {{ $.Values.KEY }}` out ... and leave it out of what renders the
    rest": the count line above the `range` over `.Values.KEY`, which now omits it."""
    text = template.read_text()
    loop = f"{indent}{{{{- range $key, $value := .Values.{key} }}}}"
    assert loop in text
    template.write_text(text.replace(loop, f"{indent}{field}: {{{{ $.Values.{key}.{field} }}}}\n"
                                           f"{indent}{{{{- range $key, $value := omit .Values.{key} \"{field}\" }}}}"))


class Case:
    """A fixture: its engine, the values key of the count, the flags of the run; for a refused
    shape, what the refusal must say and the edit that follows its fix."""

    def __init__(self, engine, key, flags=(), refusal=(), fix=None):
        self.engine, self.key, self.flags, self.refusal, self.fix = engine, key, list(flags), refusal, fix

    def count(self, obj):
        return obj["spec"]["instances"] if self.engine == "cnpg" else obj["spec"]["redis"]["replicas"]


SHAPES = {
    "shape-comment-cluster": Case("cnpg", "instances"),
    "shape-comment-redis": Case("redis", "redis.replicas"),
    "shape-scope-cluster": Case("cnpg", "cluster.instances"),
    "shape-scope-redis": Case("redis", "redis.replicas"),
    "shape-check-cluster": Case("cnpg", "instances"),
    "shape-check-redis": Case("redis", "redis.replicas"),
    "shape-absent-cluster": Case(
        "cnpg", "cluster.instances",
        refusal=("templates/cluster.yaml:6: `instances: {{ .Values.cluster.instances }}`",
                 "values.yaml does not have", "add `instances: 3` under `cluster` of values.yaml"),
        fix=lambda c: add_under(c / "values.yaml", "cluster", "instances: 3")),
    "shape-absent-redis": Case(
        "redis", "replicas",
        refusal=("templates/redisfailover.yaml:9: `replicas: {{ .Values.replicas }}`",
                 "add `replicas: 3` at the top level of values.yaml"),
        fix=lambda c: (c / "values.yaml").write_text((c / "values.yaml").read_text() + "replicas: 3\n")),
    "shape-template-cluster": Case("cnpg", "instances"),
    "shape-template-redis": Case("redis", "redis.replicas"),
    "shape-readers-cluster": Case("cnpg", "instances"),
    "shape-readers-redis": Case("redis", "redis.replicas"),
    # Written out as the refusal says, the range keeps rendering the rest.
    "shape-range-redis": Case(
        "redis", "redis.replicas",
        refusal=("templates/redisfailover.yaml:8: `redis:`)", "a `range` over a map",
                 "write `replicas: {{ $.Values.KEY }}` out under `redis:` there"),
        fix=lambda c: write_out_of_range(c / "templates/redisfailover.yaml", "    ", "redis", "replicas")),
    "shape-range-cluster": Case(
        "cnpg", "cluster.instances",
        refusal=("templates/cluster.yaml:5: `spec:`)", "a `range` over a map",
                 "write `instances: {{ $.Values.KEY }}` out under `spec:` there"),
        fix=lambda c: write_out_of_range(c / "templates/cluster.yaml", "  ", "cluster", "instances")),
    "shape-dollar-cluster": Case("cnpg", "cluster.instances"),
    # The flag the refusal names: the disabled render stays that of the fixture as written.
    "shape-literal-cluster": Case(
        "cnpg", "replicas", flags=["--lift-literal-count", "replicas"],
        refusal=("templates/cluster.yaml:6: `instances: 2 # a primary and a standby` is the literal 2",
                 "pass --lift-literal-count KEY")),
    "shape-literal-redis": Case(
        "redis", "replicas", flags=["--lift-literal-count", "replicas"],
        refusal=("templates/redisfailover.yaml:10: `replicas: 2` is the literal 2",
                 "templates/redisfailover.yaml:13: `replicas: 2`", "pass --lift-literal-count KEY")),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Each shape as the author has it (after following a refusal's fix) and after chartgen app:
    (before, after, stderr of the run)."""
    root = tmp_path_factory.mktemp("shapes")
    out = {}
    for name, case in SHAPES.items():
        before, after = root / "before" / name, root / "after" / name
        shutil.copytree(FIXTURES / name, before)
        if case.refusal:
            refused = chartgen("app", "--chart", before)
            assert refused.returncode == 2, f"{name}: {refused.stderr}"
            for part in case.refusal:
                assert part in refused.stderr, f"{name}: {part!r} not in {refused.stderr}"
            assert tree(before) == tree(FIXTURES / name), "a refusal writes nothing"
        if case.fix:
            case.fix(before)
        shutil.copytree(before, after)
        run = chartgen("app", "--chart", after, *case.flags)
        assert run.returncode == 0, f"{name}: {run.stderr}"
        out[name] = (before, after, run.stderr)
    return out


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("keda", [True, False])
def test_disabled_render_is_byte_identical_to_the_chart_before(helm, generated, name, keda):
    before, after, _ = generated[name]
    old, new = helm.template(before, keda=keda), helm.template(after, keda=keda)
    assert old.returncode == 0 and new.returncode == 0, old.stderr + new.stderr
    assert new.stdout == old.stdout


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_enabled_render_scales_the_targets_count(helm, generated, name):
    case = SHAPES[name]
    objs = helm.render(generated[name][1], ON + [f"{case.key}=4", "autoscaling.minReplicas=3"])
    target = one(objs, KIND[case.engine])
    assert case.count(target) == 4
    ref = one(objs, "ScaledObject")["spec"]["scaleTargetRef"]
    if case.engine == "redis":
        adapter = one(objs, "ScaleAdapter", ref["name"])
        assert adapter["spec"]["replicas"] == 4
        ref = adapter["spec"]["targetRef"]
    assert (ref["kind"], ref["name"]) == (KIND[case.engine], target["metadata"]["name"])
    low = helm.render(generated[name][1], ON + [f"{case.key}=2", "autoscaling.minReplicas=3"])
    assert case.count(one(low, KIND[case.engine])) == 3, "raised to the floor"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_check_passes_and_a_second_run_changes_nothing(generated, name, tmp_path):
    chart = tmp_path / name
    shutil.copytree(generated[name][1], chart)
    before = tree(chart)
    check = chartgen("app", "--chart", chart, "--check")
    assert check.returncode == 0, check.stderr
    again = chartgen("app", "--chart", chart)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert tree(chart) == before


def contains(big, small):
    """True when every key of `small` is in `big` with the same value (recursively)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and contains(big[k], v) for k, v in small.items())
    return big == small


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_values_and_schema_only_gain(generated, name):
    before, after, _ = generated[name]
    old = yaml.safe_load((before / "values.yaml").read_text())
    new = yaml.safe_load((after / "values.yaml").read_text())
    assert contains(new, old) and "autoscaling" in new
    if (before / "values.schema.json").exists():
        assert contains(json.loads((after / "values.schema.json").read_text()),
                        json.loads((before / "values.schema.json").read_text()))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_verify_renders_the_mode_matrix_with_both_helms(generated, name):
    crds = [a for c in CRDS[SHAPES[name].engine] for a in ("--crds", c)]
    out = chartgen("app", "--chart", generated[name][1], "--verify",
                   *[a for h in sorted(HELMS.values()) for a in ("--helm", h)], *crds)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "24 passed, 0 failed" in out.stdout, out.stdout


def test_a_with_chartgen_cannot_resolve_is_refused_and_dollar_values_is_the_fix(copy_of_shape):
    chart = copy_of_shape("shape-scope-cluster")
    tmpl = chart / "templates/cluster.yaml"
    tmpl.write_text(tmpl.read_text().replace("with .Values.cluster }}", "with .Values.cluster | default dict }}"))
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 2
    for part in ("templates/cluster.yaml:7: `instances: {{ .instances }}`",
                 "inside `with .Values.cluster | default dict`",
                 "write it as `instances: {{ $.Values.KEY }}`"):
        assert part in out.stderr, out.stderr
    tmpl.write_text(tmpl.read_text().replace("{{ .instances }}", "{{ $.Values.cluster.instances }}"))
    fixed = chartgen("app", "--chart", chart)
    assert fixed.returncode == 0, fixed.stderr


def test_a_count_line_chartgen_cannot_read_is_named_even_with_a_values_key(copy_of_shape):
    chart = copy_of_shape("shape-comment-redis")
    out = chartgen("app", "--chart", chart, "--values-key", "redis.size")
    assert out.returncode == 2
    assert ("templates/redisfailover.yaml:9: `replicas: {{ .Values.redis.replicas }} # sentinels need an odd count`"
            " reads `.Values.redis.replicas`, not `.Values.redis.size`: pass --values-key redis.replicas") in out.stderr
    fixed = chartgen("app", "--chart", chart, "--values-key", "redis.replicas")
    assert fixed.returncode == 0, fixed.stderr


@pytest.fixture
def copy_of_shape(tmp_path):
    def make(name):
        shutil.copytree(FIXTURES / name, tmp_path / name)
        return tmp_path / name
    return make


def test_a_lifted_literal_reads_the_new_key_and_a_second_lift_is_refused(generated):
    after = generated["shape-literal-redis"][1]
    tmpl = (after / "templates/redisfailover.yaml").read_text()
    assert "    replicas: 3\n" in tmpl, "the sentinels' literal is not the count"
    assert tmpl.count("    replicas: {{ $.Values.replicas }}\n") == 1, "inside `with`: from the root"
    assert tmpl.count("    replicas: {{ .Values.replicas }}\n") == 1, "a `with`'s else keeps the root"
    assert "## @param {int} replicas - The RedisFailover's replicas" in (after / "values.yaml").read_text()
    again = chartgen("app", "--chart", after, "--lift-literal-count", "replicas")
    assert again.returncode == 2 and "values.yaml already has `replicas`" in again.stderr, again.stderr
    other = chartgen("app", "--chart", after, "--lift-literal-count", "count")
    assert other.returncode == 2 and "is a literal" in other.stderr and "drop it" in other.stderr, other.stderr


def test_a_lift_with_a_flag_the_run_refuses_writes_nothing(tmp_path):
    chart = tmp_path / "chart"
    shutil.copytree(FIXTURES / "shape-literal-cluster", chart)
    run = chartgen("app", "--chart", chart, "--lift-literal-count", "replicas",
                   "--target-name", "{{ .Release.Name }}\nkind: Secret")
    assert run.returncode == 2 and "--target-name" in run.stderr, run.stderr
    assert tree(chart) == tree(FIXTURES / "shape-literal-cluster"), "nothing written"


@pytest.mark.parametrize("name,want", [("shape-template-cluster", "pg-shape-template-cluster"),
                                       ("shape-template-redis", "pg-node")])
def test_a_name_made_with_template_is_the_rendered_name(helm, generated, name, want):
    objs = helm.render(generated[name][1], ON + ["fullnameOverride="] * (name == "shape-template-cluster"))
    target = one(objs, KIND[SHAPES[name].engine])
    assert target["metadata"]["name"] == want
    assert one(objs, "ScaledObject")["metadata"]["name"] == want


@pytest.mark.parametrize("name,notes", [
    ("shape-readers-cluster", [
        "templates/cluster.yaml:17 (Pooler) also reads .Values.instances",
        "templates/cluster.yaml:31 (PrometheusRule) also reads .Values.instances"]),
    ("shape-readers-redis", [
        "templates/_helpers.tpl:2 (helper `shape-readers-redis.backends`, rendered into ConfigMap at ",
        "templates/redisfailover.yaml:18) also reads .Values.redis.replicas",
        "templates/prometheusrule.yaml:10 (PrometheusRule) also reads .Values.redis.replicas"]),
])
def test_other_readers_of_the_count_are_named_with_kind_and_file(generated, name, notes):
    stderr = generated[name][2]
    for note in notes:
        assert note in stderr, stderr
    assert "(?)" not in stderr
    assert stderr.count("it stays at that value while KEDA moves the") == len(notes) - (name == "shape-readers-redis")


def test_a_template_of_many_count_lines_is_refused_at_once(copy_of_shape):
    """Each count line costs a scan of its file for the blocks around it: a 7 MiB template of
    count lines took minutes before the bound; it is refused in well under a second."""
    chart = copy_of_shape("shape-comment-cluster")
    head = "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: x\nspec:\n"
    big = chart / "templates/big.yaml"
    big.write_text(head + "  instances: {{ .Values.instances }}\n" * 200_000)
    started = time.monotonic()
    out = chartgen("app", "--chart", chart)
    assert time.monotonic() - started < 5
    assert out.returncode == 2 and "has more than 64 `instances:` lines" in out.stderr, out.stderr
    big.write_text(head + "  instances: {{ .Values.instances }}\n" * 64)
    at_the_bound = chartgen("app", "--chart", chart)
    assert "more than 64" not in at_the_bound.stderr, at_the_bound.stderr
