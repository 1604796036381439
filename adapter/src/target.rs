//! Which target an adapter names, checked before any API call (pure): the replicasPath, the
//! targetRef (same namespace only, a namespaced kind), the selector; and which adapter owns a
//! target that several name (the oldest; the others are refused).
use std::collections::BTreeMap;

use kube::core::{GroupVersion, GroupVersionKind};

use crate::crd::{ScaleAdapterSpec, TargetRef};
use crate::path::ReplicasPath;

/// Longest accepted `spec.selector`; the CRD schema says the same.
pub const SELECTOR_MAX: usize = 1024;

/// What a valid spec resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub gvk: GroupVersionKind,
    pub path: ReplicasPath,
    /// `spec.selector`, else the known pod labels of the kind: `status.selector`.
    pub selector: String,
}

/// Stands for the target's name in a label value of [`POD_LABELS`].
const NAME: &str = "<name>";

/// API group, kind, and the `(key, value)` labels of its pods.
type PodLabels = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The labels an operator puts on the pods of a kind the adapter knows, so an adapter of that
/// kind may leave `spec.selector` unset. Each operator labels its pods its own way, so this is
/// a table of what each one is known to set, not a discovery (which would need `pods list`).
const POD_LABELS: &[PodLabels] = &[
    // spotahome redis-operator v1.3.0-rc1, `generateSelectorLabels`
    // (operator/redisfailover/service/client.go): the Redis pods, not the sentinels.
    (
        "databases.spotahome.com",
        "RedisFailover",
        &[
            ("app.kubernetes.io/component", "redis"),
            ("app.kubernetes.io/part-of", "redis-failover"),
            ("app.kubernetes.io/name", NAME),
        ],
    ),
    // CloudNativePG: every PgBouncer pod of a Pooler carries `cnpg.io/poolerName`
    // (`utils.PgbouncerNameLabel`, the selector of CNPG's own Service and PodMonitor of the
    // Pooler); the Pooler's `/scale` has no labelSelectorPath, so the HPA refuses it directly.
    (
        "postgresql.cnpg.io",
        "Pooler",
        &[("cnpg.io/poolerName", NAME)],
    ),
];

/// What a target of a kind the adapter knows must say before its count is written: a
/// RedisFailover's `spec.engine`, when set, is one its operator runs (a Valkey failover is
/// driven like a Redis one: same `spec.redis.replicas`, same pod labels). Other kinds pass.
pub fn check_object(gvk: &GroupVersionKind, object: &serde_json::Value) -> Result<(), String> {
    use names::redis_failover::{ENGINE_FIELD, ENGINE_POINTER, check_engine};
    if (gvk.group.as_str(), gvk.kind.as_str()) != ("databases.spotahome.com", "RedisFailover") {
        return Ok(());
    }
    match object.pointer(ENGINE_POINTER) {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::String(engine)) => check_engine(engine),
        Some(other) => Err(format!(
            "{ENGINE_FIELD} is {}, not a string: Redis or Valkey",
            names::escape(&other.to_string(), names::ECHO_MAX)
        )),
    }
    .map_err(|e| format!("the RedisFailover's {e}; nothing is written until it is fixed"))
}

/// The selector of a known kind's pods for the target `name`; `None` for a kind not in
/// [`POD_LABELS`].
fn known_selector(group: &str, kind: &str, name: &str) -> Option<String> {
    let (_, _, labels) = POD_LABELS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)?;
    let pairs: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}={}", if *value == NAME { name } else { value }))
        .collect();
    Some(pairs.join(","))
}

/// The spec's target, or a message naming the field and the fix.
pub fn validate(spec: &ScaleAdapterSpec) -> Result<Target, String> {
    let path: ReplicasPath = spec.replicas_path.parse().map_err(|e| format!("{e}"))?;
    let TargetRef {
        api_version,
        kind,
        name,
    } = &spec.target_ref;
    if !names::is_dns_subdomain(name) {
        return Err(format!(
            "targetRef.name {} is not {} (a target in another namespace cannot be named)",
            names::echo(name),
            names::OBJECT_RULE
        ));
    }
    let gv: GroupVersion = api_version
        .parse()
        .ok()
        .filter(|gv: &GroupVersion| {
            (gv.group.is_empty() || names::is_dns_subdomain(&gv.group))
                && names::is_dns_label(&gv.version)
        })
        .ok_or_else(|| {
            format!(
                "targetRef.apiVersion {} is not group/version, e.g. databases.spotahome.com/v1",
                names::echo(api_version)
            )
        })?;
    let kind_ok = kind.len() <= 63
        && kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(format!(
            "targetRef.kind {} is not a kind, e.g. RedisFailover",
            names::echo(kind)
        ));
    }
    if gv.group.is_empty() || gv.group == "autoscaling.cozystack.io" {
        return Err(format!(
            "targetRef.apiVersion {} is refused: core kinds have their own scale subresource or none to drive, and an adapter never drives an adapter",
            names::echo(api_version)
        ));
    }
    let selector = match &spec.selector {
        Some(selector) if selector.trim().is_empty() || selector.len() > SELECTOR_MAX => {
            return Err(format!(
                "selector must be a label selector of the target's pods of at most {SELECTOR_MAX} characters, e.g. cnpg.io/poolerName=<name>; or leave it unset for a kind the adapter knows"
            ));
        }
        Some(selector) => selector.clone(),
        None => known_selector(&gv.group, kind, name).ok_or_else(|| {
            format!(
                "selector is unset and the adapter knows no pod labels of {} {}: set spec.selector to a label selector of the target's pods (known kinds: {})",
                names::echo(&gv.group),
                names::echo(kind),
                POD_LABELS
                    .iter()
                    .map(|(group, kind, _)| format!("{kind}.{group}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
    };
    Ok(Target {
        gvk: GroupVersionKind::gvk(&gv.group, &gv.version, kind),
        path,
        selector,
    })
}

/// An adapter, for deciding ownership: (namespace, name) and its creation time (RFC 3339 sorts
/// as time).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Claim {
    pub created: String,
    pub namespace: String,
    pub name: String,
}

/// Key of a target: two adapters naming the same object (any version) conflict.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TargetKey {
    pub namespace: String,
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// For each target named more than once, every claim but the oldest, mapped to the owner's name.
pub fn losers(claims: Vec<(TargetKey, Claim)>) -> BTreeMap<(String, String), String> {
    let mut by_target: BTreeMap<TargetKey, Vec<Claim>> = BTreeMap::new();
    for (key, claim) in claims {
        by_target.entry(key).or_default().push(claim);
    }
    let mut out = BTreeMap::new();
    for (_, mut claims) in by_target {
        claims.sort();
        let owner = claims[0].name.clone();
        for c in claims.into_iter().skip(1) {
            out.insert((c.namespace, c.name), owner.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(api_version: &str, kind: &str, name: &str) -> ScaleAdapterSpec {
        ScaleAdapterSpec {
            target_ref: TargetRef {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
            },
            replicas_path: "/spec/redis/replicas".into(),
            replicas: Some(2),
            paused: false,
            selector: Some("app=redis".into()),
        }
    }

    #[test]
    fn a_redis_failover_names_an_engine_its_operator_runs_or_none() {
        use serde_json::json;
        let rf = GroupVersionKind::gvk("databases.spotahome.com", "v1", "RedisFailover");
        for ok in [
            json!({"spec": {}}),
            json!({"spec": {"engine": "Redis"}}),
            json!({"spec": {"engine": "Valkey"}}),
        ] {
            assert_eq!(check_object(&rf, &ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (
                json!({"spec": {"engine": "valkey"}}),
                "spec.engine \"valkey\" is not",
            ),
            (
                json!({"spec": {"engine": 7}}),
                "spec.engine is 7, not a string",
            ),
        ] {
            let e = check_object(&rf, &bad).unwrap_err();
            assert!(e.contains(says) && e.contains("Redis or Valkey"), "{e}");
        }
        // Another kind's `spec.engine` is not the adapter's business.
        let other = GroupVersionKind::gvk("example.com", "v1", "Cache");
        assert_eq!(
            check_object(&other, &json!({"spec": {"engine": "x"}})),
            Ok(())
        );
    }

    #[test]
    fn a_redis_failover_resolves() {
        let t = validate(&spec(
            "databases.spotahome.com/v1",
            "RedisFailover",
            "cache",
        ))
        .unwrap();
        assert_eq!(
            t.gvk,
            GroupVersionKind::gvk("databases.spotahome.com", "v1", "RedisFailover")
        );
        assert_eq!(t.path.to_string(), "/spec/redis/replicas");
    }

    #[test]
    fn refusals_name_the_field() {
        for (s, field) in [
            (
                spec("databases.spotahome.com/v1", "RedisFailover", "other/cache"),
                "targetRef.name",
            ),
            (
                spec("databases.spotahome.com/v1", "RedisFailover", "../cache"),
                "targetRef.name",
            ),
            (
                spec("databases.spotahome.com/v1", "RedisFailover", ""),
                "targetRef.name",
            ),
            (
                spec("databases.spotahome.com", "RedisFailover", "c"),
                "targetRef.apiVersion",
            ),
            (spec("a/b/c", "RedisFailover", "c"), "targetRef.apiVersion"),
            (spec("v1", "Pod", "c"), "targetRef.apiVersion"),
            (
                spec("autoscaling.cozystack.io/v1alpha1", "ScaleAdapter", "c"),
                "targetRef.apiVersion",
            ),
            (
                spec("databases.spotahome.com/v1", "redisfailover", "c"),
                "targetRef.kind",
            ),
            (
                spec("databases.spotahome.com/v1", "Redis.Failover", "c"),
                "targetRef.kind",
            ),
        ] {
            let error = validate(&s).unwrap_err();
            assert!(error.starts_with(field), "{s:?}: {error}");
        }
        let mut s = spec("databases.spotahome.com/v1", "RedisFailover", "c");
        s.replicas_path = "/status/replicas".into();
        assert!(validate(&s).unwrap_err().contains("replicasPath"));
        s.replicas_path = "/spec/replicas".into();
        s.selector = Some(" ".into());
        assert!(validate(&s).unwrap_err().starts_with("selector"));
        s.selector = Some("a".repeat(SELECTOR_MAX + 1));
        assert!(validate(&s).unwrap_err().starts_with("selector"));
        // Unset is refused only for a kind whose pods' labels the adapter does not know.
        let mut s = spec("example.com/v1", "Memcached", "c");
        s.selector = None;
        let error = validate(&s).unwrap_err();
        assert!(
            error.starts_with("selector is unset")
                && error.contains("Memcached")
                && error.contains("Pooler.postgresql.cnpg.io"),
            "{error}"
        );
    }

    #[test]
    fn an_unset_selector_is_the_known_kinds_pod_labels_and_a_set_one_wins() {
        let mut pooler = spec("postgresql.cnpg.io/v1", "Pooler", "pg-rw");
        pooler.replicas_path = "/spec/instances".into();
        pooler.selector = None;
        let t = validate(&pooler).unwrap();
        assert_eq!(
            t.gvk,
            GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Pooler")
        );
        assert_eq!(t.path.to_string(), "/spec/instances");
        assert_eq!(t.selector, "cnpg.io/poolerName=pg-rw");
        let mut redis = spec("databases.spotahome.com/v1", "RedisFailover", "cache");
        redis.selector = None;
        assert_eq!(
            validate(&redis).unwrap().selector,
            "app.kubernetes.io/component=redis,app.kubernetes.io/part-of=redis-failover,app.kubernetes.io/name=cache"
        );
        // The kind is known by its group too: another group's Pooler is not CNPG's.
        let mut other = pooler.clone();
        other.target_ref.api_version = "example.com/v1".into();
        assert!(
            validate(&other)
                .unwrap_err()
                .starts_with("selector is unset")
        );
        pooler.selector = Some("app=mine".into());
        assert_eq!(validate(&pooler).unwrap().selector, "app=mine");
    }

    #[test]
    fn the_oldest_claim_owns_a_target() {
        let key = |ns: &str, name: &str| TargetKey {
            namespace: ns.into(),
            group: "databases.spotahome.com".into(),
            kind: "RedisFailover".into(),
            name: name.into(),
        };
        let claim = |created: &str, ns: &str, name: &str| Claim {
            created: created.into(),
            namespace: ns.into(),
            name: name.into(),
        };
        let losers = losers(vec![
            (key("a", "cache"), claim("2026-01-02T00:00:00Z", "a", "new")),
            (key("a", "cache"), claim("2026-01-01T00:00:00Z", "a", "old")),
            (
                key("a", "cache"),
                claim("2026-01-01T00:00:00Z", "a", "old2"),
            ),
            // The same target name in another namespace is another target.
            (
                key("b", "cache"),
                claim("2026-01-03T00:00:00Z", "b", "solo"),
            ),
        ]);
        assert_eq!(
            losers,
            BTreeMap::from([
                (("a".into(), "new".into()), "old".into()),
                (("a".into(), "old2".into()), "old".into()),
            ])
        );
    }
}
