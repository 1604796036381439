"""The package chart adapts to a cluster and refuses what it does not know: per-component pod knobs,
an image digest, scrape and rule labels, PodDisruptionBudgets only where they protect something,
the recommended labels on every object and pod, a schema closed at every level, and the
aggregated read access for tenant users (helm 3 and helm 4)."""
import json

import pytest

from conftest import PACKAGE, one

NS = "cozy-autoscaling"
COMPONENTS = {"scaler": "scaler", "webhook": "webhook", "shard-controller": "shardController"}
RECOMMENDED = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
               "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart")


def render(helm, sets=(), values=None):
    return helm.render(PACKAGE, sets, keda=False, release=NS, namespace=NS, values=values)


def pod_of(objs, component):
    return one(objs, "Deployment", f"cozy-autoscaling-{component}")["spec"]["template"]


def test_every_package_object_and_pod_carries_the_recommended_labels(helm):
    objs = render(helm, ["monitoring.dashboard.enabled=true"])
    assert len(objs) > 40
    for o in objs:
        labels = o["metadata"].get("labels", {})
        missing = [k for k in RECOMMENDED if k not in labels]
        assert not missing, f"{o['kind']}/{o['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/instance"] == NS and labels["app.kubernetes.io/managed-by"] == "Helm"
    shard = one(objs, "Deployment", "helm-controller-shard0")
    assert shard["metadata"]["labels"]["app.kubernetes.io/part-of"] == "flux", "a shard runs flux's helm-controller"
    assert shard["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == NS
    for component in COMPONENTS:
        labels = pod_of(objs, component)["metadata"]["labels"]
        assert [k for k in RECOMMENDED if k not in labels] == [], component
        assert labels["app.kubernetes.io/component"] == component
        # The selector stays the one earlier releases had: Deployment selectors are immutable.
        selector = one(objs, "Deployment", f"cozy-autoscaling-{component}")["spec"]["selector"]
        assert selector == {"matchLabels": {"app.kubernetes.io/name": f"cozy-autoscaling-{component}"}}


@pytest.mark.parametrize("component", COMPONENTS)
def test_pod_knobs_reach_each_component(helm, component):
    key = COMPONENTS[component]
    knobs = {"nodeSelector": {"pool": "system"}, "tolerations": [{"key": "system", "operator": "Exists"}],
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                 {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
             "priorityClassName": "system-cluster-critical", "imagePullSecrets": [{"name": "regcred"}],
             "podLabels": {"team": "dba"}, "podAnnotations": {"example.com/scrape": "no"},
             "extraEnv": [{"name": "SSL_CERT_FILE", "value": "/ca/ca.crt"}],
             "extraVolumes": [{"name": "ca", "configMap": {"name": "private-ca"}}],
             "extraVolumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": True}], "logLevel": "debug"}
    objs = render(helm, values={key: knobs})
    template = pod_of(objs, component)
    pod = template["spec"]
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        assert pod[field] == knobs[field], field
    assert template["metadata"]["labels"]["team"] == "dba"
    assert template["metadata"]["annotations"] == knobs["podAnnotations"]
    [c] = pod["containers"]
    assert {"name": "SSL_CERT_FILE", "value": "/ca/ca.crt"} in c["env"]
    assert knobs["extraVolumes"][0] in pod["volumes"] and knobs["extraVolumeMounts"][0] in c["volumeMounts"]
    assert "--log-level=debug" in c["args"]
    # What the component needs is kept beside the extras.
    if component != "shard-controller":
        assert any(v["name"] == "tls" for v in pod["volumes"])
    if component == "scaler":  # its Events name the replica; mimalloc returns freed pages at once
        assert any(e["name"] == "POD_NAME" for e in c["env"])
        assert {"name": "MIMALLOC_PURGE_DELAY", "value": "0"} in c["env"]
        assert {"name": "MIMALLOC_ARENA_EAGER_COMMIT", "value": "0"} in c["env"]
    elif component == "shard-controller":
        assert {e["name"] for e in c["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    defaults = pod_of(render(helm), component)["spec"]
    assert not {"nodeSelector", "tolerations", "priorityClassName", "imagePullSecrets"} & set(defaults)


def test_scaler_keeps_its_spread_unless_affinity_is_given(helm):
    default = pod_of(render(helm), "scaler")["spec"]["affinity"]
    assert default["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"
    mine = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone",
         "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "cozy-autoscaling-scaler"}}}]}}
    assert pod_of(render(helm, values={"scaler": {"affinity": mine}}), "scaler")["spec"]["affinity"] == mine


def test_image_digest_pins_every_component(helm):
    digest = "sha256:" + "a" * 64
    objs = render(helm, [f"image.digest={digest}"])
    for component in COMPONENTS:
        assert pod_of(objs, component)["spec"]["containers"][0]["image"] == f"ghcr.io/cozystack/cozy-autoscaling@{digest}"
    bad = helm.template(PACKAGE, ["image.digest=latest"], keda=False)
    assert bad.returncode != 0 and "digest" in bad.stderr


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_pdb_only_with_two_or_more_replicas(helm, component):
    key = COMPONENTS[component]
    name = f"cozy-autoscaling-{component}"
    assert one(render(helm), "PodDisruptionBudget", name)
    single = render(helm, [f"{key}.replicas=1"])
    assert one(single, "Deployment", name)["spec"]["replicas"] == 1
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == name]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "VMServiceScrape"])
def test_scrape_objects_take_labels_and_intervals(helm, kind):
    objs = render(helm, [f"monitoring.scrape={kind}", "monitoring.scrapeLabels.release=kps",
                         "monitoring.scrapeInterval=30s", "monitoring.scrapeTimeout=10s"])
    scrapes = [o for o in objs if o["kind"] == kind]
    assert len(scrapes) == 3
    for o in scrapes:
        assert o["metadata"]["labels"]["release"] == "kps"
        [ep] = o["spec"]["endpoints"]
        assert ep == {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "30s",
                      "scrapeTimeout": "10s"}
    for o in render(helm, [f"monitoring.scrape={kind}"]):
        if o["kind"] == kind:
            assert o["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "honorLabels": True}]


@pytest.mark.parametrize("key", ["foo=1", "scaler.replica=3", "scaler.tls.enable=true", "webhook.logleve=debug",
                                 "shardController.graceful=1m", "shards.counts=2", "image.tags=x",
                                 "monitoring.alerts.label.release=x", "monitoring.dashboard.enable=true",
                                 "networkPolicy.scraperNamespaceSelector.matchLabel.a=b", "keda.ns=x",
                                 "scaler.resources.limit.cpu=1", "scaler.affinity.podAntiAfinity.x=1",
                                 "tenantAccess.enable=false"])
def test_unknown_keys_are_refused_at_every_level(helm, key):
    out = helm.template(PACKAGE, [key], keda=False)
    assert out.returncode != 0, key
    # Both Helms' validators name the unknown key (helm 3: "Additional property x is not allowed",
    # helm 4: "additional properties 'x' not allowed").
    unknown = key.split("=")[0].split(".")
    assert "additional propert" in out.stderr.lower() and any(
        f" {part} " in out.stderr or f"'{part}'" in out.stderr for part in unknown), out.stderr


def test_every_object_schema_is_closed():
    """Walks values.schema.json: every object schema lists what it allows (additionalProperties
    false or a value schema), so no level silently takes a typo."""
    schema = json.loads((PACKAGE / "values.schema.json").read_text())
    open_objects = []

    def walk(node, path, kubernetes=False):
        if isinstance(node, dict):
            # Below the top level of a Kubernetes type (affinity, tolerations, env, volumes), the
            # API server checks the fields; the schema says so in a $comment.
            kubernetes = kubernetes or node.get("$comment", "").startswith("A Kubernetes type")
            if node.get("type") == "object" and "additionalProperties" not in node and not kubernetes:
                open_objects.append(path)
            for k, v in node.items():
                walk(v, f"{path}/{k}", kubernetes)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}", kubernetes)

    walk(schema, "")
    assert not open_objects, open_objects


def test_tenant_users_can_read_their_autoscaling(helm):
    role = one(render(helm), "ClusterRole", "cozy-autoscaling-tenant-view")
    labels = role["metadata"]["labels"]
    for verb in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{verb}"] == "true"
    assert role["rules"] == [
        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects", "scaledobjects/status"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
         "verbs": ["get", "list", "watch"]}]
    assert not [o for o in render(helm, ["tenantAccess.enabled=false"]) if o["metadata"]["name"] == "cozy-autoscaling-tenant-view"]
