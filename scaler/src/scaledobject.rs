//! Which KEDA ScaledObjects are this scaler's, and what their trigger says (pure: JSON in).
//!
//! The rule, shared by `scaler status` and `scaler explain --scaled-object`: a ScaledObject is
//! ours when one of its `spec.triggers` has type `external` (or `external-push`) and a
//! `metadata.scalerAddress` whose host matches a `--scaler-address` value: equal to it, or
//! starting with it and a dot (so the Service's short, namespaced and cluster-local names all
//! match). A value with a port (`host:port`) must have that port too. The first such trigger is
//! the one read.
use std::collections::HashMap;

use serde_json::Value;

/// The package chart's scaler Service (charts/cozy-autoscaling/templates/scaler.yaml).
pub const DEFAULT_SCALER_ADDRESS: &str = "cozy-autoscaling-scaler";

/// `--scaler-address` values.
#[derive(Debug, Clone)]
pub struct AddressMatch(pub Vec<String>);

impl AddressMatch {
    pub fn matches(&self, address: &str) -> bool {
        let address = address.trim();
        self.0.iter().any(|want| match want.rsplit_once(':') {
            Some((want_host, want_port)) => address
                .rsplit_once(':')
                .is_some_and(|(host, port)| port == want_port && names(host, want_host)),
            None => names(host_of(address), want),
        })
    }
}

/// `host` is `want` or a longer DNS name of it (`svc` → `svc.ns`, `svc.ns.svc.cluster.local`).
fn names(host: &str, want: &str) -> bool {
    host == want
        || host
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// `host` of `host:port`.
fn host_of(address: &str) -> &str {
    match address.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => address,
    }
}

/// The trigger of a ScaledObject this scaler serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    pub address: String,
    /// Every metadata value that is a string (KEDA's are all strings).
    pub metadata: HashMap<String, String>,
}

/// The first trigger of `object` (a ScaledObject as JSON) that `rule` matches.
pub fn trigger(object: &Value, rule: &AddressMatch) -> Option<Trigger> {
    object
        .pointer("/spec/triggers")?
        .as_array()?
        .iter()
        .filter(|t| {
            matches!(
                t.get("type").and_then(Value::as_str),
                Some("external" | "external-push")
            )
        })
        .find_map(|t| {
            let metadata = t.get("metadata")?.as_object()?;
            let address = metadata.get("scalerAddress")?.as_str()?;
            rule.matches(address).then(|| Trigger {
                address: address.to_owned(),
                metadata: metadata
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect(),
            })
        })
}

/// The HPA KEDA made for `object`: `status.hpaName`, else the name KEDA gives it.
pub fn hpa_name(object: &Value, name: &str) -> String {
    object
        .pointer("/status/hpaName")
        .and_then(Value::as_str)
        .map_or_else(|| format!("keda-hpa-{name}"), str::to_owned)
}

/// KEDA's ScaledObject, for the dynamic API.
pub fn resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_address_rule_is_host_equal_or_a_longer_name_and_exact_with_a_port() {
        let rule = AddressMatch(vec![DEFAULT_SCALER_ADDRESS.into()]);
        for ok in [
            "cozy-autoscaling-scaler:6000",
            "cozy-autoscaling-scaler.cozy-autoscaling:6000",
            "cozy-autoscaling-scaler.cozy-autoscaling.svc.cluster.local:6000",
            "cozy-autoscaling-scaler",
        ] {
            assert!(rule.matches(ok), "{ok}");
        }
        for no in [
            "cozy-autoscaling-scaler2:6000",
            "other:6000",
            "x.cozy-autoscaling-scaler:6000",
            "",
        ] {
            assert!(!rule.matches(no), "{no}");
        }
        let port = AddressMatch(vec!["127.0.0.1:7000".into(), "svc:6000".into()]);
        assert!(port.matches("127.0.0.1:7000"));
        assert!(!port.matches("127.0.0.1:7001"));
        assert!(port.matches("svc.ns:6000"));
        assert!(!port.matches("svc.ns:6001"));
    }

    #[test]
    fn the_first_matching_external_trigger_is_read() {
        let rule = AddressMatch(vec!["s".into()]);
        let object = json!({"spec": {"triggers": [
            {"type": "cpu", "metadata": {"scalerAddress": "s:1"}},
            {"type": "external", "metadata": {"scalerAddress": "other:1", "target": "1"}},
            {"type": "external", "metadata": {"scalerAddress": "s.ns:1", "target": "5", "n": 3}},
        ]}});
        let t = trigger(&object, &rule).unwrap();
        assert_eq!(t.address, "s.ns:1");
        assert_eq!(t.metadata.get("target").map(String::as_str), Some("5"));
        assert!(!t.metadata.contains_key("n"), "non-strings are left out");
        assert_eq!(trigger(&json!({"spec": {}}), &rule), None);
        assert_eq!(hpa_name(&object, "pg"), "keda-hpa-pg");
        assert_eq!(hpa_name(&json!({"status": {"hpaName": "h"}}), "pg"), "h");
    }
}
