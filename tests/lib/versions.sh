# shellcheck shell=bash disable=SC2034 # the scripts that source it read them
# Upstream versions the tests pin: the end-to-end rig's components (each must match the require
# lines in tests/e2e/tools/*/go.mod; tests/e2e/setup.sh keys its build cache by these, so bump
# both together) and the modules whose CRDs and data files the suites read (tests/lib/upstream.sh).
ETCD_VERSION=v3.7.3
KUBE_VERSION=v1.37.2
KEDA_VERSION=v2.21.0
HELM_CONTROLLER_VERSION=v1.6.4
# CRDs only (helm-controller watches HelmChart, OCIRepository and ExternalArtifact kinds).
SOURCE_CONTROLLER_VERSION=v1.9.0
# CRDs (the Cluster with its scale subresource and labelSelectorPath) and default-monitoring.yaml.
CNPG_VERSION=v1.30.1
# CRD only (the RedisFailover, which declares no subresources; the ScaleAdapter drives it): the
# newest tag the module proxy serves (v1.3.0 is refused there). The operator itself is not run.
REDIS_OPERATOR_VERSION=v1.3.0-rc1
# The real node (tests/node): CoreDNS, the cluster's DNS pod, and the CloudNativePG operator with its
# own CRDs and manifests. v1.30.1 cannot be built from the module proxy (it refuses the zips of its
# dependencies machinery v0.6.0 and barman-cloud v0.6.0; docs/e2e.md, Real node): the operator is
# the newest v1.30.x it serves whole.
COREDNS_VERSION=v1.15.0
CNPG_OPERATOR_VERSION=v1.30.0
# cert-manager: its CRDs (both rigs) and, on the real node, its controller and cainjector built from
# this module with a main of ours (tests/node/tools/certmanager; its go.mod must require the same).
CERT_MANAGER_VERSION=v1.21.2
# CRDs only (the package's ServiceMonitor and PrometheusRule, validated by the chartgen suite): the
# newest release of the root module the module proxy lists.
PROMETHEUS_OPERATOR_VERSION=v0.85.0
