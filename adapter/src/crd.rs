//! The `ScaleAdapter` API (`autoscaling.cozystack.io/v1alpha1`, namespaced): a `/scale`
//! subresource for a target that has none. The chart's CRD
//! (charts/cozy-autoscaling/crds/scaleadapters.yaml) is this derive's output; a test keeps the
//! two equal.
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the adapter drives: `spec.replicas` (the `/scale` subresource's, written by the HPA or
/// `kubectl scale`) is written into the target at `replicasPath`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.cozystack.io",
    version = "v1alpha1",
    kind = "ScaleAdapter",
    namespaced,
    status = "ScaleAdapterStatus",
    shortname = "sca",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.targetRef.name"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[?(@.type==\"Synced\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ScaleAdapterSpec {
    /// The object whose count is driven, in the adapter's own namespace (there is no namespace
    /// field: a target elsewhere cannot be named).
    pub target_ref: TargetRef,
    /// JSON pointer (RFC 6901) to the target's integer count, under `/spec`, object keys only:
    /// `/spec/redis/replicas`.
    #[schemars(
        length(min = 7, max = 256),
        regex(pattern = r"^/spec(/[A-Za-z0-9_-]+)+$")
    )]
    pub replicas_path: String,
    /// Desired count; written by the HPA or `kubectl scale`. Unset: nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// While true nothing is written to the target; status is still reported.
    #[serde(default)]
    pub paused: bool,
    /// Label selector of the target's pods, copied to `status.selector` for the HPA (which
    /// needs one): for a RedisFailover's Redis pods `app.kubernetes.io/component=redis,
    /// app.kubernetes.io/part-of=redis-failover,app.kubernetes.io/name=<name>`.
    #[schemars(length(min = 1, max = 1024))]
    pub selector: String,
}

/// The target, by apiVersion, kind and name.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// `group/version`, e.g. `databases.spotahome.com/v1`.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// e.g. `RedisFailover`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// A name in the adapter's namespace (a DNS-1123 subdomain: no `/`).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleAdapterStatus {
    /// The target's count as read at `replicasPath` (the HPA's current replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `spec.selector`, for the `/scale` subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the adapter last wrote the target (RFC 3339); the pacing survives a leader change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_write_time: Option<String>,
    /// `Synced`: True when the target holds `spec.replicas` (or nothing is asked); the reason
    /// says why not (TargetMissing, PathMissing, NotANumber, Forbidden, Paused, Paced, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A condition, as metav1.Condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    const CHART_CRD: &str = "../charts/cozy-autoscaling/crds/scaleadapters.yaml";

    /// The derived CRD as the chart carries it (regenerate with
    /// `cargo run -q -p adapter --example crd > charts/cozy-autoscaling/crds/scaleadapters.yaml`).
    #[test]
    fn the_chart_crd_is_the_derived_one() {
        let text = std::fs::read_to_string(CHART_CRD).unwrap();
        let chart: serde_json::Value = serde_norway::from_str(&text).unwrap();
        let derived = serde_json::to_value(ScaleAdapter::crd()).unwrap();
        assert!(
            chart == derived,
            "{CHART_CRD} differs from the derive: cargo run -q -p adapter --example crd > charts/cozy-autoscaling/crds/scaleadapters.yaml"
        );
    }

    #[test]
    fn the_scale_subresource_maps_spec_status_and_selector() {
        let crd = serde_json::to_value(ScaleAdapter::crd()).unwrap();
        let scale = &crd["spec"]["versions"][0]["subresources"]["scale"];
        assert_eq!(scale["specReplicasPath"], ".spec.replicas");
        assert_eq!(scale["statusReplicasPath"], ".status.replicas");
        assert_eq!(scale["labelSelectorPath"], ".status.selector");
        let target = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["targetRef"];
        assert!(target["properties"].get("namespace").is_none());
    }
}
