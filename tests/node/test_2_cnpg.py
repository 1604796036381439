"""The real CloudNativePG operator on the node: a Cluster of real PostgreSQL pods streams to its
standby, scaling out clones a new standby with pg_basebackup, and CNPG's own webhook refuses an
instance count not above the synchronous stanza's `number`."""

from __future__ import annotations

import time

import pytest

from testkit import wait_until
from rig.cnpg import selector as stand_in_selector
from rig.kube import ApiError
from noderig.cnpg import CLUSTER as NAME, CLUSTER_NAMESPACE as NS, STORAGE_CLASS, sql



def cluster(image: str, instances: int) -> dict:
    return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"instances": instances, "imageName": image, "imagePullPolicy": "Never",
                     "enableSuperuserAccess": True,
                     # Synchronous replication to one standby (the `synchronous` stanza, CNPG >= 1.24;
                     # the legacy min/maxSyncReplicas may not stand beside it): the webhook's floor
                     # is 2 instances, and the scaler reads `number` as the quorum.
                     # checkpoint_timeout: CNPG clones a standby with pg_basebackup's default spread
                     # checkpoint, paced over PostgreSQL's checkpoint_timeout (5 min): under writes a
                     # clone waited 69-145 s for it (5 s idle). 30 s bounds that wait (docs/e2e.md).
                     "postgresql": {"synchronous": {"method": "any", "number": 1},
                                    "parameters": {"shared_buffers": "32MB", "max_connections": "40",
                                                   "checkpoint_timeout": "30s"}},
                     "storage": {"size": "1Gi", "storageClass": STORAGE_CLASS}}}


def status(kube) -> dict:
    return (kube.get("postgresql.cnpg.io/v1", "Cluster", NAME, NS) or {}).get("status", {})


def wait_ready(kube, instances: int, timeout: float) -> dict:
    def ready():
        s = status(kube)
        return s.get("readyInstances") == instances and s.get("phase") == "Cluster in healthy state" and s
    try:
        return wait_until(ready, timeout=timeout, interval=2, what=f"Cluster {NAME} with {instances} ready instances")
    except TimeoutError as e:
        pods = {p["metadata"]["name"]: p["status"].get("phase") for p in kube.list("v1", "Pod", NS)}
        s = status(kube)
        raise TimeoutError(f"{e}; phase {s.get('phase')!r} ({s.get('phaseReason')!r}), pods {pods}") from None


def streaming(kube) -> list[list[str]]:
    return sql(kube, "rw", "select application_name, state from pg_stat_replication order by 1")


def test_the_operator_runs_as_a_pod_with_its_webhooks(node, cnpg):
    [pod] = node.kube.list("v1", "Pod", "cnpg-system")
    assert pod["spec"]["containers"][0]["image"] == cnpg.image
    assert pod["status"]["phase"] == "Running"


def test_a_cluster_of_two_streams_to_a_standby(node, cnpg):
    kube = node.kube
    kube.ensure_namespace(NS)
    t = time.monotonic()
    kube.apply(cluster(cnpg.pg_image, 2))
    s = wait_ready(kube, 2, timeout=600)
    node.timings["Cluster 2 instances ready"] = time.monotonic() - t
    assert s["currentPrimary"] == f"{NAME}-1"
    # Instance pods only: the initdb and join Jobs' pods carry the cluster and instance labels too.
    roles = {p["metadata"]["name"]: p["metadata"]["labels"].get("cnpg.io/instanceRole")
             for p in kube.list("v1", "Pod", NS, selector=stand_in_selector(NAME))}
    assert roles == {f"{NAME}-1": "primary", f"{NAME}-2": "replica"}
    # What the HPA reads through /scale, as the e2e stand-in models it: a selector that matches
    # every instance, the primary included.
    scale = kube.get("postgresql.cnpg.io/v1", "Cluster", NAME, NS, sub="scale")
    assert scale["status"] == {"replicas": 2, "selector": stand_in_selector(NAME)}
    selected = kube.list("v1", "Pod", NS, selector=scale["status"]["selector"])
    assert sorted(p["metadata"]["name"] for p in selected) == [f"{NAME}-1", f"{NAME}-2"]
    wait_until(lambda: streaming(kube) == [[f"{NAME}-2", "streaming"]], timeout=60, interval=2,
               what="pg-2 streaming from the primary")
    assert sql(kube, "ro", "select pg_is_in_recovery()") == [["t"]]


def test_scaling_to_three_clones_a_new_standby(node, cnpg):
    kube = node.kube
    t = time.monotonic()
    kube.merge_patch("postgresql.cnpg.io/v1", "Cluster", NAME, {"spec": {"instances": 3}}, NS)
    wait_ready(kube, 3, timeout=600)
    node.timings["scale 2 -> 3: new standby ready"] = time.monotonic() - t
    wait_until(lambda: streaming(kube) == [[f"{NAME}-2", "streaming"], [f"{NAME}-3", "streaming"]],
               timeout=60, interval=2, what="pg-3 streaming from the primary")
    # The clone: CNPG's join Job ran pg_basebackup into the new instance's volume.
    claims = {c["metadata"]["name"]: c["status"]["phase"] for c in kube.list("v1", "PersistentVolumeClaim", NS)}
    assert claims == {f"{NAME}-1": "Bound", f"{NAME}-2": "Bound", f"{NAME}-3": "Bound"}


def test_the_webhook_refuses_instances_not_above_the_synchronous_number(node, cnpg):
    with pytest.raises(ApiError) as refused:
        node.kube.merge_patch("postgresql.cnpg.io/v1", "Cluster", NAME, {"spec": {"instances": 1}}, NS)
    assert ("the number of synchronous replicas must be less than the total number of instances"
            in str(refused.value)), refused.value
    assert "vcluster.cnpg.io" in str(refused.value)
    assert node.kube.get("postgresql.cnpg.io/v1", "Cluster", NAME, NS)["spec"]["instances"] == 3


def test_a_scale_subresource_write_below_the_floor_passes_the_webhook_and_wedges_the_cluster(node, cnpg):
    """The HPA writes through /scale, which CNPG's webhook rules (resource `clusters` only) do not
    cover: the write is admitted. The operator then validates the Cluster itself, finds it invalid
    and stops reconciling it (phase `Invalid cluster definition`, Ready=False): it neither reverts
    the count (no NoScaleDown) nor removes an instance, until the count is valid again."""
    kube = node.kube
    path = kube.path("postgresql.cnpg.io/v1", "Cluster", NS, NAME, "scale")
    scale = kube.request("PATCH", path, {"spec": {"replicas": 1}}, "application/merge-patch+json")
    assert scale["spec"]["replicas"] == 1  # admitted: no webhook refused it

    def invalid():
        s = status(kube)
        return s.get("phase") == "Invalid cluster definition" and s
    try:
        try:
            s = wait_until(invalid, timeout=180, interval=1, what="the operator marking the Cluster invalid")
        except TimeoutError as e:
            c = kube.get("postgresql.cnpg.io/v1", "Cluster", NAME, NS)
            raise TimeoutError(f"{e}; generation {c['metadata']['generation']}, spec.instances "
                               f"{c['spec']['instances']}, status {c.get('status')}") from None
        assert s["phaseReason"].startswith("the resource failed admission validation on: "
                                           "spec.postgresql.synchronous"), s["phaseReason"]
        assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "False"
        time.sleep(15)  # several reconcile periods: nothing moves
        assert kube.get("postgresql.cnpg.io/v1", "Cluster", NAME, NS)["spec"]["instances"] == 1
        instances = [p["metadata"]["name"] for p in kube.list("v1", "Pod", NS, selector=stand_in_selector(NAME))]
        assert sorted(instances) == [f"{NAME}-1", f"{NAME}-2", f"{NAME}-3"]
        assert not [e for e in kube.list("v1", "Event", NS) if e["reason"] in ("NoScaleDown", "ScaleDown")]
    finally:
        # A valid count again (the webhook admits 3), also when a check above failed, so the
        # suite's later tests find a Cluster the operator reconciles.
        kube.merge_patch("postgresql.cnpg.io/v1", "Cluster", NAME, {"spec": {"instances": 3}}, NS)
    # The operator reconciles the valid count and the Cluster is healthy.
    wait_ready(kube, 3, timeout=120)


# Every CNPG series the scaler's queries read (scaler-core/src/promql.rs); each must carry the
# `namespace` and `pod` labels its selectors and aggregations use.
SCALER_SERIES = ("cnpg_backends_total", "cnpg_pg_replication_in_recovery",
                 "cnpg_pg_replication_is_wal_receiver_up", "cnpg_pg_replication_lag",
                 "cnpg_pg_stat_replication_replay_diff_bytes", "cnpg_pg_settings_setting",
                 "cnpg_collector_wal_bytes")


def test_vmagent_scrapes_the_instances_with_the_pod_monitor_config(node, cnpg, metrics):
    """VictoriaMetrics' scraper (vmagent's) on the real instances' exporters with the job CNPG's
    PodMonitor produces: every series the scaler reads is there with the labels its queries assume,
    and the replicas are the pods in recovery."""
    vm = metrics
    pods = {f"{NAME}-1", f"{NAME}-2", f"{NAME}-3"}

    def scraped():
        up = {r["metric"]["pod"]: r["value"][1] for r in vm.query(f'up{{job="{NS}/{NAME}"}}')}
        return up == dict.fromkeys(pods, "1") and up
    wait_until(scraped, timeout=60, interval=1, what="VictoriaMetrics scraping the three instances")
    for metric in SCALER_SERIES:
        def present():
            return vm.query(f'{metric}{{namespace="{NS}",pod=~"{NAME}-[1-9][0-9]*"}}')
        series = wait_until(present, timeout=30, interval=1, what=f"{metric} scraped")
        for r in series:
            labels = r["metric"]
            assert labels["pod"] in pods and labels["container"] == "postgres", (metric, labels)
            assert labels["endpoint"] == "metrics" and labels["job"] == f"{NS}/{NAME}", (metric, labels)
    recovery = {r["metric"]["pod"]: r["value"][1]
                for r in vm.query(f'cnpg_pg_replication_in_recovery{{namespace="{NS}"}}')}
    assert recovery == {f"{NAME}-1": "0", f"{NAME}-2": "1", f"{NAME}-3": "1"}
    # The CPU signal: the kubelet's cAdvisor series with the labels the scaler's CPU query selects on.
    def cpu():
        found = vm.query(f'rate(container_cpu_usage_seconds_total{{namespace="{NS}",'
                         f'pod=~"{NAME}-[1-9][0-9]*",container="postgres"}}[30s])')
        return {r["metric"]["pod"] for r in found} == pods and found
    wait_until(cpu, timeout=60, interval=2, what="cAdvisor CPU series of the three postgres containers")
