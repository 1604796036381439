"""`chartgen app` on a corpus of chart shapes written by others (issue 8), under fixtures/: nested
count keys, names and namespaces from helpers and library charts, namespaceOverride, a quorum
absent from values.yaml (field by field, or a whole `synchronous: {}` rendered with toYaml), the
legacy maxSyncReplicas, no schema, Bitnami and cozyvalues-gen annotations, a Go-escaped schema,
an autoscaling block with the author's comments; and the shapes of issue 24: a Cluster behind the
chart's own switch, a template default on the count, a Pooler reading the same count, a Cluster
from a dependency, a Cluster per `range` entry.

For every chart, with Helm 3 and Helm 4: the disabled render is byte-identical to the chart before
chartgen; the enabled, transition and dryRun objects are valid against the CRDs and the
ScaledObject sits next to the Cluster it names; `--check` without flags passes; a second run
changes nothing; `--verify` passes."""
import shutil
from pathlib import Path

import pytest

from conftest import HELMS, chartgen, docs, one
from test_reproducible import tree
from testkit import upstream

FIXTURES = Path(__file__).parent / "fixtures"
ON = ["autoscaling.enabled=true"]


class Shape:
    def __init__(self, flags=(), name="pg", quorum=None, count="replicas"):
        self.flags, self.name, self.quorum, self.count = list(flags), name, quorum, count


CORPUS = {
    "example-postgres": Shape(quorum="quorum.maxSyncReplicas"),
    "nested-count": Shape(["--values-key", "cluster.instances"], name="pg-nested-count", count="cluster.instances"),
    "library-helpers": Shape(["--values-key", "replicaCount"], name="pg-library-helpers", count="replicaCount"),
    "namespace-override": Shape(name="pg-pg", quorum="cluster.postgresql.synchronous.number"),
    "legacy-max-sync": Shape(name="orders-db", quorum="maxSyncReplicas"),
    "cozy-params": Shape(quorum="quorum.maxSyncReplicas"),
    "block-comments": Shape(),
    "synchronous-yaml": Shape(name="pg-cluster", quorum="cluster.postgresql.synchronous.number",
                              count="cluster.instances"),
    "switched-cluster": Shape(count="postgresql.instances"),
    "count-default": Shape(count="instances"),
    "pooler-reader": Shape(count="instances"),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Each corpus chart after one `chartgen app` with its flags, and that run's stderr."""
    root = tmp_path_factory.mktemp("corpus")
    out = {}
    for name, shape in CORPUS.items():
        shutil.copytree(FIXTURES / name, root / name)
        run = chartgen("app", "--chart", root / name, *shape.flags)
        assert run.returncode == 0, f"{name}: {run.stderr}"
        out[name] = (root / name, run.stderr)
    return out


@pytest.fixture
def copy_of(tmp_path):
    def make(name):
        shutil.copytree(FIXTURES / name, tmp_path / name)
        return tmp_path / name
    return make


def namespace_of(obj, release_ns="tenant-a"):
    return obj["metadata"].get("namespace", release_ns)


@pytest.mark.parametrize("chart", sorted(CORPUS))
@pytest.mark.parametrize("keda", [True, False])
def test_disabled_render_is_byte_identical_to_the_chart_before(helm, generated, chart, keda):
    before = helm.template(FIXTURES / chart, keda=keda)
    after = helm.template(generated[chart][0], keda=keda)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert after.stdout == before.stdout
    assert "ScaledObject" not in after.stdout


@pytest.mark.parametrize("chart", sorted(CORPUS))
@pytest.mark.parametrize("mode,paused", [([], False), (["autoscaling.transition=true"], True),
                                         (["autoscaling.dryRun=true"], True)])
def test_enabled_modes_are_valid_and_target_the_rendered_cluster(helm, generated, chart, mode, paused):
    objs = helm.render(generated[chart][0], ON + mode)
    cluster, so = one(objs, "Cluster"), one(objs, "ScaledObject")
    assert cluster["metadata"]["name"] == CORPUS[chart].name
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                                            "name": CORPUS[chart].name}
    assert so["spec"]["triggers"][0]["metadata"]["cluster"] == CORPUS[chart].name
    assert namespace_of(so) == namespace_of(cluster)
    assert isinstance(cluster["spec"]["instances"], int), "the count is never omitted"
    assert bool(so["metadata"].get("annotations")) == paused


@pytest.mark.parametrize("chart", ["namespace-override", "library-helpers", "synchronous-yaml"])
def test_a_namespace_override_moves_the_scaledobject_with_the_cluster(helm, generated, chart):
    objs = helm.render(generated[chart][0], ON + ["namespaceOverride=db-prod"])
    assert namespace_of(one(objs, "Cluster")) == "db-prod"
    assert namespace_of(one(objs, "ScaledObject")) == "db-prod"


@pytest.mark.parametrize("chart", sorted(c for c, s in CORPUS.items() if s.quorum))
def test_the_floor_includes_the_quorum_wherever_the_chart_sets_it(helm, generated, chart):
    shape = CORPUS[chart]
    sets = ON + [f"{shape.quorum}=3", f"{shape.count}=4"]
    if "synchronous" in shape.quorum:
        sets.append("cluster.postgresql.synchronous.method=any")
    objs = helm.render(generated[chart][0], sets)
    so = one(objs, "ScaledObject")
    assert so["spec"]["minReplicaCount"] == 4
    assert so["spec"]["triggers"][0]["metadata"]["maxSyncReplicas"] == "3"
    # Quorum >= 1 never renders a Cluster without `instances` (the API server would default it to 1,
    # which CNPG refuses with a synchronous quorum): the count is at least quorum + 1.
    assert one(objs, "Cluster")["spec"]["instances"] >= 4


def test_a_quorum_key_absent_from_values_reads_as_zero(helm, generated):
    chart = generated["namespace-override"][0]
    assert "number:" not in (chart / "values.yaml").read_text()
    so = one(helm.render(chart, ON), "ScaledObject")
    assert so["spec"]["minReplicaCount"] == 2
    assert so["spec"]["triggers"][0]["metadata"]["maxSyncReplicas"] == "0"


@pytest.mark.parametrize("chart", ["nested-count", "library-helpers", "block-comments"])
def test_without_a_quorum_setting_the_scaler_reads_the_live_cluster(helm, generated, chart):
    so = one(helm.render(generated[chart][0], ON), "ScaledObject")
    assert "maxSyncReplicas" not in so["spec"]["triggers"][0]["metadata"]


@pytest.mark.parametrize("chart", sorted(CORPUS))
def test_check_without_flags_passes_and_a_second_run_changes_nothing(generated, chart, tmp_path):
    chart_dir = tmp_path / chart
    shutil.copytree(generated[chart][0], chart_dir)
    before = tree(chart_dir)
    check = chartgen("app", "--chart", chart_dir, "--check")
    assert check.returncode == 0, check.stderr
    for flags in ([], CORPUS[chart].flags):
        again = chartgen("app", "--chart", chart_dir, *flags)
        assert again.returncode == 0 and again.stderr == "", again.stderr
        assert tree(chart_dir) == before


@pytest.mark.parametrize("chart", sorted(CORPUS))
def test_verify_renders_the_mode_matrix_with_both_helms(generated, chart):
    out = chartgen("app", "--chart", generated[chart][0], "--verify",
                   *[a for h in sorted(HELMS.values()) for a in ("--helm", h)],
                   "--crds", upstream("keda"), "--crds", upstream("cnpg"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "24 passed, 0 failed" in out.stdout, out.stdout


@pytest.mark.parametrize("chart", ["nested-count", "library-helpers"])
def test_the_count_key_is_read_from_the_target_template(copy_of, helm, chart):
    path = copy_of(chart)
    out = chartgen("app", "--chart", path)
    assert out.returncode == 0, out.stderr
    assert "valuesKey" not in (path / "chartgen.yaml").read_text(), "derived, not stored"
    objs = helm.render(path, ON)
    assert one(objs, "ScaledObject")["spec"]["scaleTargetRef"]["name"] == CORPUS[chart].name


def test_verify_fails_on_an_object_the_crd_rejects(copy_of):
    chart = copy_of("legacy-max-sync")
    tmpl = chart / "templates/postgres.yaml"
    tmpl.write_text(tmpl.read_text().replace("  storage:\n", "  bogusField: 1\n  storage:\n"))
    assert chartgen("app", "--chart", chart).returncode == 0
    out = chartgen("app", "--chart", chart, "--verify", "--helm", HELMS["helm4"],
                   "--crds", upstream("keda"), "--crds", upstream("cnpg"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL" in out.stdout and "bogusField" in out.stdout and "7 passed, 5 failed" in out.stdout, out.stdout


def test_verify_refuses_a_chart_that_is_not_up_to_date(copy_of):
    chart = copy_of("nested-count")
    assert chartgen("app", "--chart", chart, "--values-key", "cluster.instances").returncode == 0
    so = chart / "templates/scaledobject.yaml"
    so.write_text(so.read_text().replace("name: {{ (include", "name: {{ printf \"%s-x\" (include"))
    out = chartgen("app", "--chart", chart, "--verify", "--helm", HELMS["helm4"],
                   "--crds", upstream("keda"), "--crds", upstream("cnpg"))
    assert out.returncode == 2 and "not up to date" in out.stderr, out.stderr


def test_a_target_name_flag_that_disagrees_with_the_template_is_an_error(copy_of):
    chart = copy_of("nested-count")
    before = tree(chart)
    out = chartgen("app", "--chart", chart, "--values-key", "cluster.instances", "--target-name", ".Release.Name")
    assert out.returncode == 2
    assert "'.Release.Name' disagrees" in out.stderr and 'include "nested-count.fullname" .' in out.stderr
    assert "cluster.yaml:4" in out.stderr, out.stderr
    assert tree(chart) == before


@pytest.mark.parametrize("block", ["with", "range"])
def test_a_name_read_through_with_is_resolved_and_a_cluster_per_range_entry_refused(copy_of, helm, block):
    chart = copy_of("nested-count")
    tmpl = chart / "templates/cluster.yaml"
    tmpl.write_text("{{- %s .Values.cluster }}\n" % block + tmpl.read_text()
                    .replace("{{ .Release.Name }}", "{{ $.Release.Name }}")
                    .replace("{{ include \"nested-count.fullname\" . }}", "{{ $.Release.Name }}-{{ .suffix }}")
                    .replace(".Values.cluster.instances", "$.Values.cluster.instances")
                    .replace(".Values.cluster.storage", ".storage") + "{{- end }}\n")
    values = chart / "values.yaml"
    values.write_text(values.read_text() + "  suffix: db\n")
    out = chartgen("app", "--chart", chart, "--values-key", "cluster.instances")
    if block == "range":
        # One Cluster per entry: refused before the name is read.
        assert out.returncode == 2 and "inside `range .Values.cluster`" in out.stderr, out.stderr
        return
    assert out.returncode == 0, out.stderr
    assert chartgen("app", "--chart", chart, "--check").returncode == 0
    objs = helm.render(chart, ON)
    assert one(objs, "ScaledObject")["spec"]["scaleTargetRef"]["name"] == one(objs, "Cluster")["metadata"]["name"]


def test_a_flag_given_later_updates_the_remembered_settings(copy_of, helm):
    chart = copy_of("legacy-max-sync")
    assert chartgen("app", "--chart", chart).returncode == 0
    assert chartgen("app", "--chart", chart, "--max-sync-replicas-key", "").returncode == 0
    assert "maxSyncReplicasKey: ''" in (chart / "chartgen.yaml").read_text()
    assert chartgen("app", "--chart", chart, "--check").returncode == 0
    so = one(helm.render(chart, ON), "ScaledObject")
    assert "maxSyncReplicas" not in so["spec"]["triggers"][0]["metadata"]


def test_schema_lines_outside_the_property_stay_byte_identical(generated):
    chart, _ = generated["cozy-params"]
    before = (FIXTURES / "cozy-params/values.schema.json").read_text()
    after = (chart / "values.schema.json").read_text()
    assert after.count("\\u003c10Gi\\u003e") == 1
    head = before[:before.rindex("\n  }\n}")]
    assert after.startswith(head + ",\n    \"autoscaling\": {\n      \"type\": \"object\""), after[len(head) - 80:len(head) + 80]
    assert after.endswith("\n    }\n  }\n}\n")


def test_a_schema_generator_owns_the_property_once_written(copy_of):
    """cozyvalues-gen regenerates the autoscaling property from the annotations: chartgen must not
    flip it back (in the generator's own formatting) on the next run."""
    chart = copy_of("cozy-params")
    assert chartgen("app", "--chart", chart).returncode == 0
    schema = chart / "values.schema.json"
    regenerated = schema.read_text().replace('"description": "Scale with KEDA', '"description": "Regenerated: scale with KEDA')
    schema.write_text(regenerated)
    assert chartgen("app", "--chart", chart, "--check").returncode == 0
    assert schema.read_text() == regenerated


def test_comments_in_the_autoscaling_block_survive(generated, helm):
    chart, stderr = generated["block-comments"]
    values = (chart / "values.yaml").read_text()
    original = (FIXTURES / "block-comments/values.yaml").read_text()
    kept = original[original.index("autoscaling:"):original.index("\n\n# -- trailing")]
    assert values.startswith(original[:original.index("autoscaling:")] + kept + "\n  # -- gRPC address")
    assert values.endswith("\n\n# -- trailing settings\nstorage: 2Gi\n")
    assert "added scalerAddress, clusterTriggerAuthentication, minReplicas" in stderr
    so = one(helm.render(chart, ON), "ScaledObject")
    assert so["spec"]["maxReplicaCount"] == 10 and so["spec"]["triggers"][0]["metadata"]["target"] == "90"


@pytest.mark.parametrize("chart,marks", [
    ("cozy-params", ["## @section Autoscaling", "## @typedef {struct} Autoscaling - ",
                     "## @field {bool} enabled - ", "## @field {AutoscalingMetric} metric - ",
                     "## @param {Autoscaling} autoscaling - "]),
    ("library-helpers", ["## @section Autoscaling", "  ## @param autoscaling.enabled Scale the Cluster"]),
    ("nested-count", ["  # -- Scale the Cluster horizontally"]),
])
def test_the_block_follows_the_charts_values_convention(generated, chart, marks):
    values = (generated[chart][0] / "values.yaml").read_text()
    for mark in marks:
        assert mark in values, mark
    if chart != "nested-count":
        assert "# -- " not in values[values.index("autoscaling:"):]


@pytest.mark.parametrize("chart,line", [
    ("library-helpers", "templates/cluster.yaml:17 (PodDisruptionBudget) also reads .Values.replicaCount"),
    ("cozy-params", "templates/db.yaml:19 (ConfigMap) also reads .Values.replicas"),
])
def test_other_readers_of_the_count_are_named(generated, chart, line):
    assert line in generated[chart][1]
    assert "stays at that value while KEDA moves the Cluster" in generated[chart][1]


def test_a_created_schema_and_the_next_steps_are_announced(generated):
    stderr = generated["library-helpers"][1]
    assert "created" in stderr and "values.schema.json because the chart had none" in stderr
    assert "--api-versions keda.sh/v1alpha1" in stderr and "--verify" in stderr and "transition" in stderr
    assert "created" not in generated["nested-count"][1]


# Issue 24's shapes, each on its own fixture, rendered with Helm 3 and Helm 4.

def test_the_scaledobject_renders_only_where_its_cluster_does(helm, generated):
    """Shape 1: the Cluster behind `if .Values.postgresql.enabled`; the ScaledObject carries the
    same condition, so turning the bundled database off never aims KEDA at a Cluster from elsewhere."""
    chart = generated["switched-cluster"][0]
    assert "{{- if and .Values.autoscaling.enabled (.Values.postgresql.enabled) }}" in (
        chart / "templates/scaledobject.yaml").read_text()
    off = helm.render(chart, ON + ["postgresql.enabled=false"])
    assert [o["kind"] for o in off] == ["ConfigMap"], [o["kind"] for o in off]
    on = helm.render(chart, ON)
    assert one(on, "ScaledObject")["spec"]["scaleTargetRef"]["name"] == one(on, "Cluster")["metadata"]["name"]


def test_branch_conditions_are_carried_too(helm, copy_of):
    """An `else` branch: the Cluster renders when the external database is not chosen."""
    chart = copy_of("switched-cluster")
    tmpl = chart / "templates/cluster.yaml"
    tmpl.write_text(tmpl.read_text().replace("{{- if .Values.postgresql.enabled }}",
                                             "{{- if .Values.useExternal }}\n{{- else if .Values.postgresql.enabled }}"))
    values = chart / "values.yaml"
    values.write_text(values.read_text() + "useExternal: false\n")
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 0, out.stderr
    for sets, rendered in ([], True), (["useExternal=true"], False), (["postgresql.enabled=false"], False):
        kinds = [o["kind"] for o in helm.render(chart, ON + sets)]
        assert ("ScaledObject" in kinds) == ("Cluster" in kinds) == rendered, (sets, kinds)


@pytest.mark.parametrize("sets,count", [([], 3), (["autoscaling.minReplicas=4"], 4), (["instances=5"], 5)])
def test_a_template_default_on_the_count_is_kept(helm, generated, sets, count):
    """Shape 2: `instances: {{ .Values.instances | default 3 }}` with the value unset renders 3 off
    and on (raised only to the floor), not the floor of 2."""
    chart = generated["count-default"][0]
    assert "instances:" not in (chart / "values.yaml").read_text().replace("# instances:", "")
    assert one(helm.render(chart, sets), "Cluster")["spec"]["instances"] == (5 if "instances=5" in sets else 3)
    objs = helm.render(chart, ON + sets)
    assert one(objs, "Cluster")["spec"]["instances"] == count
    out = helm.template(chart, ON + ["autoscaling.maxReplicas=2", "autoscaling.minReplicas=2"])
    assert out.returncode != 0 and "instances (3) is above autoscaling.maxReplicas (2)" in out.stderr, out.stderr


@pytest.mark.parametrize("flags", [[], ["--target-kind", "Cluster"]])
def test_another_reader_of_the_count_is_a_note_not_a_refusal(helm, copy_of, flags):
    """Shape 3: a Pooler's `instances` reads the same value; it is named and left alone."""
    chart = copy_of("pooler-reader")
    pooler = (chart / "templates/pooler.yaml").read_text()
    out = chartgen("app", "--chart", chart, *flags)
    assert out.returncode == 0, out.stderr
    assert "templates/pooler.yaml:8 (Pooler) also reads .Values.instances" in out.stderr, out.stderr
    assert (chart / "templates/pooler.yaml").read_text() == pooler
    objs = helm.render(chart, ON + ["instances=4"])
    assert one(objs, "Pooler")["spec"]["instances"] == 4 and one(objs, "Cluster")["spec"]["instances"] == 4
    assert one(objs, "ScaledObject")["spec"]["scaleTargetRef"]["kind"] == "Cluster"


def test_a_cluster_in_a_local_subchart_is_refused_with_the_dependency_and_the_fix(helm, copy_of):
    """Shape 4, local subchart: the refusal names the subchart's file, why and what to do; doing it
    gives the umbrella chart autoscaling through the subchart's values."""
    chart = copy_of("umbrella-subchart")
    before = tree(chart)
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 2 and tree(chart) == before
    err = out.stderr
    assert "charts/db/templates/cluster.yaml:2" in err and "the dependency `db` does" in err, err
    assert f"chartgen app --chart {chart}/charts/db" in err and "db.autoscaling.enabled: true" in err, err
    flagged = chartgen("app", "--chart", chart, "--values-key", "db.replicas")
    assert flagged.returncode == 2 and "the dependency `db` does" in flagged.stderr, flagged.stderr
    assert chartgen("app", "--chart", chart / "charts/db").returncode == 0
    objs = helm.render(chart, ["db.autoscaling.enabled=true"])
    assert one(objs, "ScaledObject")["spec"]["scaleTargetRef"]["name"] == one(objs, "Cluster")["metadata"]["name"]
    assert [o["kind"] for o in helm.render(chart)] == ["ConfigMap", "Cluster"]


def test_a_cluster_in_a_packaged_dependency_is_refused_naming_the_archive(helm, copy_of):
    """Shape 4, packaged: a `.tgz` under charts/ cannot be edited; the refusal says so and how."""
    chart = copy_of("umbrella-subchart")
    helm.output("package", chart / "charts/db", "--destination", chart / "charts")
    shutil.rmtree(chart / "charts/db")
    assert one(helm.render(chart), "Cluster")
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 2, out.stderr
    assert "db-0.1.0.tgz" in out.stderr and "does not edit a packaged chart" in out.stderr, out.stderr
    assert "<name>.autoscaling.enabled: true" in out.stderr and "package it again" in out.stderr


def test_a_cluster_per_range_entry_is_refused_saying_why(copy_of):
    """Shape 5: one Cluster per entry of a `range`; chartgen says it scales one Cluster and how to
    split the chart."""
    chart = copy_of("cluster-per-entry")
    before = tree(chart)
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 2 and tree(chart) == before
    assert "templates/clusters.yaml:4: the Cluster is rendered inside `range $name, $db := .Values.databases`" in out.stderr
    assert "one per entry" in out.stderr and "its own chart" in out.stderr, out.stderr


@pytest.mark.parametrize("chart", sorted(CORPUS))
def test_generated_text_cites_nothing_outside_the_chart(generated, chart):
    """Shape 6: the files copied into a user's chart name no document of this repository."""
    root = generated[chart][0]
    for path in [root / "templates/_autoscaling.tpl", root / "templates/scaledobject.yaml",
                 root / "values.schema.json", root / "values.yaml", root / "chartgen.yaml"]:
        text = path.read_text()
        for cited in (".md", "docs/", "templates/app", "§"):
            assert cited not in text, f"{path.name} cites {cited!r}"


def test_the_keda_guard_names_the_helm_template_flag(helm, generated):
    out = helm.template(generated["nested-count"][0], ON, keda=False)
    assert out.returncode != 0 and "pass --api-versions keda.sh/v1alpha1" in out.stderr, out.stderr


def test_the_next_steps_name_the_charts_count_key(generated):
    stderr = generated["nested-count"][1]
    assert "(1) cluster.instances = the live count" in stderr, stderr
    assert "replicas = the live count" not in stderr.replace("cluster.instances", "")
