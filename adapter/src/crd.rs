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
    /// needs one). Unset: the pods' labels of a kind the controller knows (a RedisFailover's
    /// Redis pods, a CNPG Pooler's `cnpg.io/poolerName=<name>`); another kind needs it set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub selector: Option<String>,
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
    /// `spec.selector`, else the known pod labels of the target kind, for the `/scale`
    /// subresource.
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

/// Longest decode complaint reported (the field's path and serde's message, which can quote
/// a whole string value).
pub const DECODE_ERROR_MAX: usize = 256;

/// The adapter an object holds, decoded on its own: one object that does not decode (a string
/// where a number belongs) must not fail the list every adapter comes in. The error names the
/// field and is bounded, control characters escaped.
pub fn decode(object: &kube::api::DynamicObject) -> Result<ScaleAdapter, String> {
    let value = serde_json::to_value(object).map_err(|e| bounded(&e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        format!(
            "{} cannot be read: {}; fix the field",
            bounded(&e.path().to_string()),
            bounded(&e.inner().to_string())
        )
    })
}

/// `text` cut to [`DECODE_ERROR_MAX`] characters, control characters escaped.
fn bounded(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(DECODE_ERROR_MAX) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out
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

    fn object(spec: serde_json::Value) -> kube::api::DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.cozystack.io/v1alpha1", "kind": "ScaleAdapter",
            "metadata": {"name": "cache", "namespace": "tenant"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn an_object_decodes_on_its_own_and_a_bad_field_is_named_bounded() {
        let good = serde_json::json!({
            "targetRef": {"apiVersion": "databases.spotahome.com/v1", "kind": "RedisFailover", "name": "cache"},
            "replicasPath": "/spec/redis/replicas", "replicas": 3, "selector": "app=redis",
        });
        assert_eq!(
            decode(&object(good.clone())).unwrap().spec.replicas,
            Some(3)
        );
        let huge = format!("{}\n{}", "x".repeat(1 << 20), "forged line");
        for (field, value, names) in [
            ("replicas", serde_json::json!("three"), "spec.replicas"),
            ("replicas", serde_json::json!(1_u64 << 31), "spec.replicas"),
            ("paused", serde_json::json!(huge), "spec.paused"),
            (
                "targetRef",
                serde_json::json!({"kind": 1}),
                "spec.targetRef",
            ),
        ] {
            let mut spec = good.clone();
            spec[field] = value;
            let error = decode(&object(spec)).unwrap_err();
            assert!(error.starts_with(names), "{error}");
            assert!(error.len() < 2 * DECODE_ERROR_MAX, "{} bytes", error.len());
            assert!(!error.contains('\n'), "{error}");
        }
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
