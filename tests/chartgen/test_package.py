"""The cozy-autoscaling package chart rendered by helm 3 and helm 4: every object schema-valid,
and the scaler, webhook and shard pieces shaped as the contracts require."""
import shutil
import tomllib

import pytest
import yaml

from conftest import EXAMPLE, FLUX_FIXTURE, PACKAGE, REPO, chartgen, docs, one
from validate import validate

NS = "cozy-autoscaling"


def render(helm, sets=()):
    return render_chart(helm, PACKAGE, sets)


def render_chart(helm, chart, sets=()):
    return helm.render(chart, sets, keda=False, release=NS, namespace=NS)


def test_scaler_deployment_service_pdb_and_rbac(helm):
    objs = render(helm)
    dep = one(objs, "Deployment", "cozy-autoscaling-scaler")
    assert dep["spec"]["replicas"] == 2
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][0] == "serve"
    assert "--listen=0.0.0.0:6000" in c["args"] and "--admin-listen=0.0.0.0:9090" in c["args"]
    assert any(a.startswith("--prometheus-url=http") for a in c["args"])
    # mTLS by default: served from the Certificate's Secret; clients must chain to KEDA's client CA
    # (read from KEDA's Secret through the API) and be named keda-operator.
    for a in ["--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key",
              "--tls-client-ca-secret=cozy-keda/cozy-autoscaling-keda-client", "--tls-client-identity=keda-operator"]:
        assert a in c["args"]
    assert not any(a.startswith("--tls-client-ca=") for a in c["args"])
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert one(objs, "PodDisruptionBudget", "cozy-autoscaling-scaler")["spec"]["minAvailable"] == 1
    svc = one(objs, "Service", "cozy-autoscaling-scaler")
    assert {p["port"] for p in svc["spec"]["ports"]} == {6000, 9090} and "clusterIP" not in svc["spec"]
    role = one(objs, "ClusterRole", "cozy-autoscaling-scaler")
    assert role["rules"] == [{"apiGroups": ["postgresql.cnpg.io"], "resources": ["clusters"],
                              "verbs": ["get", "list", "watch"]},
                             {"apiGroups": ["databases.spotahome.com"], "resources": ["redisfailovers"],
                              "verbs": ["get", "list", "watch"]},
                             {"apiGroups": [""], "resources": ["resourcequotas"],
                              "verbs": ["get", "list", "watch"]},
                             # Events on ScaledObjects: the uid, then create, patch on repeats;
                             # the warm start lists them once.
                             {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"],
                              "verbs": ["get", "list"]},
                             {"apiGroups": ["events.k8s.io"], "resources": ["events"],
                              "verbs": ["create", "patch"]}]
    binding = one(objs, "ClusterRoleBinding", "cozy-autoscaling-scaler")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cozy-autoscaling-scaler", "namespace": NS}]


def test_observe_batch_size_reaches_the_scaler_within_its_range(helm):
    args = lambda objs: one(objs, "Deployment", "cozy-autoscaling-scaler")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--observe-batch-size=100" in args(render(helm))
    assert "--observe-batch-size=250" in args(render(helm, ["scaler.observeBatchSize=250"]))
    for bad in ("0", "1001"):
        out = helm.template(PACKAGE, [f"scaler.observeBatchSize={bad}"], keda=False)
        assert out.returncode != 0 and "observeBatchSize" in out.stderr, bad


def test_scaler_tls_and_headless(helm):
    objs = render(helm, ["scaler.headless=true", "clusterDomain=cozy.local"])
    cert = one(objs, "Certificate", "cozy-autoscaling-scaler")
    svc = "cozy-autoscaling-scaler"
    assert cert["spec"]["dnsNames"] == [svc, f"{svc}.{NS}", f"{svc}.{NS}.svc", f"{svc}.{NS}.svc.cozy.local"]
    dep = one(objs, "Deployment", svc)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--tls-cert=/tls/tls.crt" in c["args"] and "--tls-key=/tls/tls.key" in c["args"]
    assert dep["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == cert["spec"]["secretName"]
    assert one(objs, "Service", svc)["spec"]["clusterIP"] == "None"


def test_webhook_and_mutating_configuration(helm):
    objs = render(helm, ["shards.count=3"])
    dep = one(objs, "Deployment", "cozy-autoscaling-webhook")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "webhook"
    for a in ["--listen=0.0.0.0:9443", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--shards=3",
              "--flux-namespace=cozy-fluxcd"]:
        assert a in args
    svc = one(objs, "Service", "cozy-autoscaling-webhook")
    assert {"name": "https", "port": 443, "targetPort": "https"} in svc["spec"]["ports"]
    assert {"name": "https", "containerPort": 9443} in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    mwc = one(objs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/cozy-autoscaling-webhook"
    [wh] = mwc["webhooks"]
    assert (wh["failurePolicy"], wh["timeoutSeconds"], wh["sideEffects"]) == ("Ignore", 5, "NoneOnDryRun")
    assert wh["rules"] == [{"apiGroups": ["helm.toolkit.fluxcd.io"], "apiVersions": ["v2"],
                            "resources": ["helmreleases"], "operations": ["CREATE"]}]
    assert wh["objectSelector"] == {"matchExpressions": [
        {"key": "sharding.fluxcd.io/key", "operator": "In", "values": ["tenants"]}]}
    assert "namespaceSelector" not in wh
    assert wh["clientConfig"]["service"]["path"] == "/mutate-helmrelease-shard"
    cert = one(objs, "Certificate", "cozy-autoscaling-webhook")
    assert cert["spec"]["dnsNames"][2] == f"cozy-autoscaling-webhook.{NS}.svc"
    cluster_rules = one(objs, "ClusterRole", "cozy-autoscaling-webhook")["rules"]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "patch"]} in cluster_rules
    role = one(objs, "Role", "cozy-autoscaling-webhook")
    assert role["metadata"]["namespace"] == "cozy-fluxcd"
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}]


def test_shards_follow_the_count(helm):
    objs = render(helm, ["shards.count=3", "shards.concurrent=8", "flux.namespace=flux-system"])
    shards = sorted((o for o in objs if o["metadata"]["name"].startswith("helm-controller-shard")),
                    key=lambda o: o["metadata"]["name"])
    assert [s["metadata"]["name"] for s in shards] == [f"helm-controller-shard{i}" for i in range(3)]
    for i, s in enumerate(shards):
        assert s["metadata"]["namespace"] == "flux-system"
        assert s["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": f"helm-controller-shard{i}"}
        pod = s["spec"]["template"]["spec"]
        [c] = pod["containers"]
        assert f"--watch-label-selector=sharding.fluxcd.io/key=shard{i}" in c["args"]
        assert "--concurrent=8" in c["args"]
        assert c["image"] == "ghcr.io/fluxcd/helm-controller:v1.5.0"
        assert {"name": "SOURCE_CONTROLLER_LOCALHOST", "value": "flux.flux-system.svc:80"} in c["env"]
        assert pod["hostNetwork"] is False and pod["dnsPolicy"] == "ClusterFirst"


def test_chart_shards_equal_what_chartgen_shards_builds(helm, tmp_path):
    """The chart's Helm range over the sanitised data and `chartgen shards` fill the same slots: for a
    flux-aio variant with two-token flags, proxies and a reordered pod, every shard Deployment the
    chart renders is the one the shards command prints (plus the package's instance, component,
    managed-by and chart labels)."""
    flux = yaml.safe_load(FLUX_FIXTURE.read_text())
    pod = flux["spec"]["template"]["spec"]
    pod["containers"].reverse()
    hc = next(c for c in pod["containers"] if c["name"] == "helm-controller")
    hc["args"] = ["--log-level=debug", "--concurrent", "12", "--watch-all-namespaces",
                  "--watch-label-selector", "!sharding.fluxcd.io/key", "--events-addr=http://localhost:9690"]
    hc["env"] += [{"name": "https_proxy", "value": "http://proxy:3128"}, {"name": "EXTRA", "value": "kept"}]
    variant = tmp_path / "flux.yaml"
    variant.write_text(yaml.safe_dump(flux))
    charts = tmp_path / "charts"
    shutil.copytree(PACKAGE, charts / PACKAGE.name)
    out = chartgen("package", "--out", charts, "--flux-deployment", variant)
    assert out.returncode == 0, out.stderr
    sets = ["shards.count=3", "shards.concurrent=9", "flux.namespace=flux-system"]
    rendered = sorted((o for o in render_chart(helm, charts / PACKAGE.name, sets)
                       if o["metadata"]["name"].startswith("helm-controller-shard")),
                      key=lambda o: o["metadata"]["name"])
    out = chartgen("shards", "--flux-deployment", variant, "--count", "3", "--concurrent", "9",
                   "--flux-namespace", "flux-system", "--source-controller-address", "flux.flux-system.svc:80")
    assert out.returncode == 0, out.stderr
    expected = docs(out.stdout)
    version = yaml.safe_load((PACKAGE / "Chart.yaml").read_text())["version"]
    package_labels = {"app.kubernetes.io/instance": NS, "app.kubernetes.io/component": "helm-controller-shard"}
    for d in expected:
        d["metadata"]["labels"].update({**package_labels, "app.kubernetes.io/managed-by": "Helm",
                                        "helm.sh/chart": f"cozy-autoscaling-{version}"})
        d["spec"]["template"]["metadata"]["labels"].update(package_labels)
    assert rendered == expected
    args = rendered[2]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--log-level=debug", "--concurrent=9", "--watch-all-namespaces",
                    "--watch-label-selector=sharding.fluxcd.io/key=shard2"]


def test_chart_is_plain_helm_and_its_generated_parts_are_guarded(tmp_path):
    """The package chart has no minijinja; chartgen writes only the version and the shard data,
    and --check notices when the shard data was edited by hand."""
    for path in PACKAGE.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not any(d in text for d in ("[[", "[%", "[#")), f"{path} holds minijinja"
    assert not (REPO / "templates" / "package" / "chart").exists(), "the chart has one source"
    charts = tmp_path / "charts"
    shutil.copytree(PACKAGE.parent, charts, ignore=shutil.ignore_patterns("example-postgres"))
    data = charts / PACKAGE.name / "files/flux-shard.yaml"
    data.write_text(data.read_text().replace("--concurrent", "--concurrent=1"))
    out = chartgen("package", "--out", charts, "--check")
    assert out.returncode == 1 and "flux-shard.yaml" in out.stderr


def test_a_chart_without_its_shard_data_fails_clearly(helm, tmp_path):
    chart = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, chart)
    (chart / "files/flux-shard.yaml").unlink()
    out = helm.template(chart, keda=False)
    assert out.returncode != 0 and "run chartgen package" in out.stderr


@pytest.mark.parametrize("scrape,kind", [("ServiceMonitor", "ServiceMonitor"), ("VMServiceScrape", "VMServiceScrape"),
                                         ("none", None)])
def test_scrape_kind_is_selectable(helm, scrape, kind):
    objs = render(helm, [f"monitoring.scrape={scrape}"])
    kinds = {o["kind"] for o in objs}
    assert not ({"ServiceMonitor", "VMServiceScrape"} - {kind}) & kinds
    if kind:
        names = sorted(o["metadata"]["name"] for o in objs if o["kind"] == kind)
        assert names == ["cozy-autoscaling-scaler", "cozy-autoscaling-shard-controller", "cozy-autoscaling-webhook"]


def test_alerts_use_the_scaler_and_hpa_metrics(helm):
    rule = one(render(helm), "PrometheusRule", "cozy-autoscaling")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {"CozyAutoscalerScalerAbsent", "CozyAutoscalerScalerErrors", "CozyAutoscalerScaleUpStuck",
                          "CozyAutoscalerPinnedAtMax", "CozyAutoscalerConvergenceHeld", "CozyAutoscalerQuotaCapped",
                          "CozyAutoscalerBrakeHeld"}
    assert f'namespace="{NS}"' in rules["CozyAutoscalerScalerAbsent"]["expr"]
    assert "scaler_decision_convergence_backoff" in rules["CozyAutoscalerConvergenceHeld"]["expr"]
    assert "scaler_decision_reason{reason=\"quota\"}" in rules["CozyAutoscalerQuotaCapped"]["expr"]
    assert "scaler_backend_queries_total" in rules["CozyAutoscalerScalerErrors"]["expr"]
    assert "scaler_decision_reason{reason=\"max\"}" in rules["CozyAutoscalerPinnedAtMax"]["expr"]
    assert "{{ $labels.pod }}" in rules["CozyAutoscalerScalerErrors"]["annotations"]["description"]
    assert not [o for o in render(helm, ["monitoring.alerts.enabled=false"]) if o["kind"] == "PrometheusRule"]


def test_webhook_can_be_disabled(helm):
    objs = render(helm, ["webhook.enabled=false"])
    kinds = {o["kind"] for o in objs}
    assert "MutatingWebhookConfiguration" not in kinds
    # Only the scaler's mTLS PKI is left, none of the webhook's.
    assert not [o for o in objs if "webhook" in o["metadata"]["name"] or o["metadata"]["name"] in (
        "cozy-autoscaling-ca", "cozy-autoscaling-selfsigned")]


def test_shard_count_below_one_is_refused(helm):
    out = helm.template(PACKAGE, ["shards.count=0"], keda=False)
    assert out.returncode != 0 and "count" in out.stderr


def test_tenant_helmrelease_example_ignores_the_hpa_owned_count(helm):
    """The documented tenant HelmRelease is a valid Flux object whose drift detection leaves the
    Cluster's instance count to the HPA, and its values render with the example app chart."""
    [hr] = [d for d in yaml.safe_load_all((PACKAGE / "examples/tenant-helmrelease.yaml").read_text()) if d]
    validate(hr)
    drift = hr["spec"]["driftDetection"]
    assert drift["mode"] == "enabled"
    assert {"paths": ["/spec/instances"], "target": {"group": "postgresql.cnpg.io", "kind": "Cluster"}} in drift["ignore"]
    values = hr["spec"]["values"]
    sets = [f"replicas={values['replicas']}"] + [
        f"autoscaling.{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in values["autoscaling"].items()]
    objs = helm.render(EXAMPLE, sets)
    assert one(objs, "Cluster")["spec"]["instances"] == 3


def container_port(container, name):
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def arg_port(container, flag):
    [value] = [a.split("=", 1)[1] for a in container["args"] if a.startswith(f"{flag}=")]
    return int(value.rsplit(":", 1)[1])


@pytest.mark.parametrize("component,serving_port", [("scaler", "grpc"), ("webhook", "https"),
                                                    ("shard-controller", None)])
def test_pods_are_hardened_and_probe_what_the_binary_serves(helm, component, serving_port):
    objs = render(helm)
    name = f"cozy-autoscaling-{component}"
    pod = one(objs, "Deployment", name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [c] = pod["containers"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert set(c["resources"]["requests"]) == {"cpu", "memory"}
    # No CPU limit on purpose: CFS throttling would push answers past KEDA's deadline (docs/image.md).
    assert set(c["resources"]["limits"]) == {"memory"}
    # Probes hit the admin server, on the port the binary is told to listen on.
    assert arg_port(c, "--admin-listen") == container_port(c, "admin")
    if serving_port:
        assert arg_port(c, "--listen") == container_port(c, serving_port)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    declared = {p["name"] for p in c["ports"]}
    svc = one(objs, "Service", name)
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= declared


def test_image_is_the_one_this_commit_builds(helm):
    chart = yaml.safe_load((PACKAGE / "Chart.yaml").read_text())
    crate = tomllib.loads((REPO / "cli/Cargo.toml").read_text())["package"]["version"]
    assert chart["appVersion"] == chart["version"] == crate
    for objs, tag in [(render(helm), crate), (render(helm, ["image.tag=0.0.0-dev"]), "0.0.0-dev")]:
        images = {c["image"] for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].startswith(NS)
                  for c in o["spec"]["template"]["spec"]["containers"]}
        assert images == {f"ghcr.io/cozystack/cozy-autoscaling:{tag}"}


def test_helm_package_builds_an_archive_that_lints(helm, tmp_path):
    out = helm.run("package", PACKAGE, "-d", tmp_path)
    assert out.returncode == 0, out.stderr
    version = yaml.safe_load((PACKAGE / "Chart.yaml").read_text())["version"]
    archive = tmp_path / f"cozy-autoscaling-{version}.tgz"
    assert archive.is_file()
    lint = helm.run("lint", "--strict", archive)
    assert lint.returncode == 0, lint.stdout + lint.stderr


SCALER = "cozy-autoscaling-scaler"
CLIENT = "cozy-autoscaling-keda-client"


def test_mtls_objects_link_keda_to_the_scaler(helm):
    """The server CA (a ClusterIssuer, its Secret in cert-manager's namespace) signs the scaler's
    serving certificate here and a CA bundle for KEDA in KEDA's namespace; the client CA is an
    Issuer in KEDA's namespace only, signing KEDA's client certificate; the scaler reads that
    Secret's ca.crt (a Role on that one Secret) and accepts only keda-operator; the
    ClusterTriggerAuthentication hands KEDA the server CA and its client pair."""
    objs = render(helm, ["keda.namespace=keda-system", "certManager.namespace=cm",
                         "scaler.tls.clientIdentities={keda-operator,spiffe://c/ns/keda-system/sa/keda}"])
    ca = one(objs, "Certificate", "cozy-autoscaling-scaler-ca")
    assert ca["metadata"]["namespace"] == "cm" and ca["spec"]["isCA"] is True
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert one(objs, "Issuer", "cozy-autoscaling-scaler-selfsigned")["metadata"]["namespace"] == "cm"
    issuer = one(objs, "ClusterIssuer", "cozy-autoscaling-scaler-ca")
    assert issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    by_server_ca = {"name": "cozy-autoscaling-scaler-ca", "kind": "ClusterIssuer"}

    server = one(objs, "Certificate", SCALER)
    assert "namespace" not in server["metadata"]  # the release namespace, where the pods mount it
    assert server["spec"]["issuerRef"] == by_server_ca
    assert server["spec"]["usages"] == ["server auth", "digital signature"]
    assert server["spec"]["privateKey"]["rotationPolicy"] == "Always"
    pod = one(objs, "Deployment", SCALER)["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "tls", "secret": {"secretName": server["spec"]["secretName"]}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "tls", "mountPath": "/tls", "readOnly": True}]
    bundle = one(objs, "Certificate", "cozy-autoscaling-scaler-ca-bundle")
    assert bundle["metadata"]["namespace"] == "keda-system" and bundle["spec"]["issuerRef"] == by_server_ca
    assert "client auth" not in bundle["spec"]["usages"]

    # The client CA: every piece namespaced in KEDA's namespace, no ClusterIssuer.
    client_ca = one(objs, "Certificate", "cozy-autoscaling-keda-client-ca")
    assert client_ca["metadata"]["namespace"] == "keda-system" and client_ca["spec"]["isCA"] is True
    assert client_ca["spec"]["issuerRef"] == {"name": "cozy-autoscaling-keda-client-selfsigned", "kind": "Issuer"}
    assert one(objs, "Issuer", "cozy-autoscaling-keda-client-selfsigned")["metadata"]["namespace"] == "keda-system"
    client_issuer = one(objs, "Issuer", "cozy-autoscaling-keda-client-ca")
    assert client_issuer["metadata"]["namespace"] == "keda-system"
    assert client_issuer["spec"] == {"ca": {"secretName": client_ca["spec"]["secretName"]}}
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterIssuer"] == ["cozy-autoscaling-scaler-ca"]

    client = one(objs, "Certificate", CLIENT)
    assert client["metadata"]["namespace"] == "keda-system"
    assert client["spec"]["issuerRef"] == {"name": "cozy-autoscaling-keda-client-ca", "kind": "Issuer"}
    assert client["spec"]["usages"] == ["client auth", "digital signature"]
    assert "dnsNames" not in client["spec"] and client["spec"]["commonName"] == "keda-operator"

    args = pod["containers"][0]["args"]
    assert f"--tls-client-ca-secret=keda-system/{client['spec']['secretName']}" in args
    assert "--tls-client-identity=keda-operator,spiffe://c/ns/keda-system/sa/keda" in args
    role = one(objs, "Role", "cozy-autoscaling-scaler-client-ca")
    assert role["metadata"]["namespace"] == "keda-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [client["spec"]["secretName"]], "verbs": ["get", "list", "watch"]}]
    binding = one(objs, "RoleBinding", "cozy-autoscaling-scaler-client-ca")
    assert binding["metadata"]["namespace"] == "keda-system"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SCALER, "namespace": NS}]

    auth = one(objs, "ClusterTriggerAuthentication", SCALER)
    assert "namespace" not in auth["metadata"]
    assert auth["spec"] == {"secretTargetRef": [
        {"parameter": "caCert", "name": bundle["spec"]["secretName"], "key": "ca.crt"},
        {"parameter": "tlsClientCert", "name": client["spec"]["secretName"], "key": "tls.crt"},
        {"parameter": "tlsClientKey", "name": client["spec"]["secretName"], "key": "tls.key"}]}
    # An identity with a comma would split into two on the flag: refused by the schema.
    out = helm.template(PACKAGE, ["scaler.tls.clientIdentities={a\\,b}"], keda=False)
    assert out.returncode != 0 and "clientIdentities" in out.stderr


def test_mtls_off_is_an_explicit_choice(helm):
    objs = render(helm, ["scaler.tls.enabled=false"])
    c = one(objs, "Deployment", SCALER)["spec"]["template"]["spec"]["containers"][0]
    assert not any(a.startswith("--tls-") for a in c["args"]) and "volumeMounts" not in c
    assert not [o for o in objs if o["kind"] in ("ClusterIssuer", "ClusterTriggerAuthentication")
                or o["metadata"]["name"].startswith(("cozy-autoscaling-scaler-", CLIENT))]
    # The NetworkPolicy still keeps everyone but KEDA off the gRPC port.
    assert one(objs, "NetworkPolicy", SCALER)
    out = helm.template(PACKAGE, ["scaler.tls.enabled=maybe"], keda=False)
    assert out.returncode != 0 and "enabled" in out.stderr


def test_app_chart_defaults_reach_the_secured_scaler(helm):
    """An app chart made by `chartgen app` works with the default package unedited: its
    authenticationRef names the package's ClusterTriggerAuthentication and the host of its
    scalerAddress is one of the names in the scaler's certificate."""
    package = render(helm)
    auth = one(package, "ClusterTriggerAuthentication")
    dns = one(package, "Certificate", SCALER)["spec"]["dnsNames"]
    app = helm.render(EXAMPLE, ["autoscaling.enabled=true", "replicas=2"])
    [trigger] = one(app, "ScaledObject")["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"kind": "ClusterTriggerAuthentication",
                                            "name": auth["metadata"]["name"]}
    assert trigger["metadata"]["scalerAddress"].rsplit(":", 1)[0] in dns
    # A plaintext package: the app chart drops the reference when told to.
    plain = helm.render(EXAMPLE, ["autoscaling.enabled=true", "replicas=2",
                                  "autoscaling.clusterTriggerAuthentication="])
    assert "authenticationRef" not in one(plain, "ScaledObject")["spec"]["triggers"][0]
    bad = helm.template(EXAMPLE, ["autoscaling.enabled=true", "replicas=2",
                                  "autoscaling.clusterTriggerAuthentication=Not_A_Name"])
    assert bad.returncode != 0 and "clusterTriggerAuthentication" in bad.stderr


def ingress_rules(objs, name):
    policy = one(objs, "NetworkPolicy", name)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    return policy["spec"]["ingress"]


def named(ns):
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}


def test_network_policies_admit_only_keda_the_scraper_and_the_api_server(helm):
    objs = render(helm, ["keda.namespace=keda-system"])
    grpc = {"port": "grpc", "protocol": "TCP"}
    admin = {"port": "admin", "protocol": "TCP"}
    https = {"port": "https", "protocol": "TCP"}
    assert ingress_rules(objs, SCALER) == [{"from": [named("keda-system")], "ports": [grpc]},
                                           {"from": [named("cozy-monitoring")], "ports": [admin]}]
    # The named ports exist on the pods the policies select.
    ports = {p["name"] for p in one(objs, "Deployment", SCALER)["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {"grpc", "admin"} <= ports
    webhook = "cozy-autoscaling-webhook"
    # No API server CIDRs given: the webhook port is open (only it), admin only to the scraper.
    assert ingress_rules(objs, webhook) == [{"ports": [https]},
                                            {"from": [named("cozy-monitoring")], "ports": [admin]}]
    pinned = render(helm, ["networkPolicy.apiServerCIDRs={10.0.0.10/32,10.0.1.0/24}",
                           "networkPolicy.scraperNamespaceSelector.matchLabels.team=obs"])
    assert ingress_rules(pinned, webhook)[0] == {"ports": [https], "from": [
        {"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "10.0.1.0/24"}}]}
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cozy-monitoring",
                                                     "team": "obs"}}}
    assert ingress_rules(pinned, SCALER)[1]["from"] == [scraper]
    assert not [o for o in render(helm, ["networkPolicy.enabled=false"]) if o["kind"] == "NetworkPolicy"]
