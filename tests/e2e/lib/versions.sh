# Component versions of the end-to-end rig; each must match the require lines in tools/*/go.mod
# (setup.sh keys its cache by these, so bump both together).
ETCD_VERSION=v3.7.3
KUBE_VERSION=v1.37.2
KEDA_VERSION=v2.21.0
HELM_CONTROLLER_VERSION=v1.6.4
# CRDs only (helm-controller watches HelmChart, OCIRepository and ExternalArtifact kinds).
SOURCE_CONTROLLER_VERSION=v1.9.0
