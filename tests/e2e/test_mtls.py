"""Only KEDA's credentials open the scaler. A real gRPC client (grpcio) calls grpc.health.v1 on the
scaler the package wired, with the client certificate KEDA reads from the package's
ClusterTriggerAuthentication Secret, without one, with one from another CA, with KEDA's name from
the server CA (the ClusterIssuer anyone may use), with another name from KEDA's own CA, and in
plaintext; the scaler may read KEDA's client Secret and nothing else there; and
KEDA itself, given a ScaledObject without the authenticationRef, gets nothing. Last, KEDA comes back
by itself after its credentials change under it."""

import base64
import ssl
import time

import grpc
import pytest

from charts import example_chart
from helm import Helm
from rig import POLL, keda
import secured
from secured import NS, SCALER
from testkit import CA, wait_until

HEALTH = "/grpc.health.v1.Health/Check"
SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}


def keda_secret(rig) -> dict[str, bytes]:
    """The three values KEDA gets from the ClusterTriggerAuthentication, looked up as KEDA does."""
    auth = rig.kube.get("keda.sh/v1alpha1", "ClusterTriggerAuthentication", SCALER)
    out = {}
    for ref in auth["spec"]["secretTargetRef"]:
        secret = rig.kube.get("v1", "Secret", ref["name"], keda.NAMESPACE)
        out[ref["parameter"]] = base64.b64decode(secret["data"][ref["key"]])
    return out


def health(scaler, creds: grpc.ChannelCredentials | None):
    """The health answer, or the gRPC status code of the failure."""
    if creds is None:
        channel = grpc.insecure_channel(scaler.address)
    else:
        server_name = scaler.certificate(SCALER, NS)["dnsNames"][2]
        channel = grpc.secure_channel(scaler.address, creds,
                                      options=[("grpc.ssl_target_name_override", server_name)])
    try:
        return channel.unary_unary(HEALTH)(b"", timeout=3)
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


@pytest.fixture(scope="module")
def auth(rig, scaler):
    return keda_secret(rig)


def test_keda_credentials_are_accepted(scaler, auth):
    creds = grpc.ssl_channel_credentials(root_certificates=auth["caCert"], private_key=auth["tlsClientKey"],
                                         certificate_chain=auth["tlsClientCert"])
    assert health(scaler, creds) == SERVING


def test_a_client_without_a_certificate_is_refused(scaler, auth):
    creds = grpc.ssl_channel_credentials(root_certificates=auth["caCert"])
    assert health(scaler, creds) == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_refused(rig, scaler, auth):
    # Same name and usage as KEDA's, signed by a CA the scaler does not trust.
    rogue = CA(rig.dir / "rogue-pki", "rogue").issue("keda-operator", "keda-operator", client=True)
    creds = grpc.ssl_channel_credentials(root_certificates=auth["caCert"], private_key=rogue.key.read_bytes(),
                                         certificate_chain=rogue.cert.read_bytes())
    assert health(scaler, creds) == grpc.StatusCode.UNAVAILABLE


def client_creds(auth, pair) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=auth["caCert"], private_key=pair.key.read_bytes(),
                                        certificate_chain=pair.cert.read_bytes())


def test_kedas_name_from_the_server_ca_is_refused(scaler, auth):
    """The server CA is a ClusterIssuer anyone allowed to create a Certificate can use: a client
    certificate from it, even one naming keda-operator, is not KEDA's."""
    minted = scaler.server_ca.issue("minted-keda", "keda-operator", client=True)
    assert health(scaler, client_creds(auth, minted)) == grpc.StatusCode.UNAVAILABLE


def test_another_identity_from_kedas_client_ca_is_refused(scaler, auth):
    other = scaler.client_ca.issue("other-client", "tenant-app", client=True)
    assert health(scaler, client_creds(auth, other)) == grpc.StatusCode.UNAVAILABLE
    # The same CA and the accepted name get in: the refusal above is the identity's.
    keda_named = scaler.client_ca.issue("keda-named", "keda-operator", client=True)
    assert health(scaler, client_creds(auth, keda_named)) == SERVING


def as_scaler(rig, path: str) -> int:
    kube = rig.kube
    return kube.session.get(kube.server + path, verify=kube.ca, timeout=30,
                            headers={"Impersonate-User": secured.SERVICE_ACCOUNT}).status_code


def test_the_scaler_reads_kedas_client_secret_and_no_other(rig, scaler):
    """The scaler runs as its ServiceAccount (secured.py) and so already proves it may watch that
    Secret; here, that it may read nothing else in KEDA's namespace."""
    secrets = f"/api/v1/namespaces/{keda.NAMESPACE}/secrets"
    assert as_scaler(rig, f"{secrets}/{secured.KEDA_CLIENT}") == 200
    assert as_scaler(rig, f"{secrets}/cozy-autoscaling-keda-client-ca") == 403
    assert as_scaler(rig, secrets) == 403
    assert as_scaler(rig, f"/api/v1/namespaces/{secured.NS}/secrets") == 403


def test_plaintext_is_refused(scaler):
    assert health(scaler, None) == grpc.StatusCode.UNAVAILABLE


def test_keda_without_the_authentication_ref_gets_no_metrics(rig, scaler):
    """The same app chart with `clusterTriggerAuthentication: ""`: KEDA dials in plaintext and the
    ScaledObject never becomes Ready, while the scaler keeps serving the authenticated ones."""
    ns, name = "tenant-noauth", "pg"
    rig.kube.ensure_namespace(ns)
    rig.feeder.set(ns, name, connections=5, lag_seconds=0, wal_bytes_per_s=0)
    values = {"replicas": 2, "autoscaling": {"enabled": True, "scalerAddress": scaler.address,
                                             "clusterTriggerAuthentication": "", "maxReplicas": 4,
                                             "target": 10}}
    docs = Helm(rig.dir / "helm", kubeconfig=rig.cp.kubeconfig).render(
        example_chart(), release=name, namespace=ns, values=values)
    [so] = [d for d in docs if d["kind"] == "ScaledObject"]
    assert "authenticationRef" not in so["spec"]["triggers"][0]
    for d in docs:
        if d["kind"] in ("Cluster", "ScaledObject"):
            d["metadata"]["namespace"] = ns
            rig.kube.apply(d)

    def ready():
        got = rig.kube.get("keda.sh/v1alpha1", "ScaledObject", name, ns) or {}
        return next((c for c in got.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)

    condition = wait_until(lambda: (c := ready()) and c.get("status") == "False" and c,
                           timeout=60, interval=POLL, what="KEDA to report the ScaledObject not Ready")
    print(f"KEDA without the authenticationRef: {condition.get('reason')}: {condition.get('message')}")
    # No metric spec, no HPA (KEDA >= 2.20 defers the HPA until the scaler answers).
    assert rig.kube.get("autoscaling/v2", "HorizontalPodAutoscaler", f"keda-hpa-{name}", ns) is None
    rig.kube.delete("keda.sh/v1alpha1", "ScaledObject", name, ns)


def test_keda_rereads_its_credentials_after_a_failed_handshake(rig, scaler):
    """KEDA does not watch the Secret. Replace the CA on both sides (both Secrets, the scaler's
    volume): KEDA's established connection goes on; after a rollout its cached caCert no longer
    verifies the scaler, the poll fails, KEDA rebuilds the scaler from the Secret and calls again
    with the new credentials (the only ones the scaler now accepts). Runs last: it changes the CA."""
    before = scaler.served_certificate()
    new_server = ssl.PEM_cert_to_DER_cert(scaler.replace_ca().decode())
    wait_until(lambda: scaler.served_certificate() == new_server != before,
               timeout=15, interval=POLL, what="the scaler to serve the certificate of the new CA")
    calls = scaler.ok_requests()
    wait_until(lambda: scaler.ok_requests() >= calls + 2,
               timeout=30, interval=POLL, what="KEDA's calls to go on over its established connection")
    scaler.restart()
    start = time.monotonic()
    wait_until(lambda: scaler.ok_requests() > 0,
               timeout=90, interval=POLL, what="KEDA to call again with the renewed Secret")
    print(f"KEDA back with the new CA's credentials {time.monotonic() - start:.1f} s after the rollout")
    assert rig.kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "keda-hpa-pg", "tenant-loop")
